"""Rendering and submission benchmarks.

    python bench/bench_render.py                 # render the 1,024-node plan (no Slurm needed), then
                                                 # `hpcplace render` at 1,024 and 16,384 nodes (wall,
                                                 # CPU, peak RSS of the fresh process)
    python bench/bench_render.py --submit        # also: submit -> every step running, on the test
                                                 # cluster (scripts/slurm-cluster/up.sh first)

Render: the planner benchmark's experiment (bench_planner.big_spec_yaml: 1,024 nodes x 8 GPUs, five
components, 65,536+ processes), lowered to Slurm and rendered; `render_run` also writes plan.json
and its index. Planning itself is not timed here (bench_planner.py does that).

Submit: a 3-component het job (a800 / rtx4090 / cpu), `hpcplace submit` as a user runs it (a fresh
process: import, plan, validate against the live cluster, render, sbatch); every task records the
wall-clock time when its program starts (after the shim); the number is the last start minus the
moment `hpcplace submit` was launched.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_planner import big_spec_yaml, cli_table, load_spec_text  # noqa: E402

from hpcplace.plan.planner import plan_from_spec  # noqa: E402
from hpcplace.slurm.render import render_run, render_script  # noqa: E402
from hpcplace.slurm.slurm_job import lower  # noqa: E402


def bench_render(nodes: int = 1024, repeat: int = 5) -> None:
    plan = plan_from_spec(load_spec_text(big_spec_yaml(nodes)))
    lows, scripts, runs = [], [], []
    with tempfile.TemporaryDirectory(prefix="hpcplace-bench-") as tmp:
        for i in range(repeat):
            gc.collect()
            t0 = time.perf_counter()
            job = lower(plan)
            t1 = time.perf_counter()
            text = render_script(plan, "/runs/bench", job=job)
            t2 = time.perf_counter()
            render_run(plan, Path(tmp) / f"run{i}")
            t3 = time.perf_counter()
            lows.append(t1 - t0)
            scripts.append(t2 - t0)
            runs.append(t3 - t2)
        size = len(text.encode())
        plan_size = (Path(tmp) / "run0" / "plan.json").stat().st_size
    print(
        f"plan: {nodes} nodes, {plan.cluster.num_gpus} GPUs, {plan.num_processes} processes, "
        f"{len(plan.components)} components; {len(job.steps)} steps, "
        f"{sum(len(s.segments) for s in job.steps)} srun segments"
    )
    print(f"| what | median of {repeat} | max |")
    print("|---|---:|---:|")
    print(f"| lower Plan -> SlurmJob | {statistics.median(lows):.3f} s | {max(lows):.3f} s |")
    print(
        f"| lower + render job.sbatch ({size / 1024:.1f} KiB) | {statistics.median(scripts):.3f} s | "
        f"{max(scripts):.3f} s |"
    )
    print(
        f"| render_run: job.sbatch + plan.json ({plan_size / 2**20:.1f} MiB) + index, written | "
        f"{statistics.median(runs):.3f} s | {max(runs):.3f} s |"
    )


SUBMIT_CONFIG = """
name: bench-submit
cluster:
  node_groups:
    - {{label: a800, partition: a800, nodes: 2, gpus_per_node: 8, gpu_type: a800}}
    - {{label: rtx4090, partition: rtx4090, nodes: 1, gpus_per_node: 4, gpu_type: rtx4090}}
    - {{label: cpu, partition: cpu, nodes: 1}}
  component_placement:
    actor: {{node_group: a800, placement: "0-15"}}
    rollout: {{node_group: rtx4090, placement: "0-3"}}
    agent: {{node_group: cpu, placement: "0:0-3"}}
components:
  actor: {{command: {cmd}}}
  rollout: {{command: {cmd}}}
  agent: {{command: {cmd}}}
"""


def bench_submit(repeat: int = 5) -> None:
    env = dict(os.environ)
    env.setdefault("SLURM_CONF", "/tmp/hpcplace-slurm/etc/slurm.conf")
    results = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="hpcplace-bench-submit-") as tmp:
            starts = Path(tmp) / "starts"
            starts.mkdir()
            marker = 'date +%s.%N >"$0/$HPCPLACE_COMPONENT.$HPCPLACE_RANK"; exec sleep 300'
            cmd = json.dumps(["sh", "-c", marker, str(starts)])  # JSON is YAML
            config = Path(tmp) / "bench.yaml"
            config.write_text(SUBMIT_CONFIG.format(cmd=cmd))
            run_dir = Path(tmp) / "run"
            t0 = time.time()
            res = subprocess.run(
                [sys.executable, "-m", "hpcplace.cli", "submit", str(config), "-o", str(run_dir)],
                env=env,
                capture_output=True,
                text=True,
            )
            t_submitted = time.time()
            if res.returncode != 0:
                raise SystemExit(f"submit failed: {res.stderr}")
            deadline = time.time() + 120
            while len(list(starts.iterdir())) < 24 and time.time() < deadline:
                time.sleep(0.02)
            stamps = [float(p.read_text()) for p in starts.iterdir()]
            job_id = res.stdout.split()[1]
            subprocess.run([sys.executable, "-m", "hpcplace.cli", "cancel", job_id], env=env, capture_output=True)
            if len(stamps) < 24:
                raise SystemExit(f"only {len(stamps)} of 24 processes started")
            results.append((t_submitted - t0, max(stamps) - t0, min(stamps) - t0))
            time.sleep(2)  # let the cancelled job leave the nodes
    print("3-component het job (a800 x2, rtx4090, cpu), 24 processes, `hpcplace submit` in a fresh process:")
    print("| run | submit command returns | first process running | every process running |")
    print("|---:|---:|---:|---:|")
    for i, (sub, last, first) in enumerate(results):
        print(f"| {i + 1} | {sub:.2f} s | {first:.2f} s | {last:.2f} s |")
    print(
        f"| median | {statistics.median(r[0] for r in results):.2f} s | "
        f"{statistics.median(r[2] for r in results):.2f} s | {statistics.median(r[1] for r in results):.2f} s |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--submit", action="store_true", help="also time submission on the test cluster")
    parser.add_argument("--cli-nodes", type=int, action="append", help="`hpcplace render` sizes (default 1024, 16384)")
    parser.add_argument("--cli-only", action="store_true")
    args = parser.parse_args()
    if not args.cli_only:
        bench_render(args.nodes, args.repeat)
        print()
    cli_table("render", args.cli_nodes or [1024, 16384], min(args.repeat, 3))
    if args.submit:
        bench_submit(args.repeat)


if __name__ == "__main__":
    main()
