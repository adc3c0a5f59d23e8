"""Page-lock (pin) host memory that is already mapped, so GPU copies from and to it run at full bandwidth.

The weight store's slots are /dev/shm mappings; copies between them and a GPU go through a bounce buffer
unless the pages are registered with CUDA (cudaHostRegister). On an H200 that is 16 GB/s device->host and
9 GB/s host->device instead of 54 GB/s both ways (docs/benchmarks.md, "GPU"). Pinning is only tried in a
process whose torch already initialized CUDA (a GPU trainer or inference rank: never one on a CPU node),
through the libcudart that torch loaded (found by its soname), and a failure is answered, never raised:
the copies then stay pageable. HPCPLACE_WEIGHT_STORE_PIN=0 turns it off. Stdlib only at import.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from collections.abc import Mapping

PIN_VARIABLE = "HPCPLACE_WEIGHT_STORE_PIN"
PORTABLE = 0x01  # cudaHostRegisterPortable: pinned for every CUDA context of the process
READ_ONLY = 0x08  # cudaHostRegisterReadOnly: the mapping is PROT_READ (a weight reader's)


def unavailable_reason(environ: Mapping[str, str] | None = None) -> str | None:
    """Why this process does not pin (None: it can try)."""
    environ = os.environ if environ is None else environ
    if environ.get(PIN_VARIABLE, "1") == "0":
        return f"{PIN_VARIABLE}=0"
    torch = sys.modules.get("torch")
    if torch is None or torch.version.cuda is None or not torch.cuda.is_initialized():
        return "this process has not initialized CUDA"
    if _loaded() is None:
        return f"libcudart.so.{str(torch.version.cuda).split('.')[0]} is not loaded in this process"
    return None


@functools.cache
def _cudart(major: str) -> ctypes.CDLL | None:
    """torch's own libcudart (dlopen by soname returns the copy already loaded), with the three calls typed."""
    try:
        lib = ctypes.CDLL(f"libcudart.so.{major}")
    except OSError:
        return None
    lib.cudaHostRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
    lib.cudaHostRegister.restype = ctypes.c_int
    lib.cudaHostUnregister.argtypes = [ctypes.c_void_p]
    lib.cudaHostUnregister.restype = ctypes.c_int
    lib.cudaGetLastError.restype = ctypes.c_int
    return lib


def _loaded() -> ctypes.CDLL | None:
    torch = sys.modules.get("torch")
    return None if torch is None or torch.version.cuda is None else _cudart(str(torch.version.cuda).split(".")[0])


def register(address: int, size: int, *, read_only: bool) -> str | None:
    """Pin [address, address+size) for every CUDA context of the process. None when pinned, else why not
    (the CUDA error is then cleared, so no later CUDA call of torch reports it as its own)."""
    lib = _loaded()
    if lib is None:
        return "libcudart is not loaded in this process"
    code = lib.cudaHostRegister(address, size, PORTABLE | (READ_ONLY if read_only else 0))
    if code != 0:
        lib.cudaGetLastError()
        return f"cudaHostRegister failed with CUDA error {code}"
    return None


def unregister(address: int) -> None:
    """Undo `register` (before the memory is unmapped)."""
    lib = _loaded()
    if lib is not None and lib.cudaHostUnregister(address) != 0:
        lib.cudaGetLastError()
