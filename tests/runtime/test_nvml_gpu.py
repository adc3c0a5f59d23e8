"""GPU tier: the shim's NVML check on a real GPU (marker `gpu`).

Skips with the reason where NVML (nvidia-ml-py plus a driver) is unavailable, or fails when
HPCPLACE_REQUIRE_GPU=1, as the GPU-tier script sets."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from hpcplace.runtime.devices import query_nvml
from tests.runtime.conftest import base_env, shim_command, write_plan

pytestmark = pytest.mark.gpu
DEVICES, REASON = query_nvml()


@pytest.fixture
def gpu_count() -> int:
    if DEVICES is None or not DEVICES:
        reason = REASON or "NVML sees no GPU"
        if os.environ.get("HPCPLACE_REQUIRE_GPU") == "1":
            pytest.fail(f"GPU tier required but unavailable: {reason}")
        pytest.skip(f"GPU tier skipped: {reason}")
    return len(DEVICES)


def shim(plan: Path, cuda: str | None) -> subprocess.CompletedProcess[str]:
    job = f"g{uuid.uuid4().hex[:10]}"
    env = {**base_env(), "SLURM_JOB_ID": job, "SLURM_JOB_NODELIST": "gpunode1", "SLURMD_NODENAME": "gpunode1",
           "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_STEP_NUM_TASKS": "1"}
    if cuda is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda
    try:
        return subprocess.run(shim_command("--plan", str(plan), "--component", "probe", "--verbose", "--", "sh", "-c",
                                           "echo $CUDA_VISIBLE_DEVICES"),
                              env=env, capture_output=True, text=True, timeout=120)
    finally:
        subprocess.run(["rm", "-rf", f"/dev/shm/hpcplace-{job}"], check=False)


def config(gpus_per_node: int, gpu: int) -> str:
    return f"""
name: nvml
cluster:
  node_groups:
    - {{label: g, partition: g, nodes: 1, gpus_per_node: {gpus_per_node}}}
  component_placement:
    probe: {{node_group: g, placement: "{gpu}"}}
components:
  probe: {{command: ["true"]}}
"""


def test_planned_gpu_that_exists_passes(tmp_path: Path, gpu_count: int) -> None:
    plan = write_plan(tmp_path, config(gpu_count, gpu_count - 1))
    done = shim(plan, None)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(gpu_count - 1)
    assert "GPUs not verified" not in done.stderr


def test_planned_gpu_missing_on_the_node_stops_the_task(tmp_path: Path, gpu_count: int) -> None:
    plan = write_plan(tmp_path, config(gpu_count + 2, gpu_count + 1))
    done = shim(plan, None)
    assert done.returncode == 2
    assert f"GPU {gpu_count + 1} is planned" in done.stderr and done.stdout == ""
