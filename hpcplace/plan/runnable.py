"""Whether a plan has something to run: "no driver, no job". A plan whose processes have no command (a
framework config without its driver) is refused before it is rendered, submitted or run locally; `plan` warns.

The launch spec's own checks (a driver's words, env names, the block's keys) are the config stage's
(hpcplace.config.launch); these need the whole plan."""

from __future__ import annotations

from collections.abc import Sequence

from hpcplace.config.formats.command import COMMAND_FORMATS
from hpcplace.config.launch import FRAMEWORK_FORMATS
from hpcplace.errors import SpecError
from hpcplace.plan.plan import Plan


def driven_by_framework(plan: Plan) -> bool:
    """A framework config (RLinf, ROLL, AReaL) none of whose components has a command of its own, or a
    framework command (verl, ...), whose driver starts every process."""
    if plan.source_format in COMMAND_FORMATS:
        return COMMAND_FORMATS[plan.source_format].mode == "ray"  # steps: each process has its command
    return plan.source_format in FRAMEWORK_FORMATS and not any(c.command for c in plan.components)


class NothingToRunError(SpecError):
    """The steps mode would start processes that have no command (a framework config without its driver)."""


def commandless_components(plan: Plan, components: Sequence[str] = ()) -> tuple[str, ...]:
    """Names of the (chosen) components the steps mode could not start: they have no command."""
    if plan.launch.is_ray or plan.launch.hold:  # a held job may hold just the allocation
        return ()
    return tuple(c.name for c in plan.components if not c.command and (not components or c.name in components))


def nothing_to_run_hint(plan: Plan) -> str:
    """How to give the job something to run, in the terms of the config's own format."""
    if plan.source_format in FRAMEWORK_FORMATS:
        return (
            "run it in the Ray launch mode with the framework's driver: `launch: {mode: ray, driver: [python, "
            "main.py, ...]}` in the config, or `--driver -- python main.py ...` on the command line (or give each "
            "component a command in `hpcplace: {components: {<name>: {command: [...]}}}`)"
        )
    return (
        "give each component a command (`components.<name>.command: [python, train.py]`), or start the job "
        "from one driver in the Ray launch mode: `launch: {mode: ray, driver: [...]}` or `--driver -- CMD ...`"
    )


def nothing_to_run(plan: Plan, components: Sequence[str] = ()) -> NothingToRunError | None:
    """The one check render, submit and `run --local` make (and `plan` warns about): None when every
    process has something to run (a command, or the Ray mode's driver)."""
    if plan.launch.is_ray:
        if plan.launch.driver or plan.launch.hold:
            return None
        return NothingToRunError(
            "the Ray launch mode has no driver to run",
            hint="add `driver: [python, main.py, ...]` to the launch block or pass --driver -- "
            "CMD... on the command line, or hold the cluster without one (--hold, or "
            "`hold: true` in the launch block) and attach drivers to it",
        )
    missing = commandless_components(plan, components)
    if not missing:
        return None
    names = ", ".join(repr(n) for n in missing)
    if len(missing) == len(plan.components):
        what = f"no component of {plan.source} ({plan.source_format}) has a command ({names})"
    else:
        what = f"component(s) {names} of {plan.source} ({plan.source_format}) have no command"
    return NothingToRunError(f"nothing to run: {what}, and there is no Ray driver", hint=nothing_to_run_hint(plan))


def check_runnable(plan: Plan, components: Sequence[str] = ()) -> None:
    """Raise NothingToRunError unless every (chosen) process has something to run."""
    error = nothing_to_run(plan, components)
    if error is not None:
        raise error
