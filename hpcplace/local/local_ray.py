"""`hpcplace run CONFIG --local` in the Ray launch mode: a one-machine Ray cluster, then the driver.

One host cannot run one raylet per planned node (they would share one hostname, one set of GPUs and
RLinf would see one node anyway), so the local mode starts ONE head raylet carrying every planned
node's resources: `--num-cpus` and `--num-gpus` summed over the nodes, `ng_<label>: <nodes of the
group>`, RLINF_NODE_RANK=0, label hpcplace.node_rank=0 (and hpcplace.group when the plan has one
group). A plan with several nodes gets a warning saying so. The driver runs as a child with the same
variables as on Slurm (RAY_ADDRESS, RANK=0, WORLD_SIZE=1, MASTER_ADDR, MASTER_PORT, HPCPLACE_PLAN,
launch.env); its exit code is returned; Ray is stopped and its temp dir removed whatever happens.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hpcplace.errors import HpcplaceError
from hpcplace.plan.plan import Plan, plan_to_json
from hpcplace.ray.ray_cluster import group_resource, ray_nodes


class LocalRayError(HpcplaceError):
    """The local Ray cluster could not be started."""


class LocalRayUsageError(LocalRayError):
    """The run as asked cannot start (a usage error: exit code 2)."""

    exit_code = 2


def local_raylet_facts(plan: Plan) -> dict[str, Any]:
    """The single local raylet: every planned node's resources on one node (pure)."""
    nodes = ray_nodes(plan)
    resources: dict[str, int] = {}
    for n in nodes:
        resources[group_resource(n.label)] = resources.get(group_resource(n.label), 0) + 1
    labels = {"hpcplace.node_rank": "0"}
    if len({n.label for n in nodes}) == 1:
        labels["hpcplace.group"] = nodes[0].label
    env: dict[str, str] = {}
    head = nodes[0]  # node rank 0 (RLinf node_ranks may put it in any node group)
    for group in reversed(plan.cluster.node_groups):  # every group's env (earlier groups win); rank 0's last
        if group.label != head.label:
            env.update(group.env)
    # The one raylet is node rank 0 (RLINF_NODE_RANK=0): only node 0's env (group env, then its
    # env_configs entry) applies, as RLinf would.
    env.update(head.env)
    return {
        "num_cpus": sum(n.num_cpus for n in nodes),
        "num_gpus": sum(len(n.gpus) for n in nodes),
        "resources": resources,
        "labels": labels,
        "env": env,
        "nodes": len(nodes),
        "python": nodes[0].python,
    }


def local_warning(plan: Plan) -> str | None:
    n = len(plan.cluster.nodes)
    if n <= 1:
        return None
    return (
        f"the plan has {n} nodes; the local Ray mode runs ONE raylet carrying all their resources "
        f"(RLINF_NODE_RANK=0 for every Ray worker): per-node placement is only exercised on Slurm"
    )


def run_ray_locally(
    plan: Plan,
    *,
    run_dir: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    grace_s: float = 5.0,
    workdir: str | os.PathLike[str] | None = None,
) -> int:
    """The local Ray head, then the driver, both in `workdir` (default: the current directory); a driver
    whose program or Python script is not found from there is refused before anything starts."""
    from hpcplace.local.local_backend import (
        WORKDIR_HINT,
        new_run_id,
        resolve_workdir,
        shell_exit_code,
        startable_problem,
    )
    from hpcplace.runtime.plan_index import write_index
    from hpcplace.runtime.ray_driver import driver_env
    from hpcplace.runtime.ray_node import (
        AUTH_VARIABLES,
        auth_environment,
        port_candidates,
        port_free,
        stop_tree,
        wait_for,
    )

    base = dict(os.environ if environ is None else environ)
    from hpcplace.slurm.render import make_run_dir, write_ray_token

    cwd = resolve_workdir(workdir)
    problem = startable_problem(
        "the Ray driver", plan.launch.driver, cwd, {**base, **plan.launch.env}.get("PATH", os.defpath)
    )
    if problem is not None:
        raise LocalRayUsageError(problem, hint=WORKDIR_HINT)

    directory = Path(run_dir) if run_dir is not None else Path("runs") / new_run_id(plan.name)
    make_run_dir(directory)
    plan_path = directory.resolve() / "plan.json"
    plan_path.write_text(plan_to_json(plan), encoding="utf-8")
    write_index(plan_path)
    warning = local_warning(plan)
    if warning:
        print(f"hpcplace: warning: {warning}", file=sys.stderr)
    facts = local_raylet_facts(plan)
    port = next((p for p in port_candidates(str(os.getpid())) if port_free(p)), None)
    if port is None:
        raise LocalRayError("no free port for the local Ray head")
    temp = tempfile.mkdtemp(prefix="hpcplace-ray-")  # short: Ray's socket paths must fit 107 bytes
    launch_env = dict(plan.launch.env)
    write_ray_token(directory.resolve())
    env = {k: v for k, v in base.items() if k != "RAY_ADDRESS" and k not in AUTH_VARIABLES}
    env.update(facts["env"])
    env.update(auth_environment(launch_env, str(directory.resolve())))
    env.update(launch_env)
    env.update({"RLINF_NODE_RANK": "0", "HPCPLACE_RAY_NODE_RANK": "0", "RAY_USAGE_STATS_ENABLED": "0"})
    env.setdefault("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", "0")
    argv = [
        facts["python"] or sys.executable,
        "-m",
        "ray.scripts.scripts",
        "start",
        "--block",
        "--head",
        f"--port={port}",
        "--disable-usage-stats",
        "--include-dashboard=false",
        f"--num-cpus={max(facts['num_cpus'], 1)}",
        f"--num-gpus={facts['num_gpus']}",
        "--resources=" + json.dumps(facts["resources"], separators=(",", ":")),
        "--labels=" + ",".join(f"{k}={v}" for k, v in facts["labels"].items()),
        f"--temp-dir={temp}",
        f"--object-spilling-directory={temp}/spill",
        "--dashboard-agent-listen-port=0",
        "--min-worker-port=0",
        "--max-worker-port=0",
        *shlex.split(base.get("HPCPLACE_RAY_ARGS", "")),
    ]
    log = open(directory / "ray-head.log", "wb")  # noqa: SIM115 - the head's log: closed in the finally below
    print(
        f"hpcplace: starting a local Ray head on port {port} ({facts['num_cpus']} CPU(s), {facts['num_gpus']} "
        f"GPU(s), resources {facts['resources']}); run dir {directory}",
        file=sys.stderr,
    )
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd)
    driver = None
    try:

        def up() -> bool:
            if proc.poll() is not None:
                raise LocalRayError(
                    f"ray start exited with code {proc.returncode}", hint=f"see {directory / 'ray-head.log'}"
                )
            with socket.socket() as s:
                s.settimeout(0.5)
                return s.connect_ex(("127.0.0.1", port)) == 0

        try:
            wait_for("the local Ray head", up, plan.launch.join_timeout, 0.05)
        except Exception as exc:  # ShimError from the runtime: report as ours
            if isinstance(exc, HpcplaceError):
                raise
            raise LocalRayError(str(exc), hint=f"see {directory / 'ray-head.log'}") from None
        denv = driver_env(
            env, head="127.0.0.1", port=port, num_nodes=1, plan_path=str(plan_path), launch_env=launch_env
        )
        denv["RLINF_NODE_RANK"] = "0"
        print(f"hpcplace: running the driver: {shlex.join(plan.launch.driver)}", file=sys.stderr)
        try:
            driver = subprocess.Popen(list(plan.launch.driver), env=denv, cwd=cwd)
        except OSError as exc:
            raise LocalRayError(f"cannot run the driver {plan.launch.driver[0]!r}: {exc.strerror}") from None
        try:
            return shell_exit_code(_wait_driver(driver, proc, directory / "ray-head.log"))
        except KeyboardInterrupt:
            driver.send_signal(signal.SIGINT)
            try:
                driver.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                driver.kill()
                driver.wait()
            return 130
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
            driver.wait()
        stop_tree(proc)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)
        time.sleep(0)


def _wait_driver(driver: subprocess.Popen[bytes], head: subprocess.Popen[bytes], head_log: Path) -> int:
    """The driver's exit status; a head that exits first ends the run at once (its driver would wait on
    a cluster that is gone, forever)."""
    while True:
        try:
            return driver.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
        if head.poll() is not None:
            raise LocalRayError(
                f"the local Ray head exited with code {head.returncode} while the driver ran: stopping the driver",
                hint=f"see {head_log}",
            )
