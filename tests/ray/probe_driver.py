"""A Ray driver for the tests: one task pinned to each Ray node (node affinity + its group resource),
each reporting host, RLINF_NODE_RANK, the node's GPU count and a 1-GPU task's CUDA_VISIBLE_DEVICES.
Writes JSON to argv[1]; `exit N` as argv[2] exits N afterwards; `hold S` sleeps S seconds first;
`warn S` waits up to S s for a SIGTERM (Slurm's time-limit warning), probes every node again after it
(argv[1] + ".after": the cluster must still be up) and then holds until a second SIGTERM (the limit)."""

import json
import os
import signal
import socket
import sys
import time

out_path = sys.argv[1]
mode = sys.argv[2] if len(sys.argv) > 2 else ""
terms: list[float] = []
started = time.time()
if mode == "warn":  # a warning during start-up stays pending until the handler below is in place
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

import ray  # noqa: E402
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: E402

ray.init(logging_level="ERROR")
if mode == "warn":  # after ray.init: a Ray driver's own SIGTERM handler (installed by init) exits at once
    signal.signal(signal.SIGTERM, lambda signum, frame: terms.append(time.time()))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


@ray.remote
def probe() -> dict:
    return {
        "host": socket.gethostname(),
        "rlinf_node_rank": os.environ.get("RLINF_NODE_RANK"),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "gpu_ids": ray.get_gpu_ids(),
        "launch_var": os.environ.get("HP_LAUNCH_VAR"),
        "group_var": os.environ.get("HP_GROUP_VAR"),
        "node_var": os.environ.get("HP_NODE_VAR"),
        "python": sys.executable,
    }


def probe_nodes() -> dict:
    """One task pinned to each alive Ray node; its report per node rank."""
    refs = {}
    for node in ray.nodes():
        if not node["Alive"]:
            continue
        labels = node.get("Labels") or {}
        gpus = int(node["Resources"].get("GPU", 0))
        strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        ref = probe.options(
            scheduling_strategy=strategy,
            num_gpus=1 if gpus else 0,
            num_cpus=0.01,
            resources={f"ng_{labels.get('hpcplace.group')}": 0.01},
        ).remote()
        refs[labels.get("hpcplace.node_rank")] = (ref, gpus, labels, node["Resources"].get("CPU"))
    return {
        rank: {**ray.get(ref, timeout=120), "num_gpus": gpus, "labels": labels, "num_cpus": cpus}
        for rank, (ref, gpus, labels, cpus) in refs.items()
    }


def write(path: str, data: dict) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
    os.replace(path + ".tmp", path)


report = {
    "env": {
        k: os.environ.get(k)
        for k in (
            "RAY_ADDRESS",
            "RANK",
            "WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
            "HPCPLACE_PLAN",
            "HPCPLACE_RUN_DIR",
            "HP_LAUNCH_VAR",
            "CUDA_VISIBLE_DEVICES",
        )
    },
    "host": socket.gethostname(),
    "started": started,
    "nodes": probe_nodes(),
}
write(out_path, report)
if mode == "warn":
    deadline = time.time() + float(sys.argv[3])
    while not terms and time.time() < deadline:
        time.sleep(0.1)
    after = {"terms": list(terms), "nodes": probe_nodes() if terms else {}, "probed": time.time()}
    write(out_path + ".after", after)
    while len(terms) < 2:  # the limit's own SIGTERM
        time.sleep(0.1)
    write(out_path + ".after", {**after, "terms": list(terms)})
if mode == "hold":
    time.sleep(float(sys.argv[3]))
if mode == "exit":
    sys.exit(int(sys.argv[3]))
