"""`hpcplace attach | exec | shell | release`: iterate inside a running (held) job (hpcplace.slurm.attach)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

from hpcplace.errors import SpecError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hpcplace.slurm.attach import LiveRun, Target

RUN_HELP = "a run directory written by `hpcplace submit` (or, for exec/shell, by `hpcplace run --local -o DIR`)"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("attach", help="run a driver on a running Ray-mode job's head (a new step)")
    p.add_argument("run", metavar="RUN", help="a run directory written by `hpcplace submit`")
    p.add_argument(
        "--concurrent", action="store_true", help="run even while another attached driver runs (default: refused)"
    )
    p.add_argument(
        "--driver",
        nargs=argparse.REMAINDER,
        metavar="-- CMD",
        help="the driver and its arguments (everything after it)",
    )
    p.set_defaults(func=run_attach)

    for name, what in (
        ("exec", "run a command as one rank of a component (or on a node) of a running job"),
        ("shell", "an interactive shell as one rank of a component (or on a node) of a running job"),
    ):
        p = subparsers.add_parser(name, help=what)
        p.add_argument("run", metavar="RUN", help=RUN_HELP)
        p.add_argument("--component", help="the component whose rank's environment the command gets")
        p.add_argument("--rank", type=int, help="the rank of --component (its node, GPUs, ranks, env)")
        p.add_argument("--node", type=int, metavar="N", help="run on cluster node rank N instead (no rank's env)")
        if name == "exec":
            p.usage = "hpcplace exec [-h] RUN (--component NAME --rank R | --node N) -- CMD [ARGS...]"
        p.set_defaults(func=run_exec if name == "exec" else run_shell)

    p = subparsers.add_parser("release", help="end a held job (it cleans up like any job that finished)")
    p.add_argument("run", metavar="RUN", help="a run directory written by `hpcplace submit`")
    p.add_argument("--wait", action="store_true", help="wait until the job has ended")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait with --wait")
    p.set_defaults(func=run_release)


def _open_run(target: str) -> LiveRun:
    """attach.open_run, with an unreadable run directory said in one line (a damaged plan.json: load_plan)."""
    from hpcplace.slurm import attach

    try:
        return attach.open_run(target)
    except OSError as exc:
        raise SpecError(
            f"cannot read the run directory {target}: {exc.strerror or exc}",
            hint="give the run directory `hpcplace submit` printed after the job id",
        ) from None


def _say(text: str) -> None:
    print(f"hpcplace: {text}", file=sys.stderr, flush=True)


def run_attach(args: argparse.Namespace) -> int:
    import shutil
    from dataclasses import replace

    from hpcplace.config.launch import resolve_driver_interpreter
    from hpcplace.slurm import attach

    if not args.driver:
        raise SpecError("attach needs a driver", hint="hpcplace attach RUN --driver -- python main.py ...")
    run = _open_run(args.run)
    if not run.plan.launch.is_ray:
        raise SpecError(
            f"{run.run_dir} is a steps-mode job: there is no Ray cluster to attach a driver to",
            hint=f"run commands in its ranks with `hpcplace exec {shlex.quote(str(run.run_dir))} --component C --rank R "
            "-- CMD`",
        )
    attach.check_running(run.job_id, run.run_dir)
    if not args.concurrent:
        busy = attach.running_steps(run.job_id, attach.ATTACH_STEP)
        if busy:
            raise SpecError(
                f"another attached driver is running in job {run.job_id} (step {', '.join(busy)})",
                hint="wait for it to end, or pass --concurrent to run both",
            )
    if not run.plan.launch.hold:
        _say(f"warning: job {run.job_id} does not hold: it ends (and this driver with it) when its own driver ends")
    driver = resolve_driver_interpreter(
        replace(run.plan.launch, driver=tuple(args.driver)), shutil.which, sys.executable
    ).driver
    n, log = attach.claim_driver_log(run.run_dir)
    command = attach.write_command(run.run_dir, f"driver-{n}", driver)
    _say(f"driver {n} on the Ray head of job {run.job_id}; output also in {log}; Ctrl-C stops this driver only")
    rc = attach.run_step(attach.driver_argv(run, command), log=log)
    _say(f"driver {n} exited with code {rc}; the job and its Ray cluster stay up")
    return rc


def _target(args: argparse.Namespace, run: LiveRun) -> Target:
    from hpcplace.slurm import attach

    if args.node is not None:
        if args.component is not None or args.rank is not None:
            raise SpecError("--node runs on a node, --component/--rank as a rank: give one or the other")
        return attach.node_target(run.plan, args.node)
    if args.component is None or args.rank is None:
        raise SpecError(
            "say where to run: --component NAME --rank R (that rank's node and environment) or --node N",
            hint="`hpcplace plan` or `hpcplace logs RUN --list` shows the components and ranks",
        )
    return attach.rank_target(run.plan, args.component, args.rank)


def _local(args: argparse.Namespace, command: list[str]) -> int | None:
    """A `run --local` run directory: the command runs here with that rank's environment."""
    from hpcplace.local import local_backend

    path = Path(args.run)
    if not (path / local_backend.LOCAL_RECORD).exists() or (path / "run.json").exists():
        return None
    if args.node is not None or args.component is None or args.rank is None:
        raise SpecError("a local run directory takes --component NAME --rank R (every node is this machine)")
    return local_backend.exec_locally(path, args.component, args.rank, command)


def _exec(args: argparse.Namespace, command: list[str], pty: bool) -> int:
    from hpcplace.slurm import attach

    local = _local(args, command)
    if local is not None:
        return local
    run = _open_run(args.run)
    target = _target(args, run)
    attach.check_running(run.job_id, run.run_dir)
    file = attach.write_command(run.run_dir, "shell" if pty else "exec", command)
    argv = attach.exec_argv(
        run, target, file, component=None if args.node is not None else args.component, rank=args.rank, pty=pty
    )
    return attach.run_step(argv)


def run_exec(args: argparse.Namespace) -> int:
    command = list(getattr(args, "argv", None) or [])  # cut off after `--` by hpcplace.cli
    if not command:
        raise SpecError("exec needs a command", hint="hpcplace exec RUN --component actor --rank 0 -- nvidia-smi")
    return _exec(args, command, pty=False)


def run_shell(args: argparse.Namespace) -> int:
    return _exec(args, [os.environ.get("SHELL") or "/bin/bash", "-i"], pty=True)


def run_release(args: argparse.Namespace) -> int:
    from hpcplace.slurm import attach, submit

    run = _open_run(args.run)
    if not run.plan.launch.hold:
        raise SpecError(
            f"job {run.job_id} was not submitted to hold (launch.hold / --hold): nothing to release",
            hint=f"`hpcplace cancel {shlex.quote(str(run.run_dir))}` stops it",
        )
    status = attach.owned_status(run.job_id, run.run_dir)
    if status.done:
        print(f"job {run.job_id} had already ended: {status.state}; nothing to release")
        return 0
    attach.release(run)
    print(f"released job {run.job_id}: it stops its steps, cleans its nodes and ends")
    if args.wait:
        deadline = time.monotonic() + args.timeout
        while True:  # not yet done (said above)
            if time.monotonic() > deadline:
                raise SpecError(
                    f"job {run.job_id} has not ended {args.timeout:g} s after its release",
                    hint=f"`hpcplace status {shlex.quote(str(run.run_dir))}`; `hpcplace cancel` stops it",
                )
            time.sleep(0.5)
            status = submit.job_status(run.job_id)
            if status.done:
                break
        print(f"job {run.job_id}: {status.state}")
    return 0
