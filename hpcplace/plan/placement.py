"""Per-process placements (RLinf's field names plus the Slurm facts) and the resource spaces
that placement strings and strategies index into."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from hpcplace.config.cluster import RESERVED_CLUSTER_LABEL, RESERVED_NODE_LABEL, Cluster, Node, NodeGroup, ResourceKind
from hpcplace.errors import PlanError

NO_ACCELERATOR = "none"


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one process of a component runs. Field names and meanings follow RLinf's `Placement`;
    the last five are hpcplace's Slurm facts."""

    rank: int
    cluster_node_rank: int
    placement_node_rank: int
    local_accelerator_rank: int
    accelerator_type: str
    local_rank: int
    local_world_size: int
    visible_accelerators: tuple[str, ...]
    isolate_accelerator: bool
    local_hardware_ranks: tuple[int, ...]
    node_group_label: str
    partition: str | None  # None: Slurm's default partition (null in plan.json)
    het_group: int
    group_node_index: int
    resource_type: str


@dataclass(frozen=True)
class ResourceSpace:
    """The resources a placement string counts (0..size-1), in listed node-group order."""

    labels: tuple[str, ...]
    kind: ResourceKind
    node_of: tuple[int, ...]
    local_of: tuple[int, ...]
    type_of: tuple[str, ...]
    kind_of: tuple[ResourceKind, ...]
    # What RLinf parses placement ranks against when it is not `size`: a selection that mixes groups
    # with and without accelerators counts each group's own GPUs/hardware/nodes there, then is placed
    # by nodes, so `all` (and any rank past the nodes) is out of range on RLinf.
    rank_span: int | None = None

    @property
    def size(self) -> int:
        return len(self.node_of)

    @cached_property
    def node_bounds(self) -> tuple[int, ...]:
        """Resource ranks where a new node starts, then `size` (resources of a node are contiguous)."""
        node_of = self.node_of
        return (0, *[r for r in range(1, len(node_of)) if node_of[r] != node_of[r - 1]], len(node_of))

    @property
    def resource_name(self) -> str:
        return {"gpu": "GPU", "hardware": "hardware", "node": "node"}[self.kind]


def parse_group_labels(value: str | Sequence[str] | None) -> tuple[str, ...] | None:
    """`a800`, `"a800,4090"` or a list -> labels in order; None means the whole cluster."""
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    labels = tuple(label.strip() for label in items if label.strip())
    return labels or None


def resource_space(
    cluster: Cluster, labels: Sequence[str] | None, *, count_nodes: bool = False, rlinf_span: bool = False
) -> ResourceSpace:
    """Build the resource space for a node_group selection (see docs/concepts.md for the rules).

    No selection means every node group, counting GPUs only (RLinf's default group counts
    accelerators; robot arms and CPU nodes are addressed through their own group labels).
    `count_nodes` forces node ranks in listed order (the Node strategy). `rlinf_span` sets RLinf's
    `rank_span` on a selection mixing groups with and without accelerators."""
    if labels is not None and len(labels) == 1 and labels[0].lower() == RESERVED_CLUSTER_LABEL:
        labels = None  # RLinf's default group: the same as no node_group
    if labels is None:
        groups = list(cluster.node_groups)
        kind: ResourceKind = "gpu" if cluster.num_gpus and not count_nodes else "node"
        canonical: tuple[str, ...] = ()
    elif len(labels) == 1 and labels[0].lower() == RESERVED_NODE_LABEL:
        groups = list(cluster.node_groups)
        kind = "node"
        canonical = (RESERVED_NODE_LABEL,)
    else:
        groups = []
        for label in labels:
            if label.lower() in (RESERVED_NODE_LABEL, RESERVED_CLUSTER_LABEL):
                raise PlanError(
                    f"the reserved label `{label.lower()}` cannot be combined with other node groups",
                    hint="use `node_group: node` or `node_group: cluster` alone",
                )
            group = cluster.group(label)
            if group is None:
                known = ", ".join(g.label for g in cluster.node_groups)
                raise PlanError(f"unknown node group {label!r}", hint=f"defined node groups: {known}, or `node`")
            if group in groups:
                raise PlanError(f"node group {label!r} is listed twice", hint="list each node group once")
            groups.append(group)
        kinds = {g.resource_kind for g in groups}
        kind = "node" if "node" in kinds or count_nodes else ("hardware" if "hardware" in kinds else "gpu")
        canonical = tuple(g.label for g in groups)
    node_of: list[int] = []
    local_of: list[int] = []
    type_of: list[str] = []
    kind_of: list[ResourceKind] = []
    # Every node (no group / `cluster` / `node`): cluster node rank order, as RLinf's default groups;
    # a named group: its nodes in group order (ascending rank), groups concatenated as listed.
    parts: list[tuple[NodeGroup, tuple[Node, ...]]]
    if labels is None or canonical == (RESERVED_NODE_LABEL,):
        parts = [(cluster.node_groups[n.group_index], (n,)) for n in cluster.nodes]
    else:
        parts = [(g, cluster.group_nodes(cluster.node_groups.index(g))) for g in groups]

    def shape(group: NodeGroup) -> tuple[tuple[int, ...], str, ResourceKind]:
        """Resources per node of the group, their type and kind."""
        if kind == "node":
            return (1,) * group.num_nodes, "node", "node"
        if labels is None:
            return group.gpus_per_node, group.gpu_type or "gpu", "gpu"
        return group.resources_per_node(), group.resource_type, group.resource_kind

    # once per group (in the whole-cluster selections every node is a part of its own)
    shapes = {id(group): shape(group) for group in groups}
    for group, nodes in parts:
        per_node, rtype, rkind = shapes[id(group)]
        for node in nodes:
            count = per_node[node.index_in_group]
            node_of.extend([node.rank] * count)
            local_of.extend(range(count))
            type_of.extend([rtype] * count)
            kind_of.extend([rkind] * count)
    mixed = (
        rlinf_span
        and kind == "node"
        and not count_nodes
        and labels is not None
        and canonical != (RESERVED_NODE_LABEL,)
        and len({g.resource_kind for g in groups}) > 1
    )
    span = sum(sum(g.resources_per_node()) for g in groups) if mixed else None
    return ResourceSpace(canonical, kind, tuple(node_of), tuple(local_of), tuple(type_of), tuple(kind_of), span)
