"""Model-parallel placement: collocated (strided rollout on its actor's GPUs) vs disaggregated, and the
actor-rank -> rollout (dp, tp) weight-sync map in both modes."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcplace.errors import PlanError, SpecError
from hpcplace.plan.plan import Plan
from hpcplace.plan.planner import plan_from_file
from tests.planner.conftest import cluster, group, plan_of

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def gpu_cluster(total: int, per_node: int = 8):
    return cluster(group("a800", per_node, nodes=-(-total // per_node), gpu_type="a800"), group("cpu", 0))


def collocated(atp: int, rtp: int, total: int, per_node: int = 8, app: int = 1) -> Plan:
    return plan_of(
        gpu_cluster(total, per_node),
        {"actor,rollout": ("a800", "all")},
        {
            "actor": {"tensor_parallel_size": atp, "pipeline_parallel_size": app},
            "rollout": {"tensor_parallel_size": rtp},
        },
    )


def gpu(p) -> tuple[int, int]:
    assert len(p.local_hardware_ranks) == 1
    return p.cluster_node_rank, p.local_hardware_ranks[0]


def shard_gpus(p) -> list[tuple[int, int]]:
    return [(p.cluster_node_rank, h) for h in p.local_hardware_ranks]


# --- collocated ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "atp, rtp, total, per_node, app",
    [
        (1, 1, 8, 8, 1),
        (2, 1, 8, 8, 1),
        (4, 2, 8, 8, 1),
        (4, 1, 16, 8, 1),
        (8, 2, 16, 8, 1),
        (4, 4, 16, 8, 1),
        (8, 1, 8, 8, 1),
        (2, 2, 4, 4, 1),
        (6, 2, 12, 6, 1),
        (2, 1, 8, 8, 2),
        (4, 2, 16, 8, 2),
    ],
)
def test_collocated_rollout_shard_sits_on_its_actor_gpu(
    atp: int, rtp: int, total: int, per_node: int, app: int
) -> None:
    plan = collocated(atp, rtp, total, per_node, app)
    ws = plan.weight_sync
    assert ws is not None and ws.mode == "collocated"
    s = atp // rtp
    assert (ws.actor_tp, ws.actor_pp, ws.rollout_tp, ws.rollout_stride) == (atp, app, rtp, s)
    actor, rollout = plan.component("actor").processes, plan.component("rollout").processes
    assert len(actor) == total and len(rollout) == total // rtp
    assert [gpu(p) for p in actor] == [(g // per_node, g % per_node) for g in range(total)]
    assert len(ws.actor_to_rollout) == total
    for a in range(total):
        dp = (a // atp) * s + (a % atp) % s
        tp = (a % atp) // s
        assert ws.actor_to_rollout[a] == ((dp, tp),), a
        assert shard_gpus(rollout[dp])[tp] == gpu(actor[a]), a


def test_collocated_strided_example_config() -> None:
    """configs/model-parallel-strided.yaml: actor TP=4, rollout TP=2 -> stride 2, rollout 0 = GPUs 0,2."""
    plan = plan_from_file(CONFIGS / "model-parallel-strided.yaml")
    rollout = plan.component("rollout").processes
    assert [p.local_hardware_ranks for p in rollout] == [(0, 2), (1, 3), (4, 6), (5, 7)]
    assert rollout[0].visible_accelerators == ("0", "2")
    assert plan.weight_sync is not None and plan.weight_sync.rollout_stride == 2
    assert [g.components for g in plan.collocation_groups] == [("actor", "rollout")]


@pytest.mark.parametrize(
    "atp, rtp, total, per_node", [(1, 2, 8, 8), (2, 4, 8, 8), (1, 8, 8, 8), (2, 8, 16, 8), (1, 4, 16, 8), (1, 3, 6, 6)]
)
def test_collocated_rollout_tp_larger_than_actor_tp(atp: int, rtp: int, total: int, per_node: int) -> None:
    """Stride 1: every actor rank's GPU hosts exactly the one rollout shard listed for it."""
    plan = collocated(atp, rtp, total, per_node)
    ws = plan.weight_sync
    assert ws is not None and ws.mode == "collocated" and ws.rollout_stride == 1
    actor, rollout = plan.component("actor").processes, plan.component("rollout").processes
    assert [p.local_hardware_ranks for p in rollout] == [
        tuple(range(d * rtp % per_node, d * rtp % per_node + rtp)) for d in range(total // rtp)
    ]
    hosted = {g: (dp, tp) for dp, p in enumerate(rollout) for tp, g in enumerate(shard_gpus(p))}
    assert len(hosted) == total  # each GPU hosts one shard
    for a, p in enumerate(actor):
        assert ws.actor_to_rollout[a] == (hosted[gpu(p)],)


def test_collocated_rollout_shard_across_nodes_is_rejected() -> None:
    """Actor TP 16 over two 8-GPU nodes with rollout TP 2 gives stride 8: shard 0 = GPUs 0 and 8."""
    with pytest.raises(PlanError, match=r"would span nodes \[0, 1\]"):
        collocated(16, 2, 16)


def test_collocated_needs_divisible_tp() -> None:
    with pytest.raises(PlanError, match="actor tensor_parallel_size 4 and rollout's 3: one must divide the other"):
        plan_of(
            gpu_cluster(12, 12),
            {"actor,rollout": ("a800", "all")},
            {"actor": {"tensor_parallel_size": 4}, "rollout": {"tensor_parallel_size": 3}},
        )


def test_collocated_cannot_have_inference() -> None:
    with pytest.raises(PlanError, match="collocated actor/rollout cannot have a separate inference component"):
        plan_of(
            gpu_cluster(16),
            {"actor,rollout": ("a800", "0-7"), "inference": ("a800", "8-15")},
            {"actor": {"tensor_parallel_size": 2}, "rollout": {"tensor_parallel_size": 1}},
        )


# --- disaggregated ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "atp, app, rtp, n_actor, n_rollout",
    [
        (1, 1, 1, 8, 8),
        (2, 1, 4, 8, 8),
        (1, 1, 2, 8, 8),
        (4, 1, 2, 8, 8),
        (2, 2, 2, 8, 4),
        (2, 1, 1, 4, 8),
        (8, 1, 2, 8, 16),
        (1, 2, 4, 8, 8),
    ],
)
def test_disaggregated_map_covers_every_rollout_shard(
    atp: int, app: int, rtp: int, n_actor: int, n_rollout: int
) -> None:
    total = n_actor + n_rollout
    plan = plan_of(
        gpu_cluster(total),
        {"actor": ("a800", f"0-{n_actor - 1}"), "rollout": ("a800", f"{n_actor}-{total - 1}")},
        {
            "actor": {"tensor_parallel_size": atp, "pipeline_parallel_size": app},
            "rollout": {"tensor_parallel_size": rtp},
        },
    )
    ws = plan.weight_sync
    assert ws is not None and ws.mode == "disaggregated" and ws.rollout_stride == 1
    rollout = plan.component("rollout").processes
    assert len(rollout) == n_rollout // rtp
    assert [shard_gpus(p) for p in rollout] == [
        [((n_actor + d * rtp + t) // 8, (n_actor + d * rtp + t) % 8) for t in range(rtp)]
        for d in range(n_rollout // rtp)
    ]
    assert len(ws.actor_to_rollout) == n_actor
    targets = [t for ts in ws.actor_to_rollout for t in ts]
    assert all(0 <= dp < len(rollout) and 0 <= tp < rtp for dp, tp in targets)
    assert set(targets) == {(dp, tp) for dp in range(len(rollout)) for tp in range(rtp)}
    for a, ts in enumerate(ws.actor_to_rollout):
        ta = a % atp
        if atp >= rtp:  # the actor's tensor shard feeds the rollout shard that contains it
            assert {tp for _, tp in ts} <= {ta // (atp // rtp)}
        else:
            assert {tp for _, tp in ts} <= set(range(ta * (rtp // atp), (ta + 1) * (rtp // atp)))


def test_disaggregated_example_config() -> None:
    plan = plan_from_file(CONFIGS / "model-parallel-disaggregated.yaml")
    ws = plan.weight_sync
    assert ws is not None and ws.mode == "disaggregated"
    assert ws.actor_to_rollout[:4] == (((0, 0), (0, 1)), ((0, 2), (0, 3)), ((1, 0), (1, 1)), ((1, 2), (1, 3)))
    assert [p.cluster_node_rank for p in plan.component("rollout").processes] == [1, 1]


def test_disaggregated_with_inference() -> None:
    plan = plan_of(
        gpu_cluster(16),
        {"actor": ("a800", "0-7"), "rollout": ("a800", "8-11"), "inference": ("a800", "12-15")},
        {"actor": {"tensor_parallel_size": 2}, "rollout": {"tensor_parallel_size": 2}},
    )
    assert plan.weight_sync is not None and plan.weight_sync.mode == "disaggregated"
    assert [p.local_hardware_ranks for p in plan.component("inference").processes] == [(4,), (5,), (6,), (7,)]


@pytest.mark.parametrize(
    "placements",
    [
        {"actor": ("a800", "0-7"), "rollout": ("a800", "4-11")},
        {"actor": ("a800", "0-7"), "rollout": ("a800", "0-3")},
        {"actor": ("a800", "0-3"), "rollout": ("a800", "4-7"), "inference": ("a800", "6-7")},
        {"actor": ("a800", "0-3"), "rollout": ("a800", "4-7"), "inference": ("a800", "2-3")},
    ],
)
def test_neither_collocated_nor_disjoint_is_an_error(placements) -> None:
    with pytest.raises(PlanError) as info:
        plan_of(
            gpu_cluster(16), placements, {"actor": {"tensor_parallel_size": 2}, "rollout": {"tensor_parallel_size": 2}}
        )
    assert info.value.message.startswith(
        "model-parallel placement must be collocated (actor GPUs == rollout GPUs)"
        " or disaggregated (actor, rollout, inference pairwise disjoint)"
    )
    assert "drop tensor_parallel_size" in (info.value.hint or "")


def test_disaggregated_needs_divisible_tp() -> None:
    with pytest.raises(PlanError, match="actor tp 4 and rollout tp 3: one must divide the other"):
        plan_of(
            gpu_cluster(16),
            {"actor": ("a800", "0-7"), "rollout": ("a800", "8-13")},
            {"actor": {"tensor_parallel_size": 4}, "rollout": {"tensor_parallel_size": 3}},
        )


# --- shared errors ---------------------------------------------------------------------------------


def test_non_contiguous_gpus() -> None:
    with pytest.raises(PlanError, match="model-parallel component 'actor' must use contiguous GPUs, got 0-3,6-9"):
        plan_of(
            gpu_cluster(16),
            {"actor": ("a800", "0-3,6-9"), "rollout": ("a800", "10-13")},
            {"actor": {"tensor_parallel_size": 2}, "rollout": {"tensor_parallel_size": 2}},
        )


def test_actor_gpus_not_a_multiple_of_tp_pp() -> None:
    with pytest.raises(PlanError, match=r"actor has 6 GPUs, not a multiple of tp\*pp = 4\*1"):
        plan_of(
            gpu_cluster(16),
            {"actor": ("a800", "0-5"), "rollout": ("a800", "8-15")},
            {"actor": {"tensor_parallel_size": 4}, "rollout": {"tensor_parallel_size": 2}},
        )


def test_rollout_gpus_not_a_multiple_of_tp() -> None:
    with pytest.raises(PlanError, match="rollout: Packed: 6 resources"):
        plan_of(
            gpu_cluster(16),
            {"actor": ("a800", "0-7"), "rollout": ("a800", "8-13")},
            {"actor": {"tensor_parallel_size": 2}, "rollout": {"tensor_parallel_size": 4}},
        )


def test_model_parallel_needs_rollout() -> None:
    with pytest.raises(SpecError, match="needs a 'rollout' component"):
        plan_of(gpu_cluster(8), {"actor": ("a800", "all")}, {"actor": {"tensor_parallel_size": 2}})


def test_model_parallel_needs_gpus_and_one_selection() -> None:
    with pytest.raises(PlanError, match="model-parallel component 'actor' must be placed on GPUs"):
        plan_of(
            gpu_cluster(8),
            {"actor": ("cpu", "0"), "rollout": ("cpu", "0")},
            {"actor": {"tensor_parallel_size": 1}, "rollout": {"tensor_parallel_size": 1}},
        )
    with pytest.raises(PlanError, match="must use the same node group"):
        plan_of(
            gpu_cluster(8),
            {"actor": ("a800", "0-3"), "rollout": (None, "4-7")},
            {"actor": {"tensor_parallel_size": 1}, "rollout": {"tensor_parallel_size": 1}},
        )
