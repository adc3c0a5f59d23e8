"""RLinf's placement strategies as public API: Flexible, Packed and Node.

Each turns its arguments into per-process resource-rank lists inside a node-group selection and
then into Placements; semantics follow RLinf, without its Packed node-boundary bug (a process is
never handed resources across a node boundary: that is rejected with the offending ranks).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hpcplace.config.cluster import Cluster
from hpcplace.errors import PlanError
from hpcplace.plan.placement import Placement, ResourceSpace, parse_group_labels, resource_space
from hpcplace.plan.process_table import place


@dataclass(frozen=True)
class Flexible:
    """Explicit resource ranks per process; processes are ordered by their first rank (as RLinf)."""

    hardware_ranks: Sequence[Sequence[int]]
    node_group: str | Sequence[str] | None = None

    def resource_lists(self, space: ResourceSpace) -> list[list[int]]:
        if not self.hardware_ranks or any(not ranks for ranks in self.hardware_ranks):
            raise PlanError("Flexible: every process needs at least one resource rank")
        lists = [sorted(ranks) for ranks in self.hardware_ranks]
        lists.sort(key=lambda ranks: ranks[0])
        return lists

    def get_placement(self, cluster: Cluster, isolate_accelerator: bool = True) -> list[Placement]:
        return _placements(self, cluster, isolate_accelerator, parse_group_labels(self.node_group))


@dataclass(frozen=True)
class Packed:
    """Fill resources start..end in order, `num_hardware_per_process` each, optionally strided.

    With stride s and t resources per process, process r gets start + (r//s)*s*t + r%s + k*s, k<t.
    """

    start_hardware_rank: int
    end_hardware_rank: int
    num_hardware_per_process: int = 1
    stride: int = 1
    node_group: str | Sequence[str] | None = None

    def resource_lists(self, space: ResourceSpace) -> list[list[int]]:
        start, end = self.start_hardware_rank, self.end_hardware_rank
        per, stride = self.num_hardware_per_process, self.stride
        if start < 0 or end < start:
            raise PlanError(f"Packed: need 0 <= start <= end, got start={start} end={end}")
        if per < 1 or stride < 1:
            raise PlanError(f"Packed: num_hardware_per_process and stride must be >= 1, got {per} and {stride}")
        total = end - start + 1
        if total % (per * stride):
            raise PlanError(
                f"Packed: {total} resources ({start}-{end}) are not a multiple of "
                f"num_hardware_per_process*stride = {per}*{stride}",
                hint="choose start/end so every process gets a full set of resources",
            )
        lists = []
        for r in range(total // per):
            base = start + (r // stride) * stride * per + r % stride
            lists.append([base + k * stride for k in range(per)])
        return lists

    def get_placement(self, cluster: Cluster, isolate_accelerator: bool = True) -> list[Placement]:
        return _placements(self, cluster, isolate_accelerator, parse_group_labels(self.node_group))


@dataclass(frozen=True)
class Node:
    """One process per listed node rank (sorted); the process sees all GPUs of its node."""

    node_ranks: Sequence[int]
    node_group: str | Sequence[str] | None = None

    def resource_lists(self, space: ResourceSpace) -> list[list[int]]:
        if not self.node_ranks:
            raise PlanError("Node: node_ranks must not be empty")
        return [[r] for r in sorted(self.node_ranks)]

    def get_placement(self, cluster: Cluster, isolate_accelerator: bool = True) -> list[Placement]:
        labels = parse_group_labels(self.node_group) or ("node",)
        return _placements(self, cluster, isolate_accelerator, labels, force_nodes=True)


Strategy = Flexible | Packed | Node


def _placements(
    strategy: Strategy, cluster: Cluster, isolate: bool, labels: tuple[str, ...] | None, force_nodes: bool = False
) -> list[Placement]:
    space = resource_space(cluster, labels, count_nodes=force_nodes)
    return list(
        place(cluster, space, strategy.resource_lists(space), isolate_accelerator=isolate, what=type(strategy).__name__)
    )
