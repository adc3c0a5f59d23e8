"""RLinf configs, unchanged: `cluster: {num_nodes, component_placement, node_groups}` plus a
`slurm:` block with the facts RLinf discovers at run time (GPUs per node, partitions, GPU type)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from hpcplace.config import limits
from hpcplace.config.cluster import Hardware, NodeGroup
from hpcplace.config.formats.common import SiteGpus, SlurmFacts, hpcplace_block, slurm_facts, slurm_job_options
from hpcplace.config.framework_version import PlannedVersion, resolve_version
from hpcplace.config.rank_syntax import RankSyntaxError, parse_range
from hpcplace.config.spec import (
    EVAL,
    HYBRID,
    MODEL_PARALLEL,
    MULTI_AGENT,
    ComponentSpec,
    ExperimentSpec,
    PlacementEntry,
    build_cluster,
    check_name,
    placement_entries,
)
from hpcplace.config.yaml_source import View, YamlDocument, did_you_mean
from hpcplace.errors import SpecError


def _node_ranks(view: View, num_nodes: int) -> list[int]:
    """`0-1`, `0,2`, `4,1`, `all` or an int -> sorted unique node ranks, parsed as RLinf's
    parse_rank_config does: any set in any order (RLinf keeps a group's nodes in ascending node rank
    order whatever order they are listed in), a rank named twice counts once, and a YAML list is
    refused (RLinf reads the text of the value, and `[0, 2]` is no rank text)."""
    if isinstance(view.value, list):
        listed = ",".join(str(v) for v in view.value)
        raise view.error(
            "node_ranks is a YAML list: RLinf parses node_ranks as text and refuses a list",
            hint=f'write `node_ranks: "{listed}"` (rank text such as `0-1`, `0,2` or `all`)',
        )
    if view.value is None or not str(view.value).strip():
        raise view.error("node_ranks is empty", hint="give the group's node ranks, e.g. `0-1`, `0,2` or `all`")
    ranks: set[int] = set()
    text = str(view.value)
    offset = 0
    for piece in text.split(","):
        if piece.strip():
            try:
                a, b = parse_range(
                    piece,
                    total=num_nodes,
                    offset=offset,
                    what="node ranks",
                    noun="nodes",
                    scope=f"cluster.num_nodes is {num_nodes}: node ranks count from 0 to "
                    f"{num_nodes - 1}; raise cluster.num_nodes or lower the ranks",
                )
            except RankSyntaxError as exc:
                raise view.error(exc.message, hint=exc.hint, offset=exc.offset) from None
            ranks.update(range(a, b + 1))
        offset += len(piece) + 1
    if not ranks:
        raise view.error("node_ranks is empty", hint="give the group's node ranks, e.g. `0-1`, `0,2` or `all`")
    for r in ranks:
        if r >= num_nodes:
            raise view.error(
                f"node rank {r} is out of range: cluster.num_nodes is {num_nodes}",
                hint=f"node ranks count from 0 to {num_nodes - 1}; raise cluster.num_nodes or lower the ranks",
            )
    return sorted(ranks)


_ENV_HINT = (
    "RLinf's shape: env_configs: [{node_ranks: 0-1, env_vars: [{KEY: value}, ...], "
    "python_interpreter_path: /path/python}]"
)


def _env_configs(
    view: View | None, label: str, ranks: list[int], num_nodes: int
) -> tuple[tuple[dict[str, str], ...], tuple[str | None, ...]]:
    """RLinf `env_configs` -> (env per node of the group, python interpreter per node), each entry
    applied to its own node_ranks only; RLinf's checks: ranks inside the group, no rank in two
    entries, no variable in two entries of the group. Empty tuples when nothing is set."""
    if view is None or view.value is None:
        return (), ()
    if not isinstance(view.value, list):
        raise view.error("env_configs must be a list of entries", hint=_ENV_HINT)
    node_env: dict[int, dict[str, str]] = {r: {} for r in ranks}
    interp: dict[int, str | None] = dict.fromkeys(ranks)
    rank_owner: dict[int, int] = {}
    key_owner: dict[str, int] = {}
    for i, entry in enumerate(view.elements()):
        if not isinstance(entry.value, dict):
            raise entry.error("an env_configs entry must be a mapping", hint=_ENV_HINT)
        entry.check_keys({"node_ranks", "env_vars", "python_interpreter_path"})
        rv = entry.require("node_ranks", "the nodes this entry applies to")
        if isinstance(rv.value, str) and rv.value.strip().lower() == "all":
            mine = list(ranks)  # RLinf parses an entry's ranks against the group's: `all` = the group
        else:
            mine = _node_ranks(rv, num_nodes)
        for r in mine:
            if r not in interp:
                raise rv.error(
                    f"node rank {r} is not a node of group {label!r} (nodes {ranks})",
                    hint="an env_configs entry applies to nodes of its own group (RLinf checks this)",
                )
            if r in rank_owner:
                raise rv.error(
                    f"node rank {r} is in env_configs entries {rank_owner[r]} and {i} of group {label!r}",
                    hint="give each node one entry (RLinf checks this)",
                )
            rank_owner[r] = i
        env: dict[str, str] = {}
        ev = entry.get("env_vars")
        if ev is not None and ev.value is not None:
            if not isinstance(ev.value, list):
                raise ev.error(
                    "env_vars must be a list of one-key mappings",
                    hint="write `env_vars: [{KEY: value}]` (a '-' before each variable)",
                )
            for item in ev.elements():
                if not isinstance(item.value, dict) or len(item.value) != 1:
                    raise item.error(
                        "each env_vars item must be a mapping with exactly one variable",
                        hint="write `- KEY: value`, one variable per item",
                    )
                ((key, value),) = item.value.items()
                if value is None:
                    raise item.error(
                        f"env_vars: {key} has no value",
                        hint="give a value (RLinf would set the text 'None'), or remove the item",
                    )
                if str(key) in env or str(key) in key_owner:
                    raise item.error(
                        f"environment variable {key!r} is set twice in env_configs of group {label!r}",
                        hint="set each variable once per node group (RLinf checks this)",
                    )
                env.update(item.str_map())
            for key in env:
                key_owner[key] = i
        pv = entry.get("python_interpreter_path")
        path = None if pv is None or pv.value is None else pv.str()  # null: unset (RLinf)
        if pv is not None and path is not None and not path.strip():
            raise pv.error("python_interpreter_path is empty", hint="give a path, or null for the job's Python")
        for r in mine:
            node_env[r].update(env)
            interp[r] = path
    envs = tuple(node_env[r] for r in ranks)
    paths = tuple(interp[r] for r in ranks)
    return (envs if any(envs) else ()), (paths if any(p is not None for p in paths) else ())


def _hardware(view: View, label: str, ranks: list[int]) -> Hardware:
    view.check_keys({"type", "configs", "count"})
    hw_type = check_name(view.require("type"), view.require("type").str(), "hardware type")
    if view.get("count") is not None:
        return Hardware(hw_type, (view.require("count").int(minimum=0),) * len(ranks))
    configs = view.require("configs", "one entry per device, each with node_rank")
    counts = dict.fromkeys(ranks, 0)
    for item in configs.elements():
        node_rank = item.get("node_rank") if isinstance(item.value, dict) else None
        if node_rank is None:
            if len(ranks) != 1:
                raise item.error(
                    f"hardware config of node group {label!r} needs `node_rank` (the group has several nodes)"
                )
            counts[ranks[0]] += 1
            continue
        r = node_rank.int(minimum=0)
        if r not in counts:
            raise node_rank.error(
                f"node_rank {r} is not a node of group {label!r} (nodes {ranks})",
                hint="a hardware config's node_rank is the cluster node rank of the node the "
                f"device is attached to, one of {ranks}; RLinf enumerates a node's devices "
                "from the configs naming it, so this one would never exist",
            )
        counts[r] += 1
    return Hardware(hw_type, tuple(counts[r] for r in ranks))


def parse_rlinf(doc: YamlDocument, site_gpus: SiteGpus | None = None) -> ExperimentSpec:
    root = doc.root()
    notes: list[str] = []
    version = resolve_version("rlinf", root, notes)  # an RLinf older than the rules followed here is noted
    cluster_view = root.require("cluster")
    num_nodes = limits.nodes(
        cluster_view.require("num_nodes").int(minimum=1),
        cluster_view.require("num_nodes").location(),
        "cluster.num_nodes",
    )
    slurm_view = root.get("slurm")
    defaults = slurm_facts(slurm_view)
    groups_view = cluster_view.get("node_groups")
    declared: list[tuple[list[int], NodeGroup]] = []
    owner: dict[int, str] = {}
    if groups_view is not None and groups_view.value is not None:
        for gv in groups_view.elements():
            gv.check_keys({"label", "node_ranks", "hardware", "ignore_hardware", "env_configs"})
            label = check_name(gv.require("label"), str(gv.require("label").value), "node group label")
            ranks = _node_ranks(gv.require("node_ranks"), num_nodes)
            for r in ranks:
                if r in owner:
                    raise gv.require("node_ranks").error(
                        f"node {r} is in node groups {owner[r]!r} and {label!r}",
                        hint="on Slurm a node belongs to one node group (one het component)",
                    )
                owner[r] = label
            facts = slurm_facts(slurm_view, label, defaults)
            hardware = _hardware(gv.require("hardware"), label, ranks) if gv.get("hardware") else None
            declared.append(
                (
                    ranks,
                    _group(
                        label,
                        ranks,
                        facts,
                        gv,
                        hardware,
                        v.bool() if (v := gv.get("ignore_hardware")) else False,
                        *_env_configs(gv.get("env_configs"), label, ranks, num_nodes),
                        site_gpus,
                        notes,
                    ),
                )
            )
    # Nodes outside every declared group form implicit groups in the default partition (one per run of
    # consecutive unowned ranks). RLinf puts them in no named group; they are reached through `cluster`/`node`.
    run: list[int] = []
    runs: list[list[int]] = []
    for r in range(num_nodes):
        if r in owner:
            if run:
                runs.append(run)
                run = []
        else:
            run.append(r)
    if run:
        runs.append(run)
    for i, ranks in enumerate(runs):
        label = "default" if i == 0 else f"default-{i + 1}"
        declared.append(
            (
                ranks,
                _group(
                    label,
                    ranks,
                    slurm_facts(slurm_view, label, defaults),
                    cluster_view,
                    None,
                    False,
                    (),
                    (),
                    site_gpus,
                    notes,
                ),
            )
        )
    declared.sort(key=lambda item: item[0][0])
    cluster = build_cluster(tuple(g for _, g in declared), cluster_view)
    placements = placement_entries(cluster_view.require("component_placement"))
    placed = {n for e in placements for n in e.components}
    notes += _misspelt_components(root, placed)
    name, components = hpcplace_block(root, placed, doc.path)
    components = _rlinf_component_settings(root, placed, components)
    block = root.get("hpcplace")
    mp_flag = block.get("model_parallel") if block is not None else None
    placement_class = (
        _placement_class(placed, components, notes)
        if mp_flag is None
        else (MODEL_PARALLEL if mp_flag.bool() else HYBRID)
    )
    model_parallel = placement_class == MODEL_PARALLEL
    if placement_class != HYBRID:
        _require_sections(root, cluster_view.require("component_placement"), placed, placement_class)
    if model_parallel and "inference" in placed:
        _check_recompute_logprobs(root, placements)
    packed: dict[str, tuple[int, int]] = {}
    if placement_class in (MULTI_AGENT, EVAL):
        # RLinf packs rollout by its tp (multi-agent: with the collocated stride) and places every other
        # engine with get_strategy(name, PackedPlacementStrategy): rollout's process size and stride.
        rtp = (components.get("rollout") or ComponentSpec("rollout")).tensor_parallel_size or 1
        atp = (components.get("actor") or ComponentSpec("actor")).tensor_parallel_size or 1
        stride = atp // rtp if placement_class == MULTI_AGENT and atp > rtp else 1
        for n in sorted(placed):
            if n == "rollout" or n.startswith("rollout_"):
                packed[n] = (rtp, stride)
    return ExperimentSpec(
        name,
        cluster,
        placements,
        components,
        doc.path,
        "rlinf",
        slurm_job_options(slurm_view),
        model_parallel,
        notes=tuple(notes),
        packed=packed,
        placement_class=placement_class,
        framework_version=PlannedVersion.of(version),
    )


def _misspelt_components(root: View, placed: set[str]) -> list[str]:
    """RLinf configures a placed component from the config section of its name (`actor:`, `rollout:`):
    a placed name without a section, close to a section that is not placed, is most likely a typo."""
    sections = {k for k in root.value if isinstance(k, str)} - placed if isinstance(root.value, dict) else set()
    return [
        f"component {n!r} is placed, but the config has no `{n}:` section{hint}"
        for n in sorted(placed)
        if n not in sections and root.get(n) is None
        for hint in [did_you_mean(n, sections)]
        if hint
    ]


def _placement_class(placed: set[str], components: dict[str, ComponentSpec], notes: list[str]) -> str:
    """Which RLinf placement class the components imply (RLinf's entry scripts pick it the same way):
    actor + rollout with model-parallel sizes -> ModelParallelComponentPlacement (collocated/disaggregated
    layout, weight-sync map); rollout engines named `rollout_*` -> the multi-agent class; rollout without actor
    -> the eval class; anything else (SFT with an actor only, embodied) -> HybridComponentPlacement."""
    sized = any(
        c.tensor_parallel_size or c.pipeline_parallel_size for n, c in components.items() if n in ("actor", "rollout")
    )
    engines = sorted(n for n in placed if n.startswith("rollout_"))
    if engines:
        notes.append(
            f"multi-agent placement (RLinf's MultiAgentModelParallelComponentPlacement): rollout engines "
            f"{', '.join(['rollout'] * ('rollout' in placed) + engines)} are packed by rollout's "
            "tensor-parallel size; no actor->rollout weight-sync map is planned"
        )
        return MULTI_AGENT if "actor" in placed else EVAL
    if not sized:
        return HYBRID
    if "actor" in placed and "rollout" in placed:
        return MODEL_PARALLEL
    if "rollout" in placed:
        notes.append("evaluation placement (rollout without actor, RLinf's ModelParallelEvalComponentPlacement)")
        return EVAL
    return HYBRID


def _require_sections(root: View, placement_view: View, placed: set[str], placement_class: str) -> None:
    """The placements and config sections RLinf's class asserts before anything runs."""
    needed = {
        MODEL_PARALLEL: ("actor", "rollout", "reward"),
        MULTI_AGENT: ("actor", "rollout", "reward"),
        EVAL: ("rollout", "reward"),
    }[placement_class]
    missing = [n for n in needed if n not in placed]
    if missing:
        raise placement_view.error(
            f"RLinf's {placement_class} needs a placement for {', '.join(missing)} (it asserts "
            f'"{missing[0].capitalize()} GPUs must be specified in the component_placement config")',
            hint=f"place {' and '.join(missing)} too, e.g. `actor,rollout,reward: all` as RLinf's collocated "
            "reasoning configs do, or `reward: <its GPUs>`",
        )
    for engine in sorted(n for n in placed if n.startswith("rollout_")):
        if root.get(engine) is None:
            raise placement_view.error(
                f'multi-agent engine {engine!r} has no `{engine}:` section (RLinf asserts "component_name '
                f'{engine} not found in cfg" when it places the engine)',
                hint=f"add `{engine}: {{tensor_parallel_size: 1}}` (or the engine's own rollout settings)",
            )


def _check_recompute_logprobs(root: View, placements: Sequence[PlacementEntry]) -> None:
    algorithm = root.get("algorithm")
    flag = algorithm.get("recompute_logprobs") if algorithm is not None and isinstance(algorithm.value, dict) else None
    if flag is not None and flag.deref().value is False:
        where = next((e.location for e in placements if "inference" in e.components), None)
        raise SpecError(
            "algorithm.recompute_logprobs is false, which disables inference, but inference has GPUs placed",
            location=where or flag.location(),
            hint="remove `inference` from component_placement, or set algorithm.recompute_logprobs: true "
            "(RLinf asserts this)",
        )


def _group(
    label: str,
    ranks: list[int],
    facts: SlurmFacts,
    view: View,
    hardware: Hardware | None,
    ignore: bool,
    node_env: tuple[dict[str, str], ...],
    interpreter: tuple[str | None, ...],
    site_gpus: SiteGpus | None,
    notes: list[str],
) -> NodeGroup:
    gpus = facts.gpus_per_node
    if gpus is None:
        if hardware is not None or ignore:
            gpus = 0
        else:
            site = site_gpus(facts.partition, facts.gpu_type) if site_gpus is not None else None
            if site is None or site.count is None:
                raise view.error(
                    f"GPUs per node of node group {label!r} are unknown"
                    + (f" ({site.source})" if site is not None else ""),
                    hint=site.fix
                    if site is not None and site.fix
                    else f"RLinf discovers them at run time; add `slurm: {{gpus_per_node: 8}}` or "
                    f"`slurm: {{node_groups: {{{label}: {{gpus_per_node: 8}}}}}}` "
                    "(or --set slurm.gpus_per_node=8)",
                )
            gpus = site.count
            notes.append(
                f"node group {label!r}: {gpus} GPUs per node, {site.source} (RLinf discovers them at "
                "run time; set slurm.gpus_per_node to fix the count)"
            )
    partition = facts.partition  # None: Slurm's default partition
    if facts.hardware_gres is not None:
        if hardware is None:
            raise view.error(
                f"slurm.node_groups.{label}.hardware_gres is set but node group {label!r} declares no hardware",
                hint="hardware_gres names the Slurm GRES of a group's `hardware.type`",
            )
        hardware = replace(hardware, gres=facts.hardware_gres)
    n = len(ranks)
    return NodeGroup(
        label=label,
        partition=partition,
        num_nodes=n,
        node_ranks=tuple(ranks),
        gpus_per_node=(gpus,) * n,
        gpu_type=facts.gpu_type,
        cpus_per_node=facts.cpus_per_node,
        mem_per_node_mb=facts.mem_per_node_mb,
        constraint=facts.constraint,
        account=facts.account,
        qos=facts.qos,
        network=facts.network,
        topology=facts.topology,
        hardware=hardware,
        ignore_hardware=ignore,
        location=view.location(),
        node_env=node_env,
        python_interpreter=interpreter,
    )


def _rlinf_component_settings(
    root: View, placed: set[str], given: dict[str, ComponentSpec]
) -> dict[str, ComponentSpec]:
    """Read RLinf's own per-component keys: model-parallel sizes and offload switches."""
    out = dict(given)
    for name in placed:
        section = root.get(name)
        if section is None or not isinstance(section.value, dict):
            continue
        spec = out.get(name, ComponentSpec(name))
        model = section.get("model")
        tp = (
            _first_int(section, [("tensor_parallel_size",), ("model", "tensor_model_parallel_size")])
            if model is None or isinstance(model.value, dict)
            else None
        )
        pp = (
            _first_int(section, [("pipeline_parallel_size",), ("model", "pipeline_model_parallel_size")])
            if model is None or isinstance(model.value, dict)
            else None
        )
        offload = any(
            isinstance(v, bool) and v
            for k, v in section.mapping().items()
            if k == "enable_offload" or str(k).startswith("offload_")
        )
        ep_view, etp_view = _expert_views(root, name)
        ep = ep_view.int(minimum=1) if ep_view is not None else None
        etp = etp_view.int(minimum=1) if etp_view is not None and ep is not None and ep > 1 else None
        for label, mine, theirs, where in (
            ("tensor_parallel_size", spec.tensor_parallel_size, tp, section),
            ("pipeline_parallel_size", spec.pipeline_parallel_size, pp, section),
            ("expert_parallel_size", spec.expert_parallel_size, ep, ep_view),
            ("expert_tensor_parallel_size", spec.expert_tensor_parallel_size, etp, etp_view),
        ):
            if mine is not None and theirs is not None and mine != theirs and where is not None:
                raise SpecError(
                    f"{name}: hpcplace.components.{name}.{label} = {mine} conflicts with RLinf's {theirs}",
                    location=where.location(),
                    hint="give the value once",
                )
        out[name] = replace(
            spec,
            tensor_parallel_size=spec.tensor_parallel_size or tp,
            pipeline_parallel_size=spec.pipeline_parallel_size or pp,
            offload=spec.offload or offload,
            expert_parallel_size=spec.expert_parallel_size or ep,
            expert_tensor_parallel_size=spec.expert_tensor_parallel_size or etp,
        )
    return out


# Where a placed component's Megatron expert sizes come from: RLinf's Megatron trainers read their own
# `model.expert_model_parallel_size` / `model.expert_tensor_parallel_size` (rlinf/config.py
# validate_megatron_cfg, for actor and critic with training_backend megatron), and its Megatron inference
# workers copy their trainer's model config, overriding only tensor/pipeline sizes and sequence parallelism
# (rlinf/workers/inference/megatron_inference_worker.py _build_inference_cfg).
_EXPERT_SOURCE = {
    "actor": "actor",
    "critic": "critic",
    "inference": "actor",
    "actor_inference": "actor",
    "critic_inference": "critic",
}


def _expert_views(root: View, name: str) -> tuple[View | None, View | None]:
    """The expert-parallel and expert tensor-parallel keys Megatron reads for the component (None where the
    config gives none, or the trainer is not Megatron: FSDP ignores them). An unset expert tensor size is
    Megatron's default, the component's tensor-parallel size."""
    trainer = _EXPERT_SOURCE.get(name)
    section = root.get(trainer) if trainer is not None else None
    if section is None or not isinstance(section.value, dict):
        return None, None
    backend = section.get("training_backend")
    if backend is not None and backend.deref().value != "megatron":
        return None, None
    model = section.get("model")
    if model is None or not isinstance(model.value, dict):
        return None, None
    return model.given("expert_model_parallel_size"), model.given("expert_tensor_parallel_size")


def _first_int(section: View, paths: list[tuple[str, ...]]) -> int | None:
    for path in paths:
        view: View | None = section
        for key in path:
            view = view.get(key) if view is not None and isinstance(view.value, dict) else None
        if view is not None and view.value is not None:
            return view.int(minimum=1)
    return None
