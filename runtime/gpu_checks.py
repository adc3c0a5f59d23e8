"""Why a GPU run cannot work here, in words: the checks behind the GPU memory backend and the per-node
preflight.

Each `*_problem()` returns None when all is well (or the check does not apply: no torch, a CPU torch, no
NVML) and otherwise one message that names the cause and the fix. Stdlib only at import: torch is never
imported (its version is read from torch/version.py), NVML (nvidia-ml-py's `pynvml`) is imported inside
the functions. The names `cuda_driver_problem` and `memory_saver_hook_problem` are a stable interface
(the preflight calls them).
"""

from __future__ import annotations

import ast
import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass

# torch_memory_saver's preload hook library: torch_memory_saver_hook_mode_preload_cu<major>.abi3.so
HOOK_STEM = "torch_memory_saver_hook_mode_preload"
ALLOC_CONF_VARS = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")


# --------------------------------------------------------------------------- torch (without importing it)


def package_dir(name: str) -> str | None:
    """The directory of an installed top-level package, found without importing it (None: not installed)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return next(iter(spec.submodule_search_locations))


def torch_cuda_version(torch_dir: str | None = None) -> str | None:
    """`torch.version.cuda` ("13.0") read from torch/version.py without importing torch (the shim and the
    preflight stay light). None when torch is absent or a CPU/ROCm build. `torch_dir`: another
    interpreter's torch package (default: this one's)."""
    torch_dir = torch_dir or package_dir("torch")
    if torch_dir is None:
        return None
    path = os.path.join(torch_dir, "version.py")
    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
    except (OSError, SyntaxError):
        return None
    for node in tree.body:
        target: ast.expr | None = None
        assigned: ast.expr | None = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, assigned = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, assigned = node.target, node.value
        if isinstance(target, ast.Name) and target.id == "cuda" and assigned is not None:
            value = assigned.value if isinstance(assigned, ast.Constant) else None
            return value if isinstance(value, str) and _parse_version(value) is not None else None
    return None


def torch_cuda_major(torch_dir: str | None = None) -> int | None:
    version = _parse_version(torch_cuda_version(torch_dir) or "")
    return None if version is None else version[0]


def _parse_version(text: str) -> tuple[int, int] | None:
    parts = text.strip().split(".")
    if not parts[0].isdigit():
        return None
    return int(parts[0]), int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


# --------------------------------------------------------------------------- the driver (NVML)


@dataclass(frozen=True)
class DriverInfo:
    """What NVML says about the NVIDIA driver: its version ("550.54.15") and the newest CUDA it supports."""

    version: str
    cuda: tuple[int, int]

    @property
    def cuda_text(self) -> str:
        return f"{self.cuda[0]}.{self.cuda[1]}"


def driver_info() -> DriverInfo | None:
    """The driver's facts from NVML, None where nvidia-ml-py is missing or NVML cannot start (no driver)."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - pynvml.NVMLError and its many subclasses: no driver, no permission
        return None
    try:
        version = pynvml.nvmlSystemGetDriverVersion()
        cuda = int(pynvml.nvmlSystemGetCudaDriverVersion())  # e.g. 12040 for CUDA 12.4
    except Exception:  # noqa: BLE001 - NVMLError subclasses: a driver too old to say
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - the versions are read; a failing shutdown changes nothing
            pass
    if isinstance(version, bytes):  # nvidia-ml-py < 12 returned bytes
        version = version.decode("utf-8", "replace")
    return DriverInfo(version=str(version), cuda=(cuda // 1000, cuda % 1000 // 10))


def cuda_driver_problem() -> str | None:
    """Why this torch cannot use the GPU because the driver is too old for the CUDA it was built for, or None.

    CUDA's minor-version compatibility lets a driver run any runtime of its own major (12.8 on a 12.4
    driver), so only a newer major than the driver supports is a certain failure ("CUDA driver version is
    insufficient"; torch.cuda.is_available() is then False)."""
    wanted = _parse_version(torch_cuda_version() or "")
    if wanted is None:
        return None
    driver = driver_info()
    if driver is None or driver.cuda[0] >= wanted[0]:
        return None
    have = driver.cuda_text
    return (
        f"the NVIDIA driver {driver.version} supports CUDA up to {have}; this torch was built for CUDA "
        f"{wanted[0]}.{wanted[1]}: install a torch built for CUDA <= {have} (e.g. pip install torch "
        f"--index-url https://download.pytorch.org/whl/cu{driver.cuda[0]}{driver.cuda[1]}) or update the driver"
    )


# --------------------------------------------------------------------------- torch_memory_saver's hook


def allocator_bypass_problem(environ: Mapping[str, str] | None = None) -> str | None:
    """Allocator settings under which torch allocates without cudaMalloc, so the preload hook never sees the
    memory and a pause frees nothing: expandable segments (cuMemCreate/cuMemMap) and the cudaMallocAsync
    backend. torch reads PYTORCH_ALLOC_CONF and its older name PYTORCH_CUDA_ALLOC_CONF; both are checked."""
    env = os.environ if environ is None else environ
    for var in ALLOC_CONF_VARS:
        for item in env.get(var, "").split(","):
            key, _, value = (s.strip() for s in item.partition(":"))
            if key == "expandable_segments" and value.lower() == "true":
                return (
                    f"{var}={env[var]!r} turns on expandable segments: torch then maps memory with "
                    f"cuMemCreate/cuMemMap, which torch_memory_saver's hook never sees, so a pause frees "
                    f"nothing: remove expandable_segments:True from {var} for offloading components"
                )
            if key == "backend" and value == "cudaMallocAsync":
                return (
                    f"{var}={env[var]!r} selects the cudaMallocAsync allocator, which torch_memory_saver's "
                    f"hook never sees, so a pause frees nothing: remove backend:cudaMallocAsync from {var} "
                    f"for offloading components"
                )
    return None


def mapped_hook(pid: int | str = "self") -> str | None:
    """The path of torch_memory_saver's preload hook if it is mapped into process `pid`, else None.
    The loader silently skips an LD_PRELOAD entry it cannot load, so the variable alone proves nothing."""
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                fields = line.split(maxsplit=5)
                path = fields[5].strip() if len(fields) == 6 else ""
                if HOOK_STEM in os.path.basename(path):
                    return path
    except OSError:
        return None
    return None


def memory_saver_hook_problem(pid: int | str = "self", environ: Mapping[str, str] | None = None) -> str | None:
    """Why torch_memory_saver cannot release GPU memory in process `pid` (this one by default) whose
    environment is `environ`, or None: its preload hook must really be mapped there (read from
    /proc/<pid>/maps, not LD_PRELOAD), LD_PRELOAD must name it exactly once (the library opens it by that
    name) and the allocator settings must not bypass it.
    Call it where offload is expected; a process that does not offload needs no hook."""
    env = os.environ if environ is None else environ
    hook = mapped_hook(pid)
    if hook is None:
        named = [p for p in env.get("LD_PRELOAD", "").replace(" ", ":").split(":") if "torch_memory_saver" in p]
        if named:
            missing = [p for p in named if not os.path.isfile(p)]
            why = f"{missing[0]} does not exist" if missing else "the loader could not load it (see ldd on it)"
            return (
                f"LD_PRELOAD names {named[0]} but the hook is not mapped into the process: {why}; "
                f"start it through hpcplace-run, which sets a preload that loads"
            )
        return (
            "torch_memory_saver's preload hook is not loaded in this process (LD_PRELOAD does not name "
            "it): start it through hpcplace-run for an offloading component, or set LD_PRELOAD to "
            f"{HOOK_STEM}_cu<major>.abi3.so from the torch_memory_saver package"
        )
    # The library opens its hook by the one LD_PRELOAD entry naming it (hooks/mode_preload.py asserts
    # exactly one), not by what is mapped: a variable changed after the start fails its first region.
    named = [p for p in env.get("LD_PRELOAD", "").split(":") if "torch_memory_saver" in p]
    if len(named) != 1:
        return (
            f"torch_memory_saver's hook {hook} is mapped, but LD_PRELOAD names {len(named)} torch_memory_saver "
            f"entries ({env.get('LD_PRELOAD', '')!r}); the library finds its hook through exactly one: keep "
            f"LD_PRELOAD as hpcplace-run set it"
        )
    return allocator_bypass_problem(env)
