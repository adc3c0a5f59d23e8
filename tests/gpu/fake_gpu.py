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

TORCH_CUDA = '''def is_available():
    return True


def device_count():
    return 1


def get_device_name(device=None):
    return "Fake NVIDIA GPU"
'''

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


def fake_device(i: int, *, name: str = "NVIDIA H100 80GB HBM3", minor: int | None = None,
                denied: bool = False) -> dict:
    return {"name": name, "uuid": f"GPU-{i:08x}-1111-2222-3333-444444444444", "minor": i if minor is None else minor,
            "denied": denied}


def fake_gpu_dir(root: Path, *, cuda: str | None = "13.0", torch_version: str = "2.11.0+cu130",
                 driver: str = "580.65.06", driver_cuda: int = 13000, devices: list[dict] | None = None,
                 nvml: bool = True, init_error: str | None = None) -> Path:
    """Write fake `torch` (unless cuda is None... then a CPU torch) and fake `pynvml` under `root`."""
    root.mkdir(parents=True, exist_ok=True)
    torch = root / "torch"
    torch.mkdir(exist_ok=True)
    (torch / "__init__.py").write_text(TORCH_INIT)
    (torch / "cuda.py").write_text(TORCH_CUDA.replace("True", "True" if cuda else "False"))
    (torch / "version.py").write_text(f"__version__ = {torch_version!r}\ncuda: 'str | None' = {cuda!r}\n"
                                      f"hip = None\n")
    if nvml:
        (root / "pynvml.py").write_text(PYNVML)
        facts = {"driver": driver, "driver_cuda": driver_cuda, "init_error": init_error,
                 "devices": devices if devices is not None else [fake_device(0)]}
        (root / "fake_nvml.json").write_text(json.dumps(facts))
    return root


MEMORY_SAVER = '''"""Fake torch_memory_saver 0.0.10 for tests without a GPU: its Python surface (one singleton, regions
keyed by tag in _impl._mem_pools, pause/resume per tag or all) with the library's failure modes: a
second pause or resume of a tag exits the process (its C++ exit(1)). Calls are recorded in CALLS."""
import contextlib
import os

CALLS = []


class _Impl:
    def __init__(self):
        self._mem_pools = {}
        self.paused = set()


class TorchMemorySaver:
    def __init__(self):
        self._impl = None

    def _ensure(self):
        if self._impl is None:
            self._impl = _Impl()

    @contextlib.contextmanager
    def region(self, tag="default", enable_cpu_backup=False, **kwargs):
        self._ensure()
        self._impl._mem_pools.setdefault((tag, enable_cpu_backup, False, "", 0), object())
        CALLS.append(("region", tag))
        yield

    @contextlib.contextmanager
    def cuda_graph(self, graph, tag="default", enable_cpu_backup=False, **kwargs):
        self._ensure()
        CALLS.append(("cuda_graph", tag))
        yield

    def _tags(self, tag):
        return [tag] if tag else sorted({k[0] for k in self._impl._mem_pools})

    def pause(self, tag=None):
        self._ensure()
        CALLS.append(("pause", tag))
        for t in self._tags(tag):
            if t in self._impl.paused:
                os._exit(1)
            self._impl.paused.add(t)

    def resume(self, tag=None):
        self._ensure()
        CALLS.append(("resume", tag))
        if os.environ.get("FAKE_TMS_RESUME_EXIT") == "1":
            os._exit(1)  # the library's answer to a failed cuMemCreate / cuMemMap
        for t in self._tags(tag):
            if t not in self._impl.paused:
                os._exit(1)
            self._impl.paused.discard(t)


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
