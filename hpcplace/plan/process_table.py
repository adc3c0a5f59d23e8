"""A component's processes, stored compactly: runs of consecutive ranks on one node.

A 16,384-node plan has over a million processes; one `Placement` object each costs ~0.5 KB and
seconds to build. Processes on one node differ only in their rank and local rank, and nodes of a
run of identical layouts differ only in node facts, so `Processes` keeps per node a run
(first rank, node, first local rank, slots) where a slot is what one process looks like on its
node (devices, visibility, resource type), and the slot tuples are shared between runs.

`Processes` is a `Sequence[Placement]`: indexing and iteration build the same `Placement`s the
planner always returned (lazily), so callers of `ComponentPlan.processes` see no difference;
code that must scale (lowering, plan.json, the index) reads `runs` / `nodes()` instead.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, overload

from hpcplace.config.cluster import Cluster, Node
from hpcplace.config.rank_syntax import RankMapPart, SpreadLists
from hpcplace.errors import PlanError
from hpcplace.plan.placement import NO_ACCELERATOR, Placement, ResourceSpace


class Slot(NamedTuple):
    """One process as seen on its node: everything of its Placement that does not name the node
    or count processes."""

    local_accelerator_rank: int
    visible_accelerators: tuple[str, ...]
    isolate_accelerator: bool
    local_hardware_ranks: tuple[int, ...]
    resource_type: str


class Run(NamedTuple):
    """Ranks first_rank .. first_rank+len(slots)-1, all on `node`, with local ranks from first_local."""

    first_rank: int
    node: Node
    first_local: int
    slots: tuple[Slot, ...]


@dataclass(frozen=True)
class NodeProcesses:
    """Every process of one component on one node, in local-rank order."""

    cluster_node_rank: int
    het_group: int
    group_node_index: int
    placement_node_rank: int
    ranks: Sequence[int]  # a range when the ranks are consecutive (the common case)
    slots: tuple[Slot, ...]


def accelerator_type(node: Node) -> str:
    return (node.gpu_type or "gpu") if node.gpus else NO_ACCELERATOR


class Processes(Sequence[Placement]):
    """The processes of one component, rank order; see the module docstring."""

    __slots__ = ("_count", "_firsts", "_len", "_nodes", "_order", "runs")

    def __init__(self, runs: Sequence[Run]) -> None:
        self.runs: tuple[Run, ...] = tuple(runs)
        self._firsts = [r.first_rank for r in self.runs]
        order: dict[int, int] = {}
        count: dict[int, int] = {}
        expected = 0
        for run in self.runs:
            if run.first_rank != expected or not run.slots:
                raise ValueError("runs must cover ranks 0..n-1 in order, each non-empty")
            n = run.node.rank
            if n not in order:
                order[n] = len(order)
            if run.first_local != count.get(n, 0):
                raise ValueError(f"run at rank {run.first_rank}: local ranks on node {n} are not dense")
            count[n] = run.first_local + len(run.slots)
            expected += len(run.slots)
        self._order = order
        self._count = count
        self._len = expected
        self._nodes: list[NodeProcesses] | None = None

    # -- Sequence[Placement] ------------------------------------------------------------------

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> Placement: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Placement, ...]: ...

    def __getitem__(self, index: int | slice) -> Placement | tuple[Placement, ...]:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(self._len)))
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("process rank out of range")
        run = self.runs[bisect_right(self._firsts, index) - 1]
        k = index - run.first_rank
        return self._placement(run, k)

    def __iter__(self) -> Iterator[Placement]:
        for run in self.runs:
            for k in range(len(run.slots)):
                yield self._placement(run, k)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Processes):
            return self.runs == other.runs
        if isinstance(other, (tuple, list)):
            return len(other) == self._len and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.runs)

    def __repr__(self) -> str:
        return f"Processes({self._len} processes in {len(self.runs)} runs on {len(self._order)} nodes)"

    def _placement(self, run: Run, k: int) -> Placement:
        node, slot = run.node, run.slots[k]
        return Placement(
            run.first_rank + k,
            node.rank,
            self._order[node.rank],
            slot.local_accelerator_rank,
            accelerator_type(node),
            run.first_local + k,
            self._count[node.rank],
            slot.visible_accelerators,
            slot.isolate_accelerator,
            slot.local_hardware_ranks,
            node.group_label,
            node.partition,
            node.group_index,
            node.index_in_group,
            slot.resource_type,
        )

    # -- the compact views ----------------------------------------------------------------------

    def placement_node_rank(self, node_rank: int) -> int:
        return self._order[node_rank]

    def local_world_size(self, node_rank: int) -> int:
        return self._count[node_rank]

    def node_ranks(self) -> tuple[int, ...]:
        """Cluster node ranks used, in order of first use (= placement node rank order)."""
        return tuple(self._order)

    def nodes(self) -> list[NodeProcesses]:
        """Per node (in placement-node-rank order): ranks and slots in local-rank order."""
        if self._nodes is None:
            self._nodes = self._build_nodes()
        return list(self._nodes)

    def _build_nodes(self) -> list[NodeProcesses]:
        first: dict[int, Run] = {}
        merged: dict[int, list[Run]] = {}
        for run in self.runs:
            n = run.node.rank
            if n in first:
                merged.setdefault(n, [first[n]]).append(run)
            else:
                first[n] = run
        out = []
        for n, run in first.items():
            runs = merged.get(n)
            if runs is None:
                ranks: Sequence[int] = range(run.first_rank, run.first_rank + len(run.slots))
                out.append(
                    NodeProcesses(n, run.node.group_index, run.node.index_in_group, self._order[n], ranks, run.slots)
                )
            else:
                ranks = tuple(r.first_rank + k for r in runs for k in range(len(r.slots)))
                out.append(
                    NodeProcesses(
                        n,
                        run.node.group_index,
                        run.node.index_in_group,
                        self._order[n],
                        ranks,
                        tuple(s for r in runs for s in r.slots),
                    )
                )
        return out


def node_processes(processes: Sequence[Placement]) -> list[NodeProcesses]:
    """`Processes.nodes()` for any sequence of Placements (e.g. a plan read back from plan.json):
    local ranks are taken from the placements and must be 0..n-1 per node."""
    if isinstance(processes, Processes):
        return processes.nodes()
    by_node: dict[int, list[Placement]] = {}
    for p in processes:
        by_node.setdefault(p.cluster_node_rank, []).append(p)
    out = []
    for n, procs in by_node.items():
        procs.sort(key=lambda p: p.local_rank)
        if [p.local_rank for p in procs] != list(range(len(procs))) or any(
            p.local_world_size != len(procs) for p in procs
        ):
            raise LocalRankError(n, procs[0].het_group, procs[0].group_node_index, len(procs))
        out.append(
            NodeProcesses(
                n,
                procs[0].het_group,
                procs[0].group_node_index,
                procs[0].placement_node_rank,
                tuple(p.rank for p in procs),
                tuple(
                    Slot(
                        p.local_accelerator_rank,
                        p.visible_accelerators,
                        p.isolate_accelerator,
                        p.local_hardware_ranks,
                        p.resource_type,
                    )
                    for p in procs
                ),
            )
        )
    out.sort(key=lambda v: v.placement_node_rank)
    return out


class LocalRankError(ValueError):
    """Placements whose local ranks on a node are not 0..n-1 (a hand-edited or foreign plan)."""

    def __init__(self, node_rank: int, het_group: int, group_node_index: int, count: int) -> None:
        super().__init__(f"local ranks on node {group_node_index} of het group {het_group} are not 0..{count - 1}")
        self.node_rank, self.het_group, self.group_node_index, self.count = (
            node_rank,
            het_group,
            group_node_index,
            count,
        )


def build_processes(
    cluster: Cluster,
    space: ResourceSpace,
    resource_lists: Sequence[Sequence[int]],
    *,
    isolate_accelerator: bool = True,
    what: str = "component",
) -> Processes:
    """Per-process resource-rank lists (process rank = list index) -> Processes, validating RLinf's
    per-process rules (see `place`). One pass; a process on one resource costs a few
    list lookups, the common case at scale."""
    nodes = cluster.nodes
    node_of, local_of, type_of, kind_of = space.node_of, space.local_of, space.type_of, space.kind_of
    size = space.size
    name = space.resource_name
    all_gpus: dict[int, tuple[str, ...]] = {}
    slot_cache: dict[Slot, Slot] = {}
    layouts: dict[tuple[Slot, ...], tuple[Slot, ...]] = {}
    single: list[Slot | None] = [None] * size

    def make_slot(resources: Sequence[int]) -> Slot:
        first = resources[0]
        node = nodes[node_of[first]]
        kind = kind_of[first]
        if kind == "gpu":
            local = tuple(local_of[r] for r in resources)
            visible = tuple(str(x) for x in local) if isolate_accelerator else _all(all_gpus, node.rank, node.gpus)
            isolated, hw = isolate_accelerator, local
        else:
            visible = _all(all_gpus, node.rank, node.gpus)
            isolated = False
            hw = tuple(local_of[r] for r in resources) if kind == "hardware" else ()
        slot = Slot(int(visible[0]) if visible else -1, visible, isolated, hw, type_of[first])
        return slot_cache.setdefault(slot, slot)

    if isinstance(resource_lists, SpreadLists):
        fast = _spread_runs(nodes, space, resource_lists.parts, make_slot, layouts)
        if fast is not None:
            return Processes(fast)
    runs: list[Run] = []
    count: dict[int, int] = {}
    cur_node = -1
    cur_first = 0
    cur: list[Slot] = []

    def close() -> None:
        if cur:
            key = tuple(cur)
            slots = layouts.setdefault(key, key)
            runs.append(Run(cur_first, nodes[cur_node], count.get(cur_node, 0), slots))
            count[cur_node] = count.get(cur_node, 0) + len(slots)

    for rank, resources in enumerate(resource_lists):
        if len(resources) == 1:
            first = resources[0]
            if not 0 <= first < size:
                raise PlanError(
                    f"{what}: process {rank} asks for {name} rank {first}, out of range 0-{size - 1}",
                    hint="resource ranks count from 0 within the selected node group(s)",
                )
            slot = single[first]
            if slot is None:
                slot = single[first] = make_slot(resources)
        else:
            _check(rank, resources, size, name, what, node_of, type_of, nodes)
            slot = make_slot(resources)
        node_rank = node_of[resources[0]]
        if node_rank != cur_node:
            close()
            cur_node, cur_first, cur = node_rank, rank, []
        cur.append(slot)
    close()
    return Processes(runs)


def _spread_runs(
    nodes: Sequence[Node],
    space: ResourceSpace,
    parts: Sequence[RankMapPart],
    make_slot: Callable[[Sequence[int]], Slot],
    layouts: dict[tuple[Slot, ...], tuple[Slot, ...]],
) -> list[Run] | None:
    """Runs straight from rank-map parts, node by node, without per-process lists: each part
    spreads its processes evenly (RLinf's rule), so the processes on a node are an arithmetic
    slice and a node's slots depend only on where the slice starts in the node and its length.
    None when a process would cross a node boundary (the per-process path reports it exactly)."""
    size = space.size
    if any(p.resource_end >= size for p in parts):
        return None
    node_of, local_of, kind_of, type_of = space.node_of, space.local_of, space.kind_of, space.type_of
    bounds = space.node_bounds
    node_slots: dict[tuple[object, ...], tuple[Slot, ...]] = {}
    runs: list[Run] = []
    count: dict[int, int] = {}
    for part in parts:
        rs, re_ = part.resource_start, part.resource_end + 1
        n_res, n_proc = part.num_resources, part.num_processes
        per = n_res // n_proc if n_res >= n_proc else 0
        share = n_proc // n_res if n_res < n_proc else 0
        b = bisect_right(bounds, rs) - 1
        while bounds[b] < re_:
            lo, hi = max(bounds[b], rs), min(bounds[b + 1], re_)
            seg = bounds[b]
            b += 1
            if local_of[seg] != 0 or local_of[bounds[b] - 1] != bounds[b] - 1 - seg:
                return None
            if per:
                if (lo - rs) % per or (hi - rs) % per:
                    return None
                i0, nproc = (lo - rs) // per, (hi - lo) // per
            else:
                i0, nproc = (lo - rs) * share, (hi - lo) * share
            node = nodes[node_of[lo]]
            key = (lo - seg, hi - lo, per, share, node.gpus, kind_of[lo], type_of[lo])  # what the slots depend on
            slots = node_slots.get(key)
            if slots is None:
                if per:
                    made = tuple(make_slot(range(r, r + per)) for r in range(lo, hi, per))
                else:
                    made = tuple(make_slot((r,)) for r in range(lo, hi) for _ in range(share))
                slots = node_slots[key] = layouts.setdefault(made, made)
            first_rank = part.process_start + i0
            prev = runs[-1] if runs else None
            if prev is not None and prev.node is node and prev.first_rank + len(prev.slots) == first_rank:
                joined = prev.slots + slots
                runs[-1] = prev._replace(slots=layouts.setdefault(joined, joined))
            else:
                runs.append(Run(first_rank, node, count.get(node.rank, 0), slots))
            count[node.rank] = count.get(node.rank, 0) + nproc
    return runs


def _check(
    rank: int,
    resources: Sequence[int],
    size: int,
    name: str,
    what: str,
    node_of: Sequence[int],
    type_of: Sequence[str],
    nodes: Sequence[Node],
) -> None:
    if not resources:
        raise PlanError(f"{what}: process {rank} has no resources")
    for r in resources:
        if not 0 <= r < size:
            raise PlanError(
                f"{what}: process {rank} asks for {name} rank {r}, out of range 0-{size - 1}",
                hint="resource ranks count from 0 within the selected node group(s)",
            )
    first = resources[0]
    node_rank = node_of[first]
    if len(set(resources)) != len(resources):
        raise PlanError(f"{what}: process {rank} lists {name} ranks {list(resources)} more than once")
    if any(node_of[r] != node_rank for r in resources):
        spread = sorted({nodes[node_of[r]].rank for r in resources})
        raise PlanError(
            f"{what}: process {rank} would span nodes {spread} with {name} ranks {list(resources)}",
            hint="all resources of one process must be on one node; use fewer resources per process",
        )
    if any(type_of[r] != type_of[first] for r in resources):
        raise PlanError(
            f"{what}: process {rank} mixes hardware types {sorted({type_of[r] for r in resources})}",
            hint="one process uses one type of hardware",
        )


def _all(cache: dict[int, tuple[str, ...]], node_rank: int, gpus: int) -> tuple[str, ...]:
    got = cache.get(node_rank)
    if got is None:
        got = cache[node_rank] = tuple(str(i) for i in range(gpus))
    return got


def place(
    cluster: Cluster,
    space: ResourceSpace,
    resource_lists: Sequence[Sequence[int]],
    *,
    isolate_accelerator: bool = True,
    what: str = "component",
) -> Processes:
    """Turn per-process resource-rank lists (process rank = list index) into Placements.

    Validates RLinf's per-process rules: ranks in range and unique, all on one node, one type.
    Local ranks are counted per node in rank order, so node groups may be listed in any order.
    The result is a compact `Processes` (a Sequence of Placements).
    """
    return build_processes(cluster, space, resource_lists, isolate_accelerator=isolate_accelerator, what=what)
