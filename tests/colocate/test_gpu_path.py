"""The GPU memory path without a GPU: fakes only at the library boundary (a fake torch_memory_saver
package, a fake CUDA torch + fake NVML for another interpreter, torch.cuda's availability, a file named
like the preload hook mapped into this process, the NVIDIA control device path)."""

from __future__ import annotations

import mmap
import os
import sys
import warnings
from pathlib import Path

import pytest
import torch

from hpcplace.runtime import devices, gpu_checks, memory, preload
from hpcplace.runtime.memory import (
    CpuBackend,
    MemoryBackendError,
    MemoryStateError,
    TorchMemorySaverBackend,
    make_backend,
)
from tests.gpu.fake_gpu import fake_gpu_dir, fake_memory_saver


@pytest.fixture
def fake_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """This process as a GPU process: a fake torch_memory_saver importable, its hook mapped, torch CUDA."""
    site = fake_memory_saver(tmp_path / "site")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "torch_memory_saver", raising=False)
    control = tmp_path / "nvidiactl"
    control.write_bytes(b"")
    monkeypatch.setattr(devices, "NVIDIA_CONTROL", str(control))
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for var in gpu_checks.ALLOC_CONF_VARS:
        monkeypatch.delenv(var, raising=False)
    hook = site / f"{gpu_checks.HOOK_STEM}_cu13.abi3.so"
    hook.write_bytes(b"\0" * mmap.PAGESIZE)
    monkeypatch.setenv("LD_PRELOAD", str(hook))  # what the library opens its hook by (not what is mapped)
    with open(hook, "rb") as fh, mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ):
        yield site
    if memory.active_backend() is not None:
        memory.active_backend().close()
    sys.modules.pop("torch_memory_saver", None)


def calls() -> list:
    return sys.modules["torch_memory_saver"].CALLS


def test_backend_uses_hpcplace_tags_and_refuses_a_paused_region(fake_gpu: Path) -> None:
    backend = TorchMemorySaverBackend()
    backend.add_tag("weights", backup=True)
    with backend.region("weights"):
        pass
    backend.pause("weights")
    with pytest.raises(MemoryStateError, match="paused memory tag 'weights'"), backend.region("weights"):
        pass
    with pytest.raises(MemoryStateError, match="paused"), backend.cuda_graph(object(), tag="weights"):
        pass
    backend.resume("weights")
    assert calls() == [
        ("retain_cpu_backup", True),
        ("region", "hpcplace.weights", "pinned"),
        ("pause", "hpcplace.weights"),
        ("resume", "hpcplace.weights"),
    ]


def test_the_pinned_backup_is_kept_between_turns_unless_turned_off(fake_gpu: Path, monkeypatch) -> None:
    """The GPU tier measured a 4 GiB offload+onload at 0.08x a plain copy when torch_memory_saver pins a new
    backup at every pause, 0.95x when it keeps it: hpcplace keeps it unless told not to."""
    import torch_memory_saver

    library = torch_memory_saver.torch_memory_saver
    backend = TorchMemorySaverBackend()
    assert library.retain_cpu_backup is True and backend.retain_cpu_backup is True
    backend.close()
    monkeypatch.setenv(memory.RETAIN_VARIABLE, "0")
    monkeypatch.setenv(memory.CPU_BACKUP_VARIABLE, "mmap")
    backend = TorchMemorySaverBackend()
    assert library.retain_cpu_backup is False
    backend.add_tag("weights", backup=True)
    backend.add_tag("kv_cache", backup=False)
    with backend.region("weights"), backend.region("kv_cache"):
        pass
    assert calls()[-2:] == [("region", "hpcplace.weights", "mmap"), ("region", "hpcplace.kv_cache")]
    backend.close()
    assert TorchMemorySaverBackend(retain_cpu_backup=True).retain_cpu_backup is True
    memory.active_backend().close()
    monkeypatch.setenv(memory.CPU_BACKUP_VARIABLE, "disk")
    with pytest.raises(MemoryBackendError, match="unknown torch_memory_saver CPU backup 'disk'") as refused:
        TorchMemorySaverBackend()
    assert "pinned, mmap" in str(refused.value)


def test_one_backend_per_process_and_tags_of_another_library_are_refused(fake_gpu: Path) -> None:
    import torch_memory_saver

    with torch_memory_saver.torch_memory_saver.region(tag="hpcplace.kv_cache"):  # someone else's region
        pass
    with torch_memory_saver.torch_memory_saver.region(tag="weights"):  # SGLang's tag: no clash any more
        pass
    first = TorchMemorySaverBackend()
    with pytest.raises(MemoryBackendError, match="already exists in this process"):
        TorchMemorySaverBackend()
    assert make_backend("auto") is first  # auto shares the process's backend
    first.add_tag("weights")
    with pytest.raises(MemoryBackendError, match=r"'hpcplace\.kv_cache' is already in use by another"):
        first.add_tag("kv_cache")
    assert first.tags == ("weights",)
    first.pause()
    with pytest.raises(MemoryStateError, match="cannot close with paused"):
        first.close()
    first.resume()
    first.close()
    TorchMemorySaverBackend().close()


@pytest.mark.parametrize(
    "var, setting",
    [("PYTORCH_ALLOC_CONF", "expandable_segments:True"), ("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync")],
)
def test_allocator_settings_that_bypass_the_hook_are_refused(fake_gpu: Path, monkeypatch, var, setting) -> None:
    monkeypatch.setenv(var, setting)
    with pytest.raises(MemoryBackendError, match=f"{var}.*pause frees nothing"):
        TorchMemorySaverBackend()


def test_auto_refuses_the_silent_cpu_fallback_and_warns_when_asked(fake_gpu: Path, tmp_path: Path, monkeypatch) -> None:
    model = torch.nn.Linear(4, 4, device="meta")  # a device tensor on a CPU machine
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True")
    with pytest.raises(MemoryBackendError, match="expandable segments") as refused:
        make_backend("auto")
    assert "cpu_fallback=True" in str(refused.value)
    with pytest.warns(RuntimeWarning, match="CPU stand-in as asked"):
        backend = make_backend("auto", cpu_fallback=True)
    assert isinstance(backend, CpuBackend)
    with pytest.raises(MemoryBackendError, match=r"refusing to adopt 'weights'.*meta"):
        CpuBackend().adopt("weights", model)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(NotImplementedError):  # a meta tensor has no data to copy; the warning came first
            backend.adopt("weights", model)
    assert any("moves its tensors from meta" in str(w.message) for w in seen)


def test_no_hook_in_the_process_is_named(fake_gpu: Path, monkeypatch) -> None:
    monkeypatch.setattr(gpu_checks, "HOOK_STEM", "not-mapped-anywhere")
    monkeypatch.delenv("LD_PRELOAD")
    with pytest.raises(MemoryBackendError, match="hook is not loaded"):
        TorchMemorySaverBackend()


def test_a_mapped_hook_that_ld_preload_no_longer_names_is_refused(fake_gpu: Path, monkeypatch) -> None:
    """The library opens its hook by the one LD_PRELOAD entry naming it: without it, its first region would
    fail an assertion, so the backend refuses up front (and the fake library fails like the real one)."""
    monkeypatch.delenv("LD_PRELOAD")
    with pytest.raises(MemoryBackendError, match="LD_PRELOAD names 0 torch_memory_saver entries"):
        TorchMemorySaverBackend()
    import torch_memory_saver

    with (
        pytest.raises(AssertionError, match="invalid LD_PRELOAD"),
        torch_memory_saver.torch_memory_saver.region(tag="weights"),
    ):
        pass


def test_the_fake_library_exits_like_the_real_one(fake_gpu: Path) -> None:
    """Per allocation, as in csrc/core.cpp: a tag without allocations pauses as a no-op; pausing a paused
    tag, or resuming one that got new memory while paused, exits the process."""
    import subprocess

    preload = os.environ["LD_PRELOAD"]  # for the fake library only (set inside), never for the child's loader
    script = (
        f"import os, sys; sys.path.insert(0, {str(fake_gpu)!r}); os.environ['LD_PRELOAD'] = {preload!r}\n"
        "from torch_memory_saver import torch_memory_saver as t\n"
        "t.pause('empty'); t.pause('empty'); t.resume('empty')\n"
        "with t.region(tag='w'): pass\n"
        "t.pause('w'); print('paused', flush=True)\n"
        "with t.region(tag='w'): pass\n"
        "t.resume('w'); print('not reached')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert (done.returncode, done.stdout) == (1, "paused\n"), done.stderr


def test_auto_on_a_machine_without_gpu_is_the_cpu_backend() -> None:
    assert isinstance(make_backend("auto"), CpuBackend)


# ---- the preload: the program's interpreter, its torch, its libcudart ------------------------------


def other_python(tmp_path: Path, cuda: str = "13.0") -> tuple[Path, Path]:
    """A Python of another venv (a wrapper of this one that sees a fake CUDA torch + torch_memory_saver)."""
    site = fake_memory_saver(fake_gpu_dir(tmp_path / "site", cuda=cuda))
    (site / "nvidia" / "cu13" / "lib").mkdir(parents=True)
    (site / "nvidia" / "cu13" / "lib" / "libcudart.so.13").write_bytes(b"")
    bindir = tmp_path / "venv" / "bin"
    bindir.mkdir(parents=True)
    python = bindir / "python3"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return python, site


def test_hook_and_libcudart_come_from_the_programs_python(tmp_path: Path) -> None:
    python, site = other_python(tmp_path)
    script = tmp_path / "venv" / "bin" / "torchrun"
    script.write_text(f"#!{python}\nprint('hi')\n")
    script.chmod(0o755)
    env = {"PATH": f"{python.parent}:/usr/bin:/bin"}
    assert preload.program_python([str(python), "train.py"], env) == str(python)
    assert preload.program_python(["torchrun", "train.py"], env) == str(python)
    assert preload.program_python([sys.executable, "x.py"], env) is None
    packages = preload.packages_for(["python3", "train.py"], env)
    assert packages.python == str(python) and packages.torch == str(site / "torch")
    assert preload.hook_library(packages) == (str(site / f"{gpu_checks.HOOK_STEM}_cu13.abi3.so"), 13)
    other = tmp_path / "module-cuda-13.1" / "lib64"  # a `module load cuda` on LD_LIBRARY_PATH
    other.mkdir(parents=True)
    (other / "libcudart.so.13").write_bytes(b"")
    directory, why = preload.cudart_choice(13, packages, {"LD_LIBRARY_PATH": str(other)})
    assert directory == str(site / "nvidia" / "cu13" / "lib") and "beside torch" in why
    bare = preload.Packages("python", None, str(site / "torch_memory_saver"))
    assert preload.cudart_choice(13, bare, {"LD_LIBRARY_PATH": str(other)}) == (
        "",
        f"libcudart.so.13 from LD_LIBRARY_PATH ({other}); none beside torch",
    )
    assert preload.cudart_choice(99, bare, {})[0] is None


def test_no_preload_without_a_gpu_whatever_the_packages(tmp_path: Path) -> None:
    python, _ = other_python(tmp_path)
    changes, why = preload.preload_env({"PATH": "/usr/bin:/bin"}, command=[str(python), "x.py"])
    assert changes == {} and "no NVIDIA GPU" in why


def test_memory_saver_preload_gate(fake_gpu: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One gate for the shim, the preflight and local runs: a GPU node, unless HPCPLACE_MEMORY_SAVER=0."""
    from hpcplace.local import local_backend

    assert devices.preload_wanted({})
    assert not devices.preload_wanted({"HPCPLACE_MEMORY_SAVER": "0"})
    assert local_backend.memory_saver_env({"HPCPLACE_MEMORY_SAVER": "0"}, ("python", "x.py")) == {}
    monkeypatch.setattr(devices, "NVIDIA_CONTROL", "/nonexistent/nvidiactl")
    assert not devices.preload_wanted({})


def test_adopt_copies_into_the_region_even_what_is_already_on_the_gpu(fake_gpu: Path) -> None:
    """`module.to("cuda")` keeps tensors already on the GPU where they are (outside the region, so a pause
    would free nothing): adopt copies every parameter and buffer inside the region."""

    class Data(str):
        def to(self, device: str, copy: bool = False) -> str:
            calls().append(("to", str(self), device, copy))
            return f"{device} copy of {self}"

    class Tensor:
        def __init__(self, where: str) -> None:
            self.data: object = Data(where)

    class Module:
        weight, buffer = Tensor("cuda:0"), Tensor("cpu")

        def parameters(self) -> list[Tensor]:
            return [self.weight]

        def buffers(self) -> list[Tensor]:
            return [self.buffer]

    module = Module()
    TorchMemorySaverBackend().adopt("weights", module)
    assert calls() == [
        ("retain_cpu_backup", True),
        ("region", "hpcplace.weights", "pinned"),
        ("to", "cuda:0", "cuda", True),
        ("to", "cpu", "cuda", True),
    ]
    assert (module.weight.data, module.buffer.data) == ("cuda copy of cuda:0", "cuda copy of cpu")
