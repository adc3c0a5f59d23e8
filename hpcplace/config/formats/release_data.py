"""Reading a framework's flags release by release (openrlhf_flags.py, slime_flags.py): the rows and defaults the
generators in scripts/ store as JSON, and which release's flags a command of a given version is read with."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from packaging.version import Version

from hpcplace.config.formats.argv import Flag, Value
from hpcplace.config.framework_version import KEY, FrameworkVersion, PlannedVersion


def flag_of(row: list[object]) -> Flag:
    """A stored row [kind, nargs, choices] as the Flag argv.parse_flags reads."""
    kind, nargs, choices = row
    assert isinstance(kind, str) and (nargs is None or isinstance(nargs, (int, str)))
    assert choices is None or isinstance(choices, list)
    return Flag(kind, nargs, None if choices is None else tuple(str(c) for c in choices))


def default_of(value: object) -> Value | None:
    """A stored default as parse_flags' values are (a list is a tuple)."""
    if isinstance(value, list):
        return tuple(value)
    assert value is None or isinstance(value, (bool, int, float, str))
    return value


class _Versioned(Protocol):
    @property
    def version(self) -> Version: ...


R = TypeVar("R", bound=_Versioned)


def release_at(known: Sequence[R], version: Version | None) -> R:
    """The release (of `known`, oldest first) a command of `version` is read with: that release, else the newest
    before it (a post/dev release reads as its base's); None: the newest release read."""
    if version is None:
        return known[-1]
    older = [r for r in known if r.version <= version]
    return older[-1] if older else known[0]


def note_release(
    framework: str, script: str, read_as: Version, newest: Version, version: FrameworkVersion | None, notes: list[str]
) -> None:
    """Say which release's flags are read, where it is not the version that runs the command."""
    if version is None:
        notes.append(
            f"no {framework} installed or stated: the command is read as {framework} {read_as}, the newest release "
            f'hpcplace has read (state the one that runs it: `hpcplace: {{{KEY}: "X.Y.Z"}}`)'
        )
    elif read_as != version.version:
        notes.append(
            f"{version.describe()} is read with the flags of {framework} {read_as}, the newest release at or "
            "before it that hpcplace has read"
            + (f" (newer than {newest}: rerun {script})" if version.version > newest else "")
        )


def planned_version(version: FrameworkVersion | None, read_as: Version) -> PlannedVersion:
    """The version plan.json records: the one that runs (or, none known, the newest release read), and the
    release whose flags were read when that is another."""
    if version is None:
        return PlannedVersion(str(read_as), "newest")
    return PlannedVersion(str(version.version), version.source, None if read_as == version.version else str(read_as))
