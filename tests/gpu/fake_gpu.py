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
