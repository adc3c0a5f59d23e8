"""`hpcplace tune --submit-top 2` + `hpcplace compare` on the real test cluster, with a driver that prints
the metric line (tests/tune/metric_driver.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.slurm.conftest import REPO, LiveCluster, wait_done

pytestmark = pytest.mark.slurm

DRIVER = REPO / "tests" / "tune" / "metric_driver.py"
CONFIG = f"""\
# tune on the test cluster: rollout and actor, each timing its own iterations
name: tune-lab
cluster:
  node_groups:
    - {{label: a800, partition: a800, nodes: 2, gpus_per_node: 8, gpu_type: a800, cpus_per_node: 16, mem_per_node: 64000}}
    - {{label: rtx4090, partition: rtx4090, nodes: 1, gpus_per_node: 4, gpu_type: rtx4090, cpus_per_node: 8, mem_per_node: 32000}}
  component_placement:
    rollout: {{node_group: a800, placement: "0-7:0-1"}}
    actor: {{node_group: a800, placement: "8-15:0-1"}}
components:
  rollout: {{command: [python3, {DRIVER}, "2.0", "3"], mem_per_process: 1G}}
  actor: {{command: [python3, {DRIVER}, "3.0", "3"], mem_per_process: 1G}}
slurm:
  time: "00:05:00"
"""
PROFILE = """\
batches: 1
workflow: [rollout, actor]
memory_gb: {a800: 80, rtx4090: 24}
components:
  rollout: {seconds: {a800: {2: 1.0, 4: 0.5}, rtx4090: {2: 1.2}}}
  actor: {seconds: {a800: {2: 1.5, 4: 0.75}}}
"""


def test_submit_top_two_and_compare(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    config, profile, runs = tmp_path / "lab.yaml", tmp_path / "profile.yaml", tmp_path / "runs"
    config.write_text(CONFIG)
    profile.write_text(PROFILE)
    env = {**slurm_cluster.env, "PATH": f"{Path(sys.executable).parent}:{slurm_cluster.env.get('PATH', os.defpath)}"}
    hp = [sys.executable, "-m", "hpcplace.cli"]
    tune = subprocess.run(
        hp
        + ["tune", str(config), "--profile", str(profile), "--top", "3", "--submit-top", "2", "--runs-dir", str(runs)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert tune.returncode == 0, tune.stdout + tune.stderr
    run_dirs = sorted(p for p in runs.iterdir() if p.is_dir())
    assert len(run_dirs) == 2, tune.stdout
    assert [p.name.split("-tune")[1][0] for p in run_dirs] == ["1", "2"]  # named for the variant, best first
    records = [json.loads((p / "tune.json").read_text()) for p in run_dirs]
    assert records[0]["predicted_iteration_s"] <= records[1]["predicted_iteration_s"]
    for p in run_dirs:
        job = json.loads((p / "run.json").read_text())["job_id"]
        assert wait_done(job).state == "COMPLETED", p
    out = subprocess.run(
        hp + ["compare", *map(str, run_dirs)], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    print("\n" + tune.stdout + out.stdout)
    rows = out.stdout.splitlines()[1:]
    assert len(rows) == 2
    for row, record in zip(rows, records):
        cols = row.split()
        predicted, measured, samples = float(cols[1]), float(cols[2]), int(cols[3])
        assert predicted == pytest.approx(record["predicted_iteration_s"], abs=1e-3)
        assert samples >= 6  # 3 iterations from every process
        assert measured > 0.1
