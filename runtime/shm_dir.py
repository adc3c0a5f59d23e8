"""The per-job node-local directory (/dev/shm/hpcplace-<jobid>) that collocation state and the
weight store live in.

Why this module exists: /dev/shm is world-writable, so a name there can be pre-created or swapped
for a symlink by another user. Every directory is created mode 0700, opened with O_NOFOLLOW, and
checked to be a real directory owned by us; everything below is reached through directory file
descriptors (`dir_fd=`), never by re-resolving a path. Stdlib only.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat


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


def _check_private_dir(fd: int, what: str) -> None:
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode):
        raise ShmDirError(f"{what} is not a directory")
    if st.st_uid != os.getuid():
        raise ShmDirError(f"{what} is owned by uid {st.st_uid}, not by us (uid {os.getuid()})",
                          hint="another user created it first; use a different job id or remove it")
    if st.st_mode & 0o077:
        raise ShmDirError(f"{what} has mode {stat.S_IMODE(st.st_mode):04o}; it must be private (0700)",
                          hint=f"remove it or chmod 0700 {what}")


def open_private_dir(path: str, *, create: bool = True) -> int:
    """Open (creating mode 0700 if asked) a private directory without following symlinks;
    returns an O_DIRECTORY fd the caller owns."""
    if create:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise ShmDirError(f"{path} is a symlink or not a directory; refusing to use it",
                              hint="remove it; hpcplace creates it itself") from None
        raise ShmDirError(f"cannot open {path}: {exc.strerror}") from None
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
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise ShmDirError(f"{label or name} is a symlink or not a directory; refusing to use it") from None
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


def write_atomic(dir_fd: int, name: str, data: bytes) -> None:
    """Replace `name` with `data` so that a reader sees the old or the new content, never a mix."""
    tmp = f".{name}.tmp.{os.getpid()}"
    fd = open_file(dir_fd, tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def read_small(dir_fd: int, name: str, limit: int = 1 << 20) -> bytes | None:
    """The whole content of a small file, or None when it does not exist."""
    try:
        fd = open_file(dir_fd, name, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        chunks = []
        size = 0
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise ShmDirError(f"{name} is larger than {limit} bytes; not a hpcplace control file")
    finally:
        os.close(fd)


def remove_job_dir(path: str) -> bool:
    """Remove the per-job directory and everything in it (job end). Returns False if absent.
    Refuses a symlink or a directory that is not ours."""
    try:
        fd = open_private_dir(path, create=False)
    except ShmDirError as exc:
        if not os.path.lexists(path):
            return False
        raise exc
    os.close(fd)
    shutil.rmtree(path)  # fd-based on Linux: does not follow symlinks inside
    return True
