"""The cluster as hpcplace sees it: node groups (= Slurm partitions) and their nodes.

A node group's nodes get consecutive cluster node ranks in the order the groups are listed, unless
the groups name their cluster node ranks (RLinf's `node_ranks`, any set: `0,2`, `1,4,7`); ranks are
labels, a group's nodes are its ranks in ascending order (as RLinf orders them), and each node group
becomes one heterogeneous-job component whose i-th node is the group's i-th node. Facts such as GPUs per node are explicit
inputs here, never discovered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from hpcplace.config.container import Container
from hpcplace.config.network import Network, check_network
from hpcplace.config.topology import Topology, check_topology
from hpcplace.errors import SourceLocation, SpecError

RESERVED_NODE_LABEL = "node"
RESERVED_CLUSTER_LABEL = "cluster"  # RLinf's name for the default group: every node
ResourceKind = Literal["gpu", "hardware", "node"]


@dataclass(frozen=True)
class Hardware:
    """Non-GPU hardware attached to nodes (robots, cameras): a type and a count per node."""

    type: str
    per_node: tuple[int, ...]
    # The site's GRES name for it when that is not the type (RLinf's `type: Franka` on a site whose
    # gres.conf says `robot`); None: the type is the GRES name.
    gres: str | None = None

    @property
    def gres_name(self) -> str:
        return self.gres or self.type


@dataclass(frozen=True)
class NodeGroup:
    """A set of identical-purpose nodes in one Slurm partition."""

    label: str
    partition: str | None  # None: Slurm's default partition (no --partition is rendered)
    num_nodes: int
    gpus_per_node: tuple[int, ...]
    gpu_type: str | None = None
    cpus_per_node: int | None = None
    mem_per_node_mb: int | None = None
    constraint: str | None = None
    account: str | None = None
    qos: str | None = None
    hardware: Hardware | None = None
    ignore_hardware: bool = False
    env: dict[str, str] = field(default_factory=dict)
    # RLinf env_configs, per node of the group (empty: none). Applied after `env` on that node only.
    node_env: tuple[dict[str, str], ...] = ()
    python_interpreter: tuple[str | None, ...] = ()  # per node; None: the job's Python (Ray mode only)
    location: SourceLocation | None = field(default=None, compare=False)
    node_ranks: tuple[int, ...] | None = None  # explicit cluster node ranks, ascending; None: consecutive
    container: Container | None = None  # the image its processes run in (hpcplace.config.container); None: the node's
    network: Network | None = None  # the interface for collectives and Ray (hpcplace.config.network); None: theirs
    topology: Topology | None = None  # blocks or leaf switches (hpcplace.config.topology); None: a flat fabric

    def __post_init__(self) -> None:
        # Backstops for every input format (parsers check earlier, with finer locations).
        from hpcplace.config import limits
        from hpcplace.config.safe_words import check_env, check_sbatch_text

        where = f"node group {self.label!r}"
        limits.nodes(self.num_nodes, self.location, f"{where}: number of nodes")
        for count in self.gpus_per_node:
            limits.gpus_per_node(count, self.location, f"{where}: GPUs per node")
        for count in self.hardware.per_node if self.hardware else ():
            limits.hardware_per_node(count, self.location, f"{where}: hardware per node")
        for key in ("partition", "account", "qos", "constraint", "gpu_type"):
            value = getattr(self, key)
            if value is not None:
                check_sbatch_text(value, f"{where}: {key}", location=self.location)
        check_env(self.env, location=self.location, what=f"{where}: env")
        if self.topology is not None:
            check_topology(self.topology, self.num_nodes, where)
        if self.network is not None:
            check_network(self.network, self.location, where)
            from hpcplace.runtime.network import NETWORK_VARIABLES

            clash = sorted({n for env in (self.env, *self.node_env) for n in env if n in NETWORK_VARIABLES})
            if clash:
                raise SpecError(
                    f"{where}: env sets {', '.join(clash)}, which `network: {self.network.describe()}` computes",
                    location=self.location,
                    hint="keep network: (the node's own interface and address are exported) or the env entries, not both",
                )
        for name, per_node in (("node_env", self.node_env), ("python_interpreter", self.python_interpreter)):
            if per_node and len(per_node) != self.num_nodes:
                raise SpecError(
                    f"{where}: {len(per_node)} {name} entries for {self.num_nodes} nodes",
                    location=self.location,
                    hint="give one entry per node of the group",
                )
        for j, node_env in enumerate(self.node_env):
            check_env(node_env, location=self.location, what=f"{where}: env of node {j}")
        for interp in self.python_interpreter:
            if interp is not None:
                check_sbatch_text(interp, f"{where}: python_interpreter_path", location=self.location)
        if len(self.gpus_per_node) != self.num_nodes:
            raise SpecError(
                f"node group {self.label!r}: {len(self.gpus_per_node)} GPU counts for {self.num_nodes} nodes",
                location=self.location,
                hint="give one GPU count, or one per node",
            )
        if self.node_ranks is not None and (
            len(self.node_ranks) != self.num_nodes or list(self.node_ranks) != sorted(set(self.node_ranks))
        ):
            raise SpecError(
                f"node group {self.label!r}: node ranks {list(self.node_ranks)} are not "
                f"{self.num_nodes} distinct ascending ranks",
                location=self.location,
            )
        if self.hardware and len(self.hardware.per_node) != self.num_nodes:
            raise SpecError(
                f"node group {self.label!r}: hardware counts do not match {self.num_nodes} nodes",
                location=self.location,
            )

    @property
    def resource_kind(self) -> ResourceKind:
        """What a resource rank counts in this group: GPUs, declared hardware, or whole nodes."""
        if self.ignore_hardware:
            return "node"
        if self.hardware is not None:
            return "hardware"
        return "gpu" if any(self.gpus_per_node) else "node"

    @property
    def resource_type(self) -> str:
        kind = self.resource_kind
        if kind == "hardware":
            assert self.hardware is not None
            return self.hardware.type
        if kind == "gpu":
            return self.gpu_type or "gpu"
        return "node"

    def resources_per_node(self) -> tuple[int, ...]:
        kind = self.resource_kind
        if kind == "gpu":
            return self.gpus_per_node
        if kind == "hardware":
            assert self.hardware is not None
            return self.hardware.per_node
        return (1,) * self.num_nodes


@dataclass(frozen=True)
class Charge:
    """What one het component is charged to. sbatch carries `--account`/`--qos` of a component over
    to every later component that sets none, so a node group without them inherits the last earlier
    one's; None = the submitting user's default (no earlier group set one)."""

    account: str | None
    account_from: str | None  # label of the node group that set it (the group itself when its own)
    qos: str | None
    qos_from: str | None

    def describe(self, label: str) -> str:
        def one(what: str, value: str | None, source: str | None) -> str:
            if value is None:
                return f"{what}: the user's default"
            if source == label:
                return f"{what} {value}"
            return f"{what} {value} (inherited from node group {source}: sbatch carries it over)"

        return one("account", self.account, self.account_from) + ", " + one("QOS", self.qos, self.qos_from)


def charges(groups: tuple[NodeGroup, ...]) -> tuple[Charge, ...]:
    """Per node group (= het component, in order), the account and QOS it is really charged to."""
    out: list[Charge] = []
    account = account_from = qos = qos_from = None
    for group in groups:
        if group.account:
            account, account_from = group.account, group.label
        if group.qos:
            qos, qos_from = group.qos, group.label
        out.append(Charge(account, account_from, qos, qos_from))
    return tuple(out)


@dataclass(frozen=True)
class Node:
    """One node: its cluster-wide rank, its group and its position within that group."""

    rank: int
    group_label: str
    group_index: int
    index_in_group: int
    gpus: int
    gpu_type: str | None
    partition: str | None


@dataclass(frozen=True)
class Cluster:
    """Node groups in order; derived node list. Labels are matched case-insensitively."""

    node_groups: tuple[NodeGroup, ...]
    nodes: tuple[Node, ...] = field(init=False)
    _group_nodes: tuple[tuple[Node, ...], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.node_groups:
            raise SpecError("the cluster has no node groups", hint="declare at least one node group")
        seen: dict[str, NodeGroup] = {}
        for group in self.node_groups:
            key = group.label.lower()
            if key in (RESERVED_NODE_LABEL, RESERVED_CLUSTER_LABEL):
                raise SpecError(
                    f"node group label {group.label!r} is reserved",
                    location=group.location,
                    hint="`node` means 'node ranks of the whole cluster' and `cluster` 'every node' "
                    "(as in RLinf); choose another label",
                )
            if key in seen:
                raise SpecError(
                    f"duplicate node group label {group.label!r} (labels are case-insensitive)",
                    location=group.location,
                    hint="give every node group its own label",
                )
            seen[key] = group
        from hpcplace.config import limits

        limits.nodes(
            sum(g.num_nodes for g in self.node_groups),
            self.node_groups[0].location,
            "number of nodes in the cluster (all node groups)",
        )
        explicit = [g.node_ranks is not None for g in self.node_groups]
        total = sum(g.num_nodes for g in self.node_groups)
        if any(explicit) and not all(explicit):
            raise SpecError(
                "some node groups name their node ranks and some do not",
                location=self.node_groups[explicit.index(False)].location,
                hint="give node_ranks for every node group, or for none",
            )
        nodes: list[Node] = []
        groups: list[tuple[Node, ...]] = []
        for gi, group in enumerate(self.node_groups):
            ranks = group.node_ranks or range(len(nodes), len(nodes) + group.num_nodes)
            mine = tuple(
                Node(r, group.label, gi, i, group.gpus_per_node[i], group.gpu_type, group.partition)
                for i, r in enumerate(ranks)
            )
            nodes.extend(mine)
            groups.append(mine)
        nodes.sort(key=lambda n: n.rank)
        if [n.rank for n in nodes] != list(range(total)):
            seen_ranks = [n.rank for n in nodes]
            raise SpecError(
                f"the node groups' node ranks {seen_ranks} are not each of 0..{total - 1} once",
                location=self.node_groups[0].location,
                hint="every cluster node rank belongs to exactly one node group",
            )
        object.__setattr__(self, "nodes", tuple(nodes))  # in cluster node rank order: nodes[r].rank == r
        object.__setattr__(self, "_group_nodes", tuple(groups))

    @property
    def num_gpus(self) -> int:
        return sum(sum(g.gpus_per_node) for g in self.node_groups)

    def group(self, label: str) -> NodeGroup | None:
        key = label.strip().lower()
        for group in self.node_groups:
            if group.label.lower() == key:
                return group
        return None

    def group_nodes(self, group_index: int) -> tuple[Node, ...]:
        """The group's nodes in group order (ascending cluster rank) = the het component's node order."""
        return self._group_nodes[group_index]

    def node_ranks(self, group_index: int) -> tuple[int, ...]:
        return tuple(n.rank for n in self.group_nodes(group_index))

    def contiguous(self, group_index: int) -> bool:
        ranks = self.node_ranks(group_index)
        return ranks == tuple(range(ranks[0], ranks[0] + len(ranks)))

    def first_node_rank(self, group_index: int) -> int:
        return self.node_ranks(group_index)[0]
