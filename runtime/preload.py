"""torch_memory_saver's LD_PRELOAD for a program that offloads GPU memory: which hook library, which
libcudart it binds to, and whether it may be set at all. Stdlib only (the shim's hot path).

The hook (torch_memory_saver_hook_mode_preload_cu<major>.abi3.so) interposes cudaMalloc/cudaFree, so it
must match the CUDA major of the PROGRAM's torch, and it must bind to the same libcudart as that torch:
the first libcudart.so.<major> loaded (the hook's, as it is preloaded) is the one the whole process
uses. So the packages are looked up with the program's Python when that is another interpreter (a
different venv), and the libcudart beside that torch (torch/lib or nvidia/*/lib of its site-packages)
is put first on LD_LIBRARY_PATH. Its LD_PRELOAD stops every process from starting where no libcuda
exists, hence the checks and the /bin/true probe.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hpcplace.runtime import devices
from hpcplace.runtime.gpu_checks import HOOK_STEM, package_dir, torch_cuda_major
from hpcplace.runtime.programs import shebang_words

# Printed by the program's interpreter: where it finds the two packages (find_spec imports neither).
_LOCATE = (
    "import importlib.util as u, json\n"
    "def d(n):\n"
    "    s = u.find_spec(n)\n"
    "    return list(s.submodule_search_locations)[0] if s and s.submodule_search_locations else None\n"
    "print(json.dumps({'torch': d('torch'), 'torch_memory_saver': d('torch_memory_saver')}))\n"
)
_PYTHON_NAME = re.compile(r"^python(\d+(\.\d+)?)?$")


@dataclass(frozen=True)
class Packages:
    """Where one interpreter finds torch and torch_memory_saver (package directories; None: missing)."""

    python: str
    torch: str | None
    torch_memory_saver: str | None


def local_packages() -> Packages:
    return Packages(sys.executable, package_dir("torch"), package_dir("torch_memory_saver"))


def program_python(command: Sequence[str], environ: Mapping[str, str]) -> str | None:
    """The interpreter that will run `command` when it is a Python other than this one: argv[0] itself
    (python, python3.12, a venv's bin/python) or the `#!` line of a script (torchrun, a console script)."""
    if not command:
        return None
    program = command[0]
    if "/" not in program:
        dirs = (environ.get("PATH") or os.defpath).split(os.pathsep)
        found = [os.path.join(d, program) for d in dirs if os.access(os.path.join(d or ".", program), os.X_OK)]
        if not found:
            return None
        program = found[0]
    python = program if _PYTHON_NAME.match(os.path.basename(program)) else _shebang_python(program)
    if python is None or os.path.realpath(python) == os.path.realpath(sys.executable):
        return None
    return python if os.access(python, os.X_OK) else None


def _shebang_python(path: str) -> str | None:
    words = shebang_words(path)
    if words and os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
        return None if not words or not _PYTHON_NAME.match(words[0]) else _which(words[0])
    return words[0] if words and _PYTHON_NAME.match(os.path.basename(words[0])) else None


def _which(name: str) -> str | None:
    for d in (os.environ.get("PATH") or os.defpath).split(os.pathsep):
        if os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    return None


def packages_for(command: Sequence[str], environ: Mapping[str, str]) -> Packages:
    """The packages the program will import: this interpreter's, or asked from the program's Python
    (one short subprocess, only when the program runs another interpreter)."""
    python = program_python(command, environ)
    if python is None:
        return local_packages()
    env = {k: v for k, v in environ.items() if k not in ("LD_PRELOAD", "PYTHONSTARTUP")}
    try:
        done = subprocess.run([python, "-c", _LOCATE], env=env, capture_output=True, text=True, timeout=60)
        found = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        found = None
    if not isinstance(found, dict):
        return Packages(python, None, None)
    return Packages(python, found.get("torch"), found.get("torch_memory_saver"))


def hook_library(packages: Packages) -> tuple[str, int] | None:
    """(path of the preload hook for the program's torch CUDA major, that major), None when torch is not a
    CUDA build or the installed torch_memory_saver has no hook for it."""
    major = torch_cuda_major(packages.torch) if packages.torch else None
    if major is None or packages.torch_memory_saver is None:
        return None
    for where in (packages.torch_memory_saver, os.path.dirname(packages.torch_memory_saver)):
        path = os.path.join(where, f"{HOOK_STEM}_cu{major}.abi3.so")
        if os.path.isfile(path):
            return path, major
    return None


def _nvidia_lib_dirs(site: str, major: int) -> list[str]:
    """nvidia/<pkg>/lib directories of a site-packages, the CUDA runtime's own first
    (nvidia/cuda_runtime for CUDA 12 wheels, nvidia/cu13 for CUDA 13)."""
    nvidia = os.path.join(site, "nvidia")
    subs = sorted(os.listdir(nvidia)) if os.path.isdir(nvidia) else []
    first = [s for s in ("cuda_runtime", f"cu{major}") if s in subs]
    return [os.path.join(nvidia, s, "lib") for s in first + [s for s in subs if s not in first]]


def cudart_choice(major: int, packages: Packages, environ: Mapping[str, str]) -> tuple[str | None, str]:
    """(directory to put first on LD_LIBRARY_PATH, or "" when the loader's own choice is right, or None
    when libcudart.so.<major> is nowhere; a sentence saying which libcudart was chosen).

    Beside torch first (torch/lib, then nvidia/*/lib of torch's site-packages): that is the libcudart torch
    was built and tested with; a `module load cuda` of another minor version on LD_LIBRARY_PATH would
    otherwise win through the preloaded hook."""
    name = f"libcudart.so.{major}"
    if packages.torch:
        for d in [os.path.join(packages.torch, "lib"), *_nvidia_lib_dirs(os.path.dirname(packages.torch), major)]:
            if os.path.isfile(os.path.join(d, name)):
                return d, f"{name} beside torch ({d})"
    for d in environ.get("LD_LIBRARY_PATH", "").split(":"):
        if d and os.path.isfile(os.path.join(d, name)):
            return "", f"{name} from LD_LIBRARY_PATH ({d}); none beside torch"
    try:
        ctypes.CDLL(name)
        return "", f"{name} from the system's loader path; none beside torch"
    except OSError:
        pass
    if packages.torch_memory_saver:
        for d in _nvidia_lib_dirs(os.path.dirname(packages.torch_memory_saver), major):
            if os.path.isfile(os.path.join(d, name)):
                return d, f"{name} beside torch_memory_saver ({d}); none beside torch"
    return None, f"{name} is neither beside torch, on the loader's path, nor in a pip nvidia package"


def unavailable_reason(environ: Mapping[str, str], packages: Packages | None = None) -> str | None:
    """Why the preload must NOT be set for a process with `environ` (None: it can be)."""
    packages = packages or local_packages()
    if environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        return "the process sees no GPU (CUDA_VISIBLE_DEVICES is empty)"
    if not os.path.exists(devices.NVIDIA_CONTROL):
        return f"no NVIDIA GPU on this node ({devices.NVIDIA_CONTROL} is missing)"
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "libcuda.so.1 cannot be loaded on this node"
    if packages.torch_memory_saver is None:
        return f"torch_memory_saver is not installed for {packages.python} (pip install torch_memory_saver)"
    if packages.torch is None or torch_cuda_major(packages.torch) is None:
        return f"the torch of {packages.python} is missing or not a CUDA build"
    found = hook_library(packages)
    if found is None:
        return (
            f"torch_memory_saver ({packages.torch_memory_saver}) has no preload hook for CUDA "
            f"{torch_cuda_major(packages.torch)} (this torch's CUDA major)"
        )
    directory, why = cudart_choice(found[1], packages, environ)
    return None if directory is not None else f"{why} (the preload hook needs it)"


def preload_env(
    environ: Mapping[str, str], *, command: Sequence[str] = (), probe: bool = True, packages: Packages | None = None
) -> tuple[dict[str, str], str]:
    """(variables to add for a program that uses torch_memory_saver, a sentence saying what was chosen or
    why nothing was). Empty unless a GPU and libcuda are present; with `probe`, /bin/true is started
    with the result first, so a preload that would stop every process from starting is never returned."""
    packages = packages or packages_for(command, environ)
    reason = unavailable_reason(environ, packages)
    if reason is not None:
        return {}, f"torch_memory_saver not preloaded: {reason}"
    found = hook_library(packages)
    assert found is not None
    lib, major = found
    current = [p for p in environ.get("LD_PRELOAD", "").split(":") if p]
    if any("torch_memory_saver" in p for p in current):
        return {}, "torch_memory_saver already in LD_PRELOAD"
    changes = {"LD_PRELOAD": ":".join([lib, *current])}
    directory, why = cudart_choice(major, packages, environ)
    if directory:
        rest = [p for p in environ.get("LD_LIBRARY_PATH", "").split(":") if p and p != directory]
        changes["LD_LIBRARY_PATH"] = ":".join([directory, *rest])
    if probe:
        true = "/bin/true" if os.path.exists("/bin/true") else "/usr/bin/true"
        try:
            ok = subprocess.run([true], env={**environ, **changes}, capture_output=True, timeout=30).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if not ok:
            return {}, f"torch_memory_saver not preloaded: a process with LD_PRELOAD={lib} did not start"
    return changes, f"torch_memory_saver preloaded for {packages.python}: {lib}; {why}"
