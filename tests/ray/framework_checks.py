"""Pure comparisons of the framework drivers' reports (tests/ray/drivers) with hpcplace's plan.json.
Each returns a list of mismatches (empty = agreement), so a failing test names every difference."""

from __future__ import annotations

from typing import Any

# Placement fields RLinf's `Placement` and plan.json share, compared as they are.
EXACT_FIELDS = (
    "rank",
    "cluster_node_rank",
    "placement_node_rank",
    "local_rank",
    "local_world_size",
    "visible_accelerators",
    "local_hardware_ranks",
)


def group_node_ranks(group: dict[str, Any]) -> list[int]:
    """A plan.json group's cluster node ranks: listed once any group's are not one block."""
    return group.get("node_ranks") or list(
        range(group["first_node_rank"], group["first_node_rank"] + group["num_nodes"])
    )


def node_table(plan: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """cluster node rank -> its group label, het group, index in the group and planned GPU count."""
    table = {}
    for group in plan["node_groups"]:
        for j, rank in enumerate(group_node_ranks(group)):
            table[rank] = {
                "label": group["label"],
                "het_group": group["het_group"],
                "index": j,
                "gpus": group["gpus_per_node"][j],
            }
    return dict(sorted(table.items()))


def rlinf_mismatches(
    report: dict[str, Any], plan: dict[str, Any], hosts: dict[tuple[int, int], str] | None = None
) -> list[str]:
    """RLinf's run-time view (its Cluster, node groups, ComponentPlacement, launched workers)
    against the plan. `hosts` ((het group, index) -> host) also checks where each node and
    worker really ran."""
    bad: list[str] = []
    if report.get("error"):
        return [f"driver failed at stage after {report['stages'][-1:]}: {report['error']}"]
    table = node_table(plan)
    if report["num_nodes"] != len(table) or report["ray_nodes"] != len(table):
        bad.append(f"nodes: RLinf {report['num_nodes']}, Ray {report['ray_nodes']}, plan {len(table)}")
    ray_hosts = report.get("ray_node_hosts", {})
    nodes = {n["node_rank"]: n for n in report["nodes"]}
    for rank, want in table.items():
        node = nodes.get(rank)
        if node is None:
            bad.append(f"node rank {rank}: missing in RLinf's cluster")
            continue
        # Nodes outside every declared group (hpcplace's implicit `default*` groups) carry no RLinf label.
        labels = [want["label"]] if want["label"] in report["node_groups"] else []
        got = (node["env_node_rank"], node["node_labels"], node["num_accelerators"], node["accelerator_type"])
        expect = (str(rank), labels, want["gpus"], "NV_GPU" if want["gpus"] else "NO_ACCEL")
        if got != expect:
            bad.append(f"node rank {rank}: RLinf (RLINF_NODE_RANK, labels, accelerators, type) {got} != plan {expect}")
        if hosts and ray_hosts.get(node["ray_id"]) != hosts[(want["het_group"], want["index"])]:
            bad.append(
                f"node rank {rank}: Ray node on {ray_hosts.get(node['ray_id'])}, "
                f"plan host {hosts[(want['het_group'], want['index'])]}"
            )
    for group in plan["node_groups"]:
        got_group = report["node_groups"].get(group["label"])
        if got_group is None:  # hpcplace's implicit groups of undeclared nodes are not RLinf groups
            if not group["label"].startswith("default"):
                bad.append(f"node group {group['label']}: not in RLinf's cluster")
            continue
        ranks = group_node_ranks(group)
        if got_group["node_ranks"] != ranks:
            bad.append(f"node group {group['label']}: RLinf {got_group}, plan node ranks {ranks}")
    for comp in plan["components"]:
        got = report["placements"].get(comp["name"])
        if got is None or len(got) != len(comp["processes"]):
            bad.append(
                f"{comp['name']}: RLinf has {None if got is None else len(got)} placements, "
                f"plan {len(comp['processes'])}"
            )
            continue
        for proc, place in zip(comp["processes"], got):
            where = f"{comp['name']} rank {proc['rank']}"
            for field in EXACT_FIELDS:
                if proc[field] != place[field]:
                    bad.append(f"{where}: {field} RLinf {place[field]!r} != plan {proc[field]!r}")
            # RLinf types a node placement's local_accelerator_rank as the str of a device id.
            if int(place["local_accelerator_rank"]) != proc["local_accelerator_rank"]:
                bad.append(
                    f"{where}: local_accelerator_rank RLinf {place['local_accelerator_rank']!r} "
                    f"!= plan {proc['local_accelerator_rank']!r}"
                )
            gpu_node = table[proc["cluster_node_rank"]]["gpus"] > 0
            if place["accelerator_type"] != ("NV_GPU" if gpu_node else "NO_ACCEL"):
                bad.append(
                    f"{where}: RLinf accelerator type {place['accelerator_type']} on a node with "
                    f"{table[proc['cluster_node_rank']]['gpus']} planned GPUs"
                )
        for worker in report.get("workers", {}).get(comp["name"], []):
            proc = comp["processes"][worker["rank"]]
            node = nodes.get(proc["cluster_node_rank"], {})
            where = f"{comp['name']} worker {worker['rank']}"
            if worker["ray_node_id"] != node.get("ray_id") or worker["node_rank_env"] != str(proc["cluster_node_rank"]):
                bad.append(
                    f"{where}: ran on Ray node with RLINF_NODE_RANK={worker['node_rank_env']}, "
                    f"plan node rank {proc['cluster_node_rank']}"
                )
            if (worker["cuda_visible_devices"] or "") != ",".join(proc["visible_accelerators"]):
                bad.append(
                    f"{where}: CUDA_VISIBLE_DEVICES {worker['cuda_visible_devices']!r}, plan "
                    f"{proc['visible_accelerators']}"
                )
            want_host = table[proc["cluster_node_rank"]]
            if hosts and worker["host"] != hosts[(want_host["het_group"], want_host["index"])]:
                bad.append(f"{where}: on host {worker['host']}")
    if report.get("workers") is not None and set(report["workers"]) != {c["name"] for c in plan["components"]}:
        bad.append(f"worker groups {sorted(report['workers'])} != components")
    return bad
