#!/usr/bin/env python3
"""Regenerate hpcplace/config/formats/slime_releases.json: every slime release's own command-line flags, read from
the release itself. Rerun it when slime tags a release (docs/formats/slime.md).

slime is not on PyPI (the `slime` there is another project), so the releases are the `v*` tags of a THUDM/slime git
mirror. For each, the script reads `slime/utils/arguments.py` and, where the release has it,
`slime/backends/sglang_utils/arguments.py` statically (hpcplace/config/argparse_ast.py: nothing of the release is
imported or run) and writes which flag table the release's parsers have, the defaults of the flags placement reads
(PLACEMENT_FLAGS of hpcplace/config/formats/slime_flags.py) and the SHA-256 of its placement code
(slime/ray/placement_group.py, slime/ray/rollout.py), so a change there shows in the diff. Identical tables are
stored once.

    PYTHONPATH=. python scripts/gen_slime_flags.py --git-dir /path/to/slime/.git
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
from pathlib import Path

from packaging.version import InvalidVersion, Version

from hpcplace.config.argparse_ast import argparse_flags
from hpcplace.config.flag_tables import literal_default, render, share, table
from hpcplace.config.formats.slime_flags import DATA, OLDEST, PLACEMENT_FLAGS

PARSERS = ("slime/utils/arguments.py", "slime/backends/sglang_utils/arguments.py")
PLACEMENT_CODE = ("slime/ray/placement_group.py", "slime/ray/rollout.py")


def show(git_dir: Path, tag: str, path: str) -> str | None:
    shown = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{tag}:{path}"], capture_output=True, text=True)
    return shown.stdout if shown.returncode == 0 else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--git-dir", type=Path, required=True, help="a THUDM/slime git mirror (its v* tags)")
    parser.add_argument("--out", type=Path, default=DATA)
    args = parser.parse_args()
    tags = subprocess.run(["git", "--git-dir", str(args.git_dir), "tag"], capture_output=True, text=True, check=True)
    chosen: list[tuple[Version, str]] = []
    for tag in tags.stdout.split():
        try:
            version = Version(tag.removeprefix("v"))
        except InvalidVersion:
            continue
        if version >= Version(OLDEST) and not version.is_prerelease:
            chosen.append((version, tag))
    chosen.sort()
    tables: dict[str, dict[str, object]] = {}
    placement: dict[str, dict[str, object]] = {}
    releases: dict[str, dict[str, object]] = {}
    for version, tag in chosen:
        sources = [s for s in (show(args.git_dir, tag, path) for path in PARSERS) if s is not None]
        if not sources:
            raise SystemExit(f"slime {tag} has no {PARSERS[0]}")
        rows: dict[str, object] = {}
        declared: dict[str, dict[str, object]] = {}
        for source in sources:
            rows.update(table(source))
            declared.update(argparse_flags(source))
        defaults = {name: literal_default(name, declared[name]) for name in PLACEMENT_FLAGS if name in declared}
        code = "".join(show(args.git_dir, tag, path) or "" for path in PLACEMENT_CODE)
        commit = subprocess.run(
            ["git", "--git-dir", str(args.git_dir), "rev-list", "-n1", tag], capture_output=True, text=True, check=True
        )
        record: dict[str, object] = {
            "flags": share(tables, "slime", str(version), dict(sorted(rows.items()))),
            "defaults": share(placement, "defaults", str(version), defaults),
            "commit": commit.stdout.strip(),
            "placement_sha256": hashlib.sha256(code.encode()).hexdigest(),
        }
        releases[str(version)] = record
        print(f"slime {version} ({tag}): flags {record['flags']}, defaults {record['defaults']}")
    about = (
        f"slime's flags, release by release ({chosen[0][0]} to {chosen[-1][0]}), read from the tags of a THUDM/slime "
        "git mirror by scripts/gen_slime_flags.py; do not edit, rerun it"
    )
    args.out.write_text(render({"releases": releases, "tables": tables, "defaults": placement}, about))
    print(f"wrote {args.out}: {len(releases)} releases, {len(tables)} flag tables, {len(placement)} default sets")


if __name__ == "__main__":
    main()
