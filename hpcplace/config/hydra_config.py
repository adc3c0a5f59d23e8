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

import contextlib
import os
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from hpcplace.config.interpolation import register_resolvers
from hpcplace.config.yaml_source import (
    KEY,
    PathKey,
    ScalarMark,
    YamlDocument,
    load_yaml_file,
    yaml11_sexagesimal,
    yaml_error,
)
from hpcplace.errors import SourceLocation, SpecError

# Hydra command-line overrides: `key=value`, `+key=value`, `++key=value`, `~key`, `group/opt@pkg=x`.
HYDRA_OVERRIDE = re.compile(r"^(?:~|\+\+|\+)?[A-Za-z_][\w./@-]*(?:=.*)?$", re.S)
_ENV_IN_SEARCHPATH = re.compile(r"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)(?:,([^}]*))?\}")


def needs_hydra(doc: YamlDocument, overrides: Sequence[str]) -> bool:
    """Composition is needed when the file has a `defaults:` list or a Hydra-only override is given."""
    data = doc.data
    if isinstance(data, dict) and isinstance(data.get("defaults"), list) and data["defaults"]:
        return True
    return any(o.startswith(("+", "~")) or "/" in o.partition("=")[0] or "@" in o.partition("=")[0] for o in overrides)


def compose(
    doc: YamlDocument,
    overrides: Sequence[str],
    found_env: Mapping[str, str] | None = None,
    searchpath: Sequence[str] | None = None,
) -> tuple[YamlDocument, tuple[str, ...]]:
    """Compose `doc` with Hydra; returns the located composed document and the files it came from.
    `found_env`: what `searchpath_env` found for variables the shell did not export; `searchpath`: the
    hydra.searchpath to use in place of the config's own (Hydra's `hydra.searchpath=[...]` override)."""
    try:
        from hydra import compose as hydra_compose
        from hydra import initialize_config_dir
        from hydra._internal import config_loader_impl
        from hydra.core.global_hydra import GlobalHydra
    except ImportError as exc:  # a broken install: hydra-core is a core dependency
        raise SpecError(
            f"this config composes Hydra `defaults:` but hydra-core cannot be imported ({exc})",
            hint="pip install 'hydra-core==1.3.2' 'omegaconf==2.3.0'",
        ) from None
    from omegaconf import OmegaConf

    path = Path(doc.path).resolve()
    found_env = dict(found_env or {})
    register_resolvers()
    GlobalHydra.instance().clear()
    # Hydra computes the defaults list while composing; keep the one it used (computing it a second
    # time through the public API doubles the cost) to learn which file each part came from.
    seen: list[Any] = []
    original = config_loader_impl.create_defaults_list  # type: ignore[attr-defined]  # Hydra's internal, not exported

    def capture(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        seen.append(result)
        return result

    config_loader_impl.create_defaults_list = capture  # type: ignore[attr-defined]  # Hydra's internal, not exported
    try:
        with warnings.catch_warnings(), _exported(found_env):
            warnings.simplefilter("ignore")
            with initialize_config_dir(config_dir=str(path.parent), version_base="1.1", job_name="hpcplace"):
                loader = GlobalHydra.instance().config_loader()
                # hydra.searchpath of the primary config is appended by Hydra while loading: do the same
                search = [_file_dir(e.path) for e in loader.get_search_path().get_path()]
                search += _searchpath_dirs(doc, found_env) if searchpath is None else [_file_dir(e) for e in searchpath]
                given = [] if searchpath is None else [f"hydra.searchpath=[{','.join(searchpath)}]"]
                cfg = hydra_compose(config_name=path.stem, overrides=[*overrides, *given])
                data = OmegaConf.to_container(cfg, resolve=False)
    except SpecError:
        raise
    except Exception as exc:  # noqa: BLE001 - Hydra/OmegaConf errors: missing defaults file, duplicate package, bad override
        bad_yaml = _yaml_error_in_file(exc)
        if bad_yaml is not None:
            raise bad_yaml from None
        missing = _missing_default(doc, exc, found_env)
        raise SpecError(
            f"Hydra cannot compose this config: {_hydra_words(exc)}",
            location=missing[0] if missing else _defaults_location(doc),
            hint=missing[1] if missing else _compose_hint(exc),
        ) from None
    finally:
        config_loader_impl.create_defaults_list = original  # type: ignore[attr-defined]  # Hydra's internal, not exported
        GlobalHydra.instance().clear()
    defaults = seen[-1]
    marks: dict[PathKey, ScalarMark] = {}
    files: list[str] = []
    for item in defaults.defaults:
        if (
            item.config_path is None
            or item.package is None
            or item.package.split(".")[0] == "hydra"
            or item.config_path.startswith("hydra/")
        ):
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
    _keep_base60_text(data, marks)
    return YamlDocument(doc.path, data, marks), tuple(files)


def _keep_base60_text(data: Any, marks: Mapping[PathKey, ScalarMark]) -> None:
    """OmegaConf loads files as YAML 1.1, so an unquoted `time: 1:00:00` is composed as the number 3600
    (which Slurm would read as minutes). Put back the text as written, as hpcplace's own loader keeps it,
    wherever the value's located mark is its source: the mark's text reads, in YAML 1.1, as the very
    number composed. (`data` is the container this composition just made.)"""
    for path, mark in marks.items():
        if mark.raw is None or not path or path[-1] == KEY or not yaml11_sexagesimal(mark.raw):
            continue
        parent = data
        for key in path[:-1]:
            parent = _child(parent, key)
        value = _child(parent, path[-1])
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == yaml.safe_load(mark.raw):
            parent[path[-1]] = mark.raw


def _child(node: Any, key: Any) -> Any:
    """node[key] of a composed container, or None where there is none."""
    if isinstance(node, dict):
        return node.get(key)
    if isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
        return node[key]
    return None


def _file_dir(entry: str) -> Path | None:
    if entry.startswith("file://"):
        return Path(entry[len("file://") :])
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


def searchpath_env(doc: YamlDocument) -> dict[str, str]:
    """Variables `hydra.searchpath` names that the shell did not export, found as the frameworks' run
    scripts set them: the nearest folder at or above the config's where every entry naming the variable
    is a folder (RLinf's run scripts export EMBODIED_PATH as the examples/... folder whose config/ holds
    the file, REPO_PATH as the checkout). Only an entry naming a folder below the variable
    (`${X}/config/`) can tell; a bare `${X}/`, or no folder that fits, is refused naming the variable."""
    entries = searchpath_entries(doc)
    needed: dict[str, list[str]] = {}
    for entry in entries:
        for m in _ENV_IN_SEARCHPATH.finditer(entry):
            if m.group(1) not in os.environ and m.group(2) is None:
                needed.setdefault(m.group(1), []).append(entry)
    found: dict[str, str] = {}
    config_dir = Path(doc.path).resolve().parent
    for var, uses in needed.items():
        telling = all(_names_a_folder_below(entry, var) for entry in uses)
        folder = (
            next(
                (f for f in (config_dir, *config_dir.parents) if all(_is_dir_with(entry, var, f) for entry in uses)),
                None,
            )
            if telling
            else None
        )
        if folder is None:
            raise SpecError(
                f"hydra.searchpath {uses[0]!r} needs the environment variable {var}, which is not set"
                + (", and no folder above the config fits it" if telling else ""),
                location=doc.location(("hydra", "searchpath", entries.index(uses[0]))),
                hint=f"export {var}=<directory> as the framework's run script does "
                "(e.g. the examples/... folder holding config/)",
            )
        found[var] = str(folder)
    return found


def _names_a_folder_below(entry: str, var: str) -> bool:
    """`${X}/config/` tells which folder X is; a bare `${X}/` fits every folder."""
    return all(entry[m.end() :].strip("/") for m in _ENV_IN_SEARCHPATH.finditer(entry) if m.group(1) == var)


def _is_dir_with(entry: str, var: str, folder: Path) -> bool:
    text = _ENV_IN_SEARCHPATH.sub(
        lambda m: str(folder) if m.group(1) == var else os.environ.get(m.group(1), m.group(2) or ""), entry
    )
    where = _file_dir(text)
    return where is not None and where.is_dir()


@contextlib.contextmanager
def _exported(env: Mapping[str, str]) -> Iterator[None]:
    """Hydra resolves `${oc.env:X}` in hydra.searchpath from os.environ: export `env` while composing."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _defaults_location(doc: YamlDocument) -> SourceLocation:
    return doc.location(("defaults", KEY)) if ("defaults", KEY) in doc.marks else doc.location(())


_MISSING = re.compile(r"Could not (?:find|load) '([^']+)'")


def _missing_default(
    doc: YamlDocument, exc: BaseException, found_env: Mapping[str, str]
) -> tuple[SourceLocation, str] | None:
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
            ((key, value),) = entry.items()
            if str(key).split()[-1].split("@")[0].strip("/") == group and str(value) == option:
                location = doc.location(("defaults", i, key))
    bases = [Path(doc.path).resolve().parent] + [p for p in _searchpath_dirs(doc, found_env) if p is not None]
    dirs = [b / group for b in bases if group and (b / group).is_dir()]
    options = sorted({f.stem for d in dirs for f in d.iterdir() if f.suffix in (".yaml", ".yml") and f.is_file()})
    if not group:
        hint = f"no config {option!r} in the config's folder or a hydra.searchpath entry"
    elif options:
        hint = (
            f"config group {group!r} has no option {option!r}; its options are: {', '.join(options)} "
            f"(the .yaml files in {', '.join(str(d) for d in dirs)})"
        )
    elif dirs:
        hint = f"config group {group!r} ({', '.join(str(d) for d in dirs)}) holds no .yaml files"
    else:
        hint = (
            f"there is no config group folder {group!r} in the config's folder or a hydra.searchpath "
            f"entry ({', '.join(str(b) for b in bases)})"
        )
    return location, hint


def _yaml_error_in_file(exc: BaseException) -> SpecError | None:
    """A YAML error in one of the composed files (a `defaults:` entry), located in that file, not the top one."""
    seen: BaseException | None = exc
    while seen is not None and not isinstance(
        seen, (yaml.MarkedYAMLError, yaml.reader.ReaderError, UnicodeDecodeError)
    ):
        seen = seen.__cause__ or seen.__context__
    if isinstance(seen, UnicodeDecodeError):  # Hydra opened a file as UTF-8: name it, at the byte
        source = _file_being_read(seen)
        if source is None:
            return None
        try:
            load_yaml_file(source)
        except SpecError as located:
            return located
        return None
    if isinstance(seen, yaml.reader.ReaderError) and os.path.isfile(seen.name):  # a character YAML refuses
        with open(seen.name, encoding="utf-8", errors="replace") as fh:
            return yaml_error(seen, seen.name, fh.read())
    if (
        not isinstance(seen, yaml.MarkedYAMLError)
        or seen.problem_mark is None
        or not os.path.isfile(seen.problem_mark.name)
    ):
        return None
    return yaml_error(seen, seen.problem_mark.name)


def _file_being_read(exc: BaseException) -> str | None:
    """The file a decode error came from: Hydra's file config source holds it as `full_path` (the error
    itself names no file); None where no frame does."""
    tb = exc.__traceback__
    found = None
    while tb is not None:
        candidate = tb.tb_frame.f_locals.get("full_path")
        if isinstance(candidate, str) and os.path.isfile(candidate):
            found = candidate
        tb = tb.tb_next
    return found


def _hydra_words(exc: BaseException) -> str:
    """Hydra's message on one line: its first lines carry the way out ("Did you mean to override
    model@actor.model?"); a traceback-like tail is left out."""
    lines = [line.strip() for line in (str(exc).strip() or type(exc).__name__).splitlines() if line.strip()]
    return " ".join(lines[:3])


def _compose_hint(exc: BaseException) -> str:
    text = str(exc)
    if "Could not find" in text or "Could not load" in text or "not found" in text:
        return (
            "check the `defaults:` entry names a file that exists (relative to the config's folder or a "
            "hydra.searchpath entry)"
        )
    if "Multiple values for" in text or "appears more than once" in text:
        return "a defaults entry is listed twice after composition; remove one"
    return "the frameworks compose this config with Hydra too: fix the `defaults:` list or the override"


def split_overrides(
    doc: YamlDocument,
    overrides: Sequence[str],
    found_env: Mapping[str, str] | None = None,
    searchpath: Sequence[str] | None = None,
) -> tuple[list[str], list[str]]:
    """Overrides Hydra must see (config groups `model=x`, `+group/opt@pkg`, `~key`) vs. plain values,
    which hpcplace applies after composition (they may create keys, like `--set slurm.partition=p`).
    `searchpath`: as for compose."""
    dirs = _searchpath_dirs(doc, found_env or {}) if searchpath is None else [_file_dir(e) for e in searchpath]
    bases = [Path(doc.path).resolve().parent] + [p for p in dirs if p is not None]
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


def searchpath_entries(doc: YamlDocument) -> list[str]:
    """The config's own `hydra.searchpath` entries, as written."""
    hydra = doc.data.get("hydra") if isinstance(doc.data, dict) else None
    entries = hydra.get("searchpath") if isinstance(hydra, dict) else None
    return [str(e) for e in entries] if isinstance(entries, list) else []


def _searchpath_dirs(doc: YamlDocument, found_env: Mapping[str, str]) -> list[Path | None]:
    env = {**os.environ, **found_env}
    return [
        _file_dir(_ENV_IN_SEARCHPATH.sub(lambda m: env.get(m.group(1), m.group(2) or ""), entry))
        for entry in searchpath_entries(doc)
    ]


def mark_override(text: str, marks: dict[PathKey, ScalarMark]) -> None:
    """Point errors about an overridden value at the override itself."""
    key, sep, _value = text.lstrip("+~").partition("=")
    if not sep or "/" in key or "@" in key:
        return
    path: PathKey = tuple(int(p) if p.isdigit() else p for p in key.split("."))
    for existing in [k for k in marks if k[: len(path)] == path]:
        del marks[existing]
    marks[path] = ScalarMark(1, len(text) - len(_value) + 1, None, _value, file=f"<override {text}>")
