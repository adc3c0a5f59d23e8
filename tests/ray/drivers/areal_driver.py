"""A Ray driver that runs AReaL 1.0.4's own Ray launcher code on the cluster hpcplace started.

AReaL's Ray launcher (`python -m areal.infra.launcher.ray ENTRY --config X`) attaches with a bare
`ray.init()`: Ray resolves that to $RAY_ADDRESS, which hpcplace sets for the driver (on a real
cluster /tmp/ray/ray_current_cluster would not be there: /tmp is per node). This driver makes the
same `ray.init()` call, then uses AReaL's `RayLauncher.submit_array` - its placement group of one
{CPU, GPU, memory} bundle per node (PACK) and its `run_func` loader - to run one task per GPU on
`--nodes` nodes, each reporting where it ran. Written to $HPCPLACE_RUN_DIR/areal-report.json.
`ray_main` itself goes on to start SGLang/vLLM servers and trainer processes on GPUs: that is
where AReaL stops on a machine without GPUs (see README).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

TASK_FILE = str(Path(__file__).with_name("areal_task.py"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--gpus-per-node", type=int, required=True)
    parser.add_argument("--report", default=None)
    args = parser.parse_args(argv)
    out = Path(args.report or Path(os.environ.get("HPCPLACE_RUN_DIR", ".")) / "areal-report.json")
    report: dict = {"stages": [], "error": None, "ray_address_env": os.environ.get("RAY_ADDRESS")}
    t0 = time.monotonic()
    status = 1
    try:
        import ray
        from areal.infra.launcher.ray import RayLauncher

        ray.init()  # exactly what areal.infra.launcher.ray.main() does
        report["attach_s"] = round(time.monotonic() - t0, 3)
        report["gcs_address"] = ray.get_runtime_context().gcs_address
        report["ray_nodes"] = {n["NodeID"]: n["NodeManagerHostname"] for n in ray.nodes() if n["Alive"]}
        report["stages"].append("attached")
        launcher = RayLauncher(experiment_name="hpcplace-probe", trial_name="t0", fileroot=str(out.parent))
        count = args.nodes * args.gpus_per_node
        futures = launcher.submit_array(
            job_name="probe",
            file_path=TASK_FILE,
            func_name="where",
            count=count,
            nodes=args.nodes,
            list_args=[[i] for i in range(count)],
            gpus_per_task=1,
            cpus_per_task=1,
            mem_per_task=64,
        )
        report["stages"].append("placement group ready")
        report["tasks"] = ray.get(futures, timeout=120)
        report["stages"].append("tasks ran")
        status = 0
    except BaseException as exc:  # noqa: BLE001 - the report says where AReaL stopped
        report["error"] = f"{type(exc).__name__}: {exc}"
        report["traceback"] = traceback.format_exc()
        traceback.print_exc()
    report["elapsed_s"] = round(time.monotonic() - t0, 3)
    out.write_text(json.dumps(report, indent=2, default=str))
    print(f"areal-driver: {report['stages']} -> {out}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
