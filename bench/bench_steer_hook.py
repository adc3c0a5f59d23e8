"""What the steering hook adds to a Python process of the job (the driver, every Ray worker): start-up with and
without ray/steer/sitecustomize.py first on PYTHONPATH, for `python -c pass` (a process that never imports
Ray) and `python -c "import ray"` (the driver's and workers' start: the hook wraps Ray's request functions as
their modules load), and the time of one matching decision (steer_placement_group on a 64-bundle group).
Target: the driver's start no more than 0.1 s slower (issue 42). Needs Ray for the second row.

    .venv/bin/python bench/bench_steer_hook.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hpcplace.runtime import steer_hook  # noqa: E402
from hpcplace.runtime.ray_node import STEER_DIR, STEER_TABLE, steer_environment  # noqa: E402

RULES = [
    {"what": "verl global_pool", "pin": "group", "nodes": list(range(8)), "name": r"global_poolverl_group_[0-9_]+:(?P<index>\d+)"},
    {"what": "OpenRLHF actor", "pin": "bundle", "nodes": [k // 8 for k in range(64)], "ordinal": 0},
]  # fmt: skip


def started(argv: list[str], envs: list[dict[str, str]], repeat: int) -> list[float]:
    """Median wall time of `argv` to exit under each environment, in seconds; the environments take turns
    (one warm-up round first), so neither gets the colder caches."""
    times: list[list[float]] = [[] for _ in envs]
    for round_ in range(repeat + 1):
        for k, env in enumerate(envs):
            t0 = time.perf_counter()
            subprocess.run(argv, env=env, check=True, capture_output=True)
            if round_:
                times[k].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=15)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hpcplace-steer-bench-") as run:
        folder = Path(run) / STEER_DIR
        folder.mkdir(parents=True)
        (folder / "sitecustomize.py").write_text(Path(steer_hook.__file__).read_text(encoding="utf-8"))
        (folder / STEER_TABLE).write_text(json.dumps({"rules": RULES}))
        plain = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", steer_hook.ENV)}
        hooked = {**plain, **steer_environment(plain, run)}
        rows = []
        for what, code in (("python -c pass", "pass"), ("python -c 'import ray'", "import ray")):
            argv = [sys.executable, "-c", code]
            without, with_hook = started(argv, [plain, hooked], opts.repeat)
            rows.append((what, without, with_hook))
    bundles = [{"GPU": 1, "CPU": 1} for _ in range(64)]
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        steer_hook.steer_placement_group(RULES, "", bundles, 0)
    decision = (time.perf_counter() - t0) / n
    print(f"{'process':28} {'without hook':>13} {'with hook':>10} {'added':>9}")
    for what, without, with_hook in rows:
        print(f"{what:28} {without * 1000:10.1f} ms {with_hook * 1000:7.1f} ms {(with_hook - without) * 1000:+6.1f} ms")
    print(f"one decision (64 bundles): {decision * 1e6:.0f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
