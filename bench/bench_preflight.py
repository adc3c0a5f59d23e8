"""The per-node preflight on the project's Slurm test cluster: what it costs a good job, and how fast a job
whose venv the nodes cannot see fails.

(a) A job whose launcher lies in a directory only the submit host sees (its /tmp; each node has its own):
    job start -> job end (FAILED, one line per node in logs/preflight.txt), from sacct (1 s resolution).
(b) A good job (configs/hetero-partitions.yaml, 5 nodes in 4 het components, and a 2-node job): the
    preflight step's own time as the batch script measures it ("preflight passed on N node(s) in X s"),
    which is what it adds before the first program starts (the steps wait for it).

    sudo .venv/bin/python bench/bench_preflight.py [--repeat 3]   (needs root: boots the cluster)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hpcplace.plan.plan import Plan  # noqa: E402
from hpcplace.plan.planner import plan_from_file  # noqa: E402
from hpcplace.slurm import submit  # noqa: E402

SMALL = """name: preflight-bench
cluster:
  node_groups:
    - {label: rtx, partition: rtx4090, nodes: 1, gpus_per_node: 4, gpu_type: rtx4090}
    - {label: cpu, partition: cpu, nodes: 1}
  component_placement:
    inference: {node_group: rtx, placement: "0-3"}
    agent: {node_group: cpu, placement: "0:0-1"}
"""


def wait(job_id: str) -> submit.JobStatus:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        status = submit.job_status(job_id)
        if status.done:
            return status
        time.sleep(0.3)
    raise SystemExit(f"job {job_id} did not end")


def batch_log(run: Path) -> str:
    return "".join(p.read_text() for p in (run / "logs").glob("batch-*.out"))


def trivial(plan: Plan) -> Plan:
    return replace(plan, components=tuple(replace(c, command=("true",)) for c in plan.components))


def invisible_venv(out: Path) -> float:
    private = Path(tempfile.mkdtemp(prefix="hpcplace-bench-venv-", dir="/tmp"))
    try:
        shutil.copy2(shutil.which("hpcplace-run") or "", private / "hpcplace-run")
        (out / "c.yaml").write_text(SMALL)
        done = submit.submit(
            trivial(plan_from_file(out / "c.yaml")), out / "run", launcher=(str(private / "hpcplace-run"),)
        )
        status = wait(done.job_id)
    finally:
        shutil.rmtree(private)
    assert status.state == "FAILED" and (out / "run" / "logs" / "preflight.txt").exists(), batch_log(out / "run")
    times = (
        subprocess.run(
            ["sacct", "-n", "-P", "-X", "-j", done.job_id, "-o", "Start,End"],
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.split()[0]
        .split("|")
    )
    start, end = (datetime.fromisoformat(t).timestamp() for t in times)
    return end - start


def good(plan: Plan, out: Path) -> float:
    done = submit.submit(trivial(plan), out / "run")
    status = wait(done.job_id)
    log = batch_log(out / "run")
    match = re.search(r"preflight passed on \d+ node\(s\) in ([0-9.]+) s", log)
    assert status.state == "COMPLETED" and match, log
    return float(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from tests.slurm.conftest import _status, ensure_cluster  # boots the cluster; sets the fake GPUs' device dir

    mode = _status()
    ensure_cluster(mode if mode in ("yes", "no") else "no")
    os.environ["PATH"] = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    root = Path(tempfile.mkdtemp(prefix="hpcplace-bench-preflight-", dir="/var/tmp"))
    fail, small, hetero = [], [], []
    for i in range(args.repeat):
        for name, results, run in (
            ("fail", fail, lambda d: invisible_venv(d)),
            ("small", small, lambda d: good((d / "c.yaml").write_text(SMALL) and plan_from_file(d / "c.yaml"), d)),
            ("hetero", hetero, lambda d: good(plan_from_file(REPO / "configs" / "hetero-partitions.yaml"), d)),
        ):
            d = root / f"{name}{i}"
            d.mkdir()
            results.append(run(d))
    print(f"ConstrainDevices={mode}; median of {args.repeat}:")
    print("| job | measured | median | runs |")
    print("|---|---|---:|---|")
    print(
        f"| venv the nodes cannot see (2 nodes) | job start -> FAILED (sacct) | {statistics.median(fail):.0f} s | "
        f"{', '.join(f'{v:.0f}' for v in fail)} |"
    )
    for label, values in (("good job, 2 nodes", small), ("good job, hetero-partitions (5 nodes)", hetero)):
        print(
            f"| {label} | preflight step (added start-up) | {statistics.median(values):.1f} s | "
            f"{', '.join(f'{v:.1f}' for v in values)} |"
        )
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
