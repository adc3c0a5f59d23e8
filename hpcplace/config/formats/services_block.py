"""The `services:` block beside any input format (hpcplace.config.services): each service also a component of
the spec, placed on its node group (one of the config's, or one `slurm.node_groups` describes beside a framework's
command), and every reference to a service checked."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from hpcplace.config.cluster import Cluster
from hpcplace.config.formats.common import facts_node_group, slurm_facts
from hpcplace.config.rank_syntax import parse_rank_map
from hpcplace.config.services import ServiceSpec, check_references, parse_services
from hpcplace.config.spec import ComponentSpec, ExperimentSpec, PlacementEntry
from hpcplace.config.yaml_source import View
from hpcplace.errors import HpcplaceError, SpecError
from hpcplace.runtime.services import OWN_PORT, references


def with_services(spec: ExperimentSpec, view: View | None, slurm: View | None = None) -> ExperimentSpec:
    """`spec` with the `services:` block: each service also a component placed on its node group (one of the
    config's, or one `slurm.node_groups.<label>` describes beside a framework's command, sized for the
    service), every reference to a service in the driver, the commands and their env checked."""
    services = parse_services(view)
    if not services:
        return spec
    assert view is not None
    known = {g.label for g in spec.cluster.node_groups}
    spec = _with_service_groups(spec, services, view, slurm)
    added = {g.label for g in spec.cluster.node_groups} - known  # sized by with_services for its services alone
    groups = {g.label: g for g in spec.cluster.node_groups}
    placed = {n for e in spec.placements for n in e.components}
    placements = list(spec.placements)
    components = dict(spec.components)
    for s in services:
        where = view.require(s.name)
        if s.name in placed or s.name in components:
            raise where.key_error(
                f"service {s.name!r} has the name of a component of the {spec.source_format} config",
                hint="give the service another name",
            )
        group = groups.get(s.node_group)
        if group is None:
            raise where.require("node_group").error(
                f"service {s.name!r}: unknown node group {s.node_group!r}",
                hint=f"node groups of this job: {', '.join(groups)} (slurm.node_groups adds one)",
            )
        if s.placement is None and s.gpus == 0 and any(group.gpus_per_node):
            raise where.key_error(
                f"service {s.name!r} asks for no GPU, but node group {s.node_group!r} counts its GPUs",
                hint="give it gpus: N, or put it on a node group without GPUs (a CPU partition)",
            )
        if s.gpus > 0 and not any(group.gpus_per_node):
            raise where.require("gpus").error(
                f"service {s.name!r} asks for {s.gpus} GPU(s) per replica on node group {s.node_group!r}, "
                "which has none",
                hint="put it on a node group with GPUs, or remove gpus",
            )
        rank_map = s.rank_map()
        if s.placement is None and s.gpus > 0:  # after the GPUs the group's other processes hold
            first = _first_free_gpu(placements, group.label, spec.cluster.node_groups[0].label)
            capacity = sum(group.gpus_per_node)  # one count per node
            if first and first + s.replicas * s.gpus > capacity and group.label not in added:
                raise where.require("gpus").error(
                    f"service {s.name!r} needs {s.replicas * s.gpus} GPU(s) on node group {s.node_group!r}, and its "
                    f"other processes hold GPUs 0-{first - 1} of its {capacity}: a service keeps GPUs of its own",
                    hint="give the service a node group of its own (slurm.node_groups), or more GPUs to this one",
                )
            rank_map = s.rank_map(first)
        placements.append(PlacementEntry((s.name,), (s.node_group,), rank_map, location=where.location()))
        components[s.name] = ComponentSpec(
            s.name, s.command, dict(s.env), cpus_per_process=s.cpus_per_replica, location=where.location()
        )
    by_name = {s.name: s for s in services}
    _check_all_references(spec, by_name, components)
    notes = tuple(
        f"service {s.name!r} has an automatic port but its command has no {OWN_PORT}: it must read "
        "$HPCPLACE_SERVICE_PORT to listen where the job looks for it"
        for s in services
        if s.port is None and not any(OWN_PORT in word for word in s.command)
    )
    return replace(
        spec, placements=tuple(placements), components=components, services=services, notes=spec.notes + notes
    )


def _first_free_gpu(placements: list[PlacementEntry], label: str, first_label: str) -> int:
    """The first GPU slot of node group `label` after those its placements so far use (0 when none does)."""
    end = 0
    for entry in placements:
        if (entry.node_group or (first_label,)) != (label,):
            continue
        if entry.resource_lists is not None:
            end = max([end, *(max(slots) + 1 for slots in entry.resource_lists if slots)])
        elif entry.rank_map is not None:
            try:
                parts = parse_rank_map(entry.rank_map, 1 << 20)
            except HpcplaceError:  # the planner reports a bad placement string, located
                continue
            end = max([end, *(p.resource_end + 1 for p in parts)])
    return end


def _check_all_references(
    spec: ExperimentSpec, services: Mapping[str, ServiceSpec], components: Mapping[str, Any]
) -> None:
    check_references(spec.launch.driver, services, "launch.driver")
    check_references(spec.launch.env.values(), services, "launch.env")
    for name, comp in components.items():
        what = f"service {name!r}" if name in services else f"component {name!r}"
        try:
            check_references(comp.command, services, f"{what}: command")
            check_references(comp.env.values(), services, f"{what}: env")
        except SpecError as exc:
            raise SpecError(exc.message, hint=exc.hint, location=comp.location) from None
        service = services.get(name)
        used = {r.service for word in [*comp.command, *comp.env.values()] for r in references(word)} & set(services)
        for other in sorted(used - set(service.after if service else used)):
            raise SpecError(
                f"service {name!r} uses the address of {other!r}"
                + (", its own" if other == name else " but does not wait for it"),
                location=comp.location,
                hint=f"its own port is {OWN_PORT}"
                if other == name
                else f"add after: [{other}] (a service starts only once those it names are ready)",
            )


def _with_service_groups(
    spec: ExperimentSpec, services: tuple[ServiceSpec, ...], view: View, slurm: View | None
) -> ExperimentSpec:
    """Node groups of `slurm.node_groups` that only services use: added to the cluster, with as many nodes as
    the services' placements reach."""
    known = {g.label for g in spec.cluster.node_groups}
    declared = slurm.get("node_groups") if slurm is not None else None
    names = (
        {str(k) for k, _ in declared.items()} if declared is not None and isinstance(declared.value, dict) else set()
    )
    added = []
    for label in dict.fromkeys(s.node_group for s in services):
        if label in known or label not in names:
            continue
        facts = slurm_facts(slurm, label, slurm_facts(slurm))
        gpn = facts.gpus_per_node or 0
        if not gpn:  # the job's GPU type (slurm.gpu_type) is no CPU group's
            facts = replace(facts, gpu_type=None)
        reach = 0
        for s in (s for s in services if s.node_group == label):
            try:
                parts = parse_rank_map(s.rank_map(), 1 << 20)
            except HpcplaceError:  # the planner reports a bad placement string, located
                continue
            resources = max(p.resource_end for p in parts) + 1  # GPUs of a GPU group, nodes of a CPU group
            reach = max(reach, -(-resources // gpn) if gpn else resources)
        where = view.require(next(s.name for s in services if s.node_group == label)).require("node_group")
        added.append(facts_node_group(label, facts, max(reach, 1), gpn, where))
    if not added:
        return spec
    return replace(spec, cluster=Cluster(spec.cluster.node_groups + tuple(added)))
