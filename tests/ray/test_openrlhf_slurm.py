"""OpenRLHF's own train_ppo_ray placement under hpcplace's Ray launch mode on the real Slurm test cluster
(marker `slurm`): `hpcplace submit` of an OpenRLHF command (the planned command, run through
tests/ray/drivers/openrlhf_driver.py, which runs OpenRLHF's module with probes where models would load) on
the a800 partition's two 2-GPU nodes; every rank's host and GPUs are replayed through hpcplace's model of
OpenRLHF's placement (tests/ray/test_openrlhf_local.py) and, node by node, compared with plan.json."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import yaml

from tests.ray.test_frameworks_slurm import DRIVERS, FAKE_GPU, run_job
from tests.ray.test_openrlhf_local import mismatches, observed
from tests.ray.test_ray_slurm import _small_ray, assert_clean  # noqa: F401 - fixture
from tests.slurm.conftest import LiveCluster

pytestmark = [pytest.mark.slurm, pytest.mark.framework_driver]

ARGV = [
    "--actor.num_nodes", "1", "--actor.num_gpus_per_node", "2", "--vllm.num_engines", "1",
    "--vllm.tensor_parallel_size", "2", "--algo.kl.init_coef", "0", "--reward.remote_url", "http://rm",
    "--algo.advantage.estimator", "reinforce", "--actor.model_name_or_path", "m",
]  # fmt: skip


def test_openrlhf_placement_on_the_real_cluster_agrees_with_the_plan(
    slurm_cluster: LiveCluster, tmp_path: Path
) -> None:
    if importlib.util.find_spec("openrlhf") is None:
        pytest.skip("openrlhf is not installed (tests/requirements-frameworks.txt, --no-deps)")
    report_path = tmp_path / "openrlhf-report.json"
    driver = [sys.executable, str(DRIVERS / "openrlhf_driver.py"), "--report", str(report_path), "--"]
    config = {
        "format": "openrlhf",
        "slurm": {
            "partition": "a800",
            "gpus_per_node": 2,
            "gpu_type": "a800",
            "cpus_per_node": 4,
            "mem_per_node": 4000,
        },
        "launch": {
            "driver": [*driver, "python3", "-m", "openrlhf.cli.train_ppo_ray", *ARGV],
            "env": {"PYTHONPATH": str(FAKE_GPU), "OPENRLHF_PROBE_PARENT": str(tmp_path)},
            "join_timeout": 180,
        },
    }
    path = tmp_path / "openrlhf.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    _, plan, hosts = run_job(tmp_path, path)
    report = json.loads(report_path.read_text())
    assert report["error"] is None, report.get("traceback") or report["error"]
    assert mismatches(ARGV, report, 2) == []  # Ray's choices are the model's (ties aside)
    host_of_node = [n["host"] for n in report["nodes"]]
    seen: dict[str, list[tuple[str, int, int]]] = {}
    for (role, rank), gpus in observed(report).items():
        for node, gpu in gpus:
            seen.setdefault(host_of_node[node], []).append((role, rank, gpu))
    planned: dict[str, list[tuple[str, int, int]]] = {}
    for c in plan["components"]:
        for rank, p in enumerate(c["processes"]):
            for gpu in p["visible_accelerators"]:
                planned.setdefault(hosts[(p["het_group"], p["group_node_index"])], []).append(
                    (c["name"], rank, int(gpu))
                )
    # two empty 2-GPU nodes: the engine (TP 2, made first) takes one whole node, the actor the other; which
    # node is Ray's choice between equally loaded ones, so each host's ranks and GPUs are compared, not its name
    assert sorted(sorted(v) for v in seen.values()) == sorted(sorted(v) for v in planned.values())
    assert set(seen) == set(planned) == {hosts[(0, 0)], hosts[(0, 1)]}
