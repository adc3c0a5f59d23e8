"""Fuzz bench: >= 100,000 mutated configs (native, RLinf, ROLL, AReaL) through plan + render.

    python bench/bench_fuzz.py                      # 100,000 cases, seed 1, 2 worker processes
    python bench/bench_fuzz.py --cases 5000 --workers 1 --seed 7

The generator is tests/safety/fuzzing.py (the CI test draws from it through hypothesis). Passes when
there is no traceback, no hang (a case past the 30 s per-case alarm) and every error carries a location;
cases slower than --slow seconds are counted and shown (a plan of a million processes, within the caps). Prints the counts the README reports.
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.safety.fuzzing import Chooser, make_case, run_case

HANG_S = 30


def _alarm(_signum: int, _frame: object) -> None:
    raise TimeoutError("case ran past the alarm")


def worker(args: tuple[int, int, int, float]) -> tuple[collections.Counter, dict[str, str], float]:
    start, count, seed, slow = args
    signal.signal(signal.SIGALRM, _alarm)
    counts: collections.Counter = collections.Counter()
    examples: dict[str, str] = {}
    slowest = 0.0
    with tempfile.TemporaryDirectory(prefix="hpcplace-fuzz-") as tmp:
        path = Path(tmp) / "config.yaml"
        for i in range(start, start + count):
            rng = random.Random(seed * 1_000_003 + i)  # every case reproducible on its own
            name, text, overrides = make_case(Chooser(rng.randint))
            signal.alarm(HANG_S)
            try:
                outcome = run_case(path, text, overrides, slow_s=slow)
            except TimeoutError:
                counts["hang"] += 1
                examples.setdefault(f"hang in case {i}", text[:1500])
                continue
            finally:
                signal.alarm(0)
            counts[outcome.kind] += 1
            slowest = max(slowest, outcome.seconds)
            if outcome.kind not in ("ok", "error"):
                key = outcome.detail.strip().splitlines()[-1][:200] if outcome.detail.strip() else outcome.kind
                examples.setdefault(f"{outcome.kind}: {key}", f"case {i} ({name}, --set {overrides}):\n{text[:1500]}")
    return counts, examples, slowest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--slow", type=float, default=5.0, help="a case slower than this fails the bench")
    args = parser.parse_args()
    chunk = 500
    jobs = [(s, min(chunk, args.cases - s), args.seed, args.slow) for s in range(0, args.cases, chunk)]
    t0 = time.perf_counter()
    total: collections.Counter = collections.Counter()
    examples: dict[str, str] = {}
    slowest = 0.0
    with multiprocessing.Pool(args.workers) as pool:
        for done, (counts, found, slow) in enumerate(pool.imap_unordered(worker, jobs), 1):
            total.update(counts)
            if done % 20 == 0:
                print(
                    f"... {sum(total.values())} cases, {time.perf_counter() - t0:.0f} s, "
                    f"bad {sum(v for k, v in total.items() if k not in ('ok', 'error', 'slow'))}",
                    flush=True,
                )
            for k, v in found.items():
                examples.setdefault(k, v)
            slowest = max(slowest, slow)
    elapsed = time.perf_counter() - t0
    # A case that plans a million processes is legitimately slow (within the caps): reported, not failed.
    bad = sum(v for k, v in total.items() if k not in ("ok", "error", "slow"))
    print(
        f"{sum(total.values())} cases (seed {args.seed}) in {elapsed:.0f} s: {total['ok']} planned and rendered, "
        f"{total['error']} clear errors with a location; tracebacks {total['traceback']}, errors without a "
        f"location {total['no-location']}, slow {total['slow']}, hangs {total['hang']}; slowest case {slowest:.2f} s"
    )
    for key, text in list(examples.items())[:30]:
        print(f"--- {key}\n{text}\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
