"""Memory backends for offload/onload: release a component's device memory while another component
owns the devices, and get it back (same addresses) when the turn returns.

One small interface, three backends:

- `TorchMemorySaverBackend` (GPU): torch_memory_saver regions per tag (named `hpcplace.<tag>` in the
  library, so SGLang's "weights"/"kv_cache" in the same process stay apart), optional CPU backup. One
  per process, like the library's own singleton. Usable only where its preload hook is really mapped
  into the process (the shim sets it: runtime/preload.py), the allocator settings do not bypass it and
  the driver supports the torch build (runtime/gpu_checks.py); elsewhere it refuses with the reason.
- `CpuBackend`: an honest stand-in for machines without GPUs. One anonymous mmap per tag; pause =
  optional backup into a memfd, then madvise(MADV_DONTNEED), so the pages really leave RSS; resume
  = restore the contents (or zero pages without backup, as a GPU region without backup would hold
  garbage). Tensors keep their addresses across pause/resume, like torch_memory_saver's. It never
  takes a GPU model without an explicit opt-in (make_backend's cpu_fallback), and then warns.
- `NoopBackend`: keeps everything resident; only the state machine.

Every backend runs the same per-tag state machine in Python (resident <-> paused) and raises
`MemoryStateError` on a double pause or resume, or an allocation in a paused tag: torch_memory_saver
calls exit(1) on the former and hands out unmapped memory on the latter.

torch and torch_memory_saver are imported lazily."""

from __future__ import annotations

import importlib.util
import mmap
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

RESIDENT = "resident"
PAUSED = "paused"
RETAIN_VARIABLE = "HPCPLACE_MEMORY_RETAIN_CPU_BACKUP"  # "0": a new pinned host backup at every pause
CPU_BACKUP_VARIABLE = "HPCPLACE_MEMORY_CPU_BACKUP"  # torch_memory_saver's cpu_backup_backend
CPU_BACKUP_BACKENDS = ("pinned", "mmap")
_ALIGN = 64


class MemoryBackendError(Exception):
    """A backend cannot be used here, or was used wrongly (message + hint)."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message if hint is None else f"{message}\n  HINT: {hint}")
        self.message = message
        self.hint = hint


class MemoryStateError(MemoryBackendError):
    """Double pause or double resume of a tag (torch_memory_saver would exit(1) the process)."""


# --------------------------------------------------------------------------- the preload (stdlib)


def torch_memory_saver_unavailable_reason(environ: Mapping[str, str]) -> str | None:
    """Why torch_memory_saver's preload hook must NOT be set for a process with `environ` (None: it can
    be). Its LD_PRELOAD makes every process fail to start where no libcuda exists (runtime/preload.py)."""
    from hpcplace.runtime.preload import unavailable_reason

    return unavailable_reason(environ)


def torch_memory_saver_env(
    environ: Mapping[str, str], *, probe: bool = True, command: tuple[str, ...] = ()
) -> dict[str, str]:
    """The variables to add for a process that will use torch_memory_saver: LD_PRELOAD with its hook
    (for the torch of `command`'s interpreter) and LD_LIBRARY_PATH with torch's libcudart first.
    Empty unless a GPU and libcuda are present (runtime/preload.py)."""
    from hpcplace.runtime.preload import preload_env

    return preload_env(environ, command=command, probe=probe)[0]


# --------------------------------------------------------------------------- the state machine


class MemoryBackend:
    """pause/resume per tag, with the resident/paused state machine enforced here."""

    name = "base"

    def __init__(self) -> None:
        self._state: dict[str, str] = {}
        self._backup: dict[str, bool] = {}

    # -- tags
    def add_tag(self, tag: str, *, nbytes: int = 0, backup: bool = False) -> None:
        """Declare a tag. `backup` keeps its contents across pause (else they are lost);
        `nbytes` is the capacity the CPU backend reserves (ignored by the others)."""
        if tag in self._state:
            raise MemoryBackendError(f"memory tag {tag!r} already exists")
        self._add(tag, nbytes, backup)
        self._state[tag] = RESIDENT
        self._backup[tag] = backup

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(self._state)

    def state(self, tag: str) -> str:
        return self._state[self._known(tag)]

    def _known(self, tag: str) -> str:
        if tag not in self._state:
            raise MemoryBackendError(f"unknown memory tag {tag!r}", hint=f"known tags: {sorted(self._state)}")
        return tag

    def _resident(self, tag: str, doing: str) -> None:
        if self._state[self._known(tag)] == PAUSED:
            raise MemoryStateError(f"cannot {doing} paused memory tag {tag!r}", hint="resume it first")

    def _select(self, tag: str | None) -> list[str]:
        return list(self._state) if tag is None else [self._known(tag)]

    def pause(self, tag: str | None = None) -> None:
        """Release the memory of `tag` (all tags when None). Refuses if any selected tag is paused."""
        tags = self._select(tag)
        already = [t for t in tags if self._state[t] == PAUSED]
        if already:
            raise MemoryStateError(
                f"{self.name}: memory tag(s) {already} already paused (double pause)",
                hint="pause and resume must alternate per tag",
            )
        self._before_pause(tags)
        for t in tags:
            self._pause(t)
            self._state[t] = PAUSED

    def resume(self, tag: str | None = None) -> None:
        """Bring back the memory of `tag` (all tags when None). Refuses if any selected tag is resident."""
        tags = self._select(tag)
        already = [t for t in tags if self._state[t] == RESIDENT]
        if already:
            raise MemoryStateError(
                f"{self.name}: memory tag(s) {already} not paused (double resume)",
                hint="pause and resume must alternate per tag",
            )
        for t in tags:
            self._resume(t)
            self._state[t] = RESIDENT

    @property
    def any_paused(self) -> bool:
        return any(s == PAUSED for s in self._state.values())

    @property
    def all_paused(self) -> bool:
        return bool(self._state) and all(s == PAUSED for s in self._state.values())

    # -- allocation
    def empty(self, tag: str, shape: tuple[int, ...], dtype: Any) -> Any:
        """A new tensor living in `tag`'s memory (a device tensor for GPU backends)."""
        self._resident(tag, "allocate in")
        return self._empty(tag, tuple(shape), dtype)

    def adopt(self, tag: str, module: Any, *, backup: bool = True) -> None:
        """Create tag `tag` and move every parameter and buffer of a torch module into it."""
        tensors = list(module.parameters()) + list(module.buffers())
        self._check_devices(tag, tensors)
        self.add_tag(tag, nbytes=sum(_padded(t.numel() * t.element_size()) for t in tensors), backup=backup)
        for t in tensors:
            fresh = self.empty(tag, tuple(t.shape), t.dtype)
            fresh.copy_(t.data)
            t.data = fresh

    def close(self) -> None:
        """Release everything the backend holds (tensors into it must no longer be used)."""

    def _check_devices(self, tag: str, tensors: list[Any]) -> None: ...

    # -- hooks for subclasses
    def _add(self, tag: str, nbytes: int, backup: bool) -> None: ...
    def _before_pause(self, tags: list[str]) -> None: ...
    def _pause(self, tag: str) -> None: ...
    def _resume(self, tag: str) -> None: ...

    def _empty(self, tag: str, shape: tuple[int, ...], dtype: Any) -> Any:
        import torch

        return torch.empty(shape, dtype=dtype)


def _padded(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


class NoopBackend(MemoryBackend):
    """Keeps everything resident; pause/resume only move the state machine."""

    name = "noop"


class CpuBackend(MemoryBackend):
    """One anonymous private mmap per tag; pause really drops the pages (MADV_DONTNEED).

    Never takes GPU tensors silently: adopting a module with device tensors is refused unless the
    backend was made with `allow_device_tensors=True` (make_backend's explicit cpu_fallback)."""

    name = "cpu"

    def __init__(self, *, allow_device_tensors: bool = False) -> None:
        super().__init__()
        self._allow_device_tensors = allow_device_tensors
        self._maps: dict[str, mmap.mmap] = {}
        self._used: dict[str, int] = {}
        self._memfd: dict[str, int] = {}

    def _add(self, tag: str, nbytes: int, backup: bool) -> None:
        if nbytes <= 0:
            raise MemoryBackendError(f"cpu backend: tag {tag!r} needs a capacity (nbytes > 0)")
        size = (nbytes + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE
        self._maps[tag] = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._used[tag] = 0

    def _check_devices(self, tag: str, tensors: list[Any]) -> None:
        devices = sorted({str(t.device) for t in tensors if t.device.type != "cpu"})
        if not devices:
            return
        if not self._allow_device_tensors:
            raise MemoryBackendError(
                f"cpu backend: refusing to adopt {tag!r}: its tensors are on {', '.join(devices)} and would "
                f"silently leave the GPU for host memory",
                hint="use the torch_memory_saver backend on GPUs (started through hpcplace-run), or opt in "
                "with make_backend('auto', cpu_fallback=True)",
            )
        warnings.warn(
            f"cpu backend: adopting {tag!r} moves its tensors from {', '.join(devices)} to host memory (cpu_fallback)",
            RuntimeWarning,
            stacklevel=3,
        )

    def capacity(self, tag: str) -> int:
        return len(self._maps[self._known(tag)])

    def buffer(self, tag: str) -> memoryview:
        """The whole raw region of a tag (introspection; only allocated bytes are backed up)."""
        return memoryview(self._maps[self._known(tag)])

    def allocate_bytes(self, tag: str, nbytes: int) -> memoryview:
        """`nbytes` of the tag's region as a memoryview (for callers that do not use torch)."""
        self._resident(tag, "allocate in")
        start = self._reserve(tag, nbytes)
        return memoryview(self._maps[tag])[start : start + nbytes]

    def _reserve(self, tag: str, nbytes: int) -> int:
        start = self._used[tag]
        if start + nbytes > len(self._maps[tag]):
            raise MemoryBackendError(
                f"cpu backend: tag {tag!r} is full ({len(self._maps[tag])} bytes reserved, "
                f"{start} used, {nbytes} more needed)",
                hint="declare a larger nbytes in add_tag()",
            )
        self._used[tag] = _padded(start + nbytes)
        return start

    def _empty(self, tag: str, shape: tuple[int, ...], dtype: Any) -> Any:
        import torch

        count = 1
        for d in shape:
            count *= d
        start = self._reserve(tag, count * torch.empty((), dtype=dtype).element_size())
        if count == 0:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(self._maps[tag], dtype=dtype, count=count, offset=start).view(shape)

    def _pause(self, tag: str) -> None:
        region = self._maps[tag]
        used = self._used[tag]
        if self._backup[tag] and used:
            fd = os.memfd_create(f"hpcplace-backup-{tag}", os.MFD_CLOEXEC)
            self._memfd[tag] = fd
            view = memoryview(region)[:used]
            done = 0
            while done < used:
                done += os.pwrite(fd, view[done:], done)
            view.release()
        region.madvise(mmap.MADV_DONTNEED)

    def _resume(self, tag: str) -> None:
        fd = self._memfd.pop(tag, None)
        if fd is None:
            return  # no backup: the region comes back as zero pages on first touch
        try:
            view = memoryview(self._maps[tag])[: self._used[tag]]
            done = 0
            while done < len(view):
                got = os.preadv(fd, [view[done:]], done)
                if got <= 0:
                    raise MemoryBackendError(f"cpu backend: backup of tag {tag!r} is truncated")
                done += got
            view.release()
        finally:
            os.close(fd)

    def close(self) -> None:
        for fd in self._memfd.values():
            os.close(fd)
        self._memfd.clear()
        for region in self._maps.values():
            try:
                region.close()
            except BufferError:
                pass  # tensors still view it; the mapping goes when they do
        self._maps.clear()


TAG_PREFIX = "hpcplace."  # torch_memory_saver's tags are per process: SGLang uses "weights", "kv_cache" too
_ACTIVE: TorchMemorySaverBackend | None = None  # torch_memory_saver is one singleton per process: so is this


def torch_memory_saver_problem(hook_mode: str = "preload") -> str | None:
    """Why torch_memory_saver cannot release GPU memory in this process, or None. In the order a user
    fixes them: not installed, driver too old for the torch build, hook not loaded or bypassed, no GPU."""
    from hpcplace.runtime import gpu_checks

    if importlib.util.find_spec("torch_memory_saver") is None:
        return "torch_memory_saver is not installed (pip install torch_memory_saver)"
    driver = gpu_checks.cuda_driver_problem()
    if driver is not None:
        return driver
    hook = gpu_checks.memory_saver_hook_problem() if hook_mode == "preload" else gpu_checks.allocator_bypass_problem()
    if hook is not None:
        return hook
    import torch

    if torch.version.cuda is None:
        return f"this torch ({torch.__version__}) is not a CUDA build: bring your site's CUDA torch"
    if not torch.cuda.is_available():
        return (
            f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})"
        )
    return None


class TorchMemorySaverBackend(MemoryBackend):
    """torch_memory_saver on a GPU: tensors allocated inside `region(tag)` are paused/resumed per tag.

    One per process (the library keeps one allocation map per process); its tags are named
    `hpcplace.<tag>` in the library, and a tag another library already uses there is refused."""

    name = "torch_memory_saver"

    def __init__(
        self,
        *,
        hook_mode: str = "preload",
        retain_cpu_backup: bool | None = None,
        cpu_backup_backend: str | None = None,
    ) -> None:
        """`retain_cpu_backup` (default: on, unless HPCPLACE_MEMORY_RETAIN_CPU_BACKUP=0): keep the host
        backup of backed-up tags between turns. Without it torch_memory_saver pins a new host buffer at every
        pause and frees it at every resume: a 4 GiB offload + onload on an H200 ran at 0.08x a plain pinned
        copy that way, 0.97x with the backup kept (docs/benchmarks.md). The cost: that host memory stays
        allocated while the tag is resident. The switch is torch_memory_saver's, one per process.
        `cpu_backup_backend`: "pinned" (the library's default) or "mmap" (reclaimable host memory; default
        HPCPLACE_MEMORY_CPU_BACKUP)."""
        global _ACTIVE
        super().__init__()
        if _ACTIVE is not None:
            raise MemoryBackendError(
                "a torch_memory_saver backend already exists in this process: torch_memory_saver keeps one "
                "allocation map per process, so two backends would pause each other's memory",
                hint="share the first backend (hpcplace.runtime.memory.active_backend()) or close() it first",
            )
        reason = torch_memory_saver_problem(hook_mode)
        if reason is not None:
            raise MemoryBackendError(
                f"torch_memory_saver backend unavailable: {reason}",
                hint="fix the cause above; to run on the CPU stand-in instead (the model "
                "leaves the GPU), make_backend('auto', cpu_fallback=True)",
            )
        from torch_memory_saver import torch_memory_saver

        if cpu_backup_backend is None:
            cpu_backup_backend = os.environ.get(CPU_BACKUP_VARIABLE) or None
        if cpu_backup_backend not in (None, *CPU_BACKUP_BACKENDS):
            raise MemoryBackendError(
                f"unknown torch_memory_saver CPU backup {cpu_backup_backend!r}",
                hint=f"one of: {', '.join(CPU_BACKUP_BACKENDS)} (argument cpu_backup_backend or {CPU_BACKUP_VARIABLE})",
            )
        if retain_cpu_backup is None:
            retain_cpu_backup = os.environ.get(RETAIN_VARIABLE, "1") != "0"
        if hook_mode != "preload":
            torch_memory_saver.hook_mode = hook_mode
        torch_memory_saver.retain_cpu_backup = retain_cpu_backup
        self._tms = torch_memory_saver
        self.retain_cpu_backup = retain_cpu_backup
        self.cpu_backup_backend = cpu_backup_backend
        _ACTIVE = self

    def _library_tag(self, tag: str) -> str:
        return TAG_PREFIX + tag

    def _add(self, tag: str, nbytes: int, backup: bool) -> None:
        """Refuse a tag that torch_memory_saver already has allocations under from someone else."""
        impl = getattr(self._tms, "_impl", None)
        pools = getattr(impl, "_mem_pools", None) or {}
        theirs = {key[0] for key in pools if isinstance(key, tuple) and key}
        if self._library_tag(tag) in theirs:
            raise MemoryBackendError(
                f"torch_memory_saver tag {self._library_tag(tag)!r} is already in use by another user of "
                f"torch_memory_saver in this process: pausing it would pause their memory too",
                hint="use another tag name, or the other library's offload for this memory",
            )

    @contextmanager
    def region(self, tag: str) -> Iterator[None]:
        """Allocations made by torch inside this block belong to `tag` (refused while it is paused:
        torch_memory_saver would hand out unmapped memory)."""
        self._resident(tag, "allocate in")
        with self._tms.region(tag=self._library_tag(tag), **self._backup_options(tag)):
            yield

    @contextmanager
    def cuda_graph(self, graph: Any, tag: str = "cuda_graph", **kwargs: Any) -> Iterator[None]:
        """Capture a CUDA graph whose memory pool belongs to `tag` (pausable)."""
        self._resident(tag, "capture a CUDA graph in")
        with self._tms.cuda_graph(graph, tag=self._library_tag(tag), **self._backup_options(tag), **kwargs):
            yield

    def _backup_options(self, tag: str) -> dict[str, Any]:
        if not self._backup[tag]:
            return {"enable_cpu_backup": False}
        chosen = {"cpu_backup_backend": self.cpu_backup_backend} if self.cpu_backup_backend else {}
        return {"enable_cpu_backup": True, **chosen}

    def _empty(self, tag: str, shape: tuple[int, ...], dtype: Any) -> Any:
        import torch

        with self.region(tag):
            return torch.empty(shape, dtype=dtype, device="cuda")

    def adopt(self, tag: str, module: Any, *, backup: bool = True) -> None:
        """Copy every parameter and buffer into the tag's memory on the current GPU. Always a copy:
        `module.to("cuda")` returns tensors already there unchanged, outside the region, and a pause
        would then free nothing."""
        tensors = list(module.parameters()) + list(module.buffers())
        self.add_tag(tag, backup=backup)
        with self.region(tag):
            for t in tensors:
                t.data = t.data.to("cuda", copy=True)

    def _before_pause(self, tags: list[str]) -> None:
        import torch

        torch.cuda.synchronize()

    def _pause(self, tag: str) -> None:
        self._tms.pause(self._library_tag(tag))

    def _resume(self, tag: str) -> None:
        self._tms.resume(self._library_tag(tag))

    def close(self) -> None:
        """Give up the per-process slot (refused while a tag is paused: its memory would stay unmapped)."""
        global _ACTIVE
        if self.any_paused:
            raise MemoryStateError(
                f"torch_memory_saver backend: cannot close with paused tag(s) "
                f"{[t for t in self.tags if self.state(t) == PAUSED]}",
                hint="resume them first",
            )
        if _ACTIVE is self:
            _ACTIVE = None


def active_backend() -> TorchMemorySaverBackend | None:
    """This process's torch_memory_saver backend, if one was made."""
    return _ACTIVE


def _gpu_process() -> bool:
    """Whether this process is meant to run on a GPU: a visible NVIDIA device and a CUDA torch."""
    from hpcplace.runtime import devices

    if os.environ.get("CUDA_VISIBLE_DEVICES") == "" or not os.path.exists(devices.NVIDIA_CONTROL):
        return False
    import torch

    return torch.version.cuda is not None


def make_backend(kind: str = "auto", *, cpu_fallback: bool | None = None) -> MemoryBackend:
    """ "auto": torch_memory_saver in a GPU process (refused with the reason when it cannot release GPU
    memory), the CPU backend where there is no GPU. `cpu_fallback=True` (or HPCPLACE_MEMORY_CPU_FALLBACK=1)
    takes the CPU stand-in in a GPU process instead, with a warning: adopted models then leave the GPU."""
    if kind == "auto":
        if not _gpu_process():
            return CpuBackend()
        active = active_backend()
        if active is not None:
            return active
        try:
            return TorchMemorySaverBackend()
        except MemoryBackendError as exc:
            if cpu_fallback is None:
                cpu_fallback = os.environ.get("HPCPLACE_MEMORY_CPU_FALLBACK") == "1"
            if not cpu_fallback:
                raise
            message = (
                f"hpcplace: {exc.message}; using the CPU stand-in as asked (cpu_fallback): adopted "
                f"models and their offloads move to host memory"
            )
            warnings.warn(message, RuntimeWarning, stacklevel=2)
            print(message, file=sys.stderr, flush=True)
            return CpuBackend(allow_device_tensors=True)
    factories: dict[str, Callable[[], MemoryBackend]] = {
        "torch_memory_saver": TorchMemorySaverBackend,
        "cpu": CpuBackend,
        "noop": NoopBackend,
    }
    if kind not in factories:
        raise MemoryBackendError(f"unknown memory backend {kind!r}", hint=f"one of: auto, {', '.join(factories)}")
    return factories[kind]()
