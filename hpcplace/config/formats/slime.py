"""slime's `python3 train.py ...` / `train_async.py` (THUDM/slime 624b824; also wrapped as `ray job submit ... --`),
read as its parsers read it, planned as slime/ray/placement_group.py places it.

What slime does: `create_placement_groups` makes ONE Ray placement group of `{GPU: 1, CPU: 1}` bundles with
strategy PACK, of actor + rollout GPUs (disaggregated), max(actor, rollout) (`--colocate`), the actor's
(`--debug-train-only`, external engines) or the rollout's (`--debug-rollout-only`); it asks each bundle for its
node IP and GPU id and sorts the bundles by (IP as numbers, GPU id): logical GPU i is the i-th of that order.
The actor's rank r (and the critic's, `--advantage-estimator ppo`, on the same bundles) is on logical GPU r
(0.4 GPU each); the SGLang engines start at the rollout offset (the actor's GPUs when disaggregated, 0 when
colocated): engine part i on logical GPUs offset + i·k .. + k - 1, k = min(--rollout-num-gpus-per-engine,
--num-gpus-per-node), an engine wider than a node being one part per node. The engines form server groups, each
from its own first GPU of the rollout on: one group, the prefill and decode groups of --prefill-num-servers, or
those of --sglang-config (formats/slime_sglang.py).

hpcplace sizes the job to the group (nodes = GPUs / GPUs per node, rounded up) and plans logical GPU i on node
i // gpus_per_node, GPU i % gpus_per_node: that is slime's order when the nodes' IPs sort in node rank order (the
job's node list order). See docs/formats/slime.md."""

from __future__ import annotations

import math
import re
from dataclasses import replace

from hpcplace.config import limits
from hpcplace.config.cluster import NodeGroup
from hpcplace.config.formats.argv import Value, parse_flags, submitted_command
from hpcplace.config.formats.command import COMMAND_FORMATS, FrameworkCommand
from hpcplace.config.formats.common import (
    SiteGpus,
    SlurmFacts,
    facts_node_group,
    hpcplace_block,
    slurm_facts,
    slurm_job_options,
    with_block_settings,
)
from hpcplace.config.formats.release_data import note_release, planned_version
from hpcplace.config.formats.slime_flags import (
    BACKEND_FLAGS,
    MEGATRON_DEFAULTS,
    MEGATRON_FLAGS,
    PLACEMENT_FLAGS,
    Release,
    release_for,
    releases,
    releases_with,
)
from hpcplace.config.formats.slime_sglang import ServerGroup, component_names, read_sglang_config
from hpcplace.config.framework_version import KEY, FrameworkVersion, VersionGate, resolve_version
from hpcplace.config.launch import LaunchSpec
from hpcplace.config.spec import ComponentSpec, ExperimentSpec, PlacementEntry, SpanningWorkers, build_cluster
from hpcplace.config.steer import SteerRule
from hpcplace.config.yaml_source import View, YamlDocument, closest
from hpcplace.errors import SpecError

# Where slime's placement changed between releases (slime_flags.py has each release's flags, read from its tag).
CRITIC_SHARES_ACTOR = VersionGate(
    "slime",
    "0.3.0",
    "a ppo critic trains on the actor's GPUs; before, it had GPUs of its own, --critic-num-nodes x "
    "--critic-num-gpus-per-node (the actor's by default) after the actor's, and the rollout's came after both",
    "THUDM/slime 75af5297c, PR #1856 (2026-04-24), first released in v0.3.0",
)
COLOCATE_KEEPS_ROLLOUT = VersionGate(
    "slime",
    "0.3.1",
    "with --colocate the placement group holds max(actor, --rollout-num-gpus) GPUs; before, slime set "
    "--rollout-num-gpus to the actor's GPUs (and a 0.2 critic's) whatever was given, and the group held those",
    "THUDM/slime 0efcab012, PR #2057 (2026-06-12), first released in v0.3.1",
)
EXTERNAL_ENGINES = VersionGate(
    "slime",
    "0.3.1",
    "external engines (--rollout-external-engine-addrs) take no GPU of slime's placement group",
    "THUDM/slime e1b9c90b1, PR #2016 (2026-06-04), first released in v0.3.1",
)
UNKNOWN_FLAGS_IGNORED = VersionGate(
    "slime",
    "0.2.3",
    "a flag slime's parsers do not know is ignored (Megatron's parser runs with ignore_unknown_args); before, "
    "Megatron's argparse refused it (unrecognized arguments)",
    "THUDM/slime 96118d0c2, PR #1600 (2026-02-20), first released in v0.2.3",
)
POOLS = ("actor", "rollout")
# the flags whose misspelling slime would silently ignore with a placement hpcplace cannot see: a flag close to
# one of these (and not a slime flag) is refused; Megatron's and SGLang's many flags are left to their parsers
NEAR_MISSES = (
    "--actor-num-nodes",
    "--actor-num-gpus-per-node",
    "--rollout-num-gpus",
    "--rollout-num-gpus-per-engine",
    "--num-gpus-per-node",
    "--colocate",
)
_ENTRY = re.compile(r"(^|.*/)train(_async)?\.py$")


def parse(command: FrameworkCommand, blocks: YamlDocument, site_gpus: SiteGpus | None) -> ExperimentSpec:
    root = blocks.root()
    notes: list[str] = []
    entry = _entry(command, notes)
    driver = submitted_command(command, entry, notes)
    version = resolve_version("slime", root, notes)
    release = release_for(version.version if version is not None else None)
    args, at = _read_flags(command, entry, release, version, notes)

    def num(key: str) -> int:
        value = args[key]
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    sglang_config = args["--sglang-config"]
    if sglang_config is not None:  # slime's sglang_utils/arguments.py asserts
        if args["--rollout-external-engine-addrs"] is not None:
            raise command.error(
                at["--sglang-config"], "slime: sglang_config cannot be set with --rollout-external-engine-addrs."
            )
        if args["--prefill-num-servers"] is not None:
            raise command.error(
                at["--prefill-num-servers"],
                "slime: sglang_config and prefill_num_servers are mutually exclusive. Use server_groups in the YAML "
                "config instead. (its assert)",
            )
    # slime's parse_args: --load-debug-rollout-data sets debug_train_only (train on the loaded rollouts, no SGLang)
    loaded = args["--load-debug-rollout-data"] is not None
    debug_train, debug_rollout = bool(args["--debug-train-only"]) or loaded, bool(args["--debug-rollout-only"])
    if debug_train and debug_rollout:
        raise command.error(
            at["--debug-rollout-only"],
            "slime: debug_rollout_only and debug_train_only cannot be set at the same time (its assert)"
            + ("; --load-debug-rollout-data sets debug_train_only" if loaded else ""),
        )
    if loaded:
        notes.append(
            "slime: --load-debug-rollout-data trains on the saved rollouts only (it sets debug_train_only): no "
            "SGLang engine starts, and the placement group holds the actor's GPUs alone"
        )
    prefill_servers = args["--prefill-num-servers"]
    if prefill_servers is not None and args["--rollout-external-engine-addrs"] is not None:
        raise command.error(
            at["--prefill-num-servers"],
            "slime: prefill_num_servers cannot be set with --rollout-external-engine-addrs. (its assert)",
        )
    colocate = bool(args["--colocate"])
    if colocate and command.argv[entry].endswith("train_async.py"):
        raise command.error(at["--colocate"], "slime: Colocation is not supported for async training (its assert)")
    external = args["--rollout-external-engine-addrs"] is not None
    if external and not EXTERNAL_ENGINES.applies(version):
        assert version is not None
        raise command.error(
            at["--rollout-external-engine-addrs"],
            f"planned as {version.describe()}: hpcplace plans external engines as slime {EXTERNAL_ENGINES.since} "
            f"places them ({EXTERNAL_ENGINES.change}; {EXTERNAL_ENGINES.upstream}); slime {version.version} still "
            "held --rollout-num-gpus bundles of its group for them, which hpcplace does not plan",
            hint=f"run slime {EXTERNAL_ENGINES.since} or newer, or let slime start the engines",
        )
    gpn_flag = "--num-gpus-per-node" if release.has("--num-gpus-per-node") else "--rollout-num-gpus-per-node"
    for key in ("--actor-num-nodes", "--actor-num-gpus-per-node", gpn_flag):
        if num(key) < 1 and not (debug_rollout and key != gpn_flag):
            raise command.error(at[key], f"{key} is {num(key)}", hint="1 or more")
    actor = num("--actor-num-nodes") * num("--actor-num-gpus-per-node")
    # slime 0.2's ppo critic: GPUs of its own after the actor's (CRITIC_SHARES_ACTOR)
    use_critic = args["--advantage-estimator"] == "ppo"
    critic = 0
    if use_critic and not CRITIC_SHARES_ACTOR.applies(version):
        assert version is not None
        critic_nodes = num("--critic-num-nodes") if args["--critic-num-nodes"] is not None else num("--actor-num-nodes")
        critic_gpn = (
            num("--critic-num-gpus-per-node")
            if args["--critic-num-gpus-per-node"] is not None
            else num("--actor-num-gpus-per-node")
        )
        critic = critic_nodes * critic_gpn
        if debug_rollout:
            raise command.error(
                at["--debug-rollout-only"],
                f"slime {version.version} with --advantage-estimator ppo and --debug-rollout-only fails: its "
                "create_placement_groups sets no critic offset then (NameError: critic_offset)",
            )
        notes.append(CRITIC_SHARES_ACTOR.warning(version, f"the critic is planned on {critic} GPUs after the actor's"))
    rollout_given = args["--rollout-num-gpus"]
    per_engine = num("--rollout-num-gpus-per-engine")
    if per_engine < 1:
        raise command.error(at["--rollout-num-gpus-per-engine"], "--rollout-num-gpus-per-engine must be 1 or more")
    pp = max(1, num("--sglang-pp-size"), num("--sglang-pipeline-parallel-size"))
    if pp > 1 and per_engine % pp:
        raise command.error(
            at["--rollout-num-gpus-per-engine"],
            f"slime: rollout_num_gpus_per_engine ({per_engine}) must be divisible by sglang_pp_size ({pp}) "
            "(its assert)",
        )
    if debug_rollout and rollout_given is None and not colocate and not external:
        raise command.error(
            at["--debug-rollout-only"],
            "--debug-rollout-only without --rollout-num-gpus (and without --colocate): slime sizes its actor by "
            "min(8, rollout_num_gpus) and fails (TypeError)",
            hint="give --rollout-num-gpus N",
        )
    trained = actor + critic  # the GPUs of slime's training groups in its placement group
    if debug_train:  # slime starts no engine then (RolloutServer's engines, even with --colocate)
        rollout = 0
    elif colocate and not debug_rollout and not COLOCATE_KEEPS_ROLLOUT.applies(version):
        assert version is not None
        rollout = trained
        if rollout_given is not None and num("--rollout-num-gpus") != trained:
            notes.append(
                COLOCATE_KEEPS_ROLLOUT.warning(
                    version,
                    f"slime {version.version} overrides --rollout-num-gpus {num('--rollout-num-gpus')} to {trained}",
                )
            )
    elif debug_rollout or colocate:
        rollout = actor if rollout_given is None else num("--rollout-num-gpus")
    elif external:
        rollout = 0
    elif rollout_given is None:
        raise command.error(
            entry,
            "without --colocate slime adds --rollout-num-gpus to the actor's GPUs, and it is not given "
            "(slime fails: TypeError: unsupported operand type(s) for +: 'int' and 'NoneType')",
            hint="give --rollout-num-gpus N (the GPUs of the SGLang engines), or --colocate to share the actor's",
        )
    else:
        rollout = num("--rollout-num-gpus")
    if debug_rollout and rollout_given is not None:  # slime resizes its actor to the rollout's GPUs
        actor = (rollout // min(8, rollout)) * min(8, rollout) if rollout else 0
    if debug_train:
        size, offset = trained, 0
    elif external:
        size, offset = actor, actor
        notes.append("slime: external SGLang engines (--rollout-external-engine-addrs): only the actor is placed")
    elif debug_rollout:
        size, offset = rollout, 0
    elif colocate:
        size, offset = max(trained, rollout), 0
    else:
        size, offset = trained + rollout, trained
    slime_gpn = num(gpn_flag)
    engine_groups = _engine_groups(command, at, args, rollout, per_engine, pp, notes)
    # each group's engines from its first GPU on: (group, its engine parts' first GPUs counted from the rollout's)
    group_parts: list[tuple[ServerGroup, list[int]]] = []
    for group in engine_groups:
        if group.worker_type == "placeholder":
            continue
        on_node = min(group.gpus_per_engine, slime_gpn)
        count = group.num_gpus // on_node
        if group.num_gpus % on_node:
            notes.append(
                f"slime: {group.words} has {group.num_gpus} GPUs, not a multiple of "
                f"{on_node} GPUs per engine on a node: {count} engine part(s), {group.num_gpus % on_node} GPU(s) of "
                "the group unused"
            )
        nodes_per_engine = max(1, group.gpus_per_engine // slime_gpn)
        if count % nodes_per_engine:
            raise SpecError(
                f"slime: {count} engine parts of {on_node} GPUs ({group.words}) do not "
                f"make whole engines of {group.gpus_per_engine} GPUs ({nodes_per_engine} nodes each)",
                hint=f"give the group a multiple of {group.gpus_per_engine} GPUs",
                location=group.location,
            )
        group_parts.append((group, [group.start + i * on_node for i in range(count)]))
    # the node groups: the actor's (default) and the rollout's
    slurm_view = root.get("slurm")
    options = slurm_job_options(slurm_view, frozenset({"pools"}))
    pools = _pools(slurm_view)
    base = slurm_facts(slurm_view)
    where = slurm_view if slurm_view is not None else root
    split = pools["rollout"] != pools["actor"]
    if split and (colocate or offset == 0 or not rollout):
        raise (slurm_view.require("pools") if slurm_view is not None else root).error(
            "slurm.pools puts slime's rollout on another node group than its actor, but "
            + ("--colocate shares the actor's GPUs" if colocate else "the command places no separate rollout"),
            hint="remove slurm.pools, or disaggregate (drop --colocate, give --rollout-num-gpus)",
        )
    counts = [trained, rollout] if split else [size]
    labels = [pools["actor"], pools["rollout"]] if split else [pools["actor"]]
    groups: list[NodeGroup] = []
    gpns: list[int] = []
    for label, count in zip(labels, counts, strict=True):
        facts = base if label == "default" else slurm_facts(slurm_view, label, base)
        gpn = _gpus_per_node(facts, label, where, site_gpus, notes, slime_gpn)
        if gpn != slime_gpn and (rollout and (not split or label == pools["rollout"])):
            notes.append(
                f"node group {label!r} has {gpn} GPUs per node but slime's --num-gpus-per-node is {slime_gpn}: "
                "slime lays its engines out by --num-gpus-per-node"
            )
        nodes = limits.nodes(max(1, math.ceil(count / gpn)), where.location(), f"nodes of node group {label!r}")
        if count % gpn:
            notes.append(
                f"slime's placement group leaves {nodes * gpn - count} GPU(s) of node group {label!r} free, on its "
                "last node (the group's bundles are steered to their planned nodes)"
            )
        groups.append(facts_node_group(label, facts, nodes, gpn, where))
        gpns.append(gpn)
    if split:
        notes.append(
            f"slime sorts its one placement group by node IP: the rollout is on {pools['rollout']!r} only when "
            f"every {pools['rollout']!r} node's IP sorts after every {pools['actor']!r} node's"
        )
    notes.append(
        "slime's placement group is steered: bundle k goes to the node of logical GPU k, so each node holds its "
        "planned count; slime then orders GPUs by (node IP as numbers, GPU id): the job numbers each node group's "
        "nodes in that order when it starts (runtime/ip_order.py), and checks once the Ray nodes joined that the "
        "groups' addresses sort in node rank order too"
    )
    cluster = build_cluster(tuple(groups), where)

    def gpu(logical: int) -> tuple[int, int]:
        """(node group index, GPU index in that group's space) of slime's logical GPU."""
        if split and logical >= trained:
            return 1, logical - trained
        return 0, logical

    entries: list[PlacementEntry] = []
    components: dict[str, ComponentSpec] = {}
    if actor:
        lists = tuple((gpu(r)[1],) for r in range(actor))
        loc = command.location(at["--actor-num-nodes"])
        entries.append(PlacementEntry(("actor",), (labels[0],), None, lists, loc))
        trainer = _megatron_sizes(command, args, at, notes)
        components["actor"] = replace(trainer, name="actor")
        if use_critic:  # on the actor's GPUs, or (slime 0.2) on its own after them; Megatron's args are the actor's
            own = tuple((gpu(actor + r)[1],) for r in range(critic)) if critic else lists
            entries.append(PlacementEntry(("critic",), (labels[0],), None, own, loc))
            components["critic"] = replace(trainer, name="critic")
    group_label = labels[1] if split else labels[0]
    space_gpn = gpns[-1]
    names = component_names(tuple(g for g, _ in group_parts))
    for component, (group, firsts) in zip(names, group_parts, strict=True):
        on_node = min(group.gpus_per_engine, slime_gpn)
        parts = []
        for i, first_logical in enumerate(firsts):
            first = gpu(offset + first_logical)[1]
            if first % space_gpn + on_node > space_gpn:
                raise SpecError(
                    f"slime's engine {i} of {group.words} starts at GPU "
                    f"{first % space_gpn} of a {space_gpn}-GPU node and needs {on_node} GPUs there: slime starts it "
                    f"on GPUs {first % space_gpn}..{first % space_gpn + on_node - 1} of that node, past the node's "
                    "last GPU or on GPUs of the next node's bundles",
                    hint="make the rollout offset (the actor's GPUs, when not colocated) and the GPUs before each "
                    "group multiples of its GPUs per engine",
                    location=group.location,
                )
            parts.append(tuple(first + k for k in range(on_node)))
        nodes_per_engine = max(1, group.gpus_per_engine // slime_gpn)
        workers = tuple(
            tuple(range(e * nodes_per_engine, (e + 1) * nodes_per_engine))
            for e in range(len(parts) // nodes_per_engine)
        )
        spanning = SpanningWorkers(workers, group.gpus_per_engine, "slime") if nodes_per_engine > 1 else None
        entries.append(
            PlacementEntry((component,), (group_label,), None, tuple(parts), group.location, spanning=spanning)
        )
        # an SGLang engine is its group's GPUs per engine, whatever --sglang-ep-size/--sglang-dp-size cut inside it
        # (sglang_engine.py: tp_size x pp_size of one server); named where wider than its tensor-parallel group
        wide = group.gpus_per_engine if group.gpus_per_engine > group.tensor_parallel else None
        components[component] = ComponentSpec(
            component, tensor_parallel_size=group.tensor_parallel, gpus_per_engine=wide
        )
    name, given_components = hpcplace_block(root, set(components), blocks.path)
    for role, settings in given_components.items():
        components[role] = with_block_settings(components[role], settings)
    return ExperimentSpec(
        name,
        cluster,
        tuple(entries),
        components,
        blocks.path,
        "slime",
        options,
        notes=tuple(notes),
        launch=LaunchSpec(driver=driver),  # load_spec makes it the Ray mode's; () keeps the whole command
        framework_version=planned_version(version, release.version),
        steer=(
            SteerRule(
                "slime's placement group",
                "bundle",
                tuple(cluster.node_ranks(g)[i // gpns[g]] for g, i in map(gpu, range(size))),
                ordinal=0,
            ),
        )
        if size
        else (),
    )


def _megatron_sizes(
    command: FrameworkCommand, args: dict[str, Value | None], at: dict[str, int], notes: list[str]
) -> ComponentSpec:
    """The Megatron actor's sizes as Megatron's parser reads the command: TP and PP, and EP and ETP where it
    has expert parallelism; none with the fsdp backend (slime 0.2.0 to 0.2.2)."""
    if args["--train-backend"] not in (None, "megatron"):
        return ComponentSpec("actor")
    for key in MEGATRON_FLAGS:
        value = args[key]
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise command.error(at[key], f"{key} is {value!r}", hint="1 or more")
    if args["--megatron-config-path"] is not None:
        notes.append(
            f"slime: --megatron-config-path {args['--megatron-config-path']}: its per-role overrides are not read; the "
            "actor's and critic's parallel sizes are planned from the command's Megatron flags"
        )
    tp, pp = args["--tensor-model-parallel-size"], args["--pipeline-model-parallel-size"]
    ep, etp = args["--expert-model-parallel-size"], args["--expert-tensor-parallel-size"]
    assert isinstance(tp, int) and isinstance(pp, int) and isinstance(ep, int)  # checked above, defaults 1
    experts = ep > 1
    return ComponentSpec(
        "actor",
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        expert_parallel_size=ep if experts else None,
        expert_tensor_parallel_size=(etp if isinstance(etp, int) else tp) if experts else None,
    )


def _engine_groups(
    command: FrameworkCommand,
    at: dict[str, int],
    args: dict[str, Value | None],
    rollout: int,
    per_engine: int,
    pp: int,
    notes: list[str],
) -> tuple[ServerGroup, ...]:
    """slime's server groups over the rollout's GPUs (rollout.py's start_rollout_servers): --sglang-config's, the
    prefill and decode groups of --prefill-num-servers (SglangConfig.from_prefill_num_servers), or one group of
    --rollout-num-gpus engines."""
    if not rollout:
        return ()
    tp = max(1, per_engine // pp)
    if args["--sglang-config"] is not None:
        config = read_sglang_config(command, at["--sglang-config"], str(args["--sglang-config"]), per_engine, pp)
        if config.total_gpus != rollout:
            given = args["--rollout-num-gpus"] is not None
            raise command.error(
                at["--rollout-num-gpus" if given else "--sglang-config"],
                f"slime: sglang_config total GPUs ({config.total_gpus}) != rollout_num_gpus ({rollout}) (its assert: "
                f"the server groups of {config.path} must hold the rollout's GPUs"
                + ("" if given else ", the actor's with --colocate")
                + ")",
                hint=f"give --rollout-num-gpus {config.total_gpus}, or change the groups' num_gpus",
            )
        models = len({g.model for g in config.groups})
        notes.append(
            f"slime: --sglang-config {config.path}: {len(config.groups)} server group(s) of {models} model(s), each "
            "on the next GPUs of the rollout in slime's order: "
            + "; ".join(f"{g.words} on GPUs {g.start}..{g.start + g.num_gpus - 1}" for g in config.groups)
        )
        return config.groups
    if args["--prefill-num-servers"] is not None:
        servers = args["--prefill-num-servers"]
        prefill = (servers if isinstance(servers, int) else 0) * per_engine
        if rollout - prefill <= 0:
            raise command.error(
                at["--prefill-num-servers"],
                f"slime: No decode GPUs: total {rollout}, prefill {prefill} (its assert: --prefill-num-servers x "
                "--rollout-num-gpus-per-engine must leave GPUs of --rollout-num-gpus to decode)",
            )
        notes.append(
            f"slime: prefill-decode disaggregation (--prefill-num-servers): {prefill} GPU(s) of prefill engines, then "
            f"{rollout - prefill} of decode engines, {per_engine} GPU(s) each (components rollout_prefill, "
            "rollout_decode)"
        )
        where = command.location(at["--prefill-num-servers"])
        return (
            ServerGroup("default", "prefill", 0, prefill, per_engine, pp, tp, where, "the prefill group"),
            ServerGroup("default", "decode", prefill, rollout - prefill, per_engine, pp, tp, where, "the decode group"),
        )
    where = command.location(at["--rollout-num-gpus"])
    return (ServerGroup("default", "regular", 0, rollout, per_engine, pp, tp, where, "the rollout"),)


def _entry(command: FrameworkCommand, notes: list[str]) -> int:
    pattern = COMMAND_FORMATS["slime"].entry_point
    for i, word in enumerate(command.argv):
        if pattern.match(word) and _ENTRY.match(word):
            return i
    raise command.error(0, "the command runs no slime entry point", hint="the driver is `python3 train.py ...`")


def _read_flags(
    command: FrameworkCommand, entry: int, release: Release, version: FrameworkVersion | None, notes: list[str]
) -> tuple[dict[str, Value | None], dict[str, int]]:
    """The placement flags as the release that runs the command reads them (its own table and defaults; a flag
    it lacks is unset), and the word each was given at. A flag of another slime release that this one lacks is
    refused where this release's parser refuses it (UNKNOWN_FLAGS_IGNORED), else noted as ignored; `--sglang-*`
    words are left to SGLang's own server arguments, which older releases pass on under that prefix."""
    note_release("slime", "scripts/gen_slime_flags.py", release.version, releases()[-1].version, version, notes)
    label = f"slime {release.version}"
    table = {k: release.flags[k] for k in (*PLACEMENT_FLAGS, *BACKEND_FLAGS) if release.has(k)} | dict(MEGATRON_FLAGS)
    others = {name for r in releases() for name in r.flags} - set(release.flags)
    for i, word in enumerate(command.argv[entry + 1 :], entry + 1):
        name = word.split("=", 1)[0]
        if name not in others:
            continue
        having = releases_with(name)
        where = f"slime {having[0]}" + (f" to {having[-1]}" if having[-1] != having[0] else "") + " have it"
        if name.startswith("--sglang-"):
            if name in PLACEMENT_FLAGS:
                notes.append(
                    f"{label} has no {name} of its own ({where}): it passes every --sglang-* word on to SGLang's "
                    "server arguments, and plans no engines by it"
                )
            continue
        if not UNKNOWN_FLAGS_IGNORED.applies(version):
            raise command.error(
                i,
                f"{label}'s parser has no flag {name} (Megatron's argparse: unrecognized arguments); {where}",
                hint=f"remove it (slime {having[0]} or newer reads it)"
                if version is not None and version.source == "stated"
                else f'remove it, or state the slime release that runs the command: `hpcplace: {{{KEY}: "{having[-1]}"}}`',
            )
        if name in PLACEMENT_FLAGS:
            notes.append(f"{label} has no flag {name} and ignores it ({where}): planned without it")
    given = parse_flags(
        command,
        entry + 1,
        table,
        label,
        known=frozenset(release.flags) | others,  # another release's flag is no misspelling (above)
        near=tuple(n for n in NEAR_MISSES if release.has(n)),
        abbrev=False,
    )
    defaults = {**release.defaults, **MEGATRON_DEFAULTS}
    names = (*PLACEMENT_FLAGS, *MEGATRON_FLAGS, *BACKEND_FLAGS)
    args = {k: (given[k].value if k in given else defaults.get(k)) for k in names}
    at = {k: (given[k].index if k in given else entry) for k in names}
    return args, at


def _pools(slurm: View | None) -> dict[str, str]:
    out = dict.fromkeys(POOLS, "default")
    view = slurm.get("pools") if slurm is not None else None
    if slurm is None or view is None or view.value is None:
        return out
    if not isinstance(view.value, dict):
        raise view.error("slurm.pools maps slime's actor/rollout to a node group", hint="e.g. pools: {rollout: gen}")
    groups = slurm.get("node_groups")
    labels = [str(k) for k, _ in groups.items()] if groups is not None else []
    for key, child in view.items():
        if str(key) not in POOLS:
            near = closest(str(key), POOLS)
            raise child.key_error(
                f"slurm.pools: {key!r} is not a slime pool",
                hint=(f"did you mean {near!r}? " if near else "") + "pools: actor, rollout",
            )
        label = child.str()
        if label != "default" and label not in labels:
            raise child.error(
                f"slurm.pools.{key}: node group {label!r} is not in slurm.node_groups",
                hint=f"add `node_groups: {{{label}: {{partition: ..., gpus_per_node: 8}}}}` to the slurm block",
            )
        out[str(key)] = label
    return out


def _gpus_per_node(
    facts: SlurmFacts, label: str, view: View, site_gpus: SiteGpus | None, notes: list[str], slime_gpn: int
) -> int:
    if facts.gpus_per_node is not None:
        if facts.gpus_per_node < 1:
            raise view.error(f"node group {label!r}: gpus_per_node is 0; slime places every role on GPUs")
        return limits.gpus_per_node(facts.gpus_per_node, view.location(), "gpus_per_node")
    site = site_gpus(facts.partition, facts.gpu_type) if site_gpus is not None else None
    if site is not None and site.count is not None:
        notes.append(f"node group {label!r}: {site.count} GPUs per node, {site.source}")
        return site.count
    notes.append(f"node group {label!r}: {slime_gpn} GPUs per node, slime's --num-gpus-per-node")
    return slime_gpn
