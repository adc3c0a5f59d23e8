"""README is the front page: short, its two commands as CI runs them, and its tour's commands work as written.

The tour's Slurm-free commands (`hpcplace plan`, `hpcplace render`) are run exactly as README gives them, from
a directory that holds the checkout's configs/; the ones that need a cluster (validate, submit, status, logs,
cancel) are parsed by the CLI's own parser (their options exist) and run on the real cluster by
tests/slurm/test_cli_site.py's kind of tests, not here."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hpcplace.cli import build_parser
from hpcplace.plan.gpumap import svg
from hpcplace.plan.planner import plan_from_file

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
TOUR = REPO / "configs" / "tour" / "rlinf-tour.yaml"
MAX_LINES = 150
NEEDS_SLURM = ("validate", "submit", "status", "logs", "cancel")


def text() -> str:
    return README.read_text(encoding="utf-8")


def blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text(), flags=re.S | re.M)


def commands() -> list[list[str]]:
    """Every `hpcplace ...` line of README's bash blocks, as argv (comments dropped, as bash does)."""
    out = []
    for block in blocks("bash"):
        for line in block.splitlines():
            if line.startswith("hpcplace "):
                out.append(shlex.split(line, comments=True))
    return out


def test_readme_is_a_front_page() -> None:
    lines = text().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; the front page keeps to {MAX_LINES}"


def test_the_two_commands_lead_and_ci_runs_the_second() -> None:
    first = blocks("bash")[0].splitlines()
    assert first[0].startswith(
        "pip install torch==2.13.0 -e '.[torch]' && hpcplace run configs/collocated-demo.yaml --local"
    )
    assert first[1].split()[0] == "scripts/test-all.sh"
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "exec scripts/test-all.sh" in ci


def test_tour_config_is_the_one_readme_shows() -> None:
    shown = next(b for b in blocks("yaml") if "launch:" in b and "slurm:" in b)
    assert yaml.safe_load(shown) == yaml.safe_load(TOUR.read_text(encoding="utf-8"))
    body = "".join(line + "\n" for line in TOUR.read_text(encoding="utf-8").splitlines() if not line.startswith("#"))
    assert shown == body


def test_readme_picture_is_what_hpcplace_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    picture = re.search(r"!\[[^\]]*\]\((docs/images/[^)]+\.svg)\)", text())
    assert picture, "README shows one device map"
    monkeypatch.chdir(REPO)
    config = "configs/" + Path(picture.group(1)).stem + ".yaml"
    assert (REPO / picture.group(1)).read_text(encoding="utf-8") == svg(plan_from_file(config)), (
        f"regenerate it: hpcplace plan {config} --svg {picture.group(1)}"
    )


def test_readme_links_point_at_files() -> None:
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text()):
        if "://" not in target:
            assert (REPO / target).exists(), f"README links to {target}, which does not exist"


def test_slurm_commands_parse() -> None:
    parser = build_parser()
    seen = set()
    for argv in commands():
        if argv[1] in NEEDS_SLURM:
            parser.parse_args(argv[1:])
            seen.add(argv[1])
    assert seen == set(NEEDS_SLURM)


def test_tour_commands_run_as_written(tmp_path: Path) -> None:
    (tmp_path / "configs").symlink_to(REPO / "configs")
    runnable = [argv for argv in commands() if argv[1] in ("plan", "render")]
    assert len(runnable) >= 6
    for argv in runnable:
        done = subprocess.run(
            [sys.executable, "-m", "hpcplace.cli", *argv[1:]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, f"{shlex.join(argv)}: {done.stderr}"
        if argv[1] == "plan":
            assert "device map" in done.stdout
        else:
            run = tmp_path / argv[argv.index("-o") + 1]
            script = (run / "job.sbatch").read_text(encoding="utf-8")
            assert (run / "plan.json").is_file()
            assert "Ray cluster:" in script  # every tour config runs its framework's driver
