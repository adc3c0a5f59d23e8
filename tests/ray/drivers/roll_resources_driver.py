"""Where ROLL would put each worker's GPUs on the Ray cluster hpcplace started (a plan with a worker wider
than a node). ROLL is not installable here (see roll_attach_driver.py), so this driver makes the same Ray
calls its placement code makes, as read in alibaba/ROLL (not copied):

- ResourceManager: the Ray nodes with at least num_gpus_per_node GPUs, sorted by CPU count; one placement
  group per node with one bundle {GPU: num_gpus_per_node, CPU: max(cpus / 2, 1)}; a task in each group
  reads NODE_RANK (ROLL's get_node_rank; when more than one node says 0, the group order is used instead)
  and the CUDA_VISIBLE_DEVICES Ray gives it; GPU g of a device_mapping lives in the group of node g // n.
- Cluster._create_workers: worker w (GPUs device_mapping[w*k:(w+1)*k]) is an actor in the group of its
  first GPU's node, with CUDA_VISIBLE_DEVICES = its GPUs on that node, sorted.
- vLLM's Ray executor (ROLL's): one Ray worker per GPU, in that GPU's node group, CUDA_VISIBLE_DEVICES = it.

argv: OUT.json GPUS_PER_NODE GPUS_PER_WORKER GPU_ID... Report: per node group (NODE_RANK, host, visible
GPUs), and per worker the actor's host and CUDA_VISIBLE_DEVICES and each GPU's host.
"""

from __future__ import annotations

import json
import os
import socket
import sys


def main() -> int:
    out, gpn, per, *mapping = sys.argv[1:]
    gpn_i, per_i, ids = int(gpn), int(per), [int(g) for g in mapping]
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.init(address=None, namespace="roll", ignore_reinit_error=True, log_to_driver=False)

    @ray.remote
    def probe() -> dict:
        return {
            "node_rank": int(os.environ.get("NODE_RANK", "0")),
            "host": socket.gethostname(),
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        }

    nodes = sorted(
        (n for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU", 0) >= gpn_i),
        key=lambda n: n["Resources"]["CPU"],
    )
    need = (max(ids) + gpn_i) // gpn_i
    groups = [placement_group([{"GPU": gpn_i, "CPU": max(int(n["Resources"]["CPU"]) / 2, 1)}]) for n in nodes[:need]]
    ray.get([g.ready() for g in groups], timeout=120)
    probes = ray.get(
        [
            probe.options(num_gpus=gpn_i, scheduling_strategy=PlacementGroupSchedulingStrategy(g)).remote()
            for g in groups
        ]
    )
    ranks = [p["node_rank"] for p in probes]
    if ranks.count(0) > 1:
        ranks = list(range(len(groups)))
    node2pg = dict(zip(ranks, groups))

    def on(g: int, visible: str) -> str:
        strategy = PlacementGroupSchedulingStrategy(node2pg[g // gpn_i])
        task = probe.options(
            num_gpus=0.01,
            scheduling_strategy=strategy,
            runtime_env={
                "env_vars": {"CUDA_VISIBLE_DEVICES": visible, "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}
            },
        )
        return task.remote()

    workers = []
    for w in range(len(ids) // per_i):
        gpus = ids[w * per_i : (w + 1) * per_i]
        actor_gpus = sorted(g % gpn_i for g in gpus if g // gpn_i == gpus[0] // gpn_i)
        actor = ray.get(on(gpus[0], ",".join(map(str, actor_gpus))))
        per_gpu = ray.get([on(g, str(g % gpn_i)) for g in gpus])
        workers.append(
            {
                "actor_host": actor["host"],
                "actor_visible": actor["visible"],
                "gpu_hosts": {str(g): p["host"] for g, p in zip(gpus, per_gpu)},
                "gpu_visible": {str(g): p["visible"] for g, p in zip(gpus, per_gpu)},
            }
        )
    report = {"node_groups": [{"node_rank": r, **p} for r, p in zip(ranks, probes)], "workers": workers}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    print(f"roll-resources-driver: {len(workers)} workers on {len(groups)} node groups -> {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
