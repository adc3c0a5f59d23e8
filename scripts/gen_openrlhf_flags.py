#!/usr/bin/env python3
"""Regenerate hpcplace/config/formats/openrlhf_releases.json: every OpenRLHF release's own command-line flags,
read from the release itself. Rerun it when OpenRLHF publishes a release (docs/formats/openrlhf.md).

For each release from 0.9.0 on (PyPI's list, or the tags of an OpenRLHF git mirror with --git-dir), the script
takes the release's `openrlhf/cli/train_ppo_ray.py` and `openrlhf/cli/serve_rm.py` (from its PyPI wheel,
fetched with `pip download --no-deps`, or from the tag), reads their argparse declarations statically
(hpcplace/config/argparse_ast.py: nothing of the release is imported or run) and writes, per release, which
flag table each entry point has and the defaults of the flags placement reads (PLACEMENT_FLAGS of
hpcplace/config/formats/openrlhf.py, under the release's own spelling). Identical tables are stored once.

    PYTHONPATH=. python scripts/gen_openrlhf_flags.py                   # PyPI's releases
    PYTHONPATH=. python scripts/gen_openrlhf_flags.py --git-dir /path/to/OpenRLHF/.git
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from packaging.version import InvalidVersion, Version

from hpcplace.config.argparse_ast import argparse_flags
from hpcplace.config.flag_tables import literal_default, render, share, table
from hpcplace.config.formats.openrlhf import PLACEMENT_FLAGS
from hpcplace.config.formats.openrlhf_flags import DATA, OLDEST

ENTRY_POINTS = {"train_ppo_ray": "openrlhf/cli/train_ppo_ray.py", "serve_rm": "openrlhf/cli/serve_rm.py"}


def pypi_versions() -> list[str]:
    """The releases PyPI lists for openrlhf (`pip index versions`), oldest first."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "openrlhf"], capture_output=True, text=True, check=True
    ).stdout
    match = re.search(r"Available versions: (.*)", out)
    if match is None:
        raise SystemExit(f"pip index versions openrlhf printed no versions:\n{out}")
    return [v.strip() for v in match.group(1).split(",")]


def wheel_sources(version: str, folder: Path) -> dict[str, str]:
    """The release's entry point sources, from its PyPI wheel."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(folder)]
        + [f"openrlhf=={version}"],
        check=True,
    )
    wheels = [w for w in folder.glob("openrlhf-*.whl") if w.name.split("-")[1] == version]
    if len(wheels) != 1:
        raise SystemExit(f"openrlhf {version}: expected one wheel in {folder}, found {[w.name for w in wheels]}")
    out = {}
    with zipfile.ZipFile(wheels[0]) as wheel:
        for entry, suffix in ENTRY_POINTS.items():
            names = [n for n in wheel.namelist() if n.endswith(suffix)]
            if names:
                out[entry] = wheel.read(names[0]).decode("utf-8")
    return out


def git_versions(git_dir: Path) -> list[str]:
    tags = subprocess.run(["git", "--git-dir", str(git_dir), "tag"], capture_output=True, text=True, check=True)
    return [t.removeprefix("v") for t in tags.stdout.split() if t.startswith("v")]


def git_sources(git_dir: Path, version: str) -> dict[str, str]:
    out = {}
    for entry, path in ENTRY_POINTS.items():
        shown = subprocess.run(
            ["git", "--git-dir", str(git_dir), "show", f"v{version}:{path}"], capture_output=True, text=True
        )
        if shown.returncode == 0:
            out[entry] = shown.stdout
    return out


def defaults(source: str) -> dict[str, object]:
    """The defaults of the flags placement reads that the release declares, under its spelling (a flag it lacks,
    such as --max_images_per_prompt before 0.10.0, is left out: hpcplace reads it as unset)."""
    flags = argparse_flags(source)
    out: dict[str, object] = {}
    for new, old in PLACEMENT_FLAGS.items():
        name = new if new in flags else old
        if name in flags:
            out[name] = literal_default(name, flags[name])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--git-dir", type=Path, help="read the tags of this OpenRLHF git mirror instead of PyPI")
    parser.add_argument("--out", type=Path, default=DATA)
    args = parser.parse_args()
    versions = git_versions(args.git_dir) if args.git_dir else pypi_versions()
    chosen: list[str] = []
    for text in versions:
        try:
            parsed = Version(text)
        except InvalidVersion:
            continue
        if parsed >= Version(OLDEST) and not parsed.is_prerelease:
            chosen.append(text)
    chosen.sort(key=Version)
    tables: dict[str, dict[str, object]] = {}
    placement: dict[str, dict[str, object]] = {}
    releases: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for version in chosen:
            sources = git_sources(args.git_dir, version) if args.git_dir else wheel_sources(version, Path(tmp))
            if "train_ppo_ray" not in sources:
                raise SystemExit(f"openrlhf {version} has no {ENTRY_POINTS['train_ppo_ray']}")
            record: dict[str, object] = {}
            for entry, source in sources.items():
                record[entry] = share(tables, entry, version, dict(table(source)))
            record["defaults"] = share(placement, "defaults", version, defaults(sources["train_ppo_ray"]))
            record["train_ppo_ray_sha256"] = hashlib.sha256(sources["train_ppo_ray"].encode()).hexdigest()
            releases[version] = record
            print(
                f"openrlhf {version}: {', '.join(f'{k} {v}' for k, v in record.items() if k != 'train_ppo_ray_sha256')}"
            )
    origin = f"the tags of {args.git_dir}" if args.git_dir else "the PyPI wheels (pip download --no-deps)"
    about = (
        f"OpenRLHF's flags, release by release ({chosen[0]} to {chosen[-1]}), read from {origin} by "
        "scripts/gen_openrlhf_flags.py; do not edit, rerun it"
    )
    args.out.write_text(render({"releases": releases, "tables": tables, "defaults": placement}, about))
    print(f"wrote {args.out}: {len(releases)} releases, {len(tables)} flag tables, {len(placement)} default sets")


if __name__ == "__main__":
    main()
