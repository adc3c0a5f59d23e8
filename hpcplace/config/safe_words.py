"""Checks on the words hpcplace hands to other programs: environment variable names, argv words that
travel on an `srun` command line, and text that goes into job.sbatch.

Small and dependency-free so every parser (native, RLinf, ROLL, AReaL, the `launch:` block) calls the
same rules. Each check raises SpecError with the caller's location.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

from hpcplace.errors import SourceLocation, SpecError

ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ENV_NAME_HINT = "variable names use letters, digits and '_' and do not start with a digit (e.g. MY_FLAG)"
RESERVED_PREFIX = "HPCPLACE_"  # every HPCPLACE_* variable belongs to hpcplace
SRUN_SEPARATOR = ":"  # srun splits its argv into het-job parts at every bare `:`
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")  # not tab


@lru_cache(maxsize=1)
def reserved_env_names() -> frozenset[str]:
    """Variables the shim computes for every process (hpcplace.runtime.process_env), which a
    config's env may not set: the shim would refuse them at run time in every task."""
    from hpcplace.runtime.process_env import ProcessEnv

    sample = ProcessEnv(
        plan_path="",
        component="",
        job_id="",
        rank=0,
        world_size=1,
        local_rank=0,
        local_world_size=1,
        node_rank=0,
        cluster_node_rank=0,
        master_addr="",
        master_port=0,
        visible_devices=(),
        physical_devices=(),
        device_mode="none",
        isolate_accelerator=False,
        local_accelerator_rank=0,
        local_hardware_ranks=(),
        accelerator_type="",
        node_group_label="",
        partition="",
        het_group=0,
        group_node_index=0,
        resource_type="",
        shm_dir="",
        collocation_group=None,
        weight_sync_targets=(),
        weight_sync_sources=(),
    )
    return frozenset(sample.environment()) | {"HPCPLACE_STEP_TASKS", "HPCPLACE_RUN_DIR", "HPCPLACE_MASTER_PORT_CHECK"}


def env_name_problem(name: object, allowed: Iterable[str] = ()) -> str | None:
    """Why `name` cannot be an environment variable set by a config (None: it can)."""
    if not isinstance(name, str) or not name:
        return f"{name!r} is not a variable name"
    if not ENV_NAME_RE.fullmatch(name):
        return f"invalid environment variable name {name!r}"
    if name in set(allowed):
        return None
    if name in reserved_env_names() or name.startswith(RESERVED_PREFIX):
        return f"environment variable {name!r} is set by hpcplace for every process"
    return None


def check_env_name(
    name: object, *, location: SourceLocation | None = None, allowed: Iterable[str] = (), what: str = "env"
) -> str:
    """`name` if a config may set it; else SpecError (bad syntax, or a variable hpcplace sets)."""
    problem = env_name_problem(name, allowed)
    if problem is None:
        return str(name)
    reserved = "set by hpcplace" in problem
    hint = (
        f"hpcplace computes it from the placement (RANK, MASTER_PORT, CUDA_VISIBLE_DEVICES, HPCPLACE_*, ...); "
        f"remove it from {what}"
        if reserved
        else ENV_NAME_HINT
    )
    raise SpecError(f"{what}: {problem}", location=location, hint=hint)


def check_env_value(name: str, value: str, *, location: SourceLocation | None = None, what: str = "env") -> str:
    """Values cannot hold NUL (no environment can)."""
    if "\x00" in value:
        raise SpecError(
            f"{what}: the value of {name} contains a NUL character",
            location=location,
            hint="environment values cannot hold NUL",
        )
    return value


def check_env(
    env: Mapping[str, str], *, location: SourceLocation | None = None, allowed: Iterable[str] = (), what: str = "env"
) -> dict[str, str]:
    """Every name and value of an env mapping (for callers without per-key locations)."""
    for name, value in env.items():
        check_env_name(name, location=location, allowed=allowed, what=what)
        check_env_value(name, str(value), location=location, what=what)
    return dict(env)


def srun_argv_problem(words: Sequence[object], *, program_first: bool = True) -> str | None:
    """Why `words` cannot be written on an srun command line after srun's options (None: fine).

    srun reads every bare `:` as the separator between het-job parts, so the words after it would
    become srun options and a program of their own, outside the shim; and the first word, where srun
    expects the program, would be read as an srun option if it starts with `-`."""
    if not words:
        return "it is empty"
    for i, word in enumerate(words):
        if not isinstance(word, str):
            return f"word {i} is not a string"
        if "\x00" in word:
            return f"word {i} contains a NUL character"
        if word == SRUN_SEPARATOR:
            return f"word {i} is a bare ':', which srun reads as the separator between job parts"
    first = words[0]
    if program_first and isinstance(first, str) and (first.startswith("-") or not first.strip()):
        return f"its first word {first!r} is not a program: srun would read it as an option"
    return None


def check_srun_argv(
    words: Sequence[str], what: str, *, location: SourceLocation | None = None, program_first: bool = True
) -> tuple[str, ...]:
    """`words` as a tuple if srun passes them to the program unchanged; else SpecError."""
    problem = srun_argv_problem(words, program_first=program_first)
    if problem is not None:
        raise SpecError(
            f"{what}: {problem}",
            location=location,
            hint="quote ':' inside a larger word, or wrap the command in a script; "
            "the component commands themselves travel in plan.json and may contain ':'",
        )
    return tuple(words)


def argv_problem(words: Sequence[str]) -> str | None:
    """Why `words` cannot be an exec argv (None: fine): NUL bytes, an empty program."""
    if not words:
        return "the command is empty"
    if not words[0]:
        return "the program name is empty"
    for i, word in enumerate(words):
        if "\x00" in word:
            return f"argument {i} contains a NUL character"
    return None


def control_problem(text: str) -> str | None:
    """Why `text` cannot be one word of an #SBATCH line or a Slurm name (None: fine)."""
    m = _CONTROL.search(text)
    if m:
        return f"{text!r} contains the control character {m.group()!r}"
    if "\\" in text:
        return f"{text!r} contains a backslash, which sbatch drops from #SBATCH lines"
    return None


def check_sbatch_text(text: str, what: str, *, location: SourceLocation | None = None) -> str:
    """A value that goes into an #SBATCH line: no control characters, newlines or backslashes."""
    problem = control_problem(text)
    if problem is not None:
        raise SpecError(
            f"{what}: {problem}",
            location=location,
            hint="#SBATCH lines cannot hold line breaks, control characters or backslashes",
        )
    return text
