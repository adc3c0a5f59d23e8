"""`hpcplace tune CONFIG --profile P.yaml`: search placements from measured costs; `hpcplace compare
RUN...`: measured iteration times of submitted variants next to their predictions.

A driver reports a measurement by printing a line containing `hpcplace-metric` followed by
`key=value` words, e.g. `hpcplace-metric iteration_s=12.3`; `compare` reads every such line of a
run's logs and reports the median of `iteration_s`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from datetime import datetime
from pathlib import Path

from hpcplace.commands.plan_cmd import (
    add_config_arguments,
    add_driver_argument,
    check_output,
    config_overrides,
    write_output,
)
from hpcplace.errors import HpcplaceError, SpecError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hpcplace.tune.tune import Candidate

TUNE_RECORD = "tune.json"
RUN_MARKERS = (TUNE_RECORD, "run.json", "plan.json")  # a run directory holds at least one of them
METRIC_RE = re.compile(r"hpcplace-metric((?:\s+[A-Za-z_][A-Za-z0-9_.]*=\S+)+)")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from hpcplace.commands.slurm_cmds import _template_args
    from hpcplace.tune import OBJECTIVES

    p = subparsers.add_parser("tune", help="search placements over the config's node groups from measured costs")
    add_config_arguments(p)
    p.add_argument("--profile", required=True, metavar="P.yaml", help="measured costs (format: docs/tune.md)")
    p.add_argument("--top", type=int, default=5, metavar="K", help="placements to show (default 5)")
    p.add_argument(
        "--objective",
        choices=OBJECTIVES,
        default="time",
        help="minimise predicted seconds per iteration (default) or GPU-hours per iteration",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write the winner in the input's own format to FILE (its folder must exist)",
    )
    p.add_argument("--submit-top", type=int, metavar="K", help="submit the K best as separate jobs")
    p.add_argument(
        "--runs-dir", metavar="DIR", help="where --submit-top's run directories go (default: slurm.output_dir or runs)"
    )
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for each Slurm command")
    _template_args(p)
    add_driver_argument(p)
    p.set_defaults(func=run_tune)

    p = subparsers.add_parser("compare", help="measured iteration times of runs next to their predictions")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories (from tune --submit-top)")
    p.set_defaults(func=run_compare)


class _Progress:
    """One stderr line, updated, once a search has run for more than a second."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.shown = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.start > 1.0 and (now - self.shown > 0.2 or done == total):
            self.shown = now
            print(
                f"\rhpcplace: searched {done}/{total} structures ({now - self.start:.1f} s)",
                end="\n" if done == total else "",
                file=sys.stderr,
                flush=True,
            )


def run_tune(args: argparse.Namespace) -> int:
    from hpcplace.config.formats import load_spec
    from hpcplace.plan.planner import plan_from_spec
    from hpcplace.tune.tune import baselines, explain, search
    from hpcplace.tune.tune_config import build_setup, plan_text, rewrite
    from hpcplace.tune.tune_profile import parse_profile

    if args.top < 1 or (args.submit_top is not None and args.submit_top < 1):
        raise SpecError("--top and --submit-top take a positive number")
    if args.output:
        check_output("-o", Path(args.output), example="best.yaml")  # before the search: a bad -o costs none
    overrides = config_overrides(args)
    spec = load_spec(args.config, format=args.format, overrides=overrides)
    if not Path(args.config).is_file():  # the winner is a rewrite of the file's text: read again below
        raise SpecError(
            f"tune reads {args.config} twice (to plan it, then to rewrite it): it must be a regular "
            "file, not a pipe or a device",
            hint="save the config to a file first",
        )
    setup = build_setup(spec, plan_from_spec(spec), parse_profile(args.profile), args.objective)
    problem = setup.problem
    want = max(args.top, args.submit_top or 0)
    # spares for proposals the planner refuses
    found = search(problem, top=want + 3, progress=_Progress(), strict_fabric=args.strict_topology)
    try:
        text = Path(args.config).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read config file {args.config}: {exc}") from None
    accepted: list[tuple[Candidate, str]] = []
    refused: list[str] = []
    for cand in found:
        variant = rewrite(text, args.config, setup, cand)
        try:
            plan_text(variant, args.config, format=args.format, overrides=overrides)
        except HpcplaceError as exc:  # the search's rules missed one of the planner's: never proposed
            refused.append(f"{cand.describe()}: {exc.message}")
            continue
        accepted.append((cand, variant))
        if len(accepted) == want:
            break
    if not accepted:
        raise SpecError(
            "no placement of the profiled components fits the config's node groups"
            + (f" (the planner refused: {refused[0]})" if refused else ""),
            hint="check the profile's types against the node groups' labels and GPU types, "
            "memory_gb, counts and model_parallel",
        )
    bases = baselines(problem)
    unit = "GPU-h/iter" if args.objective == "gpu-hours" else "s/iter"
    print(
        f"tune {spec.name}: {len(problem.chain)} components over {len(problem.groups)} node groups, "
        f"{problem.batches} batch(es) per iteration; objective {args.objective} ({unit})"
    )
    for i, (cand, _) in enumerate(accepted[: args.top], 1):
        print(
            f"#{i}  {cand.time_s:10.3f} s/iter  {cand.gpu_hours:8.4f} GPU-h/iter  {cand.gpus:5d} GPUs  "
            f"{cand.describe()}"
        )
        print(f"     why: {explain(problem, cand, bases)}")
        for w in cand.warnings:
            print(f"     warning: {w}")
    for base in bases:
        if base.candidate is None:
            print(f"baseline {base.name}: not placeable")
        else:
            b = base.candidate
            margin = b.score(args.objective) / accepted[0][0].score(args.objective)
            print(
                f"baseline {base.name}: {b.time_s:.3f} s/iter, {b.gpu_hours:.4f} GPU-h/iter "
                f"({b.describe()}); the best is {margin:.2f}x better"
            )
    if refused:
        print(f"({len(refused)} proposal(s) the planner refused were skipped; first: {refused[0]})")
    if args.output:
        write_output("-o", Path(args.output), accepted[0][1], example="best.yaml")
        print(f"wrote {args.output}: `hpcplace plan {args.output}` is the next command")
    if args.submit_top:
        _submit_top(args, spec.name, accepted[: args.submit_top])
    return 0


def _variant_slug(cand: Candidate) -> str:
    text = "_".join(f"{'+'.join(s.members)}-{s.group}{s.count}" for s in cand.stages)
    return re.sub(r"[^A-Za-z0-9_.+-]", "-", text)[:120]


def _submit_top(args: argparse.Namespace, name: str, chosen: list[tuple[Candidate, str]]) -> None:
    """Each variant through `hpcplace submit`'s own path: --driver applied, a bare `python` made absolute,
    refused with nothing to run, unshared paths warned about, the live cluster checked."""
    from hpcplace.commands.slurm_cmds import _launcher, _runnable_plan, submit_checked

    launcher = _launcher(args)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    source = Path(args.config)
    for i, (cand, variant) in enumerate(chosen, 1):
        config = source.with_name(f"{source.stem}.tune-{i}{source.suffix}")
        try:
            config.write_text(variant, encoding="utf-8")  # next to the input: Hydra's relative defaults resolve
        except OSError as exc:
            raise SpecError(
                f"--submit-top writes each variant next to the config, as {config}: cannot write it "
                f"({exc.strerror or exc})",
                hint="copy the config to a folder you can write",
            ) from None
        try:
            plan = _runnable_plan(argparse.Namespace(**{**vars(args), "config": str(config)}))
        finally:
            config.unlink()
        root = Path(args.runs_dir) if args.runs_dir else Path(plan.slurm.get("output_dir") or "runs")
        run_dir = (root / f"{name}-tune{i}-{_variant_slug(cand)}-{stamp}").absolute()
        done = submit_checked(plan, args, launcher, run_dir)
        (run_dir / "config.yaml").write_text(variant, encoding="utf-8")
        (run_dir / TUNE_RECORD).write_text(
            json.dumps(
                {
                    "rank": i,
                    "variant": cand.describe(),
                    "predicted_iteration_s": cand.time_s,
                    "predicted_gpu_hours": cand.gpu_hours,
                    "gpus": cand.gpus,
                    "objective": args.objective,
                    "profile": str(Path(args.profile).absolute()),
                    "config": str(source.absolute()),
                },
                indent=1,
                sort_keys=True,
            )
            + "\n",
            encoding="utf-8",
        )
        print(f"submitted #{i} as job {done.job_id} ({done.run_dir})")


def read_metrics(run_dir: Path) -> list[float]:
    """Every `iteration_s` a driver printed in the run's logs."""
    values = []
    logs = run_dir / "logs"
    for path in sorted(logs.rglob("*")) if logs.is_dir() else []:
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise SpecError(
                f"cannot read the log {path}: {exc.strerror or exc}",
                hint="compare reads every file under the run's logs/ folder",
            ) from None
        for line in text.splitlines():
            m = METRIC_RE.search(line)
            if not m:
                continue
            for word in m.group(1).split():
                key, _, value = word.partition("=")
                if key == "iteration_s":
                    try:
                        values.append(float(value))
                    except ValueError:
                        pass
    return values


def run_compare(args: argparse.Namespace) -> int:
    import statistics  # here: random, fractions and decimal come with it, and no other command needs them

    rows = []
    for run in args.runs:
        run_dir = Path(run)
        hint = "pass the directories tune --submit-top printed"
        if not run_dir.is_dir():
            raise SpecError(f"{run} is not a run directory", hint=hint)
        if not any((run_dir / marker).exists() for marker in RUN_MARKERS):
            raise SpecError(f"{run} is not a run directory (it holds none of {', '.join(RUN_MARKERS)})", hint=hint)
        record = {}
        if (run_dir / TUNE_RECORD).exists():
            try:
                record = json.loads((run_dir / TUNE_RECORD).read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise SpecError(
                    f"{run_dir / TUNE_RECORD} is unreadable: {exc}",
                    hint="the run directory is damaged; compare the others without it",
                ) from None
            if not isinstance(record, dict):
                raise SpecError(
                    f"{run_dir / TUNE_RECORD} is not a tune record (a JSON object)",
                    hint="the run directory is damaged; compare the others without it",
                )
        values = read_metrics(run_dir)
        measured = statistics.median(values) if values else None
        predicted = record.get("predicted_iteration_s")
        rows.append((run_dir.name, record.get("variant", "?"), predicted, measured, len(values)))
    print(f"{'run':<40} {'predicted s':>12} {'measured s':>11} {'samples':>7} {'meas/pred':>9}  variant")
    for name, variant, predicted, measured, n in rows:
        ratio = f"{measured / predicted:9.2f}" if measured is not None and predicted else f"{'-':>9}"
        print(
            f"{name[:40]:<40} {predicted if predicted is not None else float('nan'):12.3f} "
            f"{measured if measured is not None else float('nan'):11.3f} {n:7d} {ratio}  {variant}"
        )
    return 0
