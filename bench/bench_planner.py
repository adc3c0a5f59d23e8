"""Planner benchmark: a 1,024-node x 8-GPU cluster, five components, 65,536 processes.

    python bench/bench_planner.py            # 128/256/512/1024 nodes, time and peak memory

All nodes have 8 GPUs. Components: actor (TP=4) + rollout (TP=2) collocated on the A800 half
(model-parallel, strided rollout); a disaggregated inference-side reward model on the H100 quarter (2
processes per GPU; RLinf reserves the name `inference` for non-collocated layouts); env on the robot
quarter's arms (16 per node, 2 processes per arm); 46 `agent` processes per node on every node through the
reserved `node` label.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hpcplace.planner import plan_from_spec  # noqa: E402
from hpcplace.yaml_source import load_yaml_text  # noqa: E402


def big_spec_yaml(nodes: int) -> str:
    """The benchmark experiment for `nodes` 8-GPU nodes (a multiple of 4)."""
    a800, h100, robot = nodes // 2, nodes // 4, nodes // 4
    return f"""
name: bench-{nodes}
cluster:
  node_groups:
    - {{label: a800, partition: a800, nodes: {a800}, gpus_per_node: 8, gpu_type: a800, cpus_per_node: 64, mem_per_node: 1T}}
    - {{label: h100, partition: h100, nodes: {h100}, gpus_per_node: 8, gpu_type: h100, cpus_per_node: 64, mem_per_node: 1T}}
    - {{label: robot, partition: robot, nodes: {robot}, gpus_per_node: 8, gpu_type: l40, cpus_per_node: 64,
        hardware: {{type: arm, count: 16}}}}
  component_placement:
    actor,rollout: {{node_group: a800, placement: all}}
    reward: {{node_group: h100, placement: "all:0-{h100 * 8 * 2 - 1}"}}
    env: {{node_group: robot, placement: "all:0-{robot * 16 * 2 - 1}"}}
    agent: {{node_group: node, placement: "all:0-{nodes * 46 - 1}"}}
components:
  actor: {{tensor_parallel_size: 4, offload: true}}
  rollout: {{tensor_parallel_size: 2, offload: true}}
"""


def main() -> None:
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
        print(f"| {nodes} | {gpus} | {plan.num_processes} | {statistics.median(times):.3f} s | "
              f"{peak / 2**20:.0f} MiB |")


def load_spec_text(text: str):  # type: ignore[no-untyped-def]
    from hpcplace.spec import parse_native

    return parse_native(load_yaml_text(text, "<bench>"))


if __name__ == "__main__":
    main()
