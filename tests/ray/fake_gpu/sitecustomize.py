"""Test-only fake of NVML, the one layer a CPU machine lacks for Ray's GPU detection.

Put this directory on PYTHONPATH of the raylets (the `launch.env` of a test config) and every
Python process they start answers NVML queries as a node with GPUs would, the way the test
cluster fakes GPUs with GRES device files. Only `ray._private.thirdparty.pynvml` (the NVML binding
Ray ships, used by Ray's NVIDIA accelerator manager and by RLinf's) is patched, and only its
device enumeration: nothing of Ray's or a framework's placement or scheduling code.

The node's devices are those in CUDA_VISIBLE_DEVICES when the process *starts* (the raylet's
value: Ray rewrites it later for each task/actor, but NVML sees the node, not the process), or
FAKE_NVML_GPU_COUNT if set; the model name is FAKE_NVML_GPU_MODEL. With no devices NVML
fails to initialise, as on a CPU node. On a machine with real NVML (the GPU tier) the fake is
off: tests don't put it on the path, and FAKE_NVML=0 disables it anyway.
"""

import importlib.abc
import importlib.util
import os
import sys

_TARGET = "ray._private.thirdparty.pynvml"


def _planned_count() -> int:
    explicit = os.environ.get("FAKE_NVML_GPU_COUNT")
    if explicit is not None:
        return int(explicit)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return len([d for d in visible.split(",") if d.strip() and d != "NoDevFiles"])


_COUNT = _planned_count()
_MODEL = os.environ.get("FAKE_NVML_GPU_MODEL", "NVIDIA A800-SXM4-80GB")


def patch_nvml(mod, count=lambda: _COUNT, model=lambda: _MODEL) -> None:
    """Make the NVML binding `mod` report `count()` devices named `model()` (asked at each call, so
    tests/rlinf_offline.py can play several nodes in one process)."""
    error = mod.NVMLError

    def nvml_init(*_a, **_k):
        if count() <= 0:
            raise error(getattr(mod, "NVML_ERROR_LIBRARY_NOT_FOUND", 12))

    def device_count():
        return count()

    def handle_by_index(index):
        if not 0 <= int(index) < count():
            raise error(getattr(mod, "NVML_ERROR_INVALID_ARGUMENT", 2))
        return ("hpcplace-fake-gpu", int(index))

    mod.nvmlInit = nvml_init
    mod.nvmlInitWithFlags = lambda *_a, **_k: nvml_init()
    mod.nvmlShutdown = lambda: None
    mod.nvmlDeviceGetCount = device_count
    mod.nvmlDeviceGetHandleByIndex = handle_by_index
    mod.nvmlDeviceGetName = lambda _handle: model()
    mod.HPCPLACE_FAKE = {"count": count(), "model": model()}


class _Finder(importlib.abc.MetaPathFinder):
    """Patches the NVML binding right after Ray imports it (no import of Ray here)."""

    def find_spec(self, name, path=None, target=None):
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            patch_nvml(module)

        spec.loader.exec_module = exec_and_patch
        return spec


if __name__ == "sitecustomize" and os.environ.get("FAKE_NVML", "1") != "0":
    sys.meta_path.insert(0, _Finder())
