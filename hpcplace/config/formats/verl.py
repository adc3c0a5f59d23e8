"""verl: its placement read from its launch command (`python3 -m verl.trainer.main_ppo key=value ...`).

verl composes `verl/trainer/config/ppo_trainer.yaml` with Hydra and the command's overrides; hpcplace does
the same (the config files of the installed verl, or of a checkout named by HPCPLACE_VERL_SRC or
`--config-path`) and plans what verl's placement code does (verl 0.9.1, verl-project/verl 1dda039):

- `ResourcePoolManager` pools: `global_pool` = [trainer.n_gpus_per_node] * trainer.nnodes, `reward_pool`
  (reward.reward_model.enable_resource_pool), `teacher_pool` (distillation.enabled), and in
  separate_async one pool per standalone rollout replica (actor_rollout_ref.rollout.nnodes x n_gpus_per_node);
- a pool is one STRICT_PACK placement group per node of one-GPU bundles; RayWorkerGroup gives rank
  pg * local_world + bundle over the groups sorted by node IP as a string, bundle b on the node's GPU b;
- actor, rollout, ref and critic live in one WorkerDict process per GPU of global_pool; rollout replicas are
  tp*dp*pp consecutive WorkerDict ranks (RolloutReplica.init_hybrid);
- a colocated reward model has its own processes on global_pool's GPUs, a reward pool its own GPUs.

Each pool runs on its own node group (`slurm.pools: {reward_pool: <label>}` and `slurm.node_groups.<label>`).
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from hpcplace.config import limits
from hpcplace.config.cluster import Cluster, NodeGroup
from hpcplace.config.formats.command import FrameworkCommand
from hpcplace.config.formats.common import (
    SiteGpus,
    SlurmFacts,
    facts_node_group,
    hpcplace_block,
    slurm_facts,
    slurm_job_options,
    with_block_settings,
)
from hpcplace.config.framework_version import PlannedVersion, resolve_version
from hpcplace.config.spec import ComponentSpec, ExperimentSpec, PlacementEntry, build_cluster
from hpcplace.config.steer import SteerRule
from hpcplace.config.yaml_source import PathKey, ScalarMark, View, YamlDocument, closest, load_yaml_file
from hpcplace.errors import SpecError

SOURCE_ENV = "HPCPLACE_VERL_SRC"  # a verl checkout whose verl/trainer/config is composed
ENTRY = re.compile(r"(^|.*/)verl[./]trainer[./](main_\w+?)(\.py)?$")
PLANNED_ENTRIES = ("main_ppo",)
TRAINER_MODES = ("colocate_async", "separate_async", "sync")  # verl's TRAINER_REGISTRY (v1/trainer_*.py)
COLOCATE, STANDALONE_COLOCATE = 3, 2  # CPUs of a bundle: ResourcePoolManager's max_colocate_count (replica.py: 2)
POOLS = ("global_pool", "reward_pool", "teacher_pool", "rollout_pool")  # in the order verl creates them
PG_NAME_TAIL = r"verl_group_[0-9_]+:(?P<index>[0-9]+)"  # after the pool's name (RayResourcePool.get_placement_groups)
CONFIG_FLAGS = {"--config-path": "path", "-cp": "path", "--config-name": "name", "-cn": "name"}
HYDRA_FLAGS_WITHOUT_VALUE = ("--multirun", "-m", "--resolve", "--cfg", "-c", "--info", "-i", "--help", "-h")


@dataclass(frozen=True)
class VerlCommand:
    """The words after verl's entry point: where its config is and the Hydra overrides (word index kept)."""

    entry: int
    config_path: tuple[str, int] | None
    config_name: tuple[str, int] | None
    overrides: tuple[tuple[str, int], ...]


def read_command(command: FrameworkCommand) -> VerlCommand:
    """Split verl's command into its config flags and Hydra overrides, as Hydra's argparse does."""
    argv = command.argv
    entry = next((i for i, w in enumerate(argv) if ENTRY.match(w)), None)
    if entry is None:
        raise command.error(
            0, "no verl entry point in the command", hint="python3 -m verl.trainer.main_ppo key=value ..."
        )
    name = ENTRY.match(argv[entry]).group(2)  # type: ignore[union-attr]  # matched just above
    if name not in PLANNED_ENTRIES:
        raise command.error(
            entry,
            f"verl.trainer.{name} is not a trainer whose placement hpcplace reads",
            hint="hpcplace plans verl's PPO trainer: python3 -m verl.trainer.main_ppo ...",
        )
    flags: dict[str, tuple[str, int]] = {}
    overrides: list[tuple[str, int]] = []
    i = entry + 1
    while i < len(argv):
        word = argv[i]
        flag, eq, value = word.partition("=")
        if flag in CONFIG_FLAGS:
            if not eq:
                if i + 1 >= len(argv):
                    raise command.error(i, f"{flag} needs a value")
                i += 1
                value = argv[i]
            flags[CONFIG_FLAGS[flag]] = (value, i)
        elif word in HYDRA_FLAGS_WITHOUT_VALUE or word.startswith("--"):
            if word not in ("--multirun", "-m"):
                raise command.error(
                    i,
                    f"verl's Hydra entry point does not run training with {word!r}",
                    hint="give Hydra overrides key=value, +key=value, and --config-path/--config-name",
                )
            raise command.error(i, "a Hydra multirun starts several trainings", hint="plan one run: drop --multirun")
        elif word.startswith("-"):
            raise command.error(i, f"unknown option {word!r} of verl's Hydra entry point")
        elif "=" in word or word.startswith("~"):
            if not word.lstrip("+~").startswith("hydra."):  # Hydra's own settings (run dir, logging)
                overrides.append((word, i))
        else:
            raise command.error(
                i,
                f"{word!r} is neither a Hydra override (key=value) nor an option of verl's entry point",
                hint="hpcplace reads the command unexpanded: shell variables and `$@` must be written out",
            )
        i += 1
    return VerlCommand(entry, flags.get("path"), flags.get("name"), tuple(overrides))


def verl_config_dir(verl: VerlCommand, command: FrameworkCommand, environ: dict[str, str]) -> Path:
    """The folder Hydra composes from: `--config-path` (absolute, or relative to verl/trainer as Hydra reads
    it), else the trainer's config of a checkout ($HPCPLACE_VERL_SRC) or of the installed verl."""
    source = environ.get(SOURCE_ENV)
    trainer: Path | None = None
    why: list[str] = []
    if source:
        trainer = Path(source) / "verl" / "trainer"
        if not trainer.is_dir():
            why.append(f"{SOURCE_ENV}={source} has no verl/trainer folder")
            trainer = None
    else:
        why.append(f"{SOURCE_ENV} is not set")
    if trainer is None:
        found = importlib.util.find_spec("verl")
        if found is not None and found.origin:
            trainer = Path(found.origin).parent / "trainer"
        else:
            why.append("verl is not installed in this Python (importlib finds no `verl`)")
    if verl.config_path is not None:
        given, index = verl.config_path
        folder = Path(given) if os.path.isabs(given) or trainer is None else trainer / given
        if not folder.is_dir():
            raise command.error(
                index,
                f"--config-path {given!r}: no such folder ({folder})",
                hint="Hydra reads a relative --config-path from verl/trainer; give an absolute path",
            )
        return folder
    if trainer is None or not (trainer / "config").is_dir():
        raise command.error(
            verl.entry,
            "verl's config (verl/trainer/config/ppo_trainer.yaml) is not available to compose: " + "; ".join(why),
            hint=f"install the verl that runs the job (pip install --no-deps verl==0.9.1), set {SOURCE_ENV} to a "
            "verl checkout, or pass --config-path /abs/path/to/config",
        )
    return trainer / "config"


def compose_verl(command: FrameworkCommand, verl: VerlCommand, folder: Path) -> tuple[YamlDocument, tuple[str, ...]]:
    """The config as verl's @hydra.main composes it, with every overridden value located at its word."""
    from hpcplace.config.formats import apply_overrides
    from hpcplace.config.hydra_config import compose, split_overrides

    name = verl.config_name[0] if verl.config_name else "ppo_trainer"
    path = folder / (name if name.endswith(".yaml") else name + ".yaml")
    if not path.is_file():
        options = sorted(p.stem for p in folder.glob("*.yaml"))
        near = closest(name, options)
        raise command.error(
            verl.config_name[1] if verl.config_name else verl.entry,
            f"no config {path.name} in {folder}" + (f"; did you mean {near!r}?" if near else ""),
            hint=f"configs there: {', '.join(options) or 'none'}",
        )
    doc = load_yaml_file(path)
    texts = [text for text, _ in verl.overrides]
    where = dict(verl.overrides)
    try:
        for_hydra, plain = split_overrides(doc, texts)
        composed, files = compose(doc, for_hydra)
        result = apply_overrides(composed, plain, hydra_keys=True)
    except SpecError as exc:
        loc = exc.location
        word = loc.path[len("<override ") : -1] if loc is not None and loc.path.startswith("<override ") else None
        if word in where:
            raise command.error(where[word], exc.message, hint=exc.hint) from None
        raise
    marks = dict(result.marks)
    for text, index in verl.overrides:
        key, eq, value = text.lstrip("+~").partition("=")
        if not eq or "/" in key or "@" in key:
            continue
        at = command.location(index)
        keypath: PathKey = tuple(int(p) if p.isdigit() else p for p in key.split("."))
        marks[keypath] = ScalarMark(at.line, at.column + len(text) - len(value), None, value, file=at.path)
    return YamlDocument(result.path, result.data, marks), files


@dataclass(frozen=True)
class Pool:
    """One of verl's resource pools: `nodes` nodes of `per_node` GPUs, created in POOLS order."""

    name: str
    nodes: int
    per_node: int
    view: View  # where its size was set (errors)

    @property
    def world(self) -> int:
        return self.nodes * self.per_node


class Reader:
    """Values of the composed config, each required where verl requires it (closest key on a miss)."""

    def __init__(self, doc: YamlDocument) -> None:
        self.root = doc.root()

    def get(self, dotted: str) -> View | None:
        view: View | None = self.root
        for part in dotted.split("."):
            view = view.deref().get(part) if view is not None and isinstance(view.deref().value, dict) else None
        return view

    def need(self, dotted: str) -> View:
        view: View = self.root
        for depth, part in enumerate(dotted.split(".")):
            child = view.deref().get(part) if isinstance(view.deref().value, dict) else None
            if child is None:
                known = list(view.deref().value) if isinstance(view.deref().value, dict) else []
                near = closest(part, [str(k) for k in known])
                raise view.error(
                    f"verl's config has no {'.'.join(dotted.split('.')[: depth + 1])!r}"
                    + (f"; did you mean {near!r}?" if near else ""),
                    hint="this verl release's config lacks a key hpcplace reads: check the config / verl version",
                )
            view = child
        return view

    def int(self, dotted: str) -> tuple[int, View]:
        view = self.need(dotted)
        return view.int(), view

    def flag(self, dotted: str, default: bool = False) -> bool:
        view = self.get(dotted)
        if view is None or view.deref().value is None:
            return default
        return view.bool()


def rollout_world(reader: Reader, prefix: str) -> tuple[int, int, int, int, View]:
    """tp, dp, pp and tp*dp*pp of a rollout config (actor_rollout_ref.rollout, reward.reward_model.rollout)."""
    tp, view = reader.int(f"{prefix}.tensor_model_parallel_size")
    dp, _ = reader.int(f"{prefix}.data_parallel_size")
    pp, _ = reader.int(f"{prefix}.pipeline_model_parallel_size")
    for value, what in (
        (tp, "tensor_model_parallel_size"),
        (dp, "data_parallel_size"),
        (pp, "pipeline_model_parallel_size"),
    ):
        if value < 1:
            raise reader.need(f"{prefix}.{what}").error(f"{prefix}.{what} must be at least 1, got {value}")
    return tp, dp, pp, tp * dp * pp, view


def check_replica(world: int, gpus_per_node: int, view: View, what: str) -> None:
    """RolloutReplica.__init__: a replica of `world` GPUs spans whole nodes of min(gpus_per_node, world)."""
    per_node = min(gpus_per_node, world)
    if per_node < 1 or world % per_node:
        raise view.error(
            f"{what}: a rollout replica of {world} GPUs (tp*dp*pp) over nodes of {gpus_per_node} GPUs: verl "
            f"asserts 'world_size {world} must be divisible by gpus_per_node {per_node}'",
            hint="make tp*dp*pp a multiple of the GPUs per node, or at most one node's GPUs",
        )


def replicas_text(name: str, world: int, tp: int, dp: int, pp: int, count: int, pool: Pool, start: int = 0) -> str:
    shown = ", ".join(f"{start + r * world}-{start + (r + 1) * world - 1}" for r in range(min(count, 4)))
    more = f", ... ({count} in all)" if count > 4 else ""
    return f"{name}: {count} replica(s) of tp{tp} dp{dp} pp{pp} = {world} GPUs on {pool.name} ranks {shown}{more}"


def parse(command: FrameworkCommand, blocks: YamlDocument, site_gpus: SiteGpus | None) -> ExperimentSpec:
    """verl's pools, roles and rollout replicas from its command, each pool on its node group."""
    root = blocks.root()
    notes: list[str] = []
    version = resolve_version("verl", root, notes)
    verl = read_command(command)
    folder = verl_config_dir(verl, command, dict(os.environ))
    doc, files = compose_verl(command, verl, folder)
    reader = Reader(doc)
    if version is not None:
        notes.append(f"planned as {version.describe()}")

    mode_view = reader.get("trainer.v1.trainer_mode")
    use_v1 = reader.flag("trainer.use_v1", default=False)
    mode = mode_view.str() if use_v1 and mode_view is not None else "sync"
    if use_v1 and mode not in TRAINER_MODES:
        assert mode_view is not None
        raise mode_view.error(
            f"Unknown trainer {mode!r}. Available trainers: {', '.join(TRAINER_MODES)}. (verl's get_trainer_cls)"
        )
    nnodes, nview = reader.int("trainer.nnodes")
    gpn, gview = reader.int("trainer.n_gpus_per_node")
    for value, view, key in ((nnodes, nview, "trainer.nnodes"), (gpn, gview, "trainer.n_gpus_per_node")):
        if value < 1:
            raise view.error(f"{key} must be at least 1 (global_pool is [n_gpus_per_node] * nnodes), got {value}")
    limits.nodes(nnodes, nview.location(), "trainer.nnodes")
    limits.gpus_per_node(gpn, gview.location(), "trainer.n_gpus_per_node")
    pools = [Pool("global_pool", nnodes, gpn, nview)]

    rm_prefix = "reward.reward_model" if reader.get("reward.reward_model") is not None else "reward_model"
    rm_enable = reader.flag(f"{rm_prefix}.enable")
    rm_pool = reader.flag(f"{rm_prefix}.enable_resource_pool")
    if rm_pool:
        rn, rnv = reader.int(f"{rm_prefix}.nnodes")
        rg, rgv = reader.int(f"{rm_prefix}.n_gpus_per_node")
        if rg <= 0:
            raise rgv.error(f"config.{rm_prefix}.n_gpus_per_node must be greater than 0 (verl raises ValueError)")
        if rn <= 0:
            raise rnv.error(f"config.{rm_prefix}.nnodes must be greater than 0 (verl raises ValueError)")
        pools.append(Pool("reward_pool", rn, rg, rnv))
        if not rm_enable:
            notes.append(
                f"reward_pool ({rn}x{rg} GPUs) is reserved by verl ({rm_prefix}.enable_resource_pool) though no "
                f"reward model runs ({rm_prefix}.enable is false): its GPUs stay idle"
            )
    if reader.flag("distillation.enabled"):
        dn, dnv = reader.int("distillation.nnodes")
        dg, dgv = reader.int("distillation.n_gpus_per_node")
        if dg <= 0:
            raise dgv.error("config.distillation.n_gpus_per_node must be greater than 0 (verl raises ValueError)")
        if dn <= 0:
            raise dnv.error("config.distillation.nnodes must be greater than 0 (verl raises ValueError)")
        pools.append(Pool("teacher_pool", dn, dg, dnv))

    rtp, rdp, rpp, rworld, rview = rollout_world(reader, "actor_rollout_ref.rollout")
    r_gpn, _ = reader.int("actor_rollout_ref.rollout.n_gpus_per_node")
    hybrid = True
    standalone: list[Pool] = []
    if mode == "separate_async":
        hybrid = reader.flag("actor_rollout_ref.hybrid_engine", default=True)
        sn, snv = reader.int("actor_rollout_ref.rollout.nnodes")
        if sn <= 0:
            raise snv.error(
                "verl asserts 'nnodes must be > 0 in separate async training' (actor_rollout_ref.rollout.nnodes)"
            )
        if r_gpn <= 0:
            raise reader.need("actor_rollout_ref.rollout.n_gpus_per_node").error(
                "verl asserts 'n_gpus_per_node must be > 0 in separate async training'"
            )
        if rm_enable and not rm_pool:
            raise reader.need(f"{rm_prefix}.enable_resource_pool").error(
                f"Colocate reward model ({rm_prefix}.enable_resource_pool=False) is not supported in separate async "
                "mode (verl asserts)",
                hint=f"set {rm_prefix}.enable_resource_pool=true with its nnodes and n_gpus_per_node",
            )
        check_replica(rworld, r_gpn, rview, "actor_rollout_ref.rollout")
        count = sn * r_gpn // rworld
        if count < 1:
            raise snv.error(
                f"the standalone rollout has {sn}x{r_gpn} GPUs, fewer than one replica's {rworld} (tp*dp*pp): "
                "verl would start no rollout server"
            )
        per_node = min(r_gpn, rworld)
        standalone = [Pool("rollout_pool", rworld // per_node * count, per_node, snv)]
        if sn * r_gpn % rworld:
            notes.append(
                f"rollout_pool: {sn * r_gpn % rworld} of its {sn * r_gpn} GPUs hold no replica (verl: world // tp*dp*pp)"
            )
        notes.append(
            f"rollout_pool: verl makes one pool per standalone replica (rollout_pool_<i>, PACK placement groups "
            f"of {per_node} GPU(s)): Ray picks which of the group's GPUs each replica gets; the plan lists them in order"
        )
    pools += standalone

    # the node group of each pool
    slurm_view = root.get("slurm")
    job_options = slurm_job_options(slurm_view, extra=frozenset({"pools"}))
    labels = pool_labels(slurm_view, [p.name for p in pools])
    base = slurm_facts(slurm_view)
    groups: list[NodeGroup] = []
    for pool in pools:
        label = labels[pool.name]
        facts = slurm_facts(slurm_view, label, base)
        check_gpus(pool, facts, label, site_gpus, slurm_view)
        groups.append(facts_node_group(label, facts, pool.nodes, pool.per_node, pool.view))

    # the processes on each pool
    entries: list[PlacementEntry] = []
    settings: dict[str, ComponentSpec] = {}
    g = pools[0]
    glabel = (labels[g.name],)
    lora = reader.get("actor_rollout_ref.model.lora.rank")
    lora_rank = lora.int() if lora is not None and lora.deref().value is not None else 0
    if lora_rank <= 0:
        old = reader.get("actor_rollout_ref.model.lora_rank")
        lora_rank = old.int() if old is not None and old.deref().value is not None else 0
    adapter = reader.get("actor_rollout_ref.model.lora_adapter_path")
    ref_in_actor = lora_rank > 0 or (adapter is not None and adapter.deref().value is not None)
    use_ref = reader.flag("algorithm.use_kl_in_reward") or reader.flag("actor_rollout_ref.actor.use_kl_loss")
    critic_view = reader.get("critic.enable")
    if critic_view is not None and critic_view.deref().value is not None:
        use_critic = critic_view.bool()
    else:
        adv = reader.get("algorithm.adv_estimator")
        use_critic = adv is not None and str(adv.deref().value) == "gae"
    if not hybrid:
        roles = ["actor"] + (["ref"] if use_ref and not ref_in_actor else [])
    else:
        roles = ["actor_rollout_ref" if use_ref and not ref_in_actor else "actor_rollout"]
    roles += ["critic"] if use_critic else []
    per_gpu = tuple((i,) for i in range(g.world))
    entries.append(PlacementEntry(tuple(roles), glabel, None, per_gpu, g.view.location()))
    notes.append(
        f"global_pool: one WorkerDict process per GPU holds {', '.join(roles)} (verl's create_colocated_worker_cls)"
        + ("; ref shares the actor's model (LoRA)" if use_ref and ref_in_actor else "")
    )
    if hybrid:
        check_replica(rworld, r_gpn, rview, "actor_rollout_ref.rollout")
        count = g.world // rworld
        if count < 1:
            raise rview.error(
                f"a rollout replica needs tp*dp*pp = {rworld} GPUs and global_pool has {g.world} "
                f"({g.nodes}x{g.per_node}): verl would start no rollout server",
                hint="lower actor_rollout_ref.rollout.tensor_model_parallel_size (or dp/pp), or raise trainer.nnodes",
            )
        entries.append(PlacementEntry(("rollout",), glabel, None, per_gpu[: count * rworld], rview.location()))
        settings["rollout"] = ComponentSpec("rollout", tensor_parallel_size=rtp, pipeline_parallel_size=rpp)
        notes.append(replicas_text("rollout (in the WorkerDict processes)", rworld, rtp, rdp, rpp, count, g))
        if g.world % rworld:
            notes.append(f"rollout: global_pool ranks {count * rworld}-{g.world - 1} hold no rollout replica")
    for pool in standalone:
        entries.append(
            PlacementEntry(
                ("rollout_standalone",),
                (labels[pool.name],),
                None,
                tuple((i,) for i in range(pool.world)),
                pool.view.location(),
            )
        )
        settings["rollout_standalone"] = ComponentSpec(
            "rollout_standalone", tensor_parallel_size=rtp, pipeline_parallel_size=rpp
        )
        notes.append(replicas_text("rollout_standalone", rworld, rtp, rdp, rpp, pool.world // rworld, pool))
    if rm_enable:
        mtp, mdp, mpp, mworld, mview = rollout_world(reader, f"{rm_prefix}.rollout")
        pool = next((p for p in pools if p.name == "reward_pool"), g)
        if mworld > pool.world:
            raise mview.error(
                f"Not enough GPUs to run the reward model. world_size ({pool.world}) < rollout_world_size ({mworld}) "
                f"(verl asserts; {pool.name} is {pool.nodes}x{pool.per_node})"
            )
        if pool.world % mworld:
            raise mview.error(
                f"the reward model's replicas of tp*dp*pp = {mworld} GPUs do not divide {pool.name}'s {pool.world}: "
                "verl's split_resource_pool asserts 'split_size must be a divisor of world_size'"
            )
        check_replica(mworld, pool.per_node, mview, f"{rm_prefix}.rollout")
        entries.append(
            PlacementEntry(
                ("reward_model",), (labels[pool.name],), None, tuple((i,) for i in range(pool.world)), mview.location()
            )
        )
        settings["reward_model"] = ComponentSpec("reward_model", tensor_parallel_size=mtp, pipeline_parallel_size=mpp)
        notes.append(replicas_text("reward_model", mworld, mtp, mdp, mpp, pool.world // mworld, pool))
        if pool is g:
            notes.append(
                "reward_model: colocated on global_pool in processes of its own (RolloutReplica.init_colocated)"
            )
    teacher = next((p for p in pools if p.name == "teacher_pool"), None)
    if teacher is not None:
        entries.append(
            PlacementEntry(
                ("teacher_model",),
                (labels[teacher.name],),
                None,
                tuple((i,) for i in range(teacher.world)),
                teacher.view.location(),
            )
        )
    notes.append(
        "verl's placement groups are steered: each pool's group i (one per node) goes to the i-th node of the pool's "
        "node group (hpcplace's hook adds that node's resource to its bundles; docs/formats/verl.md)"
    )
    notes.append(
        "verl numbers a pool's ranks over its nodes sorted by IP address as a string (10.0.0.10 before 10.0.0.9): "
        "the job numbers each pool's nodes in that order when it starts, so the plan's node i is the i-th by IP "
        "(runtime/ip_order.py; with launch.steer: false the job checks the order at start and stops naming the "
        "difference)"
    )
    groups, cpus = bundle_cpus(groups, entries, pools, labels)
    for key, count in cpus.items():
        settings[key] = replace(settings.get(key) or ComponentSpec(key), cpus_per_process=count)
    notes.append(
        f"CPUs: verl's bundles hold {COLOCATE} CPUs per GPU (ResourcePoolManager's max_colocate_count; "
        f"{STANDALONE_COLOCATE} in a standalone rollout pool) and its TaskRunner actor 1 more, taken before the "
        "pools: a node group without cpus_per_node asks for those"
    )
    cluster = build_cluster(tuple(groups), root if slurm_view is None else slurm_view)
    name, given = hpcplace_block(
        root, {c for e in entries for c in e.components}, blocks.path if blocks.data else "verl"
    )
    for key, spec in given.items():
        settings[key] = with_block_settings(settings[key], spec)
    return ExperimentSpec(
        name,
        cluster,
        tuple(entries),
        settings,
        blocks.path,
        "verl",
        job_options,
        notes=tuple(notes),
        composed=files,
        steer=steer_rules(pools, cluster, rworld // standalone[0].per_node if standalone else 1),
        framework_version=PlannedVersion.of(version),
    )


def pool_labels(slurm_view: View | None, pools: list[str]) -> dict[str, str]:
    """`slurm.pools: {reward_pool: rtx4090}`: the node group of each pool (default: its own group, named
    after the pool, with the `slurm:` block's defaults). Two pools never share a group: Ray would choose
    which of its nodes each pool gets."""
    labels = {p: p for p in pools}
    view = slurm_view.get("pools") if slurm_view is not None else None
    if view is None or view.value is None:
        return labels
    seen: dict[str, str] = {}
    for key, child in view.items():
        if key not in POOLS:
            near = closest(str(key), POOLS)
            raise child.key_error(
                f"unknown verl pool {key!r}" + (f"; did you mean {near!r}?" if near else ""),
                hint=f"verl's pools: {', '.join(POOLS)}",
            )
        if key not in pools:
            raise child.key_error(
                f"slurm.pools.{key}: this command makes no {key}",
                hint="global_pool always; reward_pool with reward.reward_model.enable_resource_pool=true; "
                "teacher_pool with distillation.enabled=true; rollout_pool in trainer.v1.trainer_mode=separate_async",
            )
        label = child.str()
        if label in seen:
            raise child.error(
                f"slurm.pools: {key} and {seen[label]} on one node group {label!r}: verl does not say which of its "
                "nodes each pool takes (Ray chooses), so the plan could not be exact",
                hint="give each pool its own node group (they may share a partition)",
            )
        seen[label] = str(key)
        labels[str(key)] = label
    return labels


def check_gpus(pool: Pool, facts: SlurmFacts, label: str, site_gpus: SiteGpus | None, view: View | None) -> None:
    """A pool's nodes must have its per-node GPU count (STRICT_PACK: one node per placement group)."""
    have = facts.gpus_per_node
    source = f"slurm.node_groups.{label}.gpus_per_node / slurm.gpus_per_node"
    if have is None and site_gpus is not None:
        found = site_gpus(facts.partition, facts.gpu_type)
        have, source = found.count, found.source
    if have is not None and have < pool.per_node:
        where = view if view is not None else pool.view
        raise where.error(
            f"{pool.name} needs {pool.per_node} GPUs on each of its {pool.nodes} node(s) (one STRICT_PACK placement "
            f"group per node) and node group {label!r} has {have} ({source})",
            hint="lower the pool's n_gpus_per_node, or put the pool on nodes with more GPUs (slurm.pools)",
        )


def steer_rules(pools: list[Pool], cluster: Cluster, replica_nodes: int) -> tuple[SteerRule, ...]:
    """verl names each pool's placement groups `<pool>verl_group_<counts>:<i>`, one per node (RayResourcePool.
    get_placement_groups; a standalone rollout replica r's pool is `rollout_pool_<r>`): group i of a pool goes to
    the i-th node of the pool's node group (pools[g] is node group g; a replica's groups follow the replicas
    before it, `replica_nodes` nodes each)."""
    rules = []
    for g, pool in enumerate(pools):
        nodes = cluster.node_ranks(g)
        if pool.name == "rollout_pool":
            rules.append(
                SteerRule(
                    "verl rollout_pool_<r> (standalone rollout replica r)",
                    "group",
                    nodes,
                    name=r"rollout_pool_(?P<replica>[0-9]+)verl_group_[0-9_]+:(?P<index>[0-9]+)",
                    stride=replica_nodes,
                )
            )
        else:
            rules.append(SteerRule(f"verl {pool.name}", "group", nodes, name=re.escape(pool.name) + PG_NAME_TAIL))
    return tuple(rules)


def bundle_cpus(
    groups: list[NodeGroup], entries: list[PlacementEntry], pools: list[Pool], labels: dict[str, str]
) -> tuple[list[NodeGroup], dict[str, int]]:
    """Each GPU's bundle holds max_colocate_count CPUs, shared by the processes on that GPU, and verl's
    TaskRunner takes one CPU before any pool exists: without it a node of exactly 3 CPUs per GPU could
    never hold its pool's STRICT_PACK group. The first component on a pool's GPUs asks for what the others
    leave of the bundle; a group without cpus_per_node gets the bundles' CPUs + 1."""
    per_process: dict[str, int] = {}
    out = []
    for group, pool in zip(groups, pools, strict=True):
        bundle = STANDALONE_COLOCATE if pool.name == "rollout_pool" else COLOCATE
        names = [c for e in entries if e.node_group == (labels[pool.name],) for c in e.components]
        if names:
            per_process[names[0]] = max(1, bundle - (len(names) - 1))
        per_gpu = max(bundle, len(names))
        if group.cpus_per_node is None:
            group = replace(group, cpus_per_node=per_gpu * pool.per_node + 1)
        out.append(group)
    return out, per_process
