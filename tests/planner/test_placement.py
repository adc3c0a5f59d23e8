"""Resource spaces and per-process placements: node groups, global rank -> node, labels, fields."""

from __future__ import annotations

import pytest

from hpcplace.errors import PlanError
from hpcplace.plan.placement import Placement, ResourceSpace, parse_group_labels, resource_space
from hpcplace.plan.process_table import place
from tests.planner.conftest import cluster, gpus_of, group, plan_of

RLINF_FIELDS = (
    "rank",
    "cluster_node_rank",
    "placement_node_rank",
    "local_accelerator_rank",
    "accelerator_type",
    "local_rank",
    "local_world_size",
    "visible_accelerators",
    "isolate_accelerator",
    "local_hardware_ranks",
    "node_group_label",
)
SLURM_FIELDS = ("partition", "het_group", "group_node_index", "resource_type")


def test_placement_fields_are_rlinf_names_then_slurm_facts() -> None:
    assert tuple(Placement.__dataclass_fields__) == RLINF_FIELDS + SLURM_FIELDS


def hetero():
    """a800: 2 nodes x 8 (ranks 0-1); rtx: 4 and 2 GPUs (ranks 2-3); robot: 4 arms and 2 GPUs (rank 4);
    cpu: 2 GPU-less nodes (ranks 5-6)."""
    return cluster(
        group("a800", 8, nodes=2, gpu_type="a800"),
        group("rtx", [4, 2], gpu_type="rtx4090"),
        group("robot", 2, hardware=("franka", 4)),
        group("cpu", 0, nodes=2),
    )


# --- every field of one placement ----------------------------------------------------------------


def test_every_field_of_a_gpu_placement() -> None:
    plan = plan_of(hetero(), {"actor": ("rtx", "0-3:0-1,4-5")})
    procs = plan.component("actor").processes
    assert procs == (
        Placement(
            rank=0,
            cluster_node_rank=2,
            placement_node_rank=0,
            local_accelerator_rank=0,
            accelerator_type="rtx4090",
            local_rank=0,
            local_world_size=2,
            visible_accelerators=("0", "1"),
            isolate_accelerator=True,
            local_hardware_ranks=(0, 1),
            node_group_label="rtx",
            partition="p-rtx",
            het_group=1,
            group_node_index=0,
            resource_type="rtx4090",
        ),
        Placement(1, 2, 0, 2, "rtx4090", 1, 2, ("2", "3"), True, (2, 3), "rtx", "p-rtx", 1, 0, "rtx4090"),
        Placement(2, 3, 1, 0, "rtx4090", 0, 2, ("0",), True, (0,), "rtx", "p-rtx", 1, 1, "rtx4090"),
        Placement(3, 3, 1, 1, "rtx4090", 1, 2, ("1",), True, (1,), "rtx", "p-rtx", 1, 1, "rtx4090"),
    )


def test_every_field_of_a_hardware_placement() -> None:
    """Robots: local_hardware_ranks are robot indices; the process sees every GPU of its node."""
    plan = plan_of(hetero(), {"env": ("robot", "0-3:0-7")})
    procs = plan.component("env").processes
    assert len(procs) == 8
    assert procs[5] == Placement(5, 4, 0, 0, "gpu", 5, 8, ("0", "1"), False, (2,), "robot", "p-robot", 2, 0, "franka")
    assert [p.local_hardware_ranks for p in procs] == [(r // 2,) for r in range(8)]


def test_every_field_of_a_node_placement_on_a_gpu_less_node() -> None:
    plan = plan_of(hetero(), {"agent": ("cpu", "0-1:0-3")})
    procs = plan.component("agent").processes
    assert procs[3] == Placement(3, 6, 1, -1, "none", 1, 2, (), False, (), "cpu", "p-cpu", 3, 1, "node")
    assert [p.cluster_node_rank for p in procs] == [5, 5, 6, 6]


# --- global rank -> node ---------------------------------------------------------------------------


def test_nodes_with_different_gpu_counts_count_cumulatively() -> None:
    clu = cluster(group("g", [4, 2, 8]))
    space = resource_space(clu, ("g",))
    assert space.node_of == (0,) * 4 + (1,) * 2 + (2,) * 8
    assert space.local_of == (0, 1, 2, 3, 0, 1) + tuple(range(8))
    plan = plan_of(clu, {"actor": "all"})
    assert gpus_of(plan, "actor") == (
        [[(0, i)] for i in range(4)] + [[(1, i)] for i in range(2)] + [[(2, i)] for i in range(8)]
    )
    assert [p.local_world_size for p in plan.component("actor").processes] == [4] * 4 + [2] * 2 + [8] * 8


def test_a_gpu_less_node_inside_a_gpu_group_contributes_no_ranks() -> None:
    plan = plan_of(cluster(group("g", [2, 0, 2])), {"actor": "0-3"})
    assert gpus_of(plan, "actor") == [[(0, 0)], [(0, 1)], [(2, 0)], [(2, 1)]]


def test_a_process_may_not_span_nodes() -> None:
    with pytest.raises(PlanError) as info:
        plan_of(cluster(group("g", 8, nodes=2)), {"actor": "4-11:0"})
    assert "process 0 would span nodes [0, 1] with GPU ranks [4, 5, 6, 7, 8, 9, 10, 11]" in info.value.message
    assert "one node" in (info.value.hint or "")


def test_a_process_may_not_span_nodes_with_uneven_counts() -> None:
    """[4, 2] GPUs: `0-5:0-1` gives ranks 0-2 and 3-5; 3 lives on node 0, 4-5 on node 1."""
    with pytest.raises(PlanError, match=r"process 1 would span nodes \[0, 1\]"):
        plan_of(cluster(group("g", [4, 2])), {"actor": "0-5:0-1"})


# --- node_group selections -------------------------------------------------------------------------


def test_multi_group_ranks_span_groups_in_listed_order() -> None:
    plan = plan_of(hetero(), {"actor": ("a800,rtx", "14-19")})
    assert gpus_of(plan, "actor") == [[(1, 6)], [(1, 7)], [(2, 0)], [(2, 1)], [(2, 2)], [(2, 3)]]
    procs = plan.component("actor").processes
    assert [p.node_group_label for p in procs] == ["a800"] * 2 + ["rtx"] * 4
    assert [p.het_group for p in procs] == [0, 0, 1, 1, 1, 1]
    assert [p.accelerator_type for p in procs] == ["a800"] * 2 + ["rtx4090"] * 4


def test_multi_group_in_reverse_cluster_order() -> None:
    """RLinf asserts when groups are listed against cluster order; hpcplace places them in listed order."""
    plan = plan_of(hetero(), {"actor": ("rtx,a800", "0-9")})
    procs = plan.component("actor").processes
    assert gpus_of(plan, "actor") == (
        [[(2, 0)], [(2, 1)], [(2, 2)], [(2, 3)], [(3, 0)], [(3, 1)]] + [[(0, i)] for i in range(4)]
    )
    assert [p.placement_node_rank for p in procs] == [0, 0, 0, 0, 1, 1, 2, 2, 2, 2]
    assert [p.local_rank for p in procs] == [0, 1, 2, 3, 0, 1, 0, 1, 2, 3]
    assert [p.local_world_size for p in procs] == [4, 4, 4, 4, 2, 2, 4, 4, 4, 4]
    assert [p.het_group for p in procs] == [1] * 6 + [0] * 4
    assert [p.group_node_index for p in procs] == [0, 0, 0, 0, 1, 1, 0, 0, 0, 0]
    assert [p.partition for p in procs] == ["p-rtx"] * 6 + ["p-a800"] * 4


def test_multi_group_as_a_list() -> None:
    a = plan_of(hetero(), {"actor": (["rtx", "a800"], "0-9")})
    b = plan_of(hetero(), {"actor": ("rtx,a800", "0-9")})
    assert a.component("actor").processes == b.component("actor").processes


def test_parse_group_labels() -> None:
    assert parse_group_labels(None) is None
    assert parse_group_labels("a800") == ("a800",)
    assert parse_group_labels(" a800 , 4090 ") == ("a800", "4090")
    assert parse_group_labels(["a800", 4090]) == ("a800", "4090")  # type: ignore[list-item]
    assert parse_group_labels(",") is None


@pytest.mark.parametrize("spelling", ["A800", "a800", "A800,RTX", "Rtx,a800"])
def test_labels_are_case_insensitive(spelling: str) -> None:
    plan = plan_of(hetero(), {"actor": (spelling, "0")})
    proc = plan.component("actor").processes[0]
    assert proc.node_group_label in ("a800", "rtx")  # the declared spelling, not the user's
    assert proc.node_group_label == spelling.split(",")[0].lower()


def test_unknown_label() -> None:
    with pytest.raises(PlanError) as info:
        plan_of(hetero(), {"actor": ("h100", "0")})
    assert "unknown node group 'h100'" in info.value.message
    assert info.value.hint == "defined node groups: a800, rtx, robot, cpu, or `node`"


@pytest.mark.parametrize("labels", ["a800,a800", "a800,A800"])
def test_label_listed_twice(labels: str) -> None:
    with pytest.raises(PlanError, match="is listed twice"):
        plan_of(hetero(), {"actor": (labels, "0")})


def test_node_label_cannot_be_combined() -> None:
    with pytest.raises(PlanError, match="`node` cannot be combined"):
        plan_of(hetero(), {"actor": ("a800,node", "0")})


@pytest.mark.parametrize("spelling", ["node", "NODE", "Node"])
def test_node_label_counts_every_node_and_sees_all_gpus(spelling: str) -> None:
    plan = plan_of(hetero(), {"agent": (spelling, "0-6")})
    procs = plan.component("agent").processes
    assert [p.cluster_node_rank for p in procs] == list(range(7))
    assert [p.visible_accelerators for p in procs] == [
        tuple("01234567"),
        tuple("01234567"),
        ("0", "1", "2", "3"),
        ("0", "1"),
        ("0", "1"),
        (),
        (),
    ]
    assert all(p.isolate_accelerator is False and p.local_hardware_ranks == () for p in procs)
    assert all(p.resource_type == "node" for p in procs)
    assert [p.accelerator_type for p in procs] == ["a800", "a800", "rtx4090", "rtx4090", "gpu", "none", "none"]
    assert [p.local_accelerator_rank for p in procs] == [0, 0, 0, 0, 0, -1, -1]
    assert [p.node_group_label for p in procs] == ["a800", "a800", "rtx", "rtx", "robot", "cpu", "cpu"]


def test_node_label_with_many_processes_per_node() -> None:
    """RLinf's example `0-1:0-199,2-3:200-511` (corrected to divisible counts)."""
    clu = cluster(group("a800", 8, nodes=2), group("4090", 8, nodes=2))
    plan = plan_of(clu, {"agent": ("node", "0-1:0-199,2-3:200-511")})
    procs = plan.component("agent").processes
    assert len(procs) == 512
    assert [sum(p.cluster_node_rank == n for p in procs) for n in range(4)] == [100, 100, 156, 156]
    assert procs[100].local_rank == 0 and procs[100].local_world_size == 100
    assert procs[511].local_rank == 155 and procs[511].placement_node_rank == 3


def test_group_without_gpus_counts_nodes() -> None:
    space = resource_space(hetero(), ("cpu",))
    assert space.kind == "node" and space.size == 2 and space.resource_name == "node"
    with pytest.raises(PlanError, match="out of range"):
        plan_of(hetero(), {"agent": ("cpu", "0-2")})


def test_ignore_hardware_counts_nodes() -> None:
    clu = cluster(group("a800", 8, nodes=2, ignore_hardware=True))
    plan = plan_of(clu, {"agent": ("a800", "0-1:0-3")})
    procs = plan.component("agent").processes
    assert [p.cluster_node_rank for p in procs] == [0, 0, 1, 1]
    assert all(p.visible_accelerators == tuple("01234567") and not p.isolate_accelerator for p in procs)


def test_hardware_group_counts_hardware_per_node() -> None:
    clu = cluster(group("gpu", 8), group("robot", [0, 0], hardware=("franka", [3, 1])))
    plan = plan_of(clu, {"env": ("robot", "0-3")})
    assert gpus_of(plan, "env") == [[(1, 0)], [(1, 1)], [(1, 2)], [(2, 0)]]
    assert all(p.resource_type == "franka" and p.visible_accelerators == () for p in plan.component("env").processes)
    with pytest.raises(PlanError, match="out of range"):
        plan_of(clu, {"env": ("robot", "0-4")})


def test_gpu_and_hardware_groups_together() -> None:
    """a800 GPUs 0-15 then robots 16-19; ranks of one process stay on one node and one type."""
    plan = plan_of(hetero(), {"x": ("a800,robot", "14-15,16-19:2-9")})
    procs = plan.component("x").processes
    assert [p.resource_type for p in procs] == ["a800"] * 2 + ["franka"] * 8
    assert [p.isolate_accelerator for p in procs] == [True] * 2 + [False] * 8
    assert procs[2].local_hardware_ranks == (0,) and procs[9].local_hardware_ranks == (3,)


def test_gpu_and_cpu_groups_together_count_nodes() -> None:
    """As RLinf: when one selected group has no hardware, every selected group counts nodes."""
    space = resource_space(hetero(), ("a800", "cpu"))
    assert space.kind == "node"
    assert space.node_of == (0, 1, 5, 6)


def test_default_selection_on_a_gpu_only_cluster() -> None:
    plan = plan_of(cluster(group("a", 8), group("b", 4)), {"actor": "all"})
    assert len(plan.component("actor").processes) == 12


def test_default_selection_on_a_cpu_only_cluster_counts_nodes() -> None:
    plan = plan_of(cluster(group("a", 0, nodes=3)), {"agent": "all"})
    assert [p.cluster_node_rank for p in plan.component("agent").processes] == [0, 1, 2]


def test_default_selection_counts_only_accelerators() -> None:
    plan = plan_of(hetero(), {"actor": "all"})
    procs = plan.component("actor").processes
    assert all(p.resource_type in ("a800", "rtx4090", "gpu") for p in procs)
    assert all(p.isolate_accelerator for p in procs)
    assert len(procs) == 16 + 6 + 2


# --- place() checks --------------------------------------------------------------------------------


def _space() -> ResourceSpace:
    return ResourceSpace(
        ("x",), "gpu", node_of=(0, 0, 0), local_of=(0, 1, 2), type_of=("a", "a", "b"), kind_of=("gpu", "gpu", "gpu")
    )


def test_place_rejects_mixed_types_on_one_node() -> None:
    with pytest.raises(PlanError, match=r"process 0 mixes hardware types \['a', 'b'\]"):
        place(cluster(group("g", 3)), _space(), [[1, 2]])


def test_place_rejects_empty_duplicate_and_out_of_range() -> None:
    clu = cluster(group("g", 3))
    with pytest.raises(PlanError, match="process 1 has no resources"):
        place(clu, _space(), [[0], []])
    with pytest.raises(PlanError, match=r"lists GPU ranks \[0, 0\] more than once"):
        place(clu, _space(), [[0, 0]])
    with pytest.raises(PlanError, match="asks for GPU rank 3, out of range 0-2"):
        place(clu, _space(), [[3]])


def test_place_without_isolation_shows_all_gpus() -> None:
    clu = cluster(group("g", 4))
    procs = place(clu, resource_space(clu, None), [[1], [2, 3]], isolate_accelerator=False)
    assert [p.visible_accelerators for p in procs] == [("0", "1", "2", "3")] * 2
    assert [p.isolate_accelerator for p in procs] == [False, False]
    assert [p.local_hardware_ranks for p in procs] == [(1,), (2, 3)]
