"""A task's own log file (stdlib only, on the shim's start path).

The job script no longer asks srun to name per-task files (`--output=...%N.%t.out`): Slurm changed what
those mean (25.11: `%t` of a step spanning het groups loses the group's offset, `%N` is the NodeName, not
the hostname). Instead the task that knows who it is names its file: the shim by component and plan
rank (HPCPLACE_RANK_LOG, `{rank}` filled in), the preflight by node name (HPCPLACE_PREFLIGHT_LOG,
`{node}`), and points its stdout and stderr there before anything else is printed; the program it
execs inherits both.
"""

from __future__ import annotations

import os
import sys


def fill(pattern: str, key: str, value: str) -> str | None:
    """`pattern` with `{key}` replaced by `value`; None when `value` cannot be part of a file name."""
    if not value or "/" in value or value in (".", "..") or "\0" in value:
        return None
    return pattern.replace("{" + key + "}", value)


def redirect_output(path: str) -> str | None:
    """Point this process's stdout and stderr (file descriptors 1 and 2, inherited across exec) at
    `path`, created or emptied (mode 0644 less the umask). None when done, else why not (the output
    then stays where it was: srun's)."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        return f"cannot write the log file {path}: {exc.strerror or exc}"
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
    except OSError as exc:
        return f"cannot send the output to {path}: {exc.strerror or exc}"
    finally:
        os.close(fd)
    return None
