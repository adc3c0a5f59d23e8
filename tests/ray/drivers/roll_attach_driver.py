"""The attach checks that ROLL's driver start-up makes, run on the cluster hpcplace started.

ROLL (alibaba/ROLL) is not installable here: it is not published on PyPI (the PyPI project named
`roll` is an unrelated HTTP framework), and CI reaches no other source. So this driver cannot
import ROLL; it runs the same *commands and calls* that ROLL's
`roll.distributed.scheduler.initialize.init()` makes (read from ROLL's source, not copied):
`start_ray_cluster()` first asks `is_ray_cluster_running()`, which is the exit status of the
shell command `ray status`; when that succeeds it logs "Ray cluster already initialized" and starts
no head; `init()` then calls `ray.init(address=None, namespace=..., ignore_reinit_error=True)`,
which Ray resolves to $RAY_ADDRESS. This driver records the environment ROLL reads (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT), the result of `ray status`, the cluster `ray.init` joined,
and whether any second GCS was started. Report: $HPCPLACE_RUN_DIR/roll-report.json.

With HPCPLACE_ROLL_SRC set to a ROLL checkout (e.g. a clone of alibaba/ROLL; CI has none), it also
imports ROLL's own `roll.distributed.scheduler.initialize` from there and runs its
`is_ray_cluster_running()`, `start_ray_cluster()` and `init()` unchanged.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(os.environ.get("HPCPLACE_RUN_DIR", ".")) / "roll-report.json")
    report: dict = {
        "env": {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "RAY_ADDRESS")}
    }
    ray_cli = shutil.which("ray") or str(Path(sys.executable).with_name("ray"))
    t0 = time.monotonic()
    status = subprocess.run([ray_cli, "status"], capture_output=True, text=True, timeout=120)
    report["ray_status_rc"] = status.returncode
    report["ray_status_s"] = round(time.monotonic() - t0, 3)
    report["cluster_running"] = status.returncode == 0  # ROLL: is_ray_cluster_running()
    roll_src = os.environ.get("HPCPLACE_ROLL_SRC")
    if roll_src:  # a ROLL checkout (not installable from PyPI): run ROLL's own start-up, unchanged
        sys.path.insert(0, roll_src)
        from roll.distributed.scheduler import initialize

        report["roll_is_ray_cluster_running"] = initialize.is_ray_cluster_running()
        report["roll_started_head"] = initialize.start_ray_cluster()  # False: "Ray cluster already initialized"
        initialize.init()  # ray.init(address=None, namespace=ROLL's, ...) -> RAY_ADDRESS
        report["roll_init_returned"] = True
    import ray

    ray.init(address=None, namespace="roll", ignore_reinit_error=True, log_to_driver=False)
    nodes = [n for n in ray.nodes() if n["Alive"]]
    report["gcs_address"] = ray.get_runtime_context().gcs_address
    report["alive_nodes"] = len(nodes)
    report["node_hosts"] = sorted(n["NodeManagerHostname"] for n in nodes)
    report["head_nodes"] = sum(1 for n in nodes if n.get("Resources", {}).get("node:__internal_head__"))
    ray.shutdown()
    out.write_text(json.dumps(report, indent=2))
    print(f"roll-attach-driver: cluster_running={report['cluster_running']} nodes={len(nodes)} -> {out}", flush=True)
    return 0 if report["cluster_running"] else 1


if __name__ == "__main__":
    sys.exit(main())
