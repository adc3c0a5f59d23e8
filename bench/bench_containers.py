"""Benchmark: a task's start through each container runtime against a bare start, on the real test cluster.

    scripts/slurm-cluster/install.sh --slurm sid && scripts/slurm-cluster/up.sh --slurm sid
    python bench/bench_containers.py [--runs 10]

One job holds an a800 node; in it, `srun --overlap` starts hpcplace's shim for a component whose program is
`true`, exactly as job.sbatch starts a step (the srun options and launcher of hpcplace.slurm.container_launch,
the run directory written by render_run): bare (the venv's hpcplace-run), Apptainer on a sandbox directory
and on a SIF (the enter script, `apptainer exec --nv --bind ...`, the image's python3 running the carried
shim), and Slurm's `--container` with runc on an OCI bundle. Each srun starts 1 task, then 8 tasks on the
node at once (8 containers). Variants interleave; the table shows the median wall time of the srun, and
what the container adds per srun. Goal: <= 1 s added per task.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hpcplace.commands.slurm_cmds import default_launcher  # noqa: E402
from hpcplace.config.formats import load_spec  # noqa: E402
from hpcplace.plan.planner import plan_from_spec  # noqa: E402
from hpcplace.slurm.container_launch import JOB_ID, group_launches  # noqa: E402
from hpcplace.slurm.render import render_run  # noqa: E402

CONFIG = """
name: bench-containers
cluster:
  node_groups:
    - {label: a800, partition: a800, nodes: 1, gpus_per_node: 8, gpu_type: a800}
  component_placement:
    c: "0-TASKS_LAST"
components:
  c: {command: ["true"]}
CONTAINER
"""


def images() -> dict[str, str]:
    out = subprocess.run([str(REPO / "scripts/slurm-cluster/images.sh")], capture_output=True, text=True, check=True)
    return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)


def variants(img: dict[str, str]) -> dict[str, str]:
    binds = "[/var/tmp, /work, /root]"
    out = {"bare": ""}
    out["apptainer (directory)"] = f"container: {{runtime: apptainer, image: {img['apptainer_sid']}, mounts: {binds}}}"
    if "sif_sid" in img:
        out["apptainer (SIF)"] = f"container: {{runtime: apptainer, image: {img['sif_sid']}, mounts: {binds}}}"
    out["oci (runc)"] = f"container: {{runtime: oci, image: {img['oci_sid']}}}"
    return out


def srun_argv(work: Path, name: str, container: str, tasks: int, job_id: str) -> list[str]:
    """The srun of one step of the rendered run directory, as job.sbatch would start it."""
    run_dir = work / f"{name.split()[0]}-{abs(hash(name)) % 1000}-{tasks}"
    config = work / f"{run_dir.name}.yaml"
    config.write_text(CONFIG.replace("TASKS_LAST", str(tasks - 1)).replace("CONTAINER", container))
    plan = plan_from_spec(load_spec(config))
    launcher = (*default_launcher(), "--chdir", str(REPO))
    render_run(plan, run_dir, launcher=launcher)
    launch = group_launches(plan, launcher, str(run_dir))[0]
    return [
        "srun",
        f"--jobid={job_id}",
        "--overlap",
        "--nodes=1",
        f"--ntasks={tasks}",
        f"--ntasks-per-node={tasks}",
        "--cpus-per-task=1",
        "--mem=0",
        "--gres=gpu:a800:8",
        *[a.replace(JOB_ID, job_id) for a in launch.srun_args],
        *launch.launcher,
        "--plan",
        str(run_dir / "plan.json"),
        "--component",
        "c",
    ]


def hold_node() -> str:
    out = subprocess.run(
        ["sbatch", "--parsable", "-p", "a800", "-N1", "--exclusive", "--gres=gpu:a800:8", "--wrap", "sleep 1800"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    job_id = out.split(";")[0]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True).stdout
        if state.strip() == "RUNNING":
            return job_id
        time.sleep(0.2)
    raise SystemExit(f"job {job_id} did not start")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    img = images()
    job_id = hold_node()
    env = {**os.environ, "HPCPLACE_MASTER_PORT_CHECK": "1"}
    for var in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS"):
        env.pop(var, None)
    try:
        with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="hpcplace-bench-containers-") as tmp:
            work = Path(tmp)
            table: dict[tuple[str, int], list[float]] = {}
            argvs = {
                (name, tasks): srun_argv(work, name, container, tasks, job_id)
                for name, container in variants(img).items()
                for tasks in (1, 8)
            }
            for (_, tasks), argv in argvs.items():  # warm: image caches, page cache
                subprocess.run(argv, env={**env, "HPCPLACE_STEP_TASKS": str(tasks)}, check=True)
            for _ in range(args.runs):
                for key, argv in argvs.items():
                    start = time.perf_counter()
                    subprocess.run(argv, env={**env, "HPCPLACE_STEP_TASKS": str(key[1])}, check=True)
                    table.setdefault(key, []).append(time.perf_counter() - start)
    finally:
        subprocess.run(["scancel", job_id], check=False)
    print(f"median wall time of one srun starting the shim (program `true`), {args.runs} runs, interleaved")
    print("| start | 1 task | added | 8 tasks at once | added |")
    print("|---|---|---|---|---|")
    bare = {t: statistics.median(table[("bare", t)]) for t in (1, 8)}
    for name in variants(img):
        cells = []
        for tasks in (1, 8):
            median = statistics.median(table[(name, tasks)])
            cells += [f"{median:.2f} s", "-" if name == "bare" else f"{median - bare[tasks]:+.2f} s"]
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
