"""The typed experiment spec every input format is converted into, and the native format parser.

Native format (see configs/ and docs/formats/native.md):

    name: demo
    cluster:
      node_groups: [{label, partition, nodes, gpus_per_node, gpu_type, cpus_per_node, mem_per_node,
                     constraint, account, qos, hardware: {type, count}, env}]
      component_placement: {"actor,rollout": "all", env: {node_group: robot, placement: "0-3:0-7"}}
    components: {actor: {command, env, offload, tensor_parallel_size, pipeline_parallel_size,
                         expert_parallel_size, expert_tensor_parallel_size, gpus_per_engine,
                         cpus_per_process, mem_per_process}}
    slurm: {time: "01:00:00", ...}
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hpcplace.config import limits
from hpcplace.config.cluster import Cluster, Hardware, NodeGroup
from hpcplace.config.framework_version import PlannedVersion
from hpcplace.config.launch import STEPS, LaunchSpec
from hpcplace.config.network import parse_network
from hpcplace.config.safe_words import argv_problem, check_sbatch_text
from hpcplace.config.services import ServiceSpec
from hpcplace.config.slurm_options import SLURM_JOB_OPTIONS, extra_args_problem, job_option_problem, sbatch_time_ok
from hpcplace.config.steer import SteerRule
from hpcplace.config.topology import parse_topology
from hpcplace.config.yaml_source import View, YamlDocument, yaml_words
from hpcplace.errors import SourceLocation, SpecError


@dataclass(frozen=True)
class SpanningWorkers:
    """Framework workers wider than one node (ROLL: a vLLM worker with tp*pp GPUs over several nodes).

    Such a worker is planned as one process per node it spans, each holding that node's GPUs of
    the worker; `workers[w]` lists worker w's process ranks, the first being the node that hosts the
    worker itself (ROLL: the node of its first GPU). Only the Ray launch mode can run them (the
    framework spreads the worker over nodes through Ray); a job step runs each process alone."""

    workers: tuple[tuple[int, ...], ...]
    gpus_per_worker: int
    framework: str = "ROLL"
    location: SourceLocation | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, object]:
        return {
            "framework": self.framework,
            "gpus_per_worker": self.gpus_per_worker,
            "processes": [list(w) for w in self.workers],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SpanningWorkers:
        return cls(
            tuple(tuple(int(r) for r in w) for w in data["processes"]),
            int(data["gpus_per_worker"]),
            str(data.get("framework", "ROLL")),
        )


@dataclass(frozen=True)
class PlacementEntry:
    """One `component_placement` key: components sharing one placement.

    Either `rank_map` (RLinf's string syntax) or `resource_lists` (explicit, e.g. from ROLL)."""

    components: tuple[str, ...]
    node_group: tuple[str, ...] | None
    rank_map: str | None
    resource_lists: tuple[tuple[int, ...], ...] | None = None
    location: SourceLocation | None = field(default=None, compare=False)
    # Column shift from the scalar start to the first character of the string (None: no offsets).
    text_shift: int | None = field(default=None, compare=False)
    node_group_location: SourceLocation | None = field(default=None, compare=False)
    # Workers made of several of these processes (ROLL workers wider than a node); None: one each.
    spanning: SpanningWorkers | None = None

    def location_at(self, offset: int) -> SourceLocation | None:
        if self.location is None or self.text_shift is None:
            return self.location
        return SourceLocation(self.location.path, self.location.line, self.location.column + self.text_shift + offset)


@dataclass(frozen=True)
class ComponentSpec:
    """Per-component settings besides placement."""

    name: str
    command: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    offload: bool = False
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    cpus_per_process: int = 1
    mem_per_process_mb: int | None = None
    location: SourceLocation | None = field(default=None, compare=False)
    # The groups that talk every layer besides tensor parallelism, kept inside one block or leaf switch
    # (hpcplace.plan.topology): Megatron's expert parallelism (its ETP x EP consecutive ranks exchange tokens;
    # ETP defaults to TP) and an inference engine's GPUs (consecutive in rank order).
    expert_parallel_size: int | None = None
    expert_tensor_parallel_size: int | None = None
    gpus_per_engine: int | None = None


# RLinf's ComponentPlacement classes (ExperimentSpec.placement_class): each has its own rules
MODEL_PARALLEL, MULTI_AGENT, EVAL, HYBRID = (
    "ModelParallelComponentPlacement",
    "MultiAgentModelParallelComponentPlacement",
    "ModelParallelEvalComponentPlacement",
    "HybridComponentPlacement",
)


@dataclass(frozen=True)
class ExperimentSpec:
    """Everything the planner needs, whatever the input format was."""

    name: str
    cluster: Cluster
    placements: tuple[PlacementEntry, ...]
    components: dict[str, ComponentSpec]
    source: str = "<memory>"
    source_format: str = "native"
    slurm: dict[str, str] = field(default_factory=dict)
    model_parallel: bool = False
    notes: tuple[str, ...] = ()  # what a foreign format's semantics added or dropped (shown as plan warnings)
    composed: tuple[str, ...] = ()  # config files composed (Hydra `defaults:`) and overrides applied, in order
    # Components whose contiguous GPUs are packed into processes of N GPUs each, with a stride (RLinf's
    # eval and multi-agent rollout engines: PackedPlacementStrategy(num_hardware_per_process, stride)).
    packed: dict[str, tuple[int, int]] = field(default_factory=dict)
    placement_class: str | None = None  # RLinf's ComponentPlacement class the config implies (rlinf format)
    launch: LaunchSpec = STEPS  # the top-level `launch:` block (hpcplace.config.launch)
    # which node each of the framework's own Ray requests is for (hpcplace.config.steer; the Ray launch mode)
    steer: tuple[SteerRule, ...] = ()
    framework_version: PlannedVersion | None = None  # the framework version planned for (plan.json records it)
    services: tuple[ServiceSpec, ...] = ()  # the `services:` block (hpcplace.config.services): also components

    def component(self, name: str) -> ComponentSpec:
        return self.components.get(name) or ComponentSpec(name)


NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
NAME_HINT = "names use letters, digits, '_', '.', '-' and start with a letter or digit"
_MEM_RE = re.compile(r"^\s*(\d+)\s*([KMGT]?)B?\s*$", re.IGNORECASE)


def check_name(view: View, name: str, what: str) -> str:
    if not NAME_RE.match(name):
        raise view.error(f"invalid {what} {name!r}", hint=NAME_HINT)
    return name


def parse_memory_mb(view: View) -> int:
    """`64000` (MB) or strings like `64G`, `512M`, `1T`."""
    value = view.value
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise view.error(f"memory must be positive, got {value}")
        return limits.check_cap(value, limits.MAX_MEM_PER_NODE_MB, "memory (MB)", view.location())
    match = _MEM_RE.match(str(value)) if isinstance(value, str) else None
    if not match:
        raise view.error(f"invalid memory size {value!r}", hint="use megabytes (64000) or a unit: 512M, 64G, 1T")
    number, unit = int(match.group(1)), match.group(2).upper()
    mb = {"K": number // 1024, "": number, "M": number, "G": number * 1024, "T": number * 1024 * 1024}[unit]
    if mb < 1:
        raise view.error(f"memory size {value!r} is less than 1 MB")
    return limits.check_cap(mb, limits.MAX_MEM_PER_NODE_MB, "memory (MB)", view.location())


def parse_command(view: View) -> tuple[str, ...]:
    """A component's command (see `yaml_words`), checked as an argv."""
    argv = yaml_words(view, "command")
    if not argv and isinstance(view.value, list):
        raise view.error("command is empty")
    return _checked_argv(view, tuple(argv))


def _checked_argv(view: View, argv: tuple[str, ...]) -> tuple[str, ...]:
    problem = argv_problem(argv)
    if problem is not None:
        raise view.error(f"command: {problem}", hint="give the command as a YAML list of non-empty words")
    return argv


def per_node_counts(view: View, num_nodes: int, what: str, cap: int | None = None) -> tuple[int, ...]:
    """An int for every node, or a list with one int per node (each at most `cap`)."""

    def one(item: View) -> int:
        value = item.int(minimum=0)
        return value if cap is None else limits.check_cap(value, cap, what, item.location())

    if isinstance(view.value, list):
        if len(view.value) != num_nodes:
            raise view.error(
                f"{what}: {len(view.value)} values for {num_nodes} nodes",
                hint="give one number for all nodes, or exactly one per node",
            )
        return tuple(one(item) for item in view.elements())
    return (one(view),) * num_nodes


def placement_entries(view: View) -> tuple[PlacementEntry, ...]:
    """Parse `component_placement` (RLinf syntax: string/int values or {node_group, placement})."""
    entries: list[PlacementEntry] = []
    seen: dict[str, View] = {}
    for key, child in view.items():
        names = tuple(n.strip() for n in str(key).split(",") if n.strip())
        key_view = child
        if not names:
            raise key_view.key_error(f"empty component name in key {key!r}")
        for name in names:
            check_name(key_view, name, "component name")
            if name in seen:
                first = seen[name].doc.location(seen[name].path + ("<key>",))
                raise key_view.key_error(
                    f"component {name!r} is placed twice (first at {first})",
                    hint="a component name may appear in only one key of component_placement"
                    " (with Hydra `defaults:`, keys of composed files are merged, not "
                    "replaced: override the same key, or remove one)",
                )
            seen[name] = key_view
        node_group: tuple[str, ...] | None = None
        node_group_loc = None
        target = child
        if isinstance(child.value, dict):
            child.check_keys({"node_group", "placement"})
            ng = child.get("node_group")
            if ng is not None and ng.value is not None:
                node_group = _node_group_labels(ng)
                node_group_loc = ng.location()
            target = child.require("placement", "the rank string, e.g. `0-7` or `all`")
        if target.value is None:
            raise target.error(
                "no placement given",
                hint="in a flow mapping YAML reads `{actor,rollout: all}` "
                "as two keys, `actor` (empty) and `rollout`: quote the key, "
                "`{'actor,rollout': all}`, or write the mapping in block style",
            )
        if isinstance(target.value, bool) or not isinstance(target.value, (str, int)):
            raise target.error(
                f"placement must be a string like `0-7` or an integer, got {target.value!r}",
                hint="quote placements that YAML would read as something else",
            )
        # Unquoted YAML 1.1 numbers like `1:0` (= 60), `010` or `0x10` must mean what was written.
        raw = target.raw_text() if isinstance(target.value, int) else None
        text = raw if raw is not None else str(target.value)
        loc = target.location()
        mark = target.doc.marks.get(target.path)
        shift = None
        if mark is not None and mark.style in (None, "'", '"') and "\n" not in text:
            shift = 1 if mark.style else 0
        entries.append(PlacementEntry(names, node_group, text, None, loc, shift, node_group_loc))
    if not entries:
        raise view.error("component_placement is empty", hint="place at least one component, e.g. `actor: all`")
    return tuple(entries)


def _node_group_labels(view: View) -> tuple[str, ...]:
    if isinstance(view.value, list):
        labels = tuple(str(item.value).strip() for item in view.elements())
    elif isinstance(view.value, (str, int)) and not isinstance(view.value, bool):
        labels = tuple(s.strip() for s in str(view.value).split(","))
    else:
        raise view.error(f"node_group must be a label, a comma list or a YAML list, got {view.value!r}")
    if not labels or any(not label for label in labels):
        raise view.error(f"empty node group label in {view.value!r}")
    return labels


def component_settings(view: View, name: str) -> ComponentSpec:
    view.check_keys(
        {
            "command",
            "env",
            "offload",
            "tensor_parallel_size",
            "tp",
            "pipeline_parallel_size",
            "pp",
            "expert_parallel_size",
            "ep",
            "expert_tensor_parallel_size",
            "etp",
            "gpus_per_engine",
            "cpus_per_process",
            "mem_per_process",
        }
    )
    command = parse_command(v) if (v := view.get("command")) else ()
    env = v.str_map() if (v := view.get("env")) else {}
    offload = v.bool() if (v := view.get("offload")) else False
    tp = _alias_int(view, ("tensor_parallel_size", "tp"))
    pp = _alias_int(view, ("pipeline_parallel_size", "pp"))
    cpus = (
        limits.cpus_per_node(v.int(minimum=1), v.location(), "cpus_per_process")
        if (v := view.get("cpus_per_process"))
        else 1
    )
    mem = parse_memory_mb(v) if (v := view.get("mem_per_process")) else None
    return ComponentSpec(
        name,
        command,
        env,
        offload,
        tp,
        pp,
        cpus,
        mem,
        view.location(),
        expert_parallel_size=_alias_int(view, ("expert_parallel_size", "ep")),
        expert_tensor_parallel_size=_alias_int(view, ("expert_tensor_parallel_size", "etp")),
        gpus_per_engine=_alias_int(view, ("gpus_per_engine",)),
    )


def _alias_int(view: View, keys: tuple[str, ...]) -> int | None:
    present = [k for k in keys if view.get(k) is not None]
    if len(present) > 1:
        raise view.require(present[1]).error(
            f"both {present[0]!r} and {present[1]!r} are given", hint="give one of them"
        )
    return view.require(present[0]).int(minimum=1) if present else None


def slurm_options(view: View | None) -> dict[str, str]:
    if view is None:
        return {}
    view.check_keys(SLURM_JOB_OPTIONS)
    out: dict[str, str] = {}
    for key, child in view.items():
        if key == "shared_paths":
            out[key] = shlex.join(_shared_paths(child))
            continue
        if isinstance(child.value, list):
            if any(isinstance(v, (list, dict)) for v in child.value):
                raise child.error("expected a list of strings")
            out[key] = shlex.join(str(v) for v in child.value)
        elif key == "shm_per_node":  # /dev/shm the job needs free per node (the preflight checks it): MB
            out[key] = str(parse_memory_mb(child))
        elif key == "time" and isinstance(child.value, int) and not isinstance(child.value, bool):
            out[key] = _time_minutes(child)
        elif isinstance(child.value, (str, int, bool)):
            out[key] = str(child.value).lower() if isinstance(child.value, bool) else str(child.value)
        else:
            raise child.error("expected a string")
        check_slurm_option(key, out[key], child.location())
    return out


def _time_minutes(view: View) -> str:
    """A number as `slurm.time`: minutes, as sbatch reads `--time=60`, written as given. A YAML 1.1 reader
    (OmegaConf) makes an unquoted `1:00:00` the number 3600, 60 hours to sbatch; hpcplace keeps such text
    as written, and refuses a number that could be one (60 or more) whose text it cannot see."""
    text = view.number_text()
    if text is not None and sbatch_time_ok(text):
        return text
    if text is not None or view.value < 60:
        return str(view.value)
    raise view.error(
        f"the time limit is the number {view.value}, from a file hpcplace cannot read back: sbatch "
        f"reads it as {view.value} minutes, and a YAML 1.1 reader (OmegaConf) also makes an unquoted "
        f"1:00:00 the number 3600, so hpcplace cannot tell which was written",
        hint='quote the time limit, e.g. time: "1:00:00" (one hour) or time: "60" (minutes)',
    )


def _shared_paths(view: View) -> list[str]:
    """`slurm.shared_paths: [/home, /gpfs]`: the prefixes every compute node mounts (hpcplace warns
    when the launcher, interpreter, working or run directory lies outside them)."""
    hint = "e.g. shared_paths: [/home, /gpfs] (absolute directories every compute node mounts)"
    if not isinstance(view.value, list) or not view.value:
        raise view.error(f"slurm.shared_paths must be a list of absolute paths, got {view.value!r}", hint=hint)
    out = []
    for item in view.value:
        if not isinstance(item, str) or not item.startswith("/") or "\0" in item:
            raise view.error(f"slurm.shared_paths: {item!r} is not an absolute path", hint=hint)
        out.append(item)
    return out


def shared_paths(slurm: dict[str, str]) -> tuple[str, ...]:
    """The plan's `slurm.shared_paths` (stored shell-joined, like every slurm option)."""
    return tuple(shlex.split(slurm.get("shared_paths", "")))


def check_slurm_option(key: str, value: str, location: SourceLocation | None) -> None:
    """What lowering and rendering would refuse, refused at plan time with the config location."""
    check_sbatch_text(value, f"slurm.{key}", location=location)
    if key == "job_name" and value and not NAME_RE.match(value):  # as the experiment's name, never silently changed
        raise SpecError(f"slurm.job_name {value!r} is not a job name", location=location, hint=NAME_HINT)
    if key == "time" and not sbatch_time_ok(value):
        raise SpecError(
            f"slurm.time {value!r} is not a Slurm time limit",
            location=location,
            hint="write e.g. 30, 4:00:00 or 2-00:00:00",
        )
    if key in ("signal_before_limit", "kill_wait", "requeue", "preflight"):
        error = job_option_problem(key, value)
        if error is not None:
            raise SpecError(error.message, location=location, hint=error.hint)
    if key == "extra_sbatch_args":
        problem = extra_args_problem(value)
        if problem:
            raise SpecError(
                f"slurm.extra_sbatch_args: {problem}",
                location=location,
                hint="write options as --name=value, e.g. [--reservation=rl]",
            )


_NATIVE_GROUP_KEYS = {
    "label",
    "partition",
    "nodes",
    "gpus_per_node",
    "gpu_type",
    "cpus_per_node",
    "mem_per_node",
    "constraint",
    "account",
    "qos",
    "hardware",
    "env",
    "ignore_hardware",
    "network",
    "topology",
}


def native_node_group(view: View) -> NodeGroup:
    view.check_keys(_NATIVE_GROUP_KEYS)
    label = check_name(view.require("label"), view.require("label").str(), "node group label")
    num_nodes = limits.nodes(view.require("nodes", "how many nodes").int(minimum=1), view.require("nodes").location())
    gpus = (
        per_node_counts(v, num_nodes, "gpus_per_node", limits.MAX_GPUS_PER_NODE)
        if (v := view.get("gpus_per_node"))
        else (0,) * num_nodes
    )
    hardware = None
    if view.get("hardware") is not None:
        hw = view.require("hardware")
        hw.check_keys({"type", "count", "gres"})
        gres = hw.get("gres")
        hardware = Hardware(
            check_name(hw.require("type"), hw.require("type").str(), "hardware type"),
            per_node_counts(hw.require("count", "per node"), num_nodes, "hardware.count", limits.MAX_HARDWARE_PER_NODE),
            None if gres is None or gres.value is None else check_name(gres, gres.str(), "GRES name"),
        )
        if not any(hardware.per_node):
            raise hw.require("count").error(
                "the hardware count is 0 on every node: the group would hold no device",
                hint="give the devices per node (count: 4), or remove the hardware block",
            )

    def opt_str(key: str) -> str | None:
        child = view.get(key)
        return None if child is None or child.value is None else child.str()

    gpu_type = opt_str("gpu_type")
    if gpu_type is not None:
        check_name(view.require("gpu_type"), gpu_type, "gpu_type")
        if not any(gpus):  # the group would silently be placed by nodes
            raise view.require("gpu_type").error(
                f"gpu_type {gpu_type!r} names GPUs, but the group has none (gpus_per_node is 0 or missing)",
                hint="set gpus_per_node (e.g. gpus_per_node: 8), or remove gpu_type",
            )
    partition = opt_str("partition") or label
    return NodeGroup(
        label=label,
        partition=partition,
        num_nodes=num_nodes,
        gpus_per_node=gpus,
        gpu_type=gpu_type,
        cpus_per_node=limits.cpus_per_node(v.int(minimum=1), v.location())
        if (v := view.get("cpus_per_node"))
        else None,
        mem_per_node_mb=parse_memory_mb(v) if (v := view.get("mem_per_node")) else None,
        constraint=opt_str("constraint"),
        account=opt_str("account"),
        qos=opt_str("qos"),
        hardware=hardware,
        ignore_hardware=v.bool() if (v := view.get("ignore_hardware")) else False,
        env=v.str_map() if (v := view.get("env")) else {},
        network=parse_network(v) if (v := view.get("network")) is not None and v.value is not None else None,
        topology=parse_topology(v) if (v := view.get("topology")) is not None and v.value is not None else None,
        location=view.location(),
    )


def parse_native(doc: YamlDocument) -> ExperimentSpec:
    root = doc.root()
    root.check_keys({"format", "name", "cluster", "components", "slurm", "launch", "container", "services"})
    name = check_name(root.require("name"), root.require("name").str(), "experiment name")
    cluster_view = root.require("cluster")
    cluster_view.check_keys({"node_groups", "component_placement"})
    groups_view = cluster_view.require("node_groups", "a list of node groups (Slurm partitions)")
    groups = tuple(native_node_group(g) for g in groups_view.elements())
    notes = [
        f"node group {g.label!r} ({g.location}) gives no partition: it asks Slurm for partition "
        f"{g.partition!r}, its label; add `partition:` if the cluster names it otherwise"
        for g, v in zip(groups, groups_view.elements())
        if v.get("partition") is None or v.require("partition").value is None
    ]
    cluster = build_cluster(groups, groups_view)
    placements = placement_entries(cluster_view.require("component_placement"))
    components: dict[str, ComponentSpec] = {}
    placed = {n for e in placements for n in e.components}
    comps_view = root.get("components")
    if comps_view is not None:
        for key, child in comps_view.items():
            if key not in placed:
                raise child.key_error(
                    f"component {key!r} has settings but no placement",
                    hint="add it to cluster.component_placement, or remove its settings",
                )
            components[key] = component_settings(child, key)
    mp = any(
        c.tensor_parallel_size or c.pipeline_parallel_size
        for c in components.values()
        if c.name in ("actor", "rollout")
    )
    slurm = root.get("slurm")
    if slurm is not None and isinstance(slurm.value, dict) and "nodes" in slurm.value:
        raise slurm.require("nodes").key_error(
            "slurm.nodes pins the node count of a ROLL config; a native config gives each node group its own",
            hint="set `nodes:` in cluster.node_groups (one count per group)",
        )
    return ExperimentSpec(
        name, cluster, placements, components, doc.path, "native", slurm_options(slurm), mp, notes=tuple(notes)
    )


def build_cluster(groups: tuple[NodeGroup, ...], view: View) -> Cluster:
    try:
        return Cluster(groups)
    except SpecError as exc:
        raise SpecError(exc.message, hint=exc.hint, location=exc.location or view.location()) from None
