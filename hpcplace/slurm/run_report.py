"""A job and its run directory, for `hpcplace status | logs | cancel`: which run directory a Slurm job
id belongs to, whether the job a run directory records is still that run's job, and the failure
summary read back from the batch log and the failing rank's log.

The matching and parsing are pure functions of what Slurm said (a JobStatus) and of file texts; the few
file reads are in the functions named `find_*` and `read_*`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from hpcplace.errors import HpcplaceError, SlurmError
from hpcplace.plan.plan import Plan
from hpcplace.slurm import slurm_cli, submit
from hpcplace.slurm.submit import JobStatus

PLAN_NAME = "plan.json"
TAIL_LINES = 5  # lines of the failing rank's log that `status` shows
TAIL_WIDTH = 200  # characters kept of each of them
# sbatch's SubmitTime is taken before run.json is written; a job Slurm says was submitted this much
# earlier than run.json's `submitted_at` cannot be the one that run recorded (a requeue only moves it later).
SUBMIT_SLACK = timedelta(minutes=10)


# ------------------------------------------------------------------------------------------------
# job id -> run directory


def candidate_dirs(status: JobStatus) -> list[str]:
    """Where the job's run directory could be, most certain first: its working directory (hpcplace
    submits from the run directory), the directory of its batch script (`DIR/job.sbatch`, also when a
    user sbatch'd a rendered directory from elsewhere), and the run directory of its batch log
    (`DIR/logs/batch-%j.out`)."""
    out: list[str] = []
    if status.work_dir:
        out.append(status.work_dir)
    if status.command and os.path.isabs(status.command):
        out.append(os.path.dirname(status.command))
    logs = os.path.dirname(status.std_out)
    if os.path.isabs(status.std_out) and os.path.basename(logs) == "logs":
        out.append(os.path.dirname(logs))
    return list(dict.fromkeys(out))


def recorded_id(record: dict[str, object] | None) -> str | None:
    """The job id a run.json records (None: none, e.g. a rendered directory sbatch'd by hand)."""
    job_id = (record or {}).get("job_id")
    return str(job_id) if job_id else None


def find_run_dir(status: JobStatus) -> Path | None:
    """The run directory of the job Slurm described in `status`: the first candidate that holds a
    plan.json and whose run.json records this job (or no job at all: rendered, then sbatch'd by hand)."""
    for text in candidate_dirs(status):
        path = Path(text)
        if not (path / PLAN_NAME).is_file():
            continue
        try:
            record = submit.read_record(path)
        except SlurmError:  # an unreadable run.json: not a run directory we can trust
            continue
        if recorded_id(record) in (None, status.job_id):
            return path.absolute()
    return None


# ------------------------------------------------------------------------------------------------
# run directory -> is the job Slurm reports still this run's?


def _same_dir(a: str, b: str) -> bool:
    """Paths equal once resolved; slurmdbd stores `"` as a backquote in WorkDir."""
    return os.path.realpath(a) == os.path.realpath(b) or a.replace("`", '"') == b.replace("`", '"')


def _parse_time(text: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(text.strip())
    except (ValueError, AttributeError):
        return None
    return moment if moment.tzinfo is not None else moment.astimezone()  # Slurm's: the local time zone


def ownership_problem(run_dir: Path, record: dict[str, object] | None, status: JobStatus) -> str | None:
    """Why the job Slurm reports under the id run.json recorded is not this run's job (None: it is,
    or nothing says otherwise). Job ids restart when a cluster's state is reset, so the same id can
    name an unrelated job later. Where Slurm names the job's directories (working directory, batch
    script, batch log), one of them must be this run directory; where it names none (old accounting),
    the job must not have been submitted well before this run was."""
    job_id = status.job_id
    if not status.components:
        return None
    places = candidate_dirs(status)
    if places:
        if any(_same_dir(p, str(run_dir)) for p in places):
            return None
        return (
            f"job {job_id} is not this run's: Slurm's job {job_id} runs in {places[0]}"
            f"{' (submitted ' + status.submit_time + ')' if status.submit_time else ''}, not in {run_dir}, "
            f"which recorded job {job_id}{_recorded_when(record)}; the cluster's job ids restarted?"
        )
    submitted = _parse_time(str((record or {}).get("submitted_at", "")))
    slurm_time = _parse_time(status.submit_time)
    if submitted is not None and slurm_time is not None and slurm_time < submitted - SUBMIT_SLACK:
        return (
            f"job {job_id} is not this run's: Slurm's job {job_id} was submitted {status.submit_time}, "
            f"before {run_dir} was{_recorded_when(record)}; the cluster's job ids restarted?"
        )
    return None


def _recorded_when(record: dict[str, object] | None) -> str:
    when = (record or {}).get("submitted_at")
    return f" (submitted {when})" if when else ""


# ------------------------------------------------------------------------------------------------
# the Slurm version a status speaks of


def slurm_version_line(live: slurm_cli.SlurmVersion | None, recorded: slurm_cli.SlurmVersion | None) -> str:
    """`status`'s one line on Slurm's version: this host's (whose sacct printed the exit codes above) and,
    when it differs or is unknown, the one run.json recorded at submit time."""
    if live is None:
        where = f"; the job was submitted to Slurm {recorded}" if recorded is not None else ""
        return (
            f"  slurm: version unknown (`scontrol --version` gave none){where}: exit codes below 128 from "
            "sacct may be 128 less than the program's (sacct before 25.11)"
        )
    if recorded is None or recorded == live:
        return f"  slurm: {live}"
    return f"  slurm: {live} (the job was submitted to Slurm {recorded})"


# ------------------------------------------------------------------------------------------------
# failure summary


@dataclass(frozen=True)
class Failure:
    """What the batch log says about the first failure of the latest attempt."""

    headline: str  # the FAILED: line (names the first failing rank and its exit code)
    verdict: str | None  # "component 'x' failed first: the job fails with exit code N"
    component: str | None  # the failing component (the step's name in the batch log; `driver` in Ray mode)
    rank: int | None  # the rank that failed first
    host: str | None
    cause: str | None = None  # why, when the script knows (the time-limit warning's SIGTERM, untrapped)


_PREFIX = "hpcplace: "
_ATTEMPT = re.compile(r"^hpcplace: job \d+ attempt \d+: ")
_HEADLINE_RANK = re.compile(r"exited with code \d+: rank (\d+) on (\S+) failed first")
_FIRST_RANK = re.compile(r"^\s*component '(.*)' ranks? (\d+)\S* on (\S+): Exited with exit code \d+$")


def parse_failure(batch_log: str) -> Failure | None:
    """The latest `FAILED:` block of a batch log (`hpcplace: ` lines of hp_report_failure, then the
    script's verdict); None when the job has not failed (so far)."""
    lines = batch_log.splitlines()
    begun = [i for i, line in enumerate(lines) if _ATTEMPT.match(line)]  # a requeued job appends its attempts
    lines = lines[begun[-1] :] if begun else lines
    start = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].startswith(_PREFIX + "FAILED:")), None)
    if start is None:
        return None
    headline = lines[start][len(_PREFIX) :]
    verdict = component = host = cause = None
    rank = None
    m = re.match(r"FAILED: component '(.*?)' \(", headline)
    if m:
        component = m.group(1)
    first = _HEADLINE_RANK.search(headline)  # the headline names the first failing rank
    if first:
        rank, host = int(first.group(1)), first.group(2)
    for line in lines[start + 1 :]:
        if not line.startswith(_PREFIX):
            continue
        text = line[len(_PREFIX) :]
        hit = _FIRST_RANK.match(text)
        if "this SIGTERM was Slurm's time-limit warning" in text:
            cause = text.strip()
        if hit and rank is None:  # an older headline: the first rank srun says exited with a code
            component, rank, host = hit.group(1), int(hit.group(2)), hit.group(3)
        elif " failed first: " in text and text.startswith("component "):
            verdict = text
            break
    return Failure(headline, verdict, component, rank, host, cause)


def tail(text: str, n: int = TAIL_LINES, width: int = TAIL_WIDTH) -> list[str]:
    """The last n non-blank lines, each cut to `width` characters (a progress bar can be one huge line)."""
    lines = [line.rstrip() for line in text.replace("\r", "\n").splitlines() if line.strip()]
    return [line if len(line) <= width else line[: width - 3] + "..." for line in lines[-n:]]


def failure_lines(failure: Failure, log_path: Path | None, log_text: str | None) -> list[str]:
    """The lines `status` prints for a failure: the batch log's verdict and headline, then the last
    lines of the failing rank's log."""
    out = ["  failure (from the batch log):"]
    out += [f"    {line}" for line in (failure.verdict, failure.headline, failure.cause) if line]
    if failure.component is None or failure.rank is None:
        return out
    who = f"{failure.component} rank {failure.rank}"
    if log_path is None:
        out.append(f"    ({who}: its log is not known: no logs/nodes.txt)")
    elif log_text is None:
        out.append(f"    ({who}: no log at {log_path})")
    else:
        last = tail(log_text)
        out.append(
            f"    last {len(last)} line(s) of {who}'s log ({log_path}):"
            if last
            else f"    ({who}'s log {log_path} is empty)"
        )
        out += [f"      | {line}" for line in last]
    return out


def failing_log(run_dir: Path, failure: Failure, plan: Plan) -> Path | None:
    """The log file of the rank that failed first (steps mode: logs/<step>.<host>.<task>.out; the Ray
    driver: logs/driver.out)."""
    from hpcplace.slurm.slurm_job import lower

    if plan.launch.is_ray:
        return run_dir / "logs" / "driver.out" if failure.component == "driver" else None
    for r in submit.rank_logs(run_dir, lower(plan), submit.read_hosts(run_dir)):
        if r.component == failure.component and r.rank == failure.rank:
            return r.path
    return None


def read_failure(run_dir: Path, job_id: str | None, ended_failed: bool = False) -> list[str]:
    """`status`'s failure summary from the run directory's files ([] when nothing failed). A job that
    `ended_failed` before any step did (its library refused, `cd` to the run directory failed) has no
    FAILED: block: the end of its batch log says why."""
    logs = sorted((run_dir / "logs").glob(f"batch-{job_id}.out" if job_id else "batch-*.out"))
    if not logs:
        return []
    batch_text = logs[-1].read_text(encoding="utf-8", errors="replace")
    failure = parse_failure(batch_text)
    if failure is None:
        last = tail(batch_text) if ended_failed else []
        return [f"  the batch log ends with ({logs[-1]}):"] + [f"    | {line}" for line in last] if last else []
    try:
        plan = submit.load_plan(run_dir / PLAN_NAME)
        path = failing_log(run_dir, failure, plan)
    except (OSError, ValueError, KeyError, TypeError, HpcplaceError):  # a plan this version cannot read
        path = None  # the batch log's lines alone
    text = path.read_text(encoding="utf-8", errors="replace") if path is not None and path.is_file() else None
    return failure_lines(failure, path, text)


__all__ = [
    "Failure",
    "candidate_dirs",
    "failing_log",
    "failure_lines",
    "find_run_dir",
    "ownership_problem",
    "parse_failure",
    "read_failure",
    "recorded_id",
    "slurm_version_line",
    "tail",
]


# ------------------------------------------------------------------------------------------------
# the Ray launch mode's ports and paths (runtime/ray_node.py writes ray/nodes/n<rank>.json)

PORT_NAMES = (  # ray/nodes/n<rank>.json's `ports` keys, in the order status shows them
    ("gcs", "GCS"),
    ("node_manager", "node manager"),
    ("object_manager", "object manager"),
    ("dashboard", "dashboard"),
    ("dashboard_agent_grpc", "dashboard agent grpc"),
    ("dashboard_agent_http", "dashboard agent http"),
    ("metrics_export", "metrics"),
    ("runtime_env_agent", "runtime-env agent"),
    ("client_server", "client server"),
)


def ray_node_lines(records: list[dict[str, object]]) -> list[str]:
    """Each Ray node's ports and dirs, by node rank: what a job sharing its nodes with others used
    (ports below the node's ephemeral range, its own temp dir). Records missing a field say less."""
    lines: list[str] = []
    for rec in sorted(records, key=lambda r: int(str(r.get("rank", 0))) if str(r.get("rank", "")).isdigit() else 0):
        ports = rec.get("ports")
        if not isinstance(ports, dict):
            continue
        named = [f"{label} {ports[key]}" for key, label in PORT_NAMES if key in ports]
        if "min_worker" in ports and "max_worker" in ports:
            named.append(f"workers {ports['min_worker']}-{ports['max_worker']}")
        eph = rec.get("ephemeral")
        below = f" (ephemeral range {eph[0]}-{eph[1]})" if isinstance(eph, list) and len(eph) == 2 else ""
        lines.append(f"Ray node rank {rec.get('rank', '?')} on {rec.get('host', '?')}: ports {', '.join(named)}{below}")
        if rec.get("temp_dir"):
            lines.append(f"  temp dir {rec['temp_dir']}, spill dir {rec.get('spill_dir', '?')}")
        gpus = rec.get("gpus")
        if isinstance(gpus, list) and gpus:  # job-relative GPU ids (slurm.exclusive: false)
            lines.append(f"  GPUs {','.join(map(str, gpus))} of the node (the plan's job-relative 0-{len(gpus) - 1})")
    return lines


# the preflight's note on a node of a job sharing its nodes (runtime/preflight.py, run)
_JOB_GPUS = re.compile(
    r"the job's GPU\(s\) ([0-9,]+|none), of which the plan uses ([0-9,]+|none) \(job-relative ([0-9,]+|none)\)"
)


def job_gpu_lines(run_dir: Path) -> list[str]:
    """A job whose plan holds job-relative GPU ids (slurm.exclusive: false): the physical GPUs Slurm gave
    it on each node and the ones its plan uses, from each node's preflight (logs/preflight.<node>.out,
    in logs/nodes.txt's order); nothing when no preflight said so."""
    lines = []
    try:
        nodes = [line.split()[2] for line in (run_dir / "logs" / "nodes.txt").read_text().splitlines() if line.strip()]
    except (OSError, IndexError):
        return []
    for host in nodes:
        try:
            text = (run_dir / "logs" / f"preflight.{host}.out").read_text(errors="replace")
        except OSError:
            continue
        match = _JOB_GPUS.search(text)
        if match:
            got, used, relative = match.groups()
            lines.append(f"  {host}: the job's GPUs {got}; the plan's {relative} are {used}")
    return ["GPUs (job-relative ids: slurm.exclusive: false; physical ids per node):", *lines] if lines else []


def read_ray_nodes(run_dir: Path) -> list[dict[str, object]]:
    """The records of ray/nodes/ (unreadable ones skipped: status says less, never fails)."""
    import json

    out: list[dict[str, object]] = []
    for path in sorted((run_dir / "ray" / "nodes").glob("n*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            out.append(data)
    return out
