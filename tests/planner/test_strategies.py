"""Flexible, Packed and Node as public API, with RLinf's docs examples and without Packed's boundary bug."""

from __future__ import annotations

import itertools

import pytest

from hpcplace.errors import PlanError
from hpcplace.plan.placement import resource_space
from hpcplace.plan.strategies import Flexible, Node, Packed
from tests.planner.conftest import cluster, group


def one_node():
    return cluster(group("a800", 8, gpu_type="a800"))


def two_nodes():
    return cluster(
        group("a800", 8, nodes=2, gpu_type="a800"), group("rtx", 4, gpu_type="rtx4090"), group("cpu", 0, nodes=2)
    )


def gpu_counts(placements) -> list[int]:
    return [len(p.visible_accelerators) for p in placements]


def hw(placements) -> list[tuple[int, tuple[int, ...]]]:
    return [(p.cluster_node_rank, p.local_hardware_ranks) for p in placements]


# --- Flexible ------------------------------------------------------------------------------------


def test_flexible_docs_example() -> None:
    placements = Flexible([[0, 1], [2], [3]]).get_placement(one_node())
    assert gpu_counts(placements) == [2, 1, 1]
    assert [p.visible_accelerators for p in placements] == [("0", "1"), ("2",), ("3",)]


def test_flexible_sorts_within_and_across_processes_like_rlinf() -> None:
    placements = Flexible([[3], [1, 0], [7, 5, 6], [2]]).get_placement(one_node())
    assert [p.local_hardware_ranks for p in placements] == [(0, 1), (2,), (3,), (5, 6, 7)]
    assert [p.rank for p in placements] == [0, 1, 2, 3]


def test_flexible_global_ranks_cross_nodes_between_processes() -> None:
    placements = Flexible([[7], [8, 9]]).get_placement(two_nodes())
    assert hw(placements) == [(0, (7,)), (1, (0, 1))]


def test_flexible_ranks_are_local_to_the_node_group() -> None:
    placements = Flexible([[0], [3]], node_group="rtx").get_placement(two_nodes())
    assert hw(placements) == [(2, (0,)), (2, (3,))]


def test_flexible_over_groups_in_listed_order() -> None:
    placements = Flexible([[0, 1], [4]], node_group=["RTX", "a800"]).get_placement(two_nodes())
    assert hw(placements) == [(2, (0, 1)), (0, (0,))]
    assert [p.placement_node_rank for p in placements] == [0, 1]


def test_flexible_rejects_a_process_across_nodes() -> None:
    with pytest.raises(PlanError, match=r"Flexible: process 0 would span nodes \[0, 1\]"):
        Flexible([[7, 8]]).get_placement(two_nodes())


@pytest.mark.parametrize("ranks", [[], [[0], []]])
def test_flexible_rejects_empty(ranks) -> None:
    with pytest.raises(PlanError, match="at least one resource rank"):
        Flexible(ranks).get_placement(one_node())


def test_flexible_rejects_out_of_range_and_duplicates() -> None:
    with pytest.raises(PlanError, match="out of range 0-7"):
        Flexible([[8]]).get_placement(one_node())
    with pytest.raises(PlanError, match="more than once"):
        Flexible([[1, 1]]).get_placement(one_node())


def test_flexible_without_isolation() -> None:
    placements = Flexible([[2]]).get_placement(one_node(), isolate_accelerator=False)
    assert placements[0].visible_accelerators == tuple("01234567")
    assert placements[0].isolate_accelerator is False
    assert placements[0].local_hardware_ranks == (2,)


# --- Packed --------------------------------------------------------------------------------------


def test_packed_docs_example_one_gpu_each() -> None:
    placements = Packed(0, 3).get_placement(one_node())
    assert gpu_counts(placements) == [1, 1, 1, 1]
    assert [p.local_hardware_ranks for p in placements] == [(0,), (1,), (2,), (3,)]


def test_packed_docs_example_two_gpus_each() -> None:
    placements = Packed(0, 3, num_hardware_per_process=2).get_placement(one_node())
    assert gpu_counts(placements) == [2, 2]
    assert [p.local_hardware_ranks for p in placements] == [(0, 1), (2, 3)]


def test_packed_docs_example_strided() -> None:
    placements = Packed(0, 3, stride=2, num_hardware_per_process=2).get_placement(one_node())
    assert gpu_counts(placements) == [2, 2]
    assert [p.local_hardware_ranks for p in placements] == [(0, 2), (1, 3)]


def _blocks_reference(start: int, end: int, per: int, stride: int) -> list[list[int]]:
    """Independent statement of Packed: cut start..end into blocks of stride*per ranks; in each block, process
    j (0 <= j < stride) takes every stride-th rank starting at j."""
    ranks = list(range(start, end + 1))
    size = stride * per
    out = []
    for b in range(0, len(ranks), size):
        block = ranks[b : b + size]
        out.extend(block[j::stride] for j in range(stride))
    return out


@pytest.mark.parametrize("start, per, stride, blocks", list(itertools.product([0, 3], [1, 2, 3], [1, 2, 4], [1, 2])))
def test_packed_stride_formula(start: int, per: int, stride: int, blocks: int) -> None:
    """Process r gets start + (r//s)*s*t + r%s + k*s for k < t."""
    end = start + blocks * stride * per - 1
    lists = Packed(start, end, per, stride).resource_lists(None)  # type: ignore[arg-type]
    formula = [
        [start + (r // stride) * stride * per + r % stride + k * stride for k in range(per)]
        for r in range(blocks * stride)
    ]
    assert lists == formula == _blocks_reference(start, end, per, stride)


def test_packed_may_cross_a_node_boundary_between_processes() -> None:
    placements = Packed(6, 9, num_hardware_per_process=2).get_placement(two_nodes())
    assert hw(placements) == [(0, (6, 7)), (1, (0, 1))]


def test_packed_last_gpu_of_the_node_is_fine() -> None:
    assert hw(Packed(0, 7).get_placement(one_node()))[-1] == (0, (7,))


def test_packed_rejects_gpu_8_of_an_8_gpu_node() -> None:
    """RLinf's node-boundary check is off by one and would hand out GPU 8 of an 8-GPU node."""
    with pytest.raises(PlanError) as info:
        Packed(0, 8).get_placement(one_node())
    assert "process 8 asks for GPU rank 8, out of range 0-7" in info.value.message


@pytest.mark.parametrize(
    "args, span",
    [
        ((7, 8, 2, 1), "[7, 8]"),
        ((6, 9, 4, 1), "[6, 7, 8, 9]"),
        ((4, 11, 4, 2), "[4, 6, 8, 10]"),
    ],
)
def test_packed_rejects_a_process_across_nodes(args, span: str) -> None:
    with pytest.raises(PlanError) as info:
        Packed(*args).get_placement(two_nodes())
    assert f"would span nodes [0, 1] with GPU ranks {span}" in info.value.message


def test_packed_on_one_node_group_and_across_groups() -> None:
    assert hw(Packed(0, 3, 2, node_group="rtx").get_placement(two_nodes())) == [(2, (0, 1)), (2, (2, 3))]
    placements = Packed(0, 5, 2, node_group="rtx,a800").get_placement(two_nodes())
    assert hw(placements) == [(2, (0, 1)), (2, (2, 3)), (0, (0, 1))]
    assert [p.het_group for p in placements] == [1, 1, 0]


def test_packed_on_nodes() -> None:
    placements = Packed(0, 1, node_group="cpu").get_placement(two_nodes())
    assert [p.cluster_node_rank for p in placements] == [3, 4]
    assert all(p.resource_type == "node" for p in placements)


@pytest.mark.parametrize(
    "args, message",
    [
        ((-1, 3), "need 0 <= start <= end, got start=-1 end=3"),
        ((4, 3), "need 0 <= start <= end, got start=4 end=3"),
        ((0, 3, 0), "num_hardware_per_process and stride must be >= 1, got 0 and 1"),
        ((0, 3, 1, 0), "num_hardware_per_process and stride must be >= 1, got 1 and 0"),
        ((0, 4, 2), "5 resources (0-4) are not a multiple of num_hardware_per_process*stride = 2*1"),
        ((0, 5, 2, 2), "6 resources (0-5) are not a multiple of num_hardware_per_process*stride = 2*2"),
    ],
)
def test_packed_argument_errors(args, message: str) -> None:
    with pytest.raises(PlanError) as info:
        Packed(*args).get_placement(one_node())
    assert info.value.message == f"Packed: {message}"


# --- Node ----------------------------------------------------------------------------------------


def test_node_docs_example_four_processes_on_node_0() -> None:
    placements = Node([0] * 4).get_placement(one_node())
    assert [p.rank for p in placements] == [0, 1, 2, 3]
    assert [p.local_rank for p in placements] == [0, 1, 2, 3]
    assert {p.local_world_size for p in placements} == {4}
    assert all(p.visible_accelerators == tuple("01234567") and not p.isolate_accelerator for p in placements)


def test_node_ranks_are_sorted_and_global() -> None:
    placements = Node([4, 0, 2]).get_placement(two_nodes())
    assert [p.cluster_node_rank for p in placements] == [0, 2, 4]
    assert [p.node_group_label for p in placements] == ["a800", "rtx", "cpu"]
    assert [p.visible_accelerators for p in placements] == [tuple("01234567"), ("0", "1", "2", "3"), ()]


def test_node_ranks_local_to_node_groups() -> None:
    assert [p.cluster_node_rank for p in Node([1], node_group="cpu").get_placement(two_nodes())] == [4]
    assert [p.cluster_node_rank for p in Node([0, 1], node_group="a800").get_placement(two_nodes())] == [0, 1]
    assert [p.cluster_node_rank for p in Node([0, 1, 2], node_group="cpu,rtx").get_placement(two_nodes())] == [3, 4, 2]


def test_node_ranks_over_gpu_groups_in_reverse_order() -> None:
    assert [p.cluster_node_rank for p in Node([0, 1], node_group="rtx,a800").get_placement(two_nodes())] == [2, 0]


def test_node_errors() -> None:
    with pytest.raises(PlanError, match="must not be empty"):
        Node([]).get_placement(one_node())
    with pytest.raises(PlanError, match="out of range 0-1"):
        Node([2], node_group="cpu").get_placement(two_nodes())


def test_strategies_resource_space_helper() -> None:
    """The same selection as the YAML `node_group` takes (sanity check of the shared space)."""
    assert resource_space(two_nodes(), ("rtx",)).size == 4


def test_node_counts_every_node_of_a_gpu_group() -> None:
    clu = cluster(group("g", [2, 0, 2]))
    assert [p.cluster_node_rank for p in Node([0, 1, 2], node_group="g").get_placement(clu)] == [0, 1, 2]
