"""The `slurm:` block's job-level options and their rules: which keys exist, what a time limit, a warning
signal, a kill wait or extra sbatch arguments may be. Planning checks them (with the config location) and
lowering uses them (hpcplace.slurm.slurm_job), so they live below both."""

from __future__ import annotations

import re
import shlex

from hpcplace.errors import SpecError

# The job-level `slurm:` keys every format accepts (lowered in hpcplace.slurm.slurm_job).
SLURM_JOB_OPTIONS = frozenset(
    {
        "time",
        "job_name",
        "mail_user",
        "mail_type",
        "exclusive",
        "output_dir",
        "extra_sbatch_args",
        "signal_before_limit",
        "kill_wait",
        "requeue",
        "shared_paths",
        "preflight",
        "shm_per_node",
    }
)


def sbatch_time_ok(value: str) -> bool:
    """Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, or UNLIMITED/INFINITE."""
    if value.upper() in ("UNLIMITED", "INFINITE"):
        return True
    return re.fullmatch(r"(\d+-\d+(:\d+){0,2}|\d+(:\d+){0,2})", value) is not None


DEFAULT_LIMIT_SIGNAL = "TERM@120"
_SIGNAL_NAMES = (
    "HUP",
    "INT",
    "QUIT",
    "ABRT",
    "KILL",
    "USR1",
    "USR2",
    "PIPE",
    "ALRM",
    "TERM",
    "CONT",
    "STOP",
    "TSTP",
    "TTIN",
    "TTOU",
    "URG",
    "XCPU",
    "XFSZ",
    "VTALRM",
    "PROF",
    "WINCH",
    "PWR",
    "SYS",
)


def limit_signal(value: str) -> str | None:
    """slurm.signal_before_limit -> `SIG@SECONDS`, or None when turned off. The job renders
    `--signal=B:USR2@SECONDS` (the batch script alone); the script passes SIG on to the programs once
    they run (every step's tasks; the Ray mode's driver only). Accepts `120` (SIGTERM), `USR1@300`,
    `SIGUSR1@300`, `false`/`0`/`none`."""
    text = str(value).strip()
    if text.lower() in ("false", "no", "none", "off", "0"):
        return None
    sig, _, seconds = text.rpartition("@")
    sig = (sig or "TERM").upper().removeprefix("SIG")
    hint = "write SECONDS (SIGTERM that long before the limit), SIGNAL@SECONDS like USR1@300, or false"
    hint += _as_seconds_hint(seconds, f"{sig}@" if "@" in text else "")
    if not seconds.isdigit() or not 1 <= int(seconds) <= 65535:
        raise SpecError(
            f"slurm.signal_before_limit {value!r}: {seconds!r} is not a number of seconds from 1 to 65535", hint=hint
        )
    if sig not in _SIGNAL_NAMES and not (sig.isdigit() and 1 <= int(sig) <= 64):
        raise SpecError(
            f"slurm.signal_before_limit {value!r}: {sig!r} is not a signal",
            hint=f"{hint}; signals: {', '.join(_SIGNAL_NAMES)}",
        )
    if sig in ("KILL", "STOP", "9", "19"):
        raise SpecError(
            f"slurm.signal_before_limit {value!r}: SIG{sig} cannot be caught, so it warns no one", hint=hint
        )
    return f"{sig}@{int(seconds)}"


def time_limit_seconds(value: str) -> int | None:
    """A Slurm time limit in seconds (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S); None when unset/unlimited."""
    if not value or value.upper() in ("UNLIMITED", "INFINITE") or not sbatch_time_ok(value):
        return None
    days, _, rest = value.rpartition("-")
    parts = [int(x) for x in rest.split(":")]
    if days:
        h, m, sec = (parts + [0, 0])[:3]
        return ((int(days) * 24 + h) * 60 + m) * 60 + sec
    if len(parts) == 1:
        return parts[0] * 60
    if len(parts) == 2:
        return parts[0] * 60 + parts[1]
    return (parts[0] * 60 + parts[1]) * 60 + parts[2]


def _as_seconds_hint(text: str, prefix: str = "") -> str:
    """`; for 1:30 write 90` when `text` is a duration written M:S or H:M:S, where seconds are asked."""
    if re.fullmatch(r"\d+(:\d+){1,2}", text) is None:
        return ""
    seconds = 0
    for part in text.split(":"):
        seconds = seconds * 60 + int(part)
    return f"; for {text} write {prefix}{seconds} (seconds, no colons)"


def kill_wait(value: str | None) -> int | None:
    """slurm.kill_wait: seconds between SIGTERM and SIGKILL when the job stops its steps."""
    if value is None or str(value).strip() == "":
        return None
    text = str(value).strip()
    if not text.isdigit() or int(text) > 3600:
        raise SpecError(
            f"slurm.kill_wait {value!r} is not a number of seconds from 0 to 3600",
            hint="leave it out to use the cluster's KillWait (scontrol show config)" + _as_seconds_hint(text),
        )
    return int(text)


def job_option_problem(key: str, value: str) -> SpecError | None:
    """The error lowering would raise for one stop option (signal_before_limit, kill_wait,
    requeue), so planning can report it with the config location; None when it is fine."""
    try:
        if key == "signal_before_limit":
            limit_signal(value)
        elif key == "kill_wait":
            kill_wait(value)
        elif key in ("requeue", "preflight"):
            flag({key: value}, key, False)
    except SpecError as exc:
        return exc
    return None


def flag(options: dict[str, str], key: str, default: bool) -> bool:
    text = options.get(key)
    if text is None:
        return default
    if text.lower() in ("true", "yes", "1"):
        return True
    if text.lower() in ("false", "no", "0"):
        return False
    raise SpecError(f"slurm.{key} {text!r} is not true or false", hint=f"write {key}: true or {key}: false")


def extra_args_problem(text: str) -> str | None:
    """Why `slurm.extra_sbatch_args` cannot go into #SBATCH lines (None: it can)."""
    try:
        args = shlex.split(text) if text else []
    except ValueError as exc:
        return f"cannot split {text!r}: {exc}"
    for a in args:
        if not a.startswith("--") or "\n" in a:
            return f"{a!r} is not a long sbatch option"
    return None


def extra_args(text: str) -> tuple[str, ...]:
    problem = extra_args_problem(text)
    if problem:
        raise SpecError(
            f"slurm.extra_sbatch_args: {problem}", hint="write options as --name=value, e.g. [--reservation=rl]"
        )
    return tuple(shlex.split(text)) if text else ()
