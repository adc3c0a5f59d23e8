"""Hand-off overhead of the collocation baton per turn, between real processes.

    python bench/bench_handoff.py [--turns 500]

Cases: two single-rank components alternating (actor <-> rollout); 2+2 ranks; the hybrid schedule
[env + rollout] -> [actor x2]. Latency = from the last offload_end of one generation to the first
onload_begin of the next (the baton itself, from the event log's CLOCK_MONOTONIC stamps); the
per-turn figure also includes the event logging and the process's own loop. Optionally each turn
pauses/resumes a CPU-backend tag of --pause-mib MiB (backup on) to show the memory part.
Prints one markdown table.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

CHILD = r"""
import json, sys, time
from hpcplace.runtime.colocate import Cycle, GroupSchedule
a = json.loads(sys.argv[1])
s = GroupSchedule("g", tuple(tuple(p) for p in a["phases"]), {c: tuple(r) for c, r in a["members"].items()},
                  {c: tuple(d) for c, d in a["devices"].items()})
memory = None
if a["pause_mib"]:
    from hpcplace.runtime.memory import CpuBackend
    memory = CpuBackend()
    memory.add_tag("weights", nbytes=a["pause_mib"] << 20, backup=True)
    memory.allocate_bytes("weights", a["pause_mib"] << 20)[:] = b"x" * (a["pause_mib"] << 20)
with Cycle(a["job"], s, component=a["component"], rank=a["rank"], event_log=a["events"]) as c:
    t = time.perf_counter()
    for _ in range(a["turns"]):
        with c.turn(memory=memory):
            pass
    print(json.dumps({"per_turn_s": (time.perf_counter() - t) / a["turns"]}))
"""


def run_case(name: str, phases, members, devices, turns: int, pause_mib: int) -> tuple[str, float, float, float]:
    with tempfile.TemporaryDirectory(prefix="hpcplace-bench-", dir="/dev/shm") as tmp:
        events = os.path.join(tmp, "events.log")
        procs = []
        for component, ranks in members.items():
            for rank in ranks:
                args = {
                    "job": os.path.join(tmp, "job"),
                    "phases": phases,
                    "members": members,
                    "devices": devices,
                    "component": component,
                    "rank": rank,
                    "turns": turns,
                    "events": events,
                    "pause_mib": pause_mib,
                }
                procs.append(
                    subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(args)], stdout=subprocess.PIPE, text=True)
                )
        outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
        assert all(p.returncode == 0 for p in procs)
        by_gen: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
        with open(events) as fh:
            for line in fh:
                e = json.loads(line)
                by_gen[e["generation"]][e["event"]].append(e["t"])
        gens = sorted(by_gen)
        gaps = [
            (min(by_gen[b]["onload_begin"]) - max(by_gen[a]["offload_end"])) / 1e3 for a, b in itertools.pairwise(gens)
        ]
    per_turn = statistics.median(o["per_turn_s"] for o in outs) * 1e6 / len(phases)
    return name, statistics.median(gaps), sorted(gaps)[int(len(gaps) * 0.99) - 1], per_turn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--pause-mib", type=int, default=64)
    args = parser.parse_args(argv)
    two = {"actor": ["0"], "rollout": ["0"]}
    cases = [
        ("actor <-> rollout, 1 rank each", [["actor"], ["rollout"]], {"actor": [0], "rollout": [0]}, two, 0),
        (
            "actor <-> rollout, 2 ranks each",
            [["actor"], ["rollout"]],
            {"actor": [0, 1], "rollout": [0, 1]},
            {"actor": ["0", "1"], "rollout": ["0", "1"]},
            0,
        ),
        (
            "[env + rollout] -> [actor x2] (hybrid)",
            [["env", "rollout"], ["actor"]],
            {"env": [0], "rollout": [0], "actor": [0, 1]},
            {"env": ["0"], "rollout": ["1"], "actor": ["0", "1"]},
            0,
        ),
        (
            f"actor <-> rollout, 1 rank each, CPU backend {args.pause_mib} MiB pause/resume",
            [["actor"], ["rollout"]],
            {"actor": [0], "rollout": [0]},
            two,
            args.pause_mib,
        ),
    ]
    print(f"{os.cpu_count()} CPUs, {args.turns} turns per process", file=sys.stderr)
    print("| schedule | hand-off median (us) | hand-off p99 (us) | wall per turn (us) |")
    print("|---|---:|---:|---:|")
    for name, phases, members, devices, pause in cases:
        turns = args.turns if not pause else max(args.turns // 10, 20)
        label, median, p99, per_turn = run_case(name, phases, members, devices, turns, pause)
        print(f"| {label} | {median:.0f} | {p99:.0f} | {per_turn:.0f} |", flush=True)
        time.sleep(0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
