"""Planner benchmark: a 1,024-node x 8-GPU cluster, five components, 65,536 processes; and
`hpcplace plan --json` as a user runs it, up to 16,384 nodes (over a million processes).

    python bench/bench_planner.py            # in-process: 128/256/512/1024 nodes, time and peak memory;
                                             # then the CLI at 1,024 and 16,384 nodes: wall, CPU, peak RSS
    python bench/bench_planner.py --cli-only --nodes 16384 --repeat 1

All nodes have 8 GPUs. Components: actor (TP=4) + rollout (TP=2) collocated on the A800 half
(model-parallel, strided rollout); a disaggregated inference-side reward model on the H100 quarter (2
processes per GPU; RLinf reserves the name `inference` for non-collocated layouts); env on the robot
quarter's arms (16 per node, 2 processes per arm); 46 `agent` processes per node on every node through the
reserved `node` label.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hpcplace.config.yaml_source import load_yaml_text
from hpcplace.plan.planner import plan_from_spec


def big_spec_yaml(nodes: int) -> str:
    """The benchmark experiment for `nodes` 8-GPU nodes (a multiple of 4)."""
    a800, h100, robot = nodes // 2, nodes // 4, nodes // 4
    return f"""
name: bench-{nodes}
cluster:
  node_groups:
    - {{label: a800, partition: a800, nodes: {a800}, gpus_per_node: 8, gpu_type: a800, cpus_per_node: 64, mem_per_node: 1T}}
    - {{label: h100, partition: h100, nodes: {h100}, gpus_per_node: 8, gpu_type: h100, cpus_per_node: 64, mem_per_node: 1T}}
    - {{label: robot, partition: robot, nodes: {robot}, gpus_per_node: 8, gpu_type: l40, cpus_per_node: 128,
        hardware: {{type: arm, count: 16}}}}
  component_placement:
    actor,rollout: {{node_group: a800, placement: all}}
    reward: {{node_group: h100, placement: "all:0-{h100 * 8 * 2 - 1}"}}
    env: {{node_group: robot, placement: "all:0-{robot * 16 * 2 - 1}"}}
    agent: {{node_group: node, placement: "all:0-{nodes * 46 - 1}"}}
components:  # a command each: `hpcplace render` refuses a plan with nothing to run
  actor: {{tensor_parallel_size: 4, offload: true, command: ["true"]}}
  rollout: {{tensor_parallel_size: 2, offload: true, command: ["true"]}}
  reward: {{command: ["true"]}}
  env: {{command: ["true"]}}
  agent: {{command: ["true"]}}
"""


def uniform_spec_yaml(nodes: int) -> str:
    """One node group of `nodes` 8-GPU nodes: actor and rollout on every GPU (collocated, one
    process per GPU each) and 64 `node`-label agents per node: 80 processes per node (1,310,720 at
    16,384 nodes)."""
    return f"""
name: uniform-{nodes}
cluster:
  node_groups:
    - {{label: gpu, partition: gpu, nodes: {nodes}, gpus_per_node: 8, gpu_type: h100, cpus_per_node: 128}}
  component_placement:
    actor,rollout: all
    agent: {{node_group: node, placement: "all:0-{nodes * 64 - 1}"}}
components:
  actor: {{command: ["true"]}}
  rollout: {{command: ["true"]}}
  agent: {{command: ["true"]}}
"""


SPECS = {"uniform": uniform_spec_yaml, "heterogeneous": big_spec_yaml}
HPCPLACE = [sys.executable, "-m", "hpcplace.cli"]


def run_measured(argv: list[str], stdout: int | None = None) -> tuple[float, float, float]:
    """Run a command; (wall s, CPU s = user + system, peak RSS MiB) of that process (wait4)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=stdout if stdout is not None else subprocess.DEVNULL)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{argv} failed with {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def count_records(plan_json: Path) -> int:
    """Process records in a plan.json (one `{"rank":` per process line), read in 64 MiB blocks."""
    count = 0
    with open(plan_json, "rb") as f:
        tail = b""
        while block := f.read(1 << 26):
            data = tail + block
            count += data.count(b'{"rank":')
            tail = data[-8:] if not data.endswith(b'{"rank":') else b""
    return count


def cli_table(command: str, sizes: list[int], repeat: int) -> None:
    """`hpcplace plan --json CONFIG > plan.json` or `hpcplace render CONFIG -o DIR`, fresh processes."""
    print(f"| spec | nodes | processes | `hpcplace {command}` wall (median of {repeat}) | CPU | peak RSS | plan.json |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for nodes in sizes:
        for kind, make in SPECS.items():
            with tempfile.TemporaryDirectory(prefix="hpcplace-bench-") as tmp:
                config = Path(tmp) / "spec.yaml"
                config.write_text(make(nodes))
                out = Path(tmp) / "plan.json"
                runs = []
                for i in range(repeat):
                    if command == "plan --json":
                        with open(out, "wb") as sink:
                            runs.append(run_measured([*HPCPLACE, "plan", "--json", str(config)], sink.fileno()))
                    else:
                        run_dir = Path(tmp) / f"run{i}"
                        runs.append(run_measured([*HPCPLACE, "render", str(config), "-o", str(run_dir)]))
                        out = run_dir / "plan.json"
                processes = count_records(out)
                size = out.stat().st_size / 2**20
            walls, cpus, rss = zip(*runs)
            print(
                f"| {kind} | {nodes} | {processes} | {statistics.median(walls):.2f} s | "
                f"{statistics.median(cpus):.2f} s | {max(rss):.0f} MiB | {size:.0f} MiB |",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, action="append", help="CLI sizes (default 1024 and 16384)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cli-only", action="store_true")
    args = parser.parse_args()
    if not args.cli_only:
        in_process()
        print()
    cli_table("plan --json", args.nodes or [1024, 16384], args.repeat)


def in_process() -> None:
    print("| nodes | GPUs | processes | plan time (median of 5) | peak memory (tracemalloc) |")
    print("|---:|---:|---:|---:|---:|")
    for nodes in (128, 256, 512, 1024):
        text = big_spec_yaml(nodes)
        spec = load_spec_text(text)
        times = []
        for _ in range(5):
            gc.collect()
            t0 = time.perf_counter()
            plan = plan_from_spec(spec)
            times.append(time.perf_counter() - t0)
        gc.collect()
        tracemalloc.start()
        plan = plan_from_spec(spec)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        gpus = plan.cluster.num_gpus
        print(
            f"| {nodes} | {gpus} | {plan.num_processes} | {statistics.median(times):.3f} s | {peak / 2**20:.0f} MiB |"
        )


def load_spec_text(text: str):  # type: ignore[no-untyped-def]
    from hpcplace.config.spec import parse_native

    return parse_native(load_yaml_text(text, "<bench>"))


if __name__ == "__main__":
    main()
