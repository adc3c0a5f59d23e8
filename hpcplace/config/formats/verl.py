"""verl: its placement read from its launch command (`python3 -m verl.trainer.main_ppo key=value ...`).

verl composes `verl/trainer/config/ppo_trainer.yaml` with Hydra and the command's overrides; hpcplace does
the same (the config files of the installed verl, or of a checkout named by HPCPLACE_VERL_SRC or
`--config-path`) and plans what verl's placement code does (verl 0.9.1, verl-project/verl 1dda039):

- `ResourcePoolManager` pools: `global_pool` = [trainer.n_gpus_per_node] * trainer.nnodes, `reward_pool`
  (reward.reward_model.enable_resource_pool), `teacher_pool` (distillation.enabled; split per teacher at each
  teacher's own tp*dp*pp, MultiTeacherModelManager), and in separate_async one pool per standalone rollout
  replica (actor_rollout_ref.rollout.nnodes x n_gpus_per_node);
- a pool is one STRICT_PACK placement group per node of one-GPU bundles; RayWorkerGroup gives rank
  pg * local_world + bundle over the groups sorted by node IP as a string, bundle b on the node's GPU b;
- actor, rollout, ref and critic live in one WorkerDict process per GPU of global_pool; rollout replicas are
  tp*dp*pp consecutive WorkerDict ranks (RolloutReplica.init_hybrid);
- rollout replicas with prefill-decode disaggregation are one prefill server then the decode servers
  (SGLangPDReplica / vLLMPDReplica);
- a colocated reward model has its own processes on global_pool's GPUs, a reward pool its own GPUs.

For the fabric check (hpcplace/plan/topology.py): a Megatron actor, ref, critic or SFT engine gives its role
Megatron's TP and PP, and EP and ETP where it has expert parallelism (megatron_sizes); a rollout, reward or
teacher replica wider than its TP (dp or pp > 1) is one inference engine of tp*dp*pp GPUs (gpus_per_engine).

Each pool runs on a node group of its own, or shares one with other pools (`slurm.pools: {reward_pool:
<label>}` and `slurm.node_groups.<label>`; group_layouts). trainer.device other than cuda (Ascend NPUs) is
refused, located, with the reason.

verl's fully async trainer (`python3 -m verl.experimental.fully_async_policy.fully_async_main`, its own
fully_async_ppo_trainer.yaml over ppo_trainer.yaml) places a `trainer_pool` (create_resource_pool_manager), the
reward model as standalone replicas (rollout_pool_reward_<r>), the teacher_pool, and rollout replicas: hybrid ones
on the trainer's workers (use_trainer_do_validate / use_dynamic_resource_scheduling), then standalone ones
numbered after them (FullyAsyncLLMServerManager; rollout.nnodes x rollout.n_gpus_per_node).

verl's one-step-off-policy trainer (`python3 -m verl.experimental.one_step_off_policy.main_ppo`,
one_step_off_ppo_trainer.yaml over ppo_trainer.yaml) places the same `trainer_pool` (actor, ref, critic in one
WorkerDict per GPU) and only standalone rollout replicas (LLMServerManager without a worker group:
rollout.nnodes x rollout.n_gpus_per_node // tp*dp*pp, one pool each); it starts no reward model and no teacher.
verl's SFT trainer on Ray (`python3 -m verl.trainer.sft_trainer_ray`, sft_trainer_engine.yaml) makes one pool of
[trainer.n_gpus_per_node] * trainer.nnodes with 10 CPUs a bundle and one TrainingWorker per GPU (`sft_pool`).
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NoReturn

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
from hpcplace.config.framework_version import FrameworkVersion, PlannedVersion, resolve_version
from hpcplace.config.spec import ComponentSpec, ExperimentSpec, PlacementEntry, build_cluster
from hpcplace.config.steer import SteerRule
from hpcplace.config.yaml_source import PathKey, ScalarMark, View, YamlDocument, closest, load_yaml_file
from hpcplace.errors import SpecError

SOURCE_ENV = "HPCPLACE_VERL_SRC"  # a verl checkout whose verl/trainer/config is composed
ENTRY = re.compile(
    r"(^|.*/)(?:verl[./](?:trainer[./](?P<trainer>main_\w+?|sft_trainer_ray)|experimental[./](?P<experimental>"
    r"fully_async_policy[./]fully_async_main|one_step_off_policy[./]main_ppo))|(?P<recipe>recipe[./]dapo[./]"
    r"(?P<queue>dapo_transfer_queue[./])?main_dapo))"
    r"(\.py)?$"
)
ONE_STEP_OFF = "one_step_off"  # verl.experimental.one_step_off_policy.main_ppo (its main_ppo is not the trainer's)
SFT = "sft_trainer_ray"  # verl.trainer.sft_trainer_ray: SFT on a Ray pool (its torchrun SFT is formats/launcher.py's)
GENERATION = "main_generation_server"  # verl.trainer.main_generation_server: rollout servers, no training
# recipe.dapo.main_dapo (verl-project/verl-recipe, verl's `recipe` submodule): verl's legacy PPO TaskRunner
# (main_ppo_v0.BaseTaskRunner) with its own trainer class and config, run from the folder holding `recipe/`
DAPO = "main_dapo"
PLANNED_ENTRIES = ("main_ppo", "fully_async_main", ONE_STEP_OFF, SFT, GENERATION, DAPO)
SEPARATED = ("fully_async_main", ONE_STEP_OFF)  # trainers built on verl.experimental.separation (trainer_pool)
# each entry point's folder in the verl package (Hydra reads a relative --config-path from it) and default config
ENTRY_HOME = {
    "main_ppo": "trainer",
    "fully_async_main": "experimental/fully_async_policy",
    ONE_STEP_OFF: "experimental/one_step_off_policy",
    SFT: "trainer",
    GENERATION: "trainer",
}
DEFAULT_CONFIG = {
    "main_ppo": "ppo_trainer",
    "fully_async_main": "fully_async_ppo_trainer",
    ONE_STEP_OFF: "one_step_off_ppo_trainer",
    SFT: "sft_trainer_engine",
    GENERATION: "ppo_trainer",
    DAPO: "dapo_trainer",
}
# how fully_async's configs find ppo_trainer.yaml: the installed package, or verl/trainer/config of the current
# folder (the Megatron one: found only when started at a checkout's root); hpcplace gives the verl composed
VERL_SEARCHPATHS = ("pkg://verl.trainer.config", "file://verl/trainer/config")
TRAINER_MODES = ("colocate_async", "separate_async", "sync")  # verl's TRAINER_REGISTRY (v1/trainer_*.py)
COLOCATE, STANDALONE_COLOCATE = 3, 2  # CPUs of a bundle: ResourcePoolManager's max_colocate_count (replica.py: 2)
SFT_COLOCATE = 10  # RayResourcePool's own default max_colocate_count (sft_trainer_ray makes its pool directly)
# in the order verl creates them (fully_async_main: trainer_pool for global_pool, and its reward_pool is the
# reward model's standalone replicas)
POOLS = ("global_pool", "trainer_pool", "reward_pool", "teacher_pool", "rollout_pool", "sft_pool")
SFT_POOL = "sft_pool"  # hpcplace's name for sft_trainer_ray's pool: verl names it with 6 random characters
# the driver's actors' num_cpus: TaskRunner; FullyAsyncTaskRunner, FullyAsyncTrainer, FullyAsyncRollouter and
# MessageQueue; OneStepTaskRunner
TASK_RUNNER_CPUS = {
    "main_ppo": 1,
    "fully_async_main": 1 + 10 + 10 + 2,
    ONE_STEP_OFF: 10,
    SFT: 0,
    GENERATION: 0,
    DAPO: 1,  # ray.remote(num_cpus=1)(DAPOTaskRunner)
}
PG_NAME_TAIL = r"verl_group_[0-9_]+:(?P<index>[0-9]+)"  # after the pool's name (RayResourcePool.get_placement_groups)
RANDOM_PREFIX = "[A-Za-z0-9]{6}"  # RayResourcePool's name when none is given (get_random_string(length=6))
# RolloutConfig's own defaults (verl/workers/config/rollout.py): a teacher entry added with `+` that omits a size
TEACHER_SIZE_DEFAULTS = {"tensor_model_parallel_size": 2, "data_parallel_size": 1, "pipeline_model_parallel_size": 1}
PD_BACKENDS = {  # the KV transfer backends each PD replica takes (DisaggregationConfig; vLLMPDReplica: nixl, mooncake)
    "sglang": ("nixl", "mooncake", "ascend", "mori", "fake"),
    "vllm": ("nixl", "mooncake"),
}
CONFIG_FLAGS = {"--config-path": "path", "-cp": "path", "--config-name": "name", "-cn": "name"}
HYDRA_FLAGS_WITHOUT_VALUE = ("--multirun", "-m", "--resolve", "--cfg", "-c", "--info", "-i", "--help", "-h")


@dataclass(frozen=True)
class VerlCommand:
    """The words after verl's entry point: where its config is and the Hydra overrides (word index kept)."""

    entry: int
    name: str  # one of PLANNED_ENTRIES
    config_path: tuple[str, int] | None
    config_name: tuple[str, int] | None
    overrides: tuple[tuple[str, int], ...]


def refuse_transfer_queue(command: FrameworkCommand, entry: int) -> NoReturn:
    """recipe.dapo.dapo_transfer_queue.main_dapo (verl-recipe's Ascend example) trains with
    recipe.transfer_queue.ray_trainer's RayPPOTrainer: python stops where the recipe package lacks it (verl-recipe
    48ea0a7 does), and hpcplace does not read that trainer's pools where it is there."""
    queue = Path.cwd() / "recipe" / "transfer_queue"
    if not (queue / "ray_trainer.py").is_file():
        raise command.error(
            entry,
            "recipe.dapo.dapo_transfer_queue imports recipe.transfer_queue.ray_trainer, which the recipe package here "
            f'lacks ({queue / "ray_trainer.py"} is not there): python would stop with "No module named '
            "'recipe.transfer_queue'\"",
            hint="the DAPO recipe without TransferQueue, python -m recipe.dapo.main_dapo, is planned",
        )
    raise command.error(
        entry,
        "recipe.dapo.dapo_transfer_queue.main_dapo trains with recipe.transfer_queue's RayPPOTrainer, whose resource "
        "pools hpcplace does not read",
        hint="the DAPO recipe without TransferQueue, python -m recipe.dapo.main_dapo, is planned",
    )


def read_command(command: FrameworkCommand) -> VerlCommand:
    """Split verl's command into its config flags and Hydra overrides, as Hydra's argparse does."""
    argv = command.argv
    entry = next((i for i, w in enumerate(argv) if ENTRY.match(w)), None)
    if entry is None:
        raise command.error(
            0, "no verl entry point in the command", hint="python3 -m verl.trainer.main_ppo key=value ..."
        )
    found = ENTRY.match(argv[entry])
    assert found is not None  # matched just above
    experimental = found["experimental"]
    if found["queue"]:
        refuse_transfer_queue(command, entry)
    if found["recipe"]:
        name = DAPO
    else:
        name = found["trainer"] or ("fully_async_main" if experimental.endswith("fully_async_main") else ONE_STEP_OFF)
    if name not in PLANNED_ENTRIES:
        module = f"verl.trainer.{name}"
        package, _ = verl_package(dict(os.environ))
        hint = (
            "the verl entry points hpcplace plans: "
            + ", ".join(
                f"verl.{ENTRY_HOME[e].replace('/', '.')}.{'main_ppo' if e == ONE_STEP_OFF else e}"
                for e in PLANNED_ENTRIES
                if e != DAPO
            )
            + ", recipe.dapo.main_dapo"
        )
        if package is not None and not (package / "trainer" / f"{name}.py").is_file():
            raise command.error(
                entry,
                f"the verl composed here ({package.parent}) has no module {module}: python would stop with "
                f"\"No module named '{module}'\"",
                hint=hint,
            )
        raise command.error(entry, f"{module} is not a trainer whose placement hpcplace reads", hint=hint)
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
    return VerlCommand(entry, name, flags.get("path"), flags.get("name"), tuple(overrides))


def verl_package(environ: dict[str, str]) -> tuple[Path | None, list[str]]:
    """The verl package whose configs are composed: a checkout's ($HPCPLACE_VERL_SRC), else the installed one;
    and, when neither, why not."""
    source = environ.get(SOURCE_ENV)
    package: Path | None = None
    why: list[str] = []
    if source:
        package = Path(source) / "verl"
        if not (package / "trainer").is_dir():
            why.append(f"{SOURCE_ENV}={source} has no verl/trainer folder")
            package = None
    else:
        why.append(f"{SOURCE_ENV} is not set")
    if package is None:
        found = importlib.util.find_spec("verl")
        if found is not None and found.origin:
            package = Path(found.origin).parent
        else:
            why.append("verl is not installed in this Python (importlib finds no `verl`)")
    return package, why


def verl_config_dir(verl: VerlCommand, command: FrameworkCommand, environ: dict[str, str]) -> tuple[Path, Path | None]:
    """The folder Hydra composes from: `--config-path` (absolute, or relative to the entry point's folder as
    Hydra reads it), else the entry point's config of a checkout ($HPCPLACE_VERL_SRC) or of the installed verl;
    and that verl's verl/trainer/config (where fully_async's configs find ppo_trainer.yaml)."""
    package, why = verl_package(environ)
    trainer_config = package / "trainer" / "config" if package is not None else None
    if verl.name == DAPO:  # `python -m recipe.dapo.main_dapo`: the recipe package of the current folder
        return _recipe_config_dir(verl, command), trainer_config
    home = package / ENTRY_HOME[verl.name] if package is not None else None
    if verl.config_path is not None:
        given, index = verl.config_path
        folder = Path(given) if os.path.isabs(given) or home is None else home / given
        if not folder.is_dir():
            raise command.error(
                index,
                f"--config-path {given!r}: no such folder ({folder})",
                hint=f"Hydra reads a relative --config-path from verl/{ENTRY_HOME[verl.name]}; give an absolute path",
            )
        return folder, trainer_config
    if home is None or not (home / "config").is_dir():
        raise command.error(
            verl.entry,
            f"verl's config (verl/{ENTRY_HOME[verl.name]}/config/{DEFAULT_CONFIG[verl.name]}.yaml) is not available "
            "to compose: " + "; ".join(why or [f"{home}/config is not a folder"]),
            hint=f"install the verl that runs the job (pip install --no-deps verl==0.9.1), set {SOURCE_ENV} to a "
            "verl checkout, or pass --config-path /abs/path/to/config",
        )
    return home / "config", trainer_config


def _recipe_config_dir(verl: VerlCommand, command: FrameworkCommand) -> Path:
    """recipe/dapo/config of the folder the driver starts in (where `python -m` finds the `recipe` package, as verl's
    checkout holds its recipe submodule), or `--config-path` read from recipe/dapo as Hydra reads it."""
    home = Path.cwd() / "recipe" / "dapo"
    if verl.config_path is not None:
        given, index = verl.config_path
        folder = Path(given) if os.path.isabs(given) else home / given
        if not folder.is_dir():
            raise command.error(
                index,
                f"--config-path {given!r}: no such folder ({folder})",
                hint="Hydra reads a relative --config-path from recipe/dapo; give an absolute path",
            )
        return folder
    if not (home / "main_dapo.py").is_file():
        raise command.error(
            verl.entry,
            f"recipe.dapo.main_dapo is not in this folder ({home / 'main_dapo.py'} is not there): python -m finds the "
            "recipe package in the folder it starts in",
            hint="run hpcplace from the folder the driver runs in: verl's checkout with its recipe submodule "
            "(verl-project/verl-recipe) at recipe/",
        )
    return home / "config"


def compose_verl(
    command: FrameworkCommand, verl: VerlCommand, folder: Path, trainer_config: Path | None
) -> tuple[YamlDocument, tuple[str, ...]]:
    """The config as verl's @hydra.main composes it, with every overridden value located at its word. A
    hydra.searchpath entry naming verl's own trainer config (VERL_SEARCHPATHS) is the composed verl's."""
    from hpcplace.config.formats import apply_overrides
    from hpcplace.config.hydra_config import compose, searchpath_entries, split_overrides

    name = verl.config_name[0] if verl.config_name else DEFAULT_CONFIG[verl.name]
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
    entries = searchpath_entries(doc)
    searchpath = None
    if trainer_config is not None and any(e in VERL_SEARCHPATHS for e in entries):
        searchpath = [f"file://{trainer_config}" if e in VERL_SEARCHPATHS else e for e in entries]
    try:
        for_hydra, plain = split_overrides(doc, texts, searchpath=searchpath)
        composed, files = compose(doc, for_hydra, searchpath=searchpath)
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
    """One of verl's resource pools: `nodes` nodes of `per_node` GPUs, created in POOLS order. A standalone
    pool is verl's one pool per replica (RolloutReplica.init_standalone), `<standalone><r>` for replica r, each
    of `replica_nodes` nodes, numbered from `first_replica`; replicas narrower than a node share one,
    `replicas_per_node` of them."""

    name: str
    nodes: int
    per_node: int
    view: View  # where its size was set (errors)
    standalone: str = ""
    replica_nodes: int = 1
    first_replica: int = 0
    cpus_per_bundle: int = COLOCATE  # the CPUs of each GPU's bundle (RayResourcePool's max_colocate_count)
    random_name: bool = False  # verl names its groups `<6 random letters and digits>verl_group_...` (SFT_POOL)
    replicas_per_node: int = 1

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


@dataclass(frozen=True)
class PrefillDecode:
    """A prefill-decode disaggregated replica (verl's SGLangPDReplica / vLLMPDReplica): one prefill server of
    prefill_tp GPUs, then `decodes` decode servers of decode_tp GPUs each, on the replica's GPUs in that order."""

    prefill_tp: int
    decode_tp: int
    decodes: int

    @property
    def width(self) -> int:
        return self.prefill_tp + self.decodes * self.decode_tp


def read_prefill_decode(reader: Reader, prefix: str, tp: int, dp: int, gpus_per_node: int) -> PrefillDecode | None:
    """`<rollout>.disaggregation` as verl checks it (DisaggregationConfig.__post_init__, RolloutConfig, and the
    PD replicas' __init__: verl-project/verl 1dda039 = 0.9.1 verl/workers/rollout/*/..._pd_replica.py)."""
    if not reader.flag(f"{prefix}.disaggregation.enabled"):
        return None
    name_view = reader.need(f"{prefix}.name")
    name = str(name_view.deref().value)
    if name not in ("sglang", "vllm"):
        raise name_view.error(
            f"rollout.disaggregation.enabled=True requires rollout.name in ('sglang', 'vllm'); got {name!r} "
            "(verl raises ValueError)"
        )
    backend_view = reader.need(f"{prefix}.disaggregation.transfer_backend")
    backend = backend_view.str()
    allowed = PD_BACKENDS[name]
    if backend not in allowed:
        raise backend_view.error(
            f"disaggregation.transfer_backend={backend!r}: verl's {name} PD replica takes {', '.join(allowed)} "
            "(verl raises)"
        )
    prefills, pview = reader.int(f"{prefix}.disaggregation.prefill_replicas")
    decodes, dview = reader.int(f"{prefix}.disaggregation.decode_replicas")
    if prefills < 1 or decodes < 1:
        raise (pview if prefills < 1 else dview).error(
            f"disaggregation requires >=1 prefill and >=1 decode replica (got prefill_replicas={prefills}, "
            f"decode_replicas={decodes}) (verl raises ValueError)"
        )
    if prefills != 1:
        raise pview.error(f"prefill_replicas=1 only (got {prefills}) (verl's PD replica raises NotImplementedError)")
    given = reader.get(f"{prefix}.disaggregation.decode_tensor_model_parallel_size")
    decode_tp = given.int(minimum=1) if given is not None and given.deref().value is not None else tp
    pd = PrefillDecode(tp, decode_tp, decodes)
    if pd.width > gpus_per_node:
        raise dview.error(
            f"PD replica needs {pd.width} GPUs but gpus_per_node={gpus_per_node} (verl's PD replica raises "
            "NotImplementedError: a replica stays on one node)",
            hint="lower decode_replicas or the TPs, or raise actor_rollout_ref.rollout.n_gpus_per_node",
        )
    if dp != 1:
        raise reader.need(f"{prefix}.data_parallel_size").error(
            f"data_parallel_size=1 only (got {dp}) (verl's PD replica raises NotImplementedError)"
        )
    return pd


@dataclass(frozen=True)
class MegatronSizes:
    """A Megatron engine's sizes: verl passes its engine config's tensor_model_parallel_size,
    pipeline_model_parallel_size, expert_model_parallel_size and expert_tensor_parallel_size to
    mpu.initialize_model_parallel as they are (McoreEngineConfig, verl/workers/config/engine.py:186-189;
    verl/workers/engine/megatron/transformer_impl.py:272-281): TP consecutive ranks are a tensor-parallel
    group, and Megatron-Core takes an ETP of None as the TP: its ETP x EP consecutive ranks are one MoE
    all-to-all."""

    tp: int
    pp: int
    ep: int
    etp: int | None  # None: the TP (Megatron-Core's default)
    view: View = field(compare=False)  # expert_model_parallel_size where EP > 1, else the TP (errors)

    def settings(self, component: str) -> ComponentSpec:
        experts = self.ep > 1
        return ComponentSpec(
            component,
            tensor_parallel_size=self.tp,
            pipeline_parallel_size=self.pp,
            expert_parallel_size=self.ep if experts else None,
            expert_tensor_parallel_size=self.etp if experts else None,
            location=self.view.location(),
        )


# verl's roles in a WorkerDict -> the config sections of the engines they run, the role's own first:
# `<section>.strategy` picks the engine (McoreActorConfig / McoreCriticConfig: strategy megatron, engine config
# `<section>.megatron`; verl/workers/config/actor.py:276-287, critic.py:172-184); ref's Megatron sizes default
# to the actor's (ref/megatron_ref.yaml: ${oc.select:actor_rollout_ref.actor.megatron...})
ROLE_ENGINES = {
    "actor_rollout": ("actor_rollout_ref.actor",),
    "actor": ("actor_rollout_ref.actor",),
    "actor_rollout_ref": ("actor_rollout_ref.actor", "actor_rollout_ref.ref"),
    "ref": ("actor_rollout_ref.ref",),
    "critic": ("critic",),
}
MCORE_ENGINE = "verl.workers.config.McoreEngineConfig"  # SFT's `engine` config class with model_engine megatron


def megatron_sizes(reader: Reader, engine: str) -> MegatronSizes:
    """The sizes of the Megatron engine config at `engine` (actor_rollout_ref.actor.megatron, critic.megatron,
    SFT's engine); an unset expert_model_parallel_size is 1 (Megatron's default)."""
    tp_view = reader.need(f"{engine}.tensor_model_parallel_size")
    tp = tp_view.int(minimum=1)
    pp = reader.need(f"{engine}.pipeline_model_parallel_size").int(minimum=1)
    ep_view = reader.get(f"{engine}.expert_model_parallel_size")
    if ep_view is None or ep_view.deref().value is None:
        return MegatronSizes(tp, pp, 1, None, tp_view)
    etp_view = reader.get(f"{engine}.expert_tensor_parallel_size")
    etp = None if etp_view is None or etp_view.deref().value is None else etp_view.int(minimum=1)
    return MegatronSizes(tp, pp, ep_view.int(minimum=1), etp, ep_view)


def role_sizes(reader: Reader, role: str, notes: list[str]) -> ComponentSpec | None:
    """A WorkerDict role's Megatron sizes (ROLE_ENGINES), None where its engine is not Megatron.
    actor_rollout_ref runs the actor's and the ref's engines in one process: the actor's sizes are checked,
    and a ref of other sizes is noted."""
    found: list[MegatronSizes | None] = []
    for section in ROLE_ENGINES[role]:
        strategy = reader.get(f"{section}.strategy")
        megatron = strategy is not None and strategy.deref().value == "megatron"
        found.append(megatron_sizes(reader, f"{section}.megatron") if megatron else None)
    own, *others = found
    for section, other in zip(ROLE_ENGINES[role][1:], others, strict=True):
        if other != own:
            notes.append(
                f"{role}: {section}.megatron's parallel sizes differ from {ROLE_ENGINES[role][0]}.megatron's in the "
                "same processes: the fabric check cuts the role's GPUs by the latter only"
            )
    return None if own is None else own.settings(role)


def add_replicas(
    entries: list[PlacementEntry],
    settings: dict[str, ComponentSpec],
    name: str,
    label: str,
    slots: tuple[int, ...],
    count: int,
    width: int,
    pd: PrefillDecode | None,
    view: View,
    tp: int,
    pp: int,
) -> None:
    """The processes of `count` replicas of `width` consecutive slots of a node group: one component, or with PD
    a prefill and a decode component (each replica's first prefill_tp GPUs serve prefill, the rest decode:
    launch_servers' slices of the replica's workers). A replica is one inference engine (its tp*dp*pp GPUs: one
    vLLM or SGLang server with data_parallel_size dp), recorded as gpus_per_engine where wider than its TP; with
    PD each prefill and each decode server is an engine of its own TP (dp 1; the KV transfer between them is
    point to point, and verl keeps a PD replica on one node)."""
    parts = (
        [(name, 0, width, tp)]
        if pd is None
        else [
            (f"{name}_prefill", 0, pd.prefill_tp, pd.prefill_tp),
            (f"{name}_decode", pd.prefill_tp, width, pd.decode_tp),
        ]
    )
    for component, low, high, part_tp in parts:
        ranks = tuple((slots[r * width + i],) for r in range(count) for i in range(low, high))
        entries.append(PlacementEntry((component,), (label,), None, ranks, view.location()))
        engine = width if pd is None and width > part_tp else None
        settings[component] = ComponentSpec(
            component, tensor_parallel_size=part_tp, pipeline_parallel_size=pp, gpus_per_engine=engine
        )


def replicas_text(name: str, world: int, tp: int, dp: int, pp: int, count: int, pool: Pool, start: int = 0) -> str:
    shown = ", ".join(f"{start + r * world}-{start + (r + 1) * world - 1}" for r in range(min(count, 4)))
    more = f", ... ({count} in all)" if count > 4 else ""
    return f"{name}: {count} replica(s) of tp{tp} dp{dp} pp{pp} = {world} GPUs on {pool.name} ranks {shown}{more}"


@dataclass(frozen=True)
class Teacher:
    """One teacher of on-policy distillation: `replicas` inference replicas of tp*dp*pp GPUs each."""

    component: str
    key: str
    replicas: int
    tp: int
    dp: int
    pp: int
    view: View  # a word of the command that set its entry, else the entry (errors)

    @property
    def width(self) -> int:
        return self.tp * self.dp * self.pp

    @property
    def world(self) -> int:
        return self.replicas * self.width


def entry_value(entry: View, dotted: str) -> View | None:
    view: View | None = entry
    for part in dotted.split("."):
        view = view.deref().get(part) if view is not None and isinstance(view.deref().value, dict) else None
    return None if view is None or view.deref().value is None else view


def given_word(entry: View, command_path: str) -> View:
    """The first value under `entry` that the command set (an entry added with `+` has no place in a file)."""
    for _key, child in entry.deref().items() if isinstance(entry.deref().value, dict) else ():
        if isinstance(child.deref().value, dict):
            found = given_word(child, command_path)
            if found is not child:
                return found
        elif child.location().path == command_path:
            return child
    return entry


def read_teachers(reader: Reader, pool: Pool, size_view: View, command_path: str) -> list[Teacher]:
    """The teachers as verl's DistillationConfig.__post_init__ resolves them (verl/workers/config/distillation.py,
    1dda039 = 0.9.1): the entry `teacher_model` alone fills the pool with replicas of its size; beside others it
    is dropped, and each other entry needs key, model_path and num_replicas; the teachers' GPUs must add up to
    the pool. An entry added with `+` gets RolloutConfig's defaults for the sizes it does not give."""
    models = reader.need("distillation.teacher_models")
    entries = [(str(k), v) for k, v in models.deref().items()]
    if "teacher_model" not in dict(entries):
        raise models.error(
            "verl asserts 'teacher_model' in distillation.teacher_models (DistillationConfig._resolve_teacher_models)",
            hint="keep the default entry teacher_model; add other teachers with +distillation.teacher_models.<name>",
        )
    single = len(entries) == 1
    teachers: list[Teacher] = []
    for name, entry in entries if single else [(n, e) for n, e in entries if n != "teacher_model"]:
        word = given_word(entry, command_path)
        sizes = []
        for what in ("tensor_model_parallel_size", "data_parallel_size", "pipeline_model_parallel_size"):
            view = entry_value(entry, f"inference.{what}")
            sizes.append(TEACHER_SIZE_DEFAULTS[what] if view is None else view.int(minimum=1))
        tp, dp, pp = sizes
        width = tp * dp * pp
        if single:
            tp_view = entry_value(entry, "inference.tensor_model_parallel_size")
            # at the teacher's TP where the command set it, else at the pool size the command set
            where = tp_view if tp_view is not None and tp_view.location().path == command_path else size_view
            if pool.world % width:
                raise where.error(
                    f"Single teacher's per_replica_world_size ({width}) must divide the distillation resource pool "
                    f"size (n_gpus_per_node={pool.per_node} * nnodes={pool.nodes} = {pool.world}) (verl raises "
                    "ValueError)",
                    hint="make the teacher's tp*dp*pp divide distillation.n_gpus_per_node * distillation.nnodes",
                )
            teachers.append(Teacher("teacher_model", "default", pool.world // width, tp, dp, pp, word))
            continue
        for field_name in ("model_path", "key", "num_replicas"):
            if entry_value(entry, field_name) is None:
                raise word.error(
                    f"distillation.teacher_models.{name}: {field_name} must be specified for distillation teacher "
                    "model config (verl raises ValueError)",
                    hint=f"add +distillation.teacher_models.{name}.{field_name}=...",
                )
        replicas_view = entry_value(entry, "num_replicas")
        assert replicas_view is not None  # checked just above
        key = str(entry_value(entry, "key").deref().value)  # type: ignore[union-attr]  # checked just above
        if any(t.key == key for t in teachers):
            raise word.error(f"Duplicate teacher key {key} found in teacher models (verl raises ValueError)")
        teachers.append(Teacher(f"teacher_{name}", key, replicas_view.int(minimum=0), tp, dp, pp, word))
    total = sum(t.world for t in teachers)
    if total != pool.world:
        sizes_text = ", ".join(f"{t.key}: {t.replicas} x {t.width}" for t in teachers)
        raise size_view.error(
            f"Sum of teacher (num_replicas * per_replica_world_size) ({total}) must match the distillation resource "
            f"pool size (n_gpus_per_node={pool.per_node} * nnodes={pool.nodes} = {pool.world}) (verl raises "
            f"ValueError; teachers {sizes_text})",
            hint="make the teachers' num_replicas * tp*dp*pp add up to distillation.n_gpus_per_node * nnodes",
        )
    return teachers


def check_teacher_alignment(teacher: Teacher, start: int, per_node: int) -> None:
    """TeacherModelManager: a replica is made with the pool's n_gpus_per_node (RolloutReplica's assert), and
    _validate_replica_node_alignment refuses a replica whose bundles span more nodes than its size needs
    (split_resource_pool cuts the pool's bundles in order, blind to nodes)."""
    width = teacher.width
    check_replica(width, per_node, teacher.view, f"teacher {teacher.key!r}")
    span = (width + per_node - 1) // per_node
    for i in range(teacher.replicas):
        first = start + i * width
        seen = (first + width - 1) // per_node - first // per_node + 1
        if seen != span:
            raise teacher.view.error(
                f"Teacher {teacher.key!r} replica {i} sub-pool bundles [{first}, {first + width}) span {seen} node(s) "
                f"but per_replica_world_size {width} with n_gpus_per_node {per_node} expects {span}. Reorder "
                "teachers or adjust num_replicas / inference parallelism so each replica sub-pool aligns to node "
                "boundaries. (verl raises ValueError)"
            )


def check_device(reader: Reader) -> None:
    """verl asks Ray for its platform's resource (`NPU` on Ascend: RayResourcePool.get_placement_groups via
    ray_resource_name()) and its workers read ASCEND_RT_VISIBLE_DEVICES there; hpcplace's nodes give Ray CUDA GPUs
    (Slurm's GRES gpu, CUDA_VISIBLE_DEVICES), so a job for another device is refused rather than planned as GPUs."""
    view = reader.get("trainer.device")
    if view is None or view.deref().value in (None, "cuda"):
        return
    device = view.str()
    if device == "npu":
        raise view.error(
            "trainer.device=npu: verl places its pools on Ascend NPUs (Ray resource 'NPU', "
            "ASCEND_RT_VISIBLE_DEVICES) and hpcplace plans NVIDIA GPUs only (GRES gpu, CUDA_VISIBLE_DEVICES, "
            "Ray 'GPU'): Ascend NPUs are not supported yet",
            hint="plan the job for NVIDIA GPUs (trainer.device=cuda), or launch the Ascend job with verl's own "
            "scripts (ray start on each node) without hpcplace",
        )
    raise view.error(
        f"trainer.device={device}: hpcplace plans verl on CUDA GPUs only", hint="trainer.device=cuda (verl's default)"
    )


def check_dapo(reader: Reader, notes: list[str]) -> None:
    """recipe/dapo/main_dapo.py: DAPOTaskRunner(main_ppo_v0.BaseTaskRunner) registers the actor/rollout, critic,
    reward model and (a no-op) reference roles, never the teacher: verl's distillation teacher_pool would have no
    role mapped to it."""
    if reader.flag("distillation.enabled"):
        raise reader.need("distillation.enabled").error(
            "recipe.dapo's DAPOTaskRunner maps no role to the teacher_pool verl reserves for distillation (it never "
            "calls add_teacher_model_resource_pool): verl's trainer finds no TeacherModel pool",
            hint="distillation.enabled=False, or verl's own trainers for on-policy distillation",
        )
    if reader.flag("trainer.use_v1", default=False):
        notes.append(
            "trainer.use_v1 is true, but recipe.dapo runs verl's legacy TaskRunner (main_ppo_v0) whatever it says: "
            "planned as that"
        )


def check_fully_async(reader: Reader) -> None:
    """What fully_async's trainer and rollouter assert of the config (FullyAsyncTrainer.__init__,
    FullyAsyncRollouter.__init__ / _validate_config / _init_async_rollout_manager, verl 1dda039 = 0.9.1),
    each refused at its key: the job would stop there."""
    hybrid_engine = reader.need("actor_rollout_ref.hybrid_engine")
    if hybrid_engine.bool():
        raise hybrid_engine.error(
            "true: verl's fully async trainer asserts `not hybrid_engine` (its rollout runs in replicas of their "
            "own, not in the actor's processes)",
            hint="actor_rollout_ref.hybrid_engine=False, as verl's fully_async_policy/shell examples set",
        )
    checks = (  # key, the values verl allows (low..high), its assert's words, a value its examples set
        ("data.train_batch_size", 0, 0, "train_batch_size must be zero", "0"),
        ("data.gen_batch_size", 1, 1, "gen_batch_size must be one", "1"),
        ("async_training.staleness_threshold", 0, math.inf, "staleness_threshold must larger than 0", "0.1"),
        (
            "async_training.trigger_parameter_sync_step",
            1,
            math.inf,
            "trigger_parameter_sync_step must larger or equal than 1",
            "4",
        ),
    )
    for key, low, high, words, example in checks:
        view = reader.need(key)
        value = view.deref().value
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not low <= value <= high:
            raise view.error(
                f"got {value!r}: verl's FullyAsyncRollouter asserts '{words}'",
                hint=f"{key}={example}, as verl's fully_async_policy/shell examples set",
            )
    log_probs = reader.need("actor_rollout_ref.rollout.calculate_log_probs")
    if not log_probs.bool():
        raise log_probs.error("verl's FullyAsyncRollouter asserts 'must rollout calculate log_probs'")
    mode = reader.need("actor_rollout_ref.rollout.mode")
    if mode.str() != "async":
        raise mode.error(f"got {mode.str()!r}: verl's FullyAsyncRollouter asserts rollout.mode == 'async'")


def check_one_step_off(reader: Reader, rm_prefix: str) -> None:
    """What verl's one-step-off trainer asserts or cannot do (OneStepOffRayTrainer, SeparateRayPPOTrainer, verl
    1dda039 = 0.9.1), each refused at its key: the job would stop there."""
    hybrid_engine = reader.need("actor_rollout_ref.hybrid_engine")
    if hybrid_engine.bool():
        raise hybrid_engine.error(
            "true: verl's one-step-off trainer asserts `not hybrid_engine` (OneStepOffRayTrainer.__init__: its "
            "rollout runs in standalone replicas, not in the actor's processes)",
            hint="actor_rollout_ref.hybrid_engine=False, as verl's one_step_off_policy/shell examples set",
        )
    mode = reader.need("actor_rollout_ref.rollout.mode")
    if mode.str() != "async":
        raise mode.error(
            f"got {mode.str()!r}: verl's one-step-off trainer asserts rollout.mode == 'async' "
            "(OneStepOffRayTrainer._init_async_rollout_manager)"
        )
    if reader.flag(f"{rm_prefix}.enable"):
        raise reader.need(f"{rm_prefix}.enable").error(
            "true: verl's one-step-off trainer has no pool for a reward model (separation's "
            "create_resource_pool_manager maps only the training roles), so SeparateRayPPOTrainer."
            "_create_reward_model_class fails looking it up (KeyError: Role.RewardModel)",
            hint=f"{rm_prefix}.enable=False (a rule-based reward), or verl's PPO or fully async trainer for a "
            "reward model",
        )
    if reader.flag("distillation.enabled"):
        raise reader.need("distillation.enabled").error(
            "true: verl's one-step-off trainer starts no teacher model: it gives AgentLoopManager no teacher "
            "client, and AsyncTeacherLLMServerManager fails on it (teacher_client is None)",
            hint="distillation.enabled=False, or verl's PPO or fully async trainer for on-policy distillation",
        )


def fully_async_reward_pool(reader: Reader, prefix: str, enable: bool, own_pool: bool, notes: list[str]) -> list[Pool]:
    """fully_async's reward model: RewardLoopManager(rm_resource_pool=None) starts it as standalone replicas,
    one pool each (rollout_pool_reward_<r>, RewardModelManager); FullyAsyncRollouter asserts it has a pool of
    its own (enable_resource_pool), and without `enable` nothing is reserved."""
    if not enable:
        if own_pool:
            notes.append(
                f"{prefix}.enable_resource_pool without {prefix}.enable: verl's fully async trainer starts no reward "
                "model and reserves no GPUs for it"
            )
        return []
    if not own_pool:
        raise reader.need(f"{prefix}.enable_resource_pool").error(
            "GenRM/DisRM in fully async mode requires standalone mode (enable_resource_pool=True). Colocate mode is "
            "not supported because async rollout never pauses. (verl's FullyAsyncRollouter asserts)",
            hint=f"set {prefix}.enable_resource_pool=true with its nnodes and n_gpus_per_node",
        )
    rn, rnv = reader.int(f"{prefix}.nnodes")
    rg, _ = reader.int(f"{prefix}.n_gpus_per_node")
    for value, key in ((rg, "n_gpus_per_node"), (rn, "nnodes")):
        if value <= 0:  # create_resource_pool_manager asserts these only for a trainer role; the replicas need them
            raise reader.need(f"{prefix}.{key}").error(
                f"config.{prefix}.{key} must be greater than 0 (verl starts no reward model replica on {value})"
            )
    *_, mworld, mview = rollout_world(reader, f"{prefix}.rollout")
    count = rn * rg // mworld
    if count < 1:
        raise mview.error(
            f"Not enough GPUs to run the reward model. world_size ({rn * rg}) < rollout_world_size ({mworld}). "
            "(verl asserts in RewardModelManager)",
            hint=f"Check your resource pool or standalone config ({prefix}.n_gpus_per_node, nnodes)",
        )
    check_replica(mworld, rg, mview, f"{prefix}.rollout")
    if rn * rg % mworld:
        notes.append(f"reward_pool: {rn * rg % mworld} of its {rn * rg} GPUs hold no replica (verl: world // tp*dp*pp)")
    return [standalone_pool("reward_pool", "rollout_pool_reward_", rn, rnv, rg, mworld, mview, 0)]


def standalone_pool(
    name: str, prefix: str, nodes: int, view: View, gpus_per_node: int, world: int, world_view: View, first: int
) -> Pool:
    """The pools of verl's `nodes * gpus_per_node // world` standalone replicas (RolloutReplica.init_standalone):
    replica r's pool `<prefix><first + r>` is [min(gpus_per_node, world)] * (world // that), one PACK placement
    group per node it spans. A replica narrower than a node shares it with the next ones: verl creates the
    replicas' groups one after the other, each ready before the next, and the plan steers `gpus_per_node //
    world` of them to each node, their GPUs in replica order (Ray hands a node's free GPUs out as each group is
    committed). A replica that would fit whole on no node (tp*dp*pp not dividing the node's GPUs, and more
    replicas than fit whole) is refused: Ray would split its group over the nodes' leftover GPUs."""
    count = nodes * gpus_per_node // world
    if world >= gpus_per_node:
        step = world // gpus_per_node
        return Pool(name, step * count, gpus_per_node, view, prefix, step, first, STANDALONE_COLOCATE)
    whole = gpus_per_node // world
    if count > nodes * whole:
        raise world_view.error(
            f"{name}: {count} standalone replica(s) of tp*dp*pp = {world} GPUs on {nodes} node(s) of {gpus_per_node} "
            f"GPUs: {whole} fit whole on a node, so replica {first + nodes * whole} would have its PACK placement "
            "group split over the nodes' leftover GPUs by Ray, which hpcplace cannot steer exactly",
            hint=f"make tp*dp*pp divide the pool's n_gpus_per_node ({gpus_per_node})",
        )
    return Pool(name, nodes, whole * world, view, prefix, 1, first, STANDALONE_COLOCATE, replicas_per_node=whole)


def standalone_rollout(
    nodes: int, view: View, gpus_per_node: int, world: int, world_view: View, first: int, notes: list[str]
) -> list[Pool]:
    """LLMServerManager's standalone replicas: nodes * gpus_per_node // world of them, replica r in a pool of
    its own (rollout_pool_<first + r>, RolloutReplica.init_standalone) of min(gpus_per_node, world) GPUs a node;
    none when not even one fits."""
    count = nodes * gpus_per_node // world
    if count < 1:
        return []
    check_replica(world, gpus_per_node, world_view, "actor_rollout_ref.rollout")
    pool = standalone_pool("rollout_pool", "rollout_pool_", nodes, view, gpus_per_node, world, world_view, first)
    if nodes * gpus_per_node % world:
        notes.append(
            f"rollout_pool: {nodes * gpus_per_node % world} of its {nodes * gpus_per_node} GPUs hold no replica "
            "(verl: world // tp*dp*pp)"
        )
    notes.append(
        f"rollout_pool: verl makes one pool per standalone replica (rollout_pool_<i>, PACK placement groups "
        f"of {min(gpus_per_node, world)} GPU(s))"
        + (f", {pool.replicas_per_node} replicas a node" if pool.replicas_per_node > 1 else "")
        + ": verl makes them one after the other, so each takes its node's next free GPUs, as the plan lists them"
    )
    return [pool]


def parse(command: FrameworkCommand, blocks: YamlDocument, site_gpus: SiteGpus | None) -> ExperimentSpec:
    """verl's pools, roles and rollout replicas from its command, each pool on its node group."""
    root = blocks.root()
    notes: list[str] = []
    version = resolve_version("verl", root, notes)
    verl = read_command(command)
    folder, trainer_config = verl_config_dir(verl, command, dict(os.environ))
    doc, files = compose_verl(command, verl, folder, trainer_config)
    reader = Reader(doc)
    if version is not None:
        notes.append(f"planned as {version.describe()}")

    check_device(reader)
    if verl.name == SFT:
        return parse_sft(reader, blocks, site_gpus, notes, files, version)
    if verl.name == GENERATION:
        return parse_generation(reader, blocks, site_gpus, notes, files, version)
    fully_async = verl.name == "fully_async_main"
    one_step_off = verl.name == ONE_STEP_OFF
    separated = verl.name in SEPARATED
    rm_prefix = "reward.reward_model" if reader.get("reward.reward_model") is not None else "reward_model"
    if fully_async:
        check_fully_async(reader)
    if one_step_off:
        check_one_step_off(reader, rm_prefix)
    mode_view = reader.get("trainer.v1.trainer_mode")
    dapo = verl.name == DAPO
    if dapo:
        check_dapo(reader, notes)
    # the separated trainers have their own trainers; DAPO's TaskRunner is the legacy v0 one
    use_v1 = reader.flag("trainer.use_v1", default=False) and not separated and not dapo
    mode = mode_view.str() if use_v1 and mode_view is not None else "sync"
    if use_v1 and mode not in TRAINER_MODES:
        assert mode_view is not None
        raise mode_view.error(
            f"Unknown trainer {mode!r}. Available trainers: {', '.join(TRAINER_MODES)}. (verl's get_trainer_cls)"
        )
    train_pool = "trainer_pool" if separated else "global_pool"  # separation/utils.py create_resource_pool_manager
    what = f"verl's {train_pool}" + (" (asserted in create_resource_pool_manager)" if separated else "") + " has"
    nnodes, nview, gpn = trainer_size(reader, what)
    pools = [Pool(train_pool, nnodes, gpn, nview)]

    rm_enable = reader.flag(f"{rm_prefix}.enable")
    rm_pool = reader.flag(f"{rm_prefix}.enable_resource_pool")
    if fully_async:
        pools += fully_async_reward_pool(reader, rm_prefix, rm_enable, rm_pool, notes)
    elif one_step_off and rm_pool:
        notes.append(
            f"{rm_prefix}.enable_resource_pool: verl's one-step-off trainer makes only the trainer_pool and reserves "
            "no GPUs for a reward model"
        )
    elif rm_pool:
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
    teachers: list[Teacher] = []
    if reader.flag("distillation.enabled"):  # (one_step_off refused it above)
        dn, dnv = reader.int("distillation.nnodes")
        dg, dgv = reader.int("distillation.n_gpus_per_node")
        if dg <= 0 and fully_async:  # FullyAsyncRollouter._create_teacher_model_manager
            raise dgv.error("verl asserts 'distillation.n_gpus_per_node must be greater than 0 for TeacherModel'")
        if dg <= 0:
            raise dgv.error("config.distillation.n_gpus_per_node must be greater than 0 (verl raises ValueError)")
        if dn <= 0:
            raise dnv.error("config.distillation.nnodes must be greater than 0 (verl raises ValueError)")
        pools.append(Pool("teacher_pool", dn, dg, dnv))
        teachers = read_teachers(reader, pools[-1], dgv, command.location(verl.entry).path)

    rtp, rdp, rpp, rworld, rview = rollout_world(reader, "actor_rollout_ref.rollout")
    # fully_async_main and one_step_off's main copy rollout.nnodes / n_gpus_per_node into actor_rollout_ref.rollout
    r_gpn, _ = reader.int(("rollout" if separated else "actor_rollout_ref.rollout") + ".n_gpus_per_node")
    pd = read_prefill_decode(reader, "actor_rollout_ref.rollout", rtp, rdp, r_gpn)
    if pd is not None:  # LLMServerManager._initialize_llm_servers: PD inflates the replica's footprint
        rworld = pd.width
        notes.append(
            f"rollout: prefill-decode disaggregation: each replica is 1 prefill server of tp{pd.prefill_tp} then "
            f"{pd.decodes} decode server(s) of tp{pd.decode_tp} = {pd.width} GPUs (components rollout*_prefill, "
            "rollout*_decode)"
        )
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
        standalone = standalone_rollout(sn, snv, r_gpn, rworld, rview, 0, notes)
        if not standalone:
            raise snv.error(
                f"the standalone rollout has {sn}x{r_gpn} GPUs, fewer than one replica's {rworld} (tp*dp*pp): "
                "verl would start no rollout server"
            )
    elif one_step_off:  # LLMServerManager.create(config): standalone replicas only, numbered from 0
        hybrid = False
        sn, snv = reader.int("rollout.nnodes")
        if sn <= 0:
            raise snv.error(
                f"got {sn}: verl asserts 'nnodes must be > 0 in standalone mode' (LLMServerManager; one_step_off's "
                "main copies rollout.nnodes to actor_rollout_ref.rollout.nnodes)",
                hint="give the rollout nodes: rollout.nnodes and rollout.n_gpus_per_node",
            )
        standalone = standalone_rollout(sn, snv, r_gpn, rworld, rview, 0, notes)
        if not standalone:
            raise snv.error(
                f"the standalone rollout has {sn}x{r_gpn} GPUs (rollout.nnodes x rollout.n_gpus_per_node), fewer "
                f"than one replica's {rworld} (tp*dp*pp): verl would start no rollout server",
                hint="raise rollout.n_gpus_per_node (or rollout.nnodes), or lower "
                "actor_rollout_ref.rollout.tensor_model_parallel_size",
            )
    elif fully_async:
        # FullyAsyncLLMServerManager: hybrid replicas on the trainer's workers (ranks 0..), then standalone ones
        hybrid = reader.flag("async_training.use_trainer_do_validate") or reader.flag(
            "async_training.use_dynamic_resource_scheduling"
        )
        sn, snv = reader.int("rollout.nnodes")
        if not hybrid and sn <= 0:
            raise snv.error(
                f"got {sn}: verl asserts 'nnodes must be > 0 in standalone mode' (LLMServerManager; "
                "fully_async_main copies rollout.nnodes to actor_rollout_ref.rollout.nnodes)",
                hint="give the rollout nodes (rollout.nnodes, rollout.n_gpus_per_node), or set "
                "async_training.use_dynamic_resource_scheduling=True to generate on the trainer's GPUs",
            )
        name_view = reader.need("actor_rollout_ref.rollout.name")
        if hybrid and name_view.str() == "trtllm":
            raise name_view.error(
                "trtllm with hybrid replicas (async_training.use_trainer_do_validate / "
                "use_dynamic_resource_scheduling): verl's FullyAsyncLLMServerManager starts them with "
                "init_hybrid_colocated(worker_group, None), and TRTLLMReplica.launch_servers reads that pool's "
                "placement groups (`self.resource_pool.pgs`): verl fails there (AttributeError)",
                hint="use vllm or sglang for trainer-side validation / dynamic resource scheduling, or turn both off",
            )
        hybrids = nnodes * gpn // rworld if hybrid else 0
        standalone = standalone_rollout(sn, snv, r_gpn, rworld, rview, hybrids, notes) if sn > 0 else []
        if hybrids == 0 and not standalone:
            raise (snv if sn > 0 else rview).error(
                f"no rollout replica fits: a replica needs tp*dp*pp = {rworld} GPUs, the standalone rollout has "
                f"{max(sn, 0)}x{r_gpn} and the trainer's hybrid replicas "
                + (f"{nnodes}x{gpn}" if hybrid else "are off")
                + ": verl would start no rollout server",
                hint="lower actor_rollout_ref.rollout.tensor_model_parallel_size (or dp/pp), or give more GPUs",
            )
    pools += standalone

    placed = place_pools(pools, root.get("slurm"), site_gpus, notes, in_order=separated)
    labels, slots = placed.labels, placed.slots

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
    if separated:  # create_role_worker_mapping; SeparateRayPPOTrainer adds ref whenever KL needs it
        roles = ["actor_rollout" if hybrid else "actor"] + (["ref"] if use_ref else [])
    elif not hybrid:
        roles = ["actor"] + (["ref"] if use_ref and not ref_in_actor else [])
    else:
        roles = ["actor_rollout_ref" if use_ref and not ref_in_actor else "actor_rollout"]
    roles += ["critic"] if use_critic else []
    per_gpu = tuple((i,) for i in slots[g.name])
    entries.append(PlacementEntry(tuple(roles), glabel, None, per_gpu, g.view.location()))
    for role in roles:
        if (sizes := role_sizes(reader, role, notes)) is not None:
            settings[role] = sizes
    notes.append(
        f"{g.name}: one WorkerDict process per GPU holds {', '.join(roles)} (verl's create_colocated_worker_cls)"
        + ("; ref shares the actor's model (LoRA)" if use_ref and ref_in_actor else "")
    )
    count = g.world // rworld
    if hybrid and fully_async and count < 1:
        notes.append(f"rollout: no hybrid replica: one needs tp*dp*pp = {rworld} GPUs and {g.name} has {g.world}")
    elif hybrid:
        check_replica(rworld, r_gpn, rview, "actor_rollout_ref.rollout")
        if count < 1:
            raise rview.error(
                f"a rollout replica needs tp*dp*pp = {rworld} GPUs and global_pool has {g.world} "
                f"({g.nodes}x{g.per_node}): verl would start no rollout server",
                hint="lower actor_rollout_ref.rollout.tensor_model_parallel_size (or dp/pp), or raise trainer.nnodes",
            )
        add_replicas(entries, settings, "rollout", glabel[0], slots[g.name], count, rworld, pd, rview, rtp, rpp)
        notes.append(replicas_text("rollout (in the WorkerDict processes)", rworld, rtp, rdp, rpp, count, g))
        if fully_async:
            notes.append(
                "rollout: fully async's hybrid replicas sleep on the trainer's GPUs and wake for trainer-side "
                "validation (async_training.use_trainer_do_validate) or dynamic resource scheduling; the standalone "
                f"replicas are numbered after them (rollout_pool_{count}...)"
            )
        if g.world % rworld:
            notes.append(f"rollout: {g.name} ranks {count * rworld}-{g.world - 1} hold no rollout replica")
    for pool in standalone:
        replicas = pool.world // rworld
        args = (slots[pool.name], replicas, rworld, pd, pool.view, rtp, rpp)
        add_replicas(entries, settings, "rollout_standalone", labels[pool.name], *args)
        notes.append(replicas_text("rollout_standalone", rworld, rtp, rdp, rpp, replicas, pool))
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
                ("reward_model",), (labels[pool.name],), None, tuple((i,) for i in slots[pool.name]), mview.location()
            )
        )
        settings["reward_model"] = ComponentSpec(  # its replicas are inference engines (add_replicas)
            "reward_model",
            tensor_parallel_size=mtp,
            pipeline_parallel_size=mpp,
            gpus_per_engine=mworld if mworld > mtp else None,
        )
        notes.append(replicas_text("reward_model", mworld, mtp, mdp, mpp, pool.world // mworld, pool))
        if pool is g:
            notes.append(
                "reward_model: colocated on global_pool in processes of its own (RolloutReplica.init_colocated)"
            )
    teacher_pool = next((p for p in pools if p.name == "teacher_pool"), None)
    start = 0
    for t in teachers if teacher_pool is not None else []:
        assert teacher_pool is not None
        check_teacher_alignment(t, start, teacher_pool.per_node)
        label = labels[teacher_pool.name]
        mine = slots[teacher_pool.name][start : start + t.world]
        add_replicas(entries, settings, t.component, label, mine, t.replicas, t.width, None, t.view, t.tp, t.pp)
        notes.append(
            replicas_text(f"{t.component} (key {t.key})", t.width, t.tp, t.dp, t.pp, t.replicas, teacher_pool, start)
        )
        start += t.world
    return finish(verl.name, blocks, placed, entries, settings, notes, files, version)


def trainer_size(reader: Reader, what: str) -> tuple[int, View, int]:
    """trainer.nnodes (and where it was set) and trainer.n_gpus_per_node, each at least 1 and within limits."""
    nnodes, nview = reader.int("trainer.nnodes")
    gpn, gview = reader.int("trainer.n_gpus_per_node")
    for value, view, key in ((nnodes, nview, "trainer.nnodes"), (gpn, gview, "trainer.n_gpus_per_node")):
        if value < 1:
            raise view.error(f"{key} must be at least 1 ({what} [n_gpus_per_node] * nnodes GPUs), got {value}")
    limits.nodes(nnodes, nview.location(), "trainer.nnodes")
    limits.gpus_per_node(gpn, gview.location(), "trainer.n_gpus_per_node")
    return nnodes, nview, gpn


def parse_generation(
    reader: Reader,
    blocks: YamlDocument,
    site_gpus: SiteGpus | None,
    notes: list[str],
    files: tuple[str, ...],
    version: FrameworkVersion | None,
) -> ExperimentSpec:
    """verl's generation server (main_generation_server.start_server, verl 1dda039 = 0.9.1): (trainer.n_gpus_per_node
    * trainer.nnodes) // tp standalone rollout replicas, each in a pool of its own (rollout_pool_<r>,
    RolloutReplica.init_standalone); the driver process sends the prompts."""
    nnodes, nview, gpn = trainer_size(reader, "verl's generation server serves on")
    tp, dp, pp, world, view = rollout_world(reader, "actor_rollout_ref.rollout")
    count = nnodes * gpn // tp
    if count < 1:
        raise view.error(
            f"a rollout replica needs tensor_model_parallel_size = {tp} GPUs and the trainer's are {nnodes}x{gpn}: "
            "verl's generation server would start no replica",
            hint="lower actor_rollout_ref.rollout.tensor_model_parallel_size, or raise trainer.n_gpus_per_node",
        )
    if count * world > nnodes * gpn:
        raise view.error(
            f"verl's generation server starts (trainer.n_gpus_per_node x trainer.nnodes) // tp = {count} replica(s) "
            f"of tp*dp*pp = {world} GPUs each, {count * world} GPUs where there are {nnodes * gpn}: Ray would never "
            "place the last replicas' groups",
            hint="data_parallel_size and pipeline_model_parallel_size 1 (start_server counts its replicas by "
            "tensor_model_parallel_size alone)",
        )
    pools = standalone_rollout(nnodes, nview, gpn, world, view, 0, notes)
    placed = place_pools(pools, blocks.root().get("slurm"), site_gpus, notes)
    entries: list[PlacementEntry] = []
    settings: dict[str, ComponentSpec] = {}
    slots = placed.slots[pools[0].name]
    add_replicas(entries, settings, "rollout", placed.labels[pools[0].name], slots, count, world, None, view, tp, pp)
    notes.append(replicas_text("rollout", world, tp, dp, pp, count, pools[0]))
    return finish(GENERATION, blocks, placed, entries, settings, notes, files, version)


def parse_sft(
    reader: Reader,
    blocks: YamlDocument,
    site_gpus: SiteGpus | None,
    notes: list[str],
    files: tuple[str, ...],
    version: FrameworkVersion | None,
) -> ExperimentSpec:
    """verl's SFT trainer on Ray (SFTTrainer._build_engine, verl 1dda039 = 0.9.1): one RayResourcePool of
    [trainer.n_gpus_per_node] * trainer.nnodes, one TrainingWorker per GPU; the trainer runs in the driver."""
    nnodes, nview, gpn = trainer_size(reader, "verl's SFT trainer trains on")
    pool = Pool(SFT_POOL, nnodes, gpn, nview, cpus_per_bundle=SFT_COLOCATE, random_name=True)
    placed = place_pools([pool], blocks.root().get("slurm"), site_gpus, notes)
    label, slots = placed.labels[SFT_POOL], placed.slots[SFT_POOL]
    entries = [PlacementEntry(("trainer",), (label,), None, tuple((i,) for i in slots), nview.location())]
    target = reader.get("engine._target_")
    sizes = (
        megatron_sizes(reader, "engine")
        if target is not None and target.deref().value == MCORE_ENGINE  # SFTTrainer: omega_conf_to_dataclass
        else None
    )
    notes.append(
        f"{SFT_POOL}: one TrainingWorker process per GPU (verl's SFTTrainer: RayResourcePool(process_on_nodes="
        "[n_gpus_per_node] * nnodes), its placement groups named by 6 random letters and digits then verl_group_...)"
    )
    settings = {"trainer": ComponentSpec("trainer") if sizes is None else sizes.settings("trainer")}
    return finish(SFT, blocks, placed, entries, settings, notes, files, version)


@dataclass(frozen=True)
class PlacedPools:
    """The pools on their node groups: each pool's group label, each group's layout and NodeGroup, and each
    pool's rank -> the group's GPU slot."""

    labels: dict[str, str]
    layouts: dict[str, GroupLayout]
    groups: tuple[NodeGroup, ...]
    slots: dict[str, tuple[int, ...]]


def place_pools(
    pools: list[Pool],
    slurm_view: View | None,
    site_gpus: SiteGpus | None,
    notes: list[str],
    *,
    in_order: bool = False,
) -> PlacedPools:
    """The node group of each pool (`slurm.pools`), each group's size from its pools, checked against the site.
    `in_order`: every pool's groups, the standalone replicas' included, are created one pool after the other
    in POOLS order, each ready before the next (the separation trainers)."""
    standalone = {p.name for p in pools if p.standalone}
    labels = pool_labels(slurm_view, [p.name for p in pools], standalone, in_order)
    base = slurm_facts(slurm_view)
    layouts = group_layouts(pools, labels)
    groups: list[NodeGroup] = []
    for label, layout in layouts.items():
        facts = slurm_facts(slurm_view, label, base)
        check_gpus(layout, facts, label, site_gpus, slurm_view)
        groups.append(facts_node_group(label, facts, layout.nodes, layout.per_node, layout.pools[0].view))
    for label, layout in layouts.items():
        if len(layout.pools) > 1:
            notes.append(
                f"node group {label!r} holds {' then '.join(f'{p.name} ({p.nodes}x{p.per_node})' for p in layout.pools)}:"
                " each pool's group i is steered to the group's node i and takes the node's GPUs after the pools "
                "created before it (verl creates its pools' placement groups in that order; Ray gives a node's "
                "free GPUs to each group's bundles as it commits them)"
            )
    slots = {p.name: layouts[labels[p.name]].slots[p.name] for p in pools}
    return PlacedPools(labels, layouts, tuple(groups), slots)


DRIVER_CPUS_TEXT = {
    "main_ppo": "its TaskRunner actor 1 more, taken before the pools",
    DAPO: "its DAPOTaskRunner actor 1 more, taken before the pools",
    "fully_async_main": f"its driver actors {TASK_RUNNER_CPUS['fully_async_main']} more (FullyAsyncTaskRunner 1, "
    "FullyAsyncTrainer 10 before the trainer_pool; FullyAsyncRollouter 10 and MessageQueue 2 before the replicas)",
    ONE_STEP_OFF: f"its OneStepTaskRunner actor {TASK_RUNNER_CPUS[ONE_STEP_OFF]} more, taken before the pools",
    SFT: "its trainer runs in the driver process, outside Ray's CPU accounting",
    GENERATION: "its driver only sends the prompts, from outside Ray's CPU accounting",
}
BUNDLE_TEXT = {  # why a pool's bundles hold the CPUs they do
    COLOCATE: "ResourcePoolManager's max_colocate_count",
    STANDALONE_COLOCATE: "a standalone replica's pool",
    SFT_COLOCATE: "RayResourcePool's default max_colocate_count",
}


def finish(
    entry: str,
    blocks: YamlDocument,
    placed: PlacedPools,
    entries: list[PlacementEntry],
    settings: dict[str, ComponentSpec],
    notes: list[str],
    files: tuple[str, ...],
    version: FrameworkVersion | None,
) -> ExperimentSpec:
    """The spec of a verl command whose pools are placed and whose processes are `entries`: each bundle's and
    the driver actors' CPUs, the steering rules, the hpcplace block's settings."""
    root = blocks.root()
    slurm_view = root.get("slurm")
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
    groups, cpus = bundle_cpus(list(placed.groups), entries, placed.layouts, TASK_RUNNER_CPUS[entry])
    for key, count in cpus.items():
        settings[key] = replace(settings.get(key) or ComponentSpec(key), cpus_per_process=count)
    pools = [p for layout in placed.layouts.values() for p in layout.pools]
    bundles = "; ".join(
        f"{count} CPUs per GPU in {', '.join(p.name for p in pools if p.cpus_per_bundle == count)} ({BUNDLE_TEXT[count]})"
        for count in sorted({p.cpus_per_bundle for p in pools}, reverse=True)
    )
    notes.append(
        f"CPUs: verl's bundles hold {bundles}; {DRIVER_CPUS_TEXT[entry]}: a node group without cpus_per_node asks "
        "for those"
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
        slurm_job_options(slurm_view, extra=frozenset({"pools"})),
        notes=tuple(notes),
        composed=files,
        steer=steer_rules(placed.layouts, cluster),
        framework_version=PlannedVersion.of(version),
    )


def pool_labels(
    slurm_view: View | None, pools: list[str], standalone: set[str], in_order: bool = False
) -> dict[str, str]:
    """`slurm.pools: {reward_pool: rtx4090}`: the node group of each pool (default: its own group, named
    after the pool, with the `slurm:` block's defaults). Pools may share a group (`{teacher_pool: global_pool}`:
    group_layouts). A standalone replicas' pool shares one only `in_order`: the separation trainers build the
    trainer's worker groups, then the reward, teacher and rollout replicas, each ready before the next
    (one-step-off's TaskRunner; fully async's driver waits for its trainer's init_workers, then its
    rollouter's), so the node's GPUs each gets are known. verl's v1 trainers (separate_async) are not read so."""
    labels = {p: p for p in pools}
    view = slurm_view.get("pools") if slurm_view is not None else None
    if view is None or view.value is None:
        return labels
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
                hint="global_pool always (trainer_pool under fully_async_main and one_step_off_policy.main_ppo); "
                "reward_pool with reward.reward_model.enable_resource_pool=true; teacher_pool with "
                "distillation.enabled=true; rollout_pool in trainer.v1.trainer_mode=separate_async and under "
                "fully_async_main and one_step_off_policy.main_ppo",
            )
        labels[str(key)] = child.str()
    for key, child in view.items():
        others = [p for p in pools if p != key and labels[p] == labels[str(key)]]
        alone = next((p for p in (str(key), *others) if p in standalone), None)
        if others and alone is not None and not in_order:
            raise child.error(
                f"slurm.pools: {key} and {others[0]} on one node group {labels[str(key)]!r}: verl makes one pool of "
                f"PACK placement groups per standalone replica ({alone}), created in an order hpcplace does not "
                "read here, so which GPUs of a shared node each takes is Ray's choice and the plan could not be exact",
                hint=f"give {alone} a node group of its own (it may share a partition); under fully_async_main and "
                "one_step_off_policy.main_ppo the pools may share",
            )
    return labels


@dataclass(frozen=True)
class GroupLayout:
    """The pools on one node group: pool p's placement group i on the group's node i (steered), its bundles on
    the GPUs after those of the pools created before it (Ray gives a node's free GPUs to bundles as each group
    is committed, and verl creates its pools' groups in POOLS order)."""

    pools: tuple[Pool, ...]
    nodes: int
    per_node: int  # the GPUs each node needs: the most the pools take on any one node
    slots: dict[str, tuple[int, ...]]  # pool -> the group's GPU index (node * per_node + GPU) of each pool rank


def group_layouts(pools: list[Pool], labels: dict[str, str]) -> dict[str, GroupLayout]:
    """Each node group (in order of its first pool) with its pools laid out: a 7-GPU global_pool and a 1-GPU
    teacher_pool on one 8-GPU node take GPUs 0-6 and 7."""
    out: dict[str, GroupLayout] = {}
    for label in dict.fromkeys(labels[p.name] for p in pools):
        members = tuple(p for p in pools if labels[p.name] == label)
        nodes = max(p.nodes for p in members)
        width = max(sum(p.per_node for p in members if p.nodes > n) for n in range(nodes))
        used = [0] * nodes
        slots: dict[str, tuple[int, ...]] = {}
        for pool in members:
            slots[pool.name] = tuple(n * width + used[n] + b for n in range(pool.nodes) for b in range(pool.per_node))
            for n in range(pool.nodes):
                used[n] += pool.per_node
        out[label] = GroupLayout(members, nodes, width, slots)
    return out


def check_gpus(
    layout: GroupLayout, facts: SlurmFacts, label: str, site_gpus: SiteGpus | None, view: View | None
) -> None:
    """A group's nodes must have its pools' per-node GPU count (STRICT_PACK: one node per placement group)."""
    have = facts.gpus_per_node
    source = f"slurm.node_groups.{label}.gpus_per_node / slurm.gpus_per_node"
    if have is None and site_gpus is not None:
        found = site_gpus(facts.partition, facts.gpu_type)
        have, source = found.count, found.source
    if have is not None and have < layout.per_node:
        pool = layout.pools[0]
        where = view if view is not None else pool.view
        what = (
            f"{pool.name} needs {pool.per_node} GPUs on each of its {pool.nodes} node(s)"
            if len(layout.pools) == 1
            else f"{' + '.join(f'{p.name} ({p.nodes}x{p.per_node})' for p in layout.pools)} need {layout.per_node} "
            "GPUs on a node"
        )
        raise where.error(
            f"{what} (one STRICT_PACK placement group per node) and node group {label!r} has {have} ({source})",
            hint="lower the pool's n_gpus_per_node, or put the pool on nodes with more GPUs (slurm.pools)",
        )


def steer_rules(layouts: dict[str, GroupLayout], cluster: Cluster) -> tuple[SteerRule, ...]:
    """verl names each pool's placement groups `<pool>verl_group_<counts>:<i>`, one per node (RayResourcePool.
    get_placement_groups; standalone replica r's pool is `<prefix><r>`: rollout_pool_<r>, rollout_pool_reward_<r>):
    group i of a pool goes to the i-th node of the pool's node group (layouts' g-th group is node group g; pools
    sharing a group each take its first nodes; a replica's groups follow the replicas before it). Replicas
    numbered from r0 > 0 (after fully async's hybrid ones) get a rule each: a rule's node is index + stride * r."""
    rules = []
    for g, layout in enumerate(layouts.values()):
        for pool in layout.pools:
            nodes = cluster.node_ranks(g)[: pool.nodes]
            if not pool.standalone:
                prefix = RANDOM_PREFIX if pool.random_name else re.escape(pool.name)
                rules.append(SteerRule(f"verl {pool.name}", "group", nodes, name=prefix + PG_NAME_TAIL))
                continue
            what = f"verl {pool.standalone}<r> (standalone {pool.name.removesuffix('_pool')} replica r)"
            step, packed = pool.replica_nodes, pool.replicas_per_node
            # replica r's group i (one per node it spans) on the node of index i + step * r in this list
            on = tuple(nodes[r // packed * step + i] for r in range(pool.nodes // step * packed) for i in range(step))
            if pool.first_replica == 0:
                name = re.escape(pool.standalone) + r"(?P<replica>[0-9]+)verl_group_[0-9_]+:(?P<index>[0-9]+)"
                rules.append(SteerRule(what, "group", on, name=name, stride=step))
                continue
            for r in range(len(on) // step):
                number = pool.first_replica + r
                rules.append(
                    SteerRule(
                        what.replace("<r>", str(number)).replace(" r)", f" {number})"),
                        "group",
                        on[r * step : (r + 1) * step],
                        name=re.escape(f"{pool.standalone}{number}") + PG_NAME_TAIL,
                    )
                )
    return tuple(rules)


def bundle_cpus(
    groups: list[NodeGroup], entries: list[PlacementEntry], layouts: dict[str, GroupLayout], driver_cpus: int
) -> tuple[list[NodeGroup], dict[str, int]]:
    """Each GPU's bundle holds max_colocate_count CPUs, shared by the processes on that GPU, and verl's
    driver actors take `driver_cpus` (TASK_RUNNER_CPUS) outside the pools, some before any pool exists: without
    them a node of exactly 3 CPUs per GPU could never hold its pool's STRICT_PACK group. The first component on a
    GPU asks for what the others there leave of the bundle; a group without cpus_per_node gets its busiest node's
    bundle CPUs + driver_cpus."""
    per_process: dict[str, int] = {}
    out = []
    for group, (label, layout) in zip(groups, layouts.items(), strict=True):
        on_slot: dict[int, list[str]] = {}
        for entry in entries:
            if entry.node_group == (label,):
                for slot in entry.resource_lists or ():
                    for component in entry.components:
                        on_slot.setdefault(slot[0], []).append(component)
        node_cpus = [0] * layout.nodes
        for pool in layout.pools:
            bundle = pool.cpus_per_bundle
            mine = [on_slot.get(slot, []) for slot in layout.slots[pool.name]]
            for names in mine:
                if names:
                    cpus = max(1, bundle - (len(names) - 1))
                    per_process[names[0]] = min(per_process.get(names[0], cpus), cpus)
            per_gpu = max(bundle, *(len(n) for n in mine))
            for n in range(pool.nodes):
                node_cpus[n] += per_gpu * pool.per_node
        if group.cpus_per_node is None:
            group = replace(group, cpus_per_node=max(node_cpus) + driver_cpus)
        out.append(group)
    return out, per_process
