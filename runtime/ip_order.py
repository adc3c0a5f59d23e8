"""A node group's node order at job start: the framework's own IP order (stdlib only).

verl numbers a pool's ranks over its nodes sorted by IP address as a string (10.0.0.10 before 10.0.0.9), slime
its GPUs over its nodes sorted by IP as numbers (`sort_placement_group_by_node_ip`, `sort_key`). Steering decides
which nodes hold a pool; the framework's sort decides which of them holds rank 0. The plan numbers a group's
nodes 0, 1, ...: which host is node j is only fixed when the job starts, so for these frameworks it is the j-th
host of the group in the framework's IP order, not in Slurm's host-name order. Then the framework's ranks are the
plan's, whatever the site's addresses.

Each raylet of such a group (runtime/ray_node.py) computes the address its Ray will have (the interface that
routes to the job's first node, or its `network:` address) and starts Ray with it (`--node-ip-address`), writes
it to <run dir>/ray/order/g<G>-<j>.json, waits for the group's other nodes (bounded by launch.join_timeout) and
takes its position in the sorted list as its node index. Each writes the group's hosts in that order to
<run dir>/logs/ray-order-g<G>.txt (`G J HOST` lines, as logs/nodes.txt): `status`, `logs`, `exec` and the
driver step read it over logs/nodes.txt (overlay).

Only where the group's nodes are interchangeable (the same GPUs, no per-node env or interpreter); across node
groups the order cannot be chosen (slime with actor and rollout on two groups): the driver step's check stays.
"""

from __future__ import annotations

import json
import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

ORDER_DIR = os.path.join("ray", "order")
OVERLAY = "ray-order-g{group}.txt"  # in the logs folder


def string_key(address: str) -> tuple[object, ...]:
    return (address,)


def numeric_key(address: str) -> tuple[object, ...]:
    """slime's sort_key: the address's parts as numbers (a non-numeric address by its characters' codes)."""
    parts = address.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else tuple(ord(c) for c in address)


# The frameworks that number ranks over nodes sorted by IP address: how they sort, and over which nodes.
# verl (sort_placement_group_by_node_ip) sorts each pool's per-node groups by the address as a string, and
# each node group is one verl pool (formats/verl.py); slime (placement_group.sort_key) sorts its one group's GPUs
# by the address as numbers, over every GPU node.
IP_ORDER: dict[str, tuple[Callable[[str], tuple[object, ...]], str]] = {
    "verl": (string_key, "by_group"),
    "slime": (numeric_key, "gpu_nodes"),
}


def interchangeable(group: Mapping[str, Any]) -> bool:
    """Every node of the plan.json node group has the same facts, so any host may be any of its nodes."""
    gpus = group.get("gpus_per_node") or []
    per_node = [group.get("node_env") or [], group.get("python_interpreter") or []]
    return (
        int(group.get("num_nodes") or 0) > 1
        and len(set(gpus)) <= 1
        and all(len(set(map(str, v))) <= 1 for v in per_node)
    )


def ordered_by_ip(header: Mapping[str, Any], het_group: int) -> Callable[[str], tuple[object, ...]] | None:
    """The sort key that numbers this group's nodes at job start, or None (Slurm's order stands): a verl or
    slime plan whose requests are steered, for a group of interchangeable nodes."""
    framework = str((header.get("source") or {}).get("format") or "")
    return group_key(framework, bool(header.get("steer")), header["node_groups"][het_group])


def group_key(framework: str, steered: bool, group: Mapping[str, Any]) -> Callable[[str], tuple[object, ...]] | None:
    """ordered_by_ip from the plan's facts (the planner's side has no plan.json header to read)."""
    if framework not in IP_ORDER or not steered or not interchangeable(group):
        return None
    return IP_ORDER[framework][0]


def in_ip_order(addresses: Sequence[str], key: Callable[[str], tuple[object, ...]]) -> list[int]:
    """The group's node indices (Slurm's order) sorted by `key` of their addresses (ties: Slurm's order)."""
    return sorted(range(len(addresses)), key=lambda k: (key(addresses[k]), k))


def route_address(target: str) -> str | None:
    """This host's address on the route to `target` (a host name): the interface Ray's own node-address
    choice takes on a cluster network; None when `target` does not resolve or no route leads there."""
    import socket

    try:
        found = socket.getaddrinfo(target, None, socket.AF_INET, socket.SOCK_DGRAM)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((found[0][4][0], 9))
            address = str(sock.getsockname()[0])
    except (OSError, IndexError):
        return None
    return None if address.startswith("127.") else address


def own_address(hosts: Sequence[str], route: Callable[[str], str | None] = route_address) -> str | None:
    """This host's address on the cluster network: the route to the first of the job's `hosts` that gives one
    (from the first node itself, its own name may resolve to a loopback address: then the next node's)."""
    return next((a for a in map(route, dict.fromkeys(hosts)) if a is not None), None)


def exchange(
    run_dir: str, job_id: str, het_group: int, index: int, count: int, mine: Mapping[str, str], timeout: float
) -> list[dict[str, str]] | None:
    """Publish this node's record (address, host) and return every node's of the group, in Slurm's order;
    None when they are not all there within `timeout` (the node then keeps Slurm's order)."""
    folder = os.path.join(run_dir, ORDER_DIR)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"g{het_group}-{index}.json")
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"job_id": job_id, **mine}, f)
    os.replace(tmp, path)
    deadline = time.monotonic() + timeout
    while True:
        records: list[dict[str, str]] = []
        for k in range(count):
            try:
                with open(os.path.join(folder, f"g{het_group}-{k}.json"), encoding="utf-8") as f:
                    data = json.load(f)
            except (OSError, ValueError):
                break
            if not isinstance(data, dict) or data.get("job_id") != job_id:
                break
            records.append({str(a): str(b) for a, b in data.items()})
        if len(records) == count:
            return records
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def write_overlay(logs_dir: str, het_group: int, hosts: Sequence[str]) -> None:
    """logs/ray-order-g<G>.txt: the group's hosts in the plan's node order (`G J HOST`, as logs/nodes.txt)."""
    path = os.path.join(logs_dir, OVERLAY.format(group=het_group))
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(f"{het_group} {j} {host}\n" for j, host in enumerate(hosts))
    os.replace(tmp, path)


def read_node_lines(path: str) -> dict[tuple[int, int], str]:
    """A `G J HOST` file (logs/nodes.txt, logs/ray-order-g<G>.txt): (het group, node index) -> host; {} when
    it cannot be read."""
    out: dict[tuple[int, int], str] = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit():
                    out[(int(parts[0]), int(parts[1]))] = parts[2]
    except OSError:
        pass
    return out


def read_overlay(logs_dir: str) -> dict[tuple[int, int], str]:
    """Every logs/ray-order-g<G>.txt: (het group, node index) -> host ({} when no group was reordered)."""
    try:
        names = sorted(n for n in os.listdir(logs_dir) if n.startswith("ray-order-g") and n.endswith(".txt"))
    except OSError:
        return {}
    out: dict[tuple[int, int], str] = {}
    for name in names:
        out.update(read_node_lines(os.path.join(logs_dir, name)))
    return out


def slurm_index(logs_dir: str, het_group: int, index: int) -> int:
    """The node of het group `het_group` that srun's `--relative` names for the plan's node `index`: the same,
    unless the job numbered the group in its framework's IP order (then the host's place in logs/nodes.txt)."""
    host = read_overlay(logs_dir).get((het_group, index))
    if host is None:
        return index
    slurm = read_node_lines(os.path.join(logs_dir, "nodes.txt"))
    return next((j for (g, j), name in slurm.items() if g == het_group and name == host), index)
