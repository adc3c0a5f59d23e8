"""The Plan: the contract between the login node and the job, and its versioned JSON form.

plan.json keeps every process record on its own line (`{"rank": N, ...}`) so the in-job shim can
read exactly one line through the byte-offset index written beside it, instead of parsing the
whole file (see docs/plan-json.md).
"""

from __future__ import annotations

import io
import json
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, chain, repeat
from operator import add
from typing import TYPE_CHECKING, Any, BinaryIO, TextIO, cast

from hpcplace.config.cluster import Charge, Cluster, Hardware, Node, NodeGroup, charges
from hpcplace.config.framework_version import PlannedVersion
from hpcplace.config.launch import STEPS, LaunchSpec
from hpcplace.config.rank_syntax import compress_ranks
from hpcplace.config.services import ServiceSpec
from hpcplace.config.spec import SpanningWorkers
from hpcplace.config.steer import SteerRule
from hpcplace.plan.placement import Placement

if TYPE_CHECKING:
    from hpcplace.plan.process_table import Slot

SCHEMA = "hpcplace.plan/1"
PHYSICAL_GPU_IDS = "physical"  # a process's GPU ids are the node's (the job holds its nodes whole)
JOB_RELATIVE_GPU_IDS = "job-relative"  # GPU k = the k-th (ascending) of the GPUs Slurm gives the job on the node


def gpu_id_kind(slurm: dict[str, str]) -> str:
    """Which GPU ids a plan holds: physical when the job takes its nodes whole (`slurm.exclusive`, the
    default), job-relative when it shares them (Slurm then gives it whichever GPUs are free)."""
    exclusive = str(slurm.get("exclusive", "true")).lower() not in ("false", "no", "0")
    return PHYSICAL_GPU_IDS if exclusive else JOB_RELATIVE_GPU_IDS


PROCESS_FIELDS = tuple(Placement.__dataclass_fields__)


@dataclass(frozen=True)
class ComponentPlan:
    """One component: its settings and every process, indexed by rank."""

    name: str
    world_size: int
    node_groups: tuple[str, ...]
    resource_type: str
    command: tuple[str, ...]
    env: dict[str, str]
    offload: bool
    tensor_parallel_size: int
    pipeline_parallel_size: int
    cpus_per_process: int
    mem_per_process_mb: int | None
    collocation_group: str | None
    processes: Sequence[Placement]  # a tuple, or the planner's compact process_table.Processes
    spanning: SpanningWorkers | None = None  # workers made of several processes (None: a process is a worker)
    service: ServiceSpec | None = None  # a service of the job (hpcplace.config.services): its replicas
    expert_parallel_size: int = 1  # Megatron's EP: ETP x EP consecutive ranks exchange tokens every MoE layer
    expert_tensor_parallel_size: int | None = None  # None: the tensor-parallel size
    gpus_per_engine: int | None = None  # an inference engine's GPUs (consecutive in rank order), when stated

    @property
    def expert_group_gpus(self) -> int:
        """GPUs of one MoE all-to-all: ETP x EP consecutive ranks (1 without expert parallelism)."""
        if self.expert_parallel_size <= 1:
            return 1
        return (self.expert_tensor_parallel_size or self.tensor_parallel_size) * self.expert_parallel_size


@dataclass(frozen=True)
class CollocationGroup:
    """Components that share devices; `phases` is the default turn order (components of one phase
    use disjoint devices and may run together)."""

    name: str
    components: tuple[str, ...]
    phases: tuple[tuple[str, ...], ...]
    devices: tuple[tuple[int, tuple[int, ...]], ...]  # (cluster node rank, local resource ranks)
    resource_type: str


@dataclass(frozen=True)
class WeightSync:
    """Model-parallel placement facts: which rollout (dp, tp) shards each actor rank feeds."""

    mode: str  # "collocated" | "disaggregated"
    actor_tp: int
    actor_pp: int
    rollout_tp: int
    rollout_stride: int
    actor_to_rollout: tuple[tuple[tuple[int, int], ...], ...]  # actor rank -> targets


@dataclass(frozen=True)
class Crossing:
    """A model-parallel group whose nodes lie in more than one block, leaf switch or node group."""

    component: str
    what: str
    ranks: tuple[int, ...]
    units: tuple[tuple[str, int], ...]  # (node group label, block/switch index in the plan's order)

    @property
    def links(self) -> int:
        """Boundaries the group's traffic crosses: one fewer than the units it spans."""
        return len(self.units) - 1

    def describe(self, unit_words: Mapping[str, str]) -> str:
        """`unit_words`: per node group label, what its units are ("block", "leaf switch")."""
        spans: dict[str, list[int]] = {}
        for label, unit in self.units:
            spans.setdefault(label, []).append(unit)
        where = " and ".join(
            f"{unit_words.get(label, 'unit')}s {compress_ranks(units)} of {label!r}"
            if len(units) > 1
            else f"{unit_words.get(label, 'unit')} {units[0]} of {label!r}"
            for label, units in spans.items()
        )
        return f"ranks {compress_ranks(list(self.ranks))} span {where}"

    def to_json(self) -> dict[str, object]:
        return {
            "component": self.component,
            "group": self.what,
            "ranks": list(self.ranks),
            "units": [[label, unit] for label, unit in self.units],
            "links": self.links,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Crossing:
        return cls(
            str(data["component"]),
            str(data["group"]),
            tuple(int(r) for r in data["ranks"]),
            tuple((str(label), int(unit)) for label, unit in data["units"]),
        )


@dataclass(frozen=True)
class Plan:
    name: str
    source: str
    source_format: str
    cluster: Cluster
    components: tuple[ComponentPlan, ...]
    collocation_groups: tuple[CollocationGroup, ...]
    weight_sync: WeightSync | None
    slurm: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    composed: tuple[str, ...] = ()  # files Hydra composed and overrides applied, in order
    launch: LaunchSpec = STEPS
    steer: tuple[SteerRule, ...] = ()  # the framework's Ray requests -> planned nodes (hpcplace.config.steer)
    framework_version: PlannedVersion | None = None  # the framework version planned for (stated/installed/newest)
    # model-parallel groups that cross a block or leaf switch (hpcplace.plan.topology); empty without a topology
    topology_crossings: tuple[Crossing, ...] = ()

    def component(self, name: str) -> ComponentPlan:
        for comp in self.components:
            if comp.name == name:
                return comp
        raise KeyError(name)

    @property
    def num_processes(self) -> int:
        return sum(c.world_size for c in self.components)


def _group_json(group: NodeGroup, het_group: int, first_node_rank: int) -> dict[str, object]:
    return {
        "label": group.label,
        "partition": group.partition,
        "het_group": het_group,
        "num_nodes": group.num_nodes,
        "first_node_rank": first_node_rank,
        "gpus_per_node": list(group.gpus_per_node),
        "gpu_type": group.gpu_type,
        "cpus_per_node": group.cpus_per_node,
        "mem_per_node_mb": group.mem_per_node_mb,
        "constraint": group.constraint,
        "account": group.account,
        "qos": group.qos,
        "hardware": (_hardware_json(group.hardware) if group.hardware else None),
        "resource_kind": group.resource_kind,
        "env": dict(sorted(group.env.items())),
        # RLinf env_configs, one entry per node of the group; present only when set
        **({"node_env": [dict(sorted(e.items())) for e in group.node_env]} if group.node_env else {}),
        **({"python_interpreter": list(group.python_interpreter)} if group.python_interpreter else {}),
        # the image the group's processes run in; present only when set
        **({"container": group.container.to_json()} if group.container else {}),
        # the interface for collectives and Ray (runtime/network.py resolves it); present only when set
        **({"network": group.network.to_json()} if group.network else {}),
        # blocks or leaf switches, with the segment/switches the job asks for; present only when set
        **({"topology": group.topology.to_json()} if group.topology else {}),
    }


def _hardware_json(hardware: Hardware) -> dict[str, object]:
    out: dict[str, object] = {"type": hardware.type, "per_node": list(hardware.per_node)}
    if hardware.gres is not None:  # present only when the site's GRES name differs from the type
        out["gres"] = hardware.gres
    return out


def _charge_json(charge: Charge) -> dict[str, object]:
    """The account/QOS the het component is charged to, and which node group set it (sbatch carries
    them over to later components); null account/qos = the submitting user's default."""
    return {
        "account": charge.account,
        "account_from": charge.account_from,
        "qos": charge.qos,
        "qos_from": charge.qos_from,
    }


def plan_header(plan: Plan) -> dict[str, object]:
    """Everything but the process records, as JSON-ready data."""
    cluster = plan.cluster
    # Explicit node ranks on every group as soon as one group's are not one block (read back by load_plan).
    explicit_ranks = not all(cluster.contiguous(i) for i in range(len(cluster.node_groups)))
    return {
        "schema": SCHEMA,
        "name": plan.name,
        "source": {
            "path": plan.source,
            "format": plan.source_format,
            **({"composed": list(plan.composed)} if plan.composed else {}),
            **({"framework_version": plan.framework_version.to_json()} if plan.framework_version else {}),
        },
        "node_groups": [
            {
                **_group_json(g, i, cluster.first_node_rank(i)),
                "charged": _charge_json(c),
                **({"node_ranks": list(cluster.node_ranks(i))} if explicit_ranks else {}),
            }
            for i, (g, c) in enumerate(zip(cluster.node_groups, charges(cluster.node_groups)))
        ],
        "collocation_groups": [
            {
                "name": g.name,
                "components": list(g.components),
                "phases": [list(p) for p in g.phases],
                "resource_type": g.resource_type,
                "devices": [{"node": n, "local_ranks": list(r)} for n, r in g.devices],
            }
            for g in plan.collocation_groups
        ],
        "weight_sync": None
        if plan.weight_sync is None
        else {
            "mode": plan.weight_sync.mode,
            "actor_tp": plan.weight_sync.actor_tp,
            "actor_pp": plan.weight_sync.actor_pp,
            "rollout_tp": plan.weight_sync.rollout_tp,
            "rollout_stride": plan.weight_sync.rollout_stride,
            "actor_to_rollout": [[list(t) for t in targets] for targets in plan.weight_sync.actor_to_rollout],
        },
        "slurm": dict(sorted(plan.slurm.items())),
        # Only for job-relative ids (absent = physical): plans of jobs that hold their nodes stay as they were.
        **({"gpu_ids": JOB_RELATIVE_GPU_IDS} if gpu_id_kind(plan.slurm) == JOB_RELATIVE_GPU_IDS else {}),
        "warnings": list(plan.warnings),
        # Only in ray mode (absent = steps): plans of the default mode stay as they were.
        **({"launch": plan.launch.to_json()} if plan.launch != STEPS else {}),
        # Only where a framework's Ray requests are steered: other plans stay as they were.
        **({"steer": [r.to_json() for r in plan.steer]} if plan.steer else {}),
        # Only where a node group has a topology: its model-parallel groups that cross it.
        **(
            {"topology_crossings": [c.to_json() for c in plan.topology_crossings]}
            if any(g.topology for g in cluster.node_groups)
            else {}
        ),
    }


def component_header(comp: ComponentPlan) -> dict[str, object]:
    return {
        "name": comp.name,
        "world_size": comp.world_size,
        "node_groups": list(comp.node_groups),
        "resource_type": comp.resource_type,
        "command": list(comp.command),
        "env": dict(sorted(comp.env.items())),
        "offload": comp.offload,
        "tensor_parallel_size": comp.tensor_parallel_size,
        "pipeline_parallel_size": comp.pipeline_parallel_size,
        "cpus_per_process": comp.cpus_per_process,
        "mem_per_process_mb": comp.mem_per_process_mb,
        "collocation_group": comp.collocation_group,
        # only for components whose workers span nodes (ROLL, Ray launch mode): plans without stay unchanged
        **({"workers": comp.spanning.to_json()} if comp.spanning is not None else {}),
        **({"service": comp.service.to_json()} if comp.service is not None else {}),
        **({"expert_parallel_size": comp.expert_parallel_size} if comp.expert_parallel_size > 1 else {}),
        **(
            {"expert_tensor_parallel_size": comp.expert_tensor_parallel_size}
            if comp.expert_tensor_parallel_size is not None
            else {}
        ),
        **({"gpus_per_engine": comp.gpus_per_engine} if comp.gpus_per_engine is not None else {}),
    }


def process_json(p: Placement, _strings: dict[str | None, str] | None = None) -> str:
    """One process record as one compact JSON line (key order = RLinf's field order).

    Hand-formatted because plans reach 65k+ processes; strings go through json.dumps (cached)."""
    cache = _strings if _strings is not None else {}

    def s(value: str | None) -> str:
        out = cache.get(value)
        if out is None:
            out = cache[value] = json.dumps(value)
        return out

    visible = ",".join(s(v) for v in p.visible_accelerators)
    hw = ",".join(str(h) for h in p.local_hardware_ranks)
    return (
        f'{{"rank":{p.rank},"cluster_node_rank":{p.cluster_node_rank},'
        f'"placement_node_rank":{p.placement_node_rank},"local_accelerator_rank":{p.local_accelerator_rank},'
        f'"accelerator_type":{s(p.accelerator_type)},"local_rank":{p.local_rank},'
        f'"local_world_size":{p.local_world_size},"visible_accelerators":[{visible}],'
        f'"isolate_accelerator":{"true" if p.isolate_accelerator else "false"},'
        f'"local_hardware_ranks":[{hw}],"node_group_label":{s(p.node_group_label)},'
        f'"partition":{s(p.partition)},"het_group":{p.het_group},"group_node_index":{p.group_node_index},'
        f'"resource_type":{s(p.resource_type)}}}'
    )


def plan_to_json(plan: Plan) -> str:
    """Deterministic text: a pretty header, then each component with one process per line."""
    return "".join(iter_plan_json(plan))


@dataclass
class ProcessSpans:
    """Where each process record of one component lies in the written plan.json (rank order)."""

    offsets: array[int] = field(default_factory=lambda: array("Q"))
    lengths: array[int] = field(default_factory=lambda: array("I"))


_INDENT = "        "
_SEP = ",\n" + _INDENT
_CHUNK = 8192  # records per yielded piece: ~2 MB of text


def iter_plan_json(
    plan: Plan, spans: list[ProcessSpans] | None = None, *, header: dict[str, object] | None = None
) -> Iterator[str]:
    """plan_to_json in pieces of at most a few MB, so a million-process plan is never one string.

    With `spans`, append one ProcessSpans per component (the plan index is built from them
    without reading the file back). The text is ASCII (json.dumps escapes), so characters = bytes.
    `header`: plan_header(plan) when the caller already has it."""
    header = plan_header(plan) if header is None else header
    lines = ["{"]
    for key, value in header.items():
        lines.append(f"  {json.dumps(key)}: {json.dumps(value)},")
    lines.append('  "components": [')
    pos = 0
    for ci, comp in enumerate(plan.components):
        head = component_header(comp)
        lines.append("    {")
        for key, value in head.items():
            lines.append(f"      {json.dumps(key)}: {json.dumps(value)},")
        lines.append('      "processes": [')
        text = "\n".join(lines) + "\n"
        lines = []
        pos += len(text)
        yield text
        comp_spans = None
        if spans is not None:
            comp_spans = ProcessSpans()
            spans.append(comp_spans)
        prefix = _INDENT
        for records, lens in _record_chunks(comp.processes, comp_spans is not None):
            pos += len(prefix)
            if comp_spans is not None:
                comp_spans.lengths.extend(lens)
                comp_spans.offsets.extend(accumulate(map(add, lens[:-1], repeat(len(_SEP))), initial=pos))
            pos += len(records)
            yield prefix  # apart: `prefix + records` would copy the records' megabytes once more
            yield records
            prefix = _SEP
        tail = "\n" if len(comp.processes) else ""
        lines.append(tail + "      ]")
        lines.append("    }" + ("," if ci < len(plan.components) - 1 else ""))
    lines.append("  ]")
    lines.append("}")
    yield "\n".join(lines) + "\n"


def write_plan_json(
    plan: Plan,
    out: TextIO | BinaryIO,
    spans: list[ProcessSpans] | None = None,
    *,
    header: dict[str, object] | None = None,
) -> int:
    """Stream plan.json into `out` (a text or, faster, a binary file); returns the number of bytes
    (= characters) written."""
    written = 0
    if isinstance(out, io.TextIOBase):
        for piece in iter_plan_json(plan, spans, header=header):
            out.write(piece)
            written += len(piece)
        return written
    raw = cast(BinaryIO, out)  # not a text file: a binary one
    for piece in iter_plan_json(plan, spans, header=header):
        raw.write(piece.encode("ascii"))
        written += len(piece)
    return written


def _record_chunks(processes: Sequence[Placement], lengths: bool = False) -> Iterator[tuple[str, list[int]]]:
    """Process records (one JSON object each, joined by `_SEP`), in rank order, a few thousand
    records a piece; with `lengths`, also each record's length (else an empty list).

    For the planner's Processes, consecutive runs of one layout (the nodes of a group, as a rule)
    are written together: one `str.join` over their cached literal pieces repeated, the varying
    numbers slotted in by (C-level) slice assignment, so the Python-level work is per node, not
    per process."""
    from hpcplace.plan.process_table import Processes

    if not isinstance(processes, Processes):
        strings: dict[str | None, str] = {}
        for i in range(0, len(processes), _CHUNK):
            records = [process_json(p, strings) for p in processes[i : i + _CHUNK]]
            yield _SEP.join(records), list(map(len, records)) if lengths else []
        return
    templates: dict[tuple[int, int, bool], _RunTemplate] = {}
    strings = {}
    buf: list[str] = []
    lens: list[int] = []
    count = 0
    runs = processes.runs
    i = 0
    while i < len(runs):
        run = runs[i]
        node = run.node
        key = (id(run.slots), node.group_index, bool(node.gpus))
        template = templates.get(key)
        if template is None:
            template = templates[key] = _RunTemplate.of(run.slots, node, strings)
        m = len(run.slots)
        # the batch: the runs that follow with the same layout, group and first local rank (a run's
        # ranks always follow the previous run's), at most about a chunk of records
        j, end = i + 1, min(len(runs), i + max(1, _CHUNK // m))
        while (
            j < end
            and runs[j].slots is run.slots
            and runs[j].first_local == run.first_local
            and runs[j].node.group_index == node.group_index
            and bool(runs[j].node.gpus) == key[2]
        ):
            j += 1
        batch = runs[i:j]
        b = j - i
        cycle, fixed = template.cycle(run.first_local)
        ranks = list(map(str, range(run.first_rank, run.first_rank + b * m)))
        node_ranks = [r.node.rank for r in batch]
        nodes = list(
            map(
                add,
                repeat(template.node_head, b),
                map(
                    add,
                    map(str, node_ranks),
                    map(add, repeat(template.node_middle, b), map(str, map(processes.placement_node_rank, node_ranks))),
                ),
            )
        )
        sizes = list(map(str, map(processes.local_world_size, node_ranks)))
        indices = [str(r.node.index_in_group) for r in batch]
        parts = cycle * b
        parts[0] = _SEP + _RECORD_START if buf else _RECORD_START  # the previous record's end is not in this batch
        parts.append(template.last)
        parts[1::_HOLES] = ranks
        parts[2::_HOLES] = chain.from_iterable(map(repeat, nodes, repeat(m, b)))
        parts[4::_HOLES] = chain.from_iterable(map(repeat, sizes, repeat(m, b)))
        parts[6::_HOLES] = chain.from_iterable(map(repeat, indices, repeat(m, b)))
        buf.append("".join(parts))
        if lengths:  # literal length + the node's numbers + the rank, all in C-level maps
            node_len = map(add, map(len, nodes), map(add, map(len, sizes), map(len, indices)))
            lens += map(
                add, map(add, fixed * b, chain.from_iterable(map(repeat, node_len, repeat(m, b)))), map(len, ranks)
            )
        count += b * m
        i = j
        if count >= _CHUNK:
            yield "".join(buf), lens
            buf, lens, count = [], [], 0
    if buf:
        yield "".join(buf), lens


_FIELD_MARKS = (
    ("rank", -1001),
    ("cluster_node_rank", -1002),
    ("placement_node_rank", -1003),
    ("local_rank", -1004),
    ("local_world_size", -1005),
    ("group_node_index", -1006),
)
_RECORD_START = '{"rank":'
# List items per record: the previous record's end (with `_SEP`) and this one's start, the rank, the node's
# cluster and placement node ranks, the slot's text up to local_world_size (its local rank in it), the
# node's local_world_size, the slot's text up to group_node_index, the node's group_node_index.
_HOLES = 7


@dataclass(frozen=True)
class _RunTemplate:
    """process_json of each slot of a run split around the numbers that vary per node or per process:
    `node_head` + cluster_node_rank + `node_middle` + placement_node_rank is a node's piece; per slot k,
    `text[k]` are the literal pieces: after the placement node rank up to the local rank, from it to
    local_world_size, from there to group_node_index, and the record's end (`last`: the run's last
    record's end)."""

    node_head: str
    node_middle: str
    text: list[tuple[str, str, str, str]]
    last: str
    _cycles: dict[int, tuple[list[str], list[int]]] = field(default_factory=dict)

    def cycle(self, first_local: int) -> tuple[list[str], list[int]]:
        """The `_HOLES` list items of the run's records, local ranks from `first_local` filled in and
        the other numbers left as "" (the first item ends the previous run's last record); and per
        record the length of its literal text."""
        got = self._cycles.get(first_local)
        if got is None:
            items: list[str] = []
            fixed: list[int] = []
            end = self.last
            for k, (to_local, to_size, to_index, record_end) in enumerate(self.text):
                slot = to_local + str(first_local + k) + to_size
                items += [end + _SEP + _RECORD_START, "", "", slot, "", to_index, ""]
                fixed.append(len(_RECORD_START) + len(slot) + len(to_index) + len(record_end))
                end = record_end
            got = self._cycles[first_local] = (items, fixed)
        return got

    @staticmethod
    def of(slots: Sequence[Slot], node: Node, strings: dict[str | None, str]) -> _RunTemplate:
        from hpcplace.plan.process_table import accelerator_type

        heads: set[tuple[str, str, str]] = set()
        text: list[tuple[str, str, str, str]] = []
        for slot in slots:
            marks = Placement(
                -1001,
                -1002,
                -1003,
                slot.local_accelerator_rank,
                accelerator_type(node),
                -1004,
                -1005,
                slot.visible_accelerators,
                slot.isolate_accelerator,
                slot.local_hardware_ranks,
                node.group_label,
                node.partition,
                node.group_index,
                -1006,
                slot.resource_type,
            )
            rest = process_json(marks, strings)
            pieces = []
            for field_name, mark in _FIELD_MARKS:
                head, sep, rest = rest.partition(f'"{field_name}":{mark},"')
                if not sep:
                    raise AssertionError(f"record template: field {field_name!r} not found")  # our own format
                pieces.append(head + f'"{field_name}":')
                rest = ',"' + rest
            heads.add((pieces[0], pieces[1], pieces[2]))
            text.append((pieces[3], pieces[4], pieces[5], rest))
        ((start, node_head, node_middle),) = heads  # the same for every slot: the record's first fields
        if start != _RECORD_START:
            raise AssertionError(f"record template: starts {start!r}")  # our own format
        return _RunTemplate(node_head, node_middle, text, text[-1][3])
