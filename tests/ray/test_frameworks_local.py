"""The framework drivers under `hpcplace run --local` in the Ray launch mode (one local raylet for
the plan's one node): RLinf's own Cluster/ComponentPlacement/WorkerGroups agree with plan.json,
AReaL's launcher and ROLL's attach checks find the cluster hpcplace started. No Slurm; the NVML
fake (tests/ray/fake_gpu) stands for a 4-GPU box."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.ray.framework_checks import rlinf_mismatches

HERE = Path(__file__).parent
FIXTURE = HERE.parent / "fixtures" / "rlinf-ray-local.yaml"
DRIVERS = HERE / "drivers"
TIMEOUT_S = 420


def run_local(tmp_path: Path, name: str, driver: list[str]) -> Path:
    pytest.importorskip("ray")
    config = tmp_path / f"{name}.yaml"
    launch = {
        "launch": {
            "mode": "ray",
            "driver": driver,
            "join_timeout": 120,
            "env": {"PYTHONPATH": str(HERE / "fake_gpu"), "FAKE_NVML_GPU_COUNT": "4"},
        }
    }
    config.write_text(FIXTURE.read_text(encoding="utf-8") + "\n" + yaml.safe_dump(launch), encoding="utf-8")
    run_dir = tmp_path / "run"
    env = dict(os.environ, HPCPLACE_RAY_ARGS="--object-store-memory=80000000")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    cli = [str(Path(sys.executable).with_name("hpcplace")), "run", str(config), "--local", "--run-dir", str(run_dir)]
    # in tmp_path: RLinf's driver writes output/logs/ relative to its working directory
    done = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return run_dir


def test_rlinf_local(tmp_path: Path) -> None:
    pytest.importorskip("rlinf")
    run_dir = run_local(
        tmp_path,
        "rlinf",
        [sys.executable, str(DRIVERS / "rlinf_driver.py"), "--config-path", str(tmp_path), "--config-name", "rlinf"],
    )
    report = json.loads((run_dir / "rlinf-report.json").read_text())
    plan = json.loads((run_dir / "plan.json").read_text())
    assert report["stages"][-1] == "worker groups launched", report.get("traceback")
    assert rlinf_mismatches(report, plan) == []


def test_areal_local(tmp_path: Path) -> None:
    pytest.importorskip("areal")
    run_dir = run_local(
        tmp_path, "areal", [sys.executable, str(DRIVERS / "areal_driver.py"), "--nodes", "1", "--gpus-per-node", "4"]
    )
    report = json.loads((run_dir / "areal-report.json").read_text())
    assert report["error"] is None, report.get("traceback")
    assert report["ray_address_env"].startswith("127.0.0.1:") and len(report["ray_nodes"]) == 1
    assert sorted(t["cuda_visible_devices"] for t in report["tasks"]) == ["0", "1", "2", "3"]


def test_roll_attach_local(tmp_path: Path) -> None:
    run_dir = run_local(tmp_path, "roll", [sys.executable, str(DRIVERS / "roll_attach_driver.py")])
    report = json.loads((run_dir / "roll-report.json").read_text())
    assert report["cluster_running"] and report["head_nodes"] == 1 and report["alive_nodes"] == 1
    assert report["env"]["RANK"] == "0" and report["env"]["WORLD_SIZE"] == "1"
    assert report["gcs_address"].endswith(":" + report["env"]["MASTER_PORT"])
    if os.environ.get("HPCPLACE_ROLL_SRC"):  # ROLL's own init() from a checkout (see roll_attach_driver.py)
        assert (report["roll_is_ray_cluster_running"], report["roll_started_head"]) == (True, False)
        assert report["roll_init_returned"]
