"""gpu_checks on a machine without a GPU: fake CUDA torch and fake NVML (tests/gpu/fake_gpu.py) on
PYTHONPATH of a child Python, and a file named like the preload hook mapped into this process."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcplace.runtime.gpu_checks import HOOK_STEM, allocator_bypass_problem, mapped_hook, memory_saver_hook_problem
from tests.gpu.fake_gpu import fake_gpu_dir


def driver_problem(fakes: Path | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if fakes is not None:
        env["PYTHONPATH"] = str(fakes)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from hpcplace.runtime.gpu_checks import cuda_driver_problem as p, "
            "torch_cuda_version as v; print(v()); print(p())",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_driver_older_than_the_torch_build_is_named_with_the_fix(tmp_path: Path) -> None:
    out = driver_problem(fake_gpu_dir(tmp_path, cuda="13.0", driver="550.54.15", driver_cuda=12040))
    assert out.startswith("13.0\n")
    assert (
        "the NVIDIA driver 550.54.15 supports CUDA up to 12.4; this torch was built for CUDA 13.0: "
        "install a torch built for CUDA <= 12.4"
    ) in out
    assert "download.pytorch.org/whl/cu124" in out and "or update the driver" in out


@pytest.mark.parametrize("cuda, driver_cuda", [("12.8", 12040), ("13.0", 13000), ("12.4", 13010)])
def test_driver_of_the_same_or_newer_major_is_fine(tmp_path: Path, cuda: str, driver_cuda: int) -> None:
    """CUDA minor-version compatibility: a 12.4 driver runs a torch built for 12.8."""
    assert driver_problem(fake_gpu_dir(tmp_path, cuda=cuda, driver_cuda=driver_cuda)).endswith("\nNone\n")


def test_not_applicable_without_cuda_torch_or_nvml(tmp_path: Path) -> None:
    assert driver_problem(fake_gpu_dir(tmp_path / "cpu", cuda=None, driver_cuda=12040)) == "None\nNone\n"
    assert driver_problem(fake_gpu_dir(tmp_path / "nonvml", cuda="13.0", nvml=False)) == "13.0\nNone\n"
    assert (
        driver_problem(
            fake_gpu_dir(tmp_path / "nodriver", cuda="13.0", driver_cuda=12040, init_error="Driver Not Loaded")
        )
        == "13.0\nNone\n"
    )


def test_the_real_cpu_torch_has_no_driver_problem() -> None:
    assert driver_problem(None) == "None\nNone\n"


@pytest.mark.parametrize("var", ["PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"])
def test_allocator_settings_that_bypass_the_hook(var: str) -> None:
    problem = allocator_bypass_problem({var: "max_split_size_mb:128, expandable_segments:True"})
    assert problem and var in problem and "remove expandable_segments:True" in problem
    problem = allocator_bypass_problem({var: "backend:cudaMallocAsync"})
    assert problem and "cudaMallocAsync" in problem
    assert allocator_bypass_problem({var: "expandable_segments:False,backend:native"}) is None


def test_hook_named_in_ld_preload_but_not_mapped_is_a_problem(tmp_path: Path) -> None:
    """The loader skips a preload it cannot load; the variable alone proves nothing."""
    assert mapped_hook() is None
    missing = str(tmp_path / f"{HOOK_STEM}_cu13.abi3.so")
    problem = memory_saver_hook_problem(environ={"LD_PRELOAD": missing})
    assert problem and "not mapped" in problem and "does not exist" in problem
    problem = memory_saver_hook_problem(environ={})
    assert problem and "not loaded" in problem and "hpcplace-run" in problem


def test_hook_mapped_into_the_process_passes_unless_bypassed(tmp_path: Path) -> None:
    hook = tmp_path / f"{HOOK_STEM}_cu13.abi3.so"
    hook.write_bytes(b"\0" * mmap.PAGESIZE)
    preload = {"LD_PRELOAD": f"/usr/lib/libjemalloc.so.2:{hook}"}
    with open(hook, "rb") as fh, mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ):
        assert mapped_hook() == str(hook)
        assert memory_saver_hook_problem(environ=preload) is None
        bypass = memory_saver_hook_problem(environ={**preload, "PYTORCH_ALLOC_CONF": "expandable_segments:True"})
        assert bypass and "PYTORCH_ALLOC_CONF" in bypass


@pytest.mark.parametrize("preload", ["", "{hook}:{hook}"])
def test_hook_mapped_but_not_named_once_in_ld_preload_is_a_problem(tmp_path: Path, preload: str) -> None:
    """torch_memory_saver opens its hook by the one LD_PRELOAD entry naming it (it asserts exactly one)."""
    hook = tmp_path / f"{HOOK_STEM}_cu13.abi3.so"
    hook.write_bytes(b"\0" * mmap.PAGESIZE)
    with open(hook, "rb") as fh, mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ):
        problem = memory_saver_hook_problem(environ={"LD_PRELOAD": preload.format(hook=hook)})
        assert problem and "is mapped, but LD_PRELOAD names" in problem and "exactly one" in problem
