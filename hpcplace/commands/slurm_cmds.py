"""`hpcplace render | submit | validate | status | cancel | logs`: the Slurm side of the CLI."""

from __future__ import annotations

import argparse
import shlex
import sys
from datetime import datetime
from pathlib import Path

from hpcplace.commands.plan_cmd import add_config_arguments, add_driver_argument, plan_with_launch
from hpcplace.errors import SlurmError, SpecError


def _template_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--template-dir", metavar="DIR",
                        help="site templates: a job.sbatch.j2 that extends \"hpcplace/job.sbatch.j2\"")
    parser.add_argument("--launcher", default="hpcplace-run", metavar="CMD",
                        help="how tasks start the shim on the nodes (default: hpcplace-run; "
                             "e.g. \"/opt/venv/bin/python -m hpcplace.runtime\")")
    parser.add_argument("--workdir", metavar="DIR", default=".",
                        help="directory the components' commands run in (default: the current directory, as "
                             "with `hpcplace run --local`)")


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("render", help="write DIR/job.sbatch and DIR/plan.json without submitting")
    add_config_arguments(p)
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="run directory to write")
    _template_args(p)
    add_driver_argument(p)
    p.set_defaults(func=run_render)

    p = subparsers.add_parser("submit", help="render into a run directory and sbatch it")
    add_config_arguments(p)
    p.add_argument("-o", "--run-dir", metavar="DIR",
                   help="run directory (default: <slurm.output_dir or runs>/<name>-<timestamp>); "
                        "submitting the same directory again never submits twice")
    p.add_argument("--dry-run", action="store_true", help="print the exact sbatch command and script only")
    p.add_argument("--test-only", action="store_true", help="ask Slurm whether and when it could run (sbatch --test-only)")
    p.add_argument("--no-validate", action="store_true", help="skip the check against the live cluster")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for each Slurm command")
    _template_args(p)
    add_driver_argument(p)
    p.set_defaults(func=run_submit)

    p = subparsers.add_parser("validate", help="check the job against the live cluster (sinfo/scontrol)")
    add_config_arguments(p)
    p.set_defaults(func=run_validate)

    p = subparsers.add_parser("status", help="state of each het component (and step) of a run or job")
    p.add_argument("target", metavar="RUN|JOBID")
    p.add_argument("--watch", action="store_true", help="refresh until the job is done")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between looks with --watch")
    p.set_defaults(func=run_status)

    p = subparsers.add_parser("cancel", help="cancel a run's job (every het component)")
    p.add_argument("target", metavar="RUN|JOBID")
    p.set_defaults(func=run_cancel)

    p = subparsers.add_parser("logs", help="per-component, per-rank logs of a run")
    p.add_argument("run", metavar="RUN")
    p.add_argument("--component", help="only this component")
    p.add_argument("--rank", type=int, help="only this rank (of --component, or of every component)")
    p.add_argument("--list", action="store_true", help="print where each rank's log is, not its content")
    p.add_argument("--tail", type=int, metavar="N", help="last N lines of each log")
    p.set_defaults(func=run_logs)


def _launcher(args: argparse.Namespace) -> tuple[str, ...]:
    words = tuple(shlex.split(args.launcher))
    if not words:
        raise SpecError("--launcher is empty")
    workdir = Path(args.workdir).resolve()
    if not workdir.is_dir():
        raise SpecError(f"--workdir {args.workdir!r} is not a directory")
    return (*words, "--chdir", str(workdir))


def _plan(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    return plan_with_launch(args)


def run_render(args: argparse.Namespace) -> int:
    from hpcplace.render import render_run

    plan = _plan(args)
    rendered = render_run(plan, args.output, launcher=_launcher(args), template_dir=args.template_dir)
    print(f"wrote {rendered.script} (sha256 {rendered.script_sha256[:16]}) and {rendered.plan_json}")
    return 0


def run_submit(args: argparse.Namespace) -> int:
    from hpcplace import submit, validate

    plan = _plan(args)
    launcher = _launcher(args)
    base = plan.slurm.get("output_dir") or "runs"
    run_dir = Path(args.run_dir) if args.run_dir else submit.default_run_dir(plan, base, datetime.now())
    if args.dry_run:
        sys.stdout.write(submit.dry_run_text(plan, run_dir, launcher=launcher, template_dir=args.template_dir))
        return 0
    if not args.no_validate:
        report = validate.validate(plan)
        for w in report.warnings:
            print(f"hpcplace: warning: {w}", file=sys.stderr)
    if args.test_only:
        print(submit.test_only(plan, launcher=launcher, template_dir=args.template_dir, timeout=args.timeout))
        return 0
    done = submit.submit(plan, run_dir, launcher=launcher, template_dir=args.template_dir, timeout=args.timeout,
                         say=lambda s: print(f"hpcplace: {s}", file=sys.stderr))
    print(f"job {done.job_id} ({done.run_dir})")
    return 0


def run_validate(args: argparse.Namespace) -> int:
    from hpcplace import validate

    report = validate.validate(_plan(args))
    for line in report.checked:
        print(f"ok: {line}")
    for w in report.warnings:
        print(f"warning: {w}")
    print("the cluster can run this job")
    return 0


def _labels(run_dir: Path | None) -> list[str]:
    from hpcplace import submit

    if run_dir is None:
        return []
    record = submit.read_record(run_dir) or {}
    labels = record.get("het_components")
    return [str(x) for x in labels] if isinstance(labels, list) else []


def run_status(args: argparse.Namespace) -> int:
    from hpcplace import submit

    job_id, run_dir = submit.resolve_job(args.target)
    labels = _labels(run_dir)
    if args.watch:
        status = submit.watch(job_id, labels=labels, interval=args.interval)
    else:
        status = submit.job_status(job_id)
        print(submit.format_status(status, labels))
    return 0 if status.state not in ("FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL") else 1


def run_cancel(args: argparse.Namespace) -> int:
    from hpcplace import submit

    job_id, _ = submit.resolve_job(args.target)
    submit.cancel(job_id)
    print(f"cancelled job {job_id} (every het component)")
    return 0


def run_logs(args: argparse.Namespace) -> int:
    from hpcplace import submit
    from hpcplace.slurm_job import lower

    run_dir = Path(args.run)
    plan_path = run_dir / "plan.json"
    if not plan_path.exists():
        raise SlurmError(f"{run_dir} is not a run directory (no plan.json)")
    plan = submit.load_plan(plan_path)
    if args.component is not None and args.component not in {c.name for c in plan.components}:
        raise SpecError(f"no component {args.component!r} in {plan_path}",
                        hint="components: " + ", ".join(c.name for c in plan.components))
    logs = submit.rank_logs(run_dir.absolute(), lower(plan), submit.read_hosts(run_dir))
    chosen = [r for r in logs if (args.component is None or r.component == args.component)
              and (args.rank is None or r.rank == args.rank)]
    if not chosen:
        raise SpecError(f"no rank {args.rank} in {args.component or 'any component'}")
    if args.component is None and args.rank is None and not args.list:
        for batch in sorted((run_dir / "logs").glob("batch-*.out")):
            _show(f"batch script ({batch})", batch, args.tail)
    for r in chosen:
        title = f"{r.component} rank {r.rank} ({r.where})"
        if args.list:
            print(f"{title}: {r.path if r.path else '(job has not started: no logs/nodes.txt)'}")
        else:
            _show(title, r.path, args.tail)
    return 0


def _show(title: str, path: Path | None, tail: int | None) -> None:
    print(f"==> {title} <==")
    if path is None or not path.exists():
        print("(no log yet)")
        return
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    for line in lines[-tail:] if tail else lines:
        print(line)
