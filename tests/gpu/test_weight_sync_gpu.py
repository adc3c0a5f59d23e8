"""GPU tier: weights from GPU tensors through the weight store's page-locked slots into GPU tensors (marker
`gpu`; scripts/gpu-tier.sh runs it, bench/bench_gpu_weight_sync.py measures the same path).

Skips where torch sees no CUDA device, or fails when HPCPLACE_REQUIRE_GPU=1, as the GPU-tier script sets."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest

from hpcplace.runtime import cuda_host
from hpcplace.runtime.weight_store import WeightPublisher, WeightReader, cleanup

pytestmark = pytest.mark.gpu


@pytest.fixture
def torch_cuda():
    import torch

    if not torch.cuda.is_available():
        reason = f"torch {torch.__version__} sees no CUDA device"
        if os.environ.get("HPCPLACE_REQUIRE_GPU") == "1":
            pytest.fail(f"GPU tier required but unavailable: {reason}")
        pytest.skip(f"GPU tier skipped: {reason}")
    torch.cuda.init()
    return torch


@pytest.fixture
def shm_job() -> Iterator[str]:
    """A job directory in /dev/shm, where the store lives in a job: CUDA pins a writable shared mapping of
    tmpfs, but not one of a disk file (the GPU tier saw that with a job under /var/tmp)."""
    job = tempfile.mkdtemp(prefix="hpcplace-gpu-test-", dir="/dev/shm")
    yield job
    cleanup(job)


def test_weights_cross_gpu_shm_gpu_exactly_through_pinned_slots(torch_cuda, shm_job: str) -> None:
    torch = torch_cuda
    g = torch.Generator(device="cuda").manual_seed(0)
    trainer = {
        "model.layers.0.mlp.up_proj.weight": torch.randn(4096, 1024, device="cuda", generator=g).to(torch.bfloat16),
        "model.norm.weight": torch.randn(1024, device="cuda", generator=g),
        "step": torch.tensor(1, device="cuda"),
    }
    inference = {n: torch.zeros_like(t) for n, t in trainer.items()}
    assert cuda_host.unavailable_reason() is None
    with WeightPublisher(shm_job, "actor-0") as publisher, WeightReader(shm_job, "actor-0") as reader:
        for version in (1, 2):  # both slots, each pinned when mapped
            publisher.publish(trainer)
            with reader.consume(min_version=version) as snap:
                snap.copy_into(inference)
            torch.cuda.synchronize()
            assert all(torch.equal(inference[n], t) for n, t in trainer.items()), f"version {version}"
            for t in trainer.values():
                t.add_(1)
        slots = [*publisher._slots, *reader._slots.values()]
        assert len(slots) == 4 and all(s.pinned for s in slots), [(s.writable, s.pinned) for s in slots]
    assert not any(s.pinned for s in slots)  # unregistered before unmapping
