"""NeMo-RL's pools on their node groups, checked while its driver runs (the Ray launch mode's driver step
starts this beside a nemo_rl driver whose plan has several node groups).

NeMo-RL's `RayVirtualCluster` makes one PACK placement group per node (`<cluster>-node<i>`, or one
`<cluster>-unified`) of `{CPU, GPU: 1}` bundles: nothing in them names a node group, so Ray may put the
training cluster on the generation partition's nodes (same GPU count). This process polls Ray's placement
group table; when a NeMo-RL group lands on a node of another node group than the plan gives its pool, it
says which (group, node rank, node group, the planned one), records it in the run directory and stops the
driver (SIGTERM, then SIGKILL). It ends when the driver ends or every planned pool's groups are placed as
planned."""

from __future__ import annotations

import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

# RayVirtualCluster names in NeMo-RL's setup() functions (7ea279a) -> the plan's component on that cluster
# (a colocated cluster's other worker groups share its GPUs: their placement is the policy's)
CLUSTERS = {
    "grpo_policy_cluster": "policy",
    "grpo_train_cluster": "policy",
    "ppo_policy_cluster": "policy",
    "ppo_train_cluster": "policy",
    "distillation_cluster": "policy",
    "distillation_train_cluster": "policy",
    "sc_policy_cluster": "policy",
    "sc_train_cluster": "policy",
    "xtoken_off_policy_distillation_cluster": "policy",
    "sft_cluster": "policy",
    "dpo_cluster": "policy",
    "rm_cluster": "policy",
    "grpo_inference_cluster": "generation",
    "ppo_inference_cluster": "generation",
    "distillation_inference_cluster": "generation",
    "sc_inference_cluster": "generation",
    "eval_cluster": "generation",
    "grpo_reward_model_cluster": "reward_model",
}
POLL_S = 1.0


def planned_groups(header: Mapping[str, Any]) -> dict[str, str]:
    """plan.json: component -> the node group it is planned on (formats/nemo_rl.py puts each on one)."""
    out = {}
    for comp in header.get("components") or ():
        groups = comp.get("node_groups") or []
        if comp.get("name") in CLUSTERS.values() and len(groups) == 1:
            out[str(comp["name"])] = str(groups[0])
    return out


def nodes_by_id(nodes: Sequence[Mapping[str, Any]], labels: Mapping[int, str]) -> dict[str, tuple[int, str]]:
    """Ray node id -> (cluster node rank, node group label), from the raylets' hpcplace.node_rank label."""
    out = {}
    for n in nodes:
        rank = (n.get("Labels") or {}).get("hpcplace.node_rank")
        if rank is not None and str(rank).isdigit() and int(rank) in labels:
            out[str(n.get("NodeID"))] = (int(rank), labels[int(rank)])
    return out


def cluster_of(name: str) -> str | None:
    """The plan's component for a NeMo-RL placement group name (`grpo_train_cluster-node0`), or None."""
    cluster, _, tail = name.rpartition("-")
    if cluster in CLUSTERS and (tail == "unified" or (tail.startswith("node") and tail[4:].isdigit())):
        return CLUSTERS[cluster]
    return None


def placement_problem(
    table: Mapping[str, Mapping[str, Any]], nodes: Mapping[str, tuple[int, str]], planned: Mapping[str, str]
) -> str | None:
    """The first NeMo-RL placement group with a bundle on another node group than its pool's, or None."""
    for pg in table.values():
        name = str(pg.get("name") or "")
        comp = cluster_of(name)
        want = planned.get(comp) if comp is not None else None
        if want is None:
            continue
        for bundle, node_id in sorted((pg.get("bundles_to_node_id") or {}).items()):
            rank, label = nodes.get(str(node_id), (None, None))
            if label is not None and label.lower() != want.lower():
                return (
                    f"NeMo-RL's placement group {name} ({comp}) has bundle {bundle} on node rank {rank}, in node "
                    f"group {label}; the plan puts {comp} on node group {want}: Ray chose the node (NeMo-RL's "
                    "bundles ask only for CPU and GPU), so its workers would not run where planned"
                )
    return None


def placed_bundles(table: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Per component, how many bundles of NeMo-RL's groups Ray has placed."""
    out: dict[str, int] = {}
    for pg in table.values():
        comp = cluster_of(str(pg.get("name") or ""))
        if comp is not None:
            out[comp] = out.get(comp, 0) + len(pg.get("bundles_to_node_id") or {})
    return out


def watch(address: str, plan_path: str, run_dir: str, driver_pid: int) -> int:
    """Poll until the driver exits or every planned pool is placed; stop the driver on a problem."""
    import json
    import logging

    import ray  # the job's Ray

    from hpcplace.runtime.ray_node import group_node_ranks, pid_alive, record_error, say, stop_driver

    with open(plan_path, encoding="utf-8") as fh:
        header = json.load(fh)
    labels = {r: str(g["label"]) for g in header["node_groups"] for r in group_node_ranks(g)}
    planned = planned_groups(header)
    sizes = {str(c["name"]): int(c["world_size"]) for c in header.get("components") or () if c.get("name") in planned}
    ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    try:
        while pid_alive(driver_pid):
            table = ray.util.placement_group_table()
            nodes = nodes_by_id(ray.nodes(), labels)  # type: ignore[no-untyped-call]  # unannotated in Ray
            problem = placement_problem(table, nodes, planned)
            if problem is not None:
                say(f"error: {problem}")
                record_error(run_dir, f"NeMo-RL placement: {problem}")
                stop_driver(driver_pid)
                return 1
            placed = placed_bundles(table)
            if all(placed.get(c, 0) >= sizes[c] for c in ("policy", "generation", "reward_model") if c in sizes):
                say(
                    "NeMo-RL's placement groups are on their planned node groups: "
                    + ", ".join(f"{c} on {planned[c]}" for c in sorted(planned))
                )
                return 0
            time.sleep(POLL_S)
    finally:
        ray.shutdown()
    return 0


def main(argv: Sequence[str]) -> int:
    """`python -m hpcplace.runtime.nemo_rl_watch ADDRESS PLAN RUN_DIR DRIVER_PID`."""
    if len(argv) != 4 or not argv[3].isdigit():
        print("usage: nemo_rl_watch ADDRESS PLAN RUN_DIR DRIVER_PID", file=sys.stderr)
        return 2
    return watch(argv[0], argv[1], argv[2], int(argv[3]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
