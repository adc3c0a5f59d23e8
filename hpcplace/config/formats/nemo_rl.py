"""NeMo-RL jobs, read from the command that launches them: `examples/run_<algo>.py --config X.yaml
key=value ...` or `examples/nemo_gym/run_<algo>.py ...` (read in NVIDIA-NeMo/RL 7ea279a).

The config is loaded as NeMo-RL's `load_config` does (nemo_rl/utils/config.py): a `defaults:` key (one
path or a list, relative to the file's folder) names parent files, merged depth-first in order with
OmegaConf's merge rules (mappings merge, anything else replaces, `???` keeps the parent's value, a
top-level section with `_override_: true` replaces the parent's section); then the overrides are
parsed by Hydra's own parser and applied with `parse_hydra_overrides`' rules (`k=v` must exist, `+k=v`
must not, `++k=v` either, `~k` deletes; run_eval.py merges OmegaConf.from_cli instead). Every value keeps
the file, line and column it came from; an override's values point at its word of the command.

Placement is what the algorithm's `setup()` asks of `RayVirtualCluster` (formats/nemo_rl_layout.py).
Each of NeMo-RL's placement groups is steered to its planned node (steer_rules; docs/formats/nemo_rl.md)."""

from __future__ import annotations

import copy
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

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
from hpcplace.config.formats.nemo_rl_layout import Layout, Role
from hpcplace.config.formats.nemo_rl_layout import layout as algorithm_layout
from hpcplace.config.framework_version import PlannedVersion, resolve_version
from hpcplace.config.spec import ComponentSpec, ExperimentSpec, PlacementEntry, build_cluster
from hpcplace.config.steer import SteerRule
from hpcplace.config.topology import TREE
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

# examples/run_<name>.py (and examples/nemo_gym/run_<name>.py) -> the algorithm whose setup() places it
ENTRY_POINTS = {
    "grpo": "grpo",
    "vlm_grpo": "grpo",
    "grpo_sliding_puzzle": "grpo",
    "grpo_nemo_gym": "grpo",
    "sft": "sft",
    "vlm_sft": "sft",
    "dpo": "dpo",
    "rm": "rm",
    "ppo": "ppo",
    "distillation": "distillation",
    "distillation_nemo_gym": "distillation",
    "xtoken_off_policy_distillation": "xtoken",
    "grpo_single_controller": "single_controller",
    "eval": "eval",
}
# the config each script loads when it is given no --config, relative to the script's folder (one per entry point)
DEFAULT_CONFIGS = {
    "grpo": "configs/grpo_math_1B.yaml",
    "vlm_grpo": "configs/vlm_grpo_3B.yaml",
    "grpo_sliding_puzzle": "configs/grpo_sliding_puzzle.yaml",
    "grpo_nemo_gym": "grpo_workplace_assistant_nemotron_nano_v2_9b.yaml",
    "sft": "configs/sft.yaml",
    "dpo": "configs/dpo.yaml",
    "rm": "configs/rm.yaml",
    "ppo": "configs/ppo_math_1B.yaml",
    "distillation": "configs/distillation_math.yaml",
    "distillation_nemo_gym": "../configs/distillation_math.yaml",
    "xtoken_off_policy_distillation": "configs/xtoken_off_policy_distillation.yaml",
    "vlm_sft": "configs/sft.yaml",  # run_vlm_sft.py runs run_sft.py's main
    "grpo_single_controller": "configs/grpo_math_1B_megatron_single_controller.yaml",
    "eval": "configs/evals/eval.yaml",
}
POOLS = ("training", "generation", "teacher", "reward_model")  # slurm.pools keys: NeMo-RL's clusters
DEFAULT_GROUP = "default"
MAX_DEFAULTS_DEPTH = 32
_MISSING = "???"


# ------------------------------------------------------------------------------------------------
# the command


def _entry(command: FrameworkCommand) -> tuple[int, str]:
    """The index of the `examples/run_<name>.py` word and the script's name (`grpo`, `eval`, ...)."""
    for i, word in enumerate(command.argv):
        base = os.path.basename(word)
        if base.startswith("run_") and base.endswith(".py"):
            name = base[4:-3]
            if name in ENTRY_POINTS:
                return i, name
            known = ", ".join(f"run_{n}.py" for n in ENTRY_POINTS)
            why = "it is not one of NeMo-RL's entry points (7ea279a)" + did_you_mean(name, ENTRY_POINTS)
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
    the directory hpcplace runs in (render/submit's --workdir defaults to it); without --config, the
    script's own default beside it (`os.path.join(os.path.dirname(__file__), ...)`)."""
    if index is None or not config:
        name = os.path.basename(command.argv[script])[4:-3]  # one of ENTRY_POINTS (_entry), each with a default
        default = Path(os.path.dirname(command.argv[script])) / DEFAULT_CONFIGS[name]
        if not default.is_file():
            raise command.error(
                script,
                f"{command.argv[script]} is given no --config, and its default config {str(default)!r} is not "
                f"there (from {os.getcwd()})",
                hint="run hpcplace from the directory the driver runs in (NeMo-RL's checkout), or add --config",
            )
        return default
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


def apply_cli(doc: YamlDocument, command: FrameworkCommand, indices: list[int]) -> YamlDocument:
    """run_eval.py's overrides: `OmegaConf.merge(config, OmegaConf.from_cli())`, no struct mode: `key=value`
    sets or adds the key, the value read as YAML; a word without `=` sets its key to null. Words starting with
    `-` (argparse's) become keys NeMo-RL never reads: left out."""
    import yaml

    data: dict[str, Any] = copy.deepcopy(doc.data)
    marks = dict(doc.marks)
    for i in indices:
        word = command.argv[i]
        if word.startswith("-"):
            continue
        key, eq, text = word.partition("=")
        try:
            value = yaml.safe_load(text) if eq else None
        except yaml.YAMLError as exc:
            raise command.error(i, f"OmegaConf cannot read the value of {word!r}: {str(exc).splitlines()[0]}") from None
        _set(data, key.split("."), value, marks, command.location(i), command, i)
    return YamlDocument(doc.path, data, marks)


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
            _drop(marks, _path(data, parts))
            del parent[_key(parent, parts[-1])]
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


def _key(node: Any, part: str) -> str | int | None:
    """The key `part` names in a mapping, or the index in a list (OmegaConf: `teachers.0.x`); None if absent."""
    if isinstance(node, dict):
        return part if part in node else None
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return int(part)
    return None


def _lookup(data: dict[str, Any], parts: list[str]) -> tuple[bool, Any]:
    """Whether the dotted key exists, and the mapping or list that holds its last part."""
    node: Any = data
    for part in parts[:-1]:
        key = _key(node, part)
        if key is None or not isinstance(node[key], (dict, list)):
            return False, {}
        node = node[key]
    return _key(node, parts[-1]) is not None, node


def _get(data: dict[str, Any], parts: list[str]) -> Any:
    node: Any = data
    for part in parts:
        node = node[_key(node, part)]
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
    """OmegaConf.update(merge=True): a mapping merges into a mapping, anything else replaces; a number names an
    element of a list."""
    node: Any = data
    for depth, part in enumerate(parts[:-1]):
        step = _key(node, part)
        if step is None and not isinstance(node, dict):
            raise command.error(index, f"override {command.argv[index]!r}: no element {part} in the list")
        if step is None:
            step = part
            node[step] = None
        if node[step] is None:
            node[step] = {}
        if not isinstance(node[step], (dict, list)):
            raise command.error(
                index, f"override {command.argv[index]!r}: {'.'.join(parts[: depth + 1])!r} is not a mapping"
            )
        node = node[step]
    mark = ScalarMark(where.line, where.column, None, None, file=where.path)
    last = _key(node, parts[-1])
    if last is None:
        if not isinstance(node, dict):
            raise command.error(index, f"override {command.argv[index]!r}: no element {parts[-1]} in the list")
        last = parts[-1]
    path = _path(data, parts[:-1]) + (last,)
    current = node.get(last) if isinstance(node, dict) else node[last]
    if isinstance(value, dict) and isinstance(current, dict):
        node[last] = _merged(current, value)
        for key in _paths(value, path):
            marks[key] = mark
        return
    node[last] = value
    _drop(marks, path)
    for key in _paths(value, path):
        marks[key] = mark


def _path(data: dict[str, Any], parts: list[str]) -> PathKey:
    """The dotted key as a document path (list indices as ints)."""
    node: Any = data
    out: list[str | int] = []
    for part in parts:
        key = _key(node, part)
        out.append(part if key is None else key)
        node = node[key] if key is not None else None
    return tuple(out)


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
# the spec: node groups from the slurm: block, one placement per role


def _pool_groups(slurm: View | None, layout: Layout) -> dict[str, str]:
    """`slurm.pools: {training: LABEL, generation: LABEL, teacher: LABEL, reward_model: LABEL}`: the node group (a key of
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


def _with_segment_size(group: NodeGroup, cluster_view: View | None, notes: list[str]) -> NodeGroup:
    """NeMo-RL's `cluster.segment_size` (nodes per NVLink-domain segment of its training nodes): the segment the
    training group's block topology asks Slurm for. NeMo-RL selects its nodes by the raylets' nvlink_domain_*
    resources, which hpcplace registers only where a node group states a block topology."""
    view = cluster_view.get("segment_size") if cluster_view is not None else None
    if view is None or view.value is None:
        return group
    size = view.int(minimum=1)
    topology = group.topology
    if topology is None:
        notes.append(
            f"cluster.segment_size {size}: node group {group.label!r} states no topology, so the job asks Slurm for no "
            "segments and its raylets carry no nvlink_domain_* resource: NeMo-RL falls back to unordered allocation "
            "(give slurm.topology: {block: NODES} or topology: site)"
        )
        return group
    if topology.kind == TREE:
        raise view.error(
            f"cluster.segment_size {size} needs a block topology; node group {group.label!r} states a tree",
            hint="give slurm.topology: {block: NODES}, or set cluster.segment_size: null",
        )
    if topology.segment is not None and topology.segment != size:
        raise view.error(
            f"cluster.segment_size {size} and node group {group.label!r}'s topology segment {topology.segment} differ",
            hint="NeMo-RL's docs: set both to the same value (or leave the topology's segment out)",
        )
    if group.num_nodes % size:
        raise view.error(
            f"cluster.segment_size {size} does not divide the {group.num_nodes} training nodes "
            "(NeMo-RL raises ResourceInsufficientError)",
            hint=f"give a segment size that divides {group.num_nodes}",
        )
    if topology.size is not None and size > topology.size:
        raise view.error(
            f"cluster.segment_size {size} is larger than a block of node group {group.label!r} ({topology.size} nodes)",
            hint=f"give a segment size of at most {topology.size}",
        )
    return replace(group, topology=replace(topology, segment=size, segment_location=view.location()))


def parse(command: FrameworkCommand, blocks: YamlDocument, site_gpus: SiteGpus | None) -> ExperimentSpec:
    """The spec of a NeMo-RL command (formats/command.py's contract)."""
    script, name = _entry(command)
    config_index, config, overrides = _arguments(command, script)
    path = _config_path(command, config_index, config, script)
    files: list[str] = []
    doc = load_config(path, command.location(config_index or script), files)
    doc = (apply_cli if name == "eval" else apply_overrides)(doc, command, overrides)
    root = doc.root()
    layout = algorithm_layout(root, ENTRY_POINTS[name])
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
    groups[0] = _with_segment_size(groups[0], root.get("cluster"), notes)
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
        settings[role.name] = ComponentSpec(
            role.name,
            tensor_parallel_size=role.tp,
            pipeline_parallel_size=role.pp,
            expert_parallel_size=role.ep,
            expert_tensor_parallel_size=role.etp,
            gpus_per_engine=role.engine,
        )
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
        names = [role.cluster] if role.cluster else sorted(c for c, comp in CLUSTERS.items() if comp == role.name)
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
