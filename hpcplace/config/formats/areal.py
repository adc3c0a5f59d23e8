"""AReaL configs: an allocation mode like `sglang[rollout]:d8p1t1|fsdp[actor]:d8p1t1` (`|` colocate
on the same GPUs, `+` disaggregate onto the next GPUs) and per-component
`scheduling_strategy: {type: colocation, target: actor}` (AReaL's spelling), checked for agreement;
each placed engine's `scheduling_spec[0]` (image, container_type, mount, env_vars) read as AReaL's Slurm
launcher uses it: the image the node group runs in, and the engine's environment. Planned as the AReaL
version that runs the config (framework_version.py): before 1.0.3, bare dimensions (`d4p1t1`) were a
training allocation whose backend AReaL chose, and engines had no `backend:` field."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from hpcplace.config import limits
from hpcplace.config.container import Container, Mount, check_image, parse_container_block, parse_mount
from hpcplace.config.formats.common import facts_node_group, hpcplace_block, slurm_facts, slurm_job_options
from hpcplace.config.framework_version import (
    AREAL_ARCHON,
    AREAL_ENGINE_BACKEND,
    AREAL_EXPLICIT_BACKEND,
    AREAL_SCHEDULING,
    FrameworkVersion,
    PlannedVersion,
    container_note,
    resolve_version,
)
from hpcplace.config.spec import ComponentSpec, ExperimentSpec, PlacementEntry, build_cluster, check_name
from hpcplace.config.yaml_source import View, YamlDocument, did_you_mean
from hpcplace.errors import SpecError

INFERENCE_BACKENDS = frozenset({"sglang", "vllm"})
TRAIN_BACKENDS = frozenset({"fsdp", "megatron", "archon"})
_HEAD = re.compile(r"^(?:(?P<backend>[a-z][a-z0-9_]*)?(?:\[(?P<name>[^\]]+)\])?[:.])?(?P<rest>.*)$", re.S)
_DIMS = re.compile(r"^(?:[a-z]\d+)+$")
_DIM = re.compile(r"([a-z])(\d+)")
_HINT = (
    "e.g. `sglang:d4t2`, `fsdp:d8`, `megatron:(attn:d4p4t2|ffn:d2p4e4)`; in the legacy allocation_mode "
    "`sglang[rollout]:d8p1t1|fsdp[actor]:d8p1t1` (| colocate, + disaggregate)"
)


@dataclass(frozen=True)
class Member:
    name: str
    backend: str
    dp: int
    pp: int
    tp: int
    cp: int
    offset: int  # character offset in the allocation string
    # Expert parallelism (areal/api/alloc_mode.py ParallelStrategy): `e` of a training allocation, or of the
    # ffn part of the MoE syntax; the expert tensor-parallel size is the ffn part's `t`, else 1 (AReaL's
    # default, passed to Megatron as is: not the attention's t)
    ep: int = 1
    etp: int = 1

    @property
    def gpus(self) -> int:
        return self.dp * self.pp * self.tp * self.cp

    @property
    def is_inference(self) -> bool:
        return self.backend in INFERENCE_BACKENDS


def _split_top(text: str, sep: str) -> list[tuple[str, int]]:
    """Split on `sep` outside parentheses; (piece, offset) pairs. `ffn:` pieces rejoin their `attn:` part
    (AReaL's MoE syntax may omit the parentheses: `megatron:attn:d4t2|ffn:d2e4`)."""
    out: list[tuple[str, int]] = []
    depth, start = 0, 0
    for i, ch in enumerate(text + sep):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif (
            ch == sep and depth <= 0 and (i == len(text) or sep != "|" or not text[i + 1 :].lstrip().startswith("ffn:"))
        ):
            out.append((text[start:i], start))
            start = i + 1
    return out


def _dims(view: View, text: str, lead: int, allowed: str, what: str, whole: str) -> dict[str, int]:
    compact = "".join(text.split())
    if not _DIMS.match(compact):
        detail = "" if text.strip() == whole else f" ({what} dimensions {text.strip()!r})"
        raise view.error(f"invalid allocation {whole!r}{detail}", offset=lead, hint=_HINT)
    dims: dict[str, int] = {}
    for letter, number in _DIM.findall(compact):
        if letter not in allowed or letter in dims:
            raise view.error(
                f"invalid or repeated dimension {letter!r} in {text.strip()!r}",
                offset=lead,
                hint=f"{what} dimensions: "
                + ", ".join(allowed)
                + " (d data, p pipeline, t tensor, c context, e expert)",
            )
        if len(number) > 9 or int(number) > limits.MAX_PROCESSES:
            raise view.error(f"dimension {letter}{number} is larger than {limits.MAX_PROCESSES}", offset=lead)
        if int(number) < 1:
            raise view.error(f"dimension {letter}{number} must be >= 1", offset=lead)
        dims[letter] = int(number)
    return dims


def parse_member(
    view: View,
    text: str,
    lead: int,
    default_name: str | None = None,
    version: FrameworkVersion | None = None,
    notes: list[str] | None = None,
) -> Member:
    """One allocation: `backend[name]:dims`, `backend:dims`, or MoE `backend:(attn:..|ffn:..)`. Bare
    `dims`, `[name]:dims` and `(attn:..|ffn:..)` are refused as AReaL >= 1.0.3 refuses them; for an older
    `version` they are a training allocation with the backend that AReaL chose (a warning in `notes`)."""
    stripped = text.strip()
    lead += len(text) - len(text.lstrip())
    m = _HEAD.match(stripped)
    if m is None or not m.group("rest").strip():
        raise view.error(f"invalid allocation {stripped!r}", offset=lead, hint=_HINT)
    backend = (m.group("backend") or "").lower()
    rest = m.group("rest").strip()
    if (m.group("backend") or m.group("name")) and stripped[m.start("rest") - 1] == ".":
        fixed = stripped[: m.start("rest") - 1] + ":" + stripped[m.start("rest") :]
        raise view.error(
            f"allocation {stripped!r}: a dot after the backend is AReaL's grammar before 0.4.1; AReaL "
            "0.4.1 and later refuse it (inclusionAI/AReaL cd0003db0, PR #565)",
            offset=lead,
            hint=f"write a colon: {fixed}",
        )
    if backend in ("attn", "ffn"):  # bare MoE section without a backend prefix
        backend, rest = "", stripped
    if backend and backend not in INFERENCE_BACKENDS | TRAIN_BACKENDS:
        raise view.error(
            f"unknown backend {backend!r} in {stripped!r}",
            offset=lead,
            hint="inference: sglang, vllm; training: fsdp, megatron, archon",
        )
    if not backend and not re.fullmatch(r"\(.*\)|([a-z]\d+)+", rest):
        raise view.error(f"invalid allocation {stripped!r}", offset=lead, hint=_HINT)
    if backend == "archon" and not AREAL_ARCHON.applies(version):
        assert version is not None  # applies() is true without a version
        raise view.error(
            f"unknown backend 'archon' in {stripped!r} for {version.describe()}: AReaL >= "
            f"{AREAL_ARCHON.since} added it ({AREAL_ARCHON.upstream})",
            offset=lead,
            hint="that AReaL's training backends: fsdp, megatron",
        )
    chosen = not backend  # AReaL < 1.0.3 chose the backend of a bare training allocation
    if chosen and AREAL_EXPLICIT_BACKEND.applies(version):  # AReaL >= 1.0.3 (api/alloc_mode.py) refuses it
        raise view.error(
            f"allocation {stripped!r} names no backend: AReaL requires it explicitly (bare "
            "parallelism dimensions without a backend prefix; auto-backend selection is no longer "
            "supported)",
            offset=lead,
            hint=AREAL_EXPLICIT_BACKEND.hint(
                f"write the backend first, e.g. fsdp:{rest} or megatron:{rest} for training, "
                f"sglang:{rest} for inference"
            ),
        )
    inner = rest[1:-1] if rest.startswith("(") and rest.endswith(")") else rest
    if inner.lstrip().startswith("attn:"):
        if backend in INFERENCE_BACKENDS or backend == "fsdp":
            raise view.error(f"the MoE (attn|ffn) syntax needs megatron or archon, not {backend!r}", offset=lead)
        parts = [(piece, 0) for piece in inner.split("|")]
        if len(parts) != 2 or not parts[0][0].strip().startswith("attn:") or not parts[1][0].strip().startswith("ffn:"):
            raise view.error(
                f"invalid MoE allocation {stripped!r}", offset=lead, hint="write megatron:(attn:<dims>|ffn:<dims>)"
            )
        attn = _dims(view, parts[0][0].strip()[5:], lead, "cdtp", "attn", stripped)
        ffn = _dims(view, parts[1][0].strip()[4:], lead, "detp", "ffn", stripped)
        world = attn.get("d", 1) * attn.get("p", 1) * attn.get("t", 1) * attn.get("c", 1)
        if ffn.get("p", 1) != attn.get("p", 1):
            raise view.error(
                f"MoE allocation {stripped!r}: pipeline size differs between attn "
                f"(p{attn.get('p', 1)}) and ffn (p{ffn.get('p', 1)})",
                offset=lead,
                hint="AReaL requires the same p for attn and ffn",
            )
        ffn_rest = ffn.get("p", 1) * ffn.get("t", 1) * ffn.get("e", 1)
        ffn_world = ffn["d"] * ffn_rest if "d" in ffn else None
        if (ffn_world is not None and ffn_world != world) or world % ffn_rest:
            raise view.error(
                f"MoE allocation {stripped!r}: attn uses {world} GPUs but ffn "
                + (f"uses {ffn_world}" if ffn_world is not None else f"p*t*e = {ffn_rest} does not divide it"),
                offset=lead,
                hint="attn d*p*t*c must equal ffn d*p*t*e",
            )
        dims = {
            "d": attn.get("d", 1),
            "p": attn.get("p", 1),
            "t": attn.get("t", 1),
            "c": attn.get("c", 1),
            "e": ffn.get("e", 1),
            "etp": ffn.get("t", 1),
        }
        backend = backend or "megatron"  # AReaL < 1.0.3: a bare (attn|ffn) allocation is megatron's
    else:
        dims = _dims(
            view, rest, lead, "dtp" if backend in INFERENCE_BACKENDS else "dptce", backend or "training", stripped
        )
        if backend == "fsdp" and m.group("backend") and (dims.get("p", 1) > 1 or dims.get("e", 1) > 1):
            raise view.error(
                f"{stripped!r}: FSDP supports only data, tensor and context parallelism",
                offset=lead,
                hint="use megatron or archon for pipeline or expert parallelism",
            )
        world = dims.get("d", 1) * dims.get("p", 1) * dims.get("t", 1) * dims.get("c", 1)
        if world % (dims.get("p", 1) * dims.get("e", 1)):
            raise view.error(
                f"allocation {stripped!r}: expert parallelism e{dims['e']} x pipeline p{dims.get('p', 1)} does not "
                f"divide its {world} GPUs (AReaL asserts world size % (p x expert t x e) == 0; the expert tensor "
                "size is 1 here)",
                offset=lead,
                hint="make d*p*t*c a multiple of p*e, or give the experts their own layout: "
                "megatron:(attn:<dims>|ffn:<dims>)",
            )
    if not backend:  # AReaL < 1.0.3 (ModelAllocation / train_dims_only): megatron for p or e > 1
        backend = "megatron" if dims.get("p", 1) > 1 or dims.get("e", 1) > 1 else "fsdp"
    if chosen and version is not None and notes is not None:
        explicit = f"{backend}:{rest}" if not m.group("name") else f"{backend}[{m.group('name')}]:{rest}"
        notes.append(
            f"allocation {stripped!r} names no backend: planned with {backend}, the backend AReaL chose for it; "
            + AREAL_EXPLICIT_BACKEND.warning(version, f"newer AReaL refuses it: write {explicit}")
        )
    name = (m.group("name") or default_name or ("rollout" if backend in INFERENCE_BACKENDS else "actor")).strip()
    return Member(
        name,
        backend,
        dims.get("d", 1),
        dims.get("p", 1),
        dims.get("t", 1),
        dims.get("c", 1),
        lead,
        ep=dims.get("e", 1),
        etp=dims.get("etp", 1),
    )


def parse_allocation_mode(
    view: View, version: FrameworkVersion | None = None, notes: list[str] | None = None
) -> list[list[Member]]:
    """Legacy `allocation_mode`: groups (disaggregated, in GPU order) of members that share GPUs."""
    text = view.str()
    groups: list[list[Member]] = []
    for group_text, offset in _split_top(text, "+"):
        members = [
            parse_member(view, member_text, offset + inner, version=version, notes=notes)
            for member_text, inner in _split_top(group_text, "|")
        ]
        sizes = {m.gpus for m in members}
        if len(sizes) > 1:
            raise view.error(
                "colocated allocations must use the same number of GPUs: "
                + ", ".join(f"{m.name}={m.gpus}" for m in members),
                offset=members[0].offset,
            )
        groups.append(members)
    names = [m.name for g in groups for m in g]
    for n in names:
        if names.count(n) > 1:
            raise view.error(f"component {n!r} appears twice in the allocation mode")
    return groups


# Engines of AReaL's current format, in the order its trainers create them (and hand out GPUs).
ENGINES = ("actor", "critic", "ref", "teacher", "rollout")


def _engines(root: View) -> list[tuple[str, View]]:
    """Top-level engine sections that carry AReaL's per-engine `backend:` field."""
    out = []
    for name in ENGINES:
        section = root.get(name)
        if section is not None and isinstance(section.value, dict) and "backend" in section.value:
            out.append((name, section))
    return out


def _groups_from_backends(
    root: View, engines: list[tuple[str, View]], notes: list[str]
) -> list[list[tuple[Member, View]]]:
    """AReaL >= 1.0: each engine's `backend:`; `scheduling_strategy: {type: colocation, target: X}` shares
    X's GPUs, every other engine takes the next GPUs (creation order: actor, critic, ref, teacher, rollout)."""
    sections = dict(engines)
    actor = sections.get("actor")
    members: dict[str, tuple[Member, View]] = {}
    for name, section in engines:
        bview = section.require("backend").deref()
        if isinstance(bview.value, str) and not bview.value.strip() and name in ("critic", "ref") and actor:
            bview = actor.require("backend").deref()  # AReaL: an empty critic/ref backend inherits the actor's
        if name == "ref" and "rollout" in sections and actor is not None and _kl_ctl(actor) == 0:
            notes.append("ref: not planned — actor.kl_ctl is 0, so AReaL's RL trainer creates no reference model")
            continue
        text = bview.str()
        if "+" in text:
            raise bview.error(
                f"{name}.backend holds several allocations ({text!r})",
                hint="one allocation per engine, e.g. actor.backend: fsdp:d4, rollout.backend: sglang:d4",
            )
        members[name] = (parse_member(bview, text, 0, default_name=name), bview)
    groups: list[list[tuple[Member, View]]] = []
    where: dict[str, int] = {}
    pending = list(members)
    for _ in range(len(pending) + 1):
        progressed = False
        for name in list(pending):
            target = _colocation_target(sections[name])
            if target is None:
                where[name] = len(groups)
                groups.append([members[name]])
            else:
                tname, tview = target
                if tname not in members:
                    raise tview.error(
                        f"{name} is scheduled in colocation with {tname!r}, which is not a placed engine",
                        hint="targets: " + ", ".join(n for n in members if n != name),
                    )
                if tname not in where:
                    continue
                where[name] = where[tname]
                groups[where[tname]].append(members[name])
                host = groups[where[tname]][0][0]
                if members[name][0].gpus != host.gpus:
                    raise members[name][1].error(
                        f"{name} uses {members[name][0].gpus} GPUs but is colocated with {host.name}, which uses "
                        f"{host.gpus}",
                        hint="colocated engines must use the same number of GPUs",
                    )
            pending.remove(name)
            progressed = True
        if not pending:
            break
        if not progressed:
            raise sections[pending[0]].error(
                "scheduling_strategy colocation targets form a cycle: " + ", ".join(pending)
            )
    return groups


def _kl_ctl(actor: View) -> float:
    view = actor.get("kl_ctl")
    value = view.deref().value if view is not None else 0.1  # AReaL's default
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.1


def _colocation_target(section: View) -> tuple[str, View] | None:
    strategy = section.get("scheduling_strategy")
    if strategy is None or strategy.deref().value is None:
        return None
    strategy = strategy.deref()
    kind = str(strategy.require("type").deref().value).lower()
    if kind in ("separation", "default", "none"):
        return None
    if kind not in ("colocation", "collocation"):
        raise strategy.require("type").error(
            f"unknown scheduling_strategy type {kind!r}", hint="AReaL uses `colocation` or `separation`"
        )
    target = strategy.get("target")
    if target is None or target.deref().value in (None, ""):
        raise strategy.error("scheduling_strategy colocation needs a target", hint="e.g. target: actor")
    return str(target.deref().value), target


def parse_areal(doc: YamlDocument) -> ExperimentSpec:
    root = doc.root()
    notes: list[str] = []
    version = resolve_version("areal", root, notes)
    engines = _engines(root)
    legacy = root.get("allocation_mode")
    if engines and not AREAL_ENGINE_BACKEND.applies(version):
        assert version is not None  # applies() is true without a version
        raise (
            engines[0][1]
            .require("backend")
            .key_error(
                f"{engines[0][0]}.backend: AReaL {version.version} has no per-engine `backend:` field, its config "
                f"refuses the key (planned as {version.describe()}; AReaL >= {AREAL_ENGINE_BACKEND.since}: "
                f"{AREAL_ENGINE_BACKEND.upstream})",
                hint="for that AReaL write the top-level allocation_mode instead, e.g. "
                "`allocation_mode: sglang:d4+fsdp:d4`; or, if a newer AReaL runs the config, state it: "
                '`hpcplace: {framework_version: "1.0.3"}`',
            )
        )
    if not AREAL_SCHEDULING.applies(version):
        _refuse_scheduling_keys(root, version)
    if engines:
        groups = _groups_from_backends(root, engines, notes)
        if legacy is not None and legacy.value:
            notes.append("allocation_mode is ignored: AReaL's per-engine `backend:` fields decide the placement")
        mode_view = engines[0][1].require("backend")
    else:
        mode_view = root.require("allocation_mode", "or per-engine `backend:` fields such as actor.backend")
        groups = [[(m, mode_view) for m in g] for g in parse_allocation_mode(mode_view, version, notes)]
        _check_scheduling(root, {m.name: i for i, g in enumerate(groups) for m, _ in g})
    cluster_view = root.require("cluster")
    n_nodes = limits.nodes(
        cluster_view.require("n_nodes").int(minimum=1), cluster_view.require("n_nodes").location(), "cluster.n_nodes"
    )
    gpn_view = cluster_view.require("n_gpus_per_node")
    if gpn_view.deref().value == 0:
        raise gpn_view.error(
            "cluster.n_gpus_per_node is 0 (AReaL's CPU-only template); hpcplace places engines on GPUs",
            hint="set the GPU count of the nodes, e.g. --set cluster.n_gpus_per_node=8",
        )
    gpn = limits.gpus_per_node(gpn_view.int(minimum=1), gpn_view.location(), "cluster.n_gpus_per_node")
    need = sum(g[0][0].gpus for g in groups)
    if need > n_nodes * gpn:
        raise mode_view.error(
            f"the allocation needs {need} GPUs but the cluster has {n_nodes}x{gpn} = {n_nodes * gpn}",
            hint="raise cluster.n_nodes or cluster.n_gpus_per_node, shrink the allocation, or "
            "share GPUs with `scheduling_strategy: {type: colocation, target: actor}` "
            "(AReaL's local scheduler silently reuses GPUs round-robin; a Slurm job cannot)",
        )
    slurm_view = root.get("slurm")
    facts = slurm_facts(slurm_view)
    cluster = build_cluster(
        (facts_node_group("default", facts, n_nodes, gpn, cluster_view),),
        cluster_view,
    )
    group_of = {m.name: i for i, g in enumerate(groups) for m, _ in g}
    entries: list[PlacementEntry] = []
    start = 0
    settings: dict[str, ComponentSpec] = {}
    experts: dict[str, Member] = {}
    for members in groups:
        size = members[0][0].gpus
        for m, view in members:
            check_name(view, m.name, "component name")
            per = m.tp * m.pp * m.cp if m.is_inference else 1
            lists = tuple(tuple(range(start + i * per, start + (i + 1) * per)) for i in range(size // per))
            entries.append(PlacementEntry((m.name,), None, None, lists, view.location(m.offset)))
            settings[m.name] = ComponentSpec(
                m.name,
                tensor_parallel_size=m.tp,
                pipeline_parallel_size=m.pp,
                # the fabric check's expert-parallel groups: ETP x EP consecutive ranks (Megatron and Archon)
                expert_parallel_size=m.ep if m.ep > 1 else None,
                expert_tensor_parallel_size=m.etp if m.ep > 1 else None,
            )
            experts[m.name] = m
        start += size
    placed = set(group_of)
    container, engine_env = areal_container(root, list(settings), notes)
    if container is not None or root.get("container") is not None:
        image = container.image if container is not None else "the container: block's image"
        note = container_note(version, image, (AREAL_EXPLICIT_BACKEND, AREAL_ENGINE_BACKEND))
        notes.extend([note] if note else [])
    if container is not None:
        cluster = build_cluster(tuple(replace(g, container=container) for g in cluster.node_groups), cluster_view)
    for n, env in engine_env.items():
        settings[n] = replace(settings[n], env=env)
    name, given = hpcplace_block(root, placed, doc.path)
    for n, spec in given.items():
        base = settings[n]
        m = experts[n]
        stated = {  # what the allocation mode says; the expert sizes of a training engine only
            "tensor_parallel_size": base.tensor_parallel_size,
            "pipeline_parallel_size": base.pipeline_parallel_size,
            **({} if m.is_inference else {"expert_parallel_size": m.ep}),
            **({"expert_tensor_parallel_size": m.etp} if m.ep > 1 else {}),
        }
        for label, theirs in stated.items():
            mine = getattr(spec, label)
            if mine is not None and mine != theirs:
                raise mode_view.error(
                    f"hpcplace.components.{n}.{label} = {mine} conflicts with the allocation mode's {theirs}"
                )
        settings[n] = replace(
            spec,
            tensor_parallel_size=base.tensor_parallel_size,
            pipeline_parallel_size=base.pipeline_parallel_size,
            expert_parallel_size=base.expert_parallel_size or spec.expert_parallel_size,
            expert_tensor_parallel_size=base.expert_tensor_parallel_size or spec.expert_tensor_parallel_size,
            env={**base.env, **spec.env},  # hpcplace's own block over scheduling_spec[0].env_vars
        )
    model_parallel = "actor" in settings and "rollout" in settings
    if (
        model_parallel
        and (settings["rollout"].pipeline_parallel_size or 1) > 1
        and group_of["actor"] == group_of["rollout"]
    ):
        raise mode_view.error(
            "colocated rollout with pipeline parallelism is not supported",
            hint="use p1 for the rollout engine when it shares the actor's GPUs",
        )
    return ExperimentSpec(
        name,
        cluster,
        tuple(entries),
        settings,
        doc.path,
        "areal",
        slurm_job_options(slurm_view),
        model_parallel,
        notes=tuple(notes),
        framework_version=PlannedVersion.of(version),
    )


def _refuse_scheduling_keys(root: View, version: FrameworkVersion | None) -> None:
    """AReaL < 0.5.0: engines have no scheduling_strategy or scheduling_spec (its config class refuses them)."""
    assert version is not None  # applies() is true without a version
    for engine in ENGINES:
        section = root.get(engine)
        if section is None or not isinstance(section.deref().value, dict):
            continue
        for key in ("scheduling_strategy", "scheduling_spec"):
            child = section.deref().get(key)
            if child is not None and child.deref().value is not None:
                raise child.key_error(
                    f"{engine}.{key}: AReaL {version.version} has no such field, its config refuses the key "
                    f"(planned as {version.describe()}; AReaL >= {AREAL_SCHEDULING.since}: "
                    f"{AREAL_SCHEDULING.upstream})",
                    hint="colocate with '|' in allocation_mode for that AReaL, or state the version that runs "
                    'the config: `hpcplace: {framework_version: "0.5.0"}`',
                )


def _check_scheduling(root: View, group_of: dict[str, int]) -> None:
    for name in group_of:
        section = root.get(name)
        strategy = (
            section.get("scheduling_strategy") if section is not None and isinstance(section.value, dict) else None
        )
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
                    "different GPUs ('+')",
                    hint="join them with '|' in allocation_mode, or drop the strategy",
                )
        elif kind in ("separation", "default", "none"):
            others = [n for n, g in group_of.items() if g == group_of[name] and n != name]
            if kind == "separation" and others:
                raise strategy.error(
                    f"{name} asks for separation but the allocation mode colocates it with {', '.join(others)} ('|')"
                )
        else:
            raise strategy.require("type").error(
                f"unknown scheduling_strategy type {kind!r}", hint="AReaL uses `colocation` (or `separation`)"
            )


# ------------------------------------------------------------------------------------------------
# scheduling_spec[0]: the image, its mounts and the engine's environment (areal/api/cli_args.py
# SchedulingSpec; areal/infra/launcher/slurm.py reads each engine's first spec)

# AReaL's SchedulingSpec defaults describe AReaL's own cluster: hpcplace names them, never applies them.
AREAL_CONTAINER_TYPES = ("apptainer", "none")
AREAL_DEFAULT_IMAGE = "/storage/openpsi/images/areal-latest.sif"
AREAL_DEFAULT_MOUNT = "/storage:/storage"
_DEFAULTS = {"image": AREAL_DEFAULT_IMAGE, "mount": AREAL_DEFAULT_MOUNT, "container_type": "apptainer"}
# AReaL's Slurm launcher (areal/infra/utils/slurm.py, APPTAINER_CMD_TEMPLATE) runs an engine as
#   singularity exec --no-home --writable-tmpfs --nv --pid --bind MOUNT --env K=V ... IMAGE CMD
# hpcplace runs the same program with the same flags (`--nv` and the binds it always passes), except
# --pid: its steps on a node share the node's PID namespace (collocated components watch each other's
# processes through it), and the environment, which its shim sets inside.
AREAL_RUNTIME = "singularity"
AREAL_ARGS = ("--no-home", "--writable-tmpfs")
AREAL_GROUP = "default"
_SAME_HINT = (
    "make them equal, e.g. `rollout.scheduling_spec: ${actor.scheduling_spec}`, or set a top-level "
    "`container:` block (it decides the node group's container)"
)


@dataclass(frozen=True)
class EngineSpec:
    """What one placed engine's scheduling_spec[0] says: its container settings (None: not set) and env."""

    engine: str
    container_type: View | None
    image: View | None
    mount: View | None
    mounts: tuple[Mount, ...]
    env: dict[str, str]

    def value(self, key: str) -> object:
        if key == "mount":
            return self.mounts
        view = getattr(self, key)
        return view.str().strip() if view is not None else None

    def shown(self, key: str) -> str:
        view = getattr(self, key)
        return repr(view.str()) if view is not None else "(not set)"

    @property
    def wants_container(self) -> bool | None:
        """As AReaL runs it: in a container (apptainer, also AReaL's default when an image is given), not
        (none), or not said."""
        if self.container_type is not None:
            return self.container_type.str().strip() == "apptainer"
        return True if self.image is not None else None


def _set(view: View | None, key: str) -> View | None:
    child = view.get(key) if view is not None else None
    if child is None:
        return None
    child = child.deref()
    return None if child.value is None else child


def first_scheduling_spec(root: View, engine: str) -> View | None:
    """`ENGINE.scheduling_spec[0]` (interpolations followed), or None where the config has none."""
    section = root.get(engine)
    if section is None or not isinstance(section.deref().value, dict):
        return None
    specs = _set(section.deref(), "scheduling_spec")
    if specs is None or not specs.list():
        return None
    first = View(specs.doc, specs.path + (0,), specs.list()[0]).deref()
    if first.value is None:
        return None
    first.mapping()  # a mapping, or a located error
    return first


def _mounts(view: View) -> tuple[Mount, ...]:
    """AReaL's `mount`: one string of comma-separated `SRC:DST` binds (Apptainer's --bind syntax)."""
    text = view.str() if view.value != "" else ""
    mounts = []
    offset = 0
    for item in text.split(",") if text.strip() else ():
        lead = offset + len(item) - len(item.lstrip())
        offset += len(item) + 1
        try:
            mounts.append(parse_mount(item.strip()))
        except SpecError as exc:
            raise view.error(exc.message, hint=exc.hint, offset=lead) from None
    return tuple(mounts)


def _env(view: View | None) -> dict[str, str]:
    """`env_vars`, names checked as every env of hpcplace (AReaL refuses CUDA_VISIBLE_DEVICES too)."""
    if view is None:
        return {}
    env = view.str_map()
    for key, child in view.items():
        if isinstance(child.value, str) and "${" in child.value:
            env[key] = child.str()  # OmegaConf's interpolation, as AReaL resolves it
    return env


def engine_spec(root: View, engine: str) -> EngineSpec:
    first = first_scheduling_spec(root, engine)
    kind = _set(first, "container_type")
    if kind is not None and kind.str().strip() not in AREAL_CONTAINER_TYPES:
        raise kind.error(
            f"unknown container_type {kind.value!r}" + did_you_mean(kind.str().strip(), AREAL_CONTAINER_TYPES),
            hint="AReaL's Slurm launcher knows apptainer and none; for pyxis or Slurm's --container set a "
            "top-level `container:` block",
        )
    image = _set(first, "image")
    if image is not None:
        image.str()  # a non-empty string, or a located error
    mount = _set(first, "mount")
    return EngineSpec(engine, kind, image, mount, _mounts(mount) if mount else (), _env(_set(first, "env_vars")))


def _agreed(specs: list[EngineSpec], key: str) -> EngineSpec | None:
    """The first engine that sets `key`, once every other engine that sets it is checked to say the same."""
    owner = None
    for spec in specs:
        if getattr(spec, key) is None:
            continue
        if owner is None:
            owner = spec
        elif spec.value(key) != owner.value(key):
            theirs = getattr(owner, key).location()
            raise getattr(spec, key).error(
                f"{spec.engine}'s {key} {spec.shown(key)} differs from {owner.engine}'s {owner.shown(key)} "
                f"(line {theirs.line}): hpcplace runs node group {AREAL_GROUP!r} in one container (Ray mode "
                "runs one raylet per node, the preflight checks one image per node)",
                hint=_SAME_HINT,
            )
    return owner


def areal_container(
    root: View, engines: list[str], notes: list[str]
) -> tuple[Container | None, dict[str, dict[str, str]]]:
    """The container of AReaL's node group, from the placed engines' scheduling_spec[0], and each
    engine's env_vars. A top-level `container:` block that gives the node group any setting decides it
    instead (load_spec applies it): then conflicting image settings here are noted, not errors."""
    order = {name: i for i, name in enumerate(ENGINES)}
    specs = [engine_spec(root, e) for e in sorted(engines, key=lambda e: order.get(e, len(ENGINES)))]
    env = {s.engine: s.env for s in specs if s.env}
    block = parse_container_block(root.get("container"))
    block_decides = block is not None and (bool(block.job.values) or AREAL_GROUP in block.groups)
    try:
        return _container(specs, notes), env
    except SpecError as exc:
        if not block_decides:
            raise
        notes.append(
            f"the top-level container: block decides node group {AREAL_GROUP!r}'s container; the engines' "
            f"scheduling_spec image settings are not used ({exc.message})"
        )
        return None, env


def _container(specs: list[EngineSpec], notes: list[str]) -> Container | None:
    kind, image, mount = (_agreed(specs, key) for key in ("container_type", "image", "mount"))
    inside = [s for s in specs if s.wants_container]
    outside = [s for s in specs if s.wants_container is False]
    if inside and outside:
        there, bare = inside[0], outside[0]
        assert bare.container_type is not None  # it says none
        raise bare.container_type.error(
            f"{bare.engine}'s container_type none runs it without a container, but {there.engine} sets the image "
            f"{there.shown('image')} and no container_type, so AReaL runs it in one (its default container_type "
            f"is apptainer): hpcplace runs node group {AREAL_GROUP!r} one way",
            hint=_SAME_HINT,
        )
    if outside:
        unused = [f"{s.engine}'s {key}" for s in specs for key in ("image", "mount") if getattr(s, key) is not None]
        if unused:
            notes.append(
                f"scheduling_spec container_type none: node group {AREAL_GROUP!r} runs without a container, as "
                f"AReaL's Slurm launcher runs it; {', '.join(unused)} not used"
            )
        return None
    if image is None:
        if kind is not None:
            assert kind.container_type is not None
            raise kind.container_type.error(
                f"{kind.engine}'s container_type apptainer names no image: AReaL's default image "
                f"{AREAL_DEFAULT_IMAGE} is AReaL's own cluster's, and hpcplace does not assume it",
                hint=f"set {kind.engine}.scheduling_spec[0].image to your image's absolute path on storage the nodes "
                "share (or a docker:// reference), or write container_type: none",
            )
        if mount is not None:
            notes.append(
                f"{mount.engine}.scheduling_spec[0].mount is not used: no engine sets an image (AReaL's Slurm "
                f"launcher would run its default image {AREAL_DEFAULT_IMAGE}); set image to run in a container"
            )
        return None
    assert image.image is not None
    try:
        path = check_image(AREAL_RUNTIME, image.image.str().strip())
    except SpecError as exc:
        raise image.image.error(exc.message, hint=exc.hint) from None
    notes.append(
        f"node group {AREAL_GROUP!r} runs in the image {path} ({image.engine}.scheduling_spec[0].image) as "
        f"AReaL's Slurm launcher runs it: `{AREAL_RUNTIME} exec {' '.join(AREAL_ARGS)} --nv` (runtime "
        f"{AREAL_RUNTIME}, which Apptainer installs too; container args {' '.join(AREAL_ARGS)}; not AReaL's "
        "--pid: hpcplace's steps on a node share its PID namespace, so collocated components see each "
        "other's processes)"
    )
    if kind is None:
        notes.append(
            f"{image.engine}.scheduling_spec[0] sets an image and no container_type: AReaL's default, apptainer, "
            "applies"
        )
    if mount is None:
        notes.append(
            f"no scheduling_spec[0].mount: the image gets no binds but the run and submit directories; AReaL's "
            f"default mount {AREAL_DEFAULT_MOUNT} (AReaL's own cluster's storage) is not applied"
        )
    given = {key: owner for key, owner in (("container_type", kind), ("image", image), ("mount", mount)) if owner}
    for spec in specs:
        missing = [key for key in given if getattr(spec, key) is None]
        if missing:
            notes.append(
                f"{spec.engine}.scheduling_spec[0] sets no {', '.join(missing)}: it runs with "
                + ", ".join(f"{given[key].engine}'s {key}" for key in missing)
                + f", as every process of node group {AREAL_GROUP!r} (AReaL would give it its default "
                + ", ".join(f"{key} {_DEFAULTS[key]}" for key in missing)
                + ")"
            )
    return Container(
        AREAL_RUNTIME,
        path,
        mount.mounts if mount is not None else (),
        args=AREAL_ARGS,
        location=image.image.location(),
    )
