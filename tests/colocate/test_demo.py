"""The collocated demo end to end through `hpcplace run --local`: 2 actor + 2 rollout processes on
the same two (planned) devices, 2 cycles, the device invariant checked over their event log."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from colocate_invariants import check_invariants, read_events

ROOT = Path(__file__).resolve().parents[2]


def test_collocated_demo_runs_locally_and_keeps_the_invariants(tmp_path: Path) -> None:
    config = tmp_path / "demo.yaml"
    text = (ROOT / "configs" / "collocated-demo.yaml").read_text()
    config.write_text(text.replace('"--cycles", "3"', '"--cycles", "2"'))
    events = tmp_path / "events.log"
    env = {**os.environ, "HPCPLACE_COLLOCATE_EVENTS": str(events)}
    result = subprocess.run([sys.executable, "-m", "hpcplace.cli", "run", str(config), "--local",
                             "--run-dir", str(tmp_path / "run")],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    for rank in (0, 1):
        seen = [int(v) for v in re.findall(rf"rollout\[{rank}\] gen \d+: weights v(\d+)", output)]
        assert seen == [0, 1, 2], output
        published = re.findall(rf"actor\[{rank}\] gen \d+: .* published weights v(\d+) fp=(\w+)", output)
        loaded = re.findall(rf"rollout\[{rank}\] gen \d+: weights v(\d+) fp=(\w+)", output)
        assert published == loaded[1:], output
    gens = check_invariants(read_events(str(events)), [["actor"], ["rollout"]])
    assert [sorted(gens[g]) for g in sorted(gens)] == [["rollout"], ["actor"]] * 2 + [["rollout"]]
    removed = re.findall(r"last to leave, removed (\S+)", output)
    assert len(removed) == 1 and not os.path.exists(removed[0]), output
