"""Ray bring-up time of the Ray launch mode on the project's Slurm test cluster, by node count.

For 1 to 5 nodes (the test cluster has 5: a800-1, a800-2, rtx4090-1, cpu-1, robot-1), submit a Ray
job whose driver does nothing and read <run>/ray/bringup.json: job start (the batch script's first
line) -> head ready (GCS accepting) -> all nodes joined (every raylet alive in the GCS, checked by
the driver step) -> driver started. Every worker raylet is started by one srun step, at once.

    sudo .venv/bin/python bench/bench_ray_bringup.py [--repeat 2]   (needs root: boots the cluster)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hpcplace.config.launch import LaunchSpec  # noqa: E402
from hpcplace.plan.planner import plan_from_file  # noqa: E402
from hpcplace.slurm import submit  # noqa: E402

GROUPS = [
    "    - {label: a800, partition: a800, nodes: %d, gpus_per_node: 8, gpu_type: a800}",
    "    - {label: rtx, partition: rtx4090, nodes: 1, gpus_per_node: 4, gpu_type: rtx4090}",
    "    - {label: cpu, partition: cpu, nodes: 1}",
    "    - {label: robot, partition: robot, nodes: 1, hardware: {type: robot, count: 4}}",
]


def config(nodes: int) -> str:
    groups = [GROUPS[0] % min(nodes, 2)] + GROUPS[1 : 1 + max(nodes - 2, 0)]
    placement = {
        "a800": 'actor: {node_group: a800, placement: "0"}',
        "rtx": 'rollout: {node_group: rtx, placement: "0"}',
        "cpu": 'env: {node_group: cpu, placement: "0"}',
        "robot": 'arm: {node_group: robot, placement: "0"}',
    }
    used = ["a800"] + ["rtx", "cpu", "robot"][: max(nodes - 2, 0)]
    return (
        "name: ray-bench\ncluster:\n  node_groups:\n"
        + "\n".join(groups)
        + "\n  component_placement:\n"
        + "\n".join("    " + placement[u] for u in used)
        + "\n"
    )


def one(nodes: int, out: Path) -> dict:
    out.mkdir(parents=True)
    (out / "c.yaml").write_text(config(nodes))
    plan = replace(plan_from_file(out / "c.yaml"), launch=LaunchSpec("ray", (sys.executable, "-c", "pass"), {}, 120))
    assert len(plan.cluster.nodes) == nodes
    done = submit.submit(plan, out / "run")
    deadline = time.monotonic() + 300
    while not submit.job_status(done.job_id).done and time.monotonic() < deadline:
        time.sleep(0.3)
    data = json.loads((out / "run" / "ray" / "bringup.json").read_text())
    t0 = data["job_start"]
    return {
        "nodes": nodes,
        "head_ready": data["head_ready"] - t0,
        "all_joined": data["all_joined"] - t0,
        "driver_started": data["driver_start"] - t0,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    from tests.slurm.conftest import ensure_cluster

    ensure_cluster("no")
    os.environ.setdefault("HPCPLACE_RAY_ARGS", "--object-store-memory=80000000")
    root = REPO / "runs" / f"bench-ray-{int(time.time())}"
    print(
        f"{'nodes':>5} {'head ready':>11} {'all joined':>11} {'driver started':>15}   (s after job start; median of {args.repeat})"
    )
    for nodes in (1, 2, 3, 4, 5):
        rows = [one(nodes, root / f"n{nodes}-{r}") for r in range(args.repeat)]
        med = {k: sorted(r[k] for r in rows)[len(rows) // 2] for k in ("head_ready", "all_joined", "driver_started")}
        print(
            f"{nodes:>5} {med['head_ready']:>11.2f} {med['all_joined']:>11.2f} {med['driver_started']:>15.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
