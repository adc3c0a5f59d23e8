"""`hpcplace run CONFIG --local`: run the whole plan on this machine (the local backend)."""

from __future__ import annotations

import argparse
import sys

from hpcplace.commands.plan_cmd import add_config_arguments, add_driver_argument, plan_with_launch
from hpcplace.errors import SpecError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run every process of the plan (--local: on this machine, without Slurm)",
        description="Run the plan on this machine: every process with exactly the environment the in-job "
        "shim gives it on the cluster; output prefixed [component rank]; the first failure or "
        "Ctrl-C stops everything. Before anything starts, every chosen process's program (and a "
        "Python's script) must be found from the working directory.",
    )
    add_config_arguments(parser)
    parser.add_argument("--local", action="store_true", help="run on this machine without Slurm (required for now)")
    parser.add_argument(
        "-o",
        "--run-dir",
        dest="run_dir",
        metavar="DIR",
        help="run directory: where plan.json and its index go (default: runs/<name>-local-<timestamp>-<pid>)",
    )
    parser.add_argument(
        "--workdir",
        metavar="DIR",
        help="directory the components' commands (and a Ray driver) run in: relative programs and "
        "scripts are found from there, as `render --workdir` does on the nodes "
        "(default: the current directory)",
    )
    parser.add_argument(
        "--component",
        dest="components",
        action="append",
        default=[],
        metavar="NAME",
        help="run only this component (repeatable); ranks and world sizes stay as planned; a "
        "collocation group's members must all be chosen (they take turns on shared GPUs)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print each process's command and environment")
    parser.add_argument(
        "--grace",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="time between SIGTERM and SIGKILL when stopping, 0 or more (default 5)",
    )
    add_driver_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.local:
        raise SpecError(
            "`hpcplace run` needs --local (the Slurm path is `hpcplace submit`)",
            hint="try the experiment here first: hpcplace run CONFIG --local",
        )
    if not args.grace >= 0:  # also NaN
        raise SpecError(f"--grace {args.grace:g}: give 0 or more seconds", hint="e.g. --grace 5 (the default)")
    from hpcplace.local.local_backend import resolve_workdir, run_plan_locally

    workdir = resolve_workdir(args.workdir)  # a bad --workdir is refused before the config is planned
    plan = plan_with_launch(args)
    images = sorted({g.container.describe() for g in plan.cluster.node_groups if g.container})
    if images:  # the same plan, this machine's own system: say so, never silently
        print(
            f"hpcplace: warning: --local runs every process on this machine's own system, not in "
            f"{', '.join(images)} (the container block applies to Slurm jobs)",
            file=sys.stderr,
        )
    if plan.launch.is_ray:
        from hpcplace.local.local_ray import run_ray_locally

        given = [option for option, used in (("--component", args.components), ("--dry-run", args.dry_run)) if used]
        if given:
            raise SpecError(
                f"{' and '.join(given)} {'does' if len(given) == 1 else 'do'} not apply to the Ray launch mode",
                hint=f"the driver starts every component itself; drop {' and '.join(given)}",
            )
        return run_ray_locally(plan, run_dir=args.run_dir, grace_s=args.grace, workdir=workdir)
    return run_plan_locally(
        plan,
        run_dir=args.run_dir,
        components=args.components,
        dry_run=args.dry_run,
        grace_s=args.grace,
        workdir=workdir,
    )
