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


# the sections the other algorithms read besides BASE's (written as NeMo-RL's recipes have them)
EXTRA = """\
value: {dtensor_cfg: {enabled: true, _v2: true, tensor_parallel_size: 1, context_parallel_size: 1}}
teacher: {dtensor_cfg: {enabled: true, tensor_parallel_size: 1, context_parallel_size: 1}}
generation:
  backend: vllm
  vllm_cfg: {tensor_parallel_size: 1, pipeline_parallel_size: 1, async_engine: true}
  colocated: {enabled: true}
"""


def _plan(tmp_path: Path, *overrides: str, script: str = "run_grpo.py") -> Any:
    (tmp_path / "base.yaml").write_text(BASE + EXTRA)
    site = tmp_path / "site.yaml"
    site.write_text(textwrap.dedent("slurm: {partition: gpu}\n"))
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        return plan_from_spec(
            load_spec(site, driver=["python", f"examples/{script}", "--config", "base.yaml", *overrides])
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


# Each entry point's clusters as its setup() makes them at 7ea279a (names, bundles per node, the generation
# class's strategy: PACK when not colocated, one unified group when an engine is wider than a node), and the
# plan's components on each: every worker group of a cluster takes one bundle per rank in order. Which node
# takes which of the plan's nodes is Ray's choice here (no steering hook): one permutation for all clusters.
CASES = {
    "megatron_generation_noncolocated": (  # grpo.py + MegatronGeneration.init_cluster_placement_groups
        "run_grpo.py",
        (
            "++policy.megatron_cfg={enabled: true, tensor_model_parallel_size: 1, pipeline_model_parallel_size: 1, "
            "context_parallel_size: 1}",
            "policy.dtensor_cfg.enabled=false",
            "policy.generation.backend=megatron",
            "policy.generation.colocated.enabled=false",
            "policy.generation.colocated.resources.num_nodes=2",
            "policy.generation.colocated.resources.gpus_per_node=2",
            "cluster.num_nodes=3",
            "cluster.gpus_per_node=2",
            "++policy.generation.mcore_generation_config.tensor_model_parallel_size=4",
        ),
        (3, 2),
        [
            ("grpo_train_cluster", [2], None, False, ("policy",)),
            ("grpo_inference_cluster", [2, 2], "PACK", True, ("generation",)),
        ],  # span TP 4 > 2 GPUs per node
    ),
    "grpo_opd_teachers": (  # grpo.py + opd.reserve_teacher_clusters: a teacher_<alias> cluster per teacher
        "run_grpo.py",
        (
            "cluster.num_nodes=3",
            "cluster.gpus_per_node=2",
            "++on_policy_distillation={enabled: true, teacher_model_by_agent_name: {a: m1, b: m2}, "
            "non_colocated_teachers: {enabled: true, default_teacher_cfg: {num_nodes: 1, gpus_per_node: 2}, "
            "teacher_overrides: {b: {gpus_per_node: 1}}}}",
        ),
        (3, 2),
        [
            ("grpo_policy_cluster", [2], None, False, ("policy", "generation")),
            ("teacher_a", [2], None, False, ("teacher_a",)),
            ("teacher_b", [1], None, False, ("teacher_b",)),
        ],
    ),
    "ppo_noncolocated": (  # ppo.py: Policy and Value on ppo_train_cluster, VllmGeneration on ppo_inference_cluster
        "run_ppo.py",
        (
            "policy.generation.colocated.enabled=false",
            "policy.generation.colocated.resources.num_nodes=1",
            "policy.generation.colocated.resources.gpus_per_node=2",
            "cluster.num_nodes=3",
            "cluster.gpus_per_node=2",
        ),
        (3, 2),
        [
            ("ppo_train_cluster", [2, 2], None, False, ("policy", "value")),
            ("ppo_inference_cluster", [2], "PACK", False, ("generation",)),
        ],
    ),
    "distillation_one_node_split": (  # distillation.py: teacher and student on the train cluster
        "run_distillation.py",
        (
            "policy.generation.colocated.enabled=false",
            "policy.generation.colocated.resources.gpus_per_node=1",
            "cluster.gpus_per_node=4",
        ),
        (1, 4),
        [
            ("distillation_train_cluster", [3], None, False, ("teacher", "policy")),
            ("distillation_inference_cluster", [1], "PACK", False, ("generation",)),
        ],
    ),
    "eval": (  # evals/eval.py: eval_cluster, VllmGeneration colocated (strategy None), TP 2
        "run_eval.py",
        ("cluster.num_nodes=2", "cluster.gpus_per_node=2", "generation.vllm_cfg.tensor_parallel_size=2"),
        (2, 2),
        [("eval_cluster", [2, 2], None, False, ("generation",))],
    ),
    "single_controller_noncolocated": (  # single_controller_utils/setup.py _build_clusters
        "run_grpo_single_controller.py",
        (
            "policy.generation.colocated.enabled=false",
            "policy.generation.colocated.resources.gpus_per_node=1",
            "cluster.num_nodes=2",
            "cluster.gpus_per_node=2",
        ),
        (2, 2),
        [
            ("sc_train_cluster", [2], None, False, ("policy",)),
            ("sc_inference_cluster", [1], "PACK", False, ("generation",)),
        ],
    ),
}


@pytest.mark.parametrize(
    ("case", "fake_cluster"), [(name, case[2]) for name, case in CASES.items()], indirect=["fake_cluster"]
)
def test_each_entry_points_clusters(tmp_path: Path, nemo_rl: Any, fake_cluster: dict[str, int], case: str) -> None:
    script, overrides, _, clusters = CASES[case]
    plan = _plan(tmp_path, *overrides, script=script)
    assert sorted(c.name for c in plan.components) == sorted(n for *_, names in clusters for n in names)
    made = []
    moved: dict[int, int] = {}  # plan node -> Ray's node, across the clusters
    for name, bundles, strategy, unified, components in clusters:
        cluster = nemo_rl.RayVirtualCluster(
            bundles, num_gpus_per_node=bundles[0], max_colocated_worker_groups=len(components), name=name
        )
        cluster._init_placement_groups(strategy=strategy, use_unified_pg=unified)
        made.append(cluster)
        workers = _workers(nemo_rl, cluster, fake_cluster)
        planned = _planned(plan, components[0])
        for component in components:
            assert _planned(plan, component) == planned  # one bundle per rank, the groups share them
        # per-node groups in order, or one unified group in NeMo-RL's (topo_rank, GPU id) order: each node's
        # bundles consecutive, on one node, its GPUs as planned
        per = bundles[0]
        for k in range(0, len(workers), per):
            mine, theirs = planned[k : k + per], workers[k : k + per]
            assert len({n for n, _ in theirs}) == 1, f"{name}: group at rank {k} spans nodes: {theirs}"
            assert [g for _, g in theirs] == [g for _, g in mine]
            assert moved.setdefault(mine[0][0], theirs[0][0]) == theirs[0][0], f"{name}: a plan node split"
    assert len(set(moved.values())) == len(moved), f"not a permutation of the plan's nodes: {moved}"
    print("plan node -> Ray's node:", moved)
    for cluster in made:
        cluster.shutdown()
