"""Memory backends for offload/onload: release a component's device memory while another component
owns the devices, and get it back (same addresses) when the turn returns.

One small interface, three backends:

- `TorchMemorySaverBackend` (GPU): torch_memory_saver regions per tag ("weights", "kv_cache",
  "cuda_graph"), optional CPU backup. Usable only where a GPU and libcuda exist and (hook mode
  "preload") the process was started with its LD_PRELOAD, which the shim gets from
  `torch_memory_saver_env()`; elsewhere it refuses with the reason.
- `CpuBackend`: an honest stand-in for machines without GPUs. One anonymous mmap per tag; pause =
  optional backup into a memfd, then madvise(MADV_DONTNEED), so the pages really leave RSS; resume
  = restore the contents (or zero pages without backup, as a GPU region without backup would hold
  garbage). Tensors keep their addresses across pause/resume, like torch_memory_saver's.
- `NoopBackend`: keeps everything resident; only the state machine.

Every backend runs the same per-tag state machine in Python (resident <-> paused) and raises
`MemoryStateError` on a double pause or resume: torch_memory_saver calls exit(1) on those.

torch and torch_memory_saver are imported lazily; `torch_memory_saver_env()` is stdlib only so the
shim can call it on its hot path.
"""

from __future__ import annotations

import ast
import ctypes
import importlib.util
import mmap
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

RESIDENT = "resident"
PAUSED = "paused"
_ALIGN = 64


class MemoryBackendError(Exception):
    """A backend cannot be used here, or was used wrongly (message + hint)."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message if hint is None else f"{message}\n  HINT: {hint}")
        self.message = message
        self.hint = hint


class MemoryStateError(MemoryBackendError):
    """Double pause or double resume of a tag (torch_memory_saver would exit(1) the process)."""


# --------------------------------------------------------------------------- detection (stdlib)

def _libcuda_loadable() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def _torch_cuda_major() -> int | None:
    """The CUDA major version torch was built for, read from torch/version.py without importing
    torch (the shim must stay light). None for CPU/ROCm builds or when torch is absent."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
    except OSError:
        return None
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else (
            node.target if isinstance(node, ast.AnnAssign) else None)
        if isinstance(target, ast.Name) and target.id == "cuda" and node.value is not None:
            value = ast.literal_eval(node.value) if isinstance(node.value, ast.Constant) else None
            if isinstance(value, str) and value.split(".")[0].isdigit():
                return int(value.split(".")[0])
            return None
    return None


def torch_memory_saver_unavailable_reason(environ: Mapping[str, str]) -> str | None:
    """Why torch_memory_saver's preload hook must NOT be set for a process with `environ`
    (None = it can be). Its LD_PRELOAD makes every process fail to start where no libcuda exists."""
    if environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        return "the process sees no GPU (CUDA_VISIBLE_DEVICES is empty)"
    if not os.path.exists("/dev/nvidiactl"):
        return "no NVIDIA GPU on this node (/dev/nvidiactl is missing)"
    if not _libcuda_loadable():
        return "libcuda.so.1 cannot be loaded on this node"
    if "expandable_segments:True" in environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
        return "PYTORCH_CUDA_ALLOC_CONF has expandable_segments:True, which torch_memory_saver does not support"
    if importlib.util.find_spec("torch_memory_saver") is None:
        return "torch_memory_saver is not installed (pip install 'hpcplace[gpu]')"
    found = _preload_library()
    if found is None:
        return "no torch_memory_saver preload library matches this torch's CUDA version"
    if _cudart_dir(found[1], environ) is None:
        return f"libcudart.so.{found[1]} (needed by the preload library) is neither installed nor in a pip nvidia package"
    return None


def _site_dirs() -> list[str]:
    spec = importlib.util.find_spec("torch_memory_saver")
    if spec is None or not spec.submodule_search_locations:
        return []
    package_dir = list(spec.submodule_search_locations)[0]
    return [package_dir, os.path.dirname(package_dir)]


def _preload_library() -> tuple[str, int] | None:
    """(path of the hook library for torch's CUDA major, that major)."""
    major = _torch_cuda_major()
    for m in [major] if major is not None else [13, 12]:
        for where in _site_dirs():
            path = os.path.join(where, f"torch_memory_saver_hook_mode_preload_cu{m}.abi3.so")
            if os.path.isfile(path):
                return path, m
    return None


def _cudart_dir(major: int, environ: Mapping[str, str]) -> str | None:
    """"" when the loader finds libcudart.so.<major> by itself, a directory to add to
    LD_LIBRARY_PATH when only a pip wheel (nvidia/*/lib) has it, None when it is nowhere.
    The hook library has no RPATH, so without this every preloaded process would fail to start."""
    name = f"libcudart.so.{major}"
    for d in environ.get("LD_LIBRARY_PATH", "").split(":"):
        if d and os.path.isfile(os.path.join(d, name)):
            return ""
    try:
        ctypes.CDLL(name)
        return ""
    except OSError:
        pass
    for where in _site_dirs()[1:]:
        nvidia = os.path.join(where, "nvidia")
        for sub in sorted(os.listdir(nvidia)) if os.path.isdir(nvidia) else []:
            if os.path.isfile(os.path.join(nvidia, sub, "lib", name)):
                return os.path.join(nvidia, sub, "lib")
    return None


def torch_memory_saver_env(environ: Mapping[str, str], *, probe: bool = True) -> dict[str, str]:
    """The variables to add for a process that will use torch_memory_saver (hook mode "preload"):
    LD_PRELOAD with its hook library prepended (and LD_LIBRARY_PATH when libcudart comes from a pip
    wheel). Empty unless a GPU and libcuda are present. With `probe`, /bin/true is started with the
    result first, so a preload that would stop every process from starting is never returned."""
    if torch_memory_saver_unavailable_reason(environ) is not None:
        return {}
    found = _preload_library()
    assert found is not None
    lib, major = found
    current = [p for p in environ.get("LD_PRELOAD", "").split(":") if p]
    if any("torch_memory_saver" in p for p in current):
        return {}
    changes = {"LD_PRELOAD": ":".join([lib, *current])}
    extra = _cudart_dir(major, environ)
    if extra:
        changes["LD_LIBRARY_PATH"] = ":".join(p for p in (extra, environ.get("LD_LIBRARY_PATH", "")) if p)
    if probe:
        import subprocess
        true = "/bin/true" if os.path.exists("/bin/true") else "/usr/bin/true"
        try:
            ok = subprocess.run([true], env={**environ, **changes}, capture_output=True, timeout=30).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if not ok:
            return {}
    return changes


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
        self._state[tag] = RESIDENT
        self._backup[tag] = backup
        self._add(tag, nbytes, backup)

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(self._state)

    def state(self, tag: str) -> str:
        return self._state[self._known(tag)]

    def _known(self, tag: str) -> str:
        if tag not in self._state:
            raise MemoryBackendError(f"unknown memory tag {tag!r}", hint=f"known tags: {sorted(self._state)}")
        return tag

    def _select(self, tag: str | None) -> list[str]:
        return list(self._state) if tag is None else [self._known(tag)]

    def pause(self, tag: str | None = None) -> None:
        """Release the memory of `tag` (all tags when None). Refuses if any selected tag is paused."""
        tags = self._select(tag)
        already = [t for t in tags if self._state[t] == PAUSED]
        if already:
            raise MemoryStateError(f"{self.name}: memory tag(s) {already} already paused (double pause)",
                                   hint="pause and resume must alternate per tag")
        self._before_pause(tags)
        for t in tags:
            self._pause(t)
            self._state[t] = PAUSED

    def resume(self, tag: str | None = None) -> None:
        """Bring back the memory of `tag` (all tags when None). Refuses if any selected tag is resident."""
        tags = self._select(tag)
        already = [t for t in tags if self._state[t] == RESIDENT]
        if already:
            raise MemoryStateError(f"{self.name}: memory tag(s) {already} not paused (double resume)",
                                   hint="pause and resume must alternate per tag")
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
        self._known(tag)
        if self._state[tag] == PAUSED:
            raise MemoryStateError(f"cannot allocate in paused memory tag {tag!r}")
        return self._empty(tag, tuple(shape), dtype)

    def adopt(self, tag: str, module: Any, *, backup: bool = True) -> None:
        """Create tag `tag` and move every parameter and buffer of a torch module into it."""
        tensors = [t for t in list(module.parameters()) + list(module.buffers())]
        self.add_tag(tag, nbytes=sum(_padded(t.numel() * t.element_size()) for t in tensors), backup=backup)
        for t in tensors:
            fresh = self.empty(tag, tuple(t.shape), t.dtype)
            fresh.copy_(t.data)
            t.data = fresh

    def close(self) -> None:
        """Release everything the backend holds (tensors into it must no longer be used)."""

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
    """One anonymous private mmap per tag; pause really drops the pages (MADV_DONTNEED)."""

    name = "cpu"

    def __init__(self) -> None:
        super().__init__()
        self._maps: dict[str, mmap.mmap] = {}
        self._used: dict[str, int] = {}
        self._memfd: dict[str, int] = {}

    def _add(self, tag: str, nbytes: int, backup: bool) -> None:
        if nbytes <= 0:
            raise MemoryBackendError(f"cpu backend: tag {tag!r} needs a capacity (nbytes > 0)")
        size = (nbytes + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE
        self._maps[tag] = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._used[tag] = 0

    def capacity(self, tag: str) -> int:
        return len(self._maps[self._known(tag)])

    def buffer(self, tag: str) -> memoryview:
        """The whole raw region of a tag (introspection; only allocated bytes are backed up)."""
        return memoryview(self._maps[self._known(tag)])

    def allocate_bytes(self, tag: str, nbytes: int) -> memoryview:
        """`nbytes` of the tag's region as a memoryview (for callers that do not use torch)."""
        if self.state(tag) == PAUSED:
            raise MemoryStateError(f"cannot allocate in paused memory tag {tag!r}")
        start = self._reserve(tag, nbytes)
        return memoryview(self._maps[tag])[start:start + nbytes]

    def _reserve(self, tag: str, nbytes: int) -> int:
        start = self._used[tag]
        if start + nbytes > len(self._maps[tag]):
            raise MemoryBackendError(
                f"cpu backend: tag {tag!r} is full ({len(self._maps[tag])} bytes reserved, "
                f"{start} used, {nbytes} more needed)", hint="declare a larger nbytes in add_tag()")
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
            view = memoryview(self._maps[tag])[:self._used[tag]]
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


class TorchMemorySaverBackend(MemoryBackend):
    """torch_memory_saver on a GPU: tensors allocated inside `region(tag)` are paused/resumed per tag."""

    name = "torch_memory_saver"

    def __init__(self, *, hook_mode: str = "preload") -> None:
        super().__init__()
        reason = torch_memory_saver_unavailable_reason(os.environ)
        if reason is None and hook_mode == "preload" and "torch_memory_saver" not in os.environ.get("LD_PRELOAD", ""):
            reason = "this process was not started with torch_memory_saver's LD_PRELOAD"
        if reason is not None:
            raise MemoryBackendError(f"torch_memory_saver backend unavailable: {reason}",
                                     hint="use the cpu or noop backend here (make_backend('auto') picks)")
        import torch
        if not torch.cuda.is_available():
            raise MemoryBackendError("torch_memory_saver backend unavailable: torch sees no CUDA device",
                                     hint="install a CUDA build of torch (pip install 'hpcplace[gpu]')")
        from torch_memory_saver import torch_memory_saver
        if hook_mode != "preload":
            torch_memory_saver.hook_mode = hook_mode
        self._tms = torch_memory_saver

    @contextmanager
    def region(self, tag: str) -> Iterator[None]:
        """Allocations made by torch inside this block belong to `tag`."""
        self._known(tag)
        with self._tms.region(tag=tag, enable_cpu_backup=self._backup[tag]):
            yield

    @contextmanager
    def cuda_graph(self, graph: Any, tag: str = "cuda_graph", **kwargs: Any) -> Iterator[None]:
        """Capture a CUDA graph whose memory pool belongs to `tag` (pausable)."""
        self._known(tag)
        with self._tms.cuda_graph(graph, tag=tag, enable_cpu_backup=self._backup[tag], **kwargs):
            yield

    def _empty(self, tag: str, shape: tuple[int, ...], dtype: Any) -> Any:
        import torch
        with self.region(tag):
            return torch.empty(shape, dtype=dtype, device="cuda")

    def adopt(self, tag: str, module: Any, *, backup: bool = True) -> None:
        self.add_tag(tag, backup=backup)
        with self.region(tag):
            module.to("cuda")

    def _before_pause(self, tags: list[str]) -> None:
        import torch
        torch.cuda.synchronize()

    def _pause(self, tag: str) -> None:
        self._tms.pause(tag)

    def _resume(self, tag: str) -> None:
        self._tms.resume(tag)


def make_backend(kind: str = "auto") -> MemoryBackend:
    """"auto": torch_memory_saver where this process has it preloaded on a GPU, else the CPU backend."""
    if kind == "auto":
        if (torch_memory_saver_unavailable_reason(os.environ) is None
                and "torch_memory_saver" in os.environ.get("LD_PRELOAD", "")):
            return TorchMemorySaverBackend()
        return CpuBackend()
    factories = {"torch_memory_saver": TorchMemorySaverBackend, "cpu": CpuBackend, "noop": NoopBackend}
    if kind not in factories:
        raise MemoryBackendError(f"unknown memory backend {kind!r}", hint=f"one of: auto, {', '.join(factories)}")
    return factories[kind]()
