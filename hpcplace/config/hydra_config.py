"""Load a config the way RLinf, ROLL and AReaL do: Hydra composition and OmegaConf interpolation.

RLinf/ROLL/AReaL configs are Hydra configs: a `defaults:` list composes other files (from the
config's directory and `hydra.searchpath`, often `file://${oc.env:EMBODIED_PATH}/config/`), and
values interpolate (`${actor.model.tensor_model_parallel_size}`, RLinf's `${subtract:a,b}`).

Composition is Hydra's own (hydra-core, pinned), so its semantics are the frameworks'. Locations are
kept: every file of the defaults list is read again with the located loader and its marks are
placed under the package it was composed into, so an error names the file that defined the value.
Interpolations are resolved lazily, only for values placement reads (`View.deref`/`resolve`), so
keys placement ignores may stay unresolvable.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from hpcplace.errors import SourceLocation, SpecError
from hpcplace.config.interpolation import register_resolvers
from hpcplace.config.yaml_source import KEY, PathKey, ScalarMark, YamlDocument, load_yaml_file

# Hydra command-line overrides: `key=value`, `+key=value`, `++key=value`, `~key`, `group/opt@pkg=x`.
HYDRA_OVERRIDE = re.compile(r"^(?:~|\+\+|\+)?[A-Za-z_][\w./@-]*(?:=.*)?$", re.S)
_ENV_IN_SEARCHPATH = re.compile(r"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)(?:,([^}]*))?\}")


def needs_hydra(doc: YamlDocument, overrides: Sequence[str]) -> bool:
    """Composition is needed when the file has a `defaults:` list or a Hydra-only override is given."""
    data = doc.data
    if isinstance(data, dict) and isinstance(data.get("defaults"), list) and data["defaults"]:
        return True
    return any(o.startswith(("+", "~")) or "/" in o.partition("=")[0] or "@" in o.partition("=")[0]
               for o in overrides)


def compose(doc: YamlDocument, overrides: Sequence[str]) -> tuple[YamlDocument, tuple[str, ...]]:
    """Compose `doc` with Hydra; returns the located composed document and the files it came from."""
    try:
        from hydra import compose as hydra_compose
        from hydra import initialize_config_dir
        from hydra._internal import config_loader_impl
        from hydra.core.global_hydra import GlobalHydra
    except ImportError as exc:  # a broken install: hydra-core is a core dependency
        raise SpecError(f"this config composes Hydra `defaults:` but hydra-core cannot be imported ({exc})",
                        hint="pip install 'hydra-core==1.3.2' 'omegaconf==2.3.0'") from None
    from omegaconf import OmegaConf

    path = Path(doc.path).resolve()
    _check_searchpath_env(doc)
    register_resolvers()
    GlobalHydra.instance().clear()
    # Hydra computes the defaults list while composing; keep the one it used (computing it a second
    # time through the public API doubles the cost) to learn which file each part came from.
    seen: list[Any] = []
    original = config_loader_impl.create_defaults_list

    def capture(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        seen.append(result)
        return result

    config_loader_impl.create_defaults_list = capture  # type: ignore[assignment]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with initialize_config_dir(config_dir=str(path.parent), version_base="1.1", job_name="hpcplace"):
                loader = GlobalHydra.instance().config_loader()
                # hydra.searchpath of the primary config is appended by Hydra while loading: do the same
                search = [_file_dir(e.path) for e in loader.get_search_path().get_path()] + _searchpath_dirs(doc)
                cfg = hydra_compose(config_name=path.stem, overrides=list(overrides))
                data = OmegaConf.to_container(cfg, resolve=False)
    except SpecError:
        raise
    except Exception as exc:  # Hydra/OmegaConf errors: missing defaults file, duplicate package, bad override
        missing = _missing_default(doc, exc)
        raise SpecError(f"Hydra cannot compose this config: {_first_line(exc)}",
                        location=missing[0] if missing else _defaults_location(doc),
                        hint=missing[1] if missing else _compose_hint(exc)) from None
    finally:
        config_loader_impl.create_defaults_list = original  # type: ignore[assignment]
        GlobalHydra.instance().clear()
    defaults = seen[-1]
    marks: dict[PathKey, ScalarMark] = {}
    files: list[str] = []
    for item in defaults.defaults:
        if item.config_path is None or item.package is None or item.package.split(".")[0] == "hydra" \
                or item.config_path.startswith("hydra/"):
            continue
        source = path if item.primary else _find(item.config_path, search)
        if source is None:
            continue
        located = doc if item.primary else load_yaml_file(source)
        prefix: PathKey = tuple(p for p in item.package.split(".") if p)
        for key, mark in located.marks.items():
            if key[:1] == ("defaults",) or key[:1] == ("hydra",):
                continue
            marks[prefix + key] = replace(mark, file=str(source) if not item.primary else None)
        label = str(source) + (f" @{item.package}" if item.package else "")
        if label not in files:
            files.append(label)
    if isinstance(data, dict):
        data.pop("hydra", None)
    for text in overrides:
        mark_override(text, marks)
    return YamlDocument(doc.path, data, marks), tuple(files)


def _file_dir(entry: str) -> Path | None:
    if entry.startswith("file://"):
        return Path(entry[len("file://"):])
    if "://" in entry:
        return None
    return Path(entry)


def _find(config_path: str, search: list[Path | None]) -> Path | None:
    for base in search:
        if base is None:
            continue
        for suffix in (".yaml", ".yml", ""):
            candidate = base / (config_path + suffix)
            if candidate.is_file():
                return candidate.resolve()
    return None


def _check_searchpath_env(doc: YamlDocument) -> None:
    """`file://${oc.env:EMBODIED_PATH}/config/` with the variable unset: say which variable to export."""
    hydra = doc.data.get("hydra") if isinstance(doc.data, dict) else None
    entries = hydra.get("searchpath") if isinstance(hydra, dict) else None
    if not isinstance(entries, list):
        return
    for i, entry in enumerate(entries):
        for m in _ENV_IN_SEARCHPATH.finditer(str(entry)):
            if m.group(1) not in os.environ and m.group(2) is None:
                raise SpecError(f"hydra.searchpath {entry!r} needs the environment variable {m.group(1)}, "
                                "which is not set", location=doc.location(("hydra", "searchpath", i)),
                                hint=f"export {m.group(1)}=<directory> as the framework's run script does "
                                     "(e.g. the examples/... folder holding config/)")


def _defaults_location(doc: YamlDocument) -> SourceLocation:
    return doc.location(("defaults", KEY)) if ("defaults", KEY) in doc.marks else doc.location(())


_MISSING = re.compile(r"Could not (?:find|load) '([^']+)'")


def _missing_default(doc: YamlDocument, exc: BaseException) -> tuple[SourceLocation, str] | None:
    """A defaults entry naming a file that does not exist: the entry's location (the primary file's
    entry when it is there, else the defaults list) and the options the config group has."""
    m = _MISSING.search(str(exc))
    if not m:
        return None
    group, _, option = m.group(1).strip("/").rpartition("/")
    location = _defaults_location(doc)
    entries = doc.data.get("defaults") if isinstance(doc.data, dict) else None
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        if isinstance(entry, str) and entry.split()[-1].split("@")[0].strip("/") == m.group(1).strip("/"):
            location = doc.location(("defaults", i))
        elif isinstance(entry, dict) and len(entry) == 1:
            (key, value), = entry.items()
            if str(key).split()[-1].split("@")[0].strip("/") == group and str(value) == option:
                location = doc.location(("defaults", i, key))
    bases = [Path(doc.path).resolve().parent] + [p for p in _searchpath_dirs(doc) if p is not None]
    dirs = [b / group for b in bases if group and (b / group).is_dir()]
    options = sorted({f.stem for d in dirs for f in d.iterdir() if f.suffix in (".yaml", ".yml") and f.is_file()})
    if not group:
        hint = f"no config {option!r} in the config's folder or a hydra.searchpath entry"
    elif options:
        hint = (f"config group {group!r} has no option {option!r}; its options are: {', '.join(options)} "
                f"(the .yaml files in {', '.join(str(d) for d in dirs)})")
    elif dirs:
        hint = f"config group {group!r} ({', '.join(str(d) for d in dirs)}) holds no .yaml files"
    else:
        hint = (f"there is no config group folder {group!r} in the config's folder or a hydra.searchpath "
                f"entry ({', '.join(str(b) for b in bases)})")
    return location, hint


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _compose_hint(exc: BaseException) -> str:
    text = str(exc)
    if "Could not find" in text or "Could not load" in text or "not found" in text:
        return "check the `defaults:` entry names a file that exists (relative to the config's folder or a " \
               "hydra.searchpath entry)"
    if "Multiple values for" in text or "appears more than once" in text:
        return "a defaults entry is listed twice after composition; remove one"
    return "the frameworks compose this config with Hydra too: fix the `defaults:` list or the override"


def split_overrides(doc: YamlDocument, overrides: Sequence[str]) -> tuple[list[str], list[str]]:
    """Overrides Hydra must see (config groups `model=x`, `+group/opt@pkg`, `~key`) vs. plain values,
    which hpcplace applies after composition (they may create keys, like `--set slurm.partition=p`)."""
    bases = [Path(doc.path).resolve().parent] + [p for p in _searchpath_dirs(doc) if p is not None]
    hydra, plain = [], []
    for text in overrides:
        key = text.partition("=")[0]
        bare = key.lstrip("+~")
        group = bare.split("@")[0]
        if key.startswith("~") or "@" in bare or "/" in group or any((b / group).is_dir() for b in bases):
            hydra.append(text)
        else:
            plain.append(text)
    return hydra, plain


def _searchpath_dirs(doc: YamlDocument) -> list[Path | None]:
    hydra = doc.data.get("hydra") if isinstance(doc.data, dict) else None
    entries = hydra.get("searchpath") if isinstance(hydra, dict) else None
    if not isinstance(entries, list):
        return []
    out = []
    for entry in entries:
        text = _ENV_IN_SEARCHPATH.sub(lambda m: os.environ.get(m.group(1), m.group(2) or ""), str(entry))
        out.append(_file_dir(text))
    return out


def mark_override(text: str, marks: dict[PathKey, ScalarMark]) -> None:
    """Point errors about an overridden value at the override itself."""
    key, sep, _value = text.lstrip("+~").partition("=")
    if not sep or "/" in key or "@" in key:
        return
    path: PathKey = tuple(int(p) if p.isdigit() else p for p in key.split("."))
    for existing in [k for k in marks if k[:len(path)] == path]:
        del marks[existing]
    marks[path] = ScalarMark(1, len(text) - len(_value) + 1, None, _value, file=f"<override {text}>")
