"""The Plan: the contract between the login node and the job, and its versioned JSON form.

plan.json keeps every process record on its own line (`{"rank": N, ...}`) so the in-job shim can
read exactly one line through the byte-offset index written beside it, instead of parsing the
whole file (see README, "plan.json schema").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from hpcplace.cluster import Cluster, NodeGroup
from hpcplace.launch import STEPS, LaunchSpec
from hpcplace.placement import Placement

SCHEMA = "hpcplace.plan/1"
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
    processes: tuple[Placement, ...]


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
    launch: LaunchSpec = STEPS

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
        "label": group.label, "partition": group.partition, "het_group": het_group,
        "num_nodes": group.num_nodes, "first_node_rank": first_node_rank,
        "gpus_per_node": list(group.gpus_per_node), "gpu_type": group.gpu_type,
        "cpus_per_node": group.cpus_per_node, "mem_per_node_mb": group.mem_per_node_mb,
        "constraint": group.constraint, "account": group.account, "qos": group.qos,
        "hardware": ({"type": group.hardware.type, "per_node": list(group.hardware.per_node)}
                     if group.hardware else None),
        "resource_kind": group.resource_kind, "env": dict(sorted(group.env.items())),
    }


def plan_header(plan: Plan) -> dict[str, object]:
    """Everything but the process records, as JSON-ready data."""
    cluster = plan.cluster
    return {
        "schema": SCHEMA,
        "name": plan.name,
        "source": {"path": plan.source, "format": plan.source_format},
        "node_groups": [_group_json(g, i, cluster.first_node_rank(i)) for i, g in enumerate(cluster.node_groups)],
        "collocation_groups": [
            {"name": g.name, "components": list(g.components), "phases": [list(p) for p in g.phases],
             "resource_type": g.resource_type,
             "devices": [{"node": n, "local_ranks": list(r)} for n, r in g.devices]}
            for g in plan.collocation_groups],
        "weight_sync": None if plan.weight_sync is None else {
            "mode": plan.weight_sync.mode, "actor_tp": plan.weight_sync.actor_tp,
            "actor_pp": plan.weight_sync.actor_pp, "rollout_tp": plan.weight_sync.rollout_tp,
            "rollout_stride": plan.weight_sync.rollout_stride,
            "actor_to_rollout": [[list(t) for t in targets] for targets in plan.weight_sync.actor_to_rollout]},
        "slurm": dict(sorted(plan.slurm.items())),
        "warnings": list(plan.warnings),
        # Only in ray mode (absent = steps): plans of the default mode stay as they were.
        **({"launch": plan.launch.to_json()} if plan.launch != STEPS else {}),
    }


def _component_header(comp: ComponentPlan) -> dict[str, object]:
    return {
        "name": comp.name, "world_size": comp.world_size, "node_groups": list(comp.node_groups),
        "resource_type": comp.resource_type, "command": list(comp.command),
        "env": dict(sorted(comp.env.items())), "offload": comp.offload,
        "tensor_parallel_size": comp.tensor_parallel_size, "pipeline_parallel_size": comp.pipeline_parallel_size,
        "cpus_per_process": comp.cpus_per_process, "mem_per_process_mb": comp.mem_per_process_mb,
        "collocation_group": comp.collocation_group,
    }


def process_json(p: Placement, _strings: dict[str, str] | None = None) -> str:
    """One process record as one compact JSON line (key order = RLinf's field order).

    Hand-formatted because plans reach 65k+ processes; strings go through json.dumps (cached)."""
    cache = _strings if _strings is not None else {}

    def s(value: str) -> str:
        out = cache.get(value)
        if out is None:
            out = cache[value] = json.dumps(value)
        return out

    visible = ",".join(s(v) for v in p.visible_accelerators)
    hw = ",".join(str(h) for h in p.local_hardware_ranks)
    return (f'{{"rank":{p.rank},"cluster_node_rank":{p.cluster_node_rank},'
            f'"placement_node_rank":{p.placement_node_rank},"local_accelerator_rank":{p.local_accelerator_rank},'
            f'"accelerator_type":{s(p.accelerator_type)},"local_rank":{p.local_rank},'
            f'"local_world_size":{p.local_world_size},"visible_accelerators":[{visible}],'
            f'"isolate_accelerator":{"true" if p.isolate_accelerator else "false"},'
            f'"local_hardware_ranks":[{hw}],"node_group_label":{s(p.node_group_label)},'
            f'"partition":{s(p.partition)},"het_group":{p.het_group},"group_node_index":{p.group_node_index},'
            f'"resource_type":{s(p.resource_type)}}}')


def plan_to_json(plan: Plan) -> str:
    """Deterministic text: a pretty header, then each component with one process per line."""
    header = plan_header(plan)
    dump = lambda v: json.dumps(v, sort_keys=False)  # noqa: E731
    lines = ["{"]
    for key, value in header.items():
        lines.append(f"  {json.dumps(key)}: {dump(value)},")
    lines.append('  "components": [')
    for ci, comp in enumerate(plan.components):
        head = _component_header(comp)
        lines.append("    {")
        for key, value in head.items():
            lines.append(f"      {json.dumps(key)}: {dump(value)},")
        lines.append('      "processes": [')
        procs = comp.processes
        strings: dict[str, str] = {}
        last = len(procs) - 1
        for i, p in enumerate(procs):
            lines.append("        " + process_json(p, strings) + ("," if i < last else ""))
        lines.append("      ]")
        lines.append("    }" + ("," if ci < len(plan.components) - 1 else ""))
    lines.append("  ]")
    lines.append("}")
    return "\n".join(lines) + "\n"
