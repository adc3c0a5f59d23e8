"""The site's fabric as Slurm reports it, against what a plan's node groups assume (`validate`, `topology: site`).

`scontrol show topology [NAME]` lists a block topology as `BlockName=b1 BlockIndex=0 Nodes=n[1-18] BlockSize=18`
(and `AggregatedBlock=` lines for the higher levels), a tree as `SwitchName=s1 Level=0 LinkSpeed=1 Nodes=...`
(leaf switches: level 0). From Slurm 25.05 each partition may use its own topology (topology.yaml; the
partition's `Topology=`), without one the cluster's default. `parse_fabric` and `fabric_problems` are pure;
`read_fabric` is the I/O edge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hpcplace.config.topology import BLOCK, TREE, Topology
from hpcplace.errors import SlurmError
from hpcplace.plan.plan import Plan
from hpcplace.runtime.slurm_env import expand_hostlist
from hpcplace.slurm import slurm_cli

SEGMENT_OLDEST = (24, 5)  # sbatch --segment (topology/block came in 23.11, its segments in 24.05)


@dataclass(frozen=True)
class Unit:
    """One block (its base-level size) or leaf switch of the site, with its nodes."""

    name: str
    nodes: tuple[str, ...]
    size: int | None = None  # BlockSize=; None for a switch


@dataclass(frozen=True)
class SiteFabric:
    """One topology of the site: its kind and its blocks (leaf switches); kind None when it has neither."""

    name: str | None  # the topology's name (topology.yaml), None: the cluster's default
    kind: str | None
    units: tuple[Unit, ...]


def parse_fabric(text: str, name: str | None = None) -> SiteFabric:
    """`scontrol show topology` output -> SiteFabric (base blocks or leaf switches only)."""
    blocks: list[Unit] = []
    switches: list[Unit] = []
    for line in text.splitlines():
        fields = slurm_cli.parse_key_values(line)
        nodes = tuple(expand_hostlist(fields["Nodes"])) if fields.get("Nodes") else ()
        if "BlockName" in fields and nodes:
            size = fields.get("BlockSize", "")
            blocks.append(Unit(fields["BlockName"], nodes, int(size) if size.isdigit() else None))
        elif "SwitchName" in fields and nodes and fields.get("Level", "0") == "0":
            switches.append(Unit(fields["SwitchName"], nodes))
    if blocks:
        return SiteFabric(name, BLOCK, tuple(blocks))
    return SiteFabric(name, TREE if switches else None, tuple(switches))


def read_fabric(partition_topology: str | None, *, timeout: float = slurm_cli.DEFAULT_TIMEOUT_S) -> SiteFabric:
    """The I/O edge: the topology a partition uses (its `Topology=`, else the cluster's default)."""
    argv = ["scontrol", "show", "topology", *([partition_topology] if partition_topology else [])]
    res = slurm_cli.run(argv, timeout=timeout)
    if res.returncode != 0:  # a site without a topology plugin says so on stderr
        return SiteFabric(partition_topology, None, ())
    return parse_fabric(res.stdout, partition_topology)


def site_topology(fabric: SiteFabric, nodes: Sequence[str], stated: Topology) -> Topology:
    """`topology: site`: the block size (leaf switch size) of the site's fabric over the partition's nodes."""
    if fabric.kind is None:
        where = f"topology {fabric.name!r}" if fabric.name else "the cluster's topology"
        raise SlurmError(
            f"topology: site, but {where} has no blocks or leaf switches (scontrol show topology)",
            hint="state the fabric (topology: {block: NODES} or {switch: NODES}), or drop topology:",
        )
    mine = set(nodes)
    sizes = [u.size or len(mine.intersection(u.nodes)) for u in fabric.units if mine.intersection(u.nodes)]
    if not sizes:
        raise SlurmError(
            f"topology: site, but no block or leaf switch of {fabric.name or 'the cluster'} holds the partition's nodes"
        )
    return Topology(fabric.kind, min(sizes), stated.segment, stated.switches, fabric.name, stated.location)


def version_problems(plan: Plan, version: tuple[int, int]) -> list[str]:
    """What the site's Slurm (major, minor) cannot ask for of the plan's fabric."""
    return [
        f"node group {g.label!r}: the job asks for --segment={g.topology.segment} (topology: block), which Slurm "
        f"{version[0]}.{version[1]:02d} does not have; hpcplace needs Slurm {SEGMENT_OLDEST[0]}.{SEGMENT_OLDEST[1]:02d} "
        "or newer for block topologies (a tree topology's --switches runs on every version)"
        for g in plan.cluster.node_groups
        if g.topology is not None
        and g.topology.kind == BLOCK
        and g.topology.segment is not None
        and g.num_nodes > g.topology.segment
        and version < SEGMENT_OLDEST
    ]


@dataclass(frozen=True)
class FabricCheck:
    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    checked: tuple[str, ...] = ()


def fabric_problems(
    who: str,
    topology: Topology,
    num_nodes: int,
    fabric: SiteFabric,
    members: Sequence[str],
    idle: Sequence[str],
    known: frozenset[str] = frozenset(),
) -> FabricCheck:
    """One node group's fabric against the site's: the kind exists, the block size agrees, the partition's
    blocks hold enough whole segments (ever: a problem; free now: a warning), the leaf switches asked for
    can hold the group; `known` (every node of the cluster): a topology naming others is said."""
    unit = "block" if topology.kind == BLOCK else "leaf switch"
    where = f"topology {fabric.name!r}" if fabric.name else "the cluster's topology"
    if fabric.kind != topology.kind:
        found = f"{fabric.kind} topology" if fabric.kind else "no block or tree topology"
        return FabricCheck(
            problems=(
                f"{who}: the plan assumes a {topology.kind} topology; {where} is {found} (scontrol show topology)",
            )
        )
    mine, free = set(members), set(idle)
    held = [(u, [n for n in u.nodes if n in mine]) for u in fabric.units]
    held = [(u, nodes) for u, nodes in held if nodes]
    outside = sorted(mine.difference(n for _, nodes in held for n in nodes))
    problems: list[str] = []
    warnings: list[str] = []
    unknown = sorted({n for u in fabric.units for n in u.nodes} - known) if known else []
    if unknown:
        warnings.append(
            f"{who}: {where} names {len(unknown)} node(s) the cluster does not have (scontrol show node): "
            + ", ".join(unknown[:6])
        )
    if outside:
        warnings.append(
            f"{who}: {len(outside)} node(s) of the partition are in no {unit} of {where}: {', '.join(outside[:6])}"
        )
    if topology.kind == BLOCK:
        site_sizes = sorted({u.size for u, _ in held if u.size})
        if site_sizes and topology.size not in site_sizes:
            problems.append(
                f"{who}: the config says {topology.size} nodes per block; {where}'s blocks hold "
                f"{' or '.join(map(str, site_sizes))} (BlockSize)"
            )
        seg = topology.segment if topology.segment is not None and num_nodes > topology.segment else None
        if seg is not None and site_sizes and seg > min(site_sizes):
            problems.append(
                f"{who}: a segment of {seg} nodes is larger than {where}'s blocks ({min(site_sizes)} nodes)"
            )
        need = num_nodes // seg if seg else 1
        each = seg or num_nodes
        ever = sum(len(nodes) // each for _, nodes in held)
        now = sum(len([n for n in nodes if n in free]) // each for _, nodes in held)
        what = f"{need} segment(s) of {each} node(s)" if seg else f"{each} node(s) in one block"
        if ever < need:
            text = f"{who}: needs {what}; the partition's blocks hold {ever} at most"
            (problems if seg else warnings).append(text + ("" if seg else ": Slurm spreads the group over blocks"))
        elif now < need:
            warnings.append(f"{who}: needs {what}; {now} are free now (the job waits for whole segments)")
        return FabricCheck(
            tuple(problems),
            tuple(warnings),
            (f"{who}: {len(held)} block(s) of {where} hold the partition; {what} fit",),
        )
    switches = topology.switches or len(held)
    largest = sum(sorted((len(nodes) for _, nodes in held), reverse=True)[:switches])
    if largest < num_nodes:
        warnings.append(
            f"{who}: {switches} leaf switch(es) hold at most {largest} of the {num_nodes} nodes: Slurm waits "
            "(max_switch_wait), then spreads the group over more"
        )
    return FabricCheck(
        tuple(problems), tuple(warnings), (f"{who}: {len(held)} leaf switch(es) of {where} hold the partition",)
    )


def check_plan_fabric(
    plan: Plan,
    partitions: Mapping[int, str],
    fabrics: Mapping[int, SiteFabric],
    members: Mapping[str, Sequence[str]],
    idle: Mapping[str, Sequence[str]],
    known: frozenset[str] = frozenset(),
) -> FabricCheck:
    """Every node group with a topology (by het group index) against its partition's fabric."""
    problems: list[str] = []
    warnings: list[str] = []
    checked: list[str] = []
    for g, group in enumerate(plan.cluster.node_groups):
        topology = group.topology
        if topology is None or g not in fabrics:
            continue
        partition = partitions[g]
        who = f"node group {group.label!r} (partition {partition!r})"
        found = fabric_problems(
            who, topology, group.num_nodes, fabrics[g], members.get(partition, ()), idle.get(partition, ()), known
        )
        problems += found.problems
        warnings += found.warnings
        checked += found.checked
    return FabricCheck(tuple(problems), tuple(warnings), tuple(checked))
