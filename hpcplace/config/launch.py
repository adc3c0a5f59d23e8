"""How the job launches: the `launch:` block every input format accepts, and `--driver -- CMD...`.

    launch:
      mode: ray                      # "steps" (default: one srun step per component) | "ray"
      driver: [python, main.py, --config-name, X]   # argv list, or a string split like a shell
      env: {PYTHONPATH: /opt/site}   # extra env for every raylet and the driver
      join_timeout: 300              # seconds to wait for every node's raylet
      hold: true                     # keep the allocation after the driver/components (hpcplace attach/exec/release)
      dashboard: true                # ray mode: the Ray dashboard on the head (status prints how to reach it)
      chain: 4                       # run as up to 4 jobs in a row (--dependency=singleton), each resuming
      resume: [runner.resume_dir=auto]  # appended to the driver/commands from the second link on
      steer: false                   # verl, NeMo-RL, OpenRLHF, slime: leave their Ray requests' nodes to Ray

In "ray" mode the plan shapes a Ray cluster (one raylet per allocated node, see hpcplace.ray.ray_cluster)
and the driver runs once on the head. The frameworks never read this block.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from hpcplace.config.yaml_source import View, yaml_words
from hpcplace.errors import SpecError

MODES = ("steps", "ray")
KEYS = frozenset({"mode", "driver", "env", "join_timeout", "hold", "dashboard", "chain", "resume", "steer"})
MAX_CHAIN = 100  # links of one chain: a week of 2-hour links; more is a typo, not a plan
DEFAULT_JOIN_TIMEOUT = 300.0
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class LaunchSpec:
    """The launch mode; `driver`, `env` and `join_timeout` matter in ray mode only."""

    mode: str = "steps"
    driver: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    join_timeout: float = DEFAULT_JOIN_TIMEOUT
    hold: bool = False  # the job stays up after its driver/components until released, cancelled or timed out
    dashboard: bool = False  # ray mode: start the Ray dashboard on the head
    chain: int = 0  # > 0: the run is a chain of up to this many jobs (hpcplace.slurm.chain); 0: one job
    # appended to the driver's (ray mode) or each component's command from the second link on; None: the
    # format's own resume switch (CHAIN_RESUME), resolved when planning (resolve_resume)
    resume: tuple[str, ...] | None = None
    # the framework's own Ray requests pinned to their planned nodes (hpcplace.config.steer); False: Ray chooses
    steer: bool = True

    @property
    def is_ray(self) -> bool:
        return self.mode == "ray"

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "mode": self.mode,
            "driver": list(self.driver),
            "env": dict(sorted(self.env.items())),
            "join_timeout": self.join_timeout,
        }
        # written only when set: the plan.json of a job that does not hold stays what it was
        if self.hold:
            out["hold"] = True
        if self.dashboard:
            out["dashboard"] = True
        if self.chain:
            out["chain"] = self.chain
            out["resume"] = list(self.resume or ())
        if not self.steer:
            out["steer"] = False
        return out


STEPS = LaunchSpec()


def check_driver(argv: Sequence[str], where: str = "launch.driver") -> tuple[str, ...]:
    """The driver argv as given. Refused: empty, an empty program, NUL bytes (no argv can hold them).
    A bare `:` is fine here: the driver reaches srun only through plan.json, never on its command line."""
    out = tuple(str(a) for a in argv)
    if not out or not out[0]:
        raise SpecError(f"{where} is empty", hint="give the program and its arguments, e.g. [python, main.py]")
    for arg in out:
        if "\0" in arg:
            raise SpecError(f"{where}: argument {arg!r} holds a NUL byte", hint="no command line can carry one")
    return out


def check_env(env: Mapping[str, str], where: str = "launch.env") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in env.items():
        if not ENV_NAME_RE.match(key):
            raise SpecError(
                f"{where}: {key!r} is not an environment variable name",
                hint="names use letters, digits and '_' and do not start with a digit",
            )
        if "\0" in value:
            raise SpecError(f"{where}: the value of {key} holds a NUL byte")
        out[key] = value
    return out


def parse_launch(view: View | None) -> LaunchSpec:
    """The top-level `launch:` block (None or absent: steps mode)."""
    if view is not None and view.value is None:
        root = view.doc.data if isinstance(view.doc.data, dict) else {}
        stray = [k for k in sorted(KEYS) if k in root]
        if stray:  # `launch:` then `mode: ray` at its indentation: YAML reads two top-level keys
            raise view.error(
                f"the block is empty, and its keys {', '.join(stray)} stand at the top level",
                hint="indent them two spaces under `launch:`",
            )
    if view is None or view.value is None:
        return STEPS
    if not isinstance(view.value, dict):
        raise view.error("launch must be a mapping", hint="e.g. launch: {mode: ray, driver: [python, main.py]}")
    view.check_keys(KEYS)
    mode_view = view.get("mode")
    mode = None
    if mode_view is not None and mode_view.value is not None:
        mode = mode_view.str().strip().lower()
        if mode not in MODES:
            raise mode_view.error(f"unknown launch mode {mode_view.value!r}", hint="one of: " + ", ".join(MODES))
    driver: tuple[str, ...] = ()
    driver_view = view.get("driver")
    if driver_view is not None and driver_view.value is not None:
        driver = _driver(driver_view)
    env: dict[str, str] = {}
    env_view = view.get("env")
    if env_view is not None and env_view.value is not None:
        try:
            env = check_env(env_view.str_map())
        except SpecError as exc:  # str_map's errors name launch.env and point at the key already
            raise SpecError(exc.message, hint=exc.hint, location=exc.location or env_view.location()) from None
    timeout = DEFAULT_JOIN_TIMEOUT
    tv = view.get("join_timeout")
    if tv is not None and tv.value is not None:
        if isinstance(tv.value, bool) or not isinstance(tv.value, (int, float)) or not 1 <= tv.value <= 86400:
            raise tv.error(f"join_timeout must be a number of seconds from 1 to 86400, got {tv.value!r}")
        timeout = float(tv.value)
    hold = _flag(view, "hold")
    dashboard = _flag(view, "dashboard")
    steer = _flag(view, "steer") if view.get("steer") is not None and view.require("steer").value is not None else True
    chain = 0
    chain_view = view.get("chain")
    if chain_view is not None and chain_view.value is not None:
        chain = _chain_length(chain_view.value, "launch.chain", chain_view.error)
    resume: tuple[str, ...] | None = None
    resume_view = view.get("resume")
    if resume_view is not None and resume_view.value is not None:
        resume = tuple(yaml_words(resume_view, "resume"))
        for arg in resume:
            if "\0" in arg:
                raise resume_view.error(f"launch.resume: argument {arg!r} holds a NUL byte")
    if mode is None:
        mode = "ray" if driver or dashboard else "steps"
    if dashboard and mode != "ray":
        raise view.require("dashboard").error(
            "launch.dashboard is the Ray dashboard: ray mode only", hint="set launch.mode: ray (or remove dashboard)"
        )
    # A ray block without a driver is complete once `--driver -- CMD` or `--hold` is applied: render,
    # submit and `run --local` refuse what is still missing then (hpcplace.plan.runnable), `plan` warns.
    if mode == "steps" and driver:
        raise view.require("driver").error(
            "launch.driver is only used in ray mode", hint="set launch.mode: ray (or remove the driver)"
        )
    return LaunchSpec(mode, driver, env, timeout, hold, dashboard, chain, resume, steer)


def _chain_length(value: object, where: str, error: Callable[..., SpecError]) -> int:
    """A chain's length: a whole number of links from 1 to MAX_CHAIN."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CHAIN:
        raise error(
            f"{where} must be a number of jobs from 1 to {MAX_CHAIN}, got {value!r}",
            hint="e.g. chain: 4 runs the training as up to 4 jobs, each resuming from the last checkpoint",
        )
    return value


# The resume switch of each framework, appended (as a Hydra/AReaL override) to the driver from the second
# link of a chain on: RLinf's runner.resume_dir=auto picks its newest checkpoints/global_step_N (reasoning
# runner); AReaL's recover.mode=auto recovers when recover info and a checkpoint exist. ROLL's
# resume_from_checkpoint takes one checkpoint's path, which only the run knows: no default there.
CHAIN_RESUME: dict[str, tuple[str, ...]] = {
    "rlinf": ("runner.resume_dir=auto",),
    "areal": ("recover.mode=auto",),
}


def with_chain(launch: LaunchSpec, chain: int | None, source_format: str) -> LaunchSpec:
    """`submit --chain N` (over launch.chain), and a chain's resume overrides: the config's `resume:`, else
    the format's (CHAIN_RESUME), so plan.json says exactly what the second link on appends."""
    if chain is not None:
        launch = replace(launch, chain=_chain_length(chain, "--chain", SpecError))
    if not launch.chain:
        return launch if launch.resume is None else replace(launch, resume=None)
    resume = launch.resume if launch.resume is not None else CHAIN_RESUME.get(source_format, ())
    return replace(launch, resume=resume)


def resumed_command(command: Sequence[str], resume: Sequence[str], link: int) -> tuple[str, ...]:
    """The command a chain's link runs: from the second link (1) on, with the resume overrides appended."""
    return (*command, *resume) if link > 0 else tuple(command)


def _flag(view: View, key: str) -> bool:
    v = view.get(key)
    if v is None or v.value is None:
        return False
    if not isinstance(v.value, bool):
        raise v.error(f"launch.{key} must be true or false, got {v.value!r}")
    return v.value


def with_hold(launch: LaunchSpec, hold: bool, driven_by_framework: bool = False) -> LaunchSpec:
    """`submit --hold`: keep the allocation (and the Ray cluster) after the driver/components. A config
    whose components only the framework's driver starts (`driven_by_framework`: RLinf, ROLL, AReaL without
    component commands) is held as a Ray cluster, for `hpcplace attach --driver` (exec works in both modes)."""
    if not hold:
        return launch
    return replace(launch, hold=True, mode="ray" if driven_by_framework else launch.mode)


def _driver(view: View) -> tuple[str, ...]:
    words = yaml_words(view, "driver")
    try:
        return check_driver(words)
    except SpecError as exc:
        raise view.error(exc.message, hint=exc.hint) from None


def with_driver(launch: LaunchSpec, driver: Sequence[str] | None) -> LaunchSpec:
    """`--driver -- CMD...` from the command line: ray mode with that driver (overrides the block's)."""
    if not driver:
        return launch
    return replace(launch, mode="ray", driver=check_driver(driver, "--driver"))


def split_driver_argv(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """Cut `--driver -- CMD...` (or `--driver CMD...`) off a command line: everything after it is the
    driver, never read by argparse. Returns (the rest, the driver or None)."""
    args = list(argv)
    if "--driver" not in args:
        return args, None
    i = args.index("--driver")
    if "--" in args[:i]:  # `--driver` after a `--` belongs to something else
        return args, None
    driver = args[i + 1 :]
    command = args[0] if args and not args[0].startswith("-") else "submit"
    if driver[:1] == ["--"]:
        driver = driver[1:]
    elif driver[:1] and driver[0].startswith("-"):  # `--driver -o DIR -- python ...`: -o would be the driver's
        swallowed = driver[: driver.index("--")] if "--" in driver else driver[:1]
        raise SpecError(
            f"--driver takes everything after it as the driver's command, and {' '.join(swallowed)!r} "
            "looks like hpcplace's own option",
            hint=f"put hpcplace's options before it: hpcplace {command} CONFIG {' '.join(swallowed)} "
            "--driver -- python main.py ...",
        )
    if not driver:
        raise SpecError("--driver needs a command", hint=f"hpcplace {command} CONFIG --driver -- python main.py ...")
    return args[:i], driver


def launch_from_json(data: object) -> LaunchSpec:
    """plan.json's "launch" record (absent: steps mode) back into a LaunchSpec."""
    if not isinstance(data, dict):
        return STEPS
    return LaunchSpec(
        str(data.get("mode", "steps")),
        tuple(str(a) for a in data.get("driver") or ()),
        {str(k): str(v) for k, v in (data.get("env") or {}).items()},
        float(data.get("join_timeout", DEFAULT_JOIN_TIMEOUT)),
        bool(data.get("hold")),
        bool(data.get("dashboard")),
        int(data.get("chain") or 0),
        tuple(str(a) for a in data["resume"]) if isinstance(data.get("resume"), list) else None,
        data.get("steer") is not False,
    )


# Configs whose components a framework's driver starts (whether a plan has something to run:
# hpcplace.plan.runnable); a bare `python` driver gets the submitting interpreter.
FRAMEWORK_FORMATS = ("rlinf", "roll", "areal")  # configs whose components are started by a driver
BARE_PYTHON_RE = re.compile(r"python(\d+(\.\d+)?)?")


def resolve_driver_interpreter(
    launch: LaunchSpec,
    which: Callable[[str], str | None],
    executable: str,
    version: tuple[int, int] = sys.version_info[:2],
) -> LaunchSpec:
    """A driver started as a bare `python`/`python3`/`pythonX.Y` gets an absolute interpreter: the
    submitting environment's (`executable`, which also runs the job's raylets: Ray refuses a driver of
    another Python or Ray, and PATH's `python` is another environment when a venv's hpcplace runs without
    the venv activated), or, for a `pythonX.Y` of another version, what `which` finds on PATH. Any
    other program stays as given."""
    if not launch.is_ray or not launch.driver or not BARE_PYTHON_RE.fullmatch(launch.driver[0]):
        return launch
    wanted = launch.driver[0][len("python") :]
    ours = wanted in ("", str(version[0]), f"{version[0]}.{version[1]}")
    found = executable if ours else which(launch.driver[0]) or executable
    return replace(launch, driver=(os.path.abspath(found), *launch.driver[1:]))
