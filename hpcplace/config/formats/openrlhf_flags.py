"""OpenRLHF's command-line flags, release by release: the data scripts/gen_openrlhf_flags.py reads from each
release's own `openrlhf/cli/train_ppo_ray.py` and `serve_rm.py` (its PyPI wheel) into openrlhf_releases.json.
A command is read with the flags of the release that runs it (the stated or installed version; else the newest
release read), so a flag is refused only where that release's argparse refuses it."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from hpcplace.config.formats.argv import Flag, Value
from hpcplace.config.formats.release_data import default_of, flag_of, release_at

DATA = Path(__file__).with_name("openrlhf_releases.json")
OLDEST = "0.9.0"  # the first release read (docs/formats/openrlhf.md)


@dataclass(frozen=True)
class Release:
    """One OpenRLHF release's flags: train_ppo_ray's and serve_rm's parsers, and the defaults of the flags
    placement reads (by the release's own names)."""

    version: Version
    train_ppo_ray: Mapping[str, Flag]
    serve_rm: Mapping[str, Flag]
    defaults: Mapping[str, Value | None]

    def has(self, name: str) -> bool:
        return name in self.train_ppo_ray

    def flags(self, entry: str) -> Mapping[str, Flag]:
        """The parser of entry point `entry` (train_ppo_ray or serve_rm)."""
        return self.train_ppo_ray if entry == "train_ppo_ray" else self.serve_rm


@functools.cache
def releases() -> tuple[Release, ...]:
    """Every release read, oldest first."""
    data = json.loads(DATA.read_text(encoding="utf-8"))
    tables = {key: {name: flag_of(row) for name, row in rows.items()} for key, rows in data["tables"].items()}
    defaults = {key: {n: default_of(v) for n, v in values.items()} for key, values in data["defaults"].items()}
    out = [
        Release(
            Version(version),
            tables[record["train_ppo_ray"]],
            tables.get(record.get("serve_rm", ""), {}),
            defaults[record["defaults"]],
        )
        for version, record in data["releases"].items()
    ]
    return tuple(sorted(out, key=lambda r: r.version))


def release_for(version: Version | None) -> Release:
    """The release whose flags a command of `version` is read with: that release, else the newest before it
    (a post/dev release reads as its base's); None: the newest release read."""
    return release_at(releases(), version)


def releases_with(name: str, entry: str = "train_ppo_ray") -> list[Version]:
    """The releases whose `entry` parser has flag `name`."""
    return [r.version for r in releases() if name in r.flags(entry)]
