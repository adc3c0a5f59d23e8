"""The check beside a NeMo-RL driver (runtime/nemo_rl_watch.py): NeMo-RL's placement groups name no node
group, so Ray may put a pool on another partition's nodes; the watcher reads Ray's placement group table
and stops the driver naming the group, the node and both node groups. Pure parts against a plan.json made
by formats/nemo_rl.py; the whole watcher against a real local Ray cluster (Ray's own table format), with a
placement group named as NeMo-RL names them put on the wrong node on purpose."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hpcplace.config.formats import load_spec
from hpcplace.plan.plan import plan_to_json
from hpcplace.plan.planner import plan_from_spec
from hpcplace.runtime.nemo_rl_watch import cluster_of, nodes_by_id, placement_problem, planned_groups

CONFIG = """\
policy:
  dtensor_cfg: {enabled: true, tensor_parallel_size: 1, context_parallel_size: 1}
  generation:
    backend: vllm
    vllm_cfg: {tensor_parallel_size: 1, pipeline_parallel_size: 1}
    colocated: {enabled: false, resources: {gpus_per_node: 1, num_nodes: 1}}
data: {default: {env_name: math}}
cluster: {gpus_per_node: 1, num_nodes: 2}
"""
BLOCKS = """\
slurm:
  node_groups:
    h100: {partition: h100}
    h20: {partition: h20}
  pools: {training: h100, generation: h20}
"""


@pytest.fixture
def header(tmp_path: Path) -> dict[str, Any]:
    """plan.json of a NeMo-RL job: training (policy) on h100's node rank 0, generation on h20's rank 1."""
    (tmp_path / "grpo.yaml").write_text(CONFIG)
    (tmp_path / "site.yaml").write_text(BLOCKS)
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        spec = load_spec("site.yaml", driver=["python", "examples/run_grpo.py", "--config", "grpo.yaml"])
    finally:
        os.chdir(old)
    data: dict[str, Any] = json.loads(plan_to_json(plan_from_spec(spec)))
    return data


def test_names_and_planned_groups(header: dict[str, Any]) -> None:
    assert cluster_of("grpo_train_cluster-node0") == "policy"
    assert cluster_of("grpo_inference_cluster-unified") == "generation"
    assert cluster_of("grpo_reward_model_cluster-node1") == "reward_model"
    assert cluster_of("grpo_train_cluster-nodeX") is None and cluster_of("other-node0") is None
    assert planned_groups(header) == {"policy": "h100", "generation": "h20"}


def test_problem_names_the_group_node_and_node_groups(header: dict[str, Any]) -> None:
    nodes = nodes_by_id(
        [
            {"NodeID": "a", "Alive": True, "Labels": {"hpcplace.node_rank": "0"}},
            {"NodeID": "b", "Alive": True, "Labels": {"hpcplace.node_rank": "1"}},
        ],
        {0: "h100", 1: "h20"},
    )
    right = {
        "p1": {"name": "grpo_train_cluster-node0", "bundles_to_node_id": {0: "a"}},
        "p2": {"name": "grpo_inference_cluster-node0", "bundles_to_node_id": {0: "b"}},
        "p3": {"name": "someone_else", "bundles_to_node_id": {0: "b"}},
    }
    assert placement_problem(right, nodes, planned_groups(header)) is None
    swapped = {
        "p1": {"name": "grpo_train_cluster-node0", "bundles_to_node_id": {0: "b"}},
        "p2": {"name": "grpo_inference_cluster-node0", "bundles_to_node_id": {0: "a"}},
    }
    problem = placement_problem(swapped, nodes, planned_groups(header))
    assert problem is not None
    assert "grpo_train_cluster-node0 (policy) has bundle 0 on node rank 1, in node group h20" in problem
    assert "the plan puts policy on node group h100" in problem


ray = pytest.importorskip("ray")


@pytest.fixture
def two_nodes() -> Iterator[str]:
    from ray.cluster_utils import Cluster

    cluster = Cluster()
    for rank in range(2):
        cluster.add_node(
            num_cpus=1, num_gpus=1, resources={f"hp_node_{rank}": 1}, labels={"hpcplace.node_rank": str(rank)}
        )
    cluster.wait_for_nodes()
    try:
        yield cluster.address
    finally:
        cluster.shutdown()


def _run_watcher(address: str, header: dict[str, Any], run_dir: Path, pin: dict[str, int]) -> tuple[int, str, bool]:
    """Place NeMo-RL-named groups on the pinned nodes, run the watcher beside a stand-in driver; its exit code,
    stderr, and whether the stand-in driver is still alive."""
    from ray.util.placement_group import placement_group

    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    plan = run_dir / "plan.json"
    plan.write_text(json.dumps(header))
    ray.init(address=address)
    try:
        groups = [
            placement_group([{"GPU": 1, f"hp_node_{rank}": 0.01}], strategy="PACK", name=name)
            for name, rank in pin.items()
        ]
        ray.get([g.ready() for g in groups], timeout=60)
        driver = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        try:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "hpcplace.runtime.nemo_rl_watch",
                    address,
                    str(plan),
                    str(run_dir),
                    str(driver.pid),
                ],
                capture_output=True,
                text=True,
                timeout=120,
            )
            time.sleep(0.2)
            return done.returncode, done.stderr, driver.poll() is None
        finally:
            driver.kill()
            driver.wait()
    finally:
        ray.shutdown()


def test_watcher_stops_a_driver_whose_pool_landed_elsewhere(
    two_nodes: str, header: dict[str, Any], tmp_path: Path
) -> None:
    code, err, alive = _run_watcher(
        two_nodes, header, tmp_path, {"grpo_train_cluster-node0": 1, "grpo_inference_cluster-node0": 0}
    )
    assert code == 1 and not alive
    assert "grpo_" in err and "the plan puts" in err
    recorded = (tmp_path / "logs" / "ray-errors.txt").read_text()
    assert recorded.startswith("NeMo-RL placement: NeMo-RL's placement group grpo_")


def test_watcher_lets_a_driver_placed_as_planned_run(two_nodes: str, header: dict[str, Any], tmp_path: Path) -> None:
    code, err, alive = _run_watcher(
        two_nodes, header, tmp_path, {"grpo_train_cluster-node0": 0, "grpo_inference_cluster-node0": 1}
    )
    assert code == 0 and alive, err
    assert "policy on h100" in err and "generation on h20" in err
    assert not (tmp_path / "logs" / "ray-errors.txt").exists()
