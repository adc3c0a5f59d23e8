"""The plan of a NeMo-RL job against NeMo-RL's own placement code: `RayVirtualCluster`
(nemo_rl/distributed/virtual_cluster.py, imported from a checkout) makes its placement groups on a local
Ray cluster whose nodes have fake GPUs (Ray counts `num_gpus`, no device is touched), and one task per
worker is scheduled into each bundle as `RayWorkerGroup` schedules its workers (the bundle of rank r: per-node
groups in order, bundles in order; one group across nodes: NeMo-RL's own `_sorted_bundle_indices`). Every
worker's node and GPU must be the plan's. NeMo-RL is not on PyPI, so this needs a checkout in
HPCPLACE_NEMO_RL_SRC and is skipped in CI, the way tests/tune compares with RLinf's toolkit."""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hpcplace.config.formats import load_spec
from hpcplace.plan.planner import plan_from_spec

SRC = os.environ.get("HPCPLACE_NEMO_RL_SRC")
pytestmark = pytest.mark.skipif(
    not SRC, reason="HPCPLACE_NEMO_RL_SRC is not set: NeMo-RL's RayVirtualCluster comes from a checkout (not on PyPI)"
)
ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def nemo_rl() -> Any:
    assert SRC is not None
    sys.path.insert(0, SRC)
    try:
        import nemo_rl.distributed.virtual_cluster as vc

        yield vc
    finally:
        sys.path.remove(SRC)


@pytest.fixture
def fake_cluster(request: pytest.FixtureRequest) -> Iterator[dict[str, int]]:
    """A local Ray cluster of `nodes` x `gpus` fake GPUs; node id -> the plan's node rank (hpcplace gives
    every raylet its node's resources; here a marker resource names the rank)."""
    from ray.cluster_utils import Cluster

    nodes, gpus = request.param
    cluster = Cluster()
    for rank in range(nodes):
        cluster.add_node(num_cpus=2 * gpus, num_gpus=gpus, resources={f"hp_node_{rank}": 1})
    ray.init(address=cluster.address)
    try:
        cluster.wait_for_nodes()
        ids = {
            n["NodeID"]: next(int(k[8:]) for k in n["Resources"] if k.startswith("hp_node_"))
            for n in ray.nodes()
            if n["Alive"]
        }
        yield ids
    finally:
        ray.shutdown()
        cluster.shutdown()


@ray.remote
def _where() -> tuple[str, int]:
    return ray.get_runtime_context().get_node_id(), int(ray.get_gpu_ids()[0])


def _workers(vc: Any, cluster: Any, node_rank: dict[str, int]) -> list[tuple[int, int]]:
    """(node rank, GPU) of each worker rank, scheduled as RayWorkerGroup schedules them."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    pgs = cluster.get_placement_groups()
    if cluster._sorted_bundle_indices is not None:
        pairs = [(pgs[0], b) for b in cluster._sorted_bundle_indices]
    else:
        pairs = [(pg, b) for pg in pgs for b in range(pg.bundle_count)]
    share = 1 / cluster.max_colocated_worker_groups
    refs = [
        _where.options(
            num_cpus=0,
            num_gpus=share,
            scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=b),
        ).remote()
        for pg, b in pairs
    ]
    return [(node_rank[n], g) for n, g in ray.get(refs)]


def _same_up_to_node_order(got: list[tuple[int, int]], planned: list[tuple[int, int]], gpn: int) -> dict[int, int]:
    """NeMo-RL's per-node PACK groups: group k's bundles fill one node, bundle b on GPU b, as the plan says;
    which node takes group k is Ray's choice (observed: not the plan's order). Returns plan node -> Ray's."""
    assert len(got) == len(planned)
    moved: dict[int, int] = {}
    for k in range(0, len(got), gpn):
        mine, theirs = planned[k : k + gpn], got[k : k + gpn]
        assert len({n for n, _ in theirs}) == 1, f"group at rank {k} spans nodes: {theirs}"
        assert [g for _, g in theirs] == [g for _, g in mine]
        moved[mine[0][0]] = theirs[0][0]
    assert sorted(moved) == sorted(set(moved.values())), f"not a permutation of the plan's nodes: {moved}"
    return moved


BASE = """\
policy:
  dtensor_cfg: {enabled: true, tensor_parallel_size: 1, context_parallel_size: 1}
  generation:
    backend: vllm
    vllm_cfg: {tensor_parallel_size: 1, pipeline_parallel_size: 1, async_engine: true}
    colocated: {enabled: true, resources: {gpus_per_node: null, num_nodes: null}}
data: {default: {env_name: math}}
cluster: {gpus_per_node: 1, num_nodes: 1}
"""


def _plan(tmp_path: Path, *overrides: str) -> Any:
    (tmp_path / "base.yaml").write_text(BASE)
    site = tmp_path / "site.yaml"
    site.write_text(textwrap.dedent("slurm: {partition: gpu}\n"))
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        return plan_from_spec(
            load_spec(site, driver=["python", "examples/run_grpo.py", "--config", "base.yaml", *overrides])
        )
    finally:
        os.chdir(old)


def _planned(plan: Any, name: str) -> list[tuple[int, int]]:
    return [(p.cluster_node_rank, p.local_accelerator_rank) for p in plan.component(name).processes]


@pytest.mark.parametrize("fake_cluster", [(2, 4)], indirect=True)
def test_colocated_policy_cluster(tmp_path: Path, nemo_rl: Any, fake_cluster: dict[str, int]) -> None:
    """grpo.py colocated: one cluster of [gpus_per_node] * nodes, max_colocated_worker_groups=2 (vLLM),
    per-node groups (TP*PP fits a node); generation's engines take consecutive bundles of each group."""
    plan = _plan(
        tmp_path, "cluster.num_nodes=2", "cluster.gpus_per_node=4", "policy.generation.vllm_cfg.tensor_parallel_size=2"
    )
    cluster = nemo_rl.RayVirtualCluster(
        [4, 4], max_colocated_worker_groups=2, num_gpus_per_node=4, name="grpo_policy_cluster"
    )
    cluster._init_placement_groups(strategy=None, use_unified_pg=False)  # VllmGeneration: colocated, TP fits
    workers = _workers(nemo_rl, cluster, fake_cluster)
    assert _planned(plan, "policy") == _planned(plan, "generation")
    print("plan node -> Ray's node:", _same_up_to_node_order(workers, _planned(plan, "policy"), 4))
    cluster.shutdown()


@pytest.mark.parametrize("fake_cluster", [(3, 2)], indirect=True)
def test_non_colocated_train_and_inference_clusters(tmp_path: Path, nemo_rl: Any, fake_cluster: dict[str, int]) -> None:
    """grpo.py non-colocated, 3 nodes: a train cluster [2, 2] and an inference cluster [2] (PACK)."""
    plan = _plan(
        tmp_path,
        "cluster.num_nodes=3",
        "cluster.gpus_per_node=2",
        "policy.generation.colocated.enabled=false",
        "policy.generation.colocated.resources.num_nodes=1",
        "policy.generation.colocated.resources.gpus_per_node=2",
    )
    train = nemo_rl.RayVirtualCluster([2, 2], num_gpus_per_node=2, name="grpo_train_cluster")
    inference = nemo_rl.RayVirtualCluster([2], num_gpus_per_node=2, name="grpo_inference_cluster")
    train._init_placement_groups()
    inference._init_placement_groups(strategy="PACK", use_unified_pg=False)
    got = {"policy": _workers(nemo_rl, train, fake_cluster), "generation": _workers(nemo_rl, inference, fake_cluster)}
    moved = _same_up_to_node_order(
        got["policy"] + got["generation"], _planned(plan, "policy") + _planned(plan, "generation"), 2
    )
    print("plan node -> Ray's node:", moved)
    train.shutdown()
    inference.shutdown()


@pytest.mark.parametrize("fake_cluster", [(2, 2)], indirect=True)
def test_engines_spanning_nodes_share_one_sorted_group(
    tmp_path: Path, nemo_rl: Any, fake_cluster: dict[str, int]
) -> None:
    """TP*PP 4 > 2 GPUs per node: one group for the cluster, its bundles in NeMo-RL's (node id, GPU id) order;
    each engine is TP*PP consecutive bundles of that order, each node's GPUs in order."""
    plan = _plan(
        tmp_path, "cluster.num_nodes=2", "cluster.gpus_per_node=2", "policy.generation.vllm_cfg.tensor_parallel_size=4"
    )
    cluster = nemo_rl.RayVirtualCluster(
        [2, 2], max_colocated_worker_groups=2, num_gpus_per_node=2, name="grpo_policy_cluster"
    )
    cluster._init_placement_groups(strategy=None, use_unified_pg=True)
    workers = _workers(nemo_rl, cluster, fake_cluster)
    planned = _planned(plan, "generation")
    # Ray's node ids (random hex) order the nodes: the same two nodes' GPUs in order, nodes in id order
    assert sorted(workers) == sorted(planned)
    assert [g for _, g in workers] == [g for _, g in planned]
    by_id = sorted(fake_cluster, key=lambda i: i)
    assert [n for n, _ in workers] == [fake_cluster[i] for i in by_id for _ in range(2)]
    cluster.shutdown()
