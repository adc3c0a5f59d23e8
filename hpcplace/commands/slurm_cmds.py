"""`hpcplace render | submit | validate | status | cancel | logs`: the Slurm side of the CLI."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from hpcplace.commands.plan_cmd import LiveCluster, add_config_arguments, add_driver_argument, plan_with_launch
from hpcplace.errors import SlurmError, SpecError

if TYPE_CHECKING:
    from hpcplace.plan.plan import Plan
    from hpcplace.slurm.chain import LinkState
    from hpcplace.slurm.slurm_cli import SlurmVersion
    from hpcplace.slurm.submit import JobStatus, Submission


def _launcher_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--launcher",
        metavar="CMD",
        help="how tasks start the shim on the nodes (default: the hpcplace-run next to this "
        'Python, else "<this Python> -m hpcplace.runtime", as absolute paths; a bare '
        'program name is looked up on PATH now, e.g. "/opt/venv/bin/python -m hpcplace.runtime")',
    )
    parser.add_argument(
        "--workdir",
        metavar="DIR",
        default=".",
        help="directory the components' commands (and a relative Ray driver) run in, on every node "
        "(default: the current directory, as with `hpcplace run --local`)",
    )


def _hold_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--hold",
        action="store_true",
        help="keep the job (and its Ray cluster) up after the driver/components, for `hpcplace "
        "attach | exec | shell`, until `hpcplace release`, cancel or the time limit "
        "(launch.hold: true)",
    )


def _chain_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--chain",
        type=int,
        metavar="N",
        help="run longer than the time limit: submit the run as up to N jobs of the same job.sbatch, each "
        "starting when the one before ended (--dependency=singleton) and resuming from HPCPLACE_CHAIN_STATE; "
        "a link that exits 0 before its time limit, or fails, cancels the later ones (launch.chain: N)",
    )


def _template_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--template-dir", metavar="DIR", help='site templates: a job.sbatch.j2 that extends "hpcplace/job.sbatch.j2"'
    )
    _launcher_args(parser)


def add_run_dir_argument(parser: argparse.ArgumentParser, default: str) -> None:
    """`-o DIR` (alias `--run-dir`): the run directory, the same on render, submit and run."""
    parser.add_argument(
        "-o", "--run-dir", "--output", dest="run_dir", metavar="DIR", help=f"run directory (default: {default})"
    )


RUN_DIR_DEFAULT = "<slurm.output_dir or runs>/<name>-<timestamp>"
TARGET_HELP = (
    "a run directory written by `hpcplace submit` (it holds run.json with the job id), or a Slurm job "
    "id such as 1234 (its run directory is found from the job's working directory)"
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("render", help="write DIR/job.sbatch and DIR/plan.json without submitting")
    add_config_arguments(p)
    add_run_dir_argument(p, RUN_DIR_DEFAULT)
    p.add_argument(
        "--force",
        action="store_true",
        help="write even over a run directory that was already submitted (its queued or running "
        "job would read the new plan.json)",
    )
    _template_args(p)
    _hold_argument(p)
    _chain_argument(p)
    add_driver_argument(p)
    p.set_defaults(func=run_render)

    p = subparsers.add_parser("submit", help="render into a run directory and sbatch it")
    add_config_arguments(p)
    add_run_dir_argument(
        p,
        RUN_DIR_DEFAULT + "; submitting the same directory again never submits twice: "
        'it exits 0 and prints "already submitted as job N (DIR); nothing submitted"',
    )
    p.add_argument("--dry-run", action="store_true", help="print the exact sbatch command and script only")
    p.add_argument(
        "--test-only", action="store_true", help="ask Slurm whether and when it could run (sbatch --test-only)"
    )
    p.add_argument("--no-validate", action="store_true", help="skip the check against the live cluster")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for each Slurm command")
    _template_args(p)
    _hold_argument(p)
    _chain_argument(p)
    add_driver_argument(p)
    p.set_defaults(func=run_submit)

    p = subparsers.add_parser("validate", help="check the job against the live cluster (sinfo/scontrol)")
    add_config_arguments(p)
    _launcher_args(p)
    add_driver_argument(p)
    p.set_defaults(func=run_validate)

    p = subparsers.add_parser("status", help="state of each het component (and step) of a run or job")
    p.add_argument("target", metavar="RUN|JOBID", help=TARGET_HELP)
    p.add_argument(
        "--watch",
        action="store_true",
        help="refresh until the job is done; exit 0 only if every component COMPLETED "
        "(10 FAILED, 11 CANCELLED, 12 TIMEOUT, 13 other)",
    )
    p.add_argument("--interval", type=float, default=1.0, help="seconds between looks with --watch")
    p.set_defaults(func=run_status)

    p = subparsers.add_parser("cancel", help="cancel a run's job (every het component)")
    p.add_argument("target", metavar="RUN|JOBID", help=TARGET_HELP)
    p.set_defaults(func=run_cancel)

    p = subparsers.add_parser("logs", help="per-component, per-rank logs of a run")
    p.add_argument(
        "run",
        metavar="RUN|JOBID",
        help="a run directory (written by `hpcplace submit`, or rendered and "
        "sbatch'd by hand), or a Slurm job id such as 1234 (its run directory is found from the job)",
    )
    p.add_argument("--component", help="only this component")
    p.add_argument("--rank", type=int, help="only this rank (of --component, or of every component)")
    p.add_argument("--list", action="store_true", help="print where each rank's log is, not its content")
    p.add_argument("--tail", type=int, metavar="N", help="last N lines of each log (a positive number)")
    p.add_argument(
        "--attempt",
        type=int,
        metavar="N",
        help="logs of attempt N of a requeued job (default: the latest; earlier ones are in logs/attempt-N)",
    )
    p.add_argument(
        "--link",
        type=int,
        metavar="K",
        help="logs of link K (0-based) of a chain of jobs (default: the running or last link; earlier "
        "links' logs are in logs/link-K)",
    )
    p.set_defaults(func=run_logs)


def default_launcher(executable: str = sys.executable) -> tuple[str, ...]:
    """The shim of the environment hpcplace runs in, as absolute paths (never a name the node's PATH
    resolves): the `hpcplace-run` next to this Python (the venv's bin), else `<python> -m hpcplace.runtime`.
    The path is not resolved through symlinks: a venv's python is a link, and the venv is its path."""
    python = os.path.abspath(executable)
    script = os.path.join(os.path.dirname(python), "hpcplace-run")
    if os.path.isfile(script) and os.access(script, os.X_OK):
        return (script,)
    return (python, "-m", "hpcplace.runtime")


def _launcher(args: argparse.Namespace) -> tuple[str, ...]:
    """The launcher argv (absolute program) plus `--chdir WORKDIR`."""
    from hpcplace.config.safe_words import check_srun_argv

    if args.launcher is None:
        words = default_launcher()
    else:
        try:
            words = tuple(shlex.split(args.launcher))
        except ValueError as exc:
            raise SpecError(f"cannot split --launcher {args.launcher!r}: {exc}") from None
        if not words:
            raise SpecError("--launcher is empty")
        check_srun_argv(words, f"--launcher {args.launcher!r}")
        words = (_absolute_program(words[0]), *words[1:])
    workdir = Path(args.workdir).resolve()
    if not workdir.is_dir():
        raise SpecError(f"--workdir {args.workdir!r} is not a directory")
    return (*words, "--chdir", str(workdir))


def _absolute_program(program: str) -> str:
    """A bare name is looked up on PATH here, at submit time (the nodes' PATH may differ); a relative
    path is made absolute."""
    if "/" in program:
        return os.path.abspath(program)
    found = shutil.which(program)
    if found is None:
        raise SpecError(
            f"--launcher program {program!r} was not found on PATH",
            hint='give its absolute path, e.g. --launcher "/opt/venv/bin/hpcplace-run"',
        )
    return os.path.abspath(found)


def _plan(args: argparse.Namespace, cluster: LiveCluster | None = None) -> Plan:
    """The plan with `--driver` applied and a bare `python` driver made the submitting environment's."""
    from dataclasses import replace

    from hpcplace.config.launch import resolve_driver_interpreter, with_chain

    plan = plan_with_launch(args, cluster)
    launch = with_chain(plan.launch, getattr(args, "chain", None), plan.source_format)
    launch = resolve_driver_interpreter(launch, shutil.which, sys.executable)
    return plan if launch == plan.launch else replace(plan, launch=launch)


def _runnable_plan(args: argparse.Namespace, cluster: LiveCluster | None = None) -> Plan:
    """`_plan`, refused when its processes would have nothing to run ("no driver, no job")."""
    from hpcplace.plan.runnable import check_runnable

    plan = _plan(args, cluster)
    check_runnable(plan)
    for warning in plan.warnings:  # what `plan` lists: a render or submit is never silent about it
        print(f"hpcplace: warning: {warning}", file=sys.stderr)
    return plan


def _run_dir(args: argparse.Namespace, plan: Plan) -> Path:
    from hpcplace.slurm import submit

    if args.run_dir:
        return Path(args.run_dir).absolute()
    return submit.default_run_dir(plan, plan.slurm.get("output_dir") or "runs", datetime.now())


def _warn_unshared(plan: Plan, launcher: tuple[str, ...], run_dir: Path) -> None:
    """Warn (stderr) about every path the job needs on the nodes that lies on this host alone."""
    from hpcplace.config.spec import shared_paths
    from hpcplace.slurm.shared_fs import CheckedPath, path_warnings, read_mounts

    workdir = launcher[launcher.index("--chdir") + 1]
    paths = [
        CheckedPath.of(
            "the launcher",
            launcher[0],
            "install hpcplace in an environment on shared storage, or pass --launcher with one the nodes have",
        ),
        CheckedPath.of(
            "the working directory", workdir, "run hpcplace from (or pass --workdir) a directory on shared storage"
        ),
        CheckedPath.of("the run directory", str(run_dir), "pass -o DIR (or set slurm.output_dir) on shared storage"),
    ]
    driver = plan.launch.driver if plan.launch.is_ray else ()
    if driver and os.path.isabs(driver[0]):
        paths.append(
            CheckedPath.of(
                "the Ray driver's program",
                driver[0],
                "create the environment on shared storage, or start the driver with a program the nodes have",
            )
        )
    paths += [
        CheckedPath.of(f"the {kind} of {what}", path, "keep it on shared storage")
        for what, kind, _, path in _job_files(plan, workdir)
        if os.path.exists(path)
    ]
    for line in path_warnings(paths, read_mounts(), shared_paths(plan.slurm)):
        print(f"hpcplace: warning: {line}", file=sys.stderr)
    for line in missing_files(plan, workdir):
        print(f"hpcplace: warning: {line}", file=sys.stderr)
    problem = _ray_missing(plan, launcher)
    if problem:
        print(f"hpcplace: warning: {problem}", file=sys.stderr)


def _ray_missing(plan: Plan, launcher: tuple[str, ...]) -> str | None:
    """The Ray launch mode runs `python -m ray` on every node with the launcher's Python: this environment's,
    unless --launcher names another. Said now, not after the queue wait (the job's preflight stops on it)."""
    import importlib.util

    if not plan.launch.is_ray or os.path.dirname(launcher[0]) != os.path.dirname(default_launcher()[0]):
        return None
    if importlib.util.find_spec("ray") is not None:
        return None
    return (
        f"the Ray launch mode starts Ray with this environment's Python ({sys.executable}), which cannot import "
        "ray: the job would stop at its preflight; pip install 'hpcplace[ray]' into it"
    )


def _job_files(plan: Plan, workdir: str) -> list[tuple[str, str, str, str]]:
    """(who, "program"|"script", as written, absolute path) of every program given by path and Python script
    (`python train.py`) the job starts: the components' commands, or the Ray driver (bare program names are
    looked up on the nodes' PATH, which is theirs to say)."""
    from hpcplace.runtime.preflight import python_script

    commands = (
        [("the Ray driver", plan.launch.driver)]
        if plan.launch.is_ray
        else [(f"component {c.name!r}", c.command) for c in plan.components]
    )
    files = []
    for what, command in commands:
        if not command:
            continue
        for kind, name in (("program", command[0] if "/" in command[0] else None), ("script", python_script(command))):
            if name is not None:
                files.append((what, kind, name, os.path.abspath(os.path.join(workdir, name))))
    return files


def missing_files(plan: Plan, workdir: str) -> list[str]:
    """The job's programs and scripts (_job_files) that are not there: the job's preflight would fail on
    them after the queue wait."""
    lines = []
    for what, kind, name, path in _job_files(plan, workdir):
        if os.path.exists(path):
            continue
        if os.path.isabs(name):
            lines.append(f"{what}: its {kind} {name} does not exist: the job would fail at its start")
        else:
            lines.append(
                f"{what}: its {kind} {name!r} is not in the working directory {workdir}: the job "
                "would fail at its start (pass --workdir DIR, or give the path from there)"
            )
    return lines


def run_render(args: argparse.Namespace) -> int:
    from hpcplace.slurm.render import render_run

    plan = _runnable_plan(args)
    launcher = _launcher(args)
    run_dir = _run_dir(args, plan)
    if not args.force:
        _refuse_submitted(run_dir)
    for line in missing_files(plan, launcher[launcher.index("--chdir") + 1]):
        print(f"hpcplace: warning: {line}", file=sys.stderr)
    rendered = render_run(plan, run_dir, launcher=launcher, template_dir=args.template_dir)
    print(f"wrote {rendered.script} (sha256 {rendered.script_sha256[:16]}) and {rendered.plan_json}")
    return 0


def _refuse_submitted(run_dir: Path) -> None:
    """`render -o` over a submitted run directory would replace the plan.json its job reads."""
    from hpcplace.slurm import submit

    if not run_dir.is_dir():
        return
    record = submit.read_record(run_dir.absolute()) or {}
    if record.get("job_id"):
        raise SpecError(
            f"{run_dir} was submitted as job {record['job_id']}: rendering over it would replace the "
            "plan.json that job reads",
            hint="render into a new directory, or pass --force",
        )
    if (run_dir / submit.LOCK_NAME).exists():
        raise SpecError(
            f"{run_dir} is being submitted ({submit.LOCK_NAME} exists)",
            hint="render into a new directory, or pass --force",
        )


def run_submit(args: argparse.Namespace) -> int:
    from hpcplace.slurm import slurm_cli, submit
    from hpcplace.slurm.container_launch import refuse_unsupported

    cluster = LiveCluster()
    plan = _runnable_plan(args, cluster)
    launcher = _launcher(args)
    run_dir = _run_dir(args, plan)
    _warn_unshared(plan, launcher, run_dir)
    if args.dry_run:
        sys.stdout.write(submit.dry_run_text(plan, run_dir, launcher=launcher, template_dir=args.template_dir))
        return 0
    version = slurm_cli.site_version(timeout=args.timeout)  # once; refused here when older than supported
    refuse_unsupported(plan, (version.major, version.minor))
    if not args.no_validate:
        _validate_warn(plan, cluster, version)
    if args.test_only:
        print(submit.test_only(plan, launcher=launcher, template_dir=args.template_dir, timeout=args.timeout))
        return 0
    done = _sbatch(plan, args, launcher, run_dir, version)
    if done.already_submitted:  # idempotent (exit 0), but a script reading stdout must not see a new job
        print(f"already submitted as job {done.job_id} ({done.run_dir}); nothing submitted")
    else:
        print(f"job {done.job_id} ({done.run_dir})")
    from hpcplace.slurm import chain

    ids = chain.chain_ids(submit.read_record(done.run_dir))
    if ids:
        print(f"chain of {len(ids)} jobs: {' '.join(ids)} (each starts when the one before it ended)")
    return 0


def _validate_warn(plan: Plan, cluster: LiveCluster | None = None, version: SlurmVersion | None = None) -> None:
    from hpcplace.slurm import validate

    for w in validate.validate(plan, (cluster or LiveCluster()).facts(), version).warnings:
        print(f"hpcplace: warning: {w}", file=sys.stderr)


def _sbatch(
    plan: Plan, args: argparse.Namespace, launcher: tuple[str, ...], run_dir: Path, version: SlurmVersion
) -> Submission:
    from hpcplace.slurm import submit

    return submit.submit(
        plan,
        run_dir,
        launcher=launcher,
        template_dir=args.template_dir,
        timeout=args.timeout,
        say=lambda s: print(f"hpcplace: {s}", file=sys.stderr),
        slurm_version=version,
    )


def submit_checked(plan: Plan, args: argparse.Namespace, launcher: tuple[str, ...], run_dir: Path) -> Submission:
    """What `hpcplace submit` does after planning, for other commands that submit (`tune --submit-top`):
    warn about paths the nodes cannot see, read the site's Slurm version (refused when too old), check the
    live cluster, sbatch once per run directory."""
    from hpcplace.slurm import slurm_cli

    _warn_unshared(plan, launcher, run_dir)
    version = slurm_cli.site_version(timeout=args.timeout)
    _validate_warn(plan, None, version)
    return _sbatch(plan, args, launcher, run_dir, version)


def run_validate(args: argparse.Namespace) -> int:
    from hpcplace.slurm import slurm_cli, validate

    cluster = LiveCluster()
    plan = _plan(args, cluster)
    _warn_unshared(plan, _launcher(args), Path(plan.slurm.get("output_dir") or "runs").absolute())
    version = slurm_cli.site_version()  # an unsupported Slurm is said before anything is compared
    report = validate.validate(plan, cluster.facts(), version)
    for line in report.checked:
        print(f"ok: {line}")
    for w in report.warnings:
        print(f"warning: {w}")
    print("the cluster can run this job")
    return 0


def _labels(run_dir: Path | None) -> list[str]:
    from hpcplace.slurm import submit

    if run_dir is None:
        return []
    record = submit.read_record(run_dir) or {}
    labels = record.get("het_components")
    return [str(x) for x in labels] if isinstance(labels, list) else []


def run_status(args: argparse.Namespace) -> int:
    """Exit code: 0 when every het component COMPLETED (or, without --watch, the job has not ended
    yet); 10 FAILED, 11 CANCELLED, 12 TIMEOUT, 13 another end (docs/slurm-job.md, "Exit codes")."""
    from hpcplace.slurm import attach, chain, run_report, slurm_cli, submit

    job_id, run_dir, status = _job_and_run(args.target)
    labels = _labels(run_dir)
    version = slurm_cli.try_read_version()  # this host's sacct printed the exit codes: read them in its encoding
    links = _chain_links(run_dir, args)
    if links:  # a chain: every link's state, then the running (or last) link's details as for one job
        current = chain.current_link(links)
        if current.job_id != job_id and run_dir is not None:
            job_id, status = current.job_id, attach.owned_status(current.job_id, run_dir)
    if args.watch and links:
        status = submit.job_status(job_id)
        print(submit.format_status(status, labels, version))
    elif args.watch:
        status = submit.watch(job_id, labels=labels, interval=args.interval, version=version)
    else:
        print(submit.format_status(status, labels, version))  # its first line stays `job N: STATE (from SOURCE)`
    recorded = submit.recorded_slurm_version(submit.read_record(run_dir)) if run_dir is not None else None
    print(run_report.slurm_version_line(version, recorded))
    if run_dir is not None and not Path(args.target).is_dir():  # found from the job id
        print(f"  run directory: {run_dir}")
    attempts = submit.read_attempts(run_dir) if run_dir is not None else []
    if attempts:
        print(f"  attempts ({len(attempts)}, one per start; a requeued job starts again):")
        print("\n".join(submit.format_attempts(attempts)))
    if run_dir is not None:
        preflight = run_dir / "logs" / "preflight.txt"  # written by the job when a node failed its preflight
        if preflight.exists():
            print("  preflight failed (no program was started):")
            print("\n".join(f"    {line}" for line in preflight.read_text(encoding="utf-8").splitlines()))
        plan = _run_plan(run_dir)  # once, for the Ray and the hold lines
        waits = not status.done and status.state != "PENDING" and (plan is None or bool(plan.launch.driver))
        for line in _ray_status(run_dir, waits):
            print(line)
        for line in run_report.job_gpu_lines(run_dir):  # a job sharing its nodes: the physical GPUs it used
            print(line)
        ended_failed = status.done and status.state != "COMPLETED" and not preflight.exists()
        for line in run_report.read_failure(run_dir, job_id, ended_failed):
            print(line)
        for line in _hold_status(run_dir, plan, status.state):
            print(line)
        for line in _launch_failure(status, run_dir, job_id):
            print(line)
    if links:
        return chain.chain_exit_code(links)
    return submit.status_exit_code(status)


def _chain_links(run_dir: Path | None, args: argparse.Namespace) -> list[LinkState]:
    """A chain's links with their states, printed (with `--watch`: again on every change until no link is
    pending or running); empty for a run that is not a chain."""
    import time

    from hpcplace.slurm import chain, submit

    ids = chain.chain_ids(submit.read_record(run_dir)) if run_dir is not None else []
    if run_dir is None or not ids:
        return []
    recorded = (submit.read_record(run_dir) or {}).get("chain_length")
    length = recorded if isinstance(recorded, int) else len(ids)
    links = _link_states(run_dir, ids)
    shown = chain.format_chain(links, length)
    print("\n".join(shown))
    delay = args.interval
    while args.watch and not chain.chain_done(links):
        time.sleep(delay)
        delay = min(delay * 2, submit.WATCH_MAX_DELAY_S)
        links = _link_states(run_dir, ids)
        now = chain.format_chain(links, length)
        if now != shown:
            print("\n".join(now))
            shown = now
    return links


def _link_states(run_dir: Path, ids: list[str]) -> list[LinkState]:
    from hpcplace.slurm import chain, submit

    records = chain.read_chain(run_dir)
    by_job = {r.job_id: r for r in records.values()}
    return [
        chain.LinkState(i, job_id, submit.job_status(job_id).state, by_job.get(job_id)) for i, job_id in enumerate(ids)
    ]


def _launch_failure(status: JobStatus, run_dir: Path, job_id: str) -> list[str]:
    """A job that failed without writing its batch log, explained: the node could not enter the run
    directory. Slurm says so in two ways: 22.05 never starts the batch script (a bare
    JobLaunchFailure); 24.11 and 26.05 start it anyway, and it fails at once (NonZeroExitCode, exit 1)."""
    batch_log = run_dir / "logs" / f"batch-{job_id}.out"
    launch_failed = any(c.reason == "JobLaunchFailure" for c in status.components)
    if launch_failed and batch_log.exists():
        return [
            "  the batch script never started on the node (Slurm: JobLaunchFailure): the node's slurmd log "
            "has Slurm's own words"
        ]
    if batch_log.exists() or not (launch_failed or status.state == "FAILED"):
        return []
    started = (
        "the batch script never started on the node (Slurm: JobLaunchFailure)"
        if launch_failed
        else "the batch script failed at once"
    )
    return [
        f"  {started}, and wrote no {batch_log}: "
        f"the run directory {run_dir} (the job's working directory) must be on storage every node mounts, "
        "as must the venv; `hpcplace submit` warns when it is not"
    ]


def _run_plan(run_dir: Path) -> Plan | None:
    """The run directory's plan, or None when it cannot be read (status then says less, never fails)."""
    from hpcplace.slurm import submit

    try:
        return submit.load_plan(run_dir / "plan.json")
    except (OSError, ValueError, KeyError, SlurmError, SpecError):
        return None


def _hold_status(run_dir: Path, plan: Plan | None, state: str) -> list[str]:
    """A held job: that it is held and how to attach; the Ray dashboard's address (hpcplace.slurm.attach)."""
    import json
    import socket

    from hpcplace.slurm.attach import hold_lines

    if plan is None:
        return []
    try:
        head = json.loads((run_dir / "ray" / "head.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        head = None
    return hold_lines(run_dir, plan, state, head if isinstance(head, dict) else None, socket.gethostname())


def _job_and_run(target: str) -> tuple[str, Path | None, JobStatus]:
    """`RUN|JOBID` -> (job id, run directory or None, Slurm's status of the job). A job id finds its run
    directory through the job's working directory (or batch script, or batch log); a run directory's
    recorded job must still be that run's (job ids restart when a cluster's state is reset)."""
    from hpcplace.slurm import attach, run_report, submit

    job_id, run_dir = submit.resolve_job(target)
    if run_dir is not None:
        return job_id, run_dir, attach.owned_status(job_id, run_dir)
    status = submit.known_status(job_id)  # an unknown job is an error, not an empty table
    return job_id, run_report.find_run_dir(status), status


def run_cancel(args: argparse.Namespace) -> int:
    from hpcplace.slurm import chain, submit

    job_id, run_dir, _status = _job_and_run(args.target)  # never cancels another run's job of the same id
    ids = chain.chain_ids(submit.read_record(run_dir)) if run_dir is not None else []
    if not ids:
        print(submit.cancel(job_id))
        return 0
    # A chain: every link, the pending ones first (the last first), then the running one: cancelled first,
    # its batch script would cancel the pending links itself (a link that fails ends its chain), racing
    # this loop, and a pending link could start in between. Said in link order.
    said: dict[int, str] = {}
    for link, link_id in reversed(list(enumerate(ids))):
        try:
            said[link] = f"link {link}: {submit.cancel(link_id)}"
        except submit.UnknownJobError:
            said[link] = f"link {link}: Slurm no longer knows job {link_id} (it ended long ago); nothing to cancel"
    print("\n".join(said[link] for link in sorted(said)))
    return 0


def _ray_status(run_dir: Path, driver_waits: bool) -> list[str]:
    """The Ray launch mode's facts from the run dir: the head's address, bring-up, node errors.
    `driver_waits`: a running job's driver, which writes ray/bringup.json once every node joined."""
    import json

    ray_dir = run_dir / "ray"
    lines = []
    try:
        head = json.loads((ray_dir / "head.json").read_text(encoding="utf-8"))
        lines.append(f"Ray head: {head['host']}:{head['port']} (ready {head.get('ready_s', '?')} s after its start)")
    except (OSError, ValueError, KeyError):
        return _ray_errors(run_dir)  # no head (yet): ray start may have failed on it
    try:
        up = json.loads((ray_dir / "bringup.json").read_text(encoding="utf-8"))
        lines.append(
            f"Ray: all {up['nodes']} node(s) joined {up['all_joined'] - up['driver_step_start']:.1f} s "
            f"after the driver step started; the driver started then"
        )
    except (OSError, ValueError, KeyError, TypeError):
        if driver_waits:
            lines.append("Ray: waiting for every node to join")
    from hpcplace.slurm.run_report import ray_node_lines, read_ray_nodes

    return lines + ray_node_lines(read_ray_nodes(run_dir)) + _ray_errors(run_dir)


def _ray_errors(run_dir: Path) -> list[str]:
    """The Ray nodes' errors (logs/ray-errors.txt, written by runtime/ray_node.py), also when the head
    never came up (then there is no ray/head.json)."""
    from hpcplace.slurm.run_report import tail

    errors = run_dir / "logs" / "ray-errors.txt"
    if not errors.exists():
        return []
    lines: list[str] = []
    for line in errors.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        lines.append(f"Ray: {line}")
        node = re.match(r"Ray node rank \d+ on (\S+) \(", line)  # runtime/ray_node.py's `where`
        log = run_dir / "logs" / f"ray.{node.group(1)}.out" if node else None
        if log is None or not log.is_file():
            continue
        text = "\n".join(
            x
            for x in log.read_text(encoding="utf-8", errors="replace").splitlines()
            if not x.startswith("hpcplace-ray:")
        )  # hpcplace's own lines: said above
        last = tail(text)
        if last:
            lines.append(f"  last {len(last)} line(s) of Ray's output on that node ({log}):")
            lines += [f"    | {x}" for x in last]
    return lines


def _ray_logs(args: argparse.Namespace, run_dir: Path, plan: Plan) -> int:
    """Ray mode logs: the driver (`--component driver`), each node's raylet (`--component ray
    [--rank NODE_RANK]`) and each service's replicas (`--component NAME [--rank R]`), from logs/driver.out,
    logs/ray.<host>.out and the replicas' logs/<name>.rank<R>.out."""
    from hpcplace.ray.ray_cluster import ray_nodes
    from hpcplace.slurm import submit
    from hpcplace.slurm.slurm_job import lower

    services = [c for c in plan.components if c.service is not None]
    if args.component not in (None, "driver", "ray", *(c.name for c in services)):
        raise SpecError(
            f"the Ray launch mode has no component {args.component!r} to show",
            hint="--component driver (the driver), --component ray [--rank NODE_RANK] (raylets)"
            + "".join(f", --component {c.name} (a service)" for c in services),
        )
    hosts = submit.read_hosts(run_dir)
    entries: list[tuple[str, Path | None]] = []
    if args.component in (None, "driver") and args.rank in (None, 0):
        entries.append(("Ray driver (on the head)", run_dir / "logs" / "driver.out"))
        attached = sorted(
            (run_dir / "logs").glob("driver-*.out"), key=lambda p: int(p.stem[7:] or 0) if p.stem[7:].isdigit() else 0
        )
        entries += [(f"attached driver {p.stem[7:]} (hpcplace attach)", p) for p in attached]
    nodes = ray_nodes(plan)
    if args.rank is not None and args.component == "ray" and all(n.rank != args.rank for n in nodes):
        from hpcplace.config.rank_syntax import compress_ranks

        raise SpecError(
            f"no Ray node rank {args.rank}: the node ranks are {compress_ranks([n.rank for n in nodes])}",
            hint="--component ray --rank NODE_RANK, or leave --rank out for every node",
        )
    if args.component in (None, "ray"):
        for n in nodes:
            if args.rank is not None and args.rank != n.rank:
                continue
            host = hosts.get((n.het_group, n.index))
            entries.append(
                (
                    f"Ray node rank {n.rank} ({n.label}, het {n.het_group} node {n.index}"
                    f"{', ' + host if host else ''})",
                    run_dir / "logs" / f"ray.{host}.out" if host else None,
                )
            )
    if services and args.component not in ("driver", "ray"):
        names = {c.name for c in services}
        for r in submit.rank_logs(run_dir.absolute(), lower(plan), hosts):
            if r.component in names and args.component in (None, r.component) and args.rank in (None, r.rank):
                entries.append((f"service {r.component} replica {r.rank} ({r.where})", r.path))
    if args.component is None and args.rank is None and not args.list:
        for batch in sorted((run_dir / "logs").glob("batch-*.out")):
            _show(f"batch script ({batch})", batch, args.tail)
    for title, path in entries:
        if args.list:
            print(f"{title}: {path if path else '(job has not started: no logs/nodes.txt)'}")
        else:
            _show(title, path, args.tail)
    return 0


def _logs_run_dir(target: str) -> Path:
    """`logs RUN|JOBID`: a directory holding plan.json, or the run directory of a Slurm job id."""
    import re

    from hpcplace.slurm import run_report, submit

    run_dir = Path(target)
    if not run_dir.is_dir() and re.fullmatch(r"\d+(\+\d+)?", target.strip()):
        job_id, found, status = _job_and_run(target)
        if found is None:
            where = ", ".join(run_report.candidate_dirs(status)) or "no directory Slurm knows"
            raise submit.UnknownJobError(
                f"no run directory found for job {job_id}: Slurm names {where}, and none holds a plan.json of this job",
                hint="give the run directory itself",
            )
        return found
    if not run_dir.is_dir():
        raise submit.UnknownJobError(
            f"no run directory {str(run_dir)!r}",
            hint="give a run directory written by "
            "`hpcplace submit` (its path is printed after the job id), or a job id",
        )
    if not (run_dir / "plan.json").exists():
        raise submit.UnknownJobError(
            f"{run_dir} is not a run directory (no plan.json)", hint="give a run directory written by `hpcplace submit`"
        )
    return run_dir


def run_logs(args: argparse.Namespace) -> int:
    from hpcplace.config.rank_syntax import compress_ranks
    from hpcplace.slurm import run_report, submit
    from hpcplace.slurm.slurm_job import lower

    if args.tail is not None and args.tail < 1:
        raise SpecError(
            f"--tail {args.tail}: give a positive number of lines", hint="e.g. --tail 50; leave it out for whole logs"
        )
    run_dir = _logs_run_dir(args.run)
    plan_path = run_dir / "plan.json"
    job_id = run_report.recorded_id(submit.read_record(run_dir))
    if job_id is None:
        if not any((run_dir / "logs").glob("*.out")):
            submit.recorded_job(run_dir)  # nothing ran here: says it was never submitted (exit 2)
        # rendered, then sbatch'd by hand: no job id recorded, but the job's log files are there
        print(
            f"(note: {run_dir} records no job id in run.json: it was not submitted by `hpcplace submit`; "
            "showing the logs it holds)"
        )
    if args.attempt is None and not (run_dir / "logs" / "nodes.txt").exists():
        if not args.list:
            for batch in sorted((run_dir / "logs").glob("batch-*.out")):
                _show(f"batch script ({batch})", batch, args.tail)
        status = f"hpcplace status {shlex.quote(str(run_dir))}" if job_id else "hpcplace status JOBID"
        print(
            f"{'job ' + job_id if job_id else 'the job'} has no task logs (no logs/nodes.txt): it has not started "
            f"its tasks yet, or it ended before they started; `{status}` says which, and why"
        )
        return 0
    plan = submit.load_plan(plan_path)
    if plan.launch.is_ray:
        return _ray_logs(args, run_dir, plan)
    if args.component is not None and args.component not in {c.name for c in plan.components}:
        raise SpecError(
            f"no component {args.component!r} in {plan_path}",
            hint="components: " + ", ".join(c.name for c in plan.components),
        )
    attempts = submit.read_attempts(run_dir)
    latest = attempts[-1].number if attempts else 0
    folder = "logs"
    if args.link is not None:
        return _link_logs(args, run_dir, plan)
    if args.attempt is not None and args.attempt != latest:
        folder = f"logs/attempt-{args.attempt}"
        if not (run_dir / folder).is_dir():
            raise SpecError(
                f"no attempt {args.attempt} in {run_dir}",
                hint=f"attempts: {', '.join(str(a.number) for a in attempts) or '0'}",
            )
    elif len(attempts) > 1 and not args.list:
        print(
            f"(attempt {latest} of a requeued job; earlier attempts: --attempt "
            f"{', '.join(str(a.number) for a in attempts[:-1])})"
        )
    logs = submit.rank_logs(run_dir.absolute(), lower(plan), submit.read_hosts(run_dir, folder), folder)
    chosen = [
        r
        for r in logs
        if (args.component is None or r.component == args.component) and (args.rank is None or r.rank == args.rank)
    ]
    if not chosen:
        ranks: dict[str, list[int]] = {}
        for r in logs:
            ranks.setdefault(r.component, []).append(r.rank)
        if args.component:
            raise SpecError(
                f"no rank {args.rank} in {args.component}: its ranks are "
                f"{compress_ranks(sorted(ranks.get(args.component, []))) or 'none'}",
                hint=f"--rank one of those, or leave --rank out for every rank of {args.component}",
            )
        valid = "; ".join(f"{c}: {compress_ranks(sorted(v))}" for c, v in ranks.items())
        raise SpecError(
            f"no rank {args.rank} in any component; ranks per component: {valid}",
            hint="--component NAME --rank R shows one rank",
        )
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


def _link_logs(args: argparse.Namespace, run_dir: Path, plan: Plan) -> int:
    """`logs --link K`: a chain's link K: its batch log and its ranks' logs (logs/ for the link that ran
    last, logs/link-K/ for an earlier one)."""
    from hpcplace.slurm import chain, submit
    from hpcplace.slurm.slurm_job import lower

    ids = chain.chain_ids(submit.read_record(run_dir))
    if not ids:
        raise SpecError(f"{run_dir} is not a chain of jobs: it has no links", hint="leave --link out")
    if not 0 <= args.link < len(ids):
        raise SpecError(f"no link {args.link}: the chain's links are 0-{len(ids) - 1}", hint="--link K, 0-based")
    marker = run_dir / chain.LOGS_LINK_FILE  # which link's step logs logs/ holds
    latest = marker.read_text(encoding="utf-8").strip() if marker.exists() else ""
    folder = "logs" if latest == str(args.link) else chain.LINK_LOGS.format(link=args.link)
    if not (run_dir / folder).is_dir():
        print(
            f"link {args.link} (job {ids[args.link]}) has no logs: it has not run (or never will; `hpcplace status` says)"
        )
        return 0
    batch = run_dir / "logs" / f"batch-{ids[args.link]}.out"
    if args.component is None and args.rank is None and not args.list:
        _show(f"batch script of link {args.link} ({batch})", batch, args.tail)
    if plan.launch.is_ray:
        print(f"(Ray mode: the driver's and raylets' logs of link {args.link} are in {run_dir / folder})")
        return 0
    logs = submit.rank_logs(run_dir.absolute(), lower(plan), submit.read_hosts(run_dir, folder), folder)
    for r in logs:
        if (args.component is None or r.component == args.component) and (args.rank is None or r.rank == args.rank):
            title = f"link {args.link}: {r.component} rank {r.rank} ({r.where})"
            if args.list:
                print(f"{title}: {r.path}")
            else:
                _show(title, r.path, args.tail)
    return 0


def _show(title: str, path: Path | None, tail: int | None) -> None:
    print(f"==> {title} <==")
    if path is None or not path.exists():
        print("(no log: not started yet, or it never started; `hpcplace status` says which)")
        return
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    for line in lines[-tail:] if tail else lines:
        print(line)
