"""Which version of a framework will run a config, and the rules that changed between versions.

A framework's placement rules change between releases (AReaL 1.0.3 stopped choosing a backend for bare
allocation dimensions), so a config is planned as the version that will run it does:

1. stated: `hpcplace: {framework_version: "1.0.2"}` in the config (AReaL: in the file beside the AReaL
   file that carries hpcplace's blocks, see docs/formats/areal.md), or on the command line as the
   override `hpcplace.framework_version=1.0.2`;
2. else installed: the framework's distribution in the environment that runs hpcplace (normally the
   driver's venv or image), read with importlib.metadata;
3. else None: today's rules (the newest release hpcplace knows), with no warning.

A stated version wins over the installed one (a note says when they differ). When the job runs in a
container image, the host's installed version may not be the one that runs: a note says so.

How a format uses it (the other formats do the same with their own gates)::

    from hpcplace.config.framework_version import VersionGate, resolve_version

    EXPLICIT_BACKEND = VersionGate(
        "areal", "1.0.3", "an allocation must name its backend (no auto-backend)",
        "inclusionAI/AReaL 93b572d0 (#1044), first released in v1.0.3",
    )

    version = resolve_version("areal", root, notes)  # root: the document's top-level View
    if EXPLICIT_BACKEND.applies(version):   # the new rule (also when version is None)
        refuse(...)
    else:                                    # the old rule, with a warning naming the gate
        notes.append(EXPLICIT_BACKEND.warning(version, "write sglang:d4 ..."))

Versions are PEP 440 (`packaging.version`, which hydra-core already requires); a malformed stated
version is a located SpecError.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from packaging.version import InvalidVersion, Version

from hpcplace.config.yaml_source import View
from hpcplace.errors import SourceLocation, SpecError

KEY = "framework_version"  # in hpcplace's own `hpcplace:` block, every format


@dataclass(frozen=True)
class Framework:
    """A framework hpcplace reads: its name in messages, and how to find its installed distribution
    (`marker`: a file the real distribution installs, so an unrelated package of the same name on PyPI,
    such as `slime`, is not taken for it)."""

    name: str
    distribution: str
    marker: str
    oldest: str | None = None  # the oldest version whose rules hpcplace knows (older ones are refused)
    oldest_why: str = ""  # what differs before `oldest`, with the upstream commit
    # The version whose placement code hpcplace's rules follow (its tests run against it); an older one
    # gets a plan warning naming what changed since (`follows_why`), where no gate says more.
    follows: str | None = None
    follows_why: str = ""


FRAMEWORKS: dict[str, Framework] = {
    "areal": Framework(
        "AReaL",
        "areal",
        "areal/api/alloc_mode.py",
        "0.4.1",
        "its allocation grammar was another (only inference+training, `sglang.d4` with a dot, no names, "
        "`actor.backend` a bare backend name); AReaL 0.4.1 replaced it: inclusionAI/AReaL cd0003db0, "
        "PR #565 (2025-11-13)",
    ),
    "rlinf": Framework(
        "RLinf",
        "rlinf",
        "rlinf/scheduler/placement/placement.py",
        follows="0.3.0",
        follows_why="RLinf changed its placement code in 0.2.0 (048c5a426, PR #641: heterogeneous node groups "
        "and hardware placement) and 0.3.0 (5d29bfd2f, PR #842: the multi-agent and evaluation placement "
        "classes); 0.3.0 through 0.4.0.dev (a3816b596) place alike",
    ),
    "roll": Framework("ROLL", "roll", "roll/distributed/scheduler/resource_manager.py"),
    "verl": Framework("verl", "verl", "verl/single_controller/ray/base.py"),
    "nemo_rl": Framework("NeMo-RL", "nemo-rl", "nemo_rl/distributed/virtual_cluster.py"),
    "openrlhf": Framework(
        "OpenRLHF",
        "openrlhf",
        "openrlhf/trainer/ray/launcher.py",
        "0.9.0",
        "hpcplace has not read its flags: scripts/gen_openrlhf_flags.py reads each release's own train_ppo_ray.py "
        "from 0.9.0 (OpenRLHF/OpenRLHF 06ab51e7, 2025-10-31) on",
    ),
    "slime": Framework("slime", "slime", "slime/ray/placement_group.py"),
}


@dataclass(frozen=True)
class FrameworkVersion:
    """The version that will run the config, and where hpcplace learnt it."""

    framework: str  # a key of FRAMEWORKS
    version: Version
    source: Literal["stated", "installed"]
    location: SourceLocation | None = None  # where it was stated

    def describe(self) -> str:
        """`AReaL 1.0.2 (stated at job.yaml:4:22)` / `AReaL 1.0.4 (installed: areal 1.0.4)`."""
        fw = FRAMEWORKS[self.framework]
        where = (
            f"stated at {self.location}" if self.source == "stated" else f"installed: {fw.distribution} {self.version}"
        )
        return f"{fw.name} {self.version} ({where})"


@dataclass(frozen=True)
class PlannedVersion:
    """What plan.json records (`source.framework_version`) of the framework version a plan was made for:
    `version` and how hpcplace knew it (`stated`, `installed`, or `newest`: none known, so the newest release
    whose data hpcplace holds), and `read_as`, the release whose rules were read when not that version."""

    version: str
    source: str
    read_as: str | None = None

    @staticmethod
    def of(version: FrameworkVersion | None) -> PlannedVersion | None:
        return None if version is None else PlannedVersion(str(version.version), version.source)

    def to_json(self) -> dict[str, str]:
        return {"version": self.version, "source": self.source, **({"read_as": self.read_as} if self.read_as else {})}

    @staticmethod
    def from_json(data: dict[str, str] | None) -> PlannedVersion | None:
        return None if data is None else PlannedVersion(data["version"], data["source"], data.get("read_as"))


@dataclass(frozen=True)
class VersionGate:
    """Rule `change` holds from framework version `since` on; older versions follow the old rule.
    `upstream` names the commit/PR and the first release carrying it, so a reader can check it."""

    framework: str  # a key of FRAMEWORKS
    since: str  # PEP 440: the first release with the new rule
    change: str
    upstream: str

    def __post_init__(self) -> None:  # a mistyped gate fails at import, not in a user's plan
        if self.framework not in FRAMEWORKS:
            raise ValueError(f"VersionGate for unknown framework {self.framework!r}: one of {sorted(FRAMEWORKS)}")
        Version(self.since)

    @property
    def since_version(self) -> Version:
        return Version(self.since)

    def applies(self, version: FrameworkVersion | None) -> bool:
        """True when the new rule holds: no version known (today's rules) or `since` or later. A pre- or
        dev release of `since` counts as before it (it reports that version before the release's rules
        are final; state the version to decide)."""
        return version is None or version.version >= self.since_version

    def warning(self, version: FrameworkVersion, fix: str) -> str:
        """A plan warning for a config planned by the old rule: newer releases refuse or change it."""
        fw = FRAMEWORKS[self.framework].name
        return f"planned as {version.describe()}: {fw} >= {self.since} changed this ({self.change}; {self.upstream}); {fix}"

    def hint(self, fix: str) -> str:
        """The hint of a refusal by the new rule: an older release accepted it, and how to say so."""
        fw = FRAMEWORKS[self.framework]
        older = _previous(self.since_version)
        return (
            f"{fix}; {fw.name} before {self.since} accepted it ({self.upstream}): if {older} or older runs "
            f'this config, state it: `hpcplace: {{{KEY}: "{older}"}}` (or the override '
            f"hpcplace.{KEY}={older})"
        )


# The gates of the formats hpcplace has read longest (docs/formats/versions.md has the table; a format
# added later may keep its own gates in its module, as VersionGate constants, and list them there).
_AREAL_1044 = "inclusionAI/AReaL 93b572d0, PR #1044 (2026-03-24), first released in v1.0.3 (2026-04-16)"
AREAL_EXPLICIT_BACKEND = VersionGate(
    "areal",
    "1.0.3",
    "an allocation must name its backend; bare dimensions such as d4p1t1 were a training allocation "
    "whose backend AReaL chose: megatron when p or e > 1, else fsdp",
    _AREAL_1044,
)
AREAL_ENGINE_BACKEND = VersionGate(
    "areal",
    "1.0.3",
    "each engine names its backend and parallelism in its own `backend:` field (actor.backend, "
    "rollout.backend, ...); allocation_mode is kept only for AReaL's SPMD launchers",
    _AREAL_1044,
)
AREAL_ARCHON = VersionGate(
    "areal",
    "0.5.2",
    "the archon training backend (archon:d2, archon:(attn:..|ffn:..))",
    "inclusionAI/AReaL 3de273d1e, PR #799 (2026-01-07), first released in v0.5.2",
)
AREAL_SCHEDULING = VersionGate(
    "areal",
    "0.5.0",
    "each engine's scheduling_strategy (colocation/separation) and scheduling_spec (image, mount, env_vars)",
    "inclusionAI/AReaL b3bd51476, PR #610 (2025-11-24), first released in v0.5.0",
)
GATES: dict[str, tuple[VersionGate, ...]] = {
    "areal": (AREAL_SCHEDULING, AREAL_ARCHON, AREAL_EXPLICIT_BACKEND, AREAL_ENGINE_BACKEND)
}


def _previous(version: Version) -> str:
    """A readable "the release before": 1.0.3 -> 1.0.2, 0.4.0 -> '<0.4.0' when it cannot tell."""
    parts = list(version.release)
    if parts and parts[-1] > 0:
        parts[-1] -= 1
        return ".".join(map(str, parts))
    return f"<{version}"


# a framework -> its installed version, or None when not installed
InstalledLookup = Callable[[Framework], str | None]


@functools.lru_cache(maxsize=32)  # a lookup scans sys.path (~6 ms); installations do not change mid-run
def installed_version(framework: Framework) -> str | None:
    """The version of `framework`'s distribution installed where hpcplace runs, or None: not installed,
    or a package of the same name without the framework's marker file (found through the import
    system, so editable installs of a checkout count)."""
    try:
        version = importlib.metadata.version(framework.distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    package, _, rest = framework.marker.partition("/")
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    if not any((Path(location) / rest).is_file() for location in locations):
        return None
    return version


def parse_version(text: str, framework: str, view: View | None = None) -> Version:
    """A PEP 440 version, or a SpecError at `view` naming the value and what is allowed."""
    try:
        return Version(text.strip())
    except InvalidVersion:
        message = f"{FRAMEWORKS[framework].name} version {text!r} is not a version"
        hint = 'write a release number as PyPI spells it, e.g. "1.0.2", "0.3.0", "1.0.0rc1", "1.0.4.post1"'
        if view is not None:
            raise view.error(message, hint=hint) from None
        raise SpecError(message, hint=hint) from None


def stated_view(root: View | None) -> View | None:
    """`hpcplace.framework_version` of the document, or None when not stated (or no document)."""
    if root is None:
        return None
    block = root.get("hpcplace")
    if block is None or not isinstance(block.deref().value, dict):
        return None
    view = block.deref().get(KEY)
    return None if view is None or view.deref().value is None else view.deref()


def resolve_version(
    framework: str,
    root: View | None,
    notes: list[str],
    *,
    installed: InstalledLookup | None = None,
) -> FrameworkVersion | None:
    """The version that will run the config: stated (`hpcplace.framework_version` of `root`, the
    document's top level; None for a config that is only a command line) over installed over None
    (today's rules). `notes` gets a line when a stated version differs from the installed one, or when
    the version is older than the one the format's rules follow. A stated version that is not PEP 440,
    or any version older than the framework's `oldest`, is a SpecError (located where stated).
    `installed` defaults to reading the environment (installed_version); tests pass their own."""
    fw = FRAMEWORKS[framework]
    lookup = installed if installed is not None else installed_version
    view = stated_view(root)
    found = lookup(fw)
    resolved = _resolve(fw, framework, view, found, notes)
    if resolved is not None and fw.oldest is not None and resolved.version < Version(fw.oldest):
        message = (
            f"{resolved.describe()}: hpcplace plans {fw.name} {fw.oldest} and later; before {fw.oldest} {fw.oldest_why}"
        )
        hint = f'upgrade {fw.name}, or state the version the job runs: `hpcplace: {{{KEY}: "X.Y.Z"}}`'
        if view is not None:
            raise view.error(message, hint=hint)
        raise SpecError(message, hint=hint, location=root.location() if root is not None else None)
    if resolved is not None and fw.follows is not None and resolved.version < Version(fw.follows):
        notes.append(
            f"planned by {fw.name} {fw.follows}'s placement rules (hpcplace is checked against {fw.distribution}"
            f"=={fw.follows}), not those of {resolved.describe()}: {fw.follows_why}"
        )
    return resolved


def _resolve(
    fw: Framework, framework: str, view: View | None, found: str | None, notes: list[str]
) -> FrameworkVersion | None:
    if view is not None:
        value = view.value
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            shown = repr(value) if not isinstance(value, float) else str(value)
            raise view.error(
                f"hpcplace.{KEY} must be a version string, got {shown}",
                hint=f'quote it: {KEY}: "1.0.2" (YAML reads 1.10 as the number 1.1)',
            )
        version = parse_version(str(value), framework, view)
        if found is not None and _same(found, version) is False:
            notes.append(
                f"{fw.name} {version} stated at {view.location()} is planned; the installed {fw.distribution} "
                f"here is {found} (the job must run {version})"
            )
        return FrameworkVersion(framework, version, "stated", view.location())
    if found is None:
        return None
    try:
        return FrameworkVersion(framework, Version(found), "installed")
    except InvalidVersion:
        notes.append(
            f"the installed {fw.distribution} reports version {found!r}, which is not a PEP 440 version: "
            f"planned by today's {fw.name} rules (state hpcplace.{KEY} to choose)"
        )
        return None


def _same(found: str, version: Version) -> bool | None:
    try:
        return Version(found) == version
    except InvalidVersion:
        return None


def container_note(version: FrameworkVersion | None, image: str, gates: Iterable[VersionGate]) -> str | None:
    """A version read from the host's installation is not necessarily the one inside the job's image:
    said when that version's rules differ from today's (some of `gates` does not apply to it)."""
    if version is None or version.source != "installed" or all(gate.applies(version) for gate in gates):
        return None
    fw = FRAMEWORKS[version.framework]
    return (
        f"planned by the rules of {fw.name} {version.version}, installed where hpcplace runs; the job runs in "
        f'{image}, whose {fw.distribution} may differ: state it with `hpcplace: {{{KEY}: "X.Y.Z"}}`'
    )


__all__ = [
    "AREAL_ARCHON",
    "AREAL_ENGINE_BACKEND",
    "AREAL_EXPLICIT_BACKEND",
    "AREAL_SCHEDULING",
    "FRAMEWORKS",
    "GATES",
    "KEY",
    "Framework",
    "FrameworkVersion",
    "PlannedVersion",
    "VersionGate",
    "container_note",
    "installed_version",
    "parse_version",
    "resolve_version",
    "stated_view",
]
