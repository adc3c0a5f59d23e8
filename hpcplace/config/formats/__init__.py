"""Input formats: native hpcplace, RLinf, ROLL and AReaL configs, and the framework commands of verl,
NeMo-RL, OpenRLHF and slime (formats/command.py), all converted to ExperimentSpec."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from hpcplace.config.container import ContainerBlock, apply_container_block, parse_container_block
from hpcplace.config.formats.command import (
    BLOCK_KEYS,
    COMMAND_FORMATS,
    detect_command_format,
    driver_words,
    parse_command_spec,
)
from hpcplace.config.formats.common import SiteGpus
from hpcplace.config.formats.services_block import with_services
from hpcplace.config.hydra_config import compose, mark_override, needs_hydra, searchpath_env, split_overrides
from hpcplace.config.spec import ExperimentSpec
from hpcplace.config.yaml_source import View, YamlDocument, closest, load_yaml_file, scalar_value
from hpcplace.errors import SourceLocation, SpecError

FILE_FORMATS = ("native", "rlinf", "roll", "areal")  # the placement is in the YAML file
FORMATS = (*FILE_FORMATS, *COMMAND_FORMATS)  # and those whose placement is in the framework's command


_AREAL_ENGINES = ("actor", "rollout", "critic", "ref", "teacher")


def detect_format(data: object, path: str | None = None) -> str:
    """Guess the format from the document's shape; `format:` at the top level always wins."""
    where = SourceLocation(path, 1, 1) if path else None
    if data is None:
        raise SpecError(
            "the config is empty", hint="pass the experiment config, not an empty or comment-only file", location=where
        )
    if not isinstance(data, dict):
        raise SpecError("the config must be a YAML mapping", hint="see configs/ for examples", location=where)
    declared = data.get("format")
    if isinstance(declared, str) and declared.lower() in FORMATS:
        return declared.lower()
    cluster = data.get("cluster")
    if "allocation_mode" in data:
        return "areal"
    if (
        any(isinstance(data.get(k), dict) and isinstance(data[k].get("backend"), str) for k in _AREAL_ENGINES)
        and isinstance(cluster, dict)
        and ("n_gpus_per_node" in cluster or "n_nodes" in cluster)
    ):
        return "areal"
    if isinstance(cluster, dict) and "component_placement" in cluster:
        groups = cluster.get("node_groups")
        if "num_nodes" in cluster or (
            isinstance(groups, list) and groups and isinstance(groups[0], dict) and "node_ranks" in groups[0]
        ):
            return "rlinf"
        return "native"
    if "num_gpus_per_node" in data or any(
        isinstance(v, dict) and ("device_mapping" in v or "world_size" in v) for v in data.values()
    ):
        return "roll"
    raise SpecError(
        "cannot tell the config format: found none of `cluster.component_placement` (RLinf or native), "
        "`allocation_mode` or `<engine>.backend` with `cluster.n_gpus_per_node` (AReaL), "
        "`num_gpus_per_node` or a worker with `device_mapping`/`world_size` (ROLL)",
        location=where,
        hint="add `format: native|rlinf|roll|areal` at the top level (or pass --format), or check that the "
        "file is the experiment config rather than one of its defaults files; for verl, NeMo-RL, OpenRLHF "
        "and slime give the framework's command as launch.driver (or --driver -- CMD...)",
    )


OWN_BLOCKS = (
    "slurm",
    "launch",
    "hpcplace",
    "container",
    "services",
)  # hpcplace's blocks in a framework config: their schemas check keys


def apply_overrides(doc: YamlDocument, overrides: Sequence[str], *, hydra_keys: bool = False) -> YamlDocument:
    """`dotted.key=value` overrides (value read as a YAML scalar, never evaluated) on a copy.
    `hydra_keys` (a framework config): Hydra's rules for keys outside hpcplace's own blocks: `key=v` must
    name an existing key (a typo is refused, not added), `+key=v` a new one, `++key=v` either."""
    if not overrides:
        return doc
    import copy

    data = copy.deepcopy(doc.data)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError(
            f"cannot apply --set to {doc.path}: the document is not a mapping",
            location=doc.location(()),
            hint="--set KEY=VALUE sets a key of a YAML mapping",
        )
    for item in overrides:
        key, sep, raw = item.partition("=")
        where = SourceLocation(f"<override {item}>", 1, 1)  # a command-line argument, not a line of the file
        if not sep or not key.strip():
            raise SpecError(
                f"invalid override {item!r}", hint="write KEY=VALUE, e.g. slurm.gpus_per_node=8", location=where
            )
        try:
            value = scalar_value(raw) if raw.strip() else ""
        except SpecError as exc:
            raise SpecError(f"override {item!r}: {exc.message}", hint=exc.hint, location=where) from None
        adds = len(key) - len(key.lstrip("+"))  # Hydra: `+key=value` adds, `++key=value` adds or overrides
        key = key.lstrip("+")
        node: Any = data  # a mapping or a list, as the path goes down
        parts = key.strip().split(".")
        if any(not p for p in parts):
            raise SpecError(
                f"invalid override {item!r}: empty key in {key.strip()!r}",
                hint="write KEY=VALUE with dotted keys, e.g. slurm.time=1:00:00",
                location=where,
            )
        if hydra_keys and parts[0] not in OWN_BLOCKS and adds < 2:
            _check_hydra_key(data, parts, adds == 1, item, where)
        path: list[str | int] = []
        for depth, part in enumerate(parts):
            at: str | int = part
            if isinstance(node, list):  # `cluster.node_groups.0.nodes=2`: a list item by its position, as Hydra
                if not part.isdigit() or int(part) >= len(node):
                    raise SpecError(
                        f"override {item!r}: {'.'.join(parts[:depth])!r} is a list of {len(node)} "
                        f"item(s); {part!r} is not one of its positions",
                        location=doc.location(tuple(path)),
                        hint="a list item is set by its position from 0, e.g. cluster.node_groups.0.nodes=2",
                    )
                at = int(part)
            elif not isinstance(node, dict):
                raise SpecError(
                    f"override {item!r}: {parts[depth - 1]!r} is not a mapping in {doc.path}",
                    location=doc.location(tuple(path)),
                    hint="overrides set keys inside mappings (and list items by position)",
                )
            path.append(at)
            if depth == len(parts) - 1:
                node[at] = value
            else:
                if (node.get(at) if isinstance(node, dict) else node[at]) is None:
                    node[at] = {}
                node = node[at]
    marks = dict(doc.marks)
    for item in overrides:
        mark_override(item, marks)
    return YamlDocument(doc.path, data, marks)


def _check_hydra_key(data: dict[str, Any], parts: list[str], adding: bool, item: str, where: SourceLocation) -> None:
    """Hydra's override rules (it raises the same for these): `a.b=v` needs `a.b` to exist, `+a.b=v` needs
    it not to."""
    node: object = data
    for depth, part in enumerate(parts):
        if isinstance(node, list):  # a position; apply_overrides says when it is none
            if not part.isdigit() or int(part) >= len(node):
                return
            node = node[int(part)]
            continue
        if not isinstance(node, dict) or part not in node:
            if adding:
                return
            dotted, known = ".".join(parts), node if isinstance(node, dict) else {}
            near = closest(part, [k for k in known if isinstance(k, str)])
            hint = f"; did you mean {'.'.join([*parts[:depth], near])!r}?" if near else ""
            raise SpecError(
                f"override {item!r}: the config has no key {'.'.join(parts[: depth + 1])!r}{hint}",
                hint=f'Hydra refuses it too ("Could not override"); to add a new key write '
                f"+{dotted}={item.partition('=')[2]}",
                location=where,
            )
        node = node[part]
    if adding and node is not None and node != "???":  # Hydra: `+key` may set a key whose value is null/missing
        raise SpecError(
            f"override {item!r}: the config already has {'.'.join(parts)!r}",
            hint=f'Hydra refuses it too ("An item is already at"): write {item.lstrip("+")} to change '
            f"it, or ++{item.lstrip('+')} to set it either way",
            location=where,
        )


def load_spec(
    path: str | Path,
    *,
    format: str | None = None,
    overrides: Sequence[str] = (),
    site_gpus: SiteGpus | None = None,
    driver: Sequence[str] | None = None,
) -> ExperimentSpec:
    """Read (and compose, when it has a Hydra `defaults:` list) a config, apply overrides, parse it;
    the top-level `launch:` block is read the same way in every format. `site_gpus` answers for GPU
    counts the config leaves to run time (RLinf, ROLL). `driver` (`--driver -- CMD...`) is the
    framework's command for the command formats (verl, NeMo-RL, OpenRLHF, slime)."""
    from hpcplace.config.launch import FRAMEWORK_FORMATS, parse_launch  # they take overrides as Hydra does

    doc = load_yaml_file(path)
    command_format = _command_format(doc, format, driver)
    if command_format is not None:
        return _load_command_spec(command_format, apply_overrides(doc, overrides), driver, site_gpus, overrides)
    # The file's own format, before overrides: removing a key (`~cluster.num_nodes`) must not make an RLinf
    # config read as another format (a file whose `defaults:` hold the telling keys is detected once composed).
    format = format or _detected(doc)
    composed: tuple[str, ...] = ()
    found_env: dict[str, str] = {}
    if needs_hydra(doc, overrides):
        found_env = searchpath_env(doc)
        for_hydra, plain = split_overrides(doc, overrides, found_env)
        doc, composed = compose(doc, for_hydra, found_env)
        format = format or _detected(doc)
        doc = apply_overrides(doc, plain, hydra_keys=format in FRAMEWORK_FORMATS)
    else:
        doc = apply_overrides(doc, overrides, hydra_keys=format in FRAMEWORK_FORMATS)
    spec = _parse(doc, format, site_gpus)
    launch = parse_launch(doc.root().get("launch"))
    if launch != spec.launch:
        spec = replace(spec, launch=launch)
    spec = _with_container_block(spec, parse_container_block(doc.root().get("container")))
    spec = with_services(spec, doc.root().get("services"), doc.root().get("slurm"))
    if found_env:
        spec = _with_found_env(spec, found_env)
    return (
        replace(spec, composed=composed + tuple(f"override {o}" for o in overrides)) if composed or overrides else spec
    )


def _command_format(doc: YamlDocument, format: str | None, driver: Sequence[str] | None) -> str | None:
    """The command format the config is in: stated (--format, `format:`), or, for a file with no placement
    of its own, the framework whose entry point the driver runs; None for the file formats."""
    declared = doc.data.get("format") if isinstance(doc.data, dict) else None
    stated = format or (declared.lower() if isinstance(declared, str) else None)
    if stated is not None:
        return stated if stated in COMMAND_FORMATS else None
    if _detected(doc) is not None:
        return None
    found = detect_command_format(driver_words(doc, driver))
    if found is None and (doc.data is None or (isinstance(doc.data, dict) and set(doc.data) <= BLOCK_KEYS)):
        from hpcplace.config.formats.entry_point import command_of, unknown_entry_point

        command = command_of(doc, driver)
        if command is not None:  # a command beside a file of hpcplace's blocks: it is what is not known
            raise unknown_entry_point(command, doc.path)
    return found


def _load_command_spec(
    name: str,
    doc: YamlDocument,
    driver: Sequence[str] | None,
    site_gpus: SiteGpus | None,
    overrides: Sequence[str],
) -> ExperimentSpec:
    """A command format's spec: the framework's driver starts every process, so the job runs in the Ray
    launch mode with that command as its driver; a launcher's command (torchrun, deepspeed) is planned as
    its processes, which the steps mode starts."""
    from hpcplace.config.launch import parse_launch

    spec = parse_command_spec(name, doc, driver, site_gpus)
    launch_view = doc.root().get("launch")
    mode = launch_view.get("mode") if launch_view is not None and isinstance(launch_view.value, dict) else None
    if COMMAND_FORMATS[name].mode == "steps":  # hpcplace starts each process: the command is no Ray driver
        if mode is not None and str(mode.value).strip().lower() != "steps":
            raise mode.error(
                f"the {name} format runs in the steps launch mode only (hpcplace starts each process as {name} would)",
                hint="remove launch.mode (or set it to steps)",
            )
        if launch_view is not None and isinstance(launch_view.value, dict):  # launch.driver is the input here
            launch_view = View(launch_view.doc, launch_view.path, {**launch_view.value, "driver": None})
        spec = replace(spec, launch=replace(parse_launch(launch_view), mode="steps"))
    else:
        launch = parse_launch(launch_view)
        if mode is not None and launch.mode != "ray":
            raise mode.error(
                f"the {name} format runs in the Ray launch mode only (the framework's driver starts every process)",
                hint="remove launch.mode (or set it to ray)",
            )
        # a format may name the part of the command that is the driver (the words after `ray job submit ... --`)
        command = spec.launch.driver or (tuple(driver) if driver else launch.driver)
        spec = replace(spec, launch=replace(launch, mode="ray", driver=command))
    spec = _with_container_block(spec, parse_container_block(doc.root().get("container")))
    spec = with_services(spec, doc.root().get("services"), doc.root().get("slurm"))
    return replace(spec, composed=spec.composed + tuple(f"override {o}" for o in overrides)) if overrides else spec


def _with_container_block(spec: ExperimentSpec, block: ContainerBlock | None) -> ExperimentSpec:
    """The `container:` block over what the format itself said (AReaL's scheduling_spec images): a node
    group the block gives any setting takes the block's container (or none); the others keep theirs."""
    from hpcplace.config.cluster import Cluster

    if block is None:
        return spec
    groups = spec.cluster.node_groups
    resolved = apply_container_block(block, [g.label for g in groups])
    notes = []
    changed = []
    for g in groups:
        if not block.job.values and g.label.lower() not in block.groups:
            changed.append(g)
            continue
        if g.container is not None and g.container != resolved[g.label]:
            notes.append(
                f"node group {g.label!r}: the container block's settings replace the {g.container.describe()} "
                f"the {spec.source_format} config names"
            )
        changed.append(replace(g, container=resolved[g.label]))
    return replace(spec, cluster=Cluster(tuple(changed)), notes=spec.notes + tuple(notes))


def _with_found_env(spec: ExperimentSpec, found_env: dict[str, str]) -> ExperimentSpec:
    """The framework composes the config again in the job: give its processes, and the Ray driver, the
    values composition used here (a value the config sets itself wins)."""
    from hpcplace.config.cluster import Cluster

    notes = tuple(
        f"{var} is not set: hydra.searchpath was composed with {var}={value} (the nearest folder above "
        "the config that fits it, as the framework's run script sets it); the job's processes get the "
        f"same value (export {var} to choose another)"
        for var, value in sorted(found_env.items())
    )
    groups = tuple(replace(g, env={**found_env, **g.env}) for g in spec.cluster.node_groups)
    return replace(
        spec,
        cluster=Cluster(groups),
        launch=replace(spec.launch, env={**found_env, **spec.launch.env}),
        notes=spec.notes + notes,
    )


def _detected(doc: YamlDocument) -> str | None:
    """The format the document's shape says, or None (_parse then says what is wrong with it)."""
    try:
        return detect_format(doc.data, doc.path).lower()
    except SpecError:
        return None


def _parse(doc: YamlDocument, format: str | None, site_gpus: SiteGpus | None) -> ExperimentSpec:
    try:
        fmt = (format or detect_format(doc.data, doc.path)).lower()
    except SpecError as exc:  # detection looks at the whole document: point at its start
        raise SpecError(exc.message, hint=exc.hint, location=exc.location or doc.location(())) from None
    if fmt == "native":
        from hpcplace.config.spec import parse_native

        return parse_native(doc)
    if fmt == "rlinf":
        from hpcplace.config.formats.rlinf import parse_rlinf

        return parse_rlinf(doc, site_gpus)
    if fmt == "roll":
        from hpcplace.config.formats.roll import parse_roll

        return parse_roll(doc, site_gpus)
    if fmt == "areal":
        from hpcplace.config.formats.areal import parse_areal

        return parse_areal(doc)
    raise SpecError(f"unknown format {fmt!r}", hint="one of: " + ", ".join(FORMATS))
