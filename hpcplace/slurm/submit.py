"""Submission and job records: render into a run directory, `sbatch --parsable`, record the job
id and script hash in run.json; status, cancel and per-rank logs of a run.

A retry never double-submits: a lock file is created (O_EXCL) before sbatch runs and removed only
when the outcome is known. A run directory whose run.json names a job is never submitted again;
one whose lock survived an interrupted sbatch is first searched for in Slurm (by its working
directory) and adopted instead of resubmitted. Nothing is recorded as submitted on failure.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from hpcplace.config.cluster import Cluster, Hardware, NodeGroup
from hpcplace.config.container import container_from_json
from hpcplace.config.framework_version import PlannedVersion
from hpcplace.config.launch import launch_from_json
from hpcplace.config.network import network_from_json
from hpcplace.config.services import ServiceSpec
from hpcplace.config.spec import SpanningWorkers
from hpcplace.config.steer import steer_from_json
from hpcplace.config.topology import topology_from_json
from hpcplace.errors import SlurmError, SpecError
from hpcplace.plan.placement import Placement
from hpcplace.plan.plan import SCHEMA, ComponentPlan, Crossing, Plan, iter_plan_json
from hpcplace.slurm import chain, slurm_cli
from hpcplace.slurm.render import (
    DEFAULT_LAUNCHER,
    LIBRARY_NAME,
    PLAN_NAME,
    SCRIPT_NAME,
    make_run_dir,
    render_library,
    render_run,
    render_script,
    sha256_text,
)
from hpcplace.slurm.slurm_job import SlurmJob, lower, rank_log_name, slug

RUN_RECORD = "run.json"
SLURM_VERSION_KEY = "slurm_version"  # run.json: the Slurm the job was submitted to ("22.05.8"); absent before
LOCK_NAME = "submit.lock"
TERMINAL_STATES = (
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "OUT_OF_MEMORY",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "REVOKED",
)


@dataclass(frozen=True)
class Submission:
    run_dir: Path
    job_id: str
    script_sha256: str
    already_submitted: bool = False


class UnknownJobError(SpecError):
    """The run directory or job id given does not exist: bad input (exit 2), not a Slurm failure."""


def default_run_dir(plan: Plan, base: str | os.PathLike[str], now: datetime) -> Path:
    """`<base>/<name>-<YYYYmmdd-HHMMSS>`, with `-2`, `-3` ... if taken."""
    stem = Path(base) / f"{slug(plan.name)}-{now:%Y%m%d-%H%M%S}"
    candidate, n = stem, 1
    while candidate.exists():
        n += 1
        candidate = stem.with_name(f"{stem.name}-{n}")
    return candidate.absolute()


def recorded_slurm_version(record: dict[str, object] | None) -> slurm_cli.SlurmVersion | None:
    """The Slurm version run.json records; None for a run directory written before it was recorded."""
    return slurm_cli.version_from_record((record or {}).get(SLURM_VERSION_KEY))


def read_record(run_dir: Path) -> dict[str, object] | None:
    path = run_dir / RUN_RECORD
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SlurmError(f"{path} is unreadable: {exc}", hint="inspect it; do not resubmit blindly") from None
    return data if isinstance(data, dict) else None


def _write_json(path: Path, data: dict[str, object]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _sbatch_error(plan: Plan, message: str) -> SlurmError:
    """Slurm's refusal, quoted, with the node groups it concerns named."""
    groups = plan.cluster.node_groups
    named: list[str] = []
    m = re.search(r"invalid partition specified:\s*(\S+)", message, re.IGNORECASE)
    if m:
        named = [
            f"node group {g.label!r} (het component {i}) uses partition {g.partition!r}"
            for i, g in enumerate(groups)
            if g.partition == m.group(1)
        ]
    elif re.search(r"gres|generic resource|node configuration is not available", message, re.IGNORECASE):
        job = lower(plan)
        named = [
            f"node group {c.label!r} (het component {c.het_group}): "
            f"{f'partition {c.partition!r}' if c.partition else 'the default partition'}, "
            f"{c.num_nodes} node(s), GRES {c.gres or 'none'}"
            for c in job.components
        ]
    text = f"Slurm rejected the job: {message}"
    if named:
        text += "\n  " + "\n  ".join(named)
    return SlurmError(text, hint="`hpcplace validate CONFIG` compares each node group with the cluster")


def _check_same_plan(plan: Plan, root: Path, job_id: str) -> None:
    """Submitting again into a run directory is idempotent for the same plan; another plan (another
    config, other overrides) would silently get the old job's id and status, so it is refused."""
    try:
        with open(root / PLAN_NAME, encoding="utf-8") as recorded:  # compared piece by piece, as it was written
            same = all(recorded.read(len(piece)) == piece for piece in iter_plan_json(plan)) and not recorded.read(1)
    except (OSError, ValueError):
        return
    if not same:
        raise SpecError(
            f"{root} already holds job {job_id} of another plan ({plan.name!r} from {plan.source} differs "
            f"from its plan.json): nothing submitted",
            hint="submit into a new run directory: another -o DIR, or leave -o out",
        )


def submit(
    plan: Plan,
    run_dir: str | os.PathLike[str],
    *,
    launcher: Sequence[str] = DEFAULT_LAUNCHER,
    template_dir: str | None = None,
    timeout: float = slurm_cli.DEFAULT_TIMEOUT_S,
    say: Callable[[str], None] = lambda _s: None,
    slurm_version: slurm_cli.SlurmVersion | None = None,
) -> Submission:
    """Render into run_dir and submit once. Idempotent per run directory. `slurm_version`: the site's,
    when the caller already read it (else it is read here); recorded in run.json, refused when too old."""
    root = Path(os.path.abspath(run_dir))
    record = read_record(root)
    if record and record.get("job_id"):
        _check_same_plan(plan, root, str(record["job_id"]))
        return Submission(root, str(record["job_id"]), str(record.get("script_sha256", "")), True)
    version = (
        slurm_cli.check_supported(slurm_version)
        if slurm_version is not None
        else slurm_cli.site_version(timeout=timeout)
    )
    lock = root / LOCK_NAME
    if lock.exists():
        adopted = _recover_interrupted(root, lock, timeout, version, plan.launch.chain)
        if adopted is not None:
            say(f"found job {adopted.job_id} submitted from {root} by an interrupted attempt; recorded it")
            return adopted
    created = _first_missing(root)  # what this submit creates, removed again if Slurm never takes the job
    make_run_dir(root)
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise SlurmError(
            f"another submission of {root} is in progress ({lock} exists)",
            hint=f"wait for it, or remove {lock} if no hpcplace submit is running",
        ) from None
    try:
        rendered = render_run(plan, root, launcher=launcher, template_dir=template_dir)
    except BaseException:
        os.close(fd)
        lock.unlink(missing_ok=True)
        _remove_created(root, created)
        raise
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(
            {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "started": time.time(),
                "script_sha256": rendered.script_sha256,
            },
            f,
        )
    argv = slurm_cli.sbatch_argv(str(rendered.script))
    if plan.launch.chain:  # link 0 of the chain (the script holds its singleton dependency)
        argv = chain.link_sbatch_argv(argv, 0)
    try:
        if plan.launch.chain:
            result = slurm_cli.run(argv, cwd=str(root), timeout=timeout)
        else:
            result = slurm_cli.sbatch(str(rendered.script), cwd=str(root), timeout=timeout)
    except SlurmError as exc:
        if "did not answer" in exc.message:  # the outcome is unknown: keep the lock for the retry
            raise SlurmError(
                exc.message, hint=f"run the same submit with -o {root}: it looks for the job before submitting again"
            ) from None
        lock.unlink(missing_ok=True)
        _remove_created(root, created)
        raise
    if result.returncode != 0:
        lock.unlink(missing_ok=True)
        _remove_created(root, created)
        raise _sbatch_error(plan, result.message)
    job_id = slurm_cli.parse_job_id(result.stdout)
    submitted: dict[str, object] = {
        "job_id": job_id,
        "script_sha256": rendered.script_sha256,
        "script": SCRIPT_NAME,
        "sbatch": argv,
        "submitted_at": datetime.now().astimezone().isoformat(timespec="seconds"),
        "name": plan.name,
        "source": plan.source,
        "het_components": [g.label for g in plan.cluster.node_groups],
        "launcher": list(launcher),  # `hpcplace attach | exec` start their steps with the same launcher
        SLURM_VERSION_KEY: str(version),
    }
    _write_json(root / RUN_RECORD, submitted)
    if plan.launch.chain:
        _submit_links(plan, root, submitted, timeout, say)
    lock.unlink(missing_ok=True)
    return Submission(root, job_id, rendered.script_sha256)


def _submit_links(
    plan: Plan, root: Path, record: dict[str, object], timeout: float, say: Callable[[str], None]
) -> None:
    """The chain's links after the first (already submitted): the same script, each pending on the
    earlier ones by its singleton dependency; run.json lists every link's job id as it is submitted. A
    link Slurm refuses ends the chain there (the submitted links run; said on stderr)."""
    ids = [str(record["job_id"])]
    argvs = [chain.link_sbatch_argv(slurm_cli.sbatch_argv(str(root / SCRIPT_NAME)), 0)]
    record.update(chain=ids, chain_length=plan.launch.chain, chain_sbatch=argvs)
    _write_json(root / RUN_RECORD, record)
    for link in range(1, plan.launch.chain):
        argv = chain.link_sbatch_argv(slurm_cli.sbatch_argv(str(root / SCRIPT_NAME)), link)
        result = slurm_cli.run(argv, cwd=str(root), timeout=timeout)
        if result.returncode != 0:
            say(f"link {link} of the chain was refused ({result.message}): the chain has {link} link(s)")
            break
        ids.append(slurm_cli.parse_job_id(result.stdout))
        argvs.append(argv)
        _write_json(root / RUN_RECORD, record)


def _first_missing(path: Path) -> Path | None:
    """The outermost directory of `path` that does not exist yet (None: it all exists)."""
    missing = None
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            break
        missing = candidate
    return missing


def _remove_created(root: Path, created: Path | None) -> None:
    """Undo what a failed submit made: the run directory and the parents it created, never a directory
    that existed before it."""
    if created is None:
        return
    shutil.rmtree(root, ignore_errors=True)
    for parent in root.parents:
        if not parent.is_relative_to(created):
            break
        try:
            parent.rmdir()  # only while empty: something else may have been put there meanwhile
        except OSError:
            break


def _recover_interrupted(
    root: Path, lock: Path, timeout: float, version: slurm_cli.SlurmVersion, chain_length: int = 0
) -> Submission | None:
    try:
        info = json.loads(lock.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        info = {}
    pid, host = info.get("pid"), info.get("host")
    if host == socket.gethostname() and isinstance(pid, int) and pid != os.getpid() and _alive(pid):
        raise SlurmError(f"another submission of {root} is running (pid {pid})", hint="wait for it to finish")
    jobs = slurm_cli.jobs_in_workdir(str(root), timeout=timeout)
    extra: dict[str, object] = {}
    if chain_length and jobs:  # a chain's links, all from this directory: adopted in submission order
        jobs = sorted(set(jobs), key=int)
        extra = {"chain": jobs, "chain_length": chain_length}
    elif len(jobs) > 1:
        raise SlurmError(
            f"jobs {', '.join(jobs)} were all submitted from {root}",
            hint="cancel the extra ones, then record the one to keep",
        )
    if not jobs:
        lock.unlink(missing_ok=True)  # sbatch never accepted it: safe to submit
        return None
    script = root / SCRIPT_NAME
    sha = info.get("script_sha256", "")
    _write_json(
        root / RUN_RECORD,
        {
            "job_id": jobs[0],
            "script_sha256": sha,
            "script": SCRIPT_NAME,
            "sbatch": slurm_cli.sbatch_argv(str(script)),
            "recovered": True,
            SLURM_VERSION_KEY: str(version),
            **extra,
        },
    )
    lock.unlink(missing_ok=True)
    return Submission(root, jobs[0], str(sha), True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def dry_run_text(
    plan: Plan,
    run_dir: str | os.PathLike[str],
    *,
    launcher: Sequence[str] = DEFAULT_LAUNCHER,
    template_dir: str | None = None,
) -> str:
    """The exact sbatch command, script and the library it sources, without writing or submitting anything."""
    root = Path(os.path.abspath(run_dir))
    script = render_script(plan, str(root), launcher=launcher, template_dir=template_dir)
    library = render_library(template_dir)
    argv = slurm_cli.sbatch_argv(str(root / SCRIPT_NAME))
    return (
        f"# would write {root}/{{{SCRIPT_NAME},{LIBRARY_NAME},plan.json,plan.json.idx,logs/}} and run (in {root}):\n"
        f"# {shlex.join(argv)}\n{script}"
        f"# ==== {root / LIBRARY_NAME} (sourced by {SCRIPT_NAME}; sha256 {sha256_text(library)}) ====\n{library}"
    )


def test_only(
    plan: Plan,
    *,
    launcher: Sequence[str] = DEFAULT_LAUNCHER,
    template_dir: str | None = None,
    timeout: float = slurm_cli.DEFAULT_TIMEOUT_S,
) -> str:
    """Ask Slurm whether (and when) it could run the job; records nothing. (Slurm still uses up a
    job id for it.)"""
    with tempfile.TemporaryDirectory(prefix="hpcplace-test-only-") as tmp:
        rendered = render_run(plan, tmp, launcher=launcher, template_dir=template_dir)
        result = slurm_cli.sbatch(str(rendered.script), cwd=tmp, test_only=True, timeout=timeout)
    if result.returncode != 0:
        raise _sbatch_error(plan, result.message)
    return result.message


# ------------------------------------------------------------------------------------------------
# status / cancel


@dataclass(frozen=True)
class ComponentState:
    offset: int
    job_id: str
    partition: str
    state: str
    nodes: str
    reason: str
    exit_code: str
    elapsed: str


@dataclass(frozen=True)
class StepState:
    job_id: str  # `ID+k.step`
    name: str
    state: str
    exit_code: str
    nodes: str


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    components: tuple[ComponentState, ...]
    steps: tuple[StepState, ...]
    source: str  # "scontrol" | "sacct" | "none"
    # whose job it is (hpcplace.slurm.run_report matches it with a run directory); "" = unknown
    work_dir: str = ""
    submit_time: str = ""  # Slurm's, e.g. 2026-11-21T06:11:49 (local time of the controller)
    std_out: str = ""
    command: str = ""

    @property
    def state(self) -> str:
        """One word for the whole job: the worst component state."""
        states = [c.state.split()[0] for c in self.components]
        if not states:
            return "UNKNOWN"
        for bad in ("FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "CANCELLED", "PREEMPTED"):
            if any(s.startswith(bad) for s in states):
                return bad
        for live in ("RUNNING", "COMPLETING", "PENDING", "CONFIGURING", "SUSPENDED", "REQUEUED"):
            if live in states:
                return live
        return states[0]

    @property
    def done(self) -> bool:
        return bool(self.components) and all(
            c.state.split()[0] in TERMINAL_STATES or c.state.startswith("CANCELLED") for c in self.components
        )


def resolve_job(target: str) -> tuple[str, Path | None]:
    """`RUN` (a run directory with run.json) or a job id -> (leader job id, run dir or None)."""
    path = Path(target)
    if path.is_dir():
        return recorded_job(path), path.absolute()
    m = re.fullmatch(r"(\d+)(\+\d+)?", target.strip())
    if not m:
        what = "no such run directory" if not path.exists() else "not a directory"
        raise UnknownJobError(
            f"{target!r} is neither a run directory nor a job id ({what})",
            hint="give the run directory `hpcplace submit` wrote (it holds run.json), or a Slurm job id such as 1234",
        )
    return m.group(1), None


def recorded_job(run_dir: Path) -> str:
    """The job id run.json records; a run directory that never reached Slurm is said so (exit 2)."""
    record = read_record(run_dir)
    if not record or not record.get("job_id"):
        lock = " (a submission was interrupted: run submit again with -o)" if (run_dir / LOCK_NAME).exists() else ""
        raise UnknownJobError(
            f"{run_dir} was never submitted to Slurm: no job id in {RUN_RECORD}{lock}",
            hint="submit it with `hpcplace submit CONFIG -o DIR` (a `render` or `run --local` directory has no job)",
        )
    return str(record["job_id"])


def job_status(job_id: str, *, timeout: float = slurm_cli.DEFAULT_TIMEOUT_S) -> JobStatus:
    """Each het component's state from the controller (live) or accounting (finished), plus the
    steps sacct knows."""
    rows = slurm_cli.show_job(job_id, timeout=timeout)
    acct = slurm_cli.sacct(job_id, steps=True, timeout=timeout)
    if not rows:
        return status_from_accounting(job_id, acct or [])
    steps = accounted_steps(acct or [])
    records = sorted((slurm_cli.parse_job_record(r) for r in rows), key=lambda r: r.het_offset)
    comps = tuple(
        ComponentState(r.het_offset, r.job_id, r.partition, r.state, r.nodes, r.reason, r.exit_code, r.run_time)
        for r in records
    )
    lead = records[0]
    return JobStatus(job_id, comps, steps, "scontrol", lead.work_dir, lead.submit_time, lead.std_out, lead.command)


def accounted_steps(acct: Sequence[Mapping[str, str]]) -> tuple[StepState, ...]:
    """The job's steps in sacct's rows (`ID+k.s`), without the batch and extern steps."""
    return tuple(
        StepState(r["JobID"], r["JobName"], r["State"], r["ExitCode"], r["NodeList"])
        for r in acct
        if "." in r["JobID"] and not r["JobID"].endswith((".batch", ".extern"))
    )


def status_from_accounting(job_id: str, acct: Sequence[Mapping[str, str]]) -> JobStatus:
    """A job the controller has forgotten, from sacct's rows (`slurm_cli.SACCT_JOB_FIELDS`): one component
    per `ID+k` row (`ID` alone: not a het job), its steps; source "none" when accounting has no row."""
    comps = tuple(
        ComponentState(
            int(r["JobID"].split("+")[1]) if "+" in r["JobID"] else 0,
            r["JobID"],
            r["Partition"],
            r["State"],
            r["NodeList"],
            "",
            r["ExitCode"],
            r["Elapsed"],
        )
        for r in acct
        if "." not in r["JobID"]
    )
    if not acct:
        return JobStatus(job_id, (), (), "none")
    lead = next((r for r in acct if "." not in r["JobID"]), {})
    return JobStatus(job_id, comps, accounted_steps(acct), "sacct", lead.get("WorkDir", ""), lead.get("Submit", ""))


def shown_exit(printed: str, source: str, version: slurm_cli.SlurmVersion | None) -> str:
    """An exit code as `status` shows it: what Slurm printed, then what it means under the encoding of
    the command that printed it (slurm_cli.exit_status); `-` when Slurm printed none."""
    exit_code = slurm_cli.exit_status(printed, source=source, version=version)
    return str(exit_code) if exit_code is not None else (printed or "-")


def format_status(status: JobStatus, labels: Sequence[str] = (), version: slurm_cli.SlurmVersion | None = None) -> str:
    """The status table. `version` is this host's Slurm (whose sacct printed the exit codes): it decides
    whether sacct's `15:0` may be 143 (before 25.11); None leaves both readings open."""
    lines = [f"job {status.job_id}: {status.state} (from {status.source})"]
    if not status.components:
        lines.append("  Slurm knows nothing about this job (finished long ago, or no accounting)")
    for c in status.components:
        label = labels[c.offset] if c.offset < len(labels) else "?"
        extra = f" reason={c.reason}" if c.reason and c.reason != "None" else ""
        lines.append(
            f"  het {c.offset} {label:<12} {c.partition:<10} {c.state:<11} nodes={c.nodes or '-'} "
            f"exit={shown_exit(c.exit_code, status.source, version)} time={c.elapsed or '-'}{extra}"
        )
    if status.steps:
        lines.append("  steps:")
        for s in status.steps:
            shown = shown_exit(s.exit_code, "sacct", version)
            lines.append(f"    {s.job_id:<12} {s.name:<16} {s.state:<11} exit={shown} nodes={s.nodes}")
    return "\n".join(lines)


# The longest pause between two looks of `status --watch` (submitit's default, 30 s here before, made a
# finished job show up to half a minute late). 5 s keeps the end visible within a few seconds; the cost
# is one `sacct` call per 5 s per watching user (the backoff 0, 2, 4 s still applies first), which
# slurmdbd answers from an index on the job id.
WATCH_MAX_DELAY_S = 5.0


def watch(
    job_id: str,
    *,
    labels: Sequence[str] = (),
    interval: float = 1.0,
    max_delay: float = WATCH_MAX_DELAY_S,
    say: Callable[[str], None] = print,
    timeout: float = slurm_cli.DEFAULT_TIMEOUT_S,
    sleep: Callable[[float], None] = time.sleep,
    version: slurm_cli.SlurmVersion | None = None,
) -> JobStatus:
    """Print the status whenever a component's state changes, until every component is done.

    With accounting, submitit's watcher decides when to look (HetJobWatcher: one sacct call for all
    components, at 0, 2, 4 s, then every `max_delay` s, WATCH_MAX_DELAY_S); the table is re-read from
    scontrol/sacct only when a state changed. Without accounting, scontrol every `interval` s."""
    status = job_status(job_id, timeout=timeout)
    say(format_status(status, labels, version))
    watcher, ids = None, []
    if status.components and status.source != "none" and slurm_cli.sacct(job_id, timeout=timeout) is not None:
        watcher = slurm_cli.HetJobWatcher(delay_s=max(1, int(max_delay)))
        ids = [f"{job_id}+{c.offset}" for c in status.components] if len(status.components) > 1 else [job_id]
        for i in ids:
            watcher.register_job(i)
    seen: tuple[str, ...] = ()
    last = tuple(c.state for c in status.components)
    while not status.done and status.source != "none":
        sleep(interval)
        if watcher is not None:
            states = tuple(watcher.get_state(i) for i in ids)
            if states == seen and not all(watcher.is_done(i, mode="cache") for i in ids):
                continue
            seen = states
        status = job_status(job_id, timeout=timeout)
        now = tuple(c.state for c in status.components)
        if now != last:
            say(format_status(status, labels, version))
            last = now
    return status


# `hpcplace status` exit codes (docs/slurm-job.md, "Exit codes"); 1-3 are hpcplace's own errors.
STATE_EXIT_CODES = {
    "COMPLETED": 0,
    "FAILED": 10,
    "OUT_OF_MEMORY": 10,
    "NODE_FAIL": 10,
    "BOOT_FAIL": 10,
    "DEADLINE": 10,
    "CANCELLED": 11,
    "TIMEOUT": 12,
}
OTHER_END_EXIT_CODE = 13  # PREEMPTED (not requeued), REVOKED, ...


def status_exit_code(status: JobStatus) -> int:
    """0 only when the job ended with every het component COMPLETED (or has not ended yet, for a
    one-shot `status`); otherwise the code of the worst component state."""
    if not status.done:
        return 0
    if all(c.state.split()[0] == "COMPLETED" for c in status.components):
        return 0
    return STATE_EXIT_CODES.get(status.state, OTHER_END_EXIT_CODE) or OTHER_END_EXIT_CODE


def unknown_job(job_id: str) -> UnknownJobError:
    return UnknownJobError(
        f"Slurm knows no job {job_id}",
        hint="check the id (`squeue --me`, `sacct -X`); a job that ended long ago is forgotten "
        "by the controller and, without accounting (slurmdbd), by Slurm altogether",
    )


def known_status(job_id: str, *, timeout: float = slurm_cli.DEFAULT_TIMEOUT_S) -> JobStatus:
    """job_status, or a clear error when Slurm knows nothing about the job."""
    status = job_status(job_id, timeout=timeout)
    if status.source == "none":
        raise unknown_job(job_id)
    return status


def cancel(job_id: str, *, timeout: float = slurm_cli.DEFAULT_TIMEOUT_S) -> str:
    """scancel of the leader cancels every het component: Slurm sends SIGTERM to the batch script
    and every task, SIGKILL after KillWait. A job that already ended is left alone and said so."""
    status = known_status(job_id, timeout=timeout)
    if status.done:
        return f"job {job_id} had already ended: {status.state}; nothing to cancel"
    try:
        slurm_cli.scancel(job_id, timeout=timeout)
    except SlurmError as exc:
        if "already completing or completed" not in exc.message and "Invalid job id" not in exc.message:
            raise
        status = known_status(job_id, timeout=timeout)
        return f"job {job_id} had already ended: {status.state}; nothing to cancel"
    return (
        f"cancelled job {job_id} (every het component): Slurm sends SIGTERM to every task, SIGKILL after its KillWait"
    )


# ------------------------------------------------------------------------------------------------
# attempts (a requeued job runs again in the same run directory)

ATTEMPTS_FILE = "attempts.jsonl"


@dataclass(frozen=True)
class Attempt:
    number: int
    started: str
    host: str
    ended: str | None
    exit_code: int | None


def read_attempts(run_dir: Path) -> list[Attempt]:
    """attempts.jsonl (one line per start / end, written by the batch script) -> attempts in order.
    Unreadable lines are skipped: a node may have died mid-write."""
    path = run_dir / ATTEMPTS_FILE
    if not path.exists():
        return []
    starts: dict[int, dict[str, object]] = {}
    ends: dict[int, dict[str, object]] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            event = json.loads(line)
            number = int(event["attempt"])
        except (ValueError, KeyError, TypeError):
            continue
        (starts if event.get("event") == "start" else ends)[number] = event
    out = []
    for number in sorted(starts):
        end = ends.get(number, {})
        code = end.get("exit_code")
        out.append(
            Attempt(
                number,
                str(starts[number].get("time", "")),
                str(starts[number].get("host", "")),
                str(end["time"]) if "time" in end else None,
                code if isinstance(code, int) else None,
            )
        )
    return out


def format_attempts(attempts: Sequence[Attempt]) -> list[str]:
    lines = []
    for a in attempts:
        end = f"ended {a.ended} exit={a.exit_code}" if a.ended else "running (or killed before it could record)"
        lines.append(
            f"  attempt {a.number}: started {a.started} on {a.host or '?'}, {end}; "
            f"logs in {'logs/' if a is attempts[-1] else f'logs/attempt-{a.number}/'}"
        )
    return lines


# ------------------------------------------------------------------------------------------------
# logs


@dataclass(frozen=True)
class RankLog:
    component: str
    rank: int
    path: Path | None  # the rank's log file (which exists once the rank started)
    where: str


def load_plan(path: Path) -> Plan:
    """plan.json (schema hpcplace.plan/1) -> Plan, for commands that work on a run directory; a damaged
    one (truncated, edited, not a plan) is one error line naming the file, never a traceback."""
    try:
        return _plan_of(json.loads(path.read_text(encoding="utf-8")), path)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:  # JSONDecodeError: a ValueError
        what = f"missing key {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
        raise SpecError(
            f"{path} is damaged or not an hpcplace plan ({what}): the run directory cannot be used",
            hint="give the run directory `hpcplace submit` printed after the job id",
        ) from None


def _plan_of(data: dict[str, Any], path: Path) -> Plan:
    if data.get("schema") != SCHEMA:
        raise SlurmError(f"{path}: schema {data.get('schema')!r}, expected {SCHEMA!r}")
    groups = []
    for g in data["node_groups"]:
        hw = g.get("hardware")
        groups.append(
            NodeGroup(
                label=g["label"],
                partition=g["partition"],
                num_nodes=g["num_nodes"],
                node_ranks=tuple(g["node_ranks"]) if "node_ranks" in g else None,
                gpus_per_node=tuple(g["gpus_per_node"]),
                gpu_type=g["gpu_type"],
                cpus_per_node=g["cpus_per_node"],
                mem_per_node_mb=g["mem_per_node_mb"],
                constraint=g["constraint"],
                account=g["account"],
                qos=g["qos"],
                hardware=Hardware(hw["type"], tuple(hw["per_node"]), hw.get("gres")) if hw else None,
                ignore_hardware=g["resource_kind"] == "node" and hw is not None,
                env=dict(g["env"]),
                node_env=tuple(dict(e) for e in g.get("node_env") or ()),
                python_interpreter=tuple(g.get("python_interpreter") or ()),
                container=container_from_json(g.get("container")),
                network=network_from_json(g.get("network")),
                topology=topology_from_json(g.get("topology")),
            )
        )
    comps = []
    for c in data["components"]:
        procs = tuple(
            Placement(
                **{
                    **p,
                    "visible_accelerators": tuple(p["visible_accelerators"]),
                    "local_hardware_ranks": tuple(p["local_hardware_ranks"]),
                }
            )
            for p in c["processes"]
        )
        comps.append(
            ComponentPlan(
                name=c["name"],
                world_size=c["world_size"],
                node_groups=tuple(c["node_groups"]),
                resource_type=c["resource_type"],
                command=tuple(c["command"]),
                env=dict(c["env"]),
                offload=c["offload"],
                tensor_parallel_size=c["tensor_parallel_size"],
                pipeline_parallel_size=c["pipeline_parallel_size"],
                cpus_per_process=c["cpus_per_process"],
                mem_per_process_mb=c["mem_per_process_mb"],
                collocation_group=c["collocation_group"],
                processes=procs,
                spanning=SpanningWorkers.from_json(c["workers"]) if c.get("workers") else None,
                service=ServiceSpec.from_record(c["name"], c["node_groups"][0], tuple(c["command"]), c["service"])
                if c.get("service")
                else None,
                expert_parallel_size=c.get("expert_parallel_size", 1),
                expert_tensor_parallel_size=c.get("expert_tensor_parallel_size"),
                gpus_per_engine=c.get("gpus_per_engine"),
            )
        )
    return Plan(
        data["name"],
        data["source"]["path"],
        data["source"]["format"],
        Cluster(tuple(groups)),
        tuple(comps),
        (),
        None,
        dict(data.get("slurm", {})),
        tuple(data.get("warnings", ())),
        tuple(data["source"].get("composed", ())),
        launch_from_json(data.get("launch")),
        steer_from_json(data.get("steer")),
        PlannedVersion.from_json(data["source"].get("framework_version")),
        tuple(Crossing.from_json(c) for c in data.get("topology_crossings") or ()),
    )


def read_hosts(run_dir: Path, logs: str = "logs") -> dict[tuple[int, int], str]:
    """logs/nodes.txt (written by the job): (het group, node index) -> host name, with the groups a verl or
    slime job numbered in IP order at its start (logs/ray-order-g<G>.txt, hpcplace.runtime.ip_order). `logs`
    is logs/attempt-N for an earlier attempt of a requeued job."""
    from hpcplace.runtime.ip_order import read_node_lines, read_overlay

    hosts = read_node_lines(str(run_dir / logs / "nodes.txt"))
    return {**hosts, **read_overlay(str(run_dir / logs))} if hosts else hosts


def rank_logs(run_dir: Path, job: SlurmJob, hosts: dict[tuple[int, int], str], logs: str = "logs") -> list[RankLog]:
    """Per component and rank, its log file: `logs/<step>.rank<R>.out`, which the rank's shim writes
    (slurm_job.rank_log_name), named by component and plan rank alone, so that no Slurm version's %t or
    %N numbering matters; `hosts` (logs/nodes.txt) only says where each rank ran. A run rendered before
    these names has `logs/<step>.<host>.<%t>.out` files instead: those are found as before
    (`_srun_task_logs`)."""
    found: dict[str, list[tuple[int, Path]]] | None = None  # only for a run without rank-named logs
    out = []
    for step in job.steps:
        task = 0
        for seg in step.segments:
            for i in range(seg.num_nodes):
                host = hosts.get((seg.het_group, seg.relative + i))
                for j in range(seg.tasks_per_node):
                    rank = seg.ranks[i * seg.tasks_per_node + j]
                    where = (
                        f"het {seg.het_group} node {seg.relative + i}{' (' + host + ')' if host else ''}, task {task}"
                    )
                    path = run_dir / logs / Path(rank_log_name(step.name, rank)).name
                    if host and not path.exists():
                        if found is None:
                            found = _srun_task_logs(run_dir / logs)
                        older = found.get(f"{step.name}.{host}", [])
                        if j < len(older):
                            path = older[j][1]
                    out.append(RankLog(step.component, rank, path, where))
                    task += 1
    order = {name: i for i, name in enumerate(dict.fromkeys(s.component for s in job.steps))}
    out.sort(key=lambda r: (order[r.component], r.rank))
    return out


def _srun_task_logs(folder: Path) -> dict[str, list[tuple[int, Path]]]:
    """`<step>.<host>` -> [(%t, file)] of the per-task files srun wrote for runs rendered before the
    rank-named logs (`--output=logs/<step>.%N.%t.out`): a host's files in the order of their numbers
    are its tasks' (local rank) order, whatever offset a Slurm version adds to %t in a het step."""
    found: dict[str, list[tuple[int, Path]]] = {}
    try:
        entries = list(os.scandir(folder))
    except OSError:
        entries = []
    for entry in entries:
        stem, dot, number = entry.name.removesuffix(".out").rpartition(".")
        if entry.name.endswith(".out") and dot and number.isdigit():
            found.setdefault(stem, []).append((int(number), folder / entry.name))
    return {stem: sorted(files) for stem, files in found.items()}
