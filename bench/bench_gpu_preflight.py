"""What the per-node preflight's GPU checks cost on a real GPU node, and what they answer there.

    python bench/bench_gpu_preflight.py [--repeat 5] [--json OUT.json]

Times, each `--repeat` times (median and max, seconds), the checks a job's preflight and shim run on a GPU
node: the device files (`gpu_facts`), NVML (`query_nvml`, in-process as the shim calls it), the
torch_memory_saver preload choice with its /bin/true probe (`preload_env`), and the two child-process
checks of `gpu_runtime_problems` (the driver supports torch's CUDA; the preload hook loads), once without
and once with an offloading component. Also records every answer, so a run shows both the cost and that
the checks pass on a good node. scripts/gpu-tier.sh runs it on the lent GPU machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from hpcplace.runtime.devices import query_nvml
from hpcplace.runtime.preflight import gpu_facts, gpu_runtime_problems
from hpcplace.runtime.preload import preload_env


def timed(fn: Callable[[], Any], repeat: int) -> tuple[dict[str, float], Any]:
    seconds, answer = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        answer = fn()
        seconds.append(time.perf_counter() - t0)
    return {"median_s": round(statistics.median(seconds), 4), "max_s": round(max(seconds), 4)}, answer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    python = sys.executable
    checks: dict[str, Callable[[], Any]] = {
        "gpu_facts": lambda: gpu_facts("localhost", env),
        "query_nvml": query_nvml,
        "preload_env": lambda: preload_env(env, command=(python,)),
        "gpu_runtime_problems": lambda: gpu_runtime_problems(python, env, offload=False, timeout=120),
        "gpu_runtime_problems_offload": lambda: gpu_runtime_problems(python, env, offload=True, timeout=120),
    }
    result: dict[str, Any] = {}
    for name, fn in checks.items():
        timing, answer = timed(fn, args.repeat)
        result[name] = {**timing, "answer": repr(answer)[:600]}
        print(f"{name:30s} median {timing['median_s']:.4f} s  max {timing['max_s']:.4f} s  {repr(answer)[:160]}")
    problems = gpu_runtime_problems(python, env, offload=True, timeout=120)
    result["problems"] = problems
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)
    print("problems:", problems or "none")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
