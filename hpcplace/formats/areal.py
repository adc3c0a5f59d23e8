"""AReaL configs: an allocation mode like `sglang[rollout]:d8p1t1|fsdp[actor]:d8p1t1` (`|` colocate
on the same GPUs, `+` disaggregate onto the next GPUs) and per-component
`scheduling_strategy: {type: colocation, target: actor}` (AReaL's spelling), checked for agreement."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from hpcplace import limits
from hpcplace.cluster import NodeGroup
from hpcplace.formats.common import hpcplace_block, slurm_facts, slurm_job_options
from hpcplace.spec import ComponentSpec, ExperimentSpec, PlacementEntry, build_cluster, check_name
from hpcplace.yaml_source import View, YamlDocument

INFERENCE_BACKENDS = frozenset({"sglang", "vllm"})
_MEMBER = re.compile(r"^(?:(?P<backend>[a-z][a-z0-9_]*)(?:\[(?P<name>[^\]]+)\])?[:.])?(?P<dims>(?:[a-z]\d+)+)$")
_DIM = re.compile(r"([a-z])(\d+)")
_HINT = "e.g. `sglang[rollout]:d8p1t1|fsdp[actor]:d8p1t1` (| colocate, + disaggregate)"


@dataclass(frozen=True)
class Member:
    name: str
    backend: str
    dp: int
    pp: int
    tp: int
    cp: int
    offset: int  # character offset in the allocation string

    @property
    def gpus(self) -> int:
        return self.dp * self.pp * self.tp * self.cp

    @property
    def is_inference(self) -> bool:
        return self.backend in INFERENCE_BACKENDS


def parse_allocation_mode(view: View) -> list[list[Member]]:
    """Groups (disaggregated, in GPU order) of members that share GPUs."""
    text = view.str()
    groups: list[list[Member]] = []
    offset = 0
    for group_text in text.split("+"):
        members: list[Member] = []
        inner = offset
        for member_text in group_text.split("|"):
            stripped = member_text.strip()
            lead = inner + len(member_text) - len(member_text.lstrip())
            m = _MEMBER.match(stripped)
            if not m:
                raise view.error(f"invalid allocation {stripped!r}", offset=lead, hint=_HINT)
            dims: dict[str, int] = {}
            for letter, number in _DIM.findall(m.group("dims")):
                if letter not in "dptce" or letter in dims:
                    raise view.error(f"invalid or repeated dimension {letter!r} in {stripped!r}", offset=lead,
                                     hint="dimensions: d (data), p (pipeline), t (tensor), c (context), e (expert)")
                if len(number) > 9 or int(number) > limits.MAX_PROCESSES:
                    raise view.error(f"dimension {letter}{number} is larger than {limits.MAX_PROCESSES}", offset=lead)
                if int(number) < 1:
                    raise view.error(f"dimension {letter}{number} must be >= 1", offset=lead)
                dims[letter] = int(number)
            backend = (m.group("backend") or "fsdp").lower()
            name = m.group("name") or ("rollout" if backend in INFERENCE_BACKENDS else "actor")
            members.append(Member(name.strip(), backend, dims.get("d", 1), dims.get("p", 1), dims.get("t", 1),
                                  dims.get("c", 1), lead))
            inner += len(member_text) + 1
        sizes = {m.gpus for m in members}
        if len(sizes) > 1:
            raise view.error("colocated allocations must use the same number of GPUs: "
                             + ", ".join(f"{m.name}={m.gpus}" for m in members), offset=members[0].offset)
        groups.append(members)
        offset += len(group_text) + 1
    names = [m.name for g in groups for m in g]
    for n in names:
        if names.count(n) > 1:
            raise view.error(f"component {n!r} appears twice in the allocation mode")
    return groups


def parse_areal(doc: YamlDocument) -> ExperimentSpec:
    root = doc.root()
    mode_view = root.require("allocation_mode")
    groups = parse_allocation_mode(mode_view)
    cluster_view = root.require("cluster")
    n_nodes = limits.nodes(cluster_view.require("n_nodes").int(minimum=1), cluster_view.require("n_nodes").location(),
                           "cluster.n_nodes")
    gpn = limits.gpus_per_node(cluster_view.require("n_gpus_per_node").int(minimum=1),
                               cluster_view.require("n_gpus_per_node").location(), "cluster.n_gpus_per_node")
    need = sum(g[0].gpus for g in groups)
    if need > n_nodes * gpn:
        raise mode_view.error(f"the allocation needs {need} GPUs but the cluster has {n_nodes}x{gpn} = {n_nodes * gpn}",
                              hint="raise cluster.n_nodes or shrink the allocation")
    slurm_view = root.get("slurm")
    facts = slurm_facts(slurm_view)
    if facts.partition is None:
        raise root.error("the Slurm partition is unknown", hint="add `slurm: {partition: NAME}`")
    cluster = build_cluster((NodeGroup(
        label="default", partition=facts.partition, num_nodes=n_nodes, gpus_per_node=(gpn,) * n_nodes,
        gpu_type=facts.gpu_type, cpus_per_node=facts.cpus_per_node, mem_per_node_mb=facts.mem_per_node_mb,
        constraint=facts.constraint, account=facts.account, qos=facts.qos, location=cluster_view.location()),),
        cluster_view)
    group_of = {m.name: i for i, g in enumerate(groups) for m in g}
    _check_scheduling(root, group_of)
    entries: list[PlacementEntry] = []
    start = 0
    settings: dict[str, ComponentSpec] = {}
    for members in groups:
        size = members[0].gpus
        for m in members:
            check_name(mode_view, m.name, "component name")
            per = m.tp * m.pp * m.cp if m.is_inference else 1
            lists = tuple(tuple(range(start + i * per, start + (i + 1) * per)) for i in range(size // per))
            entries.append(PlacementEntry((m.name,), None, None, lists, mode_view.location(m.offset)))
            settings[m.name] = ComponentSpec(m.name, tensor_parallel_size=m.tp, pipeline_parallel_size=m.pp)
        start += size
    placed = set(group_of)
    name, given = hpcplace_block(root, placed, doc.path)
    for n, spec in given.items():
        base = settings[n]
        for label in ("tensor_parallel_size", "pipeline_parallel_size"):
            mine, theirs = getattr(spec, label), getattr(base, label)
            if mine is not None and mine != theirs:
                raise mode_view.error(f"hpcplace.components.{n}.{label} = {mine} conflicts with the allocation "
                                      f"mode's {theirs}")
        settings[n] = replace(spec, tensor_parallel_size=base.tensor_parallel_size,
                              pipeline_parallel_size=base.pipeline_parallel_size)
    model_parallel = "actor" in settings and "rollout" in settings
    if model_parallel and (settings["rollout"].pipeline_parallel_size or 1) > 1 and \
            group_of["actor"] == group_of["rollout"]:
        raise mode_view.error("colocated rollout with pipeline parallelism is not supported",
                              hint="use p1 for the rollout engine when it shares the actor's GPUs")
    return ExperimentSpec(name, cluster, tuple(entries), settings, doc.path, "areal", slurm_job_options(slurm_view),
                          model_parallel)


def _check_scheduling(root: View, group_of: dict[str, int]) -> None:
    for name in group_of:
        section = root.get(name)
        strategy = section.get("scheduling_strategy") if section is not None and isinstance(section.value, dict) \
            else None
        if strategy is None or strategy.value is None:
            continue
        kind = str(strategy.require("type").value).lower()
        target_view = strategy.get("target")
        if kind in ("colocation", "collocation"):
            if target_view is None:
                raise strategy.error("scheduling_strategy colocation needs a target", hint="e.g. target: actor")
            target = str(target_view.value)
            if target not in group_of:
                raise target_view.error(f"colocation target {target!r} is not in the allocation mode")
            if group_of[target] != group_of[name]:
                raise target_view.error(
                    f"{name} is scheduled in colocation with {target}, but the allocation mode places them on "
                    "different GPUs ('+')", hint="join them with '|' in allocation_mode, or drop the strategy")
        elif kind in ("separation", "default", "none"):
            others = [n for n, g in group_of.items() if g == group_of[name] and n != name]
            if kind == "separation" and others:
                raise strategy.error(f"{name} asks for separation but the allocation mode colocates it with "
                                     f"{', '.join(others)} ('|')")
        else:
            raise strategy.require("type").error(f"unknown scheduling_strategy type {kind!r}",
                                                 hint="AReaL uses `colocation` (or `separation`)")
