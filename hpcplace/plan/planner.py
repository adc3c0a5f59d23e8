"""spec -> Plan: a pure expansion of every placement into per-process placements.

Also derives the model-parallel layout (collocated vs disaggregated, strided rollout, weight-sync
rank maps) and the collocation groups the runtime schedules turns over.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from pathlib import Path
from typing import TypeVar

from hpcplace.config import limits
from hpcplace.config.cluster import Cluster
from hpcplace.config.formats.common import SiteGpus
from hpcplace.config.rank_syntax import (
    RankMapPart,
    RankSyntaxError,
    SpreadLists,
    compress_ranks,
    parse_rank_map,
    plural,
)
from hpcplace.config.services import ServiceSpec
from hpcplace.config.spec import MULTI_AGENT, ExperimentSpec, PlacementEntry
from hpcplace.errors import PlanError, SpecError
from hpcplace.plan.placement import Placement, ResourceSpace, resource_space
from hpcplace.plan.plan import CollocationGroup, ComponentPlan, Plan, WeightSync
from hpcplace.plan.process_table import Processes, Slot, node_processes, place
from hpcplace.plan.topology import crossing_lines, place_on_fabric, size_problem


@dataclass(frozen=True)
class _Expanded:
    entry: PlacementEntry
    space: ResourceSpace
    lists: Sequence[Sequence[int]]


def plan_from_spec(spec: ExperimentSpec) -> Plan:
    """Expand a validated spec into the exact per-process Plan."""
    expanded: dict[str, _Expanded] = {}
    order: list[str] = []
    spaces: dict[tuple[str, ...] | None, ResourceSpace] = {}
    for entry in spec.placements:
        space = _space(spec, entry, spaces)
        lists = _resource_lists(entry, space, spec.source_format == "rlinf", spec.cluster)
        for name in entry.components:
            expanded[name] = _Expanded(entry, space, lists)
            order.append(name)
    for name, (per, stride) in spec.packed.items():
        if name in expanded and (per > 1 or stride > 1):
            exp = expanded[name]
            gpus = _contiguous(name, exp)
            if per > len(gpus):
                raise PlanError(
                    f"{name}: tensor-parallel size {per} is larger than its world size {len(gpus)} (its GPUs)",
                    location=exp.entry.location,
                    hint=f"give {name} at least {per} GPUs (RLinf asserts this)",
                )
            expanded[name] = replace(exp, lists=_packed(gpus[0], gpus[-1], per, stride, name, exp))
    if spec.placement_class == MULTI_AGENT:
        _check_multi_agent(spec, expanded)
    weight_sync = None
    if spec.model_parallel:
        expanded, weight_sync = _model_parallel(spec, expanded)
    if len(order) > limits.MAX_COMPONENTS:
        limits.check_cap(
            len(order),
            limits.MAX_COMPONENTS,
            "number of components",
            spec.placements[-1].location if spec.placements else None,
        )
    total = sum(len(expanded[name].lists) for name in order)
    if total > limits.MAX_PROCESSES:
        first = spec.placements[0] if spec.placements else None
        limits.processes(total, first.location if first else None, "number of processes in the plan")
    components = []
    services = {s.name: s for s in spec.services}
    for name in order:
        exp = expanded[name]
        settings = spec.component(name)
        try:
            processes = place(spec.cluster, exp.space, exp.lists, what=f"component {name!r}")
        except PlanError as exc:
            raise PlanError(exc.message, hint=exc.hint, location=exp.entry.location) from None
        if spec.source_format == "rlinf":
            _check_node_order(name, exp, processes)
        components.append(
            ComponentPlan(
                name=name,
                world_size=len(processes),
                node_groups=_groups_used(spec.cluster, processes),
                resource_type=_resource_type(processes),
                command=settings.command,
                env=settings.env,
                offload=settings.offload,
                tensor_parallel_size=settings.tensor_parallel_size or 1,
                pipeline_parallel_size=settings.pipeline_parallel_size or 1,
                cpus_per_process=settings.cpus_per_process,
                mem_per_process_mb=settings.mem_per_process_mb,
                collocation_group=None,
                processes=processes,
                spanning=exp.entry.spanning,
                service=services.get(name),
                expert_parallel_size=settings.expert_parallel_size or 1,
                expert_tensor_parallel_size=settings.expert_tensor_parallel_size,
                gpus_per_engine=settings.gpus_per_engine,
            )
        )
        if (problem := size_problem(components[-1])) is not None:
            raise PlanError(
                problem,
                location=settings.location or exp.entry.location,
                hint="give sizes that cut the component's GPUs into whole groups",
            )
    groups = collocation_groups(components)
    _check_services(components, groups, services)
    membership = {c: g.name for g in groups for c in g.components}
    components = [replace(c, collocation_group=membership.get(c.name)) for c in components]
    cluster, crossings = place_on_fabric(spec.cluster, components)
    return Plan(
        spec.name,
        spec.source,
        spec.source_format,
        cluster,
        tuple(components),
        groups,
        weight_sync,
        dict(spec.slurm),
        spec.notes + _warnings(spec, components) + _unsteered(spec) + tuple(crossing_lines(cluster, crossings)),
        spec.composed,
        spec.launch,
        spec.steer if spec.launch.steer else (),
        spec.framework_version,
        crossings,
    )


def plan_from_file(
    path: str | Path,
    *,
    format: str | None = None,
    overrides: Sequence[str] = (),
    site_gpus: SiteGpus | None = None,
    driver: Sequence[str] | None = None,
) -> Plan:
    """Load a config in any supported format and plan it (the CLI's `hpcplace plan`); `driver` is
    `--driver -- CMD...`, which the command formats (verl, ...) read their placement from."""
    from hpcplace.config.formats import load_spec

    return plan_from_spec(load_spec(path, format=format, overrides=overrides, site_gpus=site_gpus, driver=driver))


def _space(
    spec: ExperimentSpec, entry: PlacementEntry, cache: dict[tuple[str, ...] | None, ResourceSpace]
) -> ResourceSpace:
    key = None if entry.node_group is None else tuple(label.lower() for label in entry.node_group)
    if key not in cache:
        try:
            cache[key] = resource_space(spec.cluster, entry.node_group, rlinf_span=spec.source_format == "rlinf")
        except PlanError as exc:
            raise PlanError(
                f"components {', '.join(entry.components)}: {exc.message}",
                hint=exc.hint,
                location=entry.node_group_location or entry.location,
            ) from None
    return cache[key]


def space_text(cluster: Cluster, space: ResourceSpace) -> str:
    """What a placement string counts, for an out-of-range hint: "node group 'a800' has 16 GPUs
    (2 nodes x 8): ranks 0-15"."""
    per_group: dict[str, dict[int, int]] = {}
    bounds = space.node_bounds  # a node's resources are contiguous: count them per node, not one by one
    for start, end in pairwise(bounds):
        if end == start:  # an empty space: bounds (0, 0)
            continue
        node = space.node_of[start]
        counts = per_group.setdefault(cluster.nodes[node].group_label, {})
        counts[node] = counts.get(node, 0) + end - start
    kinds = sorted(set(space.type_of)) if space.kind == "hardware" else []
    noun = {"gpu": "GPU", "node": "node"}.get(space.kind) or "/".join(kinds) or "device"

    def shape(counts: dict[int, int]) -> str:
        n = len(counts)
        if space.kind == "node":
            return plural(n, "node")
        per = sorted(set(counts.values()))
        return (
            f"{plural(n, 'node')} x {per[0]}"
            if len(per) == 1
            else f"{plural(n, 'node')}: {', '.join(str(c) for c in counts.values())}"
        )

    total = plural(space.size, noun)
    if len(per_group) == 1:
        ((label, counts),) = per_group.items()
        who = f"node group {label!r} has {total}" + ("" if space.kind == "node" else f" ({shape(counts)})")
    else:
        who = (
            f"node groups {', '.join(repr(g) for g in per_group)} have {total} ("
            + ", ".join(f"{g}: {shape(c)}" for g, c in per_group.items())
            + ")"
        )
    ranks = {0: "", 1: "0"}.get(space.size, f"0-{space.size - 1}")  # compress_ranks(range(size))
    return f"{who}: {'rank' if space.size == 1 else 'ranks'} {ranks}; count from 0 within the selected node group(s)"


def _resource_lists(
    entry: PlacementEntry, space: ResourceSpace, rlinf: bool, cluster: Cluster
) -> Sequence[Sequence[int]]:
    if entry.resource_lists is not None:
        limits.processes(
            len(entry.resource_lists), entry.location, f"number of processes of {', '.join(entry.components)}"
        )
        return [list(r) for r in entry.resource_lists]
    assert entry.rank_map is not None
    where = f" ({', '.join(entry.node_group)})" if entry.node_group else ""
    try:
        parts = parse_rank_map(
            entry.rank_map,
            space.rank_span or space.size,
            resource_name=space.resource_name,
            any_first_process=rlinf,
            scope=None if space.rank_span else space_text(cluster, space),
        )
    except RankSyntaxError as exc:
        raise PlanError(
            f"placement {entry.rank_map!r} of {', '.join(entry.components)}{where}: {exc.message}",
            hint=exc.hint,
            location=entry.location_at(exc.offset),
        ) from None
    lists = SpreadLists(parts)  # = expand_rank_map(parts), computed on demand
    if space.rank_span is not None:  # nodes of a mixed selection: RLinf counts hardware, then places nodes
        beyond = [r for lst in lists for r in lst if r >= space.size]
        if beyond:
            raise PlanError(
                f"placement {entry.rank_map!r} of {', '.join(entry.components)}{where} reaches rank {max(beyond)}, "
                f"but the selection has {space.size} nodes: a selection that mixes groups with and without "
                f"accelerators is placed by nodes on RLinf, while its ranks (and `all` = 0-{space.rank_span - 1}) "
                "count each group's GPUs/hardware",
                location=entry.location,
                hint=f"use node ranks 0-{space.size - 1}, or place the GPU groups and the other groups in "
                "separate components",
            )
    return lists


def _check_node_order(name: str, exp: _Expanded, processes: Processes) -> None:
    """RLinf's placement strategies number a component's nodes in process-rank order and assert that
    the ranks go through cluster nodes in ascending node rank: listing node groups out of node-rank
    order (`node_group: b,a`, or interleaved groups) is refused there, so it is here."""
    for before, after in zip(processes.runs, processes.runs[1:]):
        if after.node.rank < before.node.rank:
            raise PlanError(
                f"component {name!r}: rank {after.first_rank} is on cluster node {after.node.rank} but rank "
                f"{after.first_rank - 1} before it is on node {before.node.rank}; RLinf requires a component's "
                'ranks to go through nodes in ascending node rank order ("Placements must be sorted by node_id")',
                location=exp.entry.location,
                hint="list the node groups of a multi-group placement in the order of their node ranks, or give "
                "the groups node ranks that follow that order",
            )


def _groups_used(cluster: Cluster, processes: Sequence[Placement]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for view in node_processes(processes):  # in order of first use, like the processes
        seen.setdefault(cluster.nodes[view.cluster_node_rank].group_label, None)
    return tuple(seen)


def _resource_type(processes: Sequence[Placement]) -> str:
    layouts = {id(v.slots): v.slots for v in node_processes(processes)}  # nodes share their slots tuples
    types = sorted({s.resource_type for slots in layouts.values() for s in slots})
    return types[0] if len(types) == 1 else ",".join(types)


# ---------------------------------------------------------------------------------------------
# RLinf's multi-agent placement (MultiAgentModelParallelComponentPlacement)


def _gpu_set(exp: _Expanded) -> set[tuple[tuple[str, ...], int]]:
    """GPUs as (node-group selection, rank): ranks of different selections are different GPUs."""
    return {(exp.space.labels, r) for lst in exp.lists for r in lst}


def _check_multi_agent(spec: ExperimentSpec, expanded: dict[str, _Expanded]) -> None:
    """RLinf's multi-agent checks: actor and reward on the same GPUs, every rollout engine inside
    them, the other components on GPUs no other of them uses, tp sizes that fit and divide."""
    actor = expanded["actor"]
    _contiguous("actor", actor)
    actor_gpus = _gpu_set(actor)
    if _gpu_set(expanded["reward"]) != actor_gpus:
        raise PlanError(
            "multi-agent placement: actor and reward must be placed on the same GPUs (RLinf asserts this)",
            location=expanded["reward"].entry.location,
            hint="e.g. `actor,reward: all`",
        )
    atp = spec.component("actor").tensor_parallel_size or 1
    rtp = spec.component("rollout").tensor_parallel_size or 1
    if atp > len(actor_gpus):
        raise PlanError(
            f"actor tensor_parallel_size {atp} exceeds its {len(actor_gpus)} GPUs", location=actor.entry.location
        )
    if atp > rtp and atp % rtp:
        raise PlanError(
            f"actor tensor_parallel_size {atp} is not divisible by rollout's {rtp} (RLinf asserts "
            "this for the collocated stride)",
            location=expanded["rollout"].entry.location,
        )
    exclusive: dict[tuple[tuple[str, ...], int], str] = {}
    for name, exp in expanded.items():
        gpus = _gpu_set(exp)
        if name.startswith("rollout"):
            if not gpus <= actor_gpus:
                raise PlanError(
                    f"multi-agent placement: {name}'s GPUs are not all among the actor's (RLinf "
                    "asserts every rollout engine is a subset of the actor's GPUs)",
                    location=exp.entry.location,
                    hint="place the engines on GPUs the actor uses",
                )
            own = spec.component(name)
            for size, what in (
                (own.tensor_parallel_size, "tensor_parallel_size"),
                (own.pipeline_parallel_size, "pipeline_parallel_size"),
            ):
                if size and len(gpus) % size:
                    raise PlanError(
                        f"{name}: its {len(gpus)} GPUs are not divisible by its {what} {size} (RLinf asserts this)",
                        location=exp.entry.location,
                    )
        if name in ("actor", "rollout", "reward", "inference"):
            continue
        for gpu in gpus:  # RLinf: exclusive components (engines, planners, sub-workers) never share a GPU
            if gpu in exclusive:
                raise PlanError(
                    f"multi-agent placement: {name} and {exclusive[gpu]} share GPU {gpu[1]} (RLinf: "
                    '"Resource Conflict", each exclusive component needs its own GPUs)',
                    location=exp.entry.location,
                    hint="give each engine its own GPU range",
                )
            exclusive[gpu] = name


# ---------------------------------------------------------------------------------------------
# model-parallel placement (RLinf's ModelParallelComponentPlacement)


def _contiguous(name: str, exp: _Expanded) -> list[int]:
    lists = exp.lists
    ranks = lists.resource_ranks() if isinstance(lists, SpreadLists) else sorted({r for lst in lists for r in lst})
    if exp.space.kind != "gpu":
        raise PlanError(f"model-parallel component {name!r} must be placed on GPUs", location=exp.entry.location)
    if ranks != list(range(ranks[0], ranks[-1] + 1)):
        raise PlanError(
            f"model-parallel component {name!r} must use contiguous GPUs, got {compress_ranks(ranks)}",
            location=exp.entry.location,
            hint="give one range such as `0-15`",
        )
    return ranks


def _model_parallel(spec: ExperimentSpec, expanded: dict[str, _Expanded]) -> tuple[dict[str, _Expanded], WeightSync]:
    for needed in ("actor", "rollout"):
        if needed not in expanded:
            raise SpecError(
                f"model-parallel placement (tensor/pipeline sizes given) needs a {needed!r} component",
                hint="place both actor and rollout, or drop tensor_parallel_size",
            )
    actor, rollout = expanded["actor"], expanded["rollout"]
    if actor.space.labels != rollout.space.labels:
        raise PlanError(
            "model-parallel actor and rollout must use the same node group(s)", location=rollout.entry.location
        )
    a_gpus, r_gpus = _contiguous("actor", actor), _contiguous("rollout", rollout)
    inference = expanded.get("inference")
    i_gpus = _contiguous("inference", inference) if inference else []
    a_set, r_set = set(a_gpus), set(r_gpus)
    # GPU ranks of different node-group selections index different GPUs: never overlapping.
    i_set = set(i_gpus) if inference and inference.space.labels == actor.space.labels else set()
    atp = spec.component("actor").tensor_parallel_size or 1
    app = spec.component("actor").pipeline_parallel_size or 1
    rtp = spec.component("rollout").tensor_parallel_size or 1
    rpp = spec.component("rollout").pipeline_parallel_size or 1
    if len(a_gpus) % (atp * app):
        size = atp * app
        below, above = len(a_gpus) // size * size, (len(a_gpus) // size + 1) * size
        raise PlanError(
            f"actor has {len(a_gpus)} GPUs, not a multiple of tp*pp = {atp}*{app}",
            location=actor.entry.location,
            hint=f"place the actor on a multiple of {size} GPUs ("
            + (f"{below} or {above}" if below else f"{above}")
            + "), or change the actor's tensor/pipeline-parallel sizes",
        )
    out = dict(expanded)
    if a_gpus == r_gpus:
        mode = "collocated"
        if inference:
            raise PlanError(
                "collocated actor/rollout cannot have a separate inference component",
                location=inference.entry.location,
                hint="remove inference or give it its own GPUs",
            )
        if atp % rtp and rtp % atp:
            raise PlanError(
                f"actor tensor_parallel_size {atp} and rollout's {rtp}: one must divide the other",
                location=rollout.entry.location,
                hint="weight sync splits or merges whole tensor shards",
            )
        stride = atp // rtp if atp > rtp else 1
        rollout_lists = _packed(a_gpus[0], a_gpus[-1], rtp, stride, "rollout", rollout)
    elif a_set.isdisjoint(r_set) and a_set.isdisjoint(i_set) and r_set.isdisjoint(i_set):
        mode = "disaggregated"
        stride = 1
        rollout_lists = _packed(r_gpus[0], r_gpus[-1], rtp * rpp, 1, "rollout", rollout)
        if inference:
            itp = spec.component("inference").tensor_parallel_size or atp  # RLinf: inference tp defaults to actor's
            if itp > len(i_gpus):
                raise PlanError(
                    f"inference tensor-parallel size {itp} is larger than the inference world size "
                    f"{len(i_gpus)} (its GPUs)",
                    location=inference.entry.location,
                    hint="give inference at least tensor_model_parallel_size GPUs (RLinf asserts this)",
                )
            out["inference"] = replace(inference, lists=_one_each(i_gpus))
    else:
        raise PlanError(
            "model-parallel placement must be collocated (actor GPUs == rollout GPUs) or disaggregated "
            f"(actor, rollout, inference pairwise disjoint); got actor {compress_ranks(a_gpus)}, "
            f"rollout {compress_ranks(r_gpus)}" + (f", inference {compress_ranks(i_gpus)}" if inference else ""),
            location=rollout.entry.location,
            hint="for other layouts (hybrid mode) drop tensor_parallel_size from actor/rollout",
        )
    if atp > len(a_gpus):
        raise PlanError(f"actor tensor_parallel_size {atp} exceeds its {len(a_gpus)} GPUs")
    if rtp > len(r_gpus):
        raise PlanError(f"rollout tensor_parallel_size {rtp} exceeds its {len(r_gpus)} GPUs")
    out["actor"] = replace(actor, lists=_one_each(a_gpus))
    out["rollout"] = replace(rollout, lists=rollout_lists)
    if mode == "collocated":
        owner = {g: i for i, g in enumerate(a_gpus)}
        targets: list[list[tuple[int, int]]] = [[] for _ in a_gpus]
        for dp, gpus in enumerate(rollout_lists):
            for tp, g in enumerate(gpus):
                targets[owner[g]].append((dp, tp))
    else:
        targets = _disaggregated_targets(len(a_gpus), atp, app, len(rollout_lists), rtp, rollout.entry)
    sync = WeightSync(mode, atp, app, rtp, stride, tuple(tuple(t) for t in targets))
    return out, sync


def _one_each(gpus: list[int]) -> SpreadLists:
    """[[g] for g in gpus] for contiguous gpus, as one rank-map part (planned without the lists)."""
    return SpreadLists((RankMapPart(gpus[0], gpus[-1], 0, len(gpus) - 1),))


def _packed(start: int, end: int, per: int, stride: int, name: str, exp: _Expanded) -> list[list[int]]:
    from hpcplace.plan.strategies import Packed

    try:
        return Packed(start, end, per, stride).resource_lists(exp.space)
    except PlanError as exc:
        raise PlanError(f"{name}: {exc.message}", hint=exc.hint, location=exp.entry.location) from None


def _disaggregated_targets(
    actor_world: int, atp: int, app: int, rollout_dp: int, rtp: int, entry: PlacementEntry
) -> list[list[tuple[int, int]]]:
    """Actor rank (Megatron order: tp fastest, then dp, then pp) -> rollout (dp, tp) shards it feeds.

    Rollout replicas are spread round-robin over actor data-parallel groups; tensor shards are
    split or merged by the tp ratio (one must divide the other)."""
    if atp % rtp and rtp % atp:
        raise PlanError(
            f"actor tp {atp} and rollout tp {rtp}: one must divide the other for weight sync", location=entry.location
        )
    adp = actor_world // (atp * app)
    out: list[list[tuple[int, int]]] = []
    for a in range(actor_world):
        ta, da = a % atp, (a // atp) % adp
        shards = [ta // (atp // rtp)] if atp >= rtp else [ta * (rtp // atp) + k for k in range(rtp // atp)]
        out.append([(d, t) for d in range(da, rollout_dp, adp) for t in shards])
    return out


# ---------------------------------------------------------------------------------------------
# collocation groups


def collocation_groups(components: Sequence[ComponentPlan]) -> tuple[CollocationGroup, ...]:
    """Components that hold the same device (GPU or hardware) on a node, joined transitively.

    Node-kind processes (CPU workers, the `node` label) own no device and are never collocated.
    `phases` packs members greedily, in plan order, into turns of pairwise-disjoint device sets.

    Nodes of one layout share one device set (a frozenset per slots tuple), so the per-node tests
    below are memoised on the sets' identities: a 16,384-node plan compares a handful of sets."""
    # per component: cluster node rank -> the (resource type, local rank) devices it holds there
    devices = {comp.name: _held_per_node(comp, _devices_of) for comp in components}
    disjoint = _Disjoint()
    parent = {c.name: c.name for c in components}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    on_node: dict[int, list[tuple[str, frozenset[tuple[str, int]]]]] = {}
    for comp in components:
        for n, held in devices[comp.name].items():
            others = on_node.setdefault(n, [])
            for other, other_held in others:
                if not disjoint(held, other_held):
                    parent[find(comp.name)] = find(other)
            others.append((comp.name, held))
    members: dict[str, list[str]] = {}
    for comp in components:
        members.setdefault(find(comp.name), []).append(comp.name)
    groups: list[CollocationGroup] = []
    for names in members.values():
        if len(names) < 2:
            continue
        # a phase: its members' device maps; a member joins the first phase none of whose members
        # holds any of its devices on any node (= disjoint from the union of their devices there)
        phases: list[tuple[list[str], list[dict[int, frozenset[tuple[str, int]]]]]] = []
        for name in names:
            mine = devices[name]
            for phase_names, maps in phases:
                if all(disjoint(held, other[n]) for other in maps for n, held in mine.items() if n in other):
                    phase_names.append(name)
                    maps.append(mine)
                    break
            else:
                phases.append(([name], [mine]))
        held_on: dict[int, list[frozenset[tuple[str, int]]]] = {}
        for name in names:
            for n, held in devices[name].items():
                held_on.setdefault(n, []).append(held)
        locals_of: dict[tuple[int, ...], tuple[int, ...]] = {}  # ids of the sets on a node -> local ranks
        rtypes: set[str] = set()
        node_devices = []
        for n in sorted(held_on):
            sets = held_on[n]
            key = tuple(map(id, sets))
            local = locals_of.get(key)
            if local is None:
                union = frozenset().union(*sets)
                rtypes.update(rtype for rtype, _local in union)
                local = locals_of[key] = tuple(sorted({loc for _rtype, loc in union}))
            node_devices.append((n, local))
        groups.append(
            CollocationGroup(
                name=f"colloc-{len(groups)}",
                components=tuple(names),
                phases=tuple(tuple(p) for p, _ in phases),
                devices=tuple(node_devices),
                resource_type=",".join(sorted(rtypes)),
            )
        )
    return tuple(groups)


_Held = TypeVar("_Held", frozenset[tuple[str, int]], frozenset[int])


def _held_per_node(comp: ComponentPlan, held_by: Callable[[tuple[Slot, ...]], _Held]) -> dict[int, _Held]:
    """Cluster node rank -> what `held_by` says the component's processes there hold (nodes without
    any left out), one shared set per slots tuple (nodes of one layout share theirs)."""
    owned: dict[int, _Held] = {}
    per_layout: dict[int, _Held] = {}  # id of a slots tuple -> what it holds
    views = node_processes(comp.processes)  # keeps every slots tuple alive: their ids stay theirs
    for view in views:
        held = per_layout.get(id(view.slots))
        if held is None:
            held = per_layout[id(view.slots)] = held_by(view.slots)
        if held:
            n = view.cluster_node_rank
            owned[n] = owned[n] | held if n in owned else held
    return owned


def _devices_of(slots: tuple[Slot, ...]) -> frozenset[tuple[str, int]]:
    """The devices (resource type, local rank) a node's processes hold: node-kind processes none."""
    return frozenset(
        (s.resource_type, local) for s in slots if s.resource_type != "node" for local in s.local_hardware_ranks
    )


def _isolated_of(slots: tuple[Slot, ...]) -> frozenset[int]:
    """The local accelerators a node's processes hold for themselves (isolate_accelerator)."""
    return frozenset(r for s in slots if s.isolate_accelerator for r in s.local_hardware_ranks)


class _Disjoint:
    """`a.isdisjoint(b)`, remembered per pair of sets (by identity; the caller keeps them alive)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[int, int], bool] = {}

    def __call__(self, a: frozenset[tuple[str, int]], b: frozenset[tuple[str, int]]) -> bool:
        key = (id(a), id(b))
        got = self._seen.get(key)
        if got is None:
            got = self._seen[key] = a.isdisjoint(b)
        return got


def _unsteered(spec: ExperimentSpec) -> tuple[str, ...]:
    """`launch.steer: false` on a plan whose framework's requests would be steered: say what that leaves to Ray."""
    if not spec.steer or spec.launch.steer:
        return ()
    return (
        "launch.steer is false: the framework's own Ray requests name no node ("
        + "; ".join(sorted({r.what for r in spec.steer}))
        + "), so Ray chooses where they go; the job only checks what it can (docs/formats)",
    )


_LISTED = 8  # nodes a warning names before it counts the rest (a 16,384-node job must not print them all)


def _check_services(
    components: Sequence[ComponentPlan], groups: Sequence[CollocationGroup], services: Mapping[str, ServiceSpec]
) -> None:
    """A service owns its GPUs (it never takes turns), and a fixed port holds one replica per node."""
    for g in groups:
        shared = [c for c in g.components if c in services]
        if shared:
            others = [c for c in g.components if c != shared[0]]
            raise PlanError(
                f"service {shared[0]!r} shares GPUs with {', '.join(map(repr, others))}: a service keeps its GPUs "
                "for the whole job (it never offloads to take turns)",
                location=services[shared[0]].location,
                hint="give the service GPUs of its own (another node group, or other GPUs of the node)",
            )
    for comp in components:
        service = services.get(comp.name)
        if service is None or service.port is None:
            continue
        nodes = [p.cluster_node_rank for p in comp.processes]
        twice = sorted({n for n in nodes if nodes.count(n) > 1})
        if twice:
            raise PlanError(
                f"service {comp.name!r} has the fixed port {service.port}, but {nodes.count(twice[0])} of its "
                f"replicas run on one node (cluster node {twice[0]}): they cannot all listen on it",
                location=service.location,
                hint="use port: auto (a free port per replica), or place one replica per node",
            )


def _warnings(spec: ExperimentSpec, components: Sequence[ComponentPlan]) -> tuple[str, ...]:
    cluster = spec.cluster
    isolated = [_held_per_node(c, _isolated_of) for c in components]
    used_nodes = {v.cluster_node_rank for c in components for v in node_processes(c.processes)}
    used_counts: dict[tuple[int, ...], int] = {}  # ids of a node's isolated sets -> GPUs they cover

    def used_gpus(n: int) -> int:
        sets = [held[n] for held in isolated if n in held]
        key = tuple(map(id, sets))
        count = used_counts.get(key)
        if count is None:
            count = used_counts[key] = len(frozenset().union(*sets))
        return count

    out = []
    for gi, group in enumerate(cluster.node_groups):
        nodes = cluster.group_nodes(gi)
        idle = [n.rank for n in nodes if n.rank not in used_nodes]
        if len(idle) == group.num_nodes:
            out.append(f"node group {group.label!r} runs no process; it is still allocated")
        elif idle:
            shown = f"{idle}" if len(idle) <= _LISTED else f"{idle[:_LISTED]} ... ({len(idle)} nodes)"
            out.append(f"node group {group.label!r}: nodes {shown} run no process; they are still allocated")
        mostly_idle = {
            n.rank: n.gpus - used
            for n in nodes
            if n.rank in used_nodes and n.gpus
            for used in (used_gpus(n.rank),)
            if 2 * (n.gpus - used) > n.gpus
        }
        if mostly_idle:
            listed = [
                f"node {r} ({idle} of {cluster.nodes[r].gpus})" for r, idle in list(mostly_idle.items())[:_LISTED]
            ]
            more = f" ... ({len(mostly_idle)} nodes)" if len(mostly_idle) > _LISTED else ""
            out.append(
                f"node group {group.label!r}: most GPUs of {', '.join(listed)}{more} run no process; the job "
                "holds every GPU of its nodes (they show as idle in the map)"
            )
        hw = group.hardware
        if hw is not None and len(set(hw.per_node)) > 1:
            fewest = min(hw.per_node)
            ranks = cluster.node_ranks(gi)
            out.append(
                f"node group {group.label!r}: {hw.type} per node differs ("
                + ", ".join(f"node {r}: {c}" for r, c in zip(ranks, hw.per_node))
                + f"); hardware ranks count over the nodes in order, and the het component asks every node "
                f"for the fewest ({f'GRES {hw.type}:{fewest}' if fewest else 'no GRES'}): Slurm does not "
                "check the other robots"
            )
    return tuple(out)
