"""NeMo-RL jobs, read from the command that launches them: `examples/run_<algo>.py --config X.yaml
key=value ...` (read in NVIDIA-NeMo/RL 7ea279a).

The config is loaded as NeMo-RL's `load_config` does (nemo_rl/utils/config.py): a `defaults:` key (one
path or a list, relative to the file's folder) names parent files, merged depth-first in order with
OmegaConf's merge rules (mappings merge, anything else replaces, `???` keeps the parent's value, a
top-level section with `_override_: true` replaces the parent's section); then the overrides are
parsed by Hydra's own parser and applied with `parse_hydra_overrides`' rules (`k=v` must exist, `+k=v`
must not, `++k=v` either, `~k` deletes). Every value keeps the file, line and column it came from;
an override's values point at its word of the command.

Placement is what the algorithm's `setup()` asks of `RayVirtualCluster` (nemo_rl/algorithms/grpo.py,
sft.py, dpo.py, rm.py): GRPO's policy cluster (colocated generation shares it) or its train and
inference clusters (non-colocated: whole nodes, or a split of the one node), and the reward model
environment's own cluster. NeMo-RL's resource asserts are refused here with their reasons, at the key
that set the value. Each worker holds one GPU (one bundle); a vLLM engine is TP*PP consecutive
bundles. Each of NeMo-RL's placement groups is steered to its planned node (steer_rules;
docs/formats/nemo_rl.md)."""

from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcplace.config import limits
from hpcplace.config.cluster import NodeGroup
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
from hpcplace.config.yaml_source import (
    KEY,
    PathKey,
    ScalarMark,
    View,
    YamlDocument,
    closest,
    did_you_mean,
    load_yaml_file,
)
from hpcplace.errors import SourceLocation, SpecError
from hpcplace.runtime.nemo_rl_watch import CLUSTERS

# examples/run_<name>.py -> the algorithm whose setup() places it
ENTRY_POINTS = {
    "grpo": "grpo",
    "vlm_grpo": "grpo",
    "grpo_sliding_puzzle": "grpo",
    "sft": "sft",
    "vlm_sft": "sft",
    "dpo": "dpo",
    "rm": "rm",
}
NOT_PLANNED = ("distillation", "ppo", "eval", "grpo_single_controller", "xtoken_off_policy_distillation")
POOLS = ("training", "generation", "reward_model")  # slurm.pools keys: NeMo-RL's clusters
DEFAULT_GROUP = "default"
MAX_DEFAULTS_DEPTH = 32
_MISSING = "???"


# ------------------------------------------------------------------------------------------------
# the command


def _entry(command: FrameworkCommand) -> tuple[int, str]:
    """The index of the `examples/run_<name>.py` word and the algorithm it runs."""
    for i, word in enumerate(command.argv):
        base = os.path.basename(word)
        if base.startswith("run_") and base.endswith(".py"):
            name = base[4:-3]
            if name in ENTRY_POINTS:
                return i, ENTRY_POINTS[name]
            known = ", ".join(f"run_{n}.py" for n in ENTRY_POINTS)
            why = (
                "its placement is not planned by hpcplace yet"
                if name in NOT_PLANNED
                else "it is not one of NeMo-RL's entry points" + did_you_mean(name, ENTRY_POINTS)
            )
            raise command.error(i, f"{word}: {why}", hint=f"hpcplace plans {known}")
    raise command.error(
        0,
        "no NeMo-RL entry point (examples/run_<algo>.py) in the command",
        hint="e.g. uv run examples/run_grpo.py --config examples/configs/grpo_math_1B.yaml cluster.num_nodes=2",
    )


def _arguments(command: FrameworkCommand, script: int) -> tuple[int | None, str | None, list[int]]:
    """`--config PATH` (or `--config=PATH`, argparse's forms, the last one wins) and the override words
    (what argparse's parse_known_args leaves over), as indices into argv."""
    config_index: int | None = None
    config: str | None = None
    overrides: list[int] = []
    words = command.argv
    i = script + 1
    while i < len(words):
        word = words[i]
        if word == "--config":
            if i + 1 >= len(words):
                raise command.error(i, "--config needs a value", hint="--config examples/configs/grpo_math_1B.yaml")
            config_index, config = i + 1, words[i + 1]
            i += 2
            continue
        if word.startswith("--config="):
            config_index, config = i, word.partition("=")[2]
        else:
            overrides.append(i)
        i += 1
    return config_index, config, overrides


def _config_path(command: FrameworkCommand, index: int | None, config: str | None, script: int) -> Path:
    """The config file as the driver opens it: relative to the directory the driver starts in, which is
    the directory hpcplace runs in (render/submit's --workdir defaults to it)."""
    if index is None or not config:
        raise command.error(
            script,
            f"{command.argv[script]} is given no --config",
            hint="hpcplace reads the config the command names: add --config examples/configs/<name>.yaml "
            "(NeMo-RL's run_grpo.py would fall back to examples/configs/grpo_math_1B.yaml beside the script)",
        )
    path = Path(config)
    if not path.is_file():
        raise command.error(
            index,
            f"config file {config!r} not found (from {os.getcwd()})",
            hint="a relative --config is read from the directory the driver runs in: run hpcplace "
            "from there (usually NeMo-RL's checkout), or give an absolute path",
        )
    return path


# ------------------------------------------------------------------------------------------------
# NeMo-RL's load_config: `defaults:` inheritance, kept with locations


def load_config(path: Path, where: SourceLocation | None = None, files: list[str] | None = None) -> YamlDocument:
    """The config as nemo_rl.utils.config.load_config builds it, with every value's file and line."""
    data, marks = _load(path, where, (), files if files is not None else [])
    return YamlDocument(str(path), data, marks)


def _load(
    path: Path, where: SourceLocation | None, stack: tuple[Path, ...], files: list[str]
) -> tuple[Any, dict[PathKey, ScalarMark]]:
    """One file and, depth-first, its parents; `files` gets each file read, parents first."""
    resolved = path.resolve()
    if resolved in stack or len(stack) > MAX_DEFAULTS_DEPTH:
        raise SpecError(
            f"config {path} inherits from itself through `defaults:`",
            location=where,
            hint=" -> ".join(str(p) for p in (*stack, resolved)),
        )
    try:
        doc = load_yaml_file(path)
    except SpecError as exc:
        raise SpecError(exc.message, hint=exc.hint, location=exc.location or where) from None
    if not isinstance(doc.data, dict):
        raise SpecError(
            "a NeMo-RL config must be a mapping (NeMo-RL asserts a DictConfig)",
            location=where or doc.location(()),
        )
    data = dict(doc.data)
    marks = {
        k: (m if m.file else ScalarMark(m.line, m.column, m.style, m.raw, file=str(path))) for k, m in doc.marks.items()
    }
    if "defaults" not in data:
        files.append(str(path))
        return data, marks
    view = View(doc, ("defaults",), data.pop("defaults"))
    items = [view] if not isinstance(view.value, list) else list(view.elements())
    for item in items:
        if not isinstance(item.value, (str, int, float)) or isinstance(item.value, bool):
            raise item.error("a `defaults:` entry of a NeMo-RL config is the path of a parent config")
    _drop(marks, ("defaults",))
    base: dict[str, Any] = {}
    base_marks: dict[PathKey, ScalarMark] = {}
    for item in items:
        text = str(item.value)
        parent = Path(text) if text.startswith("/") else path.parent / text
        if not parent.is_file():
            raise item.error(
                f"parent config {text!r} not found ({parent})",
                hint="NeMo-RL reads a `defaults:` path relative to the folder of the file that names it",
            )
        pdata, pmarks = _load(parent, item.location(), (*stack, resolved), files)
        base, base_marks = _merge_with_override(base, base_marks, pdata, pmarks)
    files.append(str(path))
    return _merge_with_override(base, base_marks, data, marks)


def _merge_with_override(
    base: dict[str, Any], base_marks: dict[PathKey, ScalarMark], over: dict[str, Any], marks: dict[PathKey, ScalarMark]
) -> tuple[dict[str, Any], dict[PathKey, ScalarMark]]:
    """merge_with_override: a top-level section of `over` with `_override_: true` replaces base's."""
    base, base_marks, over = copy.deepcopy(base), dict(base_marks), copy.deepcopy(over)
    marks = dict(marks)
    for key, value in over.items():
        if value == _MISSING:
            continue
        if isinstance(value, dict) and value.get("_override_", False):
            value.pop("_override_")
            _drop(marks, (key, "_override_"))
            if key in base:
                base.pop(key)
                _drop(base_marks, (key,))
    _merge(base, base_marks, over, marks, ())
    return base, base_marks


def _merge(
    base: dict[str, Any],
    base_marks: dict[PathKey, ScalarMark],
    over: dict[str, Any],
    marks: dict[PathKey, ScalarMark],
    at: PathKey,
) -> None:
    """OmegaConf.merge: mappings merge key by key, lists and scalars replace, `???` keeps the base."""
    for key, value in over.items():
        path = (*at, key)
        if value == _MISSING and key in base:
            continue
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            if path + (KEY,) in marks:
                base_marks[path + (KEY,)] = marks[path + (KEY,)]
            _merge(base[key], base_marks, value, marks, path)
            continue
        base[key] = value
        _drop(base_marks, path)
        base_marks.update({k: m for k, m in marks.items() if k[: len(path)] == path})


def _drop(marks: dict[PathKey, ScalarMark], path: PathKey) -> None:
    for key in [k for k in marks if k[: len(path)] == path]:
        del marks[key]


# ------------------------------------------------------------------------------------------------
# parse_hydra_overrides: Hydra's parser for the words, its rules for the keys


def apply_overrides(doc: YamlDocument, command: FrameworkCommand, indices: list[int]) -> YamlDocument:
    """The override words applied as NeMo-RL's parse_hydra_overrides applies them (struct mode)."""
    if not indices:
        return doc
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    data: dict[str, Any] = copy.deepcopy(doc.data)
    marks = dict(doc.marks)
    for i in indices:
        word = command.argv[i]
        if word.startswith("-"):
            raise command.error(
                i,
                f"unrecognized argument {word!r}: NeMo-RL's scripts take only --config; every other word is "
                "a Hydra override (key=value)",
                hint="remove it, or write it as an override, e.g. cluster.num_nodes=2",
            )
        try:
            override = parser.parse_override(word)
            value = override.value()
        except HydraException as exc:
            raise command.error(
                i,
                f"NeMo-RL cannot parse the override {word!r}: {str(exc).strip().splitlines()[0]}",
                hint="write key=value, +key=value (add), ++key=value (add or set) or ~key (delete)",
            ) from None
        if override.package is not None or override.is_sweep_override():
            raise command.error(
                i, f"override {word!r}: NeMo-RL's configs have no config groups or sweeps", hint="write key=value"
            )
        key = override.key_or_group
        parts: list[str] = key.split(".")
        exists, parent = _lookup(data, parts)
        where = command.location(i)
        if override.is_delete():
            if not exists or _get(data, parts) is None:
                raise command.error(
                    i, f"override {word!r}: could not delete from config, {key!r} does not exist" + _near(data, parts)
                )
            del parent[parts[-1]]
            _drop(marks, tuple(parts))
            continue
        if override.is_add() and exists and _get(data, parts) is not None and not isinstance(value, (dict, list)):
            raise command.error(
                i,
                f"override {word!r}: the config already has {key!r} (Hydra: could not append to config)",
                hint=f"write {word[1:]} to change it, or +{word} to add or change it",
            )
        if not override.is_add() and not override.is_force_add() and not exists:
            raise command.error(
                i,
                f"override {word!r}: the config has no key {key!r}{_near(data, parts)}",
                hint=f"NeMo-RL refuses it too (Hydra: could not override); to add a new key write +{word}",
            )
        _set(data, parts, value, marks, where, command, i)
    return YamlDocument(doc.path, data, marks)


def _lookup(data: dict[str, Any], parts: list[str]) -> tuple[bool, dict[str, Any]]:
    node: Any = data
    for part in parts[:-1]:
        if not isinstance(node, dict) or part not in node or not isinstance(node[part], dict):
            return False, {}
        node = node[part]
    return isinstance(node, dict) and parts[-1] in node, node if isinstance(node, dict) else {}


def _get(data: dict[str, Any], parts: list[str]) -> Any:
    node: Any = data
    for part in parts:
        node = node[part]
    return node


def _near(data: dict[str, Any], parts: list[str]) -> str:
    node: Any = data
    for depth, part in enumerate(parts):
        if not isinstance(node, dict):
            return ""
        if part not in node:
            near = closest(part, [k for k in node if isinstance(k, str)])
            return f"; did you mean {'.'.join([*parts[:depth], near])!r}?" if near else ""
        node = node[part]
    return ""


def _set(
    data: dict[str, Any],
    parts: list[str],
    value: Any,
    marks: dict[PathKey, ScalarMark],
    where: SourceLocation,
    command: FrameworkCommand,
    index: int,
) -> None:
    """OmegaConf.update(merge=True): a mapping merges into a mapping, anything else replaces."""
    node: Any = data
    for depth, part in enumerate(parts[:-1]):
        if node.get(part) is None:
            node[part] = {}
        if not isinstance(node[part], dict):
            raise command.error(
                index, f"override {command.argv[index]!r}: {'.'.join(parts[: depth + 1])!r} is not a mapping"
            )
        node = node[part]
    mark = ScalarMark(where.line, where.column, None, None, file=where.path)
    path = tuple(parts)
    if isinstance(value, dict) and isinstance(node.get(parts[-1]), dict):
        node[parts[-1]] = _merged(node[parts[-1]], value)
        for key in _paths(value, path):
            marks[key] = mark
        return
    node[parts[-1]] = value
    _drop(marks, path)
    for key in _paths(value, path):
        marks[key] = mark


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _paths(value: Any, at: PathKey) -> list[PathKey]:
    out: list[PathKey] = [at]
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_paths(v, (*at, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_paths(v, (*at, i)))
    return out


# ------------------------------------------------------------------------------------------------
# placement: what setup() gives RayVirtualCluster


@dataclass(frozen=True)
class Role:
    """One worker group: its pool (the RayVirtualCluster it runs on) and each rank's (node, GPU)."""

    name: str
    pool: str
    slots: tuple[tuple[int, int], ...]
    view: View  # the key that sized it: placement errors point there
    tp: int = 1
    pp: int = 1


@dataclass(frozen=True)
class Layout:
    """The job's nodes (each node's pool, in hpcplace's node order) and the roles placed on them."""

    node_pools: tuple[str, ...]
    gpus_per_node: int
    gpn_view: View
    roles: tuple[Role, ...]
    notes: tuple[str, ...] = ()


def _req(view: View, path: str) -> View:
    node = view
    for part in path.split("."):
        child = node.deref().get(part)
        if child is None:
            raise node.error(
                f"missing key {path!r} (NeMo-RL reads it to place its workers)",
                hint=f"set it in the config, or override it: {path}=...",
            )
        node = child
    return node.deref()


def _opt(view: View, path: str) -> View | None:
    node: View | None = view
    for part in path.split("."):
        if node is None or not isinstance(node.deref().value, dict):
            return None
        node = node.deref().get(part)
    return node.deref() if node is not None else None


def _int(view: View, minimum: int | None = None) -> int:
    return view.int(minimum=minimum)


def _enabled(view: View | None) -> bool:
    return view is not None and view.value is not None and view.bool()


def _per_node(n: int, gpus: range) -> tuple[tuple[int, int], ...]:
    return tuple((n, g) for g in gpus)


def _whole(first: int, nodes: int, gpus: int) -> tuple[tuple[int, int], ...]:
    return tuple((first + n, g) for n in range(nodes) for g in range(gpus))


def _policy_parallel(root: View, world: int, where: View) -> tuple[int, int]:
    """lm_policy.Policy: megatron's TP*PP*CP or DTensor's TP*CP must divide the world size."""
    megatron = _enabled(_opt(root, "policy.megatron_cfg.enabled"))
    dtensor = _enabled(_opt(root, "policy.dtensor_cfg.enabled"))
    if megatron and dtensor:
        raise _req(root, "policy.megatron_cfg.enabled").error(
            "NeMo-RL refuses policy.megatron_cfg.enabled and policy.dtensor_cfg.enabled both true "
            "(configure either Megatron or DTensor, not both)"
        )
    if megatron:
        tp_v = _req(root, "policy.megatron_cfg.tensor_model_parallel_size")
        tp, pp = _int(tp_v, 1), _int(_req(root, "policy.megatron_cfg.pipeline_model_parallel_size"), 1)
        cp = _int(_req(root, "policy.megatron_cfg.context_parallel_size"), 1)
    elif dtensor:
        tp_v = _req(root, "policy.dtensor_cfg.tensor_parallel_size")
        tp, pp, cp = _int(tp_v, 1), 1, _int(_req(root, "policy.dtensor_cfg.context_parallel_size"), 1)
    else:
        raise _req(root, "policy").error(
            "NeMo-RL refuses a policy with neither policy.megatron_cfg.enabled nor policy.dtensor_cfg.enabled",
            hint="set policy.dtensor_cfg.enabled=true or policy.megatron_cfg.enabled=true",
        )
    size = tp * pp * cp
    if world < size or world % size:
        raise tp_v.error(
            f"the policy's {world} workers (one per GPU) are not a multiple of PP({pp}) * CP({cp}) * TP({tp}) = "
            f"{size}: NeMo-RL's Policy refuses it (world size must be divisible by PP * CP * TP)",
            hint=f"size {where.dotted()} so the training GPUs are a multiple of {size}, or reduce the parallelism",
        )
    return tp * cp, pp


def _generation(root: View) -> tuple[str, int, int, View]:
    """The generation backend and its engines' TP and PP (vLLM/TRT-LLM: *_cfg, SGLang: gpus_per_server)."""
    backend_v = _req(root, "policy.generation.backend")
    backend = backend_v.str()
    if backend in ("vllm", "trtllm"):
        cfg = f"policy.generation.{backend}_cfg"
        tp_v = _req(root, f"{cfg}.tensor_parallel_size")
        pp_v = _opt(root, f"{cfg}.pipeline_parallel_size")
        tp, pp = _int(tp_v, 1), (_int(pp_v, 1) if pp_v is not None and pp_v.value is not None else 1)
        if backend == "vllm" and pp > 1 and not _enabled(_opt(root, f"{cfg}.async_engine")):
            raise (pp_v or tp_v).error(
                "NeMo-RL refuses vLLM pipeline_parallel_size > 1 without async_engine",
                hint="add policy.generation.vllm_cfg.async_engine=true",
            )
        if backend == "trtllm" and pp > 1:
            raise (pp_v or tp_v).error(
                f"NeMo-RL refuses TRT-LLM pipeline_parallel_size {pp}: the TRT-LLM backend does not support pipeline "
                "parallelism yet (it must be 1)"
            )
        ep_v = _opt(root, f"{cfg}.expert_parallel_size")
        ep = _int(ep_v, 1) if ep_v is not None and ep_v.value is not None else 1
        if backend == "vllm" and ep > 1 and ep % tp:
            raise (ep_v or tp_v).error(
                f"NeMo-RL refuses vLLM expert_parallel_size {ep}: it must be a multiple of tensor_parallel_size {tp}"
            )
        return backend, tp, pp, tp_v
    if backend == "sglang":  # SGLangGeneration: sglang_server_config.num_gpus_per_engine
        per = _req(root, "policy.generation.sglang_cfg.sglang_server_config.num_gpus_per_engine")
        return backend, _int(per, 1), 1, per
    if backend == "megatron":
        return backend, 1, 1, backend_v
    raise backend_v.error(
        f"generation backend {backend!r} is not planned by hpcplace"
        + did_you_mean(backend, ("vllm", "sglang", "trtllm", "megatron")),
        hint="hpcplace plans vllm, sglang, trtllm and megatron generation",
    )


def grpo_layout(root: View) -> Layout:
    """nemo_rl/algorithms/grpo.py setup(): the clusters, their asserts, and which GPUs each role gets."""
    nodes_v, gpn_v = _req(root, "cluster.num_nodes"), _req(root, "cluster.gpus_per_node")
    total, gpn = _int(nodes_v, 1), _int(gpn_v, 1)
    limits.nodes(total, nodes_v.location(), "cluster.num_nodes")
    limits.gpus_per_node(gpn, gpn_v.location(), "cluster.gpus_per_node")
    notes: list[str] = []
    opd = _opt(root, "on_policy_distillation.non_colocated_teachers.enabled")
    if _enabled(_opt(root, "on_policy_distillation.enabled")) and _enabled(opd):
        assert opd is not None
        raise opd.error(
            "on-policy distillation teachers on their own nodes are not planned by hpcplace yet",
            hint="plan the job with non_colocated_teachers.enabled=false, or without on_policy_distillation",
        )
    envs = {str(v.value) for c in _data_configs(root) if (v := _opt(c, "env_name")) is not None}
    rm = "reward_model" in envs
    rm_nodes = rm_gpn = 0
    rm_nodes_v = rm_gpn_v = None
    if rm:
        rm_nodes_v = _req(root, "env.reward_model.resources.num_nodes")
        rm_gpn_v = _req(root, "env.reward_model.resources.gpus_per_node")
        rm_nodes, rm_gpn = _int(rm_nodes_v, 0), _int(rm_gpn_v, 0)
    if total == 1:
        policy_nodes = 1
    else:
        policy_nodes = total - rm_nodes
        if policy_nodes <= 0:
            assert rm_nodes_v is not None
            raise rm_nodes_v.error(
                f"NeMo-RL asserts policy_nodes > 0: cluster.num_nodes {total} - reward model nodes {rm_nodes} = "
                f"{policy_nodes}",
                hint="give the cluster more nodes than the reward model takes",
            )
    backend, gtp, gpp, gview = _generation(root)
    colocated = _req(root, "policy.generation.colocated.enabled").bool()
    roles: list[Role] = []
    pools: list[str] = []
    if colocated:
        if total == 1:
            policy_gpn = gpn - rm_gpn
            if policy_gpn <= 0:
                assert rm_gpn_v is not None
                raise rm_gpn_v.error(
                    f"NeMo-RL asserts the policy's GPUs on the one node are > 0: cluster.gpus_per_node {gpn} - "
                    f"reward model gpus_per_node {rm_gpn} = {policy_gpn}",
                    hint="leave the policy at least one GPU of the node",
                )
            train = _per_node(0, range(policy_gpn))
            pools = ["training"]
            if rm:
                roles.append(
                    Role("reward_model", "reward_model", _per_node(0, range(policy_gpn, gpn)), rm_gpn_v or gpn_v)
                )
        else:
            train = _whole(0, policy_nodes, gpn)
            pools = ["training"] * policy_nodes + ["reward_model"] * rm_nodes
            if rm:
                roles.append(
                    Role("reward_model", "reward_model", _whole(policy_nodes, rm_nodes, rm_gpn), rm_gpn_v or gpn_v)
                )
        gen = train
        gen_gpn = gpn if total > 1 else len(train)
    else:
        res = "policy.generation.colocated.resources"
        inf_gpn_v, inf_nodes_v = _req(root, f"{res}.gpus_per_node"), _req(root, f"{res}.num_nodes")
        inf_gpn = None if inf_gpn_v.value is None else _int(inf_gpn_v)
        inf_nodes = None if inf_nodes_v.value is None else _int(inf_nodes_v)
        if policy_nodes == 1:
            if inf_gpn is None or inf_gpn <= 0:
                raise inf_gpn_v.error(
                    f"NeMo-RL asserts {res}.gpus_per_node is set and > 0 when the policy has one node and "
                    f"generation is not colocated, got {inf_gpn}",
                    hint=f"set {res}.gpus_per_node to the GPUs of the node that generation takes",
                )
            if inf_nodes not in (None, 1):
                raise inf_nodes_v.error(
                    f"NeMo-RL asserts {res}.num_nodes is 1 or null when the policy has one node and generation "
                    f"is not colocated, got {inf_nodes}"
                )
            sub = rm_gpn if total == 1 and rm else 0
            train_gpn = gpn - inf_gpn - sub
            if train_gpn <= 0:
                raise inf_gpn_v.error(
                    f"NeMo-RL asserts GPUs are left for training: cluster.gpus_per_node {gpn} - generation "
                    f"{inf_gpn}" + (f" - reward model {sub}" if sub else "") + f" = {train_gpn}",
                    hint="give generation fewer GPUs of the node",
                )
            train = _per_node(0, range(train_gpn))
            gen = _per_node(0, range(train_gpn, train_gpn + inf_gpn))
            gen_gpn = inf_gpn
            pools = ["training"]
            if rm and total == 1:
                roles.append(
                    Role(
                        "reward_model", "reward_model", _per_node(0, range(train_gpn + inf_gpn, gpn)), rm_gpn_v or gpn_v
                    )
                )
            elif rm:
                pools += ["reward_model"] * rm_nodes
                roles.append(Role("reward_model", "reward_model", _whole(1, rm_nodes, rm_gpn), rm_gpn_v or gpn_v))
        else:
            if inf_nodes is None or inf_nodes <= 0:
                raise inf_nodes_v.error(
                    f"NeMo-RL asserts {res}.num_nodes > 0 when cluster.num_nodes > 1 and generation is not "
                    f"colocated, got {inf_nodes}",
                    hint=f"set {res}.num_nodes to the nodes generation takes",
                )
            if inf_gpn != gpn:
                raise inf_gpn_v.error(
                    f"NeMo-RL asserts {res}.gpus_per_node is set and equal to cluster.gpus_per_node ({gpn}) when "
                    f"cluster.num_nodes > 1 and generation is not colocated, got {inf_gpn}",
                    hint=f"set {res}.gpus_per_node={gpn}: non-colocated generation takes whole nodes",
                )
            train_nodes = policy_nodes - inf_nodes
            if train_nodes <= 0:
                raise inf_nodes_v.error(
                    f"NeMo-RL asserts train_nodes > 0: cluster.num_nodes {total}"
                    + (f" - reward model {rm_nodes}" if rm_nodes else "")
                    + f" - generation {inf_nodes} = {train_nodes}",
                    hint="give the cluster more nodes than generation takes",
                )
            train = _whole(0, train_nodes, gpn)
            gen = _whole(train_nodes, inf_nodes, gpn)
            gen_gpn = gpn
            pools = ["training"] * train_nodes + ["generation"] * inf_nodes + ["reward_model"] * rm_nodes
            if rm:
                roles.append(
                    Role("reward_model", "reward_model", _whole(policy_nodes, rm_nodes, rm_gpn), rm_gpn_v or gpn_v)
                )
    ptp, ppp = _policy_parallel(root, len(train), nodes_v)
    placed: list[Role] = [Role("policy", "training", train, nodes_v, ptp, ppp)]
    if backend == "megatron":
        notes.append("generation backend megatron: the policy's own workers generate (no separate generation workers)")
    elif backend == "sglang":
        gen = _sglang(root, gen, gen_gpn, gtp, notes)
    else:
        mp = gtp * gpp
        if len(gen) % mp:
            raise gview.error(
                f"NeMo-RL refuses generation on {len(gen)} GPUs with TP*PP = {mp}: the world size must be a multiple "
                "of the model parallel size",
                hint="change the engines' parallelism or the generation GPUs",
            )
        if mp <= gen_gpn and gen_gpn % mp:
            raise gview.error(
                f"generation TP*PP = {mp} does not divide the {gen_gpn} GPUs of each generation node: NeMo-RL fills "
                f"each node's placement group with {gen_gpn // mp} engine(s), leaves {gen_gpn % mp} GPU(s) idle and "
                "asserts (data parallel size mismatch)",
                hint=f"make TP*PP a divisor of {gen_gpn}, or larger than it (engines spanning nodes)",
            )
        if mp > gen_gpn and colocated and backend == "trtllm":
            raise gview.error(
                f"NeMo-RL refuses TRT-LLM engines of TP {mp} over {gen_gpn}-GPU nodes with colocated generation "
                "(cross-node tensor parallelism is only supported for non-colocated generation)",
                hint="use a TP that fits a node, or policy.generation.colocated.enabled=false",
            )
        if mp > gen_gpn:
            notes.append(
                f"generation engines span nodes (TP*PP {mp} > {gen_gpn} GPUs per node): NeMo-RL makes one placement "
                "group for them and orders its bundles by (topo_rank, GPU id); hpcplace's raylets carry topo_rank = "
                "node rank + 1, so engine e takes the plan's nodes in node rank order"
            )
    if backend != "megatron":
        placed.append(Role("generation", "generation" if not colocated else "training", gen, gview, gtp, gpp))
    return Layout(tuple(pools), gpn, gpn_v, tuple(placed + roles), tuple(notes))


def _sglang(
    root: View, gen: tuple[tuple[int, int], ...], gen_gpn: int, per: int, notes: list[str]
) -> tuple[tuple[int, int], ...]:
    """SGLangGeneration: one PACK placement group over the generation cluster, bundles sorted by (topo_rank, GPU
    id), topo_rank being node rank + 1 on hpcplace's raylets; num_gpus // min(num_gpus_per_engine, GPUs per node)
    engines take the first bundles."""
    num_v = _req(root, "policy.generation.sglang_cfg.sglang_server_config.num_gpus")
    num = _int(num_v, 1)
    local = min(per, gen_gpn)
    used = (num // local) * local
    if used > len(gen) or used == 0:
        raise num_v.error(
            f"SGLang's {num} GPUs make {num // local} engine(s) of {local} GPU(s) per node, but the generation "
            f"cluster has {len(gen)} GPUs",
            hint=f"set sglang_server_config.num_gpus to at most {len(gen)} (and at least {local})",
        )
    notes.append(
        f"SGLang: {num // local} engine(s) on the first {used} of the generation cluster's {len(gen)} GPUs; NeMo-RL "
        "orders them by (topo_rank, GPU id) in one placement group: the plan's node order (hpcplace's raylets carry "
        "topo_rank = node rank + 1)"
    )
    return gen[:used]


def _data_configs(root: View) -> list[View]:
    out: list[View] = []
    for key in ("train", "validation", "default"):
        view = _opt(root, f"data.{key}")
        if view is None:
            continue
        if isinstance(view.value, list):
            out.extend(v.deref() for v in view.elements())
        elif isinstance(view.value, dict):
            out.append(view)
    return out


def single_cluster_layout(root: View, algorithm: str) -> Layout:
    """sft.py/dpo.py/rm.py setup(): one cluster of cluster.gpus_per_node bundles on each of num_nodes."""
    nodes_v, gpn_v = _req(root, "cluster.num_nodes"), _req(root, "cluster.gpus_per_node")
    total, gpn = _int(nodes_v, 1), _int(gpn_v, 1)
    limits.nodes(total, nodes_v.location(), "cluster.num_nodes")
    limits.gpus_per_node(gpn, gpn_v.location(), "cluster.gpus_per_node")
    slots = _whole(0, total, gpn)
    tp, pp = _policy_parallel(root, len(slots), nodes_v)
    return Layout(("training",) * total, gpn, gpn_v, (Role("policy", "training", slots, nodes_v, tp, pp),))


# ------------------------------------------------------------------------------------------------
# the spec: node groups from the slurm: block, one placement per role


def _pool_groups(slurm: View | None, layout: Layout) -> dict[str, str]:
    """`slurm.pools: {training: LABEL, generation: LABEL, reward_model: LABEL}`: the node group (a key of
    slurm.node_groups) each of NeMo-RL's clusters runs on; pools not named run on the default group."""
    out = dict.fromkeys(POOLS, DEFAULT_GROUP)
    view = slurm.get("pools") if slurm is not None else None
    if view is None or view.value is None:
        return out
    view.check_keys(set(POOLS))
    groups_view = slurm.get("node_groups") if slurm is not None else None
    labels = [str(k) for k in groups_view.mapping()] if groups_view is not None else []
    for pool, child in view.items():
        label = child.str().strip()
        if label.lower() not in {lbl.lower() for lbl in labels}:
            raise child.error(
                f"slurm.pools.{pool}: no node group {label!r} in slurm.node_groups" + did_you_mean(label, labels),
                hint="declare it: slurm.node_groups.<label>: {partition: ..., gpu_type: ...}",
            )
        out[pool] = label
    used = set(layout.node_pools)
    for pool, child in view.items():
        if pool not in used:
            raise child.key_error(
                f"slurm.pools.{pool}: this job has no {pool} nodes of its own"
                + (" (the pools share one node)" if len(layout.node_pools) == 1 else ""),
                hint="NeMo-RL gives " + ", ".join(sorted(used)) + " nodes here; remove this entry",
            )
    return out


def parse(command: FrameworkCommand, blocks: YamlDocument, site_gpus: SiteGpus | None) -> ExperimentSpec:
    """The spec of a NeMo-RL command (formats/command.py's contract)."""
    script, algorithm = _entry(command)
    config_index, config, overrides = _arguments(command, script)
    path = _config_path(command, config_index, config, script)
    files: list[str] = []
    doc = apply_overrides(load_config(path, command.location(config_index or script), files), command, overrides)
    root = doc.root()
    layout = grpo_layout(root) if algorithm == "grpo" else single_cluster_layout(root, algorithm)
    broot = blocks.root()
    slurm_view = broot.get("slurm") if blocks.data is not None else None
    job_options = slurm_job_options(slurm_view, frozenset({"pools"}))
    notes = list(layout.notes)
    # hpcplace.framework_version, stated beside the command (or the installed nemo-rl): checked and noted; no
    # NeMo-RL rule hpcplace reads is known to differ between releases, so no gate applies it yet
    version = resolve_version("nemo_rl", broot if blocks.data is not None else None, notes)
    pool_group = _pool_groups(slurm_view, layout)
    base = slurm_facts(slurm_view)
    # node groups in the order their pools' nodes come (training, generation, reward model)
    order: list[str] = []
    for pool in layout.node_pools:
        if pool_group[pool] not in order:
            order.append(pool_group[pool])
    groups: list[NodeGroup] = []
    node_index: dict[int, tuple[str, int]] = {}  # job node -> (group label, its index in the group)
    for label in order:
        members = [n for n, pool in enumerate(layout.node_pools) if pool_group[pool] == label]
        facts = slurm_facts(slurm_view, None if label == DEFAULT_GROUP else label, base)
        _check_gpus(facts, layout, slurm_view, label, site_gpus, notes)
        for j, n in enumerate(members):
            node_index[n] = (label, j)
        groups.append(facts_node_group(label, facts, len(members), layout.gpus_per_node, layout.gpn_view))
    cluster = build_cluster(tuple(groups), layout.gpn_view)
    entries: list[PlacementEntry] = []
    settings: dict[str, ComponentSpec] = {}
    for role in layout.roles:
        labels = {node_index[n][0] for n, _ in role.slots}
        if len(labels) != 1:  # a role's nodes are one pool's, so one group's
            raise role.view.error(f"{role.name}: its GPUs fall in node groups {sorted(labels)}")
        label = labels.pop()
        lists = tuple((node_index[n][1] * layout.gpus_per_node + g,) for n, g in role.slots)
        entries.append(PlacementEntry((role.name,), (label,), None, lists, role.view.location()))
        settings[role.name] = ComponentSpec(role.name, tensor_parallel_size=role.tp, pipeline_parallel_size=role.pp)
    name, given = (
        hpcplace_block(broot, set(settings), blocks.path)
        if blocks.data is not None
        else (Path(blocks.path).stem or "nemo-rl", {})
    )
    for key, spec in given.items():
        settings[key] = with_block_settings(settings[key], spec)
    notes.append(
        "NeMo-RL's placement groups are steered: each cluster's group i (`<cluster>-node<i>`) goes to the i-th "
        "node of its pool, each bundle of a `<cluster>-unified` group to its rank's node, and the raylets carry "
        "NeMo-RL's topo_rank (node rank + 1), by which NeMo-RL orders unified bundles (docs/formats/nemo_rl.md)"
    )
    rank_of = {n: cluster.node_ranks(order.index(label))[j] for n, (label, j) in node_index.items()}
    return ExperimentSpec(
        name,
        cluster,
        tuple(entries),
        settings,
        str(path),
        "nemo_rl",
        job_options,
        notes=tuple(notes),
        composed=(*files, *(f"override {command.argv[i]}" for i in overrides)),
        steer=steer_rules(layout.roles, rank_of),
        framework_version=PlannedVersion.of(version),
    )


def steer_rules(roles: tuple[Role, ...], rank_of: dict[int, int]) -> tuple[SteerRule, ...]:
    """RayVirtualCluster names its placement groups `<cluster>-node<i>` (one per node: NODE_RANK i, bundles in
    order) or `<cluster>-unified` (bundles sorted by topo_rank, then GPU id), the cluster named by the algorithm's
    setup() (CLUSTERS): group i on the i-th node of the role's slots, unified bundle k on its rank k's node.
    `rank_of`: job node -> cluster node rank."""
    rules = []
    for role in roles:
        names = sorted(c for c, comp in CLUSTERS.items() if comp == role.name)
        if not names:
            continue
        slots = [rank_of[n] for n, _ in role.slots]
        nodes = tuple(dict.fromkeys(slots))
        either = "(?:" + "|".join(re.escape(c) for c in names) + ")"
        what = f"NeMo-RL {role.name} ({role.pool} pool)"
        rules.append(SteerRule(what, "group", nodes, name=either + r"-node(?P<index>[0-9]+)"))
        rules.append(SteerRule(what, "bundle", tuple(slots), name=either + "-unified"))
    return tuple(rules)


def _check_gpus(
    facts: SlurmFacts, layout: Layout, slurm: View | None, label: str, site_gpus: SiteGpus | None, notes: list[str]
) -> None:
    """NeMo-RL asks every node for cluster.gpus_per_node GPUs: a node group with fewer cannot run it."""
    if facts.gpus_per_node is None or slurm is None:
        return
    if facts.gpus_per_node < layout.gpus_per_node:
        view = slurm
        if label != DEFAULT_GROUP and (g := slurm.get("node_groups")) is not None:
            for key, child in g.items():
                if str(key).lower() == label.lower() and child.get("gpus_per_node") is not None:
                    view = child.require("gpus_per_node")
        elif slurm.get("gpus_per_node") is not None:
            view = slurm.require("gpus_per_node")
        raise view.error(
            f"node group {label!r} has {facts.gpus_per_node} GPUs per node, but NeMo-RL's cluster.gpus_per_node "
            f"is {layout.gpus_per_node} (at {layout.gpn_view.location()}): every node's placement group asks for that many",
            hint="use nodes with enough GPUs, or lower cluster.gpus_per_node",
        )
    if facts.gpus_per_node > layout.gpus_per_node:
        notes.append(
            f"node group {label!r}: its nodes have {facts.gpus_per_node} GPUs; NeMo-RL uses "
            f"{layout.gpus_per_node} per node (cluster.gpus_per_node), and the job asks Slurm for those"
        )
