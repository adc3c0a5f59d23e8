"""Python callables as components, submitit-style: every rank of a component calls the same function.

    job = submit_functions("configs/x.yaml", {"actor": train, "rollout": generate}, run_dir="runs/x")
    job.wait(); results = job.results()   # {"actor": [rank 0's value, rank 1's, ...], "rollout": [...]}

Login side: each callable and its arguments are pickled with submitit's `DelayedSubmission`
(cloudpickle) into RUN/functions/<component>.pkl, and the component's command in the plan becomes
`python -m hpcplace.runtime.call RUN/functions/<component>.pkl RUN/results`; the plan then goes
through the ordinary paths (`hpcplace.slurm.submit.submit`, or the local backend), so every rank starts
through the shim with its planned node, devices and RANK/WORLD_SIZE/... environment. In the job,
`hpcplace.runtime.call` writes each rank's return value (or the formatted traceback) to
RUN/results/<component>.<rank>.pkl; a raising rank exits non-zero, which fails the job fast.
Components not given a callable keep their command.
"""

from __future__ import annotations

import os
import pickle
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from hpcplace.errors import HpcplaceError
from hpcplace.plan.plan import Plan
from hpcplace.slurm.slurm_job import unique_slugs

FUNCTIONS_DIR = "functions"
RESULTS_DIR = "results"
CALL_MODULE = "hpcplace.runtime.call"


class FunctionError(HpcplaceError):
    """A function component failed, left no result, or cannot be set up."""

    exit_code = 1


@dataclass(frozen=True)
class FunctionComponent:
    """One component run as a Python callable: its name, rank count and file stem under RUN/."""

    name: str
    world_size: int
    stem: str  # RUN/functions/<stem>.pkl, RUN/results/<stem>.<rank>.pkl


@dataclass(frozen=True)
class FunctionJob:
    """Handle on a run of function components: wait for it, then collect every rank's result."""

    run_dir: Path
    job_id: str | None  # the Slurm job id; None for a local run
    components: tuple[FunctionComponent, ...]
    exit_code: int | None = None  # local runs: the local backend's exit code (they are done on return)

    @property
    def local(self) -> bool:
        return self.job_id is None

    def state(self) -> str:
        """COMPLETED, FAILED, RUNNING, PENDING ... (Slurm's word for the whole het job)."""
        if self.local:
            return "COMPLETED" if self.exit_code == 0 else "FAILED"
        from hpcplace.slurm.submit import job_status

        status = job_status(str(self.job_id))
        return "UNKNOWN" if status.source == "none" else status.state

    def done(self) -> bool:
        if self.local:
            return True
        from hpcplace.slurm.submit import job_status

        status = job_status(str(self.job_id))
        return status.source == "none" or status.done

    def wait(self, timeout: float | None = None, *, interval: float = 0.5) -> str:
        """Poll Slurm (hpcplace.slurm.submit.job_status) until every het component is done; the final state."""
        if self.local:
            return self.state()
        from hpcplace.slurm.submit import job_status

        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = job_status(str(self.job_id))
            if status.source == "none" or status.done:  # "none": Slurm has forgotten it (long finished)
                return "UNKNOWN" if status.source == "none" else status.state
            if deadline is not None and time.monotonic() >= deadline:
                raise FunctionError(
                    f"job {self.job_id} is still {status.state} after {timeout:g} s",
                    hint=f"wait again, or stop it: hpcplace cancel {shlex.quote(str(self.run_dir))}",
                )
            time.sleep(interval)

    def results(self, timeout: float | None = None) -> dict[str, list[Any]]:
        """Every rank's return value, per component in rank order (waits for the job first).

        Raises FunctionError naming the component and rank (with its traceback) if a rank raised,
        or naming the ranks that left no result (stopped by another rank's failure, killed, ...)."""
        state = self.wait(timeout)
        records = {
            c.name: [_read_record(self.run_dir / RESULTS_DIR / f"{c.stem}.{r}.pkl") for r in range(c.world_size)]
            for c in self.components
        }
        failed = [
            (name, rank, rec)
            for name, recs in records.items()
            for rank, rec in enumerate(recs)
            if rec is not None and not rec.get("ok")
        ]
        if failed:
            name, rank, rec = failed[0]
            others = ", ".join(f"{n} rank {r}" for n, r, _ in failed[1:])
            where = f" on {rec['host']}" if rec.get("host") else ""
            text = f"component {name!r} rank {rank} raised{where}:\n{str(rec.get('traceback', '')).rstrip()}"
            if others:
                text += f"\n(also failed: {others})"
            raise FunctionError(text, hint=self._log_hint(name, rank))
        missing = [(name, rank) for name, recs in records.items() for rank, rec in enumerate(recs) if rec is None]
        if missing:
            shown = ", ".join(f"{n} rank {r}" for n, r in missing[:16]) + (" ..." if len(missing) > 16 else "")
            name, rank = missing[0]
            how = f"exit code {self.exit_code}" if self.local else f"job state {state}"
            raise FunctionError(
                f"{len(missing)} rank(s) left no result ({how}): {shown}",
                hint=self._log_hint(name, rank, first_failure=True),
            )
        return {name: [rec["value"] for rec in recs if rec is not None] for name, recs in records.items()}

    def cancel(self) -> None:
        if not self.local:
            from hpcplace.slurm.submit import cancel

            cancel(str(self.job_id))

    def _log_hint(self, component: str, rank: int, first_failure: bool = False) -> str:
        if self.local and first_failure:
            return "the run named the first failing process on stderr: `hpcplace: [component rank] exited with N`"
        if self.local:
            return f"its output is above, prefixed [{component} {rank}]"
        first = f"{self.run_dir}/logs/batch-{self.job_id}.out names the first failing rank; " if first_failure else ""
        return f"{first}per-rank logs: hpcplace logs {shlex.quote(str(self.run_dir))} --component {shlex.quote(component)} --rank {rank}"


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as f:
            record = pickle.load(f)
    except FileNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 - e.g. a class the result needs is not importable here
        raise FunctionError(
            f"cannot read the result {path}: {type(exc).__name__}: {exc}",
            hint="results are unpickled here: the classes they use must be importable",
        ) from None
    if not isinstance(record, dict) or "ok" not in record:
        raise FunctionError(f"{path} is not a result record of hpcplace.runtime.call")
    return record


# ------------------------------------------------------------------------------------------------
# preparing a run directory


def _load_plan(config: str | os.PathLike[str] | Plan, overrides: Sequence[str]) -> Plan:
    if isinstance(config, Plan):
        return config
    from hpcplace.plan.planner import plan_from_file

    return plan_from_file(os.fspath(config), overrides=overrides)


def function_plan(
    plan: Plan,
    functions: Mapping[str, Callable[..., Any]],
    run_dir: str | os.PathLike[str],
    *,
    python: str = sys.executable,
) -> tuple[Plan, tuple[FunctionComponent, ...]]:
    """The plan with each named component's command replaced by
    `python -m hpcplace.runtime.call RUN/functions/<stem>.pkl RUN/results` (pure; writes nothing)."""
    names = [c.name for c in plan.components]
    if not functions:
        raise FunctionError("no functions given", hint="pass {component name: callable, ...}")
    unknown = [n for n in functions if n not in names]
    if unknown:
        raise FunctionError(
            f"no component {', '.join(repr(n) for n in unknown)} in plan {plan.name!r}",
            hint=f"components: {', '.join(names)}",
        )
    for name, fn in functions.items():
        if not callable(fn):
            raise FunctionError(f"the function for component {name!r} is not callable: {fn!r}")
    idle = [c.name for c in plan.components if c.name not in functions and not c.command]
    if idle:
        raise FunctionError(
            f"component(s) {', '.join(repr(n) for n in idle)} have neither a function nor a command",
            hint="pass a function for each, or give them `command:` in the config",
        )
    root = Path(os.path.abspath(run_dir))
    stems = dict(zip(names, unique_slugs(names)))
    chosen, components = [], []
    for comp in plan.components:
        if comp.name in functions:
            pkl = root / FUNCTIONS_DIR / f"{stems[comp.name]}.pkl"
            comp = replace(comp, command=(python, "-m", CALL_MODULE, str(pkl), str(root / RESULTS_DIR)))
            components.append(FunctionComponent(comp.name, comp.world_size, stems[comp.name]))
        chosen.append(comp)
    return replace(plan, components=tuple(chosen)), tuple(components)


def write_functions(
    run_dir: str | os.PathLike[str],
    functions: Mapping[str, Callable[..., Any]],
    components: Sequence[FunctionComponent],
    *,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
) -> None:
    """Pickle each `fn(*args, **kwargs)` with submitit's DelayedSubmission (cloudpickle) into
    run_dir/functions/ (all or nothing: written aside, then renamed into place) and create run_dir/results/."""
    import shutil

    from submitit.core.utils import DelayedSubmission

    root = Path(os.path.abspath(run_dir))
    final = root / FUNCTIONS_DIR
    if final.exists() or (root / "run.json").exists():
        raise FunctionError(f"{root} already holds a run", hint="use a new run directory for every run")
    root.mkdir(parents=True, exist_ok=True)
    aside = root / f".{FUNCTIONS_DIR}.{os.getpid()}.tmp"
    shutil.rmtree(aside, ignore_errors=True)
    aside.mkdir()
    try:
        for comp in components:
            try:
                DelayedSubmission(functions[comp.name], *args, **dict(kwargs or {})).dump(aside / f"{comp.stem}.pkl")
            except Exception as exc:  # noqa: BLE001 - cloudpickle raises many kinds
                raise FunctionError(
                    f"cannot pickle the function of component {comp.name!r}: {type(exc).__name__}: {exc}",
                    hint="the callable and its arguments must be picklable by cloudpickle "
                    "(no open files, locks or sockets)",
                ) from None
        os.rename(aside, final)
    finally:
        shutil.rmtree(aside, ignore_errors=True)
    (root / RESULTS_DIR).mkdir(exist_ok=True)


# ------------------------------------------------------------------------------------------------
# entry points


def submit_functions(
    config: str | os.PathLike[str] | Plan,
    functions: Mapping[str, Callable[..., Any]],
    *,
    run_dir: str | os.PathLike[str] | None = None,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    local: bool = False,
    overrides: Sequence[str] = (),
    workdir: str | os.PathLike[str] | None = None,
    launcher: Sequence[str] | None = None,
    validate: bool = True,
) -> FunctionJob:
    """Run each named component's ranks as `fn(*args, **kwargs)`: as one Slurm het job (returns once
    submitted), or with `local=True` on this machine through the local backend (returns when done).

    Callables see the shim's environment (RANK, WORLD_SIZE, CUDA_VISIBLE_DEVICES, ...;
    `hpcplace.runtime.process_info()` works inside them). They run in `workdir` (default: the current
    directory) with the interpreter that pickled them, unless `launcher` says otherwise (both Slurm only)."""
    plan = _load_plan(config, overrides)
    if local:
        if workdir is not None or launcher is not None:
            raise FunctionError(
                "workdir and launcher apply to Slurm runs only",
                hint="a local run uses this interpreter in the current directory",
            )
        from hpcplace.local.local_backend import new_run_id, run_plan_locally

        root = Path(run_dir) if run_dir is not None else Path("runs") / new_run_id(plan.name)
        plan, comps = function_plan(plan, functions, root)
        write_functions(root, functions, comps, args=args, kwargs=kwargs)
        code = run_plan_locally(plan, run_dir=root)
        return FunctionJob(Path(os.path.abspath(root)), None, comps, code)
    from hpcplace.slurm import submit as slurm_submit

    base = plan.slurm.get("output_dir") or "runs"
    root = Path(run_dir) if run_dir is not None else slurm_submit.default_run_dir(plan, base, datetime.now())
    where = Path(workdir if workdir is not None else os.getcwd()).resolve()
    if not where.is_dir():
        raise FunctionError(f"workdir {os.fspath(where)!r} is not a directory")
    words = tuple(launcher) if launcher is not None else (sys.executable, "-m", "hpcplace.runtime")
    plan, comps = function_plan(plan, functions, root)
    if validate:
        from hpcplace.slurm.validate import validate as check_cluster

        check_cluster(plan)
    write_functions(root, functions, comps, args=args, kwargs=kwargs)
    done = slurm_submit.submit(plan, root, launcher=(*words, "--chdir", str(where)))
    return FunctionJob(done.run_dir, done.job_id, comps)


def run_functions_local(
    config: str | os.PathLike[str] | Plan,
    functions: Mapping[str, Callable[..., Any]],
    *,
    run_dir: str | os.PathLike[str] | None = None,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    overrides: Sequence[str] = (),
) -> FunctionJob:
    """`submit_functions(..., local=True)`: every rank on this machine, synchronously."""
    return submit_functions(
        config, functions, run_dir=run_dir, args=args, kwargs=kwargs, local=True, overrides=overrides
    )
