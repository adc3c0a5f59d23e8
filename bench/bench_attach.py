"""Iterating on a live allocation: how long from typing the command to the driver running, on the
project's Slurm test cluster (2 nodes: a800-1 = the Ray head, cpu-1; a het job), as a user runs it:

- fresh submit: `hpcplace submit CONFIG --driver -- DRIVER` -> the driver's first line runs (sbatch, the
  queue -- empty here, hours on a busy site --, the batch script, preflight, Ray bring-up, the driver step);
- attach: `hpcplace attach RUN --driver -- DRIVER` into a held job whose Ray cluster is up -> the
  driver's first line runs (the CLI, one scontrol + one squeue, srun --overlap, the driver wrapper);
- exec: `hpcplace exec RUN --component actor --rank 1 -- DRIVER` -> the command's first line runs.

DRIVER is `python -c` writing time.time() to a file as its first statement; every clock is this machine's
(the test nodes are namespaces on it).

    sudo .venv/bin/python bench/bench_attach.py [--repeat 5]   (needs root: boots the cluster)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hpcplace.slurm import submit  # noqa: E402

HPCPLACE = str(Path(sys.executable).parent / "hpcplace")
CONFIG = """name: attach-bench
cluster:
  node_groups:
    - {label: a800, partition: a800, nodes: 1, gpus_per_node: 8, gpu_type: a800}
    - {label: cpu, partition: cpu, nodes: 1}
  component_placement:
    actor: {node_group: a800, placement: "0-7:0-3"}
    env: {node_group: cpu, placement: "0"}
launch: {join_timeout: 120%s}   # --driver on the command line: Ray mode
"""
STAMP = "import sys, time; open(sys.argv[1], 'w').write(repr(time.time()))"


def hp(*args: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([HPCPLACE, *map(str, args)], capture_output=True, text=True, timeout=timeout, check=False)
    if res.returncode != 0:
        raise SystemExit(f"hpcplace {' '.join(map(str, args))} exited {res.returncode}:\n{res.stdout}{res.stderr}")
    return res


def stamp_after(path: Path, t0: float, timeout: float = 300) -> float:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text()):
        if time.monotonic() > deadline:
            raise SystemExit(f"{path} never written")
        time.sleep(0.05)
    return float(path.read_text()) - t0


def fresh_submit(root: Path, n: int) -> float:
    out = root / f"fresh-{n}"
    out.mkdir(parents=True)
    (out / "c.yaml").write_text(CONFIG % "")
    t0 = time.time()
    hp("submit", out / "c.yaml", "-o", out / "run", "--driver", "--", sys.executable, "-c", STAMP, out / "t")
    took = stamp_after(out / "t", t0)
    job = submit.recorded_job(out / "run")
    while not submit.job_status(job).done:
        time.sleep(0.3)
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    from tests.slurm.conftest import ensure_cluster

    ensure_cluster("no")
    os.environ.setdefault("HPCPLACE_RAY_ARGS", "--object-store-memory=80000000")
    root = REPO / "runs" / f"bench-attach-{int(time.time())}"
    fresh = [fresh_submit(root, n) for n in range(args.repeat)]

    held = root / "held"
    held.mkdir(parents=True)
    (held / "c.yaml").write_text(CONFIG % ", hold: true")
    run = held / "run"
    hp("submit", held / "c.yaml", "-o", run, "--driver", "--", sys.executable, "-c", "pass")
    deadline = time.monotonic() + 300
    while not ((run / "hold.json").exists() and (run / "ray" / "bringup.json").exists()):
        if time.monotonic() > deadline:
            raise SystemExit("the held job never came up")
        time.sleep(0.2)
    attach, attach_wall, exec_ = [], [], []
    try:
        for n in range(args.repeat):
            t0 = time.time()
            hp("attach", run, "--driver", "--", sys.executable, "-c", STAMP, held / f"a{n}")
            attach_wall.append(time.time() - t0)
            attach.append(stamp_after(held / f"a{n}", t0))
            t0 = time.time()
            hp("exec", run, "--component", "actor", "--rank", "1", "--", sys.executable, "-c", STAMP, held / f"e{n}")
            exec_.append(stamp_after(held / f"e{n}", t0))
    finally:
        hp("release", run, "--wait")

    def row(name: str, what: str, xs: list[float]) -> str:
        return f"| {name} | {what} | {statistics.median(xs):.2f} s | {', '.join(f'{x:.2f}' for x in xs)} |"

    print("| command | measured | median | runs |\n|---|---|---:|---|")
    print(row("`hpcplace submit --driver` (fresh job, empty queue)", "command -> driver's first line", fresh))
    print(row("`hpcplace attach --driver` (held job)", "command -> driver's first line", attach))
    print(row("`hpcplace attach --driver` (held job)", "command -> attach returns", attach_wall))
    print(row("`hpcplace exec --component actor --rank 1`", "command -> command's first line", exec_))


if __name__ == "__main__":
    main()
