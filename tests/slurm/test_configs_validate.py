"""Every example config in configs/ passes `hpcplace validate` against the project's Slurm test
cluster (marker `slurm`): its partitions, GRES, CPUs and memory fit the nodes they name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hpcplace.plan.planner import plan_from_file
from tests.slurm.conftest import REPO, LiveCluster

pytestmark = pytest.mark.slurm

CONFIGS = sorted((REPO / "configs").glob("*.yaml"))


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_config_validates_on_the_test_cluster(slurm_cluster: LiveCluster, config: Path) -> None:
    plan = plan_from_file(config)
    argv = [sys.executable, "-m", "hpcplace.cli", "validate", str(config)]
    if not plan.launch.is_ray and not all(c.command for c in plan.components):
        # a framework config without commands (its components run under the framework's driver): the
        # Ray launch mode with a trivial driver, so the check is about placement against the cluster
        argv += ["--driver", "--", "python", "-c", "pass"]
    res = subprocess.run(argv, env=slurm_cluster.env, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "the cluster can run this job" in res.stdout
    groups = [g.label for g in plan.cluster.node_groups]
    assert [line for line in res.stdout.splitlines() if line.startswith("ok: node group")] and all(
        f"node group {g!r}" in res.stdout for g in groups
    ), res.stdout
