"""A node group's `topology:`: the fabric its nodes sit on, so model-parallel groups stay inside it.

    topology: {block: 18}               # Slurm topology/block: 18 nodes share an NVLink domain (an NVL72 rack)
    topology: {block: 18, segment: 9}   # ... and the job asks for segments of 9 nodes (default: the planner picks)
    topology: {switch: 16}              # topology/tree: 16 nodes per leaf switch
    topology: {switch: 16, switches: 2} # ... and at most 2 leaf switches (default: the fewest that hold the group)
    topology: site                      # read from the site's Slurm when planning (`scontrol show topology`)

The planner (hpcplace.plan.topology) picks what the group asks Slurm for (`--segment`, `--switches`) and
reports every tensor-parallel group or engine that would cross a block or leaf switch; the job orders its
nodes by block or switch at start, so the plan's consecutive nodes are Slurm's block-mates.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hpcplace.config.yaml_source import View
from hpcplace.errors import SourceLocation, SpecError

BLOCK, TREE, SITE = "block", "tree", "site"
TOPOLOGY_HINT = (
    "write topology: {block: NODES} (nodes per NVLink domain or rack), topology: {switch: NODES} "
    "(nodes per leaf switch) or topology: site (read it from Slurm)"
)
MAX_UNIT_NODES = 100_000


@dataclass(frozen=True)
class Topology:
    """The fabric of one node group: `size` nodes per block (kind block) or leaf switch (kind tree).

    `segment` / `switches` are what the job asks Slurm for; None before the planner chose them (or,
    for a group that fits one block, when there is nothing to ask). Kind `site` is resolved from the
    live cluster before planning."""

    kind: str
    size: int | None
    segment: int | None = None
    switches: int | None = None
    site_name: str | None = None  # the site's topology (topology.yaml) it was read from, when it was
    location: SourceLocation | None = field(default=None, compare=False)
    segment_location: SourceLocation | None = field(default=None, compare=False)

    @property
    def unit(self) -> str:
        return "block" if self.kind == BLOCK else "leaf switch"

    @property
    def unit_word(self) -> str:
        """What the plan cuts the group's nodes into: segments (each inside one block), blocks or switches."""
        return "segment" if self.kind == BLOCK and self.segment is not None else self.unit

    def unit_nodes(self, num_nodes: int) -> int:
        """Nodes per unit of the plan's consecutive nodes: the segment (block), else the block or switch."""
        if self.kind == BLOCK and self.segment is not None:
            return self.segment
        return max(1, min(self.size or num_nodes, num_nodes))

    def describe(self) -> str:
        if self.kind == SITE:
            return "the site's topology (not read yet)"
        text = f"{self.size} node{'s' if self.size != 1 else ''} per {self.unit}"
        if self.segment is not None:
            text += f", segments of {self.segment}"
        if self.switches is not None:
            text += f", at most {self.switches} leaf switch{'es' if self.switches != 1 else ''}"
        return text + (f" (site topology {self.site_name})" if self.site_name else "")

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"kind": self.kind, "size": self.size}
        if self.segment is not None:
            out["segment"] = self.segment
        if self.switches is not None:
            out["switches"] = self.switches
        if self.site_name is not None:
            out["site_name"] = self.site_name
        return out


def topology_request(topology: Topology) -> str:
    """What the job asks Slurm for, as shown in the plan's summary ("" when nothing)."""
    if topology.kind == BLOCK and topology.segment is not None:
        return f"; the job asks for --segment={topology.segment}"
    if topology.kind == TREE and topology.switches is not None:
        return f"; the job asks for --switches={topology.switches}"
    if topology.kind == BLOCK:
        return "; the group fits one block (Slurm keeps it in one)"
    return ""


def topology_from_json(data: object) -> Topology | None:
    """plan.json's node group "topology" record back into a Topology (absent: none)."""
    if not isinstance(data, dict):
        return None

    def num(key: str) -> int | None:
        value = data.get(key)
        return int(value) if value is not None else None

    name = data.get("site_name")
    return Topology(str(data["kind"]), num("size"), num("segment"), num("switches"), str(name) if name else None)


def parse_topology(view: View) -> Topology:
    """`topology:` as written; errors point at the value."""
    value = view.value
    if isinstance(value, str) and "${" in value:
        return parse_topology(view.deref())
    if isinstance(value, str):
        if value.strip() != SITE:
            raise view.error(f"unknown topology {value!r}", hint=TOPOLOGY_HINT)
        return Topology(SITE, None, location=view.location())
    if not isinstance(value, dict):
        raise view.error(f"expected a mapping or `site`, got {value!r}", hint=TOPOLOGY_HINT)
    view.check_keys({"block", "switch", "segment", "switches"})
    block, switch = view.get("block"), view.get("switch")
    if (block is None) == (switch is None):
        raise view.error("give exactly one of block: and switch:", hint=TOPOLOGY_HINT)
    kind, size_view = (BLOCK, block) if block is not None else (TREE, switch)
    assert size_view is not None
    size = size_view.int(minimum=1)
    if size > MAX_UNIT_NODES:
        raise size_view.error(f"{size} nodes per {kind} is more than {MAX_UNIT_NODES}", hint=TOPOLOGY_HINT)
    segment_view, switches_view = view.get("segment"), view.get("switches")
    if segment_view is not None and kind != BLOCK:
        raise segment_view.key_error(
            "segment: is for block topologies (Slurm's --segment)", hint="use switches: for a tree topology"
        )
    if switches_view is not None and kind != TREE:
        raise switches_view.key_error(
            "switches: is for tree topologies (Slurm's --switches)", hint="use segment: for a block topology"
        )
    segment = segment_view.int(minimum=1) if segment_view is not None else None
    if segment is not None and segment > size:
        assert segment_view is not None
        raise segment_view.error(
            f"a segment of {segment} nodes is larger than a block ({size} nodes): Slurm places each segment "
            "inside one block",
            hint=f"give a segment of at most {size} nodes",
        )
    switches = switches_view.int(minimum=1) if switches_view is not None else None
    return Topology(
        kind,
        size,
        segment,
        switches,
        location=view.location(),
        segment_location=segment_view.location() if segment_view is not None else None,
    )


def check_topology(topology: Topology, num_nodes: int, where: str) -> None:
    """The backstop every input format passes through (NodeGroup): Slurm's own rules for a segment."""
    if topology.kind == SITE:
        return
    location = topology.segment_location or topology.location
    if topology.kind not in (BLOCK, TREE) or not topology.size:
        raise SpecError(f"{where}: topology {topology.to_json()} is not a block or tree topology", location=location)
    seg = topology.segment
    if seg is not None and seg > topology.size:
        raise SpecError(
            f"{where}: a segment of {seg} nodes is larger than a block ({topology.size} nodes)",
            location=location,
            hint=f"give a segment of at most {topology.size} nodes",
        )
    if seg is not None and num_nodes > seg and num_nodes % seg:
        divisors = [d for d in range(1, min(topology.size, num_nodes) + 1) if num_nodes % d == 0]
        raise SpecError(
            f"{where}: a segment of {seg} nodes does not divide the group's {num_nodes} nodes "
            "(Slurm's --segment needs a node count that is a multiple of it)",
            location=location,
            hint=f"segments that divide {num_nodes} nodes and fit a block: {', '.join(map(str, divisors))}",
        )
