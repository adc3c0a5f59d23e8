"""The Ray launch mode's driver step, on the head: wait for the cluster, then exec launch.driver.

1. Wait for <run dir>/ray/head.json (the head's `host:port`, written by ray_node.py).
2. Poll the GCS (`ray.nodes()`, Ray from the job's Python) until every planned node is alive,
   matched by its hpcplace.node_rank label; after launch.join_timeout, fail naming the missing
   node ranks, hosts and node groups.
3. Exec the driver argv from plan.json (never from a command line: no shell, no srun `:`), with
   RAY_ADDRESS (its own cluster's, whatever the submitting shell had), RAY_TMPDIR (the head's temp
   dir, the driver's node's: a default Ray temp dir stays in the job's), ROLL's RANK=0 / WORLD_SIZE=<nodes> / MASTER_ADDR=<head> / MASTER_PORT=<GCS port>
   (so ROLL finds the running cluster instead of starting one), HPCPLACE_PLAN, HPCPLACE_RUN_DIR and
   launch.env. Its exit code is the step's, hence the job's. Just before, the step's id goes to
   <run dir>/ray/driver.step: the batch script sends Slurm's time-limit warning to that step only.

`hpcplace attach RUN --driver -- CMD...` starts this same step into a held job, with `--argv FILE`
(the attached driver's argv, a JSON list the CLI wrote into the run directory): the same environment,
but once the cluster has joined (ray/bringup.json) it does not wait or import Ray again, and the
time-limit warning stays the first driver's.

Timings go to stderr (logs/driver.out) and <run dir>/ray/bringup.json (bench/ray_bringup.py).
"""

from __future__ import annotations

import os
import sys
import time

from hpcplace.runtime.errors import ShimError
from hpcplace.runtime.ip_order import IP_ORDER, read_overlay
from hpcplace.runtime.plan_index import PlanIndex
from hpcplace.runtime.ranks import chain_command, chain_environment
from hpcplace.runtime.ray_node import (
    AUTH_VARIABLES,
    LEAKED,
    auth_environment,
    group_node_ranks,
    parse_args,
    read_head,
    record_error,
    say,
    steer_environment,
    wait_for,
    write_json,
    write_text,
)
from hpcplace.runtime.slurm_env import node_name_at, read_snapshot

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

EXIT_NOT_JOINED = 3


def expected_nodes(header: dict[str, Any]) -> dict[int, tuple[int, int, str]]:
    """cluster node rank -> (het group, node index, node group label)."""
    out = {}
    for g, group in enumerate(header["node_groups"]):
        for j, rank in enumerate(group_node_ranks(group)):
            out[rank] = (g, j, group["label"])
    return dict(sorted(out.items()))


def joined_ranks(nodes: Sequence[Mapping[str, Any]]) -> set[int]:
    """Ranks of the alive Ray nodes, from their hpcplace.node_rank label."""
    out = set()
    for n in nodes:
        rank = (n.get("Labels") or {}).get("hpcplace.node_rank")
        if n.get("Alive") and rank is not None and str(rank).isdigit():
            out.add(int(rank))
    return out


def missing_text(
    missing: Sequence[int], expected: Mapping[int, tuple[int, int, str]], host_of: Callable[[int, int], str]
) -> str:
    parts = []
    for r in sorted(missing):
        g, j, label = expected[r]
        parts.append(f"node rank {r} on {host_of(g, j)} (node group {label}, het group {g} node {j})")
    return "; ".join(parts)


def driver_env(
    environ: Mapping[str, str],
    *,
    head: str,
    port: int,
    num_nodes: int,
    plan_path: str,
    launch_env: Mapping[str, str],
    temp_dir: str = "",
) -> dict[str, str]:
    """The driver's environment: its own cluster's RAY_ADDRESS set last, so neither the submitting
    shell nor launch.env can point it at another cluster (RLinf #463); the raylets' authentication
    (ray_node.auth_environment), never the submitting shell's."""
    env = {k: v for k, v in environ.items() if k not in LEAKED and k not in AUTH_VARIABLES}
    env.update(auth_environment(launch_env, os.path.dirname(os.path.abspath(plan_path))))
    env.update(launch_env)
    if temp_dir:
        env["RAY_TMPDIR"] = temp_dir
    env.update(
        {
            "RAY_ADDRESS": f"{head}:{port}",
            "RANK": "0",
            "WORLD_SIZE": str(num_nodes),
            "MASTER_ADDR": head,
            "MASTER_PORT": str(port),
            "HPCPLACE_PLAN": os.path.abspath(plan_path),
            "HPCPLACE_RUN_DIR": os.path.dirname(os.path.abspath(plan_path)),
            "RAY_USAGE_STATS_ENABLED": "0",
        }
    )
    return env


def ip_order_problem(
    nodes: Sequence[Mapping[str, Any]],
    expected: Mapping[int, tuple[int, int, str]],
    host_of: Callable[[int, int], str],
    framework: str = "verl",
    gpu_groups: frozenset[int] = frozenset(),
) -> str | None:
    """The plan numbers a framework's ranks in node-rank order; verl and slime number them over the nodes
    sorted by IP address (IP_ORDER), so those addresses must sort in node-rank order. The difference, or
    None. `gpu_groups`: the het groups whose nodes have GPUs (slime's group spans only those)."""
    key, scope = IP_ORDER[framework]
    address = {}
    for n in nodes:
        rank = (n.get("Labels") or {}).get("hpcplace.node_rank")
        if n.get("Alive") and rank is not None and str(rank).isdigit():
            address[int(rank)] = str(n.get("NodeManagerAddress") or "")
    groups: dict[str, list[int]] = {}
    for rank, (g, _j, label) in sorted(expected.items()):
        if scope == "by_group":
            groups.setdefault(f"node group {label}'s nodes", []).append(rank)
        elif g in gpu_groups:
            groups.setdefault("the job's GPU nodes", []).append(rank)
    how = "as a string" if scope == "by_group" else "as numbers"
    for what, ranks in groups.items():
        by_ip = sorted(ranks, key=lambda r: key(address.get(r, "")))
        if by_ip != ranks:
            shown = ", ".join(f"{address.get(r, '?')} (node rank {r}, {host_of(*expected[r][:2])})" for r in by_ip)
            return (
                f"{framework} orders {what} by IP address {how}: {shown}; the plan puts the first ranks on "
                f"node rank {ranks[0]}, {framework} would put them on node rank {by_ip[0]}"
            )
    return None


def wait_joined(
    address: str,
    expected: Mapping[int, tuple[int, int, str]],
    timeout: float,
    host_of: Callable[[int, int], str],
    ip_order: str | None = None,
    gpu_groups: frozenset[int] = frozenset(),
) -> float:
    """Poll the GCS until every expected rank is alive; returns when. Raises ShimError naming the missing.
    `ip_order` (a framework of IP_ORDER: verl, slime): then also check that the addresses sort as the
    plan's node ranks."""
    import logging

    import ray  # the job's Ray: only here, never on the shim's hot path

    ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False, configure_logging=False)
    try:
        deadline = time.monotonic() + timeout
        while True:
            missing = sorted(set(expected) - joined_ranks(ray.nodes()))  # type: ignore[no-untyped-call]  # unannotated in Ray
            if not missing:
                problem = (
                    ip_order_problem(ray.nodes(), expected, host_of, ip_order, gpu_groups)  # type: ignore[no-untyped-call]  # unannotated in Ray
                    if ip_order
                    else None
                )
                if problem is not None:
                    raise ShimError(
                        problem,
                        hint=f"{ip_order}'s ranks would not be the plan's: use nodes whose addresses sort as their "
                        f"node ranks, or a `network:` whose addresses do (docs/formats/{ip_order}.md)",
                    )
                return time.time()
            if time.monotonic() >= deadline:
                raise ShimError(
                    f"{len(missing)} of {len(expected)} Ray node(s) did not join within {timeout:g} s: "
                    f"{missing_text(missing, expected, host_of)}",
                    hint="see logs/ray.<host>.out of those hosts; raise launch.join_timeout if they are just slow",
                )
            time.sleep(0.2)
    finally:
        ray.shutdown()


# The frameworks whose placement groups name no node group: in a plan with several node groups, a watcher
# beside the driver checks that Ray put each pool on its planned group (NeMo-RL: by its groups' names;
# OpenRLHF: by its roles' actor classes) and stops the driver otherwise.
WATCHERS = {"nemo_rl": "hpcplace.runtime.nemo_rl_watch", "openrlhf": "hpcplace.runtime.openrlhf_watch"}


def watcher_module(framework: str, header: Mapping[str, Any]) -> str | None:
    """The watcher to start beside this plan's driver, or None (one node group: nothing to mix up)."""
    return WATCHERS.get(framework) if len(header["node_groups"]) > 1 else None


def _with_services(
    run_dir: str,
    components: Sequence[Mapping[str, Any]],
    driver: list[str],
    env: dict[str, str],
    launch_env: Mapping[str, str],
) -> list[str]:
    """Wait for every service of the job (runtime/services.py), then fill their addresses into the driver's
    command and launch.env's values, and HPCPLACE_SERVICE_* into its environment (`env`, updated)."""
    from hpcplace.runtime import services

    waits = {
        str(c["name"]): (int(c["world_size"]), float(c["service"]["timeout"])) for c in components if c.get("service")
    }
    say(f"waiting for service(s) {', '.join(waits)} to be ready")
    why = services.wait_services(run_dir, waits)
    if why is not None:
        raise ShimError(why, hint="the service's own log says why: hpcplace logs RUN --component NAME")
    given = {k: env[k] for k in launch_env if k in env}
    command, changes = services.with_addresses(run_dir, {n: w[0] for n, w in waits.items()}, driver, given)
    env.update({k: v for k, v in changes.items() if v is not None})
    write_text(os.path.join(run_dir, "ray", "services-ready"), f"{time.time()}\n")  # bench: ready -> driver
    say(f"service(s) {', '.join(waits)} ready; running the driver")
    return list(command)


def main(argv: Sequence[str]) -> int:
    t0 = time.time()
    args = list(argv)
    argv_file = None
    if "--argv" in args[:-1]:  # an attached driver (hpcplace attach)
        i = args.index("--argv")
        argv_file = args[i + 1]
        del args[i : i + 2]
    parsed = parse_args(args)
    if parsed is None:
        return 2
    plan_path, chdir = parsed
    run_dir = os.path.dirname(os.path.abspath(plan_path))
    bringup = os.path.join(run_dir, "ray", "bringup.json")
    try:
        snapshot = read_snapshot(os.environ)
        with PlanIndex(plan_path) as index:
            header = index.plan
            components = index.components
        launch = header.get("launch") or {}
        if argv_file is not None:
            from hpcplace.runtime.attached import read_argv

            driver = list(read_argv(argv_file))
        else:
            driver = [str(a) for a in launch.get("driver") or ()]
        if not driver:
            raise ShimError("plan.json has no launch.driver", hint="render the job with launch.mode: ray and a driver")
        timeout = float(launch.get("join_timeout") or 300)
        expected = expected_nodes(header)
        framework = str((header.get("source") or {}).get("format") or "")

        def host_of(g: int, j: int) -> str:
            reordered = read_overlay(os.path.join(run_dir, "logs")).get((g, j))  # a group in verl's/slime's IP order
            if reordered:
                return reordered
            try:
                return node_name_at(snapshot, g, j)
            except ShimError:
                return "?"

        head_file = os.path.join(run_dir, "ray", "head.json")
        try:
            info = wait_for("the Ray head", lambda: read_head(head_file, snapshot.job_id), timeout)
        except ShimError:
            raise ShimError(
                f"the Ray head never came up within {timeout:g} s: {missing_text([0], expected, host_of)}",
                hint="see logs/ray.<host>.out of the head",
            ) from None
        t_head = time.time()
        address = f"{info['host']}:{info['port']}"
        env = driver_env(
            os.environ,
            head=info["host"],
            port=int(info["port"]),
            num_nodes=len(expected),
            plan_path=plan_path,
            launch_env=launch.get("env") or {},
            temp_dir=str(info.get("temp_dir") or ""),
        )
        if info.get("interface"):  # `network:` on the head's node group: the head's interface (runtime/network.py)
            from hpcplace.runtime.network import environment

            env.update(environment(str(info["interface"]), str(info["host"])))
        chain_env = chain_environment(header, plan_path, os.environ)  # launch.chain: which link, its state dir
        env.update(chain_env)
        env.update(steer_environment(env, run_dir))  # the framework's Ray requests to their planned nodes
        if argv_file is None:  # the plan's driver resumes from the second link on (launch.resume)
            driver = list(chain_command(header, driver, chain_env))
        joined = argv_file is not None and os.path.exists(bringup)  # an attach to a cluster that is up
        for name in AUTH_VARIABLES:  # this process joins too (wait_joined): with the driver's authentication
            os.environ.pop(name, None)
        os.environ.update({name: env[name] for name in AUTH_VARIABLES if name in env})
        if not joined:
            t_joined = wait_joined(
                address,
                expected,
                max(timeout - (t_head - t0), 1.0),
                host_of,
                ip_order=framework if framework in IP_ORDER else None,
                gpu_groups=frozenset(g for g, group in enumerate(header["node_groups"]) if any(group["gpus_per_node"])),
            )
            start = os.environ.get("HPCPLACE_JOB_START")
            write_json(
                bringup,
                {
                    "nodes": len(expected),
                    "driver_step_start": t0,
                    "head_ready": t_head,
                    "all_joined": t_joined,
                    "driver_start": time.time(),
                    "job_start": float(start) if start else None,
                },
            )
            say(
                f"all {len(expected)} Ray node(s) joined at {address} ({t_joined - t0:.2f} s after this step "
                f"started); running the driver"
            )
        if any(c.get("service") for c in components):  # the job's services: ready first, then their addresses
            driver = _with_services(run_dir, components, driver, env, launch.get("env") or {})
        if chdir:
            os.chdir(chdir)
    except ShimError as exc:
        say(f"error: {exc}")
        record_error(run_dir, f"Ray driver: {exc.message}")
        return EXIT_NOT_JOINED
    # The batch script passes Slurm's time-limit warning on to this step alone (`scancel --signal`);
    # written last, so the signal finds the driver, not this wrapper.
    step = os.environ.get("SLURM_STEP_ID", "")
    if step.isdigit() and argv_file is None:
        write_text(os.path.join(run_dir, "ray", "driver.step"), step + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    watch = watcher_module(framework, header) if argv_file is None else None
    if watch is not None:
        import subprocess  # the framework's pools on their node groups, checked beside its driver (WATCHERS)

        watcher = [
            sys.executable,
            "-m",
            watch,
            address,
            os.path.join(run_dir, os.path.basename(plan_path)),  # the driver may have changed directory
            run_dir,
            str(os.getpid()),
        ]
        subprocess.Popen(watcher, env=env, stdin=subprocess.DEVNULL)  # an argv list of our own values, no shell
    try:
        os.execvpe(driver[0], driver, env)
    except OSError as exc:
        say(f"error: cannot run the driver {driver[0]!r}: {exc.strerror}")
        record_error(run_dir, f"Ray driver: cannot run {driver[0]!r}: {exc.strerror}")
        return 127
