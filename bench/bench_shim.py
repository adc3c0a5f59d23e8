"""Benchmark: wall time of the in-job shim starting `true`, against bare `python3 -c pass`.

    python bench/bench_shim.py [--runs 40] [--clean]

Plans: a small one (the lab's het job, 4 components) and a 65,536-process one (8,192 nodes x 8 GPUs),
both written with the real planner, plan_to_json and write_index. The shim runs as a Slurm task
would see it (recorded variables of het job 120; the last rank of the big plan). Runs are
interleaved; the table shows medians and the ratio to bare Python. Target: <= 1.3x.

`--clean` adds a clean-interpreter comparison (`python -S`, package installed with
`pip install --no-deps --target`): no site-packages startup, so the shim's own cost stands out.
Also printed: the in-process time of finding the process and computing its environment.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from shim_specs import BIG, BIG_TASK, SMALL, SMALL_TASK  # bench/, this script's folder, is on sys.path

from hpcplace.plan.plan import plan_to_json
from hpcplace.plan.planner import plan_from_file
from hpcplace.runtime.plan_index import write_index
from hpcplace.runtime.shim import Options, resolve

# What a console-script wrapper does, minus pip's `import re`: the shim's own start-up cost.
DIRECT = "import sys; from hpcplace.runtime.shim import main; sys.exit(main())"


def write_plan(directory: Path, text: str) -> Path:
    config = directory / "config.yaml"
    config.write_text(text)
    plan = directory / "plan.json"
    plan.write_text(plan_to_json(plan_from_file(config)))
    write_index(plan)
    return plan


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{argv} failed ({done.returncode}): {done.stderr.decode()}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="runs per case (median reported)")
    parser.add_argument("--clean", action="store_true", help="also compare in a clean interpreter (python -S)")
    args = parser.parse_args()
    python = sys.executable
    script = shutil.which("hpcplace-run")
    base = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}
    with tempfile.TemporaryDirectory() as tmp:
        small_dir, big_dir = Path(tmp, "small"), Path(tmp, "big")
        small_dir.mkdir()
        big_dir.mkdir()
        small, big = write_plan(small_dir, SMALL), write_plan(big_dir, BIG)
        cases: dict[str, tuple[list[str], dict[str, str]]] = {
            "bare `python3 -c pass`": ([python, "-c", "pass"], base),
            "`true` alone": (["true"], base),
        }
        for label, plan, task in (("small plan", small, SMALL_TASK), ("65,536-process plan", big, BIG_TASK)):
            shim_args = ["--plan", str(plan), "--component", "actor", "--", "true"]
            cases[f"`python -m hpcplace.runtime` ({label})"] = (
                [python, "-m", "hpcplace.runtime", *shim_args],
                {**base, **task},
            )
            if script:
                cases[f"`hpcplace-run` ({label})"] = ([script, *shim_args], {**base, **task})
        if args.clean:
            target, source = Path(tmp, "install"), Path(tmp, "source")
            shutil.copytree(
                Path(__file__).resolve().parents[1],
                source,
                ignore=shutil.ignore_patterns(".git", "build", "runs", "tests", ".*", "*.egg-info", "__pycache__"),
            )  # keep the checkout clean
            subprocess.run(
                [
                    python,
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--no-deps",
                    "--no-build-isolation",
                    "--target",
                    str(target),
                    str(source),
                ],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            clean = {**base, "PYTHONPATH": str(target)}
            cases["clean: bare `python3 -S -c pass`"] = ([python, "-S", "-c", "pass"], base)
            for label, plan, task in (("small plan", small, SMALL_TASK), ("65,536-process plan", big, BIG_TASK)):
                shim_args = ["--plan", str(plan), "--component", "actor", "--", "true"]
                cases[f"clean: `python -S -m hpcplace.runtime` ({label})"] = (
                    [python, "-S", "-m", "hpcplace.runtime", *shim_args],
                    {**clean, **task},
                )
                cases[f"clean: shim imported directly, no runpy ({label})"] = (
                    [python, "-S", "-c", DIRECT, *shim_args],
                    {**clean, **task},
                )
        in_process = {
            label: _in_process(plan, task)
            for label, plan, task in (("small plan", small, SMALL_TASK), ("65,536-process plan", big, BIG_TASK))
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for argv, env in cases.values():  # warm the page cache and .pyc files
            timed(argv, env)
        for _ in range(args.runs):
            for name, (argv, env) in cases.items():
                times[name].append(timed(argv, env))
        for job in ("120", "121"):
            shutil.rmtree(f"/dev/shm/hpcplace-{job}", ignore_errors=True)
    bare = statistics.median(times["bare `python3 -c pass`"])
    clean_bare = statistics.median(times.get("clean: bare `python3 -S -c pass`", [bare]))
    print(
        f"python {sys.version.split()[0]} at {python}; hpcplace-run at {script}; {args.runs} runs per case, "
        "interleaved\n"
    )
    print("| case | median ms | p90 ms | x bare python |")
    print("|---|---:|---:|---:|")
    for name, values in times.items():
        median = statistics.median(values)
        p90 = sorted(values)[int(0.9 * (len(values) - 1))]
        reference = clean_bare if name.startswith("clean:") else bare
        print(f"| {name} | {median * 1e3:.1f} | {p90 * 1e3:.1f} | {median / reference:.2f} |")
    print("\n(clean rows are relative to the clean bare interpreter)\n")
    print("| in-process: read snapshot + index lookups + env (median of 200) | us |")
    print("|---|---:|")
    for label, micros in in_process.items():
        print(f"| {label} | {micros:.0f} |")
    return 0


def _in_process(plan: Path, task: dict[str, str]) -> float:
    options = Options(
        plan=str(plan), component="actor", command=("true",), chdir=None, print_env=False, verify=False, verbose=False
    )
    samples = []
    for _ in range(200):
        start = time.perf_counter()
        resolve(options, task)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


if __name__ == "__main__":
    sys.exit(main())
