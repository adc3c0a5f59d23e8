"""Between a config and the tuning search: the search problem a spec + profile pose, the winner written
back into the input's own format, and the check that every proposal plans.

The rewrite is a targeted text edit: only the `cluster.component_placement` block of the input file is
replaced (one key per component: `name: {node_group: label, placement: "a-b[:processes]"}`); every other
line, comments included, stays as written. Comments inside the replaced block are lost.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from hpcplace.config.spec import MODEL_PARALLEL, ExperimentSpec
from hpcplace.config.topology import BLOCK, TREE
from hpcplace.errors import SourceLocation, SpecError
from hpcplace.plan.plan import Plan
from hpcplace.plan.process_table import node_processes
from hpcplace.tune.tune import Candidate, Component, Group, Problem, Rules
from hpcplace.tune.tune_profile import Profile

REWRITABLE = ("native", "rlinf")
_MP_NAMES = ("actor", "rollout", "inference")


@dataclass(frozen=True)
class Shape:
    """How a component's processes map onto its resources in the input config (kept by the rewrite)."""

    per_process: int  # resources per process (>= 1)
    per_resource: int  # processes per resource (>= 1); one of the two is 1
    plain: bool  # written as a plain range: the planner derives the processes (RLinf model-parallel)


@dataclass(frozen=True)
class Setup:
    problem: Problem
    shapes: dict[str, Shape]
    followers: dict[str, str]  # component -> the component it is placed with
    write_label: dict[str, str | None]  # group label -> label written in the config (None: no node_group)
    dropped: tuple[str, ...]  # components a collocated RLinf model-parallel placement leaves out


def _shape(spec: ExperimentSpec, plan: Plan, name: str) -> Shape:
    comp = plan.component(name)
    if (spec.model_parallel and name in _MP_NAMES) or name in spec.packed:
        return Shape(1, 1, True)
    resources = sum(len(s.local_hardware_ranks) or 1 for v in node_processes(comp.processes) for s in v.slots)
    distinct = len(
        {
            (v.cluster_node_rank, r)
            for v in node_processes(comp.processes)
            for s in v.slots
            for r in (s.local_hardware_ranks or (0,))
        }
    )
    if comp.world_size >= distinct:
        return Shape(1, max(1, comp.world_size // max(1, distinct)), False)
    return Shape(max(1, resources // max(1, comp.world_size)), 1, False)


def build_setup(spec: ExperimentSpec, plan: Plan, profile: Profile, objective: str = "time") -> Setup:
    """The search problem: the config's node groups and components, the profile's costs."""
    if spec.source_format not in REWRITABLE:
        raise SpecError(
            f"hpcplace tune rewrites RLinf and native configs; this one is {spec.source_format}",
            hint="convert the placement to the native format (see README), or tune an RLinf config",
        )
    placed = [c.name for c in plan.components]
    where = SourceLocation(profile.path, 1, 1)
    for name in placed:
        if name not in profile.components:
            raise SpecError(
                f"component {name!r} of {spec.source} has no costs in the profile",
                location=where,
                hint=f"add `{name}: {{seconds: {{TYPE: {{COUNT: SECONDS}}}}}}` or "
                f"`{name}: {{with: OTHER}}` under components",
            )
    for name, cp in profile.components.items():
        if name not in placed:
            raise SpecError(
                f"the profile has costs for {name!r}, which {spec.source} does not place",
                location=cp.location,
                hint="components placed: " + ", ".join(placed),
            )
    declared_rlinf = spec.source_format == "rlinf" and any(
        not g.label.startswith("default") for g in spec.cluster.node_groups
    )
    groups = []
    write_label: dict[str, str | None] = {}
    for g in spec.cluster.node_groups:
        if spec.source_format == "rlinf" and g.label.startswith("default"):
            if declared_rlinf:
                continue  # RLinf has no label for nodes outside its declared groups
            write_label[g.label] = None
        else:
            write_label[g.label] = g.label
        per = g.resources_per_node()
        kind = g.resource_kind
        keys = (g.label, g.resource_type) + (("cpu",) if kind == "node" else ())
        memory = next((profile.memory_gb[k] for k in keys if k in profile.memory_gb), None)
        uniform = per[0] if len(set(per)) == 1 else None
        fabric = g.topology.size if g.topology is not None and g.topology.kind in (BLOCK, TREE) else None
        unit = fabric * uniform if fabric is not None and uniform else None
        groups.append(Group(g.label, kind, keys, sum(per), uniform, memory, unit))
    shapes = {name: _shape(spec, plan, name) for name in placed}
    chain = []
    for name in profile.workflow:
        cp = profile.components[name]
        # RLinf model-parallel: actor counts are multiples of tp*pp, rollout is packed by its tp*pp; Megatron's
        # expert parallelism needs multiples of ETP*EP*PP, engines whole engines (a unit fits a block or crosses)
        comp = plan.component(name)
        pp = comp.pipeline_parallel_size
        mp = cp.model_parallel or math.lcm(
            comp.tensor_parallel_size * pp, comp.expert_group_gpus * pp, comp.gpus_per_engine or 1
        )
        unit = mp if shapes[name].plain else math.lcm(mp, shapes[name].per_process)
        # a process's own resources: an RLinf engine packed by its tp holds them all, a model-parallel rank one
        process = (
            (spec.packed[name][0] if name in spec.packed else 1) if shapes[name].plain else shapes[name].per_process
        )
        chain.append(Component(name, unit, cp, process))
    rules = Rules()
    if spec.model_parallel and spec.placement_class in (None, MODEL_PARALLEL):
        rules = Rules(same_group=(("actor", "rollout"),), all_or_apart=tuple(n for n in _MP_NAMES if n in placed))
    followers = {n: cp.with_component for n, cp in profile.components.items() if cp.with_component}
    problem = Problem(
        tuple(groups), tuple(chain), profile.batches, profile.intra_gbps, profile.inter_gbps, rules, objective
    )
    dropped = ("inference",) if rules.all_or_apart and "inference" in placed else ()
    return Setup(problem, shapes, followers, write_label, dropped)


def placement_lines(setup: Setup, cand: Candidate, indent: str) -> list[str]:
    """The new `component_placement:` block, one key per component."""
    out = [f"{indent}component_placement:"]
    stage_of = {m: s for s in cand.stages for m in s.members}
    for follower, target in setup.followers.items():
        stage_of[follower] = stage_of[target]
    names = [m for s in cand.stages for m in s.members]
    names += [f for f in setup.followers if f not in names]
    for name in names:
        stage = stage_of[name]
        if name in setup.dropped and len(stage.members) > 1 and "actor" in stage.members:
            out.append(f"{indent}  # {name}: collocated with actor, which computes it (RLinf's collocated mode)")
            continue
        shape = setup.shapes[name]
        first, last = stage.start, stage.start + stage.count - 1
        text = f"{first}-{last}" if last > first else f"{first}"
        if not shape.plain and shape.per_process > 1:
            text += f":0-{stage.count // shape.per_process - 1}"
        elif not shape.plain and shape.per_resource > 1:
            text += f":0-{stage.count * shape.per_resource - 1}"
        label = setup.write_label[stage.group]
        value = (
            json.dumps(text) if label is None else f"{{node_group: {json.dumps(label)}, placement: {json.dumps(text)}}}"
        )
        out.append(f"{indent}  {name}: {value}")
    return out


def rewrite(text: str, path: str, setup: Setup, cand: Candidate) -> str:
    """The input file with only its `cluster.component_placement` block replaced."""
    root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    key_node = value_node = None
    if isinstance(root, yaml.MappingNode):
        for k, v in root.value:
            if k.value == "cluster" and isinstance(v, yaml.MappingNode):
                for k2, v2 in v.value:
                    if k2.value == "component_placement":
                        key_node, value_node = k2, v2
    if key_node is None or value_node is None:
        raise SpecError(
            f"{path} has no cluster.component_placement of its own to rewrite",
            location=SourceLocation(path, 1, 1),
            hint="with Hydra `defaults:`, tune the file that holds the placement",
        )
    end = value_node.end_mark
    if isinstance(value_node, yaml.MappingNode) and value_node.flow_style is False and value_node.value:
        end = value_node.value[-1][1].end_mark  # the last value: comments after it stay
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    start_at = offsets[key_node.start_mark.line] + key_node.start_mark.column
    end_at = offsets[end.line] + end.column
    indent = " " * key_node.start_mark.column
    block = "\n".join(placement_lines(setup, cand, indent))[len(indent) :]
    return text[:start_at] + block + text[end_at:]


def plan_text(text: str, like: str, *, format: str | None, overrides: Sequence[str]) -> Plan:
    """Plan a rewritten config as `hpcplace plan` would (written next to the input, for Hydra's
    relative `defaults:`; removed afterwards)."""
    from hpcplace.plan.planner import plan_from_file
    from hpcplace.slurm.render import check_renders

    folder = Path(like).resolve().parent
    fd, tmp = tempfile.mkstemp(prefix=".hpcplace-tune-", suffix=".yaml", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        plan = plan_from_file(tmp, format=format, overrides=overrides)
        check_renders(plan)
        return plan
    finally:
        os.unlink(tmp)
