"""OpenRLHF's own `train_ppo_ray` and `serve_rm` commands, release by release: each tagged release's example scripts
(`examples/scripts/*.sh`) read without a shell (tests/planner/script_commands.py) into
tests/fixtures/openrlhf/release_commands.json, which tests/planner/test_openrlhf_releases.py plans. The wheels
hold no example scripts, so they come from the release tags of an OpenRLHF git mirror; a release read by
scripts/gen_openrlhf_flags.py that has no tag there gets the commands of its README instead (the ```bash blocks
of its wheel's METADATA, `pip download --no-deps`; a command with `...` for elided flags is left out):

    PYTHONPATH=. python -m tests.planner.openrlhf_release_commands /path/to/OpenRLHF.git

A command the same in several releases is stored once with the list of its releases. The expected plan of each
(`expect`: world size per role, nodes of 8 GPUs) is kept across a rerun, so a new command's has to be added by
hand, after reading its script."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from packaging.version import Version

from hpcplace.config.formats.openrlhf import PLACEMENT_FLAGS
from hpcplace.config.formats.openrlhf_flags import OLDEST
from hpcplace.config.formats.openrlhf_flags import releases as known_releases
from tests.planner.release_fixtures import Commands, expected_plans, record, tag_scripts, write_fixture
from tests.planner.script_commands import extract

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "openrlhf" / "release_commands.json"
ENTRY = re.compile(r"(^|.*/)openrlhf[./]cli[./](train_ppo_ray|serve_rm)(\.py)?$")


def _readme(version: str, folder: Path) -> dict[str, str]:
    """The ```bash blocks of the README in release `version`'s wheel, each as a script named by its line."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(folder)]
        + [f"openrlhf=={version}"],
        check=True,
    )
    wheel = next(w for w in folder.glob("openrlhf-*.whl") if w.name.split("-")[1] == version)
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(name).decode("utf-8")
    out = {}
    for block in re.finditer(r"^```(?:bash|shell|sh)\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        first = text[: block.start(1)].count("\n") + 1
        out[f"{wheel.name}:{name}:{first}"] = block.group(1)
    return out


def main(git_dir: Path) -> None:
    tags = subprocess.run(["git", "--git-dir", str(git_dir), "tag"], capture_output=True, text=True, check=True)
    releases = sorted(
        (t for t in tags.stdout.split() if t.startswith("v") and Version(t[1:]) >= Version(OLDEST)),
        key=lambda t: Version(t[1:]),
    )
    expect = expected_plans(FIXTURE)
    commands: Commands = {}
    flags = set(PLACEMENT_FLAGS) | set(PLACEMENT_FLAGS.values())
    untagged = [str(r.version) for r in known_releases() if f"v{r.version}" not in releases]
    with tempfile.TemporaryDirectory() as tmp:
        readmes = {version: _readme(version, Path(tmp)) for version in untagged}
    for tag in [*releases, *(f"v{v}" for v in untagged)]:
        if tag[1:] in readmes:
            commit, scripts = "PyPI wheel", readmes[tag[1:]]
        else:
            commit = subprocess.run(
                ["git", "--git-dir", str(git_dir), "rev-parse", "--short=8", f"{tag}^{{commit}}"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            scripts = tag_scripts(git_dir, tag, "examples/scripts")
        for path, text in sorted(scripts.items()):
            for found in extract(text, ENTRY, flags):
                if found.problem is not None or "..." in found.words:
                    continue  # set at run time (test_command_examples.py says so), or a README's elided flags
                record(commands, expect, path, found, f"{tag[1:]} ({commit})")
    about = (
        f"OpenRLHF's train_ppo_ray and serve_rm commands in examples/scripts/*.sh of its release tags {releases[0]} to "
        f"{releases[-1]} (and the README of the wheels of {', '.join(untagged) or 'no other release'}), read by "
        "tests/planner/openrlhf_release_commands.py; expect: the plan, checked by hand against the script"
    )
    write_fixture(FIXTURE, about, commands)
    print(f"wrote {FIXTURE}: {len(commands)} commands of {len(releases) + len(untagged)} releases")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
