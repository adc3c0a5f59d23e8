"""A heterogeneous verl job on the real Slurm test cluster (marker `slurm`): global_pool (actor, ref, critic
and rollout replicas of TP 4 across both nodes) on the a800 partition, reward_pool on rtx4090 with as many GPUs
per node (so each pool's placement groups would fit on the other's nodes: Ray alone put the pools on each
other's partition in 7 of 10 starts), planned from verl's command and submitted with `hpcplace submit --driver
-- python verl_driver.py ... -- python3 -m verl.trainer.main_ppo <overrides>`. The driver (tests/ray/drivers/
verl_driver.py) runs verl 0.9.1's own placement code on the Ray cluster hpcplace started, with hpcplace's
steering hook (the job's start check for verl's IP-string node order passed first); every rank's node (the
raylet's hpcplace.node_rank) and GPU ids must equal plan.json, on every start (conftest.py: the repeated proof).
The same job serves an HTTP judge on the CPU partition (a service: examples/services/standin_server.py): the
driver starts once it answers, its address reaches verl's Hydra overrides as `+reward.judge_url={judge.0.url}/judge`,
and it is stopped when the driver ends."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from hpcplace.slurm import submit
from tests.ray.test_frameworks_slurm import FAKE_GPU, run_job
from tests.ray.test_ray_slurm import _small_ray, assert_clean  # noqa: F401 - fixture
from tests.slurm.conftest import LiveCluster

pytestmark = [pytest.mark.slurm, pytest.mark.framework_driver]
DRIVER = Path(__file__).parent / "drivers" / "verl_driver.py"
OVERRIDES = [
    "trainer.nnodes=2",
    "trainer.n_gpus_per_node=2",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=4",
    "reward.reward_model.enable=True",
    "reward.reward_model.enable_resource_pool=True",
    "reward.reward_model.nnodes=1",
    "reward.reward_model.n_gpus_per_node=2",
    "reward.reward_model.rollout.tensor_model_parallel_size=1",
    "+reward.judge_url={judge.0.url}/judge",  # the judge service's address, filled in by the job
]
BLOCKS = {
    "slurm": {
        "partition": "a800",
        "gpu_type": "a800",
        "mem_per_node": 4000,
        "time": "00:05:00",
        "pools": {"reward_pool": "r4090"},
        "node_groups": {"r4090": {"partition": "rtx4090", "gpu_type": "rtx4090"}, "cpu": {"partition": "cpu"}},
    },
    "services": {
        "judge": {
            "node_group": "cpu",
            "command": [
                sys.executable,
                str(Path(__file__).parents[2] / "examples" / "services" / "standin_server.py"),
                *("--port", "{port}", "--warmup", "1"),
            ],
            "ready": {"http": "/health"},
            "timeout": 60,
        }
    },
    "launch": {"mode": "ray", "env": {"PYTHONPATH": str(FAKE_GPU)}, "join_timeout": 180},
}


def test_heterogeneous_verl_job_places_every_rank_as_planned(
    steer_cluster: LiveCluster, start: int, tmp_path: Path
) -> None:
    pytest.importorskip("verl", reason="verl is installed by tests/requirements-frameworks.txt")
    config = tmp_path / "verl-site.yaml"
    config.write_text(yaml.safe_dump(BLOCKS, sort_keys=False), encoding="utf-8")
    report_path = tmp_path / "verl-report.json"
    driver = [sys.executable, str(DRIVER), "--report", str(report_path), "--", "python3", "-m"]
    run_dir, plan, hosts = run_job(tmp_path, config, "--driver", "--", *driver, "verl.trainer.main_ppo", *OVERRIDES)
    report = json.loads(report_path.read_text())
    assert "error" not in report, report.get("traceback")
    groups = [(g["label"], g["partition"], g["gpus_per_node"]) for g in plan["node_groups"]]
    assert groups == [("global_pool", "a800", [2, 2]), ("r4090", "rtx4090", [2]), ("cpu", "cpu", [0])]
    judge = json.loads((run_dir / "services" / "judge" / "0.json").read_text())
    assert judge["host"] == "cpu-1"
    assert report["overrides"][-1] == f"+reward.judge_url=http://cpu-1:{judge['port']}/judge"
    logs = "".join(p.read_text(errors="replace") for p in sorted((run_dir / "logs").glob("*.out")))
    assert "service(s) judge ready; running the driver" in logs and "service 'judge' stopped" in logs, logs[-3000:]
    planned = submit.load_plan(run_dir / "plan.json")
    want = {
        (c.name, p.rank): (p.cluster_node_rank, tuple(int(g) for g in p.visible_accelerators))
        for c in planned.components
        if c.service is None
        for p in c.processes
    }
    got = {(r["component"], r["rank"]): (r["node_rank"], tuple(r["gpus"])) for r in report["records"]}
    assert got == want and len(got) == 4 * 3 + 2, (got, want, hosts)
    # global_pool's two nodes are numbered in verl's order, IP addresses as strings (runtime/ip_order.py): the
    # job's own record of the addresses, its order for status/logs/exec, and where verl put ranks 0-1 agree
    published = [json.loads((run_dir / "ray" / "order" / f"g0-{j}.json").read_text()) for j in range(2)]
    in_ip_order = [r["host"] for r in sorted(published, key=lambda r: r["address"])]
    assert [submit.read_hosts(run_dir)[(0, j)] for j in range(2)] == in_ip_order
    assert {report["nodes"][r["node_id"]] for r in report["records"] if r["node_rank"] == 0} == {
        min(r["address"] for r in published)
    }
    log = (run_dir / "ray" / "steer" / "steer.log").read_text()
    for pg in ("global_poolverl_group_2_2:0", "global_poolverl_group_2_2:1", "reward_poolverl_group_2:0"):
        assert f"placement group {pg}: bundles on node ranks" in log, log
