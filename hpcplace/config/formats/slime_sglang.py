"""slime's `--sglang-config` YAML (slime/backends/sglang_utils/sglang_config.py and slime/ray/rollout.py at 624b824),
read as slime reads it: models, each with server groups; every group takes the next `num_gpus` GPUs of the rollout,
in slime's start order (per model, its `encoder` groups first when it has any, then the others as written), and
makes `num_gpus // min(num_gpus_per_engine, --num-gpus-per-node)` engine parts from its first GPU on; a
`placeholder` group only reserves its GPUs. Refused where slime fails, with slime's reason, at the value's
file:line:col."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from hpcplace.config.formats.command import FrameworkCommand
from hpcplace.config.yaml_source import View, closest, load_yaml_file
from hpcplace.errors import SourceLocation

WORKER_TYPES = ("regular", "prefill", "decode", "placeholder", "encoder")
GROUP_KEYS = ("worker_type", "num_gpus", "num_gpus_per_engine", "overrides")


@dataclass(frozen=True)
class ServerGroup:
    """One server group of one model: GPUs `start`..`start + num_gpus - 1` of the rollout (slime's gpu_offset)."""

    model: str
    worker_type: str
    start: int
    num_gpus: int
    gpus_per_engine: int
    pipeline_parallel: int
    tensor_parallel: int
    location: SourceLocation  # the group's entry in the YAML (or the flag that made it)
    words: str  # how messages name it


@dataclass(frozen=True)
class SglangConfig:
    path: str
    groups: tuple[ServerGroup, ...]  # in slime's start order
    total_gpus: int
    location: SourceLocation  # the `sglang` key


def read_sglang_config(
    command: FrameworkCommand, index: int, given: str, default_per_engine: int, default_pp: int
) -> SglangConfig:
    """The server groups of the config `given` at command word `index` (read from the directory the driver starts
    in, which is the directory hpcplace runs in); `default_per_engine` is --rollout-num-gpus-per-engine,
    `default_pp` the --sglang-pp-size slime's groups fall back to."""
    path = Path(given)
    if not path.is_file():
        raise command.error(
            index,
            f"--sglang-config: file {given!r} not found (from {os.getcwd()}): slime reads its server groups there",
            hint="a relative path is read from the directory the driver runs in: run hpcplace from there, or give "
            "an absolute path",
        )
    root = load_yaml_file(path).root()
    if not isinstance(root.value, dict) or "sglang" not in root.value:
        got = list(root.value) if isinstance(root.value, dict) else type(root.value).__name__
        raise root.error(
            f"slime: sglang config must have a 'sglang' key, got {got} (its assert)",
            hint="wrap your server_groups inside a model entry under 'sglang': sglang: [{name: actor, server_groups: "
            "[{worker_type: regular, num_gpus: 8}]}]",
        )
    models = root.require("sglang")
    if not isinstance(models.value, list):
        raise models.error("slime: 'sglang' is a list of models (each with a name and server_groups)")
    laid_out: list[ServerGroup] = []
    offset = 0
    for model in models.elements():
        if not isinstance(model.value, dict):
            raise model.error("slime: each model under 'sglang' is a mapping (name, server_groups, ...)")
        name = str(model.require("name", "a model's name (slime: KeyError 'name')").value)
        model_per_engine = _positive(model.get("num_gpus_per_engine"), "num_gpus_per_engine", allow_zero=True)
        groups = [
            _group(name, k, view, model_per_engine or default_per_engine, default_pp)
            for k, view in enumerate(_groups(model))
        ]
        _check_model_paths(model, name)
        if any(g.worker_type == "encoder" for g in groups):  # EPD: slime starts the encoder groups first
            groups = [g for g in groups if g.worker_type == "encoder"] + [
                g for g in groups if g.worker_type != "encoder"
            ]
        for group in groups:
            laid_out.append(replace(group, start=offset))
            offset += group.num_gpus
    return SglangConfig(str(path), tuple(laid_out), offset, root.require("sglang").location())


def component_names(groups: tuple[ServerGroup, ...]) -> list[str]:
    """A component per group: `rollout` (one model) or `rollout_<model>`, then `_<worker type>` unless regular,
    then `_<k>` where a model has several groups of that type."""
    models = list(dict.fromkeys(g.model for g in groups))
    bases = {m: "rollout" if len(models) == 1 else f"rollout_{_clean(m)}" for m in models}
    if len(set(bases.values())) < len(bases):  # names that differ only in characters a component name cannot hold
        bases = {m: f"{bases[m]}_{i}" for i, m in enumerate(models)}
    kinds = [(g.model, g.worker_type) for g in groups]
    seen: dict[tuple[str, str], int] = {}
    names = []
    for g in groups:
        key = (g.model, g.worker_type)
        seen[key] = seen.get(key, 0) + 1
        name = bases[g.model] + ("" if g.worker_type == "regular" else f"_{g.worker_type}")
        names.append(name + (f"_{seen[key]}" if kinds.count(key) > 1 else ""))
    return names


def _clean(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "model"


def _groups(model: View) -> list[View]:
    # slime: m.get("server_groups") or m.get("engine_groups") or []
    for key in ("server_groups", "engine_groups"):
        view = model.get(key)
        if view is not None and view.value:
            if not isinstance(view.value, list):
                raise view.error(f"slime: {key} is a list of server groups (worker_type, num_gpus, ...)")
            return list(view.elements())
    return []


def _group(model: str, index: int, view: View, per_engine: int, default_pp: int) -> ServerGroup:
    if not isinstance(view.value, dict):
        raise view.error("slime: a server group is a mapping (worker_type, num_gpus, num_gpus_per_engine, overrides)")
    for key, child in view.items():
        if str(key) not in GROUP_KEYS:
            near = closest(str(key), GROUP_KEYS)
            raise child.key_error(
                f"slime: ServerGroupConfig.__init__() got an unexpected keyword argument {str(key)!r}",
                hint=(f"did you mean {near!r}? " if near else "") + "a server group has " + ", ".join(GROUP_KEYS),
            )
    for key in ("worker_type", "num_gpus"):
        if key not in view.value:
            raise view.error(
                f"slime: ServerGroupConfig.__init__() missing required argument: {key!r}",
                hint="a server group needs worker_type and num_gpus",
            )
    kind = view.require("worker_type")
    if kind.value not in WORKER_TYPES:
        raise kind.error(
            f"slime: Invalid worker_type {kind.value!r}, must be one of {{{', '.join(map(repr, WORKER_TYPES))}}} "
            "(its assert)"
        )
    gpus = view.require("num_gpus")
    if not isinstance(gpus.value, int) or isinstance(gpus.value, bool) or gpus.value <= 0:
        raise gpus.error(f"slime: num_gpus must be > 0, got {gpus.value!r} (its assert)")
    own = _positive(view.get("num_gpus_per_engine"), "num_gpus_per_engine")
    overrides = view.get("overrides")
    if overrides is not None and overrides.value is not None and not isinstance(overrides.value, dict):
        raise overrides.error("slime: overrides maps SGLang ServerArgs fields to values")
    gpus_per_engine = own or per_engine
    pp = _override(overrides, "pp_size") or default_pp
    tp = _override(overrides, "tp_size") or max(1, gpus_per_engine // pp)
    words = f"server group {index} ({kind.value}) of model {model!r}"
    return ServerGroup(model, str(kind.value), 0, gpus.value, gpus_per_engine, pp, tp, view.location(), words)


def _positive(view: View | None, key: str, *, allow_zero: bool = False) -> int | None:
    if view is None or view.value is None:
        return None
    value = view.value
    if not isinstance(value, int) or isinstance(value, bool) or value < (0 if allow_zero else 1):
        raise view.error(
            f"slime: {key} is {value!r}: a number of GPUs, 1 or more"
            + ("" if allow_zero else " (0 makes slime divide by zero)")
        )
    return value


def _override(overrides: View | None, key: str) -> int | None:
    """An override slime's parallel_config reads (`pp_size`, `tp_size`; `pp-size` is the same field)."""
    if overrides is None or not isinstance(overrides.value, dict):
        return None
    for name, child in overrides.items():
        if str(name).replace("-", "_") == key:
            if not isinstance(child.value, int) or isinstance(child.value, bool) or child.value < 1:
                raise child.error(f"slime: overrides.{name} is {child.value!r}: 1 or more")
            return child.value
    return None


def _check_model_paths(model: View, name: str) -> None:
    """slime's ModelConfig.resolve: every group of a model serves one model_path (a group's overrides.model_path,
    else the model's, else --hf-checkpoint)."""
    default = model.get("model_path")
    fallback = default.value if default is not None and default.value else None
    paths: dict[object, View] = {}
    for group in _groups(model):
        overrides = group.get("overrides")
        given = overrides.get("model_path") if overrides is not None and isinstance(overrides.value, dict) else None
        paths.setdefault(given.value if given is not None else fallback, given or group)
    if len(paths) > 1:
        shown = sorted("--hf-checkpoint" if p is None else str(p) for p in paths)
        raise list(paths.values())[-1].error(
            f"slime: Model {name!r} has server groups with different model_path values: {shown}. All server groups "
            "within a model must use the same model_path (its assert)",
            hint="give the other model_path a model entry of its own",
        )
