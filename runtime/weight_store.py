"""Versioned weights from trainer ranks to inference ranks through node-local /dev/shm.

A store is a directory <HPCPLACE_SHM_DIR>/weights-<name>/ (default name: "<component>-<rank>" of
its single publisher) holding

- `slot0.safetensors`, `slot1.safetensors`: two preallocated slots, each a VALID safetensors file
  (8-byte little-endian header length, a JSON header padded with spaces so the data starts at a
  64-byte boundary, then the tensors back to back). The layout (names, dtypes, shapes, offsets) is
  fixed when the store is created; tensors are sorted by decreasing element size so every tensor
  is naturally aligned. Space for both slots is reserved with posix_fallocate up front: too small
  a /dev/shm gives a clear error naming the size, never a SIGBUS or a short write later.
- `control`: a small JSON {version, slot, checksum, ...} in a preallocated two-record file
  (shm_dir.RecordFile), reserved when the publisher opens the store and rewritten in place: a full
  /dev/shm cannot fail a publish, and a reader never sees a torn record. It only ever names a slot
  whose data is complete.
- `writer.lock`: held (flock) by the one live publisher.

Publishing version v+1 writes the slot that `control` does NOT name, under an exclusive flock on
that slot file, stamps version and checksum into the slot's header metadata, then flips `control`.
Consuming takes a shared flock on the named slot, re-reads `control` (retrying if it moved),
optionally verifies the checksum, and hands out zero-copy torch views of the mapped slot until the
snapshot is released. So a reader never sees a half-written version: the writer cannot write a
slot a reader holds, and `control` never names a slot being written. A writer killed mid-publish
leaves `control` on the last complete version (its lock dies with it); the next publish rewrites
that slot. Slots are created under temporary names (`.slot<i>.safetensors.tmp`) and renamed into
place fully reserved; temporary slots a killed first publish left behind are removed by the next
publisher that opens the store (and by the job's /dev/shm cleanup).

On a multi-node job each node has its own HPCPLACE_SHM_DIR (/dev/shm/hpcplace-<jobid>/node-<node>/),
so a store only ever connects ranks of one node: each node's trainer ranks publish for the
inference ranks the plan's `weight_sync` map puts on that node.

Slots are mapped once (MAP_POPULATE) and overwritten in place, so steady-state publish and consume
run at memcpy speed. In a process that has initialized CUDA the mappings are also page-locked
(runtime/cuda_host.py), so GPU tensors are written and read at the pinned copy's bandwidth. The checksum is zlib.crc32: "sampled" (default: 1024 blocks of 4 KiB spread
over the data, ~1 ms for any size) guards against a wrong slot or a torn write at no bandwidth
cost; "full" hashes every byte (~4 GB/s here, far below memcpy); "none" skips it.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import mmap
import os
import re
import struct
import time
import warnings
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hpcplace.runtime import cuda_host, shm_dir

CHECKSUMS = ("sampled", "full", "none")
_DATA_ALIGN = 64
_SAMPLE_BLOCKS = 1024
_SAMPLE_SIZE = 4096
_FULL_CHUNK = 64 << 20
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.@+-]{1,100}$")
_SLOTS = ("slot0.safetensors", "slot1.safetensors")

# safetensors dtype name -> (torch attribute name, element size)
_DTYPES = {
    "F64": ("float64", 8),
    "F32": ("float32", 4),
    "F16": ("float16", 2),
    "BF16": ("bfloat16", 2),
    "I64": ("int64", 8),
    "I32": ("int32", 4),
    "I16": ("int16", 2),
    "I8": ("int8", 1),
    "U64": ("uint64", 8),
    "U32": ("uint32", 4),
    "U16": ("uint16", 2),
    "U8": ("uint8", 1),
    "BOOL": ("bool", 1),
    "F8_E4M3": ("float8_e4m3fn", 1),
    "F8_E5M2": ("float8_e5m2", 1),
}


class WeightStoreError(Exception):
    """The weight store cannot do what was asked (message + hint)."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message if hint is None else f"{message}\n  HINT: {hint}")
        self.message = message
        self.hint = hint


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, _DTYPES[name][0])


def _dtype_name(dtype: Any) -> str:
    text = str(dtype).removeprefix("torch.")
    for name, (attr, _) in _DTYPES.items():
        if attr == text:
            return name
    raise WeightStoreError(f"dtype {dtype} cannot be stored in safetensors")


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return str(n)


# --------------------------------------------------------------------------- layout
@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str  # safetensors name, e.g. "BF16"
    shape: tuple[int, ...]
    start: int  # data offsets, relative to the start of the data region
    end: int


@dataclass(frozen=True)
class Layout:
    """The fixed shape of a store's slots."""

    store: str
    tensors: tuple[TensorSpec, ...]
    header_len: int
    data_len: int
    layout_id: str

    @property
    def data_start(self) -> int:
        return 8 + self.header_len

    @property
    def file_size(self) -> int:
        return 8 + self.header_len + self.data_len

    def header(self, version: int, checksum: int, checksum_kind: str) -> bytes:
        """The slot's 8-byte prefix + padded header JSON; always exactly data_start bytes."""
        meta = {
            "format": "pt",
            "hpcplace.store": self.store,
            "hpcplace.layout": self.layout_id,
            "hpcplace.version": f"{version:020d}",
            "hpcplace.checksum": f"{checksum:08x}",
            "hpcplace.checksum_kind": f"{checksum_kind:<7}",
        }
        body: dict[str, Any] = {"__metadata__": meta}
        for t in self.tensors:
            body[t.name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [t.start, t.end]}
        text = json.dumps(body, separators=(",", ":")).encode()
        if self.header_len and len(text) > self.header_len:
            raise WeightStoreError("internal: slot header grew")
        return struct.pack("<Q", self.header_len) + text.ljust(self.header_len, b" ")


def layout_for(store: str, state_dict: Mapping[str, Any]) -> Layout:
    """The slot layout for tensors like these (shapes and dtypes only; values unused)."""
    if not state_dict:
        raise WeightStoreError(f"weight store {store!r}: the state dict is empty")
    entries = []
    for i, (name, tensor) in enumerate(state_dict.items()):
        if not isinstance(name, str) or not name or name == "__metadata__":
            raise WeightStoreError(f"weight store {store!r}: invalid tensor name {name!r}")
        dtype = _dtype_name(tensor.dtype)
        entries.append((-_DTYPES[dtype][1], i, name, dtype, tuple(int(d) for d in tensor.shape)))
    entries.sort()
    offset = 0
    specs = []
    for neg_size, _, name, dtype, shape in entries:
        count = 1
        for d in shape:
            count *= d
        specs.append(TensorSpec(name, dtype, shape, offset, offset + count * -neg_size))
        offset += count * -neg_size
    digest = hashlib.sha256(json.dumps([[s.name, s.dtype, list(s.shape)] for s in specs]).encode()).hexdigest()
    draft = Layout(store, tuple(specs), 0, offset, digest[:16])
    text_len = len(draft.header(0, 0, "sampled")) - 8
    header_len = (text_len + 8 + _DATA_ALIGN - 1) // _DATA_ALIGN * _DATA_ALIGN - 8
    return Layout(store, tuple(specs), header_len, offset, digest[:16])


def _layout_from_header(store: str, raw: bytes) -> Layout:
    (header_len,) = struct.unpack("<Q", raw[:8])
    body = json.loads(raw[8 : 8 + header_len])
    meta = body.pop("__metadata__", {})
    specs = tuple(
        sorted(
            (TensorSpec(n, v["dtype"], tuple(v["shape"]), *v["data_offsets"]) for n, v in body.items()),
            key=lambda s: (s.start, s.end),
        )
    )
    return Layout(store, specs, header_len, specs[-1].end if specs else 0, meta.get("hpcplace.layout", ""))


# --------------------------------------------------------------------------- checksum
def checksum(data: memoryview, kind: str, version: int) -> int:
    """crc32 of the data region (all of it, or 1024 evenly spread 4 KiB blocks), seeded by version."""
    crc = zlib.crc32(struct.pack("<QQ", version, len(data)))
    if kind == "none":
        return 0
    if kind == "full" or len(data) <= _SAMPLE_BLOCKS * _SAMPLE_SIZE:
        for start in range(0, len(data), _FULL_CHUNK):
            crc = zlib.crc32(data[start : start + _FULL_CHUNK], crc)
        return crc
    stride = (len(data) - _SAMPLE_SIZE) // (_SAMPLE_BLOCKS - 1)
    for i in range(_SAMPLE_BLOCKS):
        start = i * stride
        crc = zlib.crc32(data[start : start + _SAMPLE_SIZE], crc)
    return crc


# --------------------------------------------------------------------------- shared plumbing
def _store_dir(job_dir: str, name: str) -> tuple[int, int]:
    if not _SAFE_NAME.match(name):
        raise WeightStoreError(f"invalid weight store name {name!r}", hint="letters, digits, and _.@+- only")
    job_fd = shm_dir.open_private_dir(job_dir)
    try:
        return job_fd, shm_dir.open_private_subdir(job_fd, f"weights-{name}", label=f"{job_dir}/weights-{name}")
    except BaseException:
        os.close(job_fd)
        raise


_CONTROL_CAPACITY = 2048  # bytes of JSON per control record (it needs ~250)
_STALE_TEMPS = re.compile(r"^\.(slot[01]\.safetensors\.tmp|control\.tmp\.[0-9]+)$")


def _read_control(dir_fd: int) -> dict[str, Any] | None:
    data = shm_dir.read_record(dir_fd, "control", _CONTROL_CAPACITY)
    return None if data is None else json.loads(data)


class _Mapped:
    """One slot file, mapped once, with per-tensor torch views."""

    def __init__(self, dir_fd: int, index: int, layout: Layout | None, *, writable: bool, store: str) -> None:
        self.index = index
        flags = os.O_RDWR if writable else os.O_RDONLY
        self.fd = shm_dir.open_file(dir_fd, _SLOTS[index], flags)
        try:
            size = os.fstat(self.fd).st_size
            if layout is None:
                layout = _layout_from_header(store, os.pread(self.fd, min(size, 100 << 20), 0))
            if size != layout.file_size:
                raise WeightStoreError(
                    f"weight store {store!r}: {_SLOTS[index]} has {size} bytes, its layout needs {layout.file_size}"
                )
            prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
            self.map = mmap.mmap(self.fd, size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE, prot=prot)
        except BaseException:
            os.close(self.fd)
            raise
        self.layout = layout
        self.writable = writable
        self.view = memoryview(self.map)
        self.data = self.view[layout.data_start : layout.file_size]
        self._tensors: dict[str, Any] | None = None
        self.pinned = 0  # the mapping's address once registered with CUDA (runtime/cuda_host.py)
        if cuda_host.unavailable_reason() is None:
            self.pin()

    def pin(self) -> str | None:
        """Page-lock the mapping for CUDA copies at full bandwidth; None when done, else why not."""
        if self.pinned:
            return None
        import torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # a read-only mapping: only its address is taken
            address = torch.frombuffer(self.map, dtype=torch.uint8, count=1).data_ptr()
        why = cuda_host.register(address, len(self.map), read_only=not self.writable)
        if why is None:
            self.pinned = address
        return why

    def tensors(self) -> dict[str, Any]:
        if self._tensors is None:
            import torch

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # read-only mapping: views are read-only by contract
                flat = (
                    torch.frombuffer(
                        self.map, dtype=torch.uint8, count=self.layout.data_len, offset=self.layout.data_start
                    )
                    if self.layout.data_len
                    else torch.empty(0, dtype=torch.uint8)
                )
            self._tensors = {
                s.name: flat[s.start : s.end].view(_torch_dtype(s.dtype)).view(s.shape) for s in self.layout.tensors
            }
        return self._tensors

    def close(self) -> None:
        self._tensors = None
        if self.pinned:
            cuda_host.unregister(self.pinned)
            self.pinned = 0
        self.data.release()
        self.view.release()
        try:
            self.map.close()
        except BufferError:
            pass  # a caller still holds a view; the mapping goes with it
        os.close(self.fd)


def _lock(fd: int, kind: int, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    delay = 0.0005
    while True:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise WeightStoreError(
                    f"{what} stayed locked for {timeout} s",
                    hint="a reader holds an old snapshot: copy what it needs and release it",
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.01)


# --------------------------------------------------------------------------- publisher
class WeightPublisher:
    """The one writer of a store (trainer side). Create once, publish every step."""

    def __init__(self, job_dir: str, name: str, *, checksum: str = "sampled", lock_timeout: float = 60.0) -> None:
        if checksum not in CHECKSUMS:
            raise WeightStoreError(f"unknown checksum kind {checksum!r}", hint=f"one of {CHECKSUMS}")
        self.name = name
        self.checksum_kind = checksum
        self.lock_timeout = lock_timeout
        self._job_fd, self._fd = _store_dir(job_dir, name)
        self.path = os.path.join(job_dir, f"weights-{name}")
        self._writer_fd = shm_dir.open_file(self._fd, "writer.lock", os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(self._writer_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._close_fds()
            raise WeightStoreError(f"weight store {name!r} already has a live publisher") from None
        self._control: shm_dir.RecordFile | None = None
        try:
            self._remove_stale_temps()
            self._control = shm_dir.RecordFile(
                self._fd, "control", _CONTROL_CAPACITY, what=f"weight store {name!r} control file"
            )
        except shm_dir.ShmDirError as exc:
            self._close_fds()
            raise WeightStoreError(exc.message, hint=exc.hint) from None
        except BaseException:
            self._close_fds()
            raise
        self._slots: list[_Mapped] = []
        self._writing = False
        self.layout: Layout | None = None

    def _remove_stale_temps(self) -> None:
        """Temporary slots of a publisher killed during its first publish (we hold writer.lock: it is dead)."""
        for entry in os.listdir(self._fd):
            if _STALE_TEMPS.match(entry):
                try:
                    os.unlink(entry, dir_fd=self._fd)
                except FileNotFoundError:
                    pass

    @classmethod
    def from_env(
        cls, name: str | None = None, environ: Mapping[str, str] | None = None, **kwargs: Any
    ) -> WeightPublisher:
        """The store of this process (name "<component>-<rank>") in HPCPLACE_SHM_DIR."""
        env = os.environ if environ is None else environ
        return cls(job_dir_from_env(env), name or f"{env['HPCPLACE_COMPONENT']}-{env['HPCPLACE_RANK']}", **kwargs)

    def _ensure_slots(self, layout: Layout) -> None:
        if self.layout is not None:
            if layout.layout_id != self.layout.layout_id:
                raise WeightStoreError(
                    f"weight store {self.name!r} was created for another set of tensors",
                    hint="a store's names, dtypes and shapes are fixed; use a new store name",
                )
            return
        existing = _read_control(self._fd)
        if existing is not None and existing["layout"] != layout.layout_id:
            raise WeightStoreError(
                f"weight store {self.name!r} already holds tensors of another layout",
                hint="use a new store name, or remove() the old store first",
            )
        if existing is None:
            self._create_slots(layout)
        self._slots = [_Mapped(self._fd, i, layout, writable=True, store=self.name) for i in range(2)]
        self.layout = layout

    def _create_slots(self, layout: Layout) -> None:
        """Both slots, fully reserved, or nothing: ENOSPC -> WeightStoreError with the size needed."""
        tmp_names = [f".{n}.tmp" for n in _SLOTS]
        fds: list[int] = []
        try:
            for tmp in tmp_names:
                fd = shm_dir.open_file(self._fd, tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
                fds.append(fd)
                try:
                    os.posix_fallocate(fd, 0, layout.file_size)
                except OSError as exc:
                    if exc.errno not in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
                        raise
                    vfs = os.statvfs(self._fd)
                    raise WeightStoreError(
                        f"not enough space in {os.path.dirname(self.path)} for weight store {self.name!r}: "
                        f"it needs {_human(2 * layout.file_size)} ({2 * layout.file_size} bytes: two slots of "
                        f"{layout.file_size}), {_human(vfs.f_bavail * vfs.f_frsize)} is free",
                        hint="give /dev/shm more room (tmpfs size, job --mem), or free it",
                    ) from None
                os.pwrite(fd, layout.header(0, 0, self.checksum_kind), 0)
            for tmp, final in zip(tmp_names, _SLOTS):
                os.replace(tmp, final, src_dir_fd=self._fd, dst_dir_fd=self._fd)
        except BaseException:
            for tmp in tmp_names:
                try:
                    os.unlink(tmp, dir_fd=self._fd)
                except FileNotFoundError:
                    pass
            raise
        finally:
            for fd in fds:
                os.close(fd)

    def begin(self, like: Mapping[str, Any] | Layout) -> SlotWriter:
        """Start writing the next version tensor by tensor (streaming: no full state dict needed).
        `like` gives the layout (a state dict or a Layout). Use as a context manager: commit on
        success, abandon on error (readers stay on the previous version)."""
        if self._writing:
            raise WeightStoreError(
                f"weight store {self.name!r}: a version is already being written", hint="commit or abandon it first"
            )
        layout = like if isinstance(like, Layout) else layout_for(self.name, like)
        self._ensure_slots(layout)
        control = _read_control(self._fd)
        version = 1 if control is None else int(control["version"]) + 1
        slot = 0 if control is None else 1 - int(control["slot"])
        target = self._slots[slot]
        _lock(target.fd, fcntl.LOCK_EX, self.lock_timeout, f"slot {slot} of weight store {self.name!r}")
        self._writing = True
        return SlotWriter(self, target, version)

    def publish(self, state_dict: Mapping[str, Any]) -> int:
        """Write every tensor as the next version and flip to it; returns the version."""
        with self.begin(state_dict) as writer:
            for name, tensor in state_dict.items():
                writer.write(name, tensor)
        return writer.version

    def _commit(self, slot: _Mapped, version: int) -> None:
        assert self.layout is not None
        crc = checksum(slot.data, self.checksum_kind, version)
        slot.view[: self.layout.data_start] = self.layout.header(version, crc, self.checksum_kind)
        control = {
            "store": self.name,
            "layout": self.layout.layout_id,
            "version": version,
            "slot": slot.index,
            "checksum": crc,
            "checksum_kind": self.checksum_kind,
            "file_size": self.layout.file_size,
            "time_ns": time.time_ns(),
        }
        assert self._control is not None
        self._control.write(json.dumps(control).encode())

    def remove(self) -> None:
        """Delete the store's files and directory (readers' existing mappings stay valid)."""
        for slot in self._slots:
            slot.close()
        self._slots = []
        for entry in os.listdir(self._fd):
            try:
                os.unlink(entry, dir_fd=self._fd)
            except FileNotFoundError:
                pass
        try:
            os.rmdir(f"weights-{self.name}", dir_fd=self._job_fd)
        except OSError:
            pass
        self.close()

    def _close_fds(self) -> None:
        control = getattr(self, "_control", None)
        if control is not None:
            control.close()
            self._control = None
        for fd in (getattr(self, "_writer_fd", -1), self._fd, self._job_fd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass

    def close(self) -> None:
        for slot in self._slots:
            slot.close()
        self._slots = []
        if self._fd >= 0:
            self._close_fds()
            self._fd = self._job_fd = self._writer_fd = -1

    def __enter__(self) -> WeightPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SlotWriter:
    """One version being written; `write` each tensor, then commit (the context manager does)."""

    def __init__(self, publisher: WeightPublisher, slot: _Mapped, version: int) -> None:
        self._publisher = publisher
        self._slot = slot
        self.version = version
        self._specs = {s.name: s for s in slot.layout.tensors}
        self._views = slot.tensors()
        self._written: set[str] = set()
        self._open = True

    def write(self, name: str, tensor: Any) -> None:
        spec = self._specs.get(name)
        if spec is None:
            raise WeightStoreError(f"weight store {self._publisher.name!r} has no tensor {name!r}")
        if _dtype_name(tensor.dtype) != spec.dtype or tuple(tensor.shape) != spec.shape:
            raise WeightStoreError(
                f"{name}: got {_dtype_name(tensor.dtype)}{list(tensor.shape)}, "
                f"the store holds {spec.dtype}{list(spec.shape)}"
            )
        self._views[name].copy_(tensor)
        self._written.add(name)

    def commit(self) -> int:
        missing = set(self._specs) - self._written
        if missing:
            self.abandon()
            raise WeightStoreError(
                f"version {self.version} of weight store {self._publisher.name!r} is missing "
                f"{sorted(missing)[:5]}{' ...' if len(missing) > 5 else ''}"
            )
        try:
            self._publisher._commit(self._slot, self.version)
        finally:
            self._release()
        return self.version

    def abandon(self) -> None:
        """Give up this version; readers keep the previous one."""
        self._release()

    def _release(self) -> None:
        if self._open:
            self._open = False
            self._publisher._writing = False
            fcntl.flock(self._slot.fd, fcntl.LOCK_UN)

    def __enter__(self) -> SlotWriter:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abandon()


# --------------------------------------------------------------------------- reader
class Snapshot:
    """One consumed version: zero-copy, READ-ONLY torch views into the slot, valid until release()
    (the publisher cannot overwrite the slot meanwhile). Writing into a view crashes the process."""

    def __init__(self, store: str, version: int, tensors: Mapping[str, Any], release: Any) -> None:
        self.store = store
        self.version = version
        self.tensors = tensors
        self._release = release
        self._held = True

    def copy_into(self, destination: Mapping[str, Any], *, non_blocking: bool = False) -> None:
        """Copy every tensor into the same-named destination tensor (e.g. a model's parameters)."""
        for name, src in self.tensors.items():
            destination[name].copy_(src, non_blocking=non_blocking)

    def release(self) -> None:
        if self._held:
            self._held = False
            self.tensors = {}
            self._release()

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class WeightReader:
    """A consumer of one store (inference side). Mappings are made once and reused."""

    def __init__(self, job_dir: str, name: str) -> None:
        self.name = name
        self._job_fd, self._fd = _store_dir(job_dir, name)
        self._slots: dict[int, _Mapped] = {}
        self._holds: dict[int, int] = {}  # snapshots alive per slot: one shared flock per fd

    @classmethod
    def from_env(cls, name: str, environ: Mapping[str, str] | None = None) -> WeightReader:
        return cls(job_dir_from_env(os.environ if environ is None else environ), name)

    def latest_version(self) -> int:
        """The newest complete version (0 when nothing was published yet)."""
        control = _read_control(self._fd)
        return 0 if control is None else int(control["version"])

    def _slot(self, index: int, layout_id: str) -> _Mapped:
        slot = self._slots.get(index)
        if slot is not None and slot.layout.layout_id != layout_id:
            slot.close()
            slot = None
        if slot is None:
            slot = _Mapped(self._fd, index, None, writable=False, store=self.name)
            self._slots[index] = slot
        return slot

    def consume(self, *, min_version: int = 1, timeout: float | None = None, verify: bool = True) -> Snapshot:
        """The newest version >= min_version (waiting for it up to `timeout` s, None = forever).
        `verify` checks the checksum the publisher recorded."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.0005
        while True:
            control = _read_control(self._fd)
            if control is not None and int(control["version"]) >= min_version:
                index = int(control["slot"])
                slot = self._slot(index, control["layout"]) if not self._holds.get(index) else self._slots[index]
                self._hold(index)
                again = _read_control(self._fd)
                if again is not None and again["slot"] == control["slot"] and again["layout"] == control["layout"]:
                    return self._snapshot(slot, again, verify)
                self._unhold(index)  # it flipped meanwhile: take the newer one
                continue
            if deadline is not None and time.monotonic() >= deadline:
                have = 0 if control is None else control["version"]
                raise WeightStoreError(
                    f"weight store {self.name!r}: no version >= {min_version} within {timeout} s (latest: {have})"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.02)

    def _hold(self, index: int) -> None:
        if not self._holds.get(index):
            fcntl.flock(self._slots[index].fd, fcntl.LOCK_SH)
        self._holds[index] = self._holds.get(index, 0) + 1

    def _unhold(self, index: int) -> None:
        self._holds[index] -= 1
        if not self._holds[index]:
            fcntl.flock(self._slots[index].fd, fcntl.LOCK_UN)

    def _snapshot(self, slot: _Mapped, control: dict[str, Any], verify: bool) -> Snapshot:
        version = int(control["version"])
        if verify and control["checksum_kind"] != "none":
            got = checksum(slot.data, control["checksum_kind"], version)
            if got != control["checksum"]:
                self._unhold(slot.index)
                raise WeightStoreError(
                    f"weight store {self.name!r}: slot {slot.index} fails its checksum for "
                    f"version {version} ({got:08x} != {control['checksum']:08x})",
                    hint="the slot was modified outside the protocol",
                )
        return Snapshot(self.name, version, slot.tensors(), lambda: self._unhold(slot.index))

    def close(self) -> None:
        for slot in self._slots.values():
            slot.close()
        self._slots.clear()
        for fd in (self._fd, self._job_fd):
            if fd >= 0:
                os.close(fd)
        self._fd = self._job_fd = -1

    def __enter__(self) -> WeightReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------- environment + cleanup
def job_dir_from_env(environ: Mapping[str, str]) -> str:
    """This node's directory: HPCPLACE_SHM_DIR (the shim's), else
    /dev/shm/hpcplace-<HPCPLACE_JOB_ID>/node-<SLURMD_NODENAME or hostname> (derived, never configured)."""
    path = shm_dir.node_dir_from_env(environ)
    if path is not None:
        return path
    raise WeightStoreError(
        "neither HPCPLACE_SHM_DIR nor HPCPLACE_JOB_ID is set",
        hint="run through the shim (hpcplace run ...) or pass the directory explicitly",
    )


def weight_sources(environ: Mapping[str, str]) -> list[int]:
    """The publisher ranks feeding this process (HPCPLACE_WEIGHT_SYNC_SOURCES, "0,1")."""
    text = environ.get("HPCPLACE_WEIGHT_SYNC_SOURCES", "")
    return [int(part.split(":")[0]) for part in text.split(",") if part.strip()]


def cleanup(job_dir: str) -> bool:
    """Job end: remove this node's directory (HPCPLACE_SHM_DIR) with every store and collocation
    state in it, and the job's directory around it once no other node's is left there."""
    return shm_dir.remove_job_dir(job_dir)
