"""What the release-command fixture writers share (tests/planner/openrlhf_release_commands.py,
tests/planner/slime_release_commands.py): a tag's example scripts from a git mirror, a command recorded once with
the releases it appears in, and the fixture file with the expected plans kept across a rerun."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

from tests.planner.script_commands import Extracted

Commands = dict[tuple[str, tuple[str, ...]], dict[str, object]]


def tag_scripts(git_dir: Path, tag: str, folder: str, *, top_only: bool = False) -> dict[str, str]:
    """The `*.sh` files under `folder` at `tag` (`top_only`: not in its subfolders), by path."""
    tar = subprocess.run(
        ["git", "--git-dir", str(git_dir), "archive", tag, folder], capture_output=True, check=True
    ).stdout
    out = {}
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        for member in archive.getmembers():
            inside = member.name.count("/") == folder.count("/") + 1
            if member.isfile() and member.name.endswith(".sh") and (inside or not top_only):
                data = archive.extractfile(member)
                assert data is not None
                out[member.name] = data.read().decode("utf-8", errors="replace")
    return out


def expected_plans(fixture: Path) -> dict[tuple[str, tuple[str, ...]], object]:
    """The hand-checked `expect` of each command already in the fixture."""
    old = json.loads(fixture.read_text()) if fixture.is_file() else {"commands": []}
    return {(c["script"], tuple(c["words"])): c.get("expect") for c in old["commands"]}


def record(
    commands: Commands, expect: dict[tuple[str, tuple[str, ...]], object], path: str, found: Extracted, release: str
) -> None:
    """Command `found` of script `path` seen in `release` (one record per distinct command)."""
    key = (path, found.words)
    entry = commands.setdefault(key, {"script": path, "line": found.line, "releases": [], "words": list(found.words)})
    releases_of = entry["releases"]
    assert isinstance(releases_of, list)
    releases_of.append(release)
    entry["expect"] = expect.get(key)


def write_fixture(fixture: Path, about: str, commands: Commands) -> None:
    lines = ",\n".join(json.dumps(c, separators=(",", ":")) for c in commands.values())
    fixture.parent.mkdir(parents=True, exist_ok=True)
    fixture.write_text(f'{{"about": {json.dumps(about)},\n"commands": [\n{lines}\n]}}\n')
