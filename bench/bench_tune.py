"""`hpcplace tune` benchmark: 1,024 GPUs in 3 partitions (64 A800 nodes x 8, 128 RTX 4090 nodes x 4, and 64
CPU nodes), 5 components whose profile lets most of them run on several partitions.

    python bench/bench_tune.py [--repeat 3] [--objective time|gpu-hours]

Reports the pure search (hpcplace.tune.tune.search, top 5) and the whole command as a user runs it in-process
(`hpcplace tune CONFIG --profile P --top 5`: parse, search, rewrite and plan every proposal, baselines).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hpcplace.cli import main
from hpcplace.config.formats import load_spec
from hpcplace.plan.planner import plan_from_spec
from hpcplace.tune.tune import search
from hpcplace.tune.tune_config import build_setup
from hpcplace.tune.tune_profile import parse_profile

CONFIG = """\
name: bench-tune
cluster:
  node_groups:
    - {label: a800, partition: a800, nodes: 64, gpus_per_node: 8, gpu_type: a800}
    - {label: rtx4090, partition: rtx4090, nodes: 128, gpus_per_node: 4, gpu_type: rtx4090}
    - {label: cpu, partition: cpu, nodes: 64}
  component_placement:
    env: {node_group: cpu, placement: 0-63}
    rollout: {node_group: rtx4090, placement: 0-511}
    inference: {node_group: a800, placement: 0-127}
    actor: {node_group: a800, placement: 128-511}
    reward: {node_group: cpu, placement: 0-63}
"""

PROFILE = """\
batches: 64
workflow: [env, rollout, inference, actor, reward]
memory_gb: {a800: 80, rtx4090: 24}
components:
  env:
    seconds: {cpu: {16: 400, 64: 110}, rtx4090: {64: 150, 256: 45}}
    transfer_gb: 4
  rollout:
    seconds: {a800: {64: 300, 256: 85, 512: 48}, rtx4090: {128: 380, 512: 105}}
    memory_gb: 18
    switch_seconds: {a800: 8, rtx4090: 12}
    transfer_gb: 20
  inference:
    seconds: {a800: {64: 60, 256: 17}, rtx4090: {128: 90, 512: 26}}
    params_b: 7
    switch_seconds: 5
    transfer_gb: 10
  actor:
    seconds: {a800: {128: 520, 512: 140}, rtx4090: {512: 400}}
    params_b: 7
    bytes_per_param: 16
    model_parallel: 4
    switch_seconds: {a800: 15}
    transfer_gb: 1
  reward:
    seconds: {cpu: {16: 80, 64: 22}, rtx4090: {32: 30, 128: 9}}
"""


def main_bench() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--objective", default="time", choices=("time", "gpu-hours"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config, profile = Path(tmp) / "bench.yaml", Path(tmp) / "profile.yaml"
        config.write_text(CONFIG)
        profile.write_text(PROFILE)
        spec = load_spec(config)
        setup = build_setup(spec, plan_from_spec(spec), parse_profile(profile), args.objective)
        gpus = sum(g.capacity for g in setup.problem.groups if g.kind == "gpu")
        pure, cli = [], []
        found = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            found = search(setup.problem, top=5)
            pure.append(time.perf_counter() - t)
            out = io.StringIO()
            t = time.perf_counter()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                rc = main(["tune", str(config), "--profile", str(profile), "--top", "5", "--objective", args.objective])
            cli.append(time.perf_counter() - t)
            assert rc == 0, out.getvalue()
        print(
            f"{gpus} GPUs, {len(setup.problem.groups)} partitions, {len(setup.problem.chain)} components, "
            f"objective {args.objective}"
        )
        print(f"best: {found[0].time_s:.2f} s/iter, {found[0].gpu_hours:.3f} GPU-h/iter: {found[0].describe()}")
        print(f"search (top 5), median of {args.repeat}: {statistics.median(pure):.2f} s")
        print(f"`hpcplace tune --top 5` in-process, median of {args.repeat}: {statistics.median(cli):.2f} s")


if __name__ == "__main__":
    main_bench()
