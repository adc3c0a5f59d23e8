"""Memory backends: the CPU backend really releases and restores pages; double pause/resume refused."""

from __future__ import annotations

import os

import pytest
import torch

from hpcplace.runtime.memory import (
    CpuBackend,
    MemoryBackendError,
    MemoryStateError,
    NoopBackend,
    TorchMemorySaverBackend,
    make_backend,
    torch_memory_saver_env,
    torch_memory_saver_unavailable_reason,
)

MIB = 1 << 20
HAS_GPU = torch_memory_saver_unavailable_reason(os.environ) is None


def rss_bytes() -> int:
    with open("/proc/self/smaps_rollup") as fh:
        for line in fh:
            if line.startswith("Rss:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no Rss line")


@pytest.mark.parametrize("backup", [True, False])
def test_cpu_backend_drops_rss_and_restores(backup: bool) -> None:
    memory = CpuBackend()
    memory.add_tag("weights", nbytes=64 * MIB, backup=backup)
    weights = memory.empty("weights", (16 * MIB,), torch.float32)  # 64 MiB
    generator = torch.Generator().manual_seed(0)
    weights.copy_(torch.rand(16 * MIB, generator=generator))
    expected = weights.clone()
    before = rss_bytes()
    memory.pause("weights")
    after_pause = rss_bytes()
    assert before - after_pause > 60 * MIB, (before, after_pause)
    memory.resume()
    if backup:
        assert torch.equal(weights, expected)
        assert rss_bytes() - after_pause > 60 * MIB
    else:
        assert not weights.any()  # released pages come back as zeros: contents were not kept
    del weights, expected
    memory.close()


def test_adopt_moves_a_module_and_survives_pause() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    x = torch.randn(4, 32)
    y = model(x)
    memory = CpuBackend()
    memory.adopt("weights", model, backup=True)
    region = memory.buffer("weights")
    base = torch.frombuffer(region, dtype=torch.uint8).data_ptr()
    assert all(base <= p.data_ptr() < base + memory.capacity("weights") for p in model.parameters())
    region.release()
    memory.pause()
    assert not model[0].weight.any()
    memory.resume()
    assert torch.equal(model(x), y)
    memory.close()


@pytest.mark.parametrize("factory", [CpuBackend, NoopBackend])
def test_double_pause_and_double_resume_are_refused(factory) -> None:
    memory = factory()
    memory.add_tag("weights", nbytes=MIB, backup=True)
    memory.add_tag("kv_cache", nbytes=MIB)
    with pytest.raises(MemoryStateError, match="double resume"):
        memory.resume("weights")
    memory.pause("kv_cache")
    with pytest.raises(MemoryStateError, match="double pause"):
        memory.pause("kv_cache")
    with pytest.raises(MemoryStateError, match="double pause"):
        memory.pause()  # all tags: kv_cache is already paused
    assert memory.state("weights") == "resident"  # a refused pause changes nothing
    memory.pause("weights")
    assert memory.all_paused
    with pytest.raises(MemoryStateError, match="paused memory tag"):
        memory.empty("weights", (4,), torch.float32)
    memory.resume()
    with pytest.raises(MemoryBackendError, match="unknown memory tag"):
        memory.pause("nope")
    with pytest.raises(MemoryBackendError, match="already exists"):
        memory.add_tag("weights")
    memory.close()


def test_cpu_backend_reports_a_full_tag() -> None:
    memory = CpuBackend()
    memory.add_tag("kv_cache", nbytes=4096)
    memory.empty("kv_cache", (1024,), torch.float32)
    with pytest.raises(MemoryBackendError, match="full"):
        memory.empty("kv_cache", (1,), torch.float32)
    memory.close()


@pytest.mark.skipif(HAS_GPU, reason="checks the refusal on a machine without GPU")
def test_no_gpu_means_no_preload_and_a_clear_refusal() -> None:
    assert torch_memory_saver_env(dict(os.environ)) == {}
    assert torch_memory_saver_env({"CUDA_VISIBLE_DEVICES": "0"}) == {}
    with pytest.raises(MemoryBackendError, match="unavailable"):
        TorchMemorySaverBackend()
    assert isinstance(make_backend("auto"), CpuBackend)
    assert "LD_PRELOAD" not in os.environ or "torch_memory_saver" not in os.environ["LD_PRELOAD"]


def test_preload_is_never_offered_to_a_gpu_less_process() -> None:
    assert "CUDA_VISIBLE_DEVICES is empty" in (
        torch_memory_saver_unavailable_reason({"CUDA_VISIBLE_DEVICES": ""}) or ""
    )
    assert torch_memory_saver_env({"CUDA_VISIBLE_DEVICES": ""}) == {}
    with pytest.raises(MemoryBackendError, match="unknown memory backend"):
        make_backend("gpu")


def test_cpu_backend_without_torch_tensors_backs_up_allocated_bytes() -> None:
    memory = CpuBackend()
    memory.add_tag("state", nbytes=3 * 4096, backup=True)
    view = memory.allocate_bytes("state", 5000)
    view[:] = bytes(range(256)) * 19 + bytes(136)
    expected = bytes(view)
    memory.pause()
    assert bytes(view) == bytes(5000)
    memory.resume()
    assert bytes(view) == expected
    view.release()
    memory.close()
