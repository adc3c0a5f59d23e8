"""The image a node group's processes run in: the `container:` block every input format accepts.

    container:                       # job-wide; each node group may override any key
      runtime: apptainer             # apptainer | singularity | pyxis | oci (Slurm's --container) | none
      image: /shared/images/verl.sif # apptainer: a file or directory image, or docker:// oras:// library://;
                                     # pyxis: an enroot reference ([USER@][REGISTRY#]IMAGE[:TAG]) or a .sqsh file;
                                     # oci: an OCI bundle directory
      mounts: [/data:/data:ro, /scratch]   # SRC[:DST[:ro|rw]], absolute paths
      workdir: /workspace            # where the programs start inside the image (default: the submit directory)
      env: {NCCL_DEBUG: INFO}        # set inside the container, after the image's own ENV
      args: [--writable-tmpfs]       # the runtime's own extra flags (apptainer exec's, or pyxis's srun flags)
      python: python3                # the image's Python that runs hpcplace's (stdlib-only) shim
      node_groups:
        robot: {image: /shared/images/ros.sif}
        cpu: {runtime: none}

A container is a fact of a node group, like its partition: the plan records it (plan.json), the slurm stage
lowers it (hpcplace.slurm.container_launch), the shim never asks which runtime it runs in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hpcplace.config.safe_words import check_env_name, check_env_value, srun_argv_problem
from hpcplace.config.yaml_source import View, did_you_mean, yaml_words
from hpcplace.errors import SourceLocation, SpecError

RUNTIMES = ("apptainer", "singularity", "pyxis", "oci", "none")
APPTAINER_LIKE = ("apptainer", "singularity")
KEYS = frozenset({"runtime", "image", "mounts", "workdir", "env", "args", "python"})
BLOCK_KEYS = KEYS | {"node_groups"}
# Image references Apptainer pulls itself (every node pulls or reads its cache): anything else is a path.
APPTAINER_SCHEMES = ("docker://", "docker-archive:", "oras://", "library://", "shub://", "http://", "https://")
DEFAULT_PYTHON = "python3"
# pyxis options hpcplace gives every step of a pyxis group (hpcplace.slurm.container_launch); pyxis refuses
# each given twice with different values (NVIDIA/pyxis args.c: "--container-image specified multiple times")
PYXIS_OWN_OPTIONS = frozenset({"--container-image", "--container-workdir", "--container-name"})
_MOUNT_OPTIONS = frozenset({"ro", "rw"})
# pyxis/enroot: [USER@][REGISTRY#]IMAGE[:TAG] (docs of pyxis's --container-image); no spaces, no commas
_ENROOT_REF = re.compile(r"^(docker://)?([^@/#\s,]+@)?([^#\s,]+#)?[A-Za-z0-9][A-Za-z0-9._/:@-]*$")


@dataclass(frozen=True)
class Mount:
    """A bind mount: a node path seen at `target` inside the image."""

    source: str
    target: str
    read_only: bool = False

    def text(self) -> str:
        """`SRC:DST[:ro]`, the spelling Apptainer's --bind and pyxis's --container-mounts share."""
        return f"{self.source}:{self.target}" + (":ro" if self.read_only else "")


@dataclass(frozen=True)
class Container:
    """A node group's image and how to enter it."""

    runtime: str  # one of RUNTIMES but "none" (a group without a container has none)
    image: str
    mounts: tuple[Mount, ...] = ()
    workdir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    python: str = DEFAULT_PYTHON
    location: SourceLocation | None = field(default=None, compare=False)

    @property
    def is_apptainer(self) -> bool:
        return self.runtime in APPTAINER_LIKE

    @property
    def image_is_path(self) -> bool:
        """Whether the image is a file or directory on the nodes (else a reference the runtime pulls)."""
        if self.is_apptainer:
            return not self.image.startswith(APPTAINER_SCHEMES)
        return self.runtime == "oci" or self.image.startswith("/")

    def describe(self) -> str:
        return f"{self.runtime} image {self.image}"

    def to_json(self) -> dict[str, object]:
        return {
            "runtime": self.runtime,
            "image": self.image,
            "mounts": [m.text() for m in self.mounts],
            "workdir": self.workdir,
            "env": dict(sorted(self.env.items())),
            "args": list(self.args),
            "python": self.python,
        }


def container_from_json(data: object) -> Container | None:
    """plan.json's node group "container" record back into a Container (absent: none)."""
    if not isinstance(data, dict):
        return None
    return Container(
        str(data["runtime"]),
        str(data["image"]),
        tuple(parse_mount(str(m)) for m in data.get("mounts") or ()),
        data.get("workdir"),
        {str(k): str(v) for k, v in (data.get("env") or {}).items()},
        tuple(str(a) for a in data.get("args") or ()),
        str(data.get("python") or DEFAULT_PYTHON),
    )


# ------------------------------------------------------------------------------------------------
# checking values (each raises SpecError with what is allowed; callers add the location)


def parse_mount(text: str) -> Mount:
    """`SRC`, `SRC:DST` or `SRC:DST:ro|rw`, absolute paths, no commas (both runtimes join mounts with them)."""
    hint = "write SRC[:DST[:ro|rw]] with absolute paths, e.g. /data:/data:ro"
    if not text or "," in text or any(not c.isprintable() for c in text):
        raise SpecError(f"malformed mount {text!r}: empty, or holds a comma or a control character", hint=hint)
    parts = text.split(":")
    if len(parts) > 3:
        raise SpecError(f"malformed mount {text!r}: more than SRC:DST:OPTIONS", hint=hint)
    source = parts[0]
    target = parts[1] if len(parts) > 1 else source
    option = parts[2] if len(parts) > 2 else "rw"
    for what, path in (("source", source), ("target", target)):
        if not path.startswith("/"):
            raise SpecError(f"malformed mount {text!r}: the {what} {path!r} is not an absolute path", hint=hint)
    if option not in _MOUNT_OPTIONS:
        raise SpecError(f"malformed mount {text!r}: unknown option {option!r}", hint="options: ro, rw")
    return Mount(source, target, option == "ro")


def check_image(runtime: str, image: str) -> str:
    """The image for `runtime`, or SpecError: a path must be absolute (the nodes resolve it, not this
    directory), a reference must be one the runtime pulls."""
    if not image or any(not c.isprintable() for c in image) or image != image.strip():
        raise SpecError(f"container image {image!r} is empty or holds spaces or control characters at its ends")
    if runtime in APPTAINER_LIKE:
        if image.startswith(APPTAINER_SCHEMES) or image.startswith("/"):
            return image
        if "://" in image:
            raise SpecError(
                f"container image {image!r}: {runtime} does not pull {image.split('://')[0]}:// references",
                hint="pull it into a file first, or use one of: " + ", ".join(APPTAINER_SCHEMES),
            )
        raise SpecError(
            f"container image {image!r} is a relative path: every node must find the file, whatever directory "
            "hpcplace ran in",
            hint="give the absolute path of the image (.sif or a sandbox directory) on storage the nodes share, "
            "or a docker:// reference",
        )
    if runtime == "oci":
        if not image.startswith("/"):
            raise SpecError(
                f"container image {image!r}: Slurm's --container takes the absolute path of an OCI bundle "
                "directory (config.json and rootfs/)",
                hint="give the bundle's absolute path on storage the nodes share",
            )
        return image
    # pyxis: a squashfs file (absolute path) or an enroot reference
    if image.startswith(("./", "../")) or (image.endswith((".sqsh", ".squashfs")) and not image.startswith("/")):
        raise SpecError(
            f"container image {image!r} is a relative path: pyxis needs the squashfs file's absolute path",
            hint="give the absolute path, or a registry reference such as nvcr.io#nvidia/pytorch:25.01-py3",
        )
    if not image.startswith("/") and not _ENROOT_REF.match(image):
        raise SpecError(
            f"container image {image!r} is not an enroot image reference",
            hint="write [USER@][REGISTRY#]IMAGE[:TAG], e.g. nvcr.io#nvidia/pytorch:25.01-py3, or a .sqsh file's path",
        )
    return image


def check_args(runtime: str, args: Sequence[str]) -> tuple[str, ...]:
    """The runtime's own extra flags: options only (a word not starting with `-` would become the
    image or the program), none for Slurm's --container (srun has no further container options)."""
    if args and runtime == "oci":
        raise SpecError(
            "container.args: Slurm's --container takes no extra flags (the bundle's config.json says everything)",
            hint="edit the bundle's config.json, or remove args",
        )
    for arg in args:
        if not arg.startswith("-") or any(not c.isprintable() for c in arg):
            raise SpecError(
                f"container.args: {arg!r} is not an option of {runtime}",
                hint="give flags only, values joined with '=': e.g. [--writable-tmpfs, --bind=/opt/x]",
            )
    problem = srun_argv_problem(list(args), program_first=False) if args else None
    if problem is not None:
        raise SpecError(f"container.args: {problem}")
    if runtime == "pyxis":
        for arg in args:
            if not arg.startswith(("--container-", "--no-container-")):
                raise SpecError(
                    f"container.args: {arg!r} is not one of pyxis's srun options (--container-*, --no-container-*)",
                    hint="e.g. --container-writable, --container-remap-root, --no-container-mount-home",
                )
            if arg.split("=", 1)[0] in PYXIS_OWN_OPTIONS:
                raise SpecError(
                    f"container.args: {arg!r} is an option hpcplace gives pyxis itself (pyxis fails a step that "
                    f"gives it twice with different values: '{arg.split('=', 1)[0]} specified multiple times')",
                    hint="set container.image or container.workdir instead; the container's name is hpcplace's "
                    "(hpcplace-JOBID)",
                )
    return tuple(args)


# ------------------------------------------------------------------------------------------------
# the `container:` block


@dataclass(frozen=True)
class ContainerSettings:
    """One level of the block (the job's, or a node group's): only the keys it gives, and where."""

    values: Mapping[str, Any]
    locations: Mapping[str, SourceLocation] = field(default_factory=dict)
    location: SourceLocation | None = None


NO_SETTINGS = ContainerSettings({})


@dataclass(frozen=True)
class ContainerBlock:
    """The job-wide settings and each node group's (keyed by lower-cased label)."""

    job: ContainerSettings
    groups: Mapping[str, tuple[str, ContainerSettings, View]]  # lower label -> (as written, settings, its view)

    def for_group(self, label: str) -> Container | None:
        own = self.groups[label.lower()][1] if label.lower() in self.groups else NO_SETTINGS
        return resolve(self.job, own)


def _settings(view: View, where: str) -> ContainerSettings:
    if not isinstance(view.value, dict):
        raise view.error(f"{where} must be a mapping", hint="e.g. {runtime: apptainer, image: /shared/verl.sif}")
    values: dict[str, Any] = {}
    locations: dict[str, SourceLocation] = {}
    for key, child in view.items():
        if key in KEYS and child.value is not None:
            try:
                values[key] = _value(key, child)
            except SpecError as exc:
                raise exc if exc.location else child.error(exc.message, hint=exc.hint) from None
            locations[key] = child.location()
    return ContainerSettings(values, locations, view.location())


def _value(key: str, view: View) -> Any:
    if key == "runtime":
        runtime = view.str().strip().lower()
        if runtime not in RUNTIMES:
            raise SpecError(
                f"unknown container runtime {view.value!r}" + did_you_mean(runtime, RUNTIMES),
                hint="one of: " + ", ".join(RUNTIMES),
            )
        return runtime
    if key in ("image", "python", "workdir"):
        text = view.str()
        if key == "workdir" and not text.startswith("/"):
            raise SpecError(f"container.workdir {text!r} is not an absolute path (a directory inside the image)")
        if key == "python" and any(c.isspace() or not c.isprintable() for c in text):
            raise SpecError(f"container.python {text!r} is not a program name or path")
        return text
    if key == "mounts":
        if isinstance(view.value, str):  # AReaL's spelling: one string, comma-separated
            return tuple(parse_mount(item.strip()) for item in view.value.split(","))
        mounts = []
        for child in view.elements():
            try:
                mounts.append(parse_mount(child.str().strip()))
            except SpecError as exc:
                raise exc if exc.location else child.error(exc.message, hint=exc.hint) from None
        return tuple(mounts)
    if key == "env":
        env = view.str_map()
        for name, value in env.items():
            check_env_name(name, what="container.env")
            check_env_value(name, value, what="container.env")
        return env
    return tuple(yaml_words(view, "container.args"))  # args


def resolve(job: ContainerSettings, own: ContainerSettings) -> Container | None:
    """A node group's container: its own keys over the job's (env merged, the group's winning; a group of
    another runtime does not inherit the job's `args`, an oci group not its `mounts`), or None
    (no runtime anywhere, or `runtime: none`). Raises SpecError, at the key that gave the bad value."""
    inherited = dict(job.values)
    if own.values.get("runtime", job.values.get("runtime")) != job.values.get("runtime"):
        inherited.pop("args", None)  # the job's runtime's own flags mean nothing to the group's runtime
    if own.values.get("runtime") == "oci":
        inherited.pop("mounts", None)  # the bundle's config.json lists its mounts
    values = {**inherited, **own.values}
    if "env" in job.values and "env" in own.values:
        values["env"] = {**job.values["env"], **own.values["env"]}

    def where(key: str) -> SourceLocation | None:
        for level in (own, job):
            if key in level.locations:
                return level.locations[key]
        return own.location or job.location

    runtime = values.get("runtime")
    if runtime is None and "image" in values:
        raise SpecError(
            f"container image {values['image']!r} names no runtime",
            location=where("image"),
            hint="add runtime: apptainer (or singularity, pyxis, oci)",
        )
    if runtime in (None, "none"):
        return None
    if "image" not in values:
        raise SpecError(
            f"container runtime {runtime} without an image",
            location=where("runtime"),
            hint="add image: ... (an absolute path or a registry reference)",
        )
    try:
        image = check_image(runtime, values["image"])
    except SpecError as exc:
        raise SpecError(exc.message, location=where("image"), hint=exc.hint) from None
    try:
        args = check_args(runtime, values.get("args", ()))
    except SpecError as exc:
        raise SpecError(exc.message, location=where("args"), hint=exc.hint) from None
    if runtime == "oci" and values.get("mounts"):
        raise SpecError(
            "container.mounts: Slurm's --container takes no bind mounts (the bundle's config.json lists them)",
            location=where("mounts"),
            hint="add them to the bundle's config.json (its mounts), or remove mounts",
        )
    return Container(
        runtime,
        image,
        values.get("mounts", ()),
        values.get("workdir"),
        dict(values.get("env", {})),
        args,
        values.get("python", DEFAULT_PYTHON),
        own.location or job.location,
    )


def parse_container_block(view: View | None) -> ContainerBlock | None:
    """The top-level `container:` block (absent or empty: None)."""
    if view is None or view.value is None:
        return None
    if not isinstance(view.value, dict):
        raise view.error("container must be a mapping", hint="e.g. container: {runtime: apptainer, image: /x.sif}")
    view.check_keys(BLOCK_KEYS)
    job = _settings(view, "container")
    groups: dict[str, tuple[str, ContainerSettings, View]] = {}
    node_groups = view.get("node_groups")
    if node_groups is not None and node_groups.value is not None:
        if not isinstance(node_groups.value, dict):
            raise node_groups.error("container.node_groups maps node group labels to container settings")
        for label, child in node_groups.items():
            if isinstance(child.value, dict):
                child.check_keys(KEYS)
            groups[str(label).lower()] = (str(label), _settings(child, f"container.node_groups.{label}"), child)
    return ContainerBlock(job, groups)


def apply_container_block(block: ContainerBlock, labels: Sequence[str]) -> dict[str, Container | None]:
    """Per node group label, its container; an override naming no node group of the cluster is an error."""
    known = {label.lower() for label in labels}
    for lower, (label, _, view) in block.groups.items():
        if lower not in known:
            message = f"container.node_groups: {label!r} is not a node group" + did_you_mean(label, labels)
            hint = "node groups: " + ", ".join(labels)
            raise view.key_error(message, hint=hint)
    return {label: block.for_group(label) for label in labels}
