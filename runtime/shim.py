"""`hpcplace-run`: the in-job shim every task of an hpcplace step starts through.

    hpcplace-run --plan plan.json --component NAME [--print-env] [--no-verify] [--verbose] [-- CMD ARGS...]
    hpcplace-run --preflight --plan plan.json     (the job script's per-node check: runtime/preflight.py)

It reads the Slurm environment once (`slurm_env.read_snapshot`), finds its own process in the
plan through the index beside plan.json (node name -> het group g and node j, SLURM_LOCALID ->
local rank), computes that process's environment (`ranks`), checks the GPUs with NVML when
nvidia-ml-py is installed, and then replaces itself with CMD (os.execvpe): signals and the exit
code belong to the user program. Without CMD it runs the component's command from the plan.
Nothing is applied before everything is computed; a variable the user set to another value is
never silently overwritten. Imports stdlib only (json only for --print-env).
"""

from __future__ import annotations

import os
import sys

from hpcplace.runtime.devices import GPU_MODES, DeviceChoice, check_devices, query_nvml
from hpcplace.runtime.errors import ShimError
from hpcplace.runtime.frozen import Frozen
from hpcplace.runtime.network import group_network
from hpcplace.runtime.plan_index import PlanIndex
from hpcplace.runtime.process_env import ProcessEnv
from hpcplace.runtime.ranks import (
    chain_command,
    chain_environment,
    compute_process_env,
    environment_changes,
    merge_environment,
    plan_environment,
)
from hpcplace.runtime.slurm_env import SlurmSnapshot, locate_node, node_name_at, read_snapshot

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hpcplace.runtime.services import TaskServices

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

PROG = "hpcplace-run"
PORT_CHECK_VARIABLE = "HPCPLACE_MASTER_PORT_CHECK"  # set to 1 by the job script: agree on a free MASTER_PORT
RANK_LOG_VARIABLE = "HPCPLACE_RANK_LOG"  # set by the job script: this rank's log file, `{rank}` = its plan rank
USAGE = f"""usage: {PROG} --plan PLAN.json --component NAME [--rank R] [--argv FILE] [--chdir DIR] [--print-env] [--no-verify] [--verbose] [-- CMD [ARGS...]]

Run one task of an hpcplace job step with its planned ranks and devices, then exec CMD
(default: the component's command from the plan).

  --plan PATH        plan.json written with the job (its index PATH.idx must be beside it)
  --component NAME   the component this step runs
  --chdir DIR        run CMD in DIR (the directory the job was submitted from)
  --rank R           this one task is rank R of the component, started into the running job from
                     outside it (`hpcplace exec`): node lists from the run dir's logs/nodes.txt
  --argv FILE        the command: a JSON list in FILE (written by `hpcplace exec`)
  --print-env        print the computed environment as JSON instead of running CMD
  --no-verify        skip the NVML check of the visible GPUs
  --verbose          explain the decisions on stderr (also HPCPLACE_DEBUG=1)
"""


class Options(Frozen):
    plan: str
    component: str
    command: tuple[str, ...]  # () = the plan's command
    chdir: str | None
    print_env: bool
    verify: bool
    verbose: bool
    rank: int | None = None  # `hpcplace exec`: one task started into the job from outside, as this rank
    argv_file: str | None = None


class Resolved(Frozen):
    """Everything computed for this task, before anything is applied."""

    info: ProcessEnv
    choice: DeviceChoice
    changes: dict[str, str | None]  # variables to set (None: unset)
    command: tuple[str, ...]
    snapshot: SlurmSnapshot
    gpu_type: str | None
    offload: bool
    # `network:` of the component's rank-0 node group is set: MASTER_ADDR is rank 0's address there
    # (rank 0 knows it; the others learn it from the run directory: _agree_master_addr)
    master_on_network: bool = False
    # a job with services: what to wait for, and a replica's port (runtime/services.py)
    services: TaskServices | None = None


def parse_args(argv: Sequence[str]) -> Options | None:
    """Options, or None for --help. Hand-written: argparse costs a few ms per task."""
    values: dict[str, str] = {}
    flags = {"--print-env": False, "--no-verify": False, "--verbose": False}
    command: tuple[str, ...] = ()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            command = tuple(argv[i + 1 :])
            break
        if arg in ("-h", "--help"):
            return None
        name, eq, value = arg.partition("=")
        if name in ("--plan", "--component", "--chdir", "--rank", "--argv"):
            if not eq:
                i += 1
                if i >= len(argv):
                    raise ShimError(f"{name} needs a value", hint=USAGE.splitlines()[0])
                value = argv[i]
            values[name] = value
        elif arg in flags:
            flags[arg] = True
        else:
            raise ShimError(f"unknown argument {arg!r}", hint="put the command after `--`; " + USAGE.splitlines()[0])
        i += 1
    missing = [name for name in ("--plan", "--component") if not values.get(name)]
    if missing:
        raise ShimError(f"missing {' and '.join(missing)}", hint=USAGE.splitlines()[0])
    rank = values.get("--rank")
    if rank is not None and not (rank.isascii() and rank.isdigit()):
        raise ShimError(f"--rank {rank!r} is not a rank (a non-negative integer)")
    if values.get("--argv"):
        from hpcplace.runtime.attached import read_argv

        command = read_argv(values["--argv"])
    return Options(
        plan=values["--plan"],
        component=values["--component"],
        command=command,
        chdir=values.get("--chdir") or None,
        print_env=flags["--print-env"],
        verify=not flags["--no-verify"],
        verbose=flags["--verbose"],
        rank=int(rank) if rank is not None else None,
        argv_file=values.get("--argv") or None,
    )


def resolve(options: Options, environ: Mapping[str, str], *, hostname: str | None = None) -> Resolved:
    """Find this task's process in the plan and compute its environment changes (pure but for reads)."""
    snapshot = read_snapshot(environ, hostname=hostname)
    with PlanIndex(options.plan) as index:
        ci = index.component_index(options.component)
        comp = index.components[ci]
        if options.rank is not None:
            return _resolve_attached(options, options.rank, index, ci, snapshot)
        g, j = locate_node(snapshot, index.het_groups(ci))
        # HPCPLACE_STEP_TASKS: set by the rendered script on every step; a component whose nodes differ
        # in layout inside one het group runs as several steps (one srun cannot repeat a het group).
        step_tasks = environ.get("HPCPLACE_STEP_TASKS", "")
        expected = int(step_tasks) if step_tasks.isdigit() else comp["world_size"]
        if snapshot.step_num_tasks is not None and snapshot.step_num_tasks != expected:
            raise ShimError(
                f"this step has {snapshot.step_num_tasks} tasks but component {comp['name']!r} has "
                f"{expected} processes{' in this step' if step_tasks.isdigit() else ''}",
                hint="run one srun step per component with exactly its planned tasks",
            )
        process = index.process_at(ci, g, j, snapshot.localid)
        if process is None:
            planned = index.processes_on(ci, g, j)
            raise ShimError(
                f"task with SLURM_LOCALID={snapshot.localid} on node {snapshot.node_name!r} "
                f"(het group {g}, node {j}), but the plan has {planned} process(es) of "
                f"{comp['name']!r} there",
                hint="the step must start exactly local_world_size tasks of the component per node",
            )
        return _resolved(options, index, ci, process, snapshot, g)


def _resolved(
    options: Options,
    index: PlanIndex,
    ci: int,
    process: dict[str, Any],
    snapshot: SlurmSnapshot,
    g: int,
    master_port: int | None = None,
) -> Resolved:
    """The environment of `process` (found by either path), computed once, the same way."""
    comp = index.components[ci]
    rank0 = process if process["rank"] == 0 else index.process(ci, 0)
    master_addr = node_name_at(snapshot, rank0["het_group"], rank0["group_node_index"])
    info, choice = compute_process_env(
        plan=index.plan,
        component=comp,
        component_index=ci,
        process=process,
        snapshot=snapshot,
        plan_path=index.plan_path,
        master_addr=master_addr,
    )
    changes = environment_changes(info, plan_environment(index.plan, comp, process))
    if master_port is not None:
        changes["MASTER_PORT"] = str(master_port)
    network = group_network(index.plan, process["het_group"])
    if network is not None:  # this node's interface and address for collectives (runtime/network.py)
        from hpcplace.runtime.network import environment, resolve

        changes.update(environment(*resolve(network)))
    master_on_network = group_network(index.plan, rank0["het_group"]) is not None
    if master_on_network and process["rank"] == 0:
        changes["MASTER_ADDR"] = changes["HPCPLACE_NETWORK_ADDR"]
    chain_env = chain_environment(index.plan, index.plan_path, os.environ)  # launch.chain: which link, its state
    changes.update(chain_env)
    own = tuple(comp.get("command") or ())  # a service starts as it is on every link: resuming is the trainer's
    command = options.command or (own if comp.get("service") else chain_command(index.plan, own, chain_env))
    if not command:
        raise ShimError(
            f"no command: component {comp['name']!r} has none in the plan",
            hint=f"give one after `--`: {PROG} --plan ... --component {comp['name']} -- CMD",
        )
    task_services = None
    if any(c.get("service") for c in index.components):  # the job's services: ports, waits, references
        from hpcplace.runtime import services

        try:
            command, changes, task_services = services.task_services(
                index.components,
                comp,
                process["rank"],
                command,
                changes,
                run_dir=os.path.dirname(index.plan_path),
                job_id=snapshot.job_id,
                attached=options.rank is not None,
            )
        except services.ServiceError as exc:
            raise ShimError(exc.message, hint=exc.hint) from None
    groups = index.plan.get("node_groups") or []
    gpu_type = groups[g].get("gpu_type") if g < len(groups) else None
    return Resolved(
        info=info,
        choice=choice,
        changes=changes,
        command=command,
        snapshot=snapshot,
        gpu_type=gpu_type,
        offload=bool(comp.get("offload")),
        master_on_network=master_on_network,
        services=task_services,
    )


def _resolve_attached(options: Options, rank: int, index: PlanIndex, ci: int, snapshot: SlurmSnapshot) -> Resolved:
    """`--rank R`: one task started into the running job (`hpcplace exec`), not one of a component's
    step: the node lists come from the job's logs/nodes.txt, the process from the rank (checked to live
    on this node), MASTER_PORT from what the component's rank 0 published in this job (if it did)."""
    from hpcplace.runtime.attached import attached_snapshot, check_rank_node, published_master_port

    run_dir = os.path.dirname(os.path.abspath(options.plan))
    snapshot = attached_snapshot(snapshot, run_dir)
    name = index.components[ci]["name"]
    process = index.process(ci, rank)
    check_rank_node(snapshot, process, index.het_groups(ci), f"rank {rank} of {name!r}")
    return _resolved(
        options,
        index,
        ci,
        process,
        snapshot,
        process["het_group"],
        published_master_port(run_dir, snapshot.job_id, name),
    )


def verify_devices(resolved: Resolved, debug: bool) -> None:
    """NVML check before the program starts: errors stop the task, warnings are printed."""
    if resolved.choice.mode not in GPU_MODES:
        return
    devices, why = query_nvml()
    if devices is None:
        if debug:
            _say(f"debug: GPUs not verified: {why}")
        return
    errors, warnings = check_devices(resolved.choice, devices, resolved.gpu_type, resolved.snapshot.node_name)
    for warning in warnings:
        _say(f"warning: {warning}")
    if errors:
        raise ShimError(
            "; ".join(errors),
            hint="check the step's GPU binding (--gpu-bind) and the cluster's GPU "
            "counts in the config; --no-verify skips this check",
        )


def _say(text: str) -> None:
    sys.stderr.write(f"{PROG}: {text}\n")


def _explain(resolved: Resolved) -> None:
    info = resolved.info
    _say(
        f"{info.component} rank {info.rank}/{info.world_size} on {resolved.snapshot.node_name} "
        f"(het group {info.het_group}, node {info.group_node_index}, "
        f"local {info.local_rank}/{info.local_world_size}); "
        f"CUDA_VISIBLE_DEVICES={resolved.choice.value!r}: {resolved.choice.note}; "
        f"MASTER_ADDR={resolved.changes.get('MASTER_ADDR')} MASTER_PORT={resolved.changes.get('MASTER_PORT')}"
        + (f" network {resolved.changes['NCCL_SOCKET_IFNAME']}" if "NCCL_SOCKET_IFNAME" in resolved.changes else "")
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    head = args[: args.index("--")] if "--" in args else args
    if "--on-node" in head:  # `hpcplace exec --node N`: a command on a node, no rank (runtime/attached.py)
        from hpcplace.runtime.attached import node_main

        return node_main(args)
    for flag, module in (("--ray-node", "ray_node"), ("--ray-driver", "ray_driver"), ("--preflight", "preflight")):
        if flag in head:  # the Ray launch mode's two in-job roles (runtime/ray_node.py, ray_driver.py), and
            # the per-node check the job script runs before any program (runtime/preflight.py)
            import importlib

            rest = list(args)
            rest.remove(flag)
            return int(importlib.import_module(f"hpcplace.runtime.{module}").main(rest))
    try:
        options = parse_args(args)
        if options is None:
            sys.stdout.write(USAGE)
            return 0
        debug = options.verbose or os.environ.get("HPCPLACE_DEBUG", "") not in ("", "0")
        resolved = resolve(options, os.environ)
        if not options.print_env and options.rank is None:
            _write_rank_log(os.environ.get(RANK_LOG_VARIABLE), resolved.info.rank)
        agree = not options.print_env and options.rank is None and os.environ.get(PORT_CHECK_VARIABLE) == "1"
        if resolved.master_on_network:
            resolved = _agree_master_addr(resolved, os.environ, options.plan, wait=agree)
        if agree:
            resolved = _agree_master_port(resolved, os.environ, options.plan)
        env = merge_environment(os.environ, resolved.changes)  # a variable set otherwise is refused before all else
        if debug:
            _explain(resolved)
        if options.verify:
            verify_devices(resolved, debug)
        if options.print_env:
            import json

            sys.stdout.write(
                json.dumps({"command": list(resolved.command), "env": resolved.changes}, indent=1, sort_keys=True)
                + "\n"
            )
            return 0
        if _make_shm_dir_unless_stopping(resolved, options.plan, debug):
            return 143  # as the SIGTERM it missed would have ended it
        if resolved.services is not None and options.rank is None:
            resolved = _start_with_services(resolved, os.path.dirname(os.path.abspath(options.plan)))
            env = merge_environment(os.environ, resolved.changes)  # again: with the services' addresses
        env.pop(RANK_LOG_VARIABLE, None)  # the program's own steps (srun inside it) name their logs themselves
        env.update(_memory_saver_env(resolved, env, debug))  # once, for the final command, before any chdir
        if options.chdir:
            try:
                os.chdir(options.chdir)
            except OSError as exc:
                raise ShimError(
                    f"cannot change to the working directory {options.chdir!r}: {exc.strerror}",
                    hint="the job runs programs where it was submitted from; that directory must be "
                    "on a filesystem every node sees (or pass --workdir)",
                ) from None
    except ShimError as exc:
        _say(f"error: {exc}")
        return exc.exit_code
    return _exec(resolved.command, env)


def _start_with_services(resolved: Resolved, run_dir: str) -> Resolved:
    """Wait for the services this task needs; a replica then publishes its address and forks its prober;
    the command and env get the addresses (runtime/services.py)."""
    from hpcplace.runtime import services

    task = resolved.services
    assert task is not None
    if task.waits_for:
        _say(f"waiting for service(s) {', '.join(task.waits_for)} to be ready")
        why = services.wait_services(run_dir, task.waits_for)
        if why is not None:
            raise ShimError(why, hint="the service's own log says why: hpcplace logs RUN --component NAME")
    if task.replica is not None and task.record is not None:
        name, replica, port = task.replica
        host = resolved.snapshot.node_name
        services.publish(run_dir, name, replica, host, port)
        services.start_probe(run_dir, name, replica, task.record, host, port)
    command, changes = services.with_addresses(run_dir, task.counts, resolved.command, resolved.changes)
    return resolved.replace(command=command, changes=changes)


def _write_rank_log(pattern: str | None, rank: int) -> None:
    """From here on this task's output (and its program's) goes to its rank's log file, named by
    component and plan rank (runtime/task_log.py): what it printed before went to srun's stderr."""
    if not pattern:
        return
    from hpcplace.runtime.task_log import fill, redirect_output

    path = fill(pattern, "rank", str(rank))
    why = redirect_output(path) if path else f"{RANK_LOG_VARIABLE}={pattern!r} names no file"
    if why:
        _say(f"warning: {why}; this rank's output goes to srun's")


def _agree_master_port(resolved: Resolved, environ: Mapping[str, str], plan_path: str) -> Resolved:
    """Rank 0 takes a MASTER_PORT nothing on its node listens on and publishes it; the other ranks
    wait for it (runtime/master_port.py). The job script turns this on (HPCPLACE_MASTER_PORT_CHECK=1)."""
    from hpcplace.runtime import master_port as mp
    from hpcplace.runtime.ranks import PORT_BASE, PORT_SPAN, PORT_STRIDE

    info = resolved.info
    path = mp.port_file(
        os.path.dirname(os.path.abspath(plan_path)), info.job_id, info.component, environ.get("SLURM_RESTART_COUNT", "")
    )
    if info.rank == 0:
        below = mp.ephemeral_range()[0]  # under the node's ephemeral ports (`exclusive: false` nodes)
        port = mp.choose_and_publish(path, mp.candidates(info.master_port, PORT_BASE, PORT_SPAN, PORT_STRIDE, below))
    else:
        port = mp.wait_published(path)
    return resolved.replace(changes={**resolved.changes, "MASTER_PORT": str(port)})


def _agree_master_addr(resolved: Resolved, environ: Mapping[str, str], plan_path: str, *, wait: bool) -> Resolved:
    """With `network:` on rank 0's node group, MASTER_ADDR is rank 0's address on that interface, which
    only rank 0's node can tell: rank 0 publishes it beside the MASTER_PORT file, the others wait for
    it (`wait`: in a job step) or take it when it is there (`--print-env`, `hpcplace exec`)."""
    from hpcplace.runtime import master_port as mp
    from hpcplace.runtime import network as net

    info = resolved.info
    restart = environ.get("SLURM_RESTART_COUNT", "") if wait else ""  # as _agree_master_port / attached.py
    path = net.address_file(
        mp.port_file(os.path.dirname(os.path.abspath(plan_path)), info.job_id, info.component, restart)
    )
    if info.rank == 0:
        if wait:
            net.publish_address(path, str(resolved.changes["MASTER_ADDR"]))
        return resolved
    address = net.wait_address(path, mp.WAIT_S) if wait else net.read_address(path)
    if address is None:
        return resolved
    return resolved.replace(changes={**resolved.changes, "MASTER_ADDR": address})


def _memory_saver_env(resolved: Resolved, env: dict[str, str], debug: bool) -> dict[str, str]:
    """torch_memory_saver's preload for GPU processes of offloading components, only where a GPU and
    libcuda exist (its LD_PRELOAD elsewhere stops every process from starting). HPCPLACE_MEMORY_SAVER=0
    turns it off."""
    if not resolved.offload or resolved.choice.mode not in GPU_MODES:
        return {}
    from hpcplace.runtime.devices import preload_wanted

    if not preload_wanted(env):
        return {}
    from hpcplace.runtime.preload import preload_env

    changes, why = preload_env(env, command=resolved.command)  # the program's Python may be another venv's
    if debug:
        _say(f"debug: {why}")
    return changes


def _make_shm_dir(path: str, debug: bool) -> None:
    """This node's directory <job dir>/node-<node>: created 0700 or checked to be the job's own (a
    directory another user made first, or a symlink there, fails the task naming path and owner)."""
    from hpcplace.runtime.shm_dir import ShmDirError, make_node_dir

    if not os.path.isdir(os.path.dirname(os.path.dirname(path))):  # no /dev/shm (not Linux): may not be needed
        if debug:
            _say(f"debug: no {os.path.dirname(os.path.dirname(path))}: not creating {path}")
        return
    try:
        make_node_dir(path)
    except ShmDirError as exc:
        raise ShimError(f"unsafe node-local directory: {exc.message}", hint=exc.hint) from None


def _make_shm_dir_unless_stopping(resolved: Resolved, plan_path: str, debug: bool) -> bool:
    """Make this node's directory, unless the job began stopping (True): a task whose process ran only after
    the job's stop signal (its step launched just before a component failed) missed that signal, and the
    node's guard removed the job's directory already, so it removes what it made and runs nothing. The stop
    signals are held from the mkdir to the stop-marker check (the job script writes its marker before it
    sends them), so no stop can end this task between the two and leave the directory behind."""
    # the builtin behind `signal`, already loaded (`import signal` costs ~0.7 ms a task); typeshed has no stub for it
    import _signal as signal  # type: ignore[import-not-found]

    from hpcplace.runtime.shm_dir import ShmDirError, job_stopping, remove_job_dir

    info = resolved.info
    stops = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)  # hp_stop_steps', scancel's, srun's
    held = signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    try:
        _make_shm_dir(info.shm_dir, debug)
        if not job_stopping(os.path.dirname(os.path.abspath(plan_path)), info.job_id, os.environ):
            return False
        if os.path.isdir(os.path.dirname(info.shm_dir)):
            try:
                remove_job_dir(info.shm_dir)
            except ShmDirError as exc:
                raise ShimError(f"unsafe node-local directory: {exc.message}", hint=exc.hint) from None
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a stop that came meanwhile ends this task now
    _say(f"{info.component} rank {info.rank}: the job is stopping (stopped before this task started): not starting it")
    return True


def _exec(command: tuple[str, ...], env: dict[str, str]) -> int:
    """Replace this process with the command, searching the new environment's PATH like execvpe
    (os.execvpe itself imports `warnings` for that: a quarter millisecond per task)."""
    sys.stdout.flush()
    sys.stderr.flush()
    program = command[0]
    if "/" in program:
        candidates = [program]
    else:
        candidates = [os.path.join(d or ".", program) for d in (env.get("PATH") or os.defpath).split(os.pathsep)]
    denied: OSError | None = None
    for candidate in candidates:
        try:
            os.execve(candidate, list(command), env)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except PermissionError as exc:
            denied = exc
        except OSError as exc:
            _say(f"error: cannot run {program!r}: {exc.strerror}")
            return 126
    if denied is not None:
        _say(f"error: permission denied: {program!r}")
        return 126
    _say(f"error: command not found: {program!r}")
    return 127
