"""A stand-in for NeMo-RL's examples/run_grpo.py under hpcplace's Ray launch mode, running NeMo-RL's own code
from the checkout in NEMO_RL_SRC (the test passes HPCPLACE_NEMO_RL_SRC on) as far as placement: `load_config` and `parse_hydra_overrides` read
the command as run_grpo.py does, `init_ray()` attaches to the cluster hpcplace started, and the train and
inference `RayVirtualCluster`s of grpo.py's non-colocated multi-node case make their placement groups (the
cluster sizes as grpo.setup computes them for that case; the inference cluster's as
VllmGeneration.init_cluster_placement_groups does: PACK, one unified group when TP*PP is wider than a node).
Then it waits a few seconds, as NeMo-RL loads its models (hpcplace's watcher acts then), and schedules one
task per bundle as RayWorkerGroup schedules its workers (worker k of a unified group on the k-th of NeMo-RL's
own topology-sorted bundles, `_sorted_bundle_indices`), reporting each worker's host, node rank and GPU to
<run dir>/nemo-rl-report.json.

argv (as run_grpo.py's): --config FILE [OVERRIDES...]
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time


def main() -> int:
    sys.path.insert(0, os.environ["NEMO_RL_SRC"])
    import argparse

    import ray
    from nemo_rl.distributed.virtual_cluster import RayVirtualCluster, init_ray
    from nemo_rl.utils.config import load_config, parse_hydra_overrides, register_omegaconf_resolvers
    from omegaconf import OmegaConf
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    register_omegaconf_resolvers()
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", type=str, default=None)
    args, overrides = parser.parse_known_args()
    config = load_config(args.config)
    if overrides:
        config = parse_hydra_overrides(config, overrides)
    cfg = OmegaConf.to_container(config, resolve=True)
    assert isinstance(cfg, dict)
    init_ray()

    cluster, generation = cfg["cluster"], cfg["policy"]["generation"]
    assert not generation["colocated"]["enabled"] and cluster["num_nodes"] > 1  # the case this stand-in makes
    resources = generation["colocated"]["resources"]
    train_nodes = cluster["num_nodes"] - resources["num_nodes"]
    train = RayVirtualCluster(
        name="grpo_train_cluster",
        bundle_ct_per_node_list=[cluster["gpus_per_node"]] * train_nodes,
        use_gpus=True,
        num_gpus_per_node=cluster["gpus_per_node"],
        max_colocated_worker_groups=1,
    )
    inference = RayVirtualCluster(
        name="grpo_inference_cluster",
        bundle_ct_per_node_list=[resources["gpus_per_node"]] * resources["num_nodes"],
        use_gpus=True,
        num_gpus_per_node=resources["gpus_per_node"],
        max_colocated_worker_groups=1,
    )
    train.get_placement_groups()
    vllm = generation["vllm_cfg"]
    wide = vllm["tensor_parallel_size"] * vllm["pipeline_parallel_size"] > inference.num_gpus_per_node
    inference._init_placement_groups(strategy="PACK", use_unified_pg=wide)  # VllmGeneration's
    time.sleep(8)  # NeMo-RL would load its models now

    @ray.remote
    def where() -> dict:
        return {
            "host": socket.gethostname(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "gpu": [int(g) for g in ray.get_gpu_ids()],
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        }

    ranks = {n["NodeID"]: int((n.get("Labels") or {}).get("hpcplace.node_rank", -1)) for n in ray.nodes()}
    report: dict[str, list[dict]] = {}
    for name, vc in (("policy", train), ("generation", inference)):
        groups = vc.get_placement_groups()
        order = getattr(vc, "_sorted_bundle_indices", None) if len(groups) == 1 else None
        slots = [(groups[0], b) for b in order] if order else [(pg, b) for pg in groups for b in range(pg.bundle_count)]
        refs = [
            where.options(
                num_cpus=0,
                num_gpus=1,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=pg, placement_group_bundle_index=b
                ),
            ).remote()
            for pg, b in slots
        ]
        report[name] = [
            dict(r, node_rank=ranks.get(r["node_id"], -1), group=k // vc.num_gpus_per_node, unified=bool(order))
            for k, r in enumerate(ray.get(refs))
        ]
    with open(os.path.join(os.environ["HPCPLACE_RUN_DIR"], "nemo-rl-report.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
