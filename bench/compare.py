"""The benchmarks of bench/ against an earlier commit, on this machine, one after the other.

    python bench/compare.py 57a2c3a                 # this working tree against commit 57a2c3a
    python bench/compare.py HEAD~5 --repeat 7       # more repetitions (medians of 7)
    python bench/compare.py v0.1 --only plan --only render --nodes 16384

Both sides are installed the same way, into temporary folders, with this interpreter: REV from a
`git worktree` of it, this side from a copy of the working tree (tracked and untracked files git does
not ignore: uncommitted changes count), each with `pip install --no-deps --no-build-isolation --target`.
Every measured command is a fresh process with PYTHONPATH at its side's folder, run from a temporary
folder (so neither checkout shadows it); the header shows which `hpcplace` and `hpcplace.runtime`
each side imports. Runs alternate (REV, this, this, REV, ...) so both sides see the same load.

What runs, per benchmark script:
- bench_planner, bench_render: `hpcplace plan --json CONFIG > plan.json` and `hpcplace render CONFIG -o DIR`
  for the uniform and heterogeneous specs at 1,024 and 16,384 nodes (the specs of this side's
  bench_planner, the same files for both sides); also `hpcplace plan CONFIG` (the summary).
- bench_shim: `python -m hpcplace.runtime --plan P ... -- true` as a Slurm task, on a small plan and
  on 65,536 processes, each side's plan.json and index written by that side's `hpcplace render`.
- bench_tune: `hpcplace tune` of its 1,024-GPU experiment (skipped when REV has no `tune`).
- bench_hydra: `hpcplace plan` of its Hydra-composed experiment.
- bench_weight_store, bench_handoff: the scripts themselves, small sizes, each side's runtime; their
  tables' numbers are compared cell by cell (medians over the repetitions).
Skipped, with the reason printed: the benchmarks that need the Slurm test cluster or a GPU, and
the fuzz sweep (a correctness run, not a timing).

Printed: per benchmark the medians of wall time, CPU time (user + system of that process, which
moves less than wall time on a shared machine) and peak RSS, and this side / REV ratios (< 1 is
faster here). For script tables: each number's median per side and the ratio.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))

from bench_planner import big_spec_yaml, uniform_spec_yaml  # noqa: E402
from shim_specs import BIG, BIG_TASK, SMALL, SMALL_TASK  # noqa: E402

SKIPPED = {
    "bench_preflight.py": "needs the Slurm test cluster (sudo, scripts/slurm-cluster)",
    "bench_attach.py": "needs the Slurm test cluster (a held job)",
    "bench_ray_bringup.py": "needs the Slurm test cluster (Ray on 1-5 nodes)",
    "bench_render.py --submit": "needs the Slurm test cluster (submit -> every step running)",
    "bench_gpu_offload.py": "needs an NVIDIA GPU with torch_memory_saver (scripts/gpu-tier.sh)",
    "bench_gpu_weight_sync.py": "needs an NVIDIA GPU (scripts/gpu-tier.sh)",
    "bench_gpu_preflight.py": "measures a GPU node's checks (scripts/gpu-tier.sh)",
    "bench_fuzz.py": "a correctness sweep (100,000 cases, no tracebacks), not a timing",
}


@dataclass(frozen=True)
class Side:
    """One installed tree: its label, the folder on PYTHONPATH, and what it imports."""

    label: str
    site: Path
    imports: str

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(self.site), **(extra or {})}


@dataclass(frozen=True)
class Run:
    wall: float
    cpu: float
    rss_mib: float


@dataclass(frozen=True)
class Case:
    """A command measured as a fresh process; `argv(side, rep)` gives it for one side and repetition,
    `stdout` names a file for its output (removed after each run) or None for /dev/null."""

    name: str
    argv: Callable[[Side, int], list[str]]
    env: dict[str, str] = field(default_factory=dict)
    stdout: Path | None = None
    after: Callable[[], None] | None = None


@dataclass(frozen=True)
class Script:
    """A bench script run whole on each side; its markdown tables are compared cell by cell."""

    name: str
    args: tuple[str, ...]


def sh(argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, env=env, cwd=cwd)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return str(done.stdout)


def install(source: Path, site: Path) -> None:
    """pip's own layout of the tree (package-dir included: runtime/ becomes hpcplace/runtime)."""
    sh(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-compile",
            "--target",
            str(site),
            str(source),
        ]
    )


def copy_working_tree(dest: Path) -> None:
    """The files git tracks or would track (untracked, not ignored), as they are on disk now."""
    listed = sh(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"])
    for name in filter(None, listed.split("\0")):
        src = ROOT / name
        if src.is_file():  # a tracked file deleted in the working tree is left out
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


PROBE = (
    "import hpcplace, hpcplace.runtime, hpcplace.templates, os; "
    "print(os.path.dirname(hpcplace.__file__), os.path.dirname(hpcplace.runtime.__file__))"
)


def make_side(label: str, source: Path, site: Path, cwd: Path) -> Side:
    install(source, site)
    imports = sh([sys.executable, "-c", PROBE], env={**os.environ, "PYTHONPATH": str(site)}, cwd=cwd).strip()
    package, runtime = imports.split()
    if not (package.startswith(str(site)) and runtime.startswith(str(site))):
        raise SystemExit(f"{label}: imports {imports}, not its own copy under {site}")
    return Side(label, site, f"hpcplace -> {package}, hpcplace.runtime -> {runtime}")


def measure(argv: list[str], env: dict[str, str], cwd: Path, stdout: Path | None) -> Run:
    """Wall, CPU (user + system) and peak RSS of one fresh process (wait4)."""
    sink = open(stdout, "wb") if stdout is not None else open(os.devnull, "wb")  # noqa: SIM115
    try:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=sink, stderr=subprocess.PIPE)
        assert proc.stderr is not None
        err = proc.stderr.read()
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    finally:
        sink.close()
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code
    if code != 0:
        raise RuntimeError(f"exit {code}: {err.decode(errors='replace').strip()[-600:]}")
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


def order(rep: int, sides: tuple[Side, Side]) -> tuple[Side, Side]:
    """REV, this / this, REV / ...: neither side always runs first (page cache, load drift)."""
    return sides if rep % 2 == 0 else (sides[1], sides[0])


def ratio(new: float, old: float) -> str:
    return f"{new / old:.2f}" if old > 0 else "-"


def run_cases(cases: list[Case], sides: tuple[Side, Side], repeat: int, cwd: Path) -> None:
    old, new = sides
    print(
        f"| benchmark (fresh process, median of {repeat}) | wall {old.label} | wall {new.label} | ratio "
        f"| CPU {old.label} | CPU {new.label} | ratio | peak RSS {old.label} → {new.label} |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for case in cases:
        runs: dict[str, list[Run]] = {old.label: [], new.label: []}
        try:
            for side in (old, new):  # a warm-up run each: .pyc files, page cache
                measure(case.argv(side, -1), side.env(case.env), cwd, case.stdout)
                if case.after:
                    case.after()
            for rep in range(repeat):
                for side in order(rep, sides):
                    runs[side.label].append(measure(case.argv(side, rep), side.env(case.env), cwd, case.stdout))
                    if case.after:
                        case.after()
        except RuntimeError as exc:
            print(f"| {case.name} | skipped: failed on {side.label}: {str(exc).splitlines()[-1][:200]} |||||||")
            continue
        finally:
            if case.stdout is not None:
                case.stdout.unlink(missing_ok=True)
        a, b = runs[old.label], runs[new.label]
        wall_a, wall_b = (statistics.median(r.wall for r in x) for x in (a, b))
        cpu_a, cpu_b = (statistics.median(r.cpu for r in x) for x in (a, b))
        print(
            f"| {case.name} | {wall_a:.3f} s | {wall_b:.3f} s | {ratio(wall_b, wall_a)} | {cpu_a:.3f} s | "
            f"{cpu_b:.3f} s | {ratio(cpu_b, cpu_a)} | {max(r.rss_mib for r in a):.0f} → "
            f"{max(r.rss_mib for r in b):.0f} MiB |",
            flush=True,
        )


NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")


def table_cells(text: str) -> dict[tuple[str, str], float]:
    """Every numeric cell of the markdown tables in `text`: (row label, column header) -> its first number."""
    cells: dict[tuple[str, str], float] = {}
    header: list[str] = []
    for line in text.splitlines():
        if not line.startswith("|"):
            header = []
            continue
        row = [c.strip() for c in line.strip().strip("|").split("|")]
        if all(set(c) <= set("-: ") for c in row):
            continue
        if not header:
            header = row
            continue
        for column, cell in zip(header[1:], row[1:]):
            found = NUMBER.search(cell)
            if found:
                cells[(row[0], column)] = float(found.group().replace(",", ""))
    return cells


def run_scripts(scripts: list[Script], sides: tuple[Side, Side], repeat: int, cwd: Path) -> None:
    old, new = sides
    for script in scripts:
        values: dict[str, list[dict[tuple[str, str], float]]] = {old.label: [], new.label: []}
        argv = [sys.executable, str(BENCH / script.name), *script.args]
        shown = f"`{script.name} {' '.join(script.args)}`".replace(" `", "`")
        try:
            for rep in range(repeat):
                for side in order(rep, sides):
                    done = subprocess.run(argv, env=side.env(), cwd=cwd, capture_output=True, text=True)
                    if done.returncode != 0:
                        raise RuntimeError(
                            f"{side.label}: {(done.stderr.strip() or done.stdout.strip()).splitlines()[-1]}"
                        )
                    values[side.label].append(table_cells(done.stdout))
        except RuntimeError as exc:
            print(f"\n{shown}: skipped, failed on {str(exc)[:300]}")
            continue
        print(f"\n{shown} (its tables' numbers, median of {repeat}; ratio = {new.label} / {old.label}):\n")
        print(f"| row | column | {old.label} | {new.label} | ratio |")
        print("|---|---|---:|---:|---:|")
        keys = [k for k in values[new.label][0] if all(k in v for v in values[old.label] + values[new.label])]
        for key in keys:
            a = statistics.median(v[key] for v in values[old.label])
            b = statistics.median(v[key] for v in values[new.label])
            print(f"| {key[0][:70]} | {key[1][:40]} | {a:g} | {b:g} | {ratio(b, a)} |")


def cli(side: Side, *args: str) -> list[str]:
    del side  # the side is its PYTHONPATH
    return [sys.executable, "-m", "hpcplace.cli", *args]


def command(*args: str) -> Callable[[Side, int], list[str]]:
    """`hpcplace ARGS...`, the same for both sides."""
    return lambda side, _rep: cli(side, *args)


def shim(work: Path, job: str) -> Callable[[Side, int], list[str]]:
    """The shim on its side's own plan.json (rendered by that side)."""
    return lambda side, _rep: [
        sys.executable,
        "-m",
        "hpcplace.runtime",
        "--plan",
        str(work / f"shim-{job}-{side.label}" / "plan.json"),
        "--component",
        "actor",
        "--",
        "true",
    ]


def remover(path: Path | str) -> Callable[[], None]:
    return lambda: shutil.rmtree(path, ignore_errors=True)


def build_cases(work: Path, sides: tuple[Side, Side], sizes: list[int], only: list[str]) -> list[Case]:
    cases: list[Case] = []
    specs = {"uniform": uniform_spec_yaml, "heterogeneous": big_spec_yaml}
    for nodes in sizes:
        for kind, make in specs.items():
            config = work / f"{kind}-{nodes}.yaml"
            config.write_text(make(nodes))
            cases.append(
                Case(
                    f"plan --json, {kind} {nodes} nodes",
                    command("plan", "--json", str(config)),
                    stdout=work / "plan.json",
                )
            )
            out = work / "render-out"
            cases.append(
                Case(
                    f"render, {kind} {nodes} nodes", command("render", str(config), "-o", str(out)), after=remover(out)
                )
            )
    biggest = work / f"uniform-{max(sizes)}.yaml"
    cases.append(Case(f"plan (summary), uniform {max(sizes)} nodes", command("plan", str(biggest))))
    for label, text, task in (("small plan", SMALL, SMALL_TASK), ("65,536 processes", BIG, BIG_TASK)):
        config = work / f"shim-{task['SLURM_JOB_ID']}.yaml"
        config.write_text(text)
        for side in sides:  # each side's own plan.json and index
            run_dir = work / f"shim-{task['SLURM_JOB_ID']}-{side.label}"
            sh(cli(side, "render", str(config), "-o", str(run_dir)), env=side.env(), cwd=work)
        job = task["SLURM_JOB_ID"]
        cases.append(
            Case(
                f"shim start-up (`python -m hpcplace.runtime ... -- true`), {label}",
                shim(work, job),
                env=task,
                after=remover(f"/dev/shm/hpcplace-{job}"),
            )
        )
    cases += [tune_case(work), hydra_case()]
    return [c for c in cases if not only or any(word in c.name for word in only)]


def tune_case(work: Path) -> Case:
    """bench_tune's experiment through the CLI (its config and profile)."""
    import bench_tune

    config, profile = work / "tune.yaml", work / "tune-profile.yaml"
    config.write_text(bench_tune.CONFIG)
    profile.write_text(bench_tune.PROFILE)
    return Case(
        "tune (1,024 GPUs, 3 partitions, top 5)", command("tune", str(config), "--profile", str(profile), "--top", "5")
    )


def hydra_case() -> Case:
    """bench_hydra's Hydra-composed experiment (this side's fixture files, for both sides)."""
    fixtures = ROOT / "tests" / "fixtures" / "hydra"
    return Case(
        "plan (summary) of bench_hydra's Hydra-composed experiment",
        command("plan", str(fixtures / "main.yaml")),
        env={"HPCPLACE_FIXTURE_SHARED": str(fixtures / "shared")},
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rev", help="the earlier commit (any git revision)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per side and benchmark (medians)")
    parser.add_argument("--nodes", type=int, action="append", help="plan/render sizes (default 1024 and 16384)")
    parser.add_argument("--only", action="append", default=[], help="only benchmarks whose name contains this")
    parser.add_argument("--no-scripts", action="store_true", help="skip the weight store and hand-off scripts")
    args = parser.parse_args()
    rev = sh(["git", "-C", str(ROOT), "rev-parse", "--verify", f"{args.rev}^{{commit}}"]).strip()
    head = sh(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]).strip()
    dirty = bool(sh(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"]).strip())
    with tempfile.TemporaryDirectory(prefix="hpcplace-compare-") as tmp:
        base = Path(tmp)
        old_tree, new_tree, work = base / "rev", base / "this", base / "work"
        new_tree.mkdir()
        work.mkdir()
        sh(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old_tree), rev])
        try:
            copy_working_tree(new_tree)
            old = make_side(args.rev, old_tree, base / "site-rev", work)
            new = make_side(head + ("+changes" if dirty else ""), new_tree, base / "site-this", work)
            sides = (old, new)
            cpu = next(
                (
                    line.split(":", 1)[1].strip()
                    for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")
                ),
                platform.processor(),
            )
            print(
                f"hpcplace benchmarks: {new.label} against {args.rev} ({rev[:12]}), "
                f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC"
            )
            print(
                f"machine: {platform.node()}, {os.cpu_count()} CPUs ({cpu}), load average "
                f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; Python {platform.python_version()}"
            )
            for side in sides:
                print(f"  {side.label}: {side.imports}")
            print("\nskipped: " + "; ".join(f"{k}: {v}" for k, v in SKIPPED.items()) + "\n")
            run_cases(build_cases(work, sides, args.nodes or [1024, 16384], args.only), sides, args.repeat, work)
            if not args.no_scripts and not args.only:
                run_scripts(
                    [
                        Script("bench_weight_store.py", ("--sizes", "1", "--repeat", "3")),
                        Script("bench_handoff.py", ("--turns", "100")),
                    ],
                    sides,
                    min(args.repeat, 3),
                    work,
                )
            print(f"\nload average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        finally:
            sh(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old_tree)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
