"""The one place hpcplace runs Slurm's commands (sbatch, squeue, scontrol, sacct, scancel).

Every call is an argv list with a timeout; a missing command, a timeout or a refusal becomes a
SlurmError that quotes Slurm. Parsing of the text Slurm prints lives here too, as pure functions.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from submitit.slurm.slurm import SlurmInfoWatcher

from hpcplace.errors import SlurmError

DEFAULT_TIMEOUT_S = 60.0
ACCOUNTING_DISABLED = ("accounting storage is disabled", "slurmdbd", "Slurm accounting storage is disabled")


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def message(self) -> str:
        """What Slurm said, for an error message."""
        return (self.stderr.strip() or self.stdout.strip() or f"exit status {self.returncode}")


# What Slurm's commands print when no controller answers from this host (no slurm.conf and no DNS SRV
# record for configless Slurm; the controller down or unreachable).
NO_CONTROLLER = re.compile(r"resolve_ctls_from_dns_srv|Could not establish a configuration source|"
                           r"fetch_config: DNS SRV lookup failed|Unable to contact slurm controller|"
                           r"Unable to establish control machine address", re.IGNORECASE)


class NoControllerError(SlurmError):
    """No Slurm controller answers from this host: no command can work, whichever was asked."""


def no_controller(result: CommandResult) -> NoControllerError | None:
    """The one-line explanation (Slurm's own text once, indented) when `result` says no controller answers."""
    if result.returncode == 0 or not NO_CONTROLLER.search(result.stderr + result.stdout):
        return None
    raw = list(dict.fromkeys(line.strip() for line in (result.stderr or result.stdout).splitlines() if line.strip()))
    return NoControllerError(
        f"no Slurm controller answers from this host (`{' '.join(result.argv[:3])}` failed)"
        + "".join(f"\n    {line}" for line in raw[:8]),
        hint="check that SLURM_CONF (or /etc/slurm/slurm.conf) names the cluster's controller and that "
             "`scontrol ping` answers; run hpcplace on a login node of the cluster")


def run(argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT_S, cwd: str | None = None) -> CommandResult:
    """Run one Slurm command; never raises for a non-zero status (callers decide), except when no
    controller answers at all (NoControllerError: nothing a caller could do differs)."""
    argv = tuple(argv)
    if shutil.which(argv[0]) is None:
        raise SlurmError(f"`{argv[0]}` was not found on PATH",
                         hint="run hpcplace on a Slurm login node (or load the site's slurm module); "
                              "`hpcplace render` and `submit --dry-run` work without Slurm")
    conf = os.environ.get("SLURM_CONF")
    if conf and not os.path.isfile(conf):  # Slurm's tools retry a missing file for 60 s, then fail anyway
        raise NoControllerError(f"SLURM_CONF names {conf}, which is not a file: no Slurm command can read "
                                "the cluster's configuration",
                                hint="point SLURM_CONF at the cluster's slurm.conf, or unset it to use "
                                     "/etc/slurm/slurm.conf (or the site's configless setup)")
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"`{' '.join(argv)}` did not answer within {timeout:g} s",
                         hint="the Slurm controller may be overloaded or down; try again later") from None
    except OSError as exc:
        raise SlurmError(f"cannot run `{argv[0]}`: {exc.strerror}") from None
    result = CommandResult(argv, done.returncode, done.stdout, done.stderr)
    error = no_controller(result)
    if error is not None:
        raise error
    return result


# ------------------------------------------------------------------------------------------------
# parsing (pure)

_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/:]*)=")


def parse_key_values(line: str) -> dict[str, str]:
    """One `scontrol show ... -o` line -> {key: value}. Values may hold spaces (OS=Linux 6.1 #1 ...):
    a value runs until the next ` Key=`."""
    matches = list(_KEY.finditer(line))
    out: dict[str, str] = {}
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out[m.group(1)] = line[m.end():end].strip()
    return out


def parse_gres(text: str) -> dict[str, dict[str | None, int]]:
    """`gpu:a800:8(S:0-1),robot:4` -> {"gpu": {"a800": 8}, "robot": {None: 4}}."""
    out: dict[str, dict[str | None, int]] = {}
    if not text or text == "(null)":
        return out
    for item in re.split(r",(?![^(]*\))", text):
        item = re.sub(r"\(.*\)$", "", item.strip())
        if not item:
            continue
        parts = item.split(":")
        name, gtype, count = parts[0], None, 1
        if len(parts) >= 3:
            gtype, count_text = parts[1], parts[2]
        elif len(parts) == 2:
            if parts[1].isdigit() or re.fullmatch(r"\d+[KMG]?", parts[1]):
                count_text = parts[1]
            else:
                gtype, count_text = parts[1], "1"
        else:
            count_text = "1"
        count = _count(count_text)
        out.setdefault(name, {})
        out[name][gtype] = out[name].get(gtype, 0) + count
    return out


def _count(text: str) -> int:
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip())
    if not m:
        return 0
    return int(m.group(1)) * {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[m.group(2)]


def parse_parsable(text: str, fields: Sequence[str]) -> list[dict[str, str]]:
    """`--parsable2 --noheader` rows (`|`-separated) -> dicts."""
    rows = []
    for line in text.splitlines():
        if line.strip():
            rows.append(dict(zip(fields, line.split("|"))))
    return rows


def parse_job_id(stdout: str) -> str:
    """`sbatch --parsable` prints `ID` or `ID;cluster`."""
    text = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    job_id = text.split(";")[0].strip()
    if not job_id.isdigit():
        raise SlurmError(f"sbatch printed {stdout.strip()!r}, not a job id",
                         hint="check `squeue --me` before submitting again")
    return job_id


# ------------------------------------------------------------------------------------------------
# commands

def sbatch(script: str, *, cwd: str, test_only: bool = False, timeout: float = DEFAULT_TIMEOUT_S) -> CommandResult:
    argv = ["sbatch", "--parsable"] + (["--test-only"] if test_only else []) + [script]
    return run(argv, timeout=timeout, cwd=cwd)


def sbatch_argv(script: str, *, test_only: bool = False) -> list[str]:
    return ["sbatch", "--parsable"] + (["--test-only"] if test_only else []) + [script]


def show_job(job_id: str, *, timeout: float = DEFAULT_TIMEOUT_S) -> list[dict[str, str]] | None:
    """`scontrol show job -o ID`: one dict per het component; None when the controller forgot it."""
    res = run(["scontrol", "show", "job", "-o", job_id], timeout=timeout)
    if res.returncode != 0:
        if "Invalid job id" in res.message:
            return None
        raise SlurmError(f"scontrol show job {job_id} failed: {res.message}")
    return [parse_key_values(line) for line in res.stdout.splitlines() if line.strip()]


SACCT_JOB_FIELDS = ("JobID", "JobName", "Partition", "State", "ExitCode", "NodeList", "Elapsed", "WorkDir", "Submit")


def sacct(job_id: str, *, steps: bool = False, timeout: float = DEFAULT_TIMEOUT_S) -> list[dict[str, str]] | None:
    """Accounting rows of a job (`ID+offset` per het component; steps too if asked); None when the
    cluster has no accounting."""
    argv = ["sacct", "-j", job_id, "--parsable2", "--noheader", "-o", ",".join(SACCT_JOB_FIELDS)]
    if not steps:
        argv.insert(1, "-X")
    res = run(argv, timeout=timeout)
    if res.returncode != 0:
        if any(s in res.message for s in ACCOUNTING_DISABLED):
            return None
        raise SlurmError(f"sacct -j {job_id} failed: {res.message}")
    return parse_parsable(res.stdout, SACCT_JOB_FIELDS)


def scancel(job_id: str, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
    res = run(["scancel", job_id], timeout=timeout)
    if res.returncode != 0:
        raise SlurmError(f"scancel {job_id} failed: {res.message}")


def jobs_in_workdir(work_dir: str, *, timeout: float = DEFAULT_TIMEOUT_S) -> list[str]:
    """Leader ids of the user's jobs whose working directory is `work_dir` (squeue, then sacct):
    how a retried submit finds a job an interrupted one already handed to Slurm."""
    found: list[str] = []
    res = run(["squeue", "--me", "--noheader", "-o", "%i|%Z"], timeout=timeout)
    if res.returncode == 0:
        for row in parse_parsable(res.stdout, ("JobID", "WorkDir")):
            if row.get("WorkDir") == work_dir:
                found.append(row["JobID"].split("+")[0])
    res = run(["sacct", "-X", "--parsable2", "--noheader", "-o", "JobID,WorkDir", "-S", "now-7days"],
              timeout=timeout)
    if res.returncode == 0:
        for row in parse_parsable(res.stdout, ("JobID", "WorkDir")):
            if row.get("WorkDir") == work_dir:
                found.append(row["JobID"].split("+")[0])
    return sorted(set(found), key=int)


def show_partitions(*, timeout: float = DEFAULT_TIMEOUT_S) -> list[dict[str, str]]:
    res = run(["scontrol", "show", "partition", "-o"], timeout=timeout)
    if res.returncode != 0:
        raise SlurmError(f"scontrol show partition failed: {res.message}")
    return [parse_key_values(line) for line in res.stdout.splitlines() if line.strip()]


def show_nodes(*, timeout: float = DEFAULT_TIMEOUT_S) -> list[dict[str, str]]:
    res = run(["scontrol", "show", "node", "-o"], timeout=timeout)
    if res.returncode != 0:
        raise SlurmError(f"scontrol show node failed: {res.message}")
    return [parse_key_values(line) for line in res.stdout.splitlines() if line.strip()]


# ------------------------------------------------------------------------------------------------
# submitit's watcher, taught about het jobs

class HetJobWatcher(SlurmInfoWatcher):
    """submitit's sacct watcher (batched `sacct --parsable2` calls on a backoff schedule: 0, 2, 4,
    8 ... s, capped at `delay_s`; finished states cached). sacct names het components `ID+k`
    and has no row for plain `ID`, so components are registered as `ID+k` and the query asks for
    the leader id, which returns every component."""

    def _make_command(self) -> list[str] | None:
        leaders = sorted({x.split("+")[0].split("_")[0] for x in self._registered - self._finished})
        if not leaders:
            return None
        command = ["sacct", "-o", "JobID,State,NodeList", "--parsable2"]
        for jid in leaders:
            command.extend(["-j", jid])
        return command
