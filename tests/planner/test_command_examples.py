"""Every OpenRLHF and slime example script, its command planned with a `slurm:` block: OpenRLHF's
`examples/scripts/*.sh` (HPCPLACE_OPENRLHF_SRC, an OpenRLHF checkout) and slime's `scripts/*.sh`
(HPCPLACE_SLIME_SRC). The commands are read without running a shell (tests/planner/script_commands.py; the
files their here-documents write, such as slime's --sglang-config YAML, are written to the test's folder).
Each is planned, refused with a located reason, or not extractable with the reason; nothing else (no
traceback). Skipped without the checkouts (CI has neither: the wheels hold no example scripts, slime is not
on PyPI). Run with -s to see the counts."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from hpcplace.config.formats import load_spec
from hpcplace.config.formats.openrlhf import PLACEMENT_FLAGS
from hpcplace.config.formats.slime_flags import PLACEMENT_FLAGS as SLIME_FLAGS
from hpcplace.errors import SpecError
from hpcplace.plan.planner import plan_from_spec
from tests.planner.script_commands import extract

CASES = {
    "openrlhf": (
        "HPCPLACE_OPENRLHF_SRC",
        "examples/scripts",
        re.compile(r"(^|.*/)openrlhf[./]cli[./]train_ppo_ray(\.py)?$"),
        set(PLACEMENT_FLAGS) | set(PLACEMENT_FLAGS.values()),
    ),
    "slime": ("HPCPLACE_SLIME_SRC", "scripts", re.compile(r"(^|.*/)train(_async)?\.py$"), set(SLIME_FLAGS)),
}


@pytest.mark.parametrize("framework", sorted(CASES))
def test_every_example_script_is_planned_refused_or_said_unreadable(
    framework: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    variable, folder, entry, flags = CASES[framework]
    src = os.environ.get(variable)
    if not src:
        pytest.skip(f"{variable} (a {framework} checkout) is not set; CI has no checkout of it")
    site = tmp_path / "site.yaml"
    site.write_text(f"format: {framework}\nslurm: {{partition: gpu, gpus_per_node: 8}}\n", encoding="utf-8")
    counts = {"planned": 0, "refused": 0, "not extractable": 0}
    lines = []
    scripts = sorted((Path(src) / folder).rglob("*.sh"))
    assert scripts, f"no scripts under {src}/{folder}"
    for script in scripts:
        text = script.read_text(encoding="utf-8", errors="replace")
        commands = extract(text, entry, flags, script, files=tmp_path)
        mentioned = [
            n
            for n, line in enumerate(text.splitlines(), 1)
            if not line.lstrip().startswith("#") and any(entry.match(w) for w in re.split(r"[\s\"';&|]+", line))
        ]
        if not commands and mentioned:  # e.g. inside `srun bash -c "... python3 -m ..."`: a string, not a command
            counts["not extractable"] += 1
            lines.append(f"not extractable {script.relative_to(src)}:{mentioned[0]}: the command is inside a string")
        for command in commands:
            where = f"{script.relative_to(src)}:{command.line}"
            if command.problem is not None:
                counts["not extractable"] += 1
                lines.append(f"not extractable {where}: {command.problem}")
                continue
            try:
                plan = plan_from_spec(load_spec(str(site), driver=list(command.words)))
            except SpecError as err:
                assert err.location is not None and err.message, where
                counts["refused"] += 1
                at = ""
                if err.location.path == "<--driver>":  # the word refused
                    column, k = 1, 0
                    while k < len(command.words) and column < err.location.column:
                        column += len(command.words[k]) + 1
                        k += 1
                    at = f" at {command.words[k]!r}" if k < len(command.words) else ""
                lines.append(f"refused {where}{at}: {err.message}")
                continue
            counts["planned"] += 1
            sizes = ", ".join(f"{c.name} {c.world_size}" for c in plan.components)
            lines.append(f"planned {where}: {len(plan.cluster.nodes)} node(s); {sizes}")
    with capsys.disabled():
        print(f"\n{framework} examples: {counts}")
        for line in lines:
            print("  " + line)
    assert sum(counts.values()) > 0
