"""Model-parallel groups against the fabric: what each node group asks Slurm for, and what crosses.

A tensor-parallel group, an expert-parallel group (Megatron's ETP x EP consecutive ranks: the all-to-all of
every MoE layer) and an inference engine talk every layer; across NVL72 racks or leaf switches they pay
InfiniBand or the spine instead of NVLink. Data-parallel traffic (once per step) and the point-to-point sends
between the pipeline stages of a trainer are not checked. The plan's nodes of a group
are cut into units of consecutive nodes: a block topology's unit is the segment the job asks for
(`--segment`, or the whole group when it fits one block), a tree's is a leaf switch's nodes; the job
orders its nodes by block or switch at start (hp_fabric), so one unit of the plan is one unit of Slurm's.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from hpcplace.config.cluster import Cluster, NodeGroup
from hpcplace.config.topology import BLOCK, SITE, TREE, Topology
from hpcplace.errors import PlanError
from hpcplace.plan.plan import ComponentPlan, Crossing
from hpcplace.plan.process_table import node_processes

_SHOWN = 3  # crossing groups named per component in a warning or error

# (het group, node index in the group) of each GPU or node a group spans
NodeKey = tuple[int, int]


@dataclass(frozen=True)
class MpGroup:
    """One group of a component that must talk over NVLink: its process ranks and their nodes."""

    component: str
    what: str  # "tensor-parallel group" | "expert-parallel group" | "inference engine" | "worker"
    ranks: tuple[int, ...]
    nodes: tuple[NodeKey, ...]  # distinct, in rank order


def fabric_widths(comp: ComponentPlan) -> list[tuple[str, int]]:
    """What the component's GPUs are cut into, in rank order, and how many GPUs each: its tensor-parallel
    groups, its expert-parallel groups (Megatron's ETP x EP consecutive ranks: the all-to-all of every MoE
    layer) and its inference engines; a kind of one GPU, or as wide as an earlier kind, is left out."""
    tp = comp.tensor_parallel_size
    kinds = [("tensor-parallel group", tp)]
    if comp.expert_parallel_size > 1:
        kinds.append(("expert-parallel group", comp.expert_group_gpus))
    if comp.gpus_per_engine is not None:
        kinds.append(("inference engine", comp.gpus_per_engine))
    out: list[tuple[str, int]] = []
    for what, width in kinds:
        if width > 1 and all(width != w for _, w in out):
            out.append((what, width))
    return out


def _gpus(comp: ComponentPlan) -> list[tuple[int, NodeKey]]:
    """(rank, node) of each of the component's GPUs in rank order (processes without GPUs hold no shard)."""
    held: list[tuple[int, NodeKey, int]] = []
    for v in node_processes(comp.processes):
        key = (v.het_group, v.group_node_index)
        held += [(r, key, len(slot.visible_accelerators)) for r, slot in zip(v.ranks, v.slots)]
    held.sort()
    return [(r, key) for r, key, count in held for _ in range(count)]


def size_problem(comp: ComponentPlan) -> str | None:
    """Expert-parallel and engine sizes the component's GPUs cannot be cut into (Megatron and the engines
    assert the same at start)."""
    if comp.expert_parallel_size <= 1 and comp.gpus_per_engine is None:
        return None
    count = sum(len(slot.visible_accelerators) for v in node_processes(comp.processes) for slot in v.slots)
    if count == 0:
        return None
    tp, pp, ep = comp.tensor_parallel_size, comp.pipeline_parallel_size, comp.expert_parallel_size
    width = comp.expert_group_gpus * pp
    if ep > 1 and count % width:
        return (
            f"component {comp.name!r}: expert_tensor_parallel_size {comp.expert_tensor_parallel_size or tp} x "
            f"expert_parallel_size {ep} x pipeline_parallel_size {pp} = {width} does not divide its {count} GPUs "
            "(Megatron-Core's initialize_model_parallel raises: its GPUs are ETP x EP x expert data parallel x PP)"
        )
    engine = comp.gpus_per_engine
    if engine is not None and (count % engine or engine % tp):
        return f"component {comp.name!r}: gpus_per_engine {engine} " + (
            f"does not divide its {count} GPUs (its engines are alike)"
            if count % engine
            else f"is not a multiple of tensor_parallel_size {tp} (an engine holds whole tensor-parallel groups)"
        )
    return None


def mp_groups(comp: ComponentPlan) -> Iterator[MpGroup]:
    """The component's groups that span nodes: its workers wider than a node (ROLL), and its GPUs in rank
    order cut into each kind of fabric_widths (a process holding several GPUs holds them on one node)."""
    if comp.spanning is not None:
        for worker in comp.spanning.workers:
            procs = [comp.processes[r] for r in worker]
            yield MpGroup(comp.name, "worker", worker, _distinct((p.het_group, p.group_node_index) for p in procs))
    widths = fabric_widths(comp)
    if not widths:
        return
    gpus = _gpus(comp)
    for what, width in widths:
        for start in range(0, len(gpus), width):
            chunk = gpus[start : start + width]
            nodes = _distinct(key for _, key in chunk)
            if len(nodes) > 1:  # one node is inside every unit: no need to keep it
                yield MpGroup(comp.name, what, tuple(sorted({r for r, _ in chunk})), nodes)


def _distinct(keys: Iterator[NodeKey] | Sequence[NodeKey]) -> tuple[NodeKey, ...]:
    return tuple(dict.fromkeys(keys))


def _crossing(group: MpGroup, cluster: Cluster, unit_nodes: Sequence[int | None]) -> Crossing | None:
    """The group as a Crossing when it spans units (or node groups of which one has a topology)."""
    units = _distinct((g, j // n) if (n := unit_nodes[g]) else (g, 0) for g, j in group.nodes)
    groups = {g for g, _ in units}
    if len(units) <= 1 or all(unit_nodes[g] is None for g in groups):
        return None
    labels = cluster.node_groups
    return Crossing(
        group.component,
        group.what,
        group.ranks,
        tuple((labels[g].label, u) for g, u in units),
    )


def _unit_nodes(group: NodeGroup) -> int | None:
    """Consecutive plan nodes per unit, None for a group without a topology."""
    topology = group.topology
    return None if topology is None or topology.kind == SITE else topology.unit_nodes(group.num_nodes)


def choose(group: NodeGroup, topology: Topology, groups: Sequence[MpGroup], g: int) -> Topology:
    """What the node group asks Slurm for: a block group larger than a block gets the largest segment that
    divides its nodes, fits a block and keeps the most groups whole; a tree group the fewest leaf switches."""
    n = group.num_nodes
    size = topology.size or n
    if topology.kind == TREE:
        return topology if topology.switches is not None else replace(topology, switches=-(-n // size))
    if topology.kind != BLOCK or topology.segment is not None or n <= size:
        return topology
    own = [tuple(j for h, j in mp.nodes if h == g) for mp in groups]

    def crossing(seg: int) -> int:
        return sum(len({j // seg for j in nodes}) > 1 for nodes in own)

    candidates = [s for s in range(min(size, n), 0, -1) if n % s == 0]
    best = min(candidates, key=lambda s: (crossing(s), -s))
    return replace(topology, segment=best)


def place_on_fabric(cluster: Cluster, components: Sequence[ComponentPlan]) -> tuple[Cluster, tuple[Crossing, ...]]:
    """The cluster with each topology's segment/switches chosen, and the groups that still cross."""
    if not any(g.topology is not None and g.topology.kind != SITE for g in cluster.node_groups):
        return cluster, ()
    groups = [mp for comp in components for mp in mp_groups(comp)]
    chosen = []
    for g, group in enumerate(cluster.node_groups):
        topology = group.topology
        if topology is None or topology.kind == SITE:
            chosen.append(group)
            continue
        mine = [mp for mp in groups if any(h == g for h, _ in mp.nodes)]
        chosen.append(replace(group, topology=choose(group, topology, mine, g)))
    placed = replace(cluster, node_groups=tuple(chosen))
    unit_nodes = [_unit_nodes(group) for group in placed.node_groups]
    crossings = tuple(c for mp in groups if (c := _crossing(mp, placed, unit_nodes)) is not None)
    return placed, crossings


def crossing_lines(cluster: Cluster, crossings: Sequence[Crossing]) -> list[str]:
    """One line per component: how many groups cross, and the first few."""
    words = {g.label: g.topology.unit_word if g.topology else "node group" for g in cluster.node_groups}
    by_component: dict[tuple[str, str], list[Crossing]] = {}
    for c in crossings:
        by_component.setdefault((c.component, c.what), []).append(c)
    lines = []
    for (component, what), found in by_component.items():
        shown = "; ".join(c.describe(words) for c in found[:_SHOWN])
        more = f"; ... ({len(found) - _SHOWN} more)" if len(found) > _SHOWN else ""
        links = sum(c.links for c in found)
        lines.append(
            f"topology: component {component!r}: {len(found)} {what}{'s' if len(found) != 1 else ''} "
            f"cross{'es' if len(found) == 1 else ''} the fabric ({links} link{'s' if links != 1 else ''} over "
            f"InfiniBand or the spine instead of NVLink or one leaf switch): {shown}{more}"
        )
    return lines


def refuse_crossings(cluster: Cluster, crossings: Sequence[Crossing]) -> None:
    """`--strict-topology`: a plan whose model-parallel groups cross blocks or switches is an error,
    located at the topology of the first node group concerned."""
    if not crossings:
        return
    labels = {label for c in crossings for label, _ in c.units}
    first = next(g for g in cluster.node_groups if g.label in labels and g.topology is not None)
    topology = first.topology
    assert topology is not None
    raise PlanError(
        "--strict-topology: model-parallel groups cross the fabric:\n  - "
        + "\n  - ".join(crossing_lines(cluster, crossings)),
        location=topology.location or first.location,
        hint="make each group fit a block or leaf switch (a smaller tensor, expert-parallel or engine size, GPUs "
        "per node that divide it, or a segment: that keeps it whole), or drop --strict-topology",
    )
