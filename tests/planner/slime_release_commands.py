"""slime's own `train.py` / `train_async.py` commands, release by release: the `scripts/*.sh` of each release tag read
without a shell (tests/planner/script_commands.py) into tests/fixtures/slime/release_commands.json, which
tests/planner/test_slime_releases.py plans as that release. slime is not on PyPI, so the scripts come from the tags
of a THUDM/slime git mirror:

    PYTHONPATH=. python -m tests.planner.slime_release_commands /path/to/slime.git

A command the same in several releases is stored once with the list of its releases. The expected plan of each
(`expect`: world size and node ranks per component on 8-GPU nodes, nodes, collocated components) is kept across a
rerun, so a new command's has to be added by hand, after reading its script."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from packaging.version import Version

from hpcplace.config.formats.slime_flags import OLDEST, PLACEMENT_FLAGS
from tests.planner.release_fixtures import Commands, expected_plans, record, tag_scripts, write_fixture
from tests.planner.script_commands import extract

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "slime" / "release_commands.json"
ENTRY = re.compile(r"(^|.*/)train(_async)?\.py$")


def main(git_dir: Path) -> None:
    tags = subprocess.run(["git", "--git-dir", str(git_dir), "tag"], capture_output=True, text=True, check=True)
    releases = sorted(
        (t for t in tags.stdout.split() if t.startswith("v") and Version(t[1:]) >= Version(OLDEST)),
        key=lambda t: Version(t[1:]),
    )
    expect = expected_plans(FIXTURE)
    commands: Commands = {}
    for tag in releases:
        commit = subprocess.run(
            ["git", "--git-dir", str(git_dir), "rev-parse", "--short=9", f"{tag}^{{commit}}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for path, text in sorted(tag_scripts(git_dir, tag, "scripts", top_only=True).items()):
            for found in extract(text, ENTRY, set(PLACEMENT_FLAGS)):
                if found.problem is not None:
                    continue  # set at run time (test_command_examples.py says so)
                record(commands, expect, path, found, f"{tag[1:]} ({commit})")
    about = (
        f"slime's train.py/train_async.py commands in scripts/*.sh of its release tags {releases[0]} to {releases[-1]}, "
        "read by tests/planner/slime_release_commands.py; expect: the plan, checked by hand against the script"
    )
    write_fixture(FIXTURE, about, commands)
    print(f"wrote {FIXTURE}: {len(commands)} commands of {len(releases)} releases")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
