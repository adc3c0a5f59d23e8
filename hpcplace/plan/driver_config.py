"""A framework's Ray driver reads its config itself, so the plan must describe the config the driver runs.

Overrides given to hpcplace (after the config, or `--set`) change only the plan; overrides in the driver's
arguments change only what the framework runs. A difference between the two makes the job run another
placement than the planned one (RLinf then waits for nodes the job does not have until the time limit),
so a job command refuses it (`plan` warns), naming the override and where it is missing. And AReaL's config
class refuses keys it does not know: a driver given the very file that carries hpcplace's blocks fails
at its start, so that is refused too."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from hpcplace.config.hydra_config import HYDRA_OVERRIDE
from hpcplace.config.yaml_source import load_yaml_file
from hpcplace.errors import HpcplaceError, SourceLocation, SpecError
from hpcplace.plan.plan import Plan

OWN_KEYS = ("slurm", "launch", "hpcplace", "format")  # hpcplace's top-level keys: never the framework's
FORWARD_HINT = (
    "RLinf's and AReaL's entry scripts take Hydra overrides after their own arguments; ROLL's start "
    "scripts take none (write the change into the config file instead)"
)


def override_key(text: str) -> str | None:
    """`cluster.num_nodes` of `++cluster.num_nodes=2` or `~cluster.num_nodes`; None for an argument that is
    no Hydra override (`--config`, a path, `main.py`)."""
    if not HYDRA_OVERRIDE.match(text) or ("=" not in text and not text.startswith("~")):
        return None
    return text.lstrip("~+").split("=", 1)[0]


def _frameworks(texts: Sequence[str]) -> list[str]:
    return [
        t for t in texts if (key := override_key(t)) is not None and key.split(".")[0].split("@")[0] not in OWN_KEYS
    ]


def planned_overrides(plan: Plan) -> list[str]:
    """The overrides the plan applied, in order (plan.composed's `override K=V` entries)."""
    return [c.removeprefix("override ") for c in plan.composed if c.startswith("override ")]


def _placement(plan: Plan) -> tuple[object, ...]:
    return plan.cluster, plan.components, plan.collocation_groups


def driver_config_problem(
    plan: Plan, replan: Callable[[Sequence[str]], Plan], workdir: str, command: str = "submit"
) -> SpecError | None:
    """Why the framework config's Ray driver would run another config than the planned one (None: it
    would not). `replan(overrides)` plans the same config with other overrides (to learn whether the
    driver's own overrides move anything); `workdir` is where the driver starts (its relative paths)."""
    from hpcplace.config.launch import FRAMEWORK_FORMATS

    driver = plan.launch.driver
    if plan.source_format not in FRAMEWORK_FORMATS or not plan.launch.is_ray or not driver:
        return None
    given = planned_overrides(plan)
    arguments = list(driver[1:])
    for text in _frameworks(given):
        if text not in arguments:
            return SpecError(
                f"override {text!r} changes the config hpcplace plans, but the Ray driver reads its "
                "config itself and is not given it: the job would run the config without it",
                location=SourceLocation(f"<override {text}>", 1, 1),
                hint=f"give it to the driver too (`--driver -- ... {text}`): {FORWARD_HINT}",
            )
    driver_only = [t for t in _frameworks(arguments) if t not in given]
    if driver_only:
        try:
            moved = _placement(replan([*given, *driver_only])) != _placement(plan)
        except HpcplaceError:  # arguments hpcplace cannot apply (keys the file leaves to the framework's defaults)
            moved = False
        if moved:
            words = " ".join(driver_only)
            return SpecError(
                f"the Ray driver is given {words}, which changes the placement, but hpcplace plans "
                f"{plan.source} without {'it' if len(driver_only) == 1 else 'them'}",
                hint=f"give {'it' if len(driver_only) == 1 else 'them'} to hpcplace too, after the "
                f"config: hpcplace {command} {plan.source} {words} --driver -- ...",
            )
    return _areal_reads_own_blocks(plan, arguments, workdir) if plan.source_format == "areal" else None


def _areal_reads_own_blocks(plan: Plan, arguments: Sequence[str], workdir: str) -> SpecError | None:
    """AReaL merges its config into a structured dataclass: a top-level key it does not know (`slurm:`)
    is a ConfigKeyError at the driver's start."""
    if not any(_same_file(a, plan.source, workdir) for a in _paths(arguments)):
        return None
    try:
        keys = load_yaml_file(plan.source).data.keys()
    except (HpcplaceError, AttributeError):
        return None
    own = [k for k in OWN_KEYS if k in keys and f"~{k}" not in arguments]
    if not own:
        return None
    blocks = ", ".join(f"`{k}:`" for k in own)
    return SpecError(
        f"the Ray driver reads {plan.source}, whose {blocks} AReaL's config class does not have: AReaL "
        "refuses the file at the driver's start (omegaconf ConfigKeyError)",
        location=SourceLocation(plan.source, 1, 1),
        hint=f"keep the AReaL file unchanged and put hpcplace's blocks in a file beside it that lists it "
        f"in `defaults:` (docs: formats/areal.md), or add {' '.join('~' + k for k in own)} to "
        "the driver's arguments",
    )


def _paths(arguments: Sequence[str]) -> list[str]:
    """Every argument, and the value of `--opt=VALUE` arguments: where a config path can stand."""
    return [a.split("=", 1)[1] if a.startswith("-") and "=" in a else a for a in arguments]


def _same_file(argument: str, source: str, workdir: str) -> bool:
    try:
        return os.path.samefile(os.path.join(workdir, argument), source)
    except (OSError, ValueError):
        return False
