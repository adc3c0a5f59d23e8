"""The per-job node-local directory (/dev/shm/hpcplace-<jobid>/node-<node>/) that collocation state
and the weight store live in.

Why node-scoped: /dev/shm is node-local on a real cluster, but not always (several slurmd on one
host, containers binding the host's /dev/shm, the local backend running every planned node on one
host). Each node's state lives in its own `node-<node>` directory inside the job's directory, so two
nodes never meet in one baton or weight store, and each node's cleanup removes only its own state
(the job directory goes with the last node's).

Why this module exists: /dev/shm is world-writable, so a name there can be pre-created or swapped
for a symlink by another user. Every directory is created mode 0700, opened with O_NOFOLLOW, and
checked to be a real directory owned by us; everything below is reached through directory file
descriptors (`dir_fd=`), never by re-resolving a path. Stdlib only.
"""

from __future__ import annotations

import errno
import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping


class ShmDirError(Exception):
    """The per-job directory is unsafe or unusable (message + hint, no traceback needed)."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message if hint is None else f"{message}\n  HINT: {hint}")
        self.message = message
        self.hint = hint


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def job_dir_path(job_id: str, base: str = "/dev/shm") -> str:
    """/dev/shm/hpcplace-<jobid>: the same name the shim exports as HPCPLACE_SHM_DIR."""
    if not job_id or "/" in job_id or job_id in (".", ".."):
        raise ShmDirError(f"invalid job id {job_id!r} for a shared-memory directory name")
    return os.path.join(base, f"hpcplace-{job_id}")


def job_stopping(run_dir: str, job_id: str, environ: Mapping[str, str]) -> bool:
    """Whether the job script began stopping this attempt: its stop marker (hp_stop_steps writes it before
    signalling any step, and the guards remove the node-local directories after it). A task that starts
    later (its step was launched but its process had not run yet when the signal came) missed the signal:
    it must not make a node-local directory nobody would remove, nor start its program."""
    attempt = environ.get("SLURM_RESTART_COUNT") or "0"
    return os.path.exists(os.path.join(run_dir, f".stopping-{job_id}-{attempt}"))


def node_key(name: str) -> str:
    """A node name as a directory-name part: ASCII letters, digits, `-_.`; anything else -> `_`
    (the job script's guard applies the same rule to SLURMD_NODENAME)."""
    safe = "".join(ch if (ch.isascii() and ch.isalnum()) or ch in "-_." else "_" for ch in name)
    if not safe or safe in (".", ".."):
        raise ShmDirError(f"invalid node name {name!r} for a shared-memory directory name")
    return safe


def node_dir_path(job_dir: str, node: str) -> str:
    """<job dir>/node-<node>: one node's state (baton, weight stores) inside the job's directory."""
    return os.path.join(job_dir, f"node-{node_key(node)}")


def node_dir_from_env(environ: Mapping[str, str]) -> str | None:
    """This node's directory: HPCPLACE_SHM_DIR (set by the shim), else derived from HPCPLACE_JOB_ID
    and SLURMD_NODENAME (or the host name); None when neither variable is set."""
    if environ.get("HPCPLACE_SHM_DIR"):
        return environ["HPCPLACE_SHM_DIR"]
    if environ.get("HPCPLACE_JOB_ID"):
        return node_dir_path(
            job_dir_path(environ["HPCPLACE_JOB_ID"]), environ.get("SLURMD_NODENAME") or os.uname().nodename
        )
    return None


def _user(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


_SQUAT_HINT = (
    "another user created it first (job ids are predictable and /dev/shm outlives jobs); "
    "hpcplace never uses a directory it does not own: remove it (as its owner or root) and resubmit"
)


def _check_private_dir(fd: int, what: str) -> None:
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode):
        raise ShmDirError(f"{what} is not a directory (owner {_user(st.st_uid)})", hint=_SQUAT_HINT)
    if st.st_uid != os.geteuid():
        raise ShmDirError(
            f"{what} is owned by {_user(st.st_uid)}, not by this job's user {_user(os.geteuid())}", hint=_SQUAT_HINT
        )
    if st.st_mode & 0o077:
        raise ShmDirError(
            f"{what} (owner {_user(st.st_uid)}) has mode {stat.S_IMODE(st.st_mode):04o}; it must be private (0700)",
            hint=f"remove it or chmod 0700 {what}",
        )


def _refusal(path: str, exc: OSError, parent_fd: int | None = None, name: str | None = None) -> ShmDirError:
    """The error for a directory we could not open: names the path, what it is and its owner."""
    try:
        st = os.stat(path if parent_fd is None else (name or path), dir_fd=parent_fd, follow_symlinks=False)
    except OSError:
        return ShmDirError(f"cannot open {path}: {exc.strerror}")
    if stat.S_ISLNK(st.st_mode):
        return ShmDirError(f"{path} is a symlink (owner {_user(st.st_uid)}); refusing to use it", hint=_SQUAT_HINT)
    if not stat.S_ISDIR(st.st_mode):
        return ShmDirError(
            f"{path} is not a directory (owner {_user(st.st_uid)}); refusing to use it", hint=_SQUAT_HINT
        )
    if st.st_uid != os.geteuid():
        return ShmDirError(
            f"{path} is owned by {_user(st.st_uid)}, not by this job's user {_user(os.geteuid())}: {exc.strerror}",
            hint=_SQUAT_HINT,
        )
    return ShmDirError(f"cannot open {path} (owner {_user(st.st_uid)}): {exc.strerror}")


# How often making a directory is tried again when it vanished between two steps: the tasks of a node that
# start as the job stops each make the node's directory and remove it again, side by side (shim.py).
_VANISHED_RETRIES = 100


def open_private_dir(path: str, *, create: bool = True) -> int:
    """Open (creating mode 0700 if asked) a private directory without following symlinks;
    returns an O_DIRECTORY fd the caller owns. Not asked to create it, FileNotFoundError when absent."""
    for _ in range(_VANISHED_RETRIES if create else 1):
        if create:
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                pass
        try:
            fd = os.open(path, _DIR_FLAGS)
            break
        except FileNotFoundError as exc:
            if not create:
                raise
            missing = exc  # removed between the mkdir and the open: make it again
        except OSError as exc:
            raise _refusal(path, exc) from None
    else:
        raise _refusal(path, missing)
    try:
        _check_private_dir(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_private_subdir(parent_fd: int, name: str, *, create: bool = True, label: str = "") -> int:
    """Like open_private_dir, relative to an already-checked parent directory fd."""
    if not name or "/" in name or name in (".", ".."):
        raise ShmDirError(f"invalid directory name {name!r}")
    if create:
        try:
            os.mkdir(name, 0o700, dir_fd=parent_fd)
        except FileExistsError:
            pass
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EACCES, errno.EPERM):
            raise _refusal(label or name, exc, parent_fd, name) from None
        raise
    try:
        _check_private_dir(fd, label or name)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(dir_fd: int, name: str, flags: int, mode: int = 0o600) -> int:
    """os.open relative to dir_fd that never follows a symlink and is close-on-exec."""
    return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)


def make_node_dir(node_dir: str) -> None:
    """Create (or check) <job dir>/node-<node>: both levels mode 0700, ours, not symlinks.
    Raises ShmDirError naming the path and its owner when either is not the job's own. A job
    directory that a peer task removes meanwhile (the job is stopping) is made again."""
    for _ in range(_VANISHED_RETRIES):
        parent_fd = open_private_dir(os.path.dirname(node_dir))
        try:
            os.close(open_private_subdir(parent_fd, os.path.basename(node_dir), label=node_dir))
            return
        except FileNotFoundError:
            continue  # the job directory went after we opened it
        finally:
            os.close(parent_fd)
    raise ShmDirError(f"cannot make {node_dir}: its job directory was removed {_VANISHED_RETRIES} times meanwhile")


def remove_job_dir(path: str) -> bool:
    """Remove a node directory (or a whole job directory) and everything in it. Returns False if
    absent. Refuses a symlink or a directory that is not ours. After a node directory, the job
    directory around it goes too once no other node's directory is left in it. Peer tasks of the
    node may remove (and make) the same directory meanwhile: the job is stopping as they start."""
    for attempt in range(_VANISHED_RETRIES):
        try:
            fd = open_private_dir(path, create=False)
        except FileNotFoundError:
            _remove_empty_parent(path)
            return attempt > 0
        try:
            _empty_dir(fd)
            os.rmdir(path)  # a symlink put in its place meanwhile: ENOTDIR, never followed
            break
        except FileNotFoundError:
            continue  # a peer removed it (or a directory inside) first
        except OSError as exc:
            if exc.errno != errno.ENOTEMPTY or attempt == _VANISHED_RETRIES - 1:
                raise
            # a peer made it again, or made an entry in it, after our walk: walk again
        finally:
            os.close(fd)
    _remove_empty_parent(path)
    return True


def _empty_dir(dir_fd: int) -> None:
    """Remove everything inside an open directory, never following a symlink (shutil.rmtree takes no
    directory fd before Python 3.11, and calls a directory that was replaced meanwhile a symlink)."""
    for entry in os.scandir(dir_fd):
        try:
            os.unlink(entry.name, dir_fd=dir_fd)
            continue
        except FileNotFoundError:
            continue
        except IsADirectoryError:
            pass
        try:
            sub_fd = os.open(entry.name, _DIR_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            continue
        try:
            _empty_dir(sub_fd)
        finally:
            os.close(sub_fd)
        os.rmdir(entry.name, dir_fd=dir_fd)


def _remove_empty_parent(path: str) -> None:
    parent = os.path.dirname(path)
    if os.path.basename(path).startswith("node-") and os.path.basename(parent).startswith("hpcplace-"):
        try:
            os.rmdir(parent)  # only when empty: another node's state (shared /dev/shm) keeps it
        except OSError:
            pass


# ---------------------------------------------------------------------- preallocated record files
# A small control file (the weight store's `control`, the baton's `state`) rewritten in place, so a
# full /dev/shm cannot fail a publish or a turn hand-off: the file's pages are reserved once, when
# it is created, and every update is one pwrite into them. Two records alternate; a reader takes the
# valid one (magic, length, CRC) with the higher sequence number, so a torn or half-written record
# is never seen - the other record still holds the previous content. Writers are serialized by the
# caller (a lock), readers need none.
_RECORD_MAGIC = b"HPR1"
_RECORD_HEAD = 20  # magic, seq (8), length (4), crc32 (4)


def _crc(data: bytes, start: int = 0) -> int:
    import zlib  # not on the shim's hot path (the shim only creates directories)

    return zlib.crc32(data, start)


class RecordFile:
    """A preallocated two-record file (see above); `capacity` bytes per record payload."""

    def __init__(self, dir_fd: int, name: str, capacity: int, *, what: str) -> None:
        self.name = name
        self.capacity = capacity
        self.record = _RECORD_HEAD + capacity
        self.what = what
        self.fd = open_file(dir_fd, name, os.O_RDWR | os.O_CREAT)
        try:
            if os.fstat(self.fd).st_size < 2 * self.record:
                try:
                    os.posix_fallocate(self.fd, 0, 2 * self.record)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    if os.fstat(self.fd).st_size == 0:
                        os.unlink(name, dir_fd=dir_fd)  # created just now: leave nothing behind
                    raise ShmDirError(
                        f"no space left on /dev/shm to create {what} ({2 * self.record} bytes)",
                        hint="/dev/shm is full (another job or tenant?); free it or give the node more shared memory",
                    ) from None
        except BaseException:
            os.close(self.fd)
            raise
        self._seq = max((seq for seq, _ in self._records()), default=0)

    def _records(self) -> list[tuple[int, bytes]]:
        out = []
        for k in (0, 1):  # read what the record holds, not the whole reserved capacity
            rec = os.pread(self.fd, min(self.record, 1024), k * self.record)
            if len(rec) < _RECORD_HEAD or rec[:4] != _RECORD_MAGIC:
                continue
            seq = int.from_bytes(rec[4:12], "little")
            length = int.from_bytes(rec[12:16], "little")
            crc = int.from_bytes(rec[16:20], "little")
            if _RECORD_HEAD + length > len(rec) and length <= self.capacity:
                rec = os.pread(self.fd, _RECORD_HEAD + length, k * self.record)
            payload = rec[_RECORD_HEAD : _RECORD_HEAD + length]
            if length <= self.capacity and len(payload) == length and _crc(payload, _crc(rec[4:16])) == crc:
                out.append((seq, payload))
        return out

    def _head_seqs(self) -> list[int]:
        out = []
        for k in (0, 1):
            head = os.pread(self.fd, 12, k * self.record)
            if len(head) == 12 and head[:4] == _RECORD_MAGIC:
                out.append(int.from_bytes(head[4:12], "little"))
        return out

    def read(self) -> bytes | None:
        """The newest complete record, or None before the first write. Monotonic: never older than
        a record an earlier read() returned (a newer header seen after reading means a write went on
        meanwhile: read again), so a waiter never acts on a state that was already superseded."""
        best: tuple[int, bytes] | None = None
        for _ in range(10000):
            records = self._records()
            best = max(records) if records else None
            heads = self._head_seqs()
            if best is None and not heads:
                return None
            if best is not None and all(h <= best[0] for h in heads):
                return best[1]
        return None if best is None else best[1]  # a corrupt newest record: the newest complete one

    def write(self, payload: bytes) -> None:
        """Write the next record in place (caller holds the writers' lock). No new space needed."""
        if len(payload) > self.capacity:
            raise ShmDirError(f"{self.what}: {len(payload)} bytes do not fit its {self.capacity}-byte record")
        self._seq = max([self._seq] + [seq for seq, _ in self._records()]) + 1
        head = self._seq.to_bytes(8, "little") + len(payload).to_bytes(4, "little")
        crc = _crc(payload, _crc(head))
        record = _RECORD_MAGIC + head + crc.to_bytes(4, "little") + payload
        offset = (self._seq % 2) * self.record
        view = memoryview(record)
        while view:  # pwrite into reserved tmpfs pages: never ENOSPC
            n = os.pwrite(self.fd, view, offset)
            view = view[n:]
            offset += n

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def read_record(dir_fd: int, name: str, capacity: int) -> bytes | None:
    """RecordFile.read() without keeping the file open (None when the file does not exist yet)."""
    try:
        fd = open_file(dir_fd, name, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        rf = RecordFile.__new__(RecordFile)
        rf.fd, rf.capacity, rf.record = fd, capacity, _RECORD_HEAD + capacity
        return rf.read()
    finally:
        os.close(fd)
