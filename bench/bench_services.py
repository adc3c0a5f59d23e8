"""From the last service replica being ready to the process that uses it starting (goal: <= 1 s).

    python bench/bench_services.py [--repeat 5]

Two paths, each `--repeat` times, with a reward server (HTTP, 0.5 s warm-up) and a two-replica TCP pool:
- `hpcplace run CONFIG --local`: the backend starts the user once every replica's prober wrote its .ready;
- the shim (`python -m hpcplace.runtime`, as a Slurm step runs it, in a recorded Slurm environment of this
  host): the user's shim waits for the .ready files, then execs.
The user prints time.time() first thing; the latency is that minus the newest .ready file's mtime (one
clock: everything runs on this host). Prints one markdown table.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
JOB = f"8{os.getpid()}"  # the shims' job id (its /dev/shm directory is removed after each run)
sys.path.insert(0, str(REPO))

CONFIG = """
name: bench-services
cluster:
  node_groups:
    - {{label: a800, partition: a800, nodes: 2, gpus_per_node: 8, gpu_type: a800}}
    - {{label: rtx4090, partition: rtx4090, nodes: 1, gpus_per_node: 4, gpu_type: rtx4090}}
    - {{label: cpu, partition: cpu, nodes: 1}}
  component_placement:
    inference: {{node_group: rtx4090, placement: "0"}}
components:
  inference: {{command: [{py}, -c, "import time; print('started', repr(time.time()), flush=True)", "{{pool.addr}}", "{{rm.0.url}}"]}}
services:
  rm:
    node_group: cpu
    command: [{py}, {repo}/examples/services/standin_server.py, --port, "{{port}}", --warmup, "0.5"]
    ready: {{http: /health}}
  pool:
    node_group: cpu
    replicas: 2
    command: [{py}, {repo}/examples/services/standin_server.py, --kind, tcp, --port, "{{port}}"]
"""


def latency(run_dir: Path, output: str) -> float:
    started = float(next(line for line in output.splitlines() if "started " in line).split("started ")[1])
    ready = max(p.stat().st_mtime for p in (run_dir / "services").glob("*/*.ready"))
    return started - ready


def local_once(work: Path) -> float:
    config = work / "config.yaml"
    config.write_text(CONFIG.format(py=sys.executable, repo=REPO))
    run_dir = work / f"run-{time.monotonic_ns()}"
    done = subprocess.run(
        [sys.executable, "-m", "hpcplace.cli", "run", str(config), "--local", "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=work,
    )
    assert done.returncode == 0, done.stderr
    return latency(run_dir, done.stdout)


def shim_once(work: Path) -> float:
    from tests.runtime.conftest import localhost_task, shim_command, write_plan

    run_dir = work / f"shim-{time.monotonic_ns()}"
    run_dir.mkdir()
    plan = write_plan(run_dir, CONFIG.format(py=sys.executable, repo=REPO))

    def env(procid: int, ntasks: int, step: str) -> dict[str, str]:
        return localhost_task(procid, ntasks, step, JOB)

    user = subprocess.Popen(
        shim_command("--plan", str(plan), "--component", "inference"),
        env=env(0, 1, "1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    services = [
        subprocess.Popen(
            shim_command("--plan", str(plan), "--component", name),
            env=env(i, count, step),
            stderr=subprocess.DEVNULL,
        )
        for name, count, step in (("rm", 1, "2"), ("pool", 2, "3"))
        for i in range(count)
    ]
    try:
        out, _ = user.communicate(timeout=120)
    finally:
        for s in services:
            s.terminate()
        for s in services:
            s.wait(timeout=30)
        shutil.rmtree(f"/dev/shm/hpcplace-{JOB}", ignore_errors=True)  # what a job's guard removes on a cluster
    return latency(run_dir, out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    print("| path | median | max | runs (s) |")
    print("|---|---:|---:|---|")
    with tempfile.TemporaryDirectory(prefix="hpcplace-bench-services-") as tmp:
        for name, once in (("`run --local`", local_once), ("shim (a Slurm step's task)", shim_once)):
            runs = [once(Path(tmp)) for _ in range(args.repeat)]
            print(
                f"| {name} | {statistics.median(runs):.3f} s | {max(runs):.3f} s | "
                + ", ".join(f"{r:.3f}" for r in runs)
                + " |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
