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
def device():
    """A GPU this task can open, by NVML (the first; NVML indices ignore CUDA_VISIBLE_DEVICES)."""
    if DEVICES is None or not DEVICES:
        reason = REASON or "NVML sees no GPU"
        if os.environ.get("HPCPLACE_REQUIRE_GPU") == "1":
            pytest.fail(f"GPU tier required but unavailable: {reason}")
        pytest.skip(f"GPU tier skipped: {reason}")
    return DEVICES[0]


def shim(plan: Path, cuda: str | None) -> subprocess.CompletedProcess[str]:
    job = f"g{uuid.uuid4().hex[:10]}"
    env = {
        **base_env(),
        "SLURM_JOB_ID": job,
        "SLURM_JOB_NODELIST": "gpunode1",
        "SLURMD_NODENAME": "gpunode1",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_STEP_NUM_TASKS": "1",
    }
    if cuda is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda
    try:
        return subprocess.run(
            shim_command(
                "--plan", str(plan), "--component", "probe", "--verbose", "--", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES"
            ),
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
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


def test_planned_gpu_that_exists_passes(tmp_path: Path, device) -> None:
    index = device.nvml_index
    plan = write_plan(tmp_path, config(index + 1, index))
    done = shim(plan, str(index))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(index)
    assert "GPUs not verified" not in done.stderr and "warning" not in done.stderr


def test_planned_gpu_given_by_uuid_passes(tmp_path: Path, device) -> None:
    plan = write_plan(tmp_path, config(device.nvml_index + 1, device.nvml_index))
    done = shim(plan, device.uuid)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == device.uuid and "warning" not in done.stderr


def test_planned_gpu_missing_on_the_node_stops_the_task(tmp_path: Path, device) -> None:
    missing = max(d.nvml_index for d in DEVICES) + 2
    plan = write_plan(tmp_path, config(missing + 1, missing))
    done = shim(plan, None)
    assert done.returncode == 2
    assert f"GPU {missing} is planned" in done.stderr and done.stdout == ""
