"""Pieces shared by the foreign formats: the `hpcplace:` block and the `slurm:` facts block."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from hpcplace.config.cluster import NodeGroup
from hpcplace.config.network import Network, parse_network
from hpcplace.config.slurm_options import SLURM_JOB_OPTIONS
from hpcplace.config.spec import (
    ComponentSpec,
    check_name,
    component_settings,
    parse_memory_mb,
    slurm_options,
)
from hpcplace.config.topology import Topology, parse_topology
from hpcplace.config.yaml_source import View


@dataclass(frozen=True)
class SiteGpuCount:
    """GPUs per node of a partition as the live cluster reports them: RLinf and ROLL discover the count
    on the node at run time, so a config may leave it out, and Slurm needs it up front."""

    count: int | None  # None: the site cannot tell (`source` says why)
    source: str  # where the count was read, or why there is none
    fix: str | None = None  # the way out when it is not the count (a GPU type the partition lacks)


# (partition, or None for the cluster's default partition; GPU type or None) -> the count
SiteGpus = Callable[[str | None, str | None], SiteGpuCount]

SLURM_GROUP_KEYS = {
    "partition",
    "gpus_per_node",
    "gpu_type",
    "cpus_per_node",
    "mem_per_node",
    "constraint",
    "account",
    "qos",
    "hardware_gres",
    "network",
    "topology",
}


@dataclass(frozen=True)
class SlurmFacts:
    """What RLinf/ROLL/AReaL discover at run time but Slurm needs up front, for one node group."""

    partition: str | None
    gpus_per_node: int | None
    gpu_type: str | None
    cpus_per_node: int | None
    mem_per_node_mb: int | None
    constraint: str | None
    account: str | None
    qos: str | None
    hardware_gres: str | None = None  # the site's GRES name for the group's hardware (default: its type)
    network: Network | None = None  # the interface for collectives and Ray (hpcplace.config.network)
    topology: Topology | None = None  # blocks or leaf switches (hpcplace.config.topology)


def slurm_facts(view: View | None, label: str | None = None, base: SlurmFacts | None = None) -> SlurmFacts:
    """Facts from `slurm:` (defaults) overlaid with `slurm.node_groups.<label>:` when given."""
    facts = base or SlurmFacts(None, None, None, None, None, None, None, None)
    if view is None:
        return facts
    if label is not None:
        groups = view.get("node_groups")
        child = None
        if groups is not None:
            for key, candidate in groups.items():
                if str(key).lower() == label.lower():
                    child = candidate
        if child is None:
            return facts
        child.check_keys(SLURM_GROUP_KEYS)
        view = child

    def given(key: str) -> View | None:
        c = view.get(key)
        return None if c is None or c.value is None else c

    def opt_str(key: str, default: str | None) -> str | None:
        c = given(key)
        return default if c is None else c.str() if not isinstance(c.value, int) else str(c.value)

    def opt_int(key: str, default: int | None) -> int | None:
        c = given(key)
        return default if c is None else c.int(minimum=0)

    def opt_mem(default: int | None) -> int | None:
        c = given("mem_per_node")
        return default if c is None else parse_memory_mb(c)

    return SlurmFacts(
        opt_str("partition", facts.partition),
        opt_int("gpus_per_node", facts.gpus_per_node),
        opt_str("gpu_type", facts.gpu_type),
        opt_int("cpus_per_node", facts.cpus_per_node),
        opt_mem(facts.mem_per_node_mb),
        opt_str("constraint", facts.constraint),
        opt_str("account", facts.account),
        opt_str("qos", facts.qos),
        opt_str("hardware_gres", facts.hardware_gres),
        parse_network(c) if (c := given("network")) is not None else facts.network,
        parse_topology(c) if (c := given("topology")) is not None else facts.topology,
    )


def facts_node_group(label: str, facts: SlurmFacts, nodes: int, gpus_per_node: int, where: View) -> NodeGroup:
    """A node group of `nodes` alike nodes, each with `gpus_per_node` GPUs, on the `slurm:` facts' partition
    (what every foreign format's plain group is); `where` is the value it was sized from, for errors."""
    return NodeGroup(
        label=label,
        partition=facts.partition,
        num_nodes=nodes,
        gpus_per_node=(gpus_per_node,) * nodes,
        gpu_type=facts.gpu_type,
        cpus_per_node=facts.cpus_per_node,
        mem_per_node_mb=facts.mem_per_node_mb,
        constraint=facts.constraint,
        account=facts.account,
        qos=facts.qos,
        network=facts.network,
        topology=facts.topology,
        location=where.location(),
    )


SLURM_BLOCK_KEYS = SLURM_GROUP_KEYS | SLURM_JOB_OPTIONS | {"node_groups", "cpu_partition", "cpu_nodes"}


def slurm_job_options(view: View | None, extra: frozenset[str] = frozenset()) -> dict[str, str]:
    """The job-level options of a foreign format's `slurm:` block, after checking its keys: the
    shared ones plus `extra` (the format's own, e.g. ROLL's `nodes`)."""
    if view is None:
        return {}
    nodes = view.get("nodes")
    if nodes is not None and "nodes" not in extra:
        raise nodes.key_error(
            "slurm.nodes pins the node count of a ROLL config (derived there from the "
            "device mappings); this format states its node count itself",
            hint="set cluster.num_nodes (RLinf) or cluster.n_nodes (AReaL) instead",
        )
    view.check_keys(SLURM_BLOCK_KEYS | extra)
    sub = {k: v for k, v in view.mapping().items() if k in SLURM_JOB_OPTIONS}
    return slurm_options(View(view.doc, view.path, sub))


def hpcplace_block(root: View, placed: set[str], doc_path: str) -> tuple[str, dict[str, ComponentSpec]]:
    """The optional `hpcplace: {name, components: {...}}` block a foreign config may carry."""
    block = root.get("hpcplace")
    default_name = Path(doc_path).stem.replace(" ", "-") or "experiment"
    if block is None:
        return _safe_name(default_name), {}
    block.check_keys({"name", "components", "model_parallel", "framework_version"})  # framework_version.py
    name = (
        check_name(block.require("name"), block.require("name").str(), "experiment name")
        if block.get("name")
        else _safe_name(default_name)
    )
    components: dict[str, ComponentSpec] = {}
    comps = block.get("components")
    if comps is not None:
        for key, child in comps.items():
            if key not in placed:
                raise child.key_error(f"component {key!r} has settings but no placement")
            components[key] = component_settings(child, key)
    return name, components


def with_block_settings(framework: ComponentSpec, block: ComponentSpec) -> ComponentSpec:
    """A component's `hpcplace.components.<name>` settings (command, env, offload, CPUs, memory) over what the
    framework's own config gives it: its tensor/pipeline sizes stay the framework's, which decide the placement;
    its expert-parallel and engine sizes too, where the framework's config gives them."""
    return replace(
        block,
        tensor_parallel_size=framework.tensor_parallel_size,
        pipeline_parallel_size=framework.pipeline_parallel_size,
        expert_parallel_size=framework.expert_parallel_size or block.expert_parallel_size,
        expert_tensor_parallel_size=framework.expert_tensor_parallel_size or block.expert_tensor_parallel_size,
        gpus_per_engine=framework.gpus_per_engine or block.gpus_per_engine,
    )


def _safe_name(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "_.-" else "-" for c in name).strip("-.")
    return cleaned or "experiment"
