"""OpenRLHF's `python3 -m openrlhf.cli.train_ppo_ray ...` (also wrapped as `ray job submit ... -- python3 -m
...`), read as its argparse parser and `train()` read it, planned as its Ray placement places it.

What OpenRLHF's train() does (openrlhf/cli/train_ppo_ray.py, alike in every release read, 0.9.0 to 0.11.2, under
each release's own flag names: openrlhf_flags.py): it makes Ray placement groups of `{GPU: 1, CPU: 1}` bundles with strategy PACK, in this order:

1. with --train.colocate_actor_ref or --train.colocate_all, one group of actor.num_nodes x num_gpus_per_node
   bundles that the actor and the reference model share (0.2 GPU per actor: the same GPU);
2. the vLLM engines (--vllm.num_engines > 0): in that shared group when colocate_all and not async (engine i
   on bundles get_bundle_indices(pg, i, tp)), else a group of their own of num_engines x tp bundles;
3. actor, then ref (when --algo.kl.init_coef > 0): RayActorGroup, rank r on bundle r of the shared group,
   else of a group of its own; with 1 GPU per node and no shared group no group at all (Ray places each
   1-GPU actor);
4. critic (estimator gae: its model defaults to the reward model's, or the actor's with a remote reward), with
   the reward model in a group of critic.num_nodes x num_gpus_per_node bundles under
   --train.colocate_critic_reward, in the shared group of step 1 under colocate_all, else alone;
5. the reward model (unless --reward.remote_url or --train.agent_func_path): like the critic.

The groups name no node and no custom resource: hpcplace plans what Ray's PACK does on the planned cluster (a
group that fits on one node goes to the least loaded node that holds it, a larger one fills the least loaded nodes
in turn; GPUs in ascending order; among equally loaded nodes, the lowest node rank), then steers each bundle (and
each 1-GPU actor placed without a group) to that node (steer_rules, runtime/steer_hook.py): the node ranks are
exact by construction, its GPU sets and which roles share a GPU are exact. See docs/formats/openrlhf.md."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from packaging.version import Version

from hpcplace.config import limits
from hpcplace.config.cluster import Cluster, NodeGroup
from hpcplace.config.formats import release_data
from hpcplace.config.formats.argv import Flag, Given, Value, parse_flags, submitted_command
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
from hpcplace.config.formats.openrlhf_flags import Release, release_for, releases, releases_with
from hpcplace.config.framework_version import KEY, FrameworkVersion, PlannedVersion, resolve_version
from hpcplace.config.launch import LaunchSpec
from hpcplace.config.spec import (
    ComponentSpec,
    ExperimentSpec,
    PlacementEntry,
    SpanningWorkers,
    build_cluster,
)
from hpcplace.config.steer import SteerRule
from hpcplace.config.yaml_source import View, YamlDocument, closest
from hpcplace.errors import SpecError
from hpcplace.runtime.openrlhf_watch import ROLE_CLASSES

# the commit that dotted train_ppo_ray's flags by section (--actor_num_nodes -> --actor.num_nodes)
DOTTED_FLAGS = "OpenRLHF/OpenRLHF ed62d0e2 (2026-04-19), first released in v0.10.2"
HELP_FLAGS = {"-h": Flag("help"), "--help": Flag("help")}  # argparse's own, in every parser OpenRLHF has

# The flags placement reads: 0.10.2+ name -> the name before 0.10.2 (their defaults, each release's own, are in
# openrlhf_releases.json).
PLACEMENT_FLAGS: dict[str, str] = {
    "--actor.num_nodes": "--actor_num_nodes",
    "--actor.num_gpus_per_node": "--actor_num_gpus_per_node",
    "--ref.num_nodes": "--ref_num_nodes",
    "--ref.num_gpus_per_node": "--ref_num_gpus_per_node",
    "--critic.num_nodes": "--critic_num_nodes",
    "--critic.num_gpus_per_node": "--critic_num_gpus_per_node",
    "--reward.num_nodes": "--reward_num_nodes",
    "--reward.num_gpus_per_node": "--reward_num_gpus_per_node",
    "--vllm.num_engines": "--vllm_num_engines",
    "--vllm.tensor_parallel_size": "--vllm_tensor_parallel_size",
    "--vllm.enable_sleep": "--vllm_enable_sleep",
    "--train.colocate_actor_ref": "--colocate_actor_ref",
    "--train.colocate_critic_reward": "--colocate_critic_reward",
    "--train.colocate_all": "--colocate_all_models",
    "--train.async_enable": "--async_train",
    "--train.agent_func_path": "--agent_func_path",
    "--train.dynamic_batch_enable": "--use_dynamic_batch",
    "--algo.kl.init_coef": "--init_kl_coef",
    "--algo.advantage.estimator": "--advantage_estimator",
    "--actor.model_name_or_path": "--pretrain",
    "--critic.model_name_or_path": "--critic_pretrain",
    "--reward.model_name_or_path": "--reward_pretrain",
    "--reward.remote_url": "--remote_rm_url",
    "--rollout.n_samples_per_prompt": "--n_samples_per_prompt",
    "--rollout.batch_size": "--rollout_batch_size",
    "--rollout.micro_batch_size": "--micro_rollout_batch_size",
    "--ds.ring_attn_size": "--ring_attn_size",
    "--ds.tensor_parallel_size": "--ds_tensor_parallel_size",
    "--ds.packing_samples": "--packing_samples",
    "--data.max_images_per_prompt": "--max_images_per_prompt",
}
ROLES = ("actor", "ref", "critic", "reward", "vllm")
# the entry points that are Ray drivers; the others (train_sft, train_dpo, train_rm) run under deepspeed
_RAY_ENTRY = re.compile(r"(^|.*/)openrlhf[./]cli[./]train_ppo_ray(\.py)?$")


@dataclass(frozen=True)
class Args:
    """The parsed command: every placement flag's value (given or default), by its 0.10.2+ name, and the
    index of the word that set it (the entry point's word for a default)."""

    values: dict[str, Value | None]
    index: dict[str, int]
    names: dict[str, str]  # 0.10.2+ name -> the name the command's version spells it

    def __call__(self, key: str) -> Value | None:
        return self.values[key]

    def int(self, key: str) -> int:
        value = self.values[key]
        assert isinstance(value, int) and not isinstance(value, bool)
        return value

    def on(self, key: str) -> bool:
        return bool(self.values[key])


@dataclass(frozen=True)
class Group:
    """A placement group OpenRLHF makes (or a set of free 1-GPU actors, `pack` False), and the roles in it."""

    name: str
    size: int
    roles: tuple[str, ...]
    pack: bool = True


def parse(command: FrameworkCommand, blocks: YamlDocument, site_gpus: SiteGpus | None) -> ExperimentSpec:
    root = blocks.root()
    notes: list[str] = []
    entry = entry_index(command)
    version = resolve_version("openrlhf", root, notes)
    args = parse_args(command, entry, version, notes)
    driver = submitted_command(command, entry, notes)
    groups, sizes = groups_of(command, entry, args, notes)
    slurm_view = root.get("slurm")
    options = slurm_job_options(slurm_view, frozenset({"pools"}))
    role_group = _role_groups(slurm_view, sizes, groups)
    base = slurm_facts(slurm_view)
    labels = sorted({role_group[r] for r in sizes}, key=lambda label: (label != "default", label))
    node_groups: list[NodeGroup] = []
    entries: list[PlacementEntry] = []
    components: dict[str, ComponentSpec] = {}
    where_placed: dict[str, tuple[int, list[tuple[int, int]]]] = {}  # group -> (node group, its bundles)
    for label in labels:
        facts = base if label == "default" else slurm_facts(slurm_view, label, base)
        where = slurm_view if slurm_view is not None else root
        gpn = gpus_per_node(facts, label, where, site_gpus, notes)
        mine = [g for g in groups if any(role_group[r] == label for r in g.roles)]
        need = sum(g.size for g in mine)
        nodes = limits.nodes(max(1, math.ceil(need / gpn)), where.location(), f"nodes of node group {label!r}")
        node_groups.append(facts_node_group(label, facts, nodes, gpn, where))
        placed = _pack(mine, nodes, gpn, command, entry)
        where_placed.update({g.name: (len(node_groups) - 1, placed[g.name]) for g in mine})
        for g in mine:
            for role in g.roles:
                lists = role_lists(role, g, placed[g.name], args, sizes)
                spanning = _spanning(role, lists, gpn)
                flat = tuple(tuple(p) for worker in lists for p in _per_node(worker, gpn))
                entries.append(
                    PlacementEntry(
                        (role,),
                        (label,),
                        None,
                        flat,
                        command.location(args.index.get(_size_key(role), entry)),
                        spanning=spanning,
                    )
                )
                tp = args.int("--vllm.tensor_parallel_size") if role == "vllm" else None
                components[role] = ComponentSpec(role, tensor_parallel_size=tp)
        _note_spread(mine, placed, gpn, args, notes)
    cluster = build_cluster(tuple(node_groups), slurm_view if slurm_view is not None else root)
    notes.append(
        "OpenRLHF's placement groups (and its 1-GPU actors placed without one) are steered: each bundle goes to "
        "the planned node of its rank, the groups told apart by the order train() makes them "
        "(docs/formats/openrlhf.md)"
    )
    order = [e.components[0] for e in entries]
    name, given = hpcplace_block(root, set(order), blocks.path)
    for role, settings in given.items():
        components[role] = with_block_settings(components[role], settings)
    return ExperimentSpec(
        name,
        cluster,
        tuple(entries),
        components,
        blocks.path,
        "openrlhf",
        options,
        notes=tuple(notes),
        launch=LaunchSpec(driver=driver),  # load_spec makes it the Ray mode's; () keeps the whole command
        steer=steer_rules(groups, where_placed, cluster),
        framework_version=planned_version(version),
    )


def planned_version(version: FrameworkVersion | None) -> PlannedVersion:
    """The version plan.json records (release_data.planned_version), read with openrlhf_flags.release_for."""
    return release_data.planned_version(version, release_for(version.version if version is not None else None).version)


def note_release(release: Release, version: FrameworkVersion | None, notes: list[str]) -> None:
    """Say which release's flags are read, where it is not the version that runs the command."""
    release_data.note_release(
        "OpenRLHF", "scripts/gen_openrlhf_flags.py", release.version, releases()[-1].version, version, notes
    )


def steer_rules(
    groups: list[Group], placed: dict[str, tuple[int, list[tuple[int, int]]]], cluster: Cluster
) -> tuple[SteerRule, ...]:
    """OpenRLHF's groups are unnamed: the n-th placement group train() makes (groups_of's order, the `pack` ones)
    has its bundle k on the planned node of bundle k; a role placed without a group (1 GPU per node) has its
    actor of rank r (the constructor's second argument) on the planned node of rank r, told by its class."""
    rules = []
    ordinal = 0
    for g in groups:
        index, bundles = placed[g.name]
        nodes = tuple(cluster.node_ranks(index)[node] for node, _ in bundles)
        what = f"OpenRLHF {'+'.join(g.roles)}"
        if g.pack:
            rules.append(SteerRule(what, "bundle", nodes, ordinal=ordinal))
            ordinal += 1
            continue
        for cls in sorted(c for c, role in ROLE_CLASSES.items() if role in g.roles):
            rules.append(SteerRule(what, "rank", nodes, actor_class=cls, rank_arg=1))
    return tuple(rules)


def entry_index(command: FrameworkCommand) -> int:
    """The index of the entry point's word; refuses the entry points that are not Ray drivers."""
    pattern = COMMAND_FORMATS["openrlhf"].entry_point
    for i, word in enumerate(command.argv):
        if pattern.match(word):
            if not _RAY_ENTRY.match(word):
                raise command.error(
                    i,
                    f"{word} is not OpenRLHF's Ray driver: it runs under the deepspeed launcher, with no Ray "
                    "placement to plan",
                    hint="hpcplace reads `python3 -m openrlhf.cli.train_ppo_ray ...`; run the deepspeed "
                    "entry points in hpcplace's steps mode (docs/formats/native.md)",
                )
            if i > 0 and command.argv[i - 1] not in ("-m",) and not word.endswith(".py"):
                raise command.error(i, f"{word} is a module: run it as `python3 -m {word}`")
            return i
    raise command.error(
        0,
        "the command runs no OpenRLHF entry point",
        hint="the driver is `python3 -m openrlhf.cli.train_ppo_ray --actor.num_nodes 1 ...`",
    )


def parse_args(command: FrameworkCommand, entry: int, version: FrameworkVersion | None, notes: list[str]) -> Args:
    """The command read with the flags of the release that runs it (openrlhf_flags.release_for): a flag is
    refused only where that release's argparse refuses it, and every hint names a flag of that release."""
    release = release_for(version.version if version is not None else None)
    note_release(release, version, notes)
    label = f"OpenRLHF {release.version}"
    suggest = version is None or version.source != "stated"
    given = parse_flags(
        command, entry + 1, {**release.train_ppo_ray, **HELP_FLAGS}, label, other_names(release.version, suggest)
    )
    dotted = release.has("--actor.num_nodes")
    names = {new: (new if dotted else old) for new, old in PLACEMENT_FLAGS.items()}
    values: dict[str, Value | None] = {}
    index: dict[str, int] = {}
    for new, name in names.items():
        got: Given | None = given.get(name)
        values[new] = got.value if got is not None else release.defaults.get(name)  # absent from the release: unset
        index[new] = got.index if got is not None else entry
    return Args(values, index, names)


@functools.cache
def other_names(read_as: Version, suggest: bool, entry: str = "train_ppo_ray") -> dict[str, str]:
    """A flag of another release's `entry` parser that release `read_as`'s lacks -> why it is refused: the
    releases that have it (and for a placement flag renamed by ed62d0e2, its name in `read_as`), and
    (`suggest`: the version was not stated) how to state one of them."""
    release = release_for(read_as)
    out: dict[str, str] = {}
    label = f"OpenRLHF {release.version}" + ("" if entry == "train_ppo_ray" else f" {entry}")
    renames = (
        {**PLACEMENT_FLAGS, **{old: new for new, old in PLACEMENT_FLAGS.items()}} if entry == "train_ppo_ray" else {}
    )
    for other in releases():
        for name in other.flags(entry):
            if name in out or name in release.flags(entry):
                continue
            having = releases_with(name, entry)
            message = (
                f"{label}'s parser has no flag {name} (argparse: unrecognized arguments); "
                f"OpenRLHF {_spans(having)} {'has' if len(having) == 1 else 'have'} it"
            )
            renamed = renames.get(name)
            if renamed is not None and release.has(renamed):
                message += f"; {label} calls it {renamed} ({DOTTED_FLAGS})"
            if suggest:
                message += f' (if one of them runs this command, state it: `hpcplace: {{{KEY}: "{having[-1]}"}}`)'
            out[name] = message
    return out


def _spans(versions: list[Version]) -> str:
    """Releases as runs of consecutive releases read: `0.9.0 to 0.10.1.post2, 0.11.0`."""
    known = [r.version for r in releases()]
    runs: list[list[Version]] = []
    for v in versions:
        if runs and known.index(v) == known.index(runs[-1][-1]) + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]} to {r[-1]}" for r in runs)


def groups_of(
    command: FrameworkCommand, entry: int, args: Args, notes: list[str]
) -> tuple[list[Group], dict[str, int]]:
    """OpenRLHF's placement groups in the order train() makes them, after its argument checks (each refusal
    is the framework's own assert or exception, with its message)."""

    def refuse(key: str, message: str, hint: str | None = None) -> SpecError:
        return command.error(args.index[key], message, hint=hint)

    def n(key: str) -> str:
        return args.names[key]

    for role in ("actor", "ref", "critic", "reward"):
        for what in ("num_nodes", "num_gpus_per_node"):
            key = f"--{role}.{what}"
            if args.int(key) < 1:
                raise refuse(
                    key,
                    f"{n(key)} is {args.int(key)}: OpenRLHF's {role} group would have no GPU "
                    "(Ray refuses a placement group without bundles)",
                    hint=f"give {n(key)} 1 or more",
                )
    engines_value = args("--vllm.num_engines")
    engines = engines_value if isinstance(engines_value, int) else 0
    tp = args.int("--vllm.tensor_parallel_size")
    if engines < 0:
        raise refuse("--vllm.num_engines", f"{n('--vllm.num_engines')} is {engines}", hint="0 or more (0: no vLLM)")
    if engines > 0 and tp < 1:
        raise refuse("--vllm.tensor_parallel_size", f"{n('--vllm.tensor_parallel_size')} is {tp}", hint="1 or more")
    colocate_all = args.on("--train.colocate_all")
    async_ = args.on("--train.async_enable")
    estimator = args("--algo.advantage.estimator")
    remote = args("--reward.remote_url") or args("--train.agent_func_path")
    critic_model = args("--critic.model_name_or_path")
    if estimator != "gae":
        critic_model = None
    elif critic_model is None:
        if not remote:
            reward_model = args("--reward.model_name_or_path")
            if reward_model is None:
                raise refuse(
                    "--algo.advantage.estimator",
                    f"with the gae advantage estimator (the default) and no {n('--critic.model_name_or_path')}, "
                    f"OpenRLHF takes the critic's model from {n('--reward.model_name_or_path')}, which is not "
                    "given: it fails at its start (AttributeError: 'NoneType' object has no attribute 'split')",
                    hint=f"give {n('--reward.model_name_or_path')} (or {n('--critic.model_name_or_path')}), or "
                    f"another estimator: {n('--algo.advantage.estimator')} reinforce_baseline",
                )
            critic_model = str(reward_model).split(",")[0]
        else:
            critic_model = args("--actor.model_name_or_path")
    if args.on("--data.max_images_per_prompt") and critic_model is not None:
        raise refuse(
            "--data.max_images_per_prompt",
            "OpenRLHF: VLM training does not support critic model (its assert)",
            hint=f"use {n('--algo.advantage.estimator')} other than gae (e.g. reinforce_baseline, rloo, group_norm)",
        )
    n_samples = args.int("--rollout.n_samples_per_prompt")
    if estimator in ("rloo", "reinforce_baseline", "group_norm", "dr_grpo") and n_samples <= 1:
        raise refuse(
            "--algo.advantage.estimator",
            f"OpenRLHF: {estimator} requires n_samples_per_prompt > 1 (its assert)",
            hint=f"give {n('--rollout.n_samples_per_prompt')} 2 or more",
        )
    packing = (
        args.on("--ds.packing_samples")
        or args.int("--ds.ring_attn_size") > 1
        or args.on("--train.dynamic_batch_enable")
    )
    if packing and not engines:
        key = "--ds.packing_samples" if args.on("--ds.packing_samples") else "--vllm.num_engines"
        raise refuse(
            key,
            "OpenRLHF: Only support `--packing_samples` with vLLM (its assert; packing is also switched on by "
            f"{n('--ds.ring_attn_size')} > 1 and {n('--train.dynamic_batch_enable')})",
            hint=f"give {n('--vllm.num_engines')} 1 or more",
        )
    if async_ and args.on("--vllm.enable_sleep") and colocate_all:
        raise refuse(
            "--vllm.enable_sleep", "OpenRLHF: Async RLHF is not supported with --vllm.enable_sleep (its assert)"
        )
    actor = args.int("--actor.num_nodes") * args.int("--actor.num_gpus_per_node")
    effective = actor // args.int("--ds.ring_attn_size") // args.int("--ds.tensor_parallel_size")
    batches = n_samples * args.int("--rollout.batch_size") // max(args.int("--rollout.micro_batch_size"), 1)
    if batches < effective:
        raise refuse(
            "--rollout.batch_size",
            f"OpenRLHF: The number of sample batches must be greater than or equal to the effective number of "
            f"actor processes (its assert: n_samples_per_prompt x rollout batch size // micro batch size = "
            f"{batches} < {effective} actor processes)",
            hint=f"raise {n('--rollout.batch_size')} or {n('--rollout.n_samples_per_prompt')}",
        )
    kl = args("--algo.kl.init_coef")
    with_ref = isinstance(kl, (int, float)) and kl > 0
    size = {r: args.int(f"--{r}.num_nodes") * args.int(f"--{r}.num_gpus_per_node") for r in ROLES if r != "vllm"}
    size["vllm"] = engines * tp
    groups: list[Group] = []
    shared: list[str] = []
    if args.on("--train.colocate_actor_ref") or colocate_all:
        key = "--train.colocate_all" if colocate_all else "--train.colocate_actor_ref"
        if with_ref and (
            args.int("--actor.num_nodes") != args.int("--ref.num_nodes")
            or args.int("--actor.num_gpus_per_node") != args.int("--ref.num_gpus_per_node")
        ):
            raise refuse(
                key,
                "OpenRLHF: num_nodes and num_gpus_per_node must be the same when colocate actor and ref model "
                f"(its assert: actor {args.int('--actor.num_nodes')}x{args.int('--actor.num_gpus_per_node')}, "
                f"ref {args.int('--ref.num_nodes')}x{args.int('--ref.num_gpus_per_node')})",
                hint=f"give {n('--ref.num_nodes')}/{n('--ref.num_gpus_per_node')} the actor's values",
            )
        shared = ["actor"] + (["ref"] if with_ref else [])
    hybrid = engines > 0 and colocate_all and not async_
    if hybrid and actor != engines * tp:
        raise refuse(
            "--vllm.num_engines",
            f"OpenRLHF: actor_num_nodes * actor_num_gpus_per_node must be equal to vllm_num_engines * "
            f"vllm_tensor_parallel_size, got {actor} and {engines * tp} (its assert, with colocate_all)",
            hint=f"make {n('--vllm.num_engines')} x {n('--vllm.tensor_parallel_size')} = {actor}",
        )
    if colocate_all and async_:
        notes.append("OpenRLHF: colocate_all in async mode colocates only the DeepSpeed models, not vLLM")
    with_critic = critic_model is not None
    with_reward = not remote
    crc = with_critic and args.on("--train.colocate_critic_reward")
    if crc and (
        args.int("--critic.num_nodes") != args.int("--reward.num_nodes")
        or args.int("--critic.num_gpus_per_node") != args.int("--reward.num_gpus_per_node")
    ):
        raise refuse(
            "--train.colocate_critic_reward",
            "OpenRLHF: num_nodes and num_gpus_per_node must be the same when colocate critic and reward model "
            f"(its assert: critic {args.int('--critic.num_nodes')}x{args.int('--critic.num_gpus_per_node')}, "
            f"reward {args.int('--reward.num_nodes')}x{args.int('--reward.num_gpus_per_node')})",
        )
    if colocate_all:
        shared += (["vllm"] if hybrid else []) + (["critic"] if with_critic and not crc else [])
        shared += ["reward"] if with_reward and not crc else []
    if shared:
        for role in shared:
            if role != "vllm" and size[role] > size["actor"]:
                key = f"--{role}.num_nodes"
                raise refuse(
                    key,
                    f"OpenRLHF places the {role} group's {size[role]} ranks on the bundles of the actor's shared "
                    f"placement group, which has {size['actor']}: rank {size['actor']} has no bundle (Ray "
                    "refuses the bundle index)",
                    hint=f"give the {role} at most the actor's {size['actor']} GPUs, or drop the colocation flag",
                )
        groups.append(Group("shared", size["actor"], tuple(r for r in ROLES if r in shared)))
    if engines > 0 and not hybrid:
        groups.append(Group("vllm", size["vllm"], ("vllm",)))
    for role in ("actor", "ref"):
        if role == "ref" and not with_ref:
            continue
        if role not in shared:
            groups.append(Group(role, size[role], (role,), pack=args.int(f"--{role}.num_gpus_per_node") > 1))
    if crc:
        groups.append(Group("critic+reward", size["critic"], ("critic", "reward") if with_reward else ("critic",)))
    for role, on in (("critic", with_critic), ("reward", with_reward)):
        if on and role not in shared and not crc:
            groups.append(Group(role, size[role], (role,), pack=args.int(f"--{role}.num_gpus_per_node") > 1))
    if with_reward and args("--reward.model_name_or_path") is None:
        notes.append(
            "OpenRLHF starts the reward model's group without --reward.model_name_or_path too (its GPUs are "
            "held, no model is loaded): give --reward.remote_url to have none"
        )
    return groups, {r: size[r] for g in groups for r in g.roles}


def _size_key(role: str) -> str:
    return "--vllm.num_engines" if role == "vllm" else f"--{role}.num_nodes"


def _role_groups(slurm: View | None, sizes: dict[str, int], groups: list[Group]) -> dict[str, str]:
    """slurm.pools: {role: node group label} (a label of slurm.node_groups); the others: 'default'."""
    out = dict.fromkeys(ROLES, "default")
    view = slurm.get("pools") if slurm is not None else None
    if view is None or view.value is None:
        return out
    if not isinstance(view.value, dict):
        raise view.error(
            "slurm.pools maps an OpenRLHF role to a node group",
            hint="e.g. pools: {vllm: gen} (roles: " + ", ".join(ROLES) + ")",
        )
    node_groups = slurm.get("node_groups") if slurm is not None else None
    labels = [str(k) for k, _ in node_groups.items()] if node_groups is not None else []
    for key, child in view.items():
        role = str(key)
        if role not in ROLES:
            near = closest(role, ROLES)
            raise child.key_error(
                f"slurm.pools: {role!r} is no OpenRLHF role",
                hint=(f"did you mean {near!r}? " if near else "") + "roles: " + ", ".join(ROLES),
            )
        label = child.str()
        if label != "default" and label not in labels:
            near = closest(label, labels)
            raise child.error(
                f"slurm.pools.{role}: node group {label!r} is not in slurm.node_groups",
                hint=(f"did you mean {near!r}? " if near else "")
                + f"add `node_groups: {{{label}: {{partition: ..., gpus_per_node: 8}}}}` to the slurm block",
            )
        if role not in sizes:
            raise child.key_error(
                f"slurm.pools.{role}: the command starts no {role} (its flags leave it out)",
                hint="remove the entry, or give the role in the command",
            )
        out[role] = label
    for g in groups:
        targets = {out[r] for r in g.roles}
        if len(targets) > 1:
            raise view.error(
                f"slurm.pools puts {', '.join(g.roles)} on node groups {', '.join(sorted(targets))}, but OpenRLHF "
                "places them in one placement group (they share GPUs)",
                hint=f"give {', '.join(g.roles)} the same node group",
            )
    return out


def gpus_per_node(
    facts: SlurmFacts,
    label: str,
    view: View,
    site_gpus: SiteGpus | None,
    notes: list[str],
    takes: str = "OpenRLHF's Ray placement groups take whatever GPUs Ray has",
) -> int:
    """A node group's GPUs per node: its slurm facts', else the site's (said in a note), else refused
    (`takes`: why the count matters, for the hint)."""
    if facts.gpus_per_node is not None:
        if facts.gpus_per_node < 1:
            raise view.error(f"node group {label!r}: gpus_per_node is 0; OpenRLHF places every role on GPUs")
        return limits.gpus_per_node(facts.gpus_per_node, view.location(), "gpus_per_node")
    site = site_gpus(facts.partition, facts.gpu_type) if site_gpus is not None else None
    if site is None or site.count is None:
        where = "slurm.gpus_per_node" if label == "default" else f"slurm.node_groups.{label}.gpus_per_node"
        raise view.error(
            f"GPUs per node of node group {label!r} are unknown" + (f" ({site.source})" if site is not None else ""),
            hint=site.fix
            if site is not None and site.fix
            else f"{takes}; Slurm needs the count up front: set {where} (e.g. 8)",
        )
    notes.append(f"node group {label!r}: {site.count} GPUs per node, {site.source}")
    return site.count


# Ray's choice among equally loaded nodes (candidates in node order; the bundles the chosen one will take)
# -> the node taken; the plan takes the first
Choose = Callable[[list[int], int], int]


def _first(candidates: list[int], take: int) -> int:
    return candidates[0]


def pack(free: list[list[int]], size: int, choose: Choose = _first) -> list[tuple[int, int]] | None:
    """Where Ray's PACK puts `size` one-GPU bundles, in bundle order, given each node's free GPU ids
    (changed in place); None when they do not fit. The whole group on the least loaded node that holds it;
    else the least loaded nodes in turn, all their free GPUs; among equally loaded nodes `choose` decides
    (Ray: any of them; the plan: the lowest node rank)."""
    if sum(len(f) for f in free) < size:
        return None
    out: list[tuple[int, int]] = []
    fits = [i for i, f in enumerate(free) if len(f) >= size]
    while len(out) < size:
        pool = fits or [i for i, f in enumerate(free) if f]
        most = max(len(free[i]) for i in pool)
        node = choose([i for i in pool if len(free[i]) == most], min(most, size - len(out)))
        for gpu in sorted(free[node])[: size - len(out)]:
            free[node].remove(gpu)
            out.append((node, gpu))
        fits = []
    return out


def layout(
    groups: list[Group], nodes: int, gpn: int, choose: Choose = _first
) -> dict[str, list[tuple[int, int]]] | None:
    """Each group's bundles (node index, GPU id), in the order OpenRLHF makes them; free 1-GPU actors one at
    a time, as Ray's default scheduling places each (the least loaded node); None when they do not fit."""
    free = [list(range(gpn)) for _ in range(nodes)]
    out: dict[str, list[tuple[int, int]]] = {}
    for g in groups:
        got: list[tuple[int, int]] | None = []
        if g.pack:
            got = pack(free, g.size, choose)
        else:
            for _ in range(g.size):
                one = pack(free, 1, choose)
                got = None if one is None or got is None else got + one
        if got is None:
            return None
        out[g.name] = got
    return out


def _pack(
    groups: list[Group], nodes: int, gpn: int, command: FrameworkCommand, entry: int
) -> dict[str, list[tuple[int, int]]]:
    out = layout(groups, nodes, gpn)
    if out is None:  # cannot happen: the node count is the GPUs needed, rounded up
        raise command.error(entry, "OpenRLHF's placement groups do not fit the planned nodes")
    return out


def role_lists(
    role: str, group: Group, bundles: list[tuple[int, int]], args: Args, sizes: dict[str, int]
) -> list[list[tuple[int, int]]]:
    """Each process of `role`, as its (node, GPU) bundles: rank r on bundle r; a vLLM engine on its TP
    bundles (get_bundle_indices: the group's bundles grouped by node, in order of first appearance)."""
    if role != "vllm":
        return [[bundles[r]] for r in range(sizes[role])]
    tp = args.int("--vllm.tensor_parallel_size")
    by_node: dict[int, list[int]] = {}
    for index, (node, _) in enumerate(bundles):
        by_node.setdefault(node, []).append(index)
    ordered = [i for indices in by_node.values() for i in indices]
    engines = sizes["vllm"] // tp
    return [[bundles[i] for i in ordered[e * tp : (e + 1) * tp]] for e in range(engines)]


def _per_node(worker: list[tuple[int, int]], gpn: int) -> list[list[int]]:
    """A process's GPUs as indices of the node group's GPU space, one list per node it spans."""
    parts: dict[int, list[int]] = {}
    for node, gpu in worker:
        parts.setdefault(node, []).append(node * gpn + gpu)
    return list(parts.values())


def _spanning(role: str, lists: list[list[tuple[int, int]]], gpn: int) -> SpanningWorkers | None:
    if role != "vllm" or all(len({n for n, _ in w}) == 1 for w in lists):
        return None
    workers, rank = [], 0
    for w in lists:
        count = len(_per_node(w, gpn))
        workers.append(tuple(range(rank, rank + count)))
        rank += count
    return SpanningWorkers(tuple(workers), len(lists[0]), "OpenRLHF")


def _note_spread(
    groups: list[Group], placed: dict[str, list[tuple[int, int]]], gpn: int, args: Args, notes: list[str]
) -> None:
    """Ray's PACK ignores a role's num_nodes: say where the planned nodes differ from what the flags say."""
    for g in groups:
        for role in g.roles:
            if role == "vllm":
                continue
            said = args.int(f"--{role}.num_nodes")
            got = len(
                {
                    node
                    for node, _ in placed[g.name][
                        : args.int(f"--{role}.num_nodes") * args.int(f"--{role}.num_gpus_per_node")
                    ]
                }
            )
            if got != said:
                notes.append(
                    f"OpenRLHF's {role}: {args.names[f'--{role}.num_nodes']} {said} x "
                    f"{args.names[f'--{role}.num_gpus_per_node']} {args.int(f'--{role}.num_gpus_per_node')}, "
                    f"but Ray's PACK group takes {got} node(s) of {gpn} GPUs (the flags count GPUs, not nodes)"
                )
