"""Fakes at the library boundary for the GPU path on machines without a GPU: a directory to put first on
PYTHONPATH (or sys.path) holding a fake CUDA `torch` (only torch/version.py and torch.cuda.is_available)
and a fake `pynvml` (nvidia-ml-py) whose driver and devices come from a JSON file.

`fake_gpu_dir(tmp, cuda="13.0", driver_cuda=12040, ...)` writes both and returns the directory."""

from __future__ import annotations

import json
from pathlib import Path

TORCH_INIT = '''"""Fake CUDA torch for tests without a GPU (tests/gpu/fake_gpu.py)."""
from . import cuda, version
__version__ = version.__version__
FAKE = True
'''

TORCH_CUDA = """def is_available():
    return True


def device_count():
    return 1


def get_device_name(device=None):
    return "Fake NVIDIA GPU"
"""

PYNVML = '''"""Fake nvidia-ml-py for tests without a GPU: facts from the JSON file named in FAKE_NVML_JSON (or beside)."""
import json
import os

_FACTS = json.load(open(os.environ.get("FAKE_NVML_JSON") or os.path.join(os.path.dirname(__file__), "fake_nvml.json")))


class NVMLError(Exception):
    pass


class NVMLError_NoPermission(NVMLError):
    pass


class _Memory:
    def __init__(self, total, used):
        self.total, self.used, self.free = total, used, total - used


def nvmlInit():
    if _FACTS.get("init_error"):
        raise NVMLError(_FACTS["init_error"])


def nvmlShutdown():
    pass


def nvmlSystemGetDriverVersion():
    return _FACTS["driver"]


def nvmlSystemGetCudaDriverVersion():
    return _FACTS["driver_cuda"]


def nvmlDeviceGetCount():
    return len(_FACTS["devices"])


def _device(i):
    d = _FACTS["devices"][i]
    if d.get("denied"):
        raise NVMLError_NoPermission("Insufficient Permissions")
    return d


def nvmlDeviceGetHandleByIndex(i):
    return _device(i)


def nvmlDeviceGetHandleByUUID(uuid):
    for i, d in enumerate(_FACTS["devices"]):
        if d["uuid"] == (uuid.decode() if isinstance(uuid, bytes) else uuid):
            return _device(i)
    raise NVMLError("Not Found")


def nvmlDeviceGetName(h):
    return h["name"]


def nvmlDeviceGetUUID(h):
    return h["uuid"]


def nvmlDeviceGetMinorNumber(h):
    return h["minor"]


def nvmlDeviceGetIndex(h):
    return _FACTS["devices"].index(h)


def nvmlDeviceGetMemoryInfo(h):
    return _Memory(h.get("total", 80 << 30), h.get("used", 0))
'''


def fake_device(i: int, *, name: str = "NVIDIA H100 80GB HBM3", minor: int | None = None, denied: bool = False) -> dict:
    return {
        "name": name,
        "uuid": f"GPU-{i:08x}-1111-2222-3333-444444444444",
        "minor": i if minor is None else minor,
        "denied": denied,
    }


def fake_gpu_dir(
    root: Path,
    *,
    cuda: str | None = "13.0",
    torch_version: str = "2.11.0+cu130",
    driver: str = "580.65.06",
    driver_cuda: int = 13000,
    devices: list[dict] | None = None,
    nvml: bool = True,
    init_error: str | None = None,
) -> Path:
    """Write fake `torch` (unless cuda is None... then a CPU torch) and fake `pynvml` under `root`."""
    root.mkdir(parents=True, exist_ok=True)
    torch = root / "torch"
    torch.mkdir(exist_ok=True)
    (torch / "__init__.py").write_text(TORCH_INIT)
    (torch / "cuda.py").write_text(TORCH_CUDA.replace("True", "True" if cuda else "False"))
    (torch / "version.py").write_text(f"__version__ = {torch_version!r}\ncuda: 'str | None' = {cuda!r}\nhip = None\n")
    if nvml:
        (root / "pynvml.py").write_text(PYNVML)
        facts = {
            "driver": driver,
            "driver_cuda": driver_cuda,
            "init_error": init_error,
            "devices": devices if devices is not None else [fake_device(0)],
        }
        (root / "fake_nvml.json").write_text(json.dumps(facts))
    return root


MEMORY_SAVER = '''"""Fake torch_memory_saver 0.0.10 for tests without a GPU: its Python surface and its failure modes.

Like the real one: one singleton, initialized on first use; in hook_mode "preload" (the default) it asserts that
exactly one LD_PRELOAD entry names torch_memory_saver (hooks/mode_preload.py: it opens its hook by that name);
`hook_mode` can only be set before that; regions keyed as in _impl._mem_pools: (tag, enable_cpu_backup,
enable_disk_backup, cpu backup backend, device). pause/resume act on the allocations of a tag, or of every tag
when None (a tag without allocations: nothing happens); the C++ side exits the process (exit(1)) when it pauses
an allocation that is not active or resumes one that is not paused, e.g. a tag paused twice, or a tag that got
new allocations while paused. Here a region or CUDA graph entered counts as one allocation. Calls are recorded
in CALLS; FAKE_TMS_RESUME_EXIT=1 makes every resume exit (a failed cuMemCreate / cuMemMap)."""
import contextlib
import os

CALLS = []


class _Impl:
    def __init__(self, hook_mode="preload"):
        if hook_mode == "preload":
            preload = os.environ.get("LD_PRELOAD", "")
            named = [p for p in preload.split(":") if "torch_memory_saver" in p]
            assert len(named) == 1, f"TorchMemorySaver observes invalid LD_PRELOAD. (LD_PRELOAD={preload!r})"
        self._hook_mode = hook_mode
        self.retain_cpu_backup = False
        self._mem_pools = {}
        self.allocations = {}  # tag -> ["active" | "paused", ...]


class TorchMemorySaver:
    def __init__(self):
        self._impl_ctor_kwargs = {}
        self._impl = None

    @property
    def hook_mode(self):
        raise AttributeError

    @hook_mode.setter
    def hook_mode(self, hook_mode):
        assert self._impl_ctor_kwargs is not None, "Cannot configure after initialization"
        self._impl_ctor_kwargs["hook_mode"] = hook_mode

    @property
    def retain_cpu_backup(self):
        self._ensure_initialized()
        return self._impl.retain_cpu_backup

    @retain_cpu_backup.setter
    def retain_cpu_backup(self, value):
        self._ensure_initialized()
        self._impl.retain_cpu_backup = bool(value)
        CALLS.append(("retain_cpu_backup", bool(value)))

    def _ensure_initialized(self):
        if self._impl is None:
            self._impl = _Impl(**self._impl_ctor_kwargs)
            del self._impl_ctor_kwargs

    @contextlib.contextmanager
    def region(self, tag="default", enable_cpu_backup=False, enable_disk_backup=False, cpu_backup_backend=None):
        if cpu_backup_backend is not None and not enable_cpu_backup:
            raise ValueError("cpu_backup_backend requires enable_cpu_backup=True")
        self._ensure_initialized()
        backend = (cpu_backup_backend or "pinned") if enable_cpu_backup else ""
        self._impl._mem_pools.setdefault((tag, enable_cpu_backup, enable_disk_backup, backend, 0), object())
        self._impl.allocations.setdefault(tag, []).append("active")
        CALLS.append(("region", tag) if not enable_cpu_backup else ("region", tag, backend))
        yield

    @contextlib.contextmanager
    def cuda_graph(self, cuda_graph, pool=None, stream=None, capture_error_mode="global", tag="default",
                   enable_cpu_backup=False, cpu_backup_backend=None):
        self._ensure_initialized()
        assert self._impl._hook_mode == "preload", "Only hook_mode=preload supports pauseable CUDA Graph currently"
        self._impl.allocations.setdefault(tag, []).append("active")
        CALLS.append(("cuda_graph", tag))
        yield

    def _flip(self, tag, before, after):
        for name, states in self._impl.allocations.items():
            if tag is None or name == tag:
                if any(state != before for state in states):
                    os._exit(1)  # "Cannot pause allocation that is not active" / "... resume ... not paused"
                states[:] = [after] * len(states)

    def pause(self, tag=None):
        self._ensure_initialized()
        CALLS.append(("pause", tag))
        self._flip(tag, "active", "paused")

    def resume(self, tag=None):
        self._ensure_initialized()
        CALLS.append(("resume", tag))
        if os.environ.get("FAKE_TMS_RESUME_EXIT") == "1":
            os._exit(1)  # the library's answer to a failed cuMemCreate / cuMemMap
        self._flip(tag, "paused", "active")


torch_memory_saver = TorchMemorySaver()
'''


def fake_memory_saver(root: Path, *, majors: tuple[int, ...] = (12, 13)) -> Path:
    """A fake torch_memory_saver package under `root` (a site-packages-like dir) with hook files beside it
    named like the wheel's (empty: never to be preloaded)."""
    package = root / "torch_memory_saver"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(MEMORY_SAVER)
    for major in majors:
        (root / f"torch_memory_saver_hook_mode_preload_cu{major}.abi3.so").write_bytes(b"")
    return root
