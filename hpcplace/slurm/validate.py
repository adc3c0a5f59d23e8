"""Refuse a job that can never run, before it waits hours in a queue: compare what each het
component asks for with what the live cluster has (`scontrol show partition|node -o`).

`check` is a pure comparison over parsed ClusterFacts; `read_cluster_facts` is the one I/O edge.
A node that is DOWN or DRAINED still counts (it may come back) but is reported as a warning.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from hpcplace.config.formats.common import SiteGpuCount
from hpcplace.errors import SlurmError
from hpcplace.plan.plan import Plan
from hpcplace.plan.runnable import commandless_components, nothing_to_run_hint
from hpcplace.slurm import slurm_cli
from hpcplace.slurm.slurm_job import SlurmJob, lower

UNUSABLE_STATES = ("DOWN", "DRAIN", "FAIL", "FUTURE", "NOT_RESPONDING", "MAINT", "POWERED_DOWN")


@dataclass(frozen=True)
class NodeFacts:
    name: str
    partitions: tuple[str, ...]
    cpus: int
    memory_mb: int
    gres: dict[str, dict[str | None, int]]
    features: frozenset[str]
    state: str

    @property
    def usable(self) -> bool:
        return not any(s in self.state.upper() for s in UNUSABLE_STATES)


@dataclass(frozen=True)
class PartitionFacts:
    name: str
    state: str
    max_nodes: int | None
    max_time_min: int | None
    default: bool = False
    topology: str | None = None  # its own topology (Slurm 25.05+, topology.yaml); None: the cluster's default


@dataclass(frozen=True)
class ClusterFacts:
    partitions: dict[str, PartitionFacts]
    nodes: tuple[NodeFacts, ...]


@dataclass(frozen=True)
class Report:
    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    checked: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.problems


def _int(text: str | None, default: int = 0) -> int:
    m = re.match(r"\d+", text or "")
    return int(m.group(0)) if m else default


def time_minutes(text: str | None) -> int | None:
    """Slurm time (`MM`, `MM:SS`, `HH:MM:SS`, `D-HH[:MM[:SS]]`) -> whole minutes; None = unlimited."""
    if not text or text.upper() in ("UNLIMITED", "INFINITE", "NONE"):
        return None
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
        parts = [int(p) for p in text.split(":")] + [0, 0]
        h, m, s = parts[0], parts[1], parts[2]
    else:
        parts = [int(p) for p in text.split(":")]
        if len(parts) == 1:
            h, m, s = 0, parts[0], 0
        elif len(parts) == 2:
            h, m, s = 0, parts[0], parts[1]
        else:
            h, m, s = parts[0], parts[1], parts[2]
    return days * 1440 + h * 60 + m + (1 if s else 0)


def parse_cluster_facts(partitions: list[dict[str, str]], nodes: list[dict[str, str]]) -> ClusterFacts:
    """Parsed `scontrol show partition -o` / `scontrol show node -o` lines -> ClusterFacts."""
    parts = {}
    for p in partitions:
        name = p.get("PartitionName", "")
        max_nodes = p.get("MaxNodes", "UNLIMITED")
        parts[name] = PartitionFacts(
            name,
            p.get("State", "UP"),
            None if not max_nodes.isdigit() else int(max_nodes),
            time_minutes(p.get("MaxTime")),
            p.get("Default", "NO").upper() == "YES",
            p.get("Topology") or None,
        )
    out = []
    for n in nodes:
        features = n.get("AvailableFeatures", "")
        out.append(
            NodeFacts(
                name=n.get("NodeName", "?"),
                partitions=tuple(x for x in n.get("Partitions", "").split(",") if x),
                cpus=_int(n.get("CPUEfctv") or n.get("CPUTot")),
                memory_mb=_int(n.get("RealMemory")),
                gres=slurm_cli.parse_gres(n.get("Gres", "")),
                features=frozenset(f for f in features.split(",") if f and features != "(null)"),
                state=n.get("State", "UNKNOWN"),
            )
        )
    return ClusterFacts(parts, tuple(out))


def _gres_ok(node: NodeFacts, want: str) -> bool:
    """`gpu:a800:8` / `gpu:8` / `robot:4` against the node's GRES."""
    for item in want.split(","):
        parts = item.split(":")
        name, gtype, count = (parts[0], parts[1], int(parts[2])) if len(parts) == 3 else (parts[0], None, int(parts[1]))
        have = node.gres.get(name, {})
        got = sum(have.values()) if gtype is None else have.get(gtype, 0)
        if got < count:
            return False
    return True


def _features_ok(node: NodeFacts, constraint: str | None) -> bool | None:
    """Plain `a&b` / `a,b` (and) or `a|b` (or) feature expressions; None = too complex to check."""
    if not constraint:
        return True
    if re.search(r"[\[\]*()]", constraint):
        return None
    if "|" in constraint:
        return any(f.strip() in node.features for f in constraint.split("|"))
    return all(f.strip() in node.features for f in re.split(r"[&,]", constraint))


def _node_needs(job: SlurmJob) -> dict[tuple[int, int], tuple[int, int]]:
    """(het group, node index) -> (CPUs, MB) the largest single step asks for there (steps
    overlap, so each must fit alone)."""
    needs: dict[tuple[int, int], tuple[int, int]] = {}
    for step in job.steps:
        for seg in step.segments:
            for j in range(seg.relative, seg.relative + seg.num_nodes):
                cpus, mb = needs.get((seg.het_group, j), (0, 0))
                needs[(seg.het_group, j)] = (max(cpus, seg.tasks_per_node * seg.cpus_per_task), max(mb, seg.mem_mb))
    return needs


def check(plan: Plan, facts: ClusterFacts, job: SlurmJob | None = None) -> Report:
    """Every reason the job can never run on this cluster (problems) or may wait (warnings)."""
    job = job or lower(plan)
    problems: list[str] = []
    warnings: list[str] = []
    checked: list[str] = []
    # Steps mode: every component runs its own command. Ray mode: the driver starts the components.
    problems += [f"component {name!r} has no command to run" for name in commandless_components(plan)]
    if plan.launch.is_ray and not plan.launch.driver and not plan.launch.hold:  # held: drivers attach later
        problems.append("the Ray launch mode has no driver to run")
    if problems:
        problems.append(f"to fix: {nothing_to_run_hint(plan)}")
    needs = _node_needs(job)
    time_limit = time_minutes(plan.slurm.get("time"))
    for hc, group in zip(job.components, plan.cluster.node_groups):
        partition = hc.partition
        if partition is None:
            default = [p.name for p in facts.partitions.values() if p.default]
            if not default:
                problems.append(
                    f"node group {hc.label!r} (het component {hc.het_group}) names no partition and "
                    "the cluster has no default partition"
                )
                continue
            partition = default[0]
            checked.append(
                f"node group {hc.label!r} names no partition: Slurm will use the default partition {partition!r}"
            )
        who = f"node group {hc.label!r} (het component {hc.het_group}, partition {partition!r})"
        part = facts.partitions.get(partition)
        if part is None:
            known = ", ".join(sorted(facts.partitions)) or "none"
            problems.append(f"{who}: the partition does not exist (partitions: {known})")
            continue
        if "UP" not in part.state.upper():
            warnings.append(f"{who}: the partition is {part.state}")
        if part.max_nodes is not None and hc.num_nodes > part.max_nodes:
            problems.append(f"{who}: asks for {hc.num_nodes} nodes, the partition allows at most {part.max_nodes}")
        if time_limit is not None and part.max_time_min is not None and time_limit > part.max_time_min:
            problems.append(
                f"{who}: time limit {plan.slurm['time']} exceeds the partition's {part.max_time_min} minutes"
            )
        members = [n for n in facts.nodes if partition in n.partitions]
        cpu_need = max(
            [group.cpus_per_node or 0] + [needs.get((hc.het_group, j), (0, 0))[0] for j in range(hc.num_nodes)]
        )
        mem_need = max(
            [group.mem_per_node_mb or 0] + [needs.get((hc.het_group, j), (0, 0))[1] for j in range(hc.num_nodes)]
        )
        tests: list[tuple[str, Callable[..., bool]]] = [  # a default argument binds each check's value
            (f"GRES {hc.gres}", lambda n, g=hc.gres: g is None or _gres_ok(n, g)),
            (f"{cpu_need} CPUs", lambda n, c=cpu_need: n.cpus >= c),
            (f"{mem_need} MB memory", lambda n, m=mem_need: n.memory_mb >= m),
        ]
        fitting = list(members)
        for what, test in tests:
            passing = [n for n in fitting if test(n)]
            if len(passing) < hc.num_nodes:
                have = "; ".join(_describe(n) for n in members[:6]) or "no nodes"
                problems.append(
                    f"{who}: needs {hc.num_nodes} node(s) with {what}, the partition has "
                    f"{len(passing)} such of {len(members)} ({have})"
                )
                break
            fitting = passing
        else:
            verdicts = [_features_ok(n, group.constraint) for n in fitting]
            if None in verdicts:
                warnings.append(f"{who}: constraint {group.constraint!r} not checked (complex expression)")
            elif sum(1 for v in verdicts if v) < hc.num_nodes:
                problems.append(
                    f"{who}: needs {hc.num_nodes} node(s) with features {group.constraint!r}, "
                    f"{sum(1 for v in verdicts if v)} of the partition's nodes have them"
                )
            usable = [n for n in fitting if n.usable]
            if len(usable) < hc.num_nodes:
                warnings.append(
                    f"{who}: only {len(usable)} of the {len(fitting)} fitting nodes are usable now "
                    f"({', '.join(f'{n.name} {n.state}' for n in fitting if not n.usable)})"
                )
            checked.append(f"{who}: {len(fitting)} node(s) fit ({hc.num_nodes} needed)")
    return Report(tuple(problems), tuple(warnings), tuple(checked))


def _with_fabric(report: Report, plan: Plan, facts: ClusterFacts) -> Report:
    """The node groups' topologies against their partitions' fabric (`scontrol show topology`, once per topology)."""
    from hpcplace.slurm.fabric import SiteFabric, check_plan_fabric, read_fabric

    default = next((p.name for p in facts.partitions.values() if p.default), None)
    partitions: dict[int, str] = {}
    fabrics: dict[int, SiteFabric] = {}
    read: dict[str | None, SiteFabric] = {}
    for g, group in enumerate(plan.cluster.node_groups):
        partition = group.partition or default
        if group.topology is None or partition is None or partition not in facts.partitions:
            continue  # check() said what is wrong with the partition
        name = facts.partitions[partition].topology
        if name not in read:
            read[name] = read_fabric(name)
        partitions[g], fabrics[g] = partition, read[name]
    members = {p: [n.name for n in facts.nodes if p in n.partitions] for p in set(partitions.values())}
    idle = {
        p: [n.name for n in facts.nodes if p in n.partitions and n.usable and "IDLE" in n.state.upper()]
        for p in members
    }
    found = check_plan_fabric(plan, partitions, fabrics, members, idle, frozenset(n.name for n in facts.nodes))
    return Report(
        (*report.problems, *found.problems), (*report.warnings, *found.warnings), (*report.checked, *found.checked)
    )


def _describe(node: NodeFacts) -> str:
    gres = ",".join(f"{k}:{t}:{c}" if t else f"{k}:{c}" for k, v in node.gres.items() for t, c in v.items())
    return f"{node.name}: {node.cpus} CPUs, {node.memory_mb} MB, GRES {gres or 'none'}"


def site_gpu_count(facts: ClusterFacts, partition: str | None, gpu_type: str | None) -> SiteGpuCount:
    """GPUs per node of a partition (None: the default one), when all its nodes agree: what RLinf and
    ROLL would find on whichever node the job gets. Nodes that are down or drained count only when no
    other node is left."""
    which = "partition {!r}"
    if partition is None:
        partition = next((p.name for p in facts.partitions.values() if p.default), None)
        which = "partition {!r} (the default)"
        if partition is None:
            return SiteGpuCount(None, "the cluster has no default partition: set slurm.partition")
    if partition not in facts.partitions:
        return SiteGpuCount(
            None,
            f"partition {partition!r} does not exist; the cluster has {', '.join(sorted(facts.partitions)) or 'none'}",
        )
    nodes = [n for n in facts.nodes if partition in n.partitions]
    nodes = [n for n in nodes if n.usable] or nodes
    counts = sorted(
        {
            sum(n.gres.get("gpu", {}).values()) if gpu_type is None else n.gres.get("gpu", {}).get(gpu_type, 0)
            for n in nodes
        }
    )
    gpus = f"GPUs of type {gpu_type!r}" if gpu_type else "GPUs"
    if not nodes or counts == [0]:
        types = sorted({t for n in nodes for t, c in n.gres.get("gpu", {}).items() if t and c})
        if gpu_type and types:  # a GPU partition, another type
            return SiteGpuCount(
                None,
                f"{which.format(partition)} has no GPUs of type {gpu_type!r}: its GPU "
                f"type{'s are' if len(types) > 1 else ' is'} {', '.join(map(repr, types))}",
                fix=f"set slurm.gpu_type to {' or '.join(map(repr, types))}, or leave it out",
            )
        return SiteGpuCount(
            None, f"{which.format(partition)} has no nodes with {gpus}: name a GPU partition in slurm.partition"
        )
    if len(counts) > 1:
        return SiteGpuCount(None, f"{which.format(partition)} has nodes with {' or '.join(map(str, counts))} {gpus}")
    return SiteGpuCount(counts[0], f"as all {len(nodes)} nodes of {which.format(partition)} have (scontrol show node)")


def version_checked(version: slurm_cli.SlurmVersion) -> str:
    """The `ok:` line of `validate` for the site's Slurm version."""
    return (
        f"Slurm {version}: supported ({slurm_cli.OLDEST_SUPPORTED.release} and newer; what differs per version: "
        "docs/slurm-versions.md)"
    )


def read_cluster_facts() -> ClusterFacts:
    """The I/O edge: ask the controller."""
    return parse_cluster_facts(slurm_cli.show_partitions(), slurm_cli.show_nodes())


# Where each format states the nodes the job asks for.
_SHAPE_KEYS = {
    "areal": "cluster.n_nodes, cluster.n_gpus_per_node or the slurm: block",
    "rlinf": "cluster.num_nodes, cluster.node_groups or the slurm: block",
    "roll": "num_gpus_per_node, the device_mappings or the slurm: block",
}


def validate(plan: Plan, facts: ClusterFacts | None = None, version: slurm_cli.SlurmVersion | None = None) -> Report:
    """check() against the live cluster; raises SlurmError listing every problem. `version`: the site's
    Slurm as the caller read it (slurm_cli.site_version, which refuses one that is too old), said first."""
    facts = facts if facts is not None else read_cluster_facts()
    report = check(plan, facts)
    if any(g.topology is not None for g in plan.cluster.node_groups):
        report = _with_fabric(report, plan, facts)
    if version is not None:
        from hpcplace.slurm.container_launch import version_problems

        report = replace(
            report,
            checked=(version_checked(version), *report.checked),
            problems=(*report.problems, *version_problems(plan, (version.major, version.minor))),
        )
    if report.problems:
        raise SlurmError(
            "the job can never run on this cluster:\n  - " + "\n  - ".join(report.problems),
            hint=f"fix {_SHAPE_KEYS.get(plan.source_format, 'the node groups')} in the config (or skip "
            "this check with --no-validate)",
        )
    return report


def with_site_topology(plan: Plan, facts: ClusterFacts) -> Plan:
    """The plan with every `topology: site` read from the live cluster (the group's partition's topology), its
    segments chosen and its crossings found again."""
    from hpcplace.config.topology import SITE
    from hpcplace.plan.topology import crossing_lines, place_on_fabric
    from hpcplace.slurm.fabric import read_fabric, site_topology

    default = next((p.name for p in facts.partitions.values() if p.default), None)
    groups = []
    for group in plan.cluster.node_groups:
        topology = group.topology
        if topology is None or topology.kind != SITE:
            groups.append(group)
            continue
        partition = group.partition or default
        part = facts.partitions.get(partition or "")
        if part is None:
            raise SlurmError(f"node group {group.label!r}: topology: site, but partition {partition!r} does not exist")
        nodes = [n.name for n in facts.nodes if part.name in n.partitions]
        groups.append(replace(group, topology=site_topology(read_fabric(part.topology), nodes, topology)))
    cluster, crossings = place_on_fabric(replace(plan.cluster, node_groups=tuple(groups)), plan.components)
    return replace(
        plan,
        cluster=cluster,
        topology_crossings=crossings,
        warnings=plan.warnings + tuple(crossing_lines(cluster, crossings)),
    )
