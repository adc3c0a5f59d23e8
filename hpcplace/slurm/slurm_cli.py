"""The one place hpcplace runs Slurm's commands (sbatch, squeue, scontrol, sacct, scancel).

Every call is an argv list with a timeout; a missing command, a timeout or a refusal becomes a
SlurmError that quotes Slurm. Parsing of the text Slurm prints lives here too, as pure functions,
and so do the differences between Slurm versions (SlurmVersion, VERSION_CHANGES, SlurmDialect):
data that the parsers read, never `if version >= ...` elsewhere (docs/slurm-versions.md).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

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
        return self.stderr.strip() or self.stdout.strip() or f"exit status {self.returncode}"


# What Slurm's commands print when no controller answers from this host (no slurm.conf and no DNS SRV
# record for configless Slurm; the controller down or unreachable).
NO_CONTROLLER = re.compile(
    r"resolve_ctls_from_dns_srv|Could not establish a configuration source|"
    r"fetch_config: DNS SRV lookup failed|Unable to contact slurm controller|"
    r"Unable to establish control machine address",
    re.IGNORECASE,
)


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
        "`scontrol ping` answers; run hpcplace on a login node of the cluster",
    )


def run(argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT_S, cwd: str | None = None) -> CommandResult:
    """Run one Slurm command; never raises for a non-zero status (callers decide), except when no
    controller answers at all (NoControllerError: nothing a caller could do differs)."""
    argv = tuple(argv)
    if shutil.which(argv[0]) is None:
        raise SlurmError(
            f"`{argv[0]}` was not found on PATH",
            hint="run hpcplace on a Slurm login node (or load the site's slurm module); "
            "`hpcplace render` and `submit --dry-run` work without Slurm",
        )
    conf = os.environ.get("SLURM_CONF")
    if conf and not os.path.isfile(conf):  # Slurm's tools retry a missing file for 60 s, then fail anyway
        raise NoControllerError(
            f"SLURM_CONF names {conf}, which is not a file: no Slurm command can read the cluster's configuration",
            hint="point SLURM_CONF at the cluster's slurm.conf, or unset it to use "
            "/etc/slurm/slurm.conf (or the site's configless setup)",
        )
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise SlurmError(
            f"`{' '.join(argv)}` did not answer within {timeout:g} s",
            hint="the Slurm controller may be overloaded or down; try again later",
        ) from None
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
        out[m.group(1)] = line[m.end() : end].strip()
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
        raise SlurmError(
            f"sbatch printed {stdout.strip()!r}, not a job id", hint="check `squeue --me` before submitting again"
        )
    return job_id


# ------------------------------------------------------------------------------------------------
# versions (pure): what each Slurm prints differently, as data


@dataclass(frozen=True, order=True)
class SlurmVersion:
    """A Slurm release, e.g. 22.05.8; ordered, so `version < OLDEST_SUPPORTED` reads as it says."""

    major: int
    minor: int
    micro: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor:02d}.{self.micro}"

    @property
    def release(self) -> str:
        """`22.05`: the release series (what Slurm's release notes and upgrade rules speak of)."""
        return f"{self.major}.{self.minor:02d}"


OLDEST_SUPPORTED = SlurmVersion(22, 5, 0)  # Debian 12's 22.05.8 is the oldest the CI tier runs
_VERSION = re.compile(r"^\s*slurm(?:-wlm)?\s+(\d+)\.(\d+)\.(\d+)\S*\s*$", re.IGNORECASE | re.MULTILINE)
_VERSION_TEXT = re.compile(r"(\d+)\.(\d+)\.(\d+)")


class UnsupportedSlurmError(SlurmError):
    """The site's Slurm is older than the oldest release hpcplace is tested on."""


def parse_version(text: str) -> SlurmVersion | None:
    """What `scontrol --version` / `sinfo --version` print (`slurm 22.05.8`, `slurm-wlm 26.05.5`,
    `slurm 25.11.0-0rc1`; a site wrapper may add lines around it) -> SlurmVersion; None when no line says."""
    m = _VERSION.search(text)
    return SlurmVersion(int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def version_from_record(value: object) -> SlurmVersion | None:
    """run.json's `slurm_version` ("22.05.8") -> SlurmVersion; None when absent or not a version (a run
    directory written before hpcplace recorded it still loads)."""
    m = _VERSION_TEXT.fullmatch(value.strip()) if isinstance(value, str) else None
    return SlurmVersion(int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def check_supported(version: SlurmVersion) -> SlurmVersion:
    """The version itself, or UnsupportedSlurmError when it is older than OLDEST_SUPPORTED."""
    if version < OLDEST_SUPPORTED:
        raise UnsupportedSlurmError(
            f"this site runs Slurm {version}; hpcplace supports Slurm {OLDEST_SUPPORTED.release} and newer "
            f"(the job script, the het-job steps and the parsers of scontrol/sacct are tested from "
            f"{OLDEST_SUPPORTED.release} on)",
            hint=f"run hpcplace on a cluster with Slurm {OLDEST_SUPPORTED.release} or newer; `hpcplace render` and "
            "`submit --dry-run` "
            "still write the job script to read (docs/slurm-versions.md lists what differs per version)",
        )
    return version


@dataclass(frozen=True)
class SlurmDialect:
    """How one Slurm version prints what hpcplace reads. Built from VERSION_CHANGES by `dialect`: the
    parsers ask it, so a new version's difference is one row there, not a branch in each caller. (What
    every version's parser reads alike, such as 25.11's blank StdErr, needs no row.)"""

    version: SlurmVersion | None  # None: unknown (the parsers then accept every version's form)
    # sacct prints WEXITSTATUS - 128 for codes of 128 and more (143 -> 15:0); gone in 25.11 (143:0)
    sacct_subtracts_128: bool | None = True
    # the keys of a job's TRES in `scontrol show job`: TRES= (22.05), ReqTRES=/AllocTRES= (23.02)
    job_tres_keys: tuple[str, ...] = ("TRES",)


@dataclass(frozen=True)
class VersionChange:
    """One row of what changed: from `since` on, `field` of the dialect is `value`."""

    since: SlurmVersion
    field: str  # a SlurmDialect field (a test checks every row names one)
    value: Any  # of that field's type
    what: str


VERSION_CHANGES: tuple[VersionChange, ...] = (
    VersionChange(
        SlurmVersion(23, 2, 0),
        "job_tres_keys",
        ("AllocTRES", "ReqTRES"),
        "`scontrol show job` prints ReqTRES= and AllocTRES= instead of TRES=",
    ),
    VersionChange(
        SlurmVersion(25, 11, 0),
        "sacct_subtracts_128",
        False,
        "sacct prints exit codes above 128 as they are (143:0, was 15:0)",
    ),
)


def dialect(version: SlurmVersion | None) -> SlurmDialect:
    """The dialect of `version`: 22.05's, with every VERSION_CHANGES row up to `version` applied. An
    unknown version knows no encoding (sacct_subtracts_128=None) and reads both TRES forms."""
    if version is None:
        return SlurmDialect(None, sacct_subtracts_128=None, job_tres_keys=("AllocTRES", "ReqTRES", "TRES"))
    out = SlurmDialect(version)
    for change in sorted(VERSION_CHANGES, key=lambda c: c.since):
        if change.since <= version:
            out = replace(out, **{change.field: change.value})
    return out


# ------------------------------------------------------------------------------------------------
# exit codes (pure): right under both sacct encodings


def signal_name(number: int) -> str:
    """15 -> `SIGTERM`; a number this system does not name -> `signal 40`."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@dataclass(frozen=True)
class ExitStatus:
    """A job's or step's `ExitCode` (`CODE:SIGNAL`), with what it means.

    `code` is the exit status as the shell saw it ($? of the process, 143 for a program that ended on
    SIGTERM through its handler or shell), None when unknown; `signal` the signal that killed it
    outright (the `:N` part), 0 for none. Under sacct before 25.11 a printed code below 128 may be the
    real code minus 128: `code` is then None and `candidates` holds both."""

    printed: str
    code: int | None
    signal: int
    candidates: tuple[int, ...] = ()

    @property
    def terminated_by(self) -> int | None:
        """The signal that ended the process, when certain: killed by it, or exited 128+N (N < 32)."""
        if self.signal:
            return self.signal
        if self.code is not None and 128 < self.code < 160:
            return self.code - 128
        return None

    @property
    def maybe_terminated_by(self) -> int | None:
        """The signal it may have ended on when the encoding leaves it open (22.05's `15:0`)."""
        return next((c - 128 for c in self.candidates if 128 < c < 160), None)

    def meaning(self) -> str:
        """A few words after what Slurm printed: `killed by SIGTERM`, `128+SIGTERM`, `or 143 = 128+SIGTERM`;
        "" when the number says it all (0, a plain code)."""
        if self.signal:
            return f"killed by {signal_name(self.signal)}"
        if self.terminated_by is not None:
            return f"128+{signal_name(self.terminated_by)}"
        maybe = self.maybe_terminated_by
        if maybe is not None:
            return f"or {128 + maybe} = 128+{signal_name(maybe)}"
        return ""

    def __str__(self) -> str:
        """What Slurm printed, then its meaning in parentheses (`15:0 (or 143 = 128+SIGTERM)`)."""
        words = self.meaning()
        return f"{self.printed} ({words})" if words else self.printed


def exit_status(printed: str, *, source: str, version: SlurmVersion | None) -> ExitStatus | None:
    """`ExitCode`/`DerivedExitCode` as Slurm printed it -> ExitStatus; None when it is not `N:M` (blank,
    a pending job). `source` is the command that printed it: `scontrol` prints the exit status as it is
    on every version; `sacct` before 25.11 prints a status of 128 or more minus 128 (Slurm's
    src/sacct/print.c), so there 143 and 15 both print `15:0` (and 128 prints `0:0`). `version` is the
    sacct that printed it (this host's): None (unknown) reads a code of 128 or more as exact (only 25.11+
    prints one) and a lower one as open."""
    m = re.fullmatch(r"\s*(\d+):(\d+)\s*", printed or "")
    if m is None:
        return None
    code, sig = int(m.group(1)), int(m.group(2))
    text = f"{code}:{sig}"
    if source not in ("scontrol", "sacct"):
        raise ValueError(f"exit_status: source {source!r} is not 'scontrol' or 'sacct'")
    if sig or code >= 128 or source == "scontrol":
        return ExitStatus(text, None if sig else code, sig)
    if dialect(version).sacct_subtracts_128 is False:
        return ExitStatus(text, code, 0)
    return ExitStatus(text, None, 0, (code, code + 128))


# ------------------------------------------------------------------------------------------------
# job records (pure): `scontrol show job -o` of every version


@dataclass(frozen=True)
class JobRecord:
    """One het component as `scontrol show job -o` describes it, the same on every supported version."""

    job_id: str
    het_offset: int
    state: str
    partition: str
    nodes: str
    reason: str
    exit_code: str
    run_time: str
    work_dir: str
    submit_time: str
    std_out: str
    std_err: str  # where its stderr goes: StdOut when Slurm prints StdErr blank (25.11, --error not given)
    command: str
    req_tres: Mapping[str, str]
    alloc_tres: Mapping[str, str]


def parse_tres(text: str) -> dict[str, str]:
    """`cpu=2,mem=2000M,node=1,billing=2,gres/gpu=8` -> {"cpu": "2", "mem": "2000M", ..., "gres/gpu": "8"}."""
    out: dict[str, str] = {}
    for item in (text or "").split(","):
        key, eq, value = item.strip().partition("=")
        if eq and key:
            out[key] = value
    return out


def parse_job_record(fields: Mapping[str, str], version: SlurmVersion | None = None) -> JobRecord:
    """One parsed `scontrol show job -o` line -> JobRecord. TRES come from AllocTRES/ReqTRES (23.02+) or
    TRES (22.05, the allocated TRES once running); a blank StdErr means stderr goes to StdOut. `version`
    (the scontrol that printed it) picks the keys; None accepts every version's."""
    keys = dialect(version).job_tres_keys
    alloc = next((fields[k] for k in ("AllocTRES", "TRES") if k in keys and fields.get(k)), "")
    req = next((fields[k] for k in ("ReqTRES", "TRES") if k in keys and fields.get(k)), "")
    std_out = fields.get("StdOut", "")
    std_err = fields.get("StdErr", "")
    offset = fields.get("HetJobOffset", "0")
    return JobRecord(
        job_id=fields.get("JobId", ""),
        het_offset=int(offset) if offset.isdigit() else 0,
        state=fields.get("JobState", ""),
        partition=fields.get("Partition", ""),
        nodes=fields.get("NodeList", ""),
        reason=fields.get("Reason", ""),
        exit_code=fields.get("ExitCode", ""),
        run_time=fields.get("RunTime", ""),
        work_dir=fields.get("WorkDir", ""),
        submit_time=fields.get("SubmitTime", ""),
        std_out=std_out,
        std_err=std_err if std_err and std_err != "(null)" else std_out,
        command=fields.get("Command", ""),
        req_tres=parse_tres(req),
        alloc_tres=parse_tres(alloc),
    )


# ------------------------------------------------------------------------------------------------
# commands

VERSION_ARGV = ("scontrol", "--version")  # answers without a controller: it reads no configuration


def read_version(*, timeout: float = DEFAULT_TIMEOUT_S) -> SlurmVersion:
    """This host's Slurm version (`scontrol --version`); SlurmError when it cannot be read."""
    res = run(VERSION_ARGV, timeout=timeout)
    version = parse_version(res.stdout) if res.returncode == 0 else None
    if version is None:
        said = (res.stdout.strip() or res.stderr.strip() or f"nothing (exit status {res.returncode})")[:200]
        raise SlurmError(
            f"`{' '.join(VERSION_ARGV)}` printed {said!r}, not a Slurm version such as 'slurm 22.05.8'",
            hint="check that the scontrol on PATH is the cluster's (the site's "
            "slurm module loaded); hpcplace reads the version once per "
            "submit and validate",
        )
    return version


def site_version(*, timeout: float = DEFAULT_TIMEOUT_S) -> SlurmVersion:
    """read_version, refused when older than OLDEST_SUPPORTED: what `validate` and `submit` ask once."""
    return check_supported(read_version(timeout=timeout))


def try_read_version(*, timeout: float = DEFAULT_TIMEOUT_S) -> SlurmVersion | None:
    """read_version for commands that work without it (`status`): None when it cannot be read."""
    try:
        return read_version(timeout=timeout)
    except NoControllerError:
        raise  # nothing else will work either: say it once, now
    except SlurmError:
        return None


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
    res = run(["sacct", "-X", "--parsable2", "--noheader", "-o", "JobID,WorkDir", "-S", "now-7days"], timeout=timeout)
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
