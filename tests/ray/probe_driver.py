"""A Ray driver for the tests: one task pinned to each Ray node (node affinity + its group resource),
each reporting host, RLINF_NODE_RANK, the node's GPU count and a 1-GPU task's CUDA_VISIBLE_DEVICES.
Writes JSON to argv[1]; `exit N` as argv[2] exits N afterwards; `hold S` sleeps S seconds first."""

import json
import os
import socket
import sys
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

out_path = sys.argv[1]
mode = sys.argv[2] if len(sys.argv) > 2 else ""
ray.init(logging_level="ERROR")


@ray.remote
def probe() -> dict:
    return {"host": socket.gethostname(), "rlinf_node_rank": os.environ.get("RLINF_NODE_RANK"),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "gpu_ids": ray.get_gpu_ids(),
            "launch_var": os.environ.get("HP_LAUNCH_VAR"), "group_var": os.environ.get("HP_GROUP_VAR"),
            "node_var": os.environ.get("HP_NODE_VAR"), "python": sys.executable}


refs = {}
for node in ray.nodes():
    if not node["Alive"]:
        continue
    labels = node.get("Labels") or {}
    gpus = int(node["Resources"].get("GPU", 0))
    strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
    ref = probe.options(scheduling_strategy=strategy, num_gpus=1 if gpus else 0, num_cpus=0.01,
                        resources={f"ng_{labels.get('hpcplace.group')}": 0.01}).remote()
    refs[labels.get("hpcplace.node_rank")] = (ref, gpus, labels, node["Resources"].get("CPU"))
report = {"env": {k: os.environ.get(k) for k in ("RAY_ADDRESS", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                                   "HPCPLACE_PLAN", "HPCPLACE_RUN_DIR", "HP_LAUNCH_VAR",
                                                   "CUDA_VISIBLE_DEVICES")},
          "host": socket.gethostname(), "nodes": {}}
for rank, (ref, gpus, labels, cpus) in refs.items():
    report["nodes"][rank] = {**ray.get(ref, timeout=120), "num_gpus": gpus, "labels": labels, "num_cpus": cpus}
with open(out_path + ".tmp", "w") as f:
    json.dump(report, f)
os.replace(out_path + ".tmp", out_path)
if mode == "hold":
    time.sleep(float(sys.argv[3]))
if mode == "exit":
    sys.exit(int(sys.argv[3]))
