"""The Ray driver of the container tests: where it runs, and where a Ray task on each node runs.

    python container_ray_driver.py OUT.json

Writes {"driver": {...}, "nodes": {host: {...}}}: each entry the host, /etc/os-release's PRETTY_NAME and
APPTAINER_CONTAINER (the image Apptainer says the process runs in)."""

import json
import os
import socket
import sys


def where() -> dict:
    with open("/etc/os-release", encoding="utf-8") as f:
        fields = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
    return {
        "host": socket.gethostname(),
        "os_release": fields.get("PRETTY_NAME", "").strip('"'),
        "container": os.environ.get("APPTAINER_CONTAINER"),
    }


import ray  # noqa: E402
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: E402

ray.init(logging_level="ERROR")
probe = ray.remote(num_cpus=0)(where)
nodes = [n for n in ray.nodes() if n["Alive"]]
seen = ray.get(
    [probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote() for n in nodes]
)
with open(sys.argv[1], "w", encoding="utf-8") as f:
    json.dump({"driver": where(), "nodes": {s["host"]: s for s in seen}}, f)
print(f"{len(seen)} nodes", flush=True)
