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
    result = subprocess.run(
        [sys.executable, "-m", "hpcplace.cli", "run", str(config), "--local", "--run-dir", str(tmp_path / "run")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
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


def test_collocated_demo_on_two_planned_nodes_sharing_one_dev_shm(tmp_path: Path) -> None:
    """Two planned nodes on one host (the local backend) share this host's /dev/shm, as several
    slurmd on one host or containers binding the host's /dev/shm do: each node still runs its own
    baton and weight stores (node-plan0, node-plan1), the invariants hold per node, each rollout rank
    loads its own node's actor's weights, and nothing is left in /dev/shm."""
    config = tmp_path / "two.yaml"
    text = (ROOT / "configs" / "collocated-demo.yaml").read_text()
    text = text.replace("nodes: 1, gpus_per_node: 2", "nodes: 2, gpus_per_node: 8").replace('"0-1"', '"0-1,8-9"')
    config.write_text(text.replace('"--cycles", "3"', '"--cycles", "2"'))
    events = tmp_path / "events.log"
    env = {**os.environ, "HPCPLACE_COLLOCATE_EVENTS": str(events)}
    result = subprocess.run(
        [sys.executable, "-m", "hpcplace.cli", "run", str(config), "--local", "--run-dir", str(tmp_path / "run")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    got = read_events(str(events))
    assert sorted({e["node"] for e in got}) == ["plan0", "plan1"]
    for node in ("plan0", "plan1"):
        mine = [e for e in got if e["node"] == node]
        gens = check_invariants(mine, [["actor"], ["rollout"]])
        assert [sorted(gens[g]) for g in sorted(gens)] == [["rollout"], ["actor"]] * 2 + [["rollout"]], node
        assert {e["rank"] for e in mine} == ({0, 1} if node == "plan0" else {2, 3})
    for rank in range(4):
        node = "plan0" if rank < 2 else "plan1"
        published = re.findall(
            rf"actor\[{rank}\] gen \d+: .* published weights v(\d+) fp=(\w+) \(node {node}\)", output
        )
        loaded = re.findall(
            rf"rollout\[{rank}\] gen \d+: weights v(\d+) fp=(\w+), .*\(node {node}, from actor-{rank}\)", output
        )
        assert len(published) == 2 and published == loaded[1:], output
    removed = re.findall(r"last to leave, removed (\S+)", output)
    assert sorted(os.path.basename(r) for r in removed) == ["node-plan0", "node-plan1"], output
    assert not os.path.exists(os.path.dirname(removed[0])), output
