"""scripts/gpu-tier.sh's dry run, on the CPU: the offline install from the wheelhouse (.whl/, built by
scripts/gpu-wheelhouse.sh, which needs PyPI: CI without it skips) into a target dir, a fake CUDA torch
first on PYTHONPATH, and the collection of every gpu-marked test. Needs a Python without hpcplace
installed (an editable install would shadow the target dir): /usr/bin/python3 here."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PYTHON = "/usr/bin/python3"


def test_dry_run_installs_offline_and_collects_the_gpu_tests(tmp_path: Path) -> None:
    if not list((REPO / ".whl").glob("hpcplace-*.whl")):
        pytest.skip("no wheelhouse .whl/ (scripts/gpu-wheelhouse.sh builds it; it needs PyPI)")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    probe = (
        subprocess.run([PYTHON, "-c", "import pip; import hpcplace"], capture_output=True, text=True, env=env, cwd="/")
        if os.path.exists(PYTHON)
        else None
    )
    if probe is None or "No module named 'pip'" in probe.stderr or probe.returncode == 0:
        pytest.skip(f"needs {PYTHON} with pip and without hpcplace")
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu-tier.sh"), str(tmp_path)],
        env={**env, "HPCPLACE_GPU_TIER_DRY_RUN": "1", "PYTHON": PYTHON},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "9 tests collected" in done.stdout
    for name in (
        "tests/runtime/test_nvml_gpu.py::test_planned_gpu_given_by_uuid_passes",
        "tests/gpu/test_memory_saver_gpu.py::test_pause_frees_device_memory_per_nvml",
        "tests/gpu/test_weight_sync_gpu.py::test_weights_cross_gpu_shm_gpu_exactly_through_pinned_slots",
    ):
        assert name in done.stdout
    facts = json.loads((tmp_path / "facts.json").read_text())
    assert facts["torch_cuda"] == "13.0" and facts["cuda_available"] is True
    assert facts["driver"] == {"version": "580.65.06", "cuda": "13.0"} and facts["driver_problem"] is None
