"""OpenRLHF's roles on their node groups, checked while its driver runs (the Ray launch mode's driver step
starts this beside an openrlhf driver whose plan has several node groups, `slurm.pools`).

OpenRLHF's `train_ppo_ray` makes unnamed PACK placement groups of `{GPU: 1, CPU: 1}` bundles (and, with 1 GPU
per node, places 1-GPU actors with no group): nothing in them names a node group, so Ray may put a role on
another role's nodes. The groups have no name to tell them apart, but each role's Ray actors are of its own
class (openrlhf/trainer/ray/: PolicyModelActor, ReferenceModelActor, CriticModelActor, RewardModelActor,
RolloutRayActor in 0.9 to 0.11.2, with the names of earlier releases), and Ray's GCS actor table holds each
actor's class name, its node and the placement group it was scheduled in. This process polls that table and
the placement group table; when a role's actor, or any bundle of the placement group it sits in (a vLLM
engine's TP bundles hold vLLM's own workers), is on a node of another node group than the plan gives the role,
it says which (role, node rank and host, node group, the planned one), records it in the run directory and
stops the driver (SIGTERM, then SIGKILL). It ends when the driver ends or every planned role's actors are
placed as planned."""

from __future__ import annotations

import sys
import time
from typing import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any

# The Ray actor class of each OpenRLHF role (train_ppo_ray's RayActorGroup / create_vllm_engines), over releases:
# 0.9.0 to 0.11.2 (launcher.py, ppo_actor.py, ppo_critic.py, vllm_engine.py) and 0.7/0.8's *RayActor names.
ROLE_CLASSES = {
    "PolicyModelActor": "actor",
    "ActorModelRayActor": "actor",
    "ReferenceModelActor": "ref",
    "ReferenceModelRayActor": "ref",
    "CriticModelActor": "critic",
    "CriticModelRayActor": "critic",
    "RewardModelActor": "reward",
    "RewardModelRayActor": "reward",
    "RolloutRayActor": "vllm",
    "LLMRayActor": "vllm",
    "LLMRayActorAsync": "vllm",
}
ROLES = ("actor", "ref", "critic", "reward", "vllm")
POLL_S = 0.5


class ActorRow(NamedTuple):
    """One live Ray actor, as the GCS actor table has it (ids as hex; '' when not known yet)."""

    class_name: str
    node_id: str
    placement_group_id: str


class Node(NamedTuple):
    rank: int
    label: str
    host: str


def planned_roles(header: Mapping[str, Any]) -> dict[str, str]:
    """plan.json: role -> the node group it is planned on (formats/openrlhf.py puts each on one)."""
    out = {}
    for comp in header.get("components") or ():
        groups = comp.get("node_groups") or []
        if comp.get("name") in ROLES and len(groups) == 1:
            out[str(comp["name"])] = str(groups[0])
    return out


def expected_actors(header: Mapping[str, Any]) -> dict[str, int]:
    """plan.json: role -> how many Ray actors OpenRLHF makes for it (one per rank; a vLLM engine is one actor
    however many nodes it spans)."""
    out = {}
    for comp in header.get("components") or ():
        if comp.get("name") in ROLES:
            workers = (comp.get("workers") or {}).get("processes")  # engines spanning nodes: one process a node
            out[str(comp["name"])] = len(workers) if workers else int(comp["world_size"])
    return out


def nodes_by_id(nodes: Sequence[Mapping[str, Any]], labels: Mapping[int, str]) -> dict[str, Node]:
    """Ray node id -> its node rank, node group and host, from the raylets' hpcplace.node_rank label."""
    out = {}
    for n in nodes:
        rank = (n.get("Labels") or {}).get("hpcplace.node_rank")
        if rank is not None and str(rank).isdigit() and int(rank) in labels:
            host = str(n.get("NodeManagerHostname") or n.get("NodeManagerAddress") or "?")
            out[str(n.get("NodeID"))] = Node(int(rank), labels[int(rank)], host)
    return out


def _where(actor: ActorRow, table: Mapping[str, Mapping[str, Any]]) -> tuple[list[tuple[str, str]], bool] | None:
    """The (what, node id) places an actor of a role holds, and whether all of them are placed; None when
    Ray has not placed it yet. In a placement group: every bundle of the group (the role's ranks, or a vLLM
    engine's TP bundles); else the actor's own node."""
    if actor.placement_group_id:
        pg = table.get(actor.placement_group_id)
        if pg is None:
            return None
        bundles = pg.get("bundles") or {}
        placed = {int(b): str(n) for b, n in (pg.get("bundles_to_node_id") or {}).items() if n}
        where = [(f"bundle {b} of its placement group", n) for b, n in sorted(placed.items())]
        return where, bool(placed) and len(placed) >= len(bundles)
    if actor.node_id:
        return [("the actor", actor.node_id)], True
    return None


def placement_problem(
    actors: Iterable[ActorRow],
    table: Mapping[str, Mapping[str, Any]],
    nodes: Mapping[str, Node],
    planned: Mapping[str, str],
) -> str | None:
    """The first OpenRLHF role with an actor (or a bundle of its actor's placement group) on another node
    group than the plan's, or None."""
    for actor in actors:
        role = ROLE_CLASSES.get(actor.class_name)
        want = planned.get(role) if role is not None else None
        got = _where(actor, table) if want is not None else None
        if got is None:
            continue
        for what, node_id in got[0]:
            node = nodes.get(node_id)
            if node is not None and node.label != want:
                return (
                    f"OpenRLHF's {role} ({actor.class_name}) has {what} on node rank {node.rank} ({node.host}), "
                    f"in node group {node.label}; the plan puts {role} on node group {want}: Ray chose the node "
                    "(train_ppo_ray's placement groups ask only for CPU and GPU), so it would not run where planned"
                )
    return None


def placed_actors(actors: Iterable[ActorRow], table: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Per role, how many of its actors Ray has placed whole (every bundle of their group)."""
    out: dict[str, int] = {}
    for actor in actors:
        role = ROLE_CLASSES.get(actor.class_name)
        got = _where(actor, table) if role is not None else None
        if role is not None and got is not None and got[1]:
            out[role] = out.get(role, 0) + 1
    return out


def actor_rows() -> list[ActorRow]:
    """The live actors of the connected cluster, read from the GCS directly (no dashboard: hpcplace starts Ray
    with --include-dashboard=false, and ray.util.state needs it). Ray's own actor_table() parses the same
    records but drops the placement group id, so the records are parsed here."""
    from ray._private.state import state
    from ray.core.generated import gcs_pb2

    table_data: Any = gcs_pb2.ActorTableData  # type: ignore[attr-defined]  # protobuf-generated: Ray ships no stubs
    accessor = state._connect_and_get_accessor()
    out = []
    for raw in accessor.get_actor_table(None, None):
        data = table_data.FromString(raw)
        if data.state == table_data.DEAD:
            continue
        node = data.address.node_id or data.node_id
        out.append(ActorRow(data.class_name, node.hex(), data.placement_group_id.hex()))
    return out


def watch(address: str, plan_path: str, run_dir: str, driver_pid: int) -> int:
    """Poll until the driver exits or every planned role is placed; stop the driver on a problem."""
    import json
    import logging

    import ray  # the job's Ray

    from hpcplace.runtime.ray_node import group_node_ranks, pid_alive, record_error, say, stop_driver

    with open(plan_path, encoding="utf-8") as fh:
        header = json.load(fh)
    labels = {r: str(g["label"]) for g in header["node_groups"] for r in group_node_ranks(g)}
    planned = planned_roles(header)
    counts = expected_actors(header)
    ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    try:
        while pid_alive(driver_pid):
            actors = actor_rows()
            table = ray.util.placement_group_table()
            nodes = nodes_by_id(ray.nodes(), labels)  # type: ignore[no-untyped-call]  # unannotated in Ray
            problem = placement_problem(actors, table, nodes, planned)
            if problem is not None:
                say(f"error: {problem}")
                record_error(run_dir, f"OpenRLHF placement: {problem}")
                stop_driver(driver_pid)
                return 1
            placed = placed_actors(actors, table)
            if all(placed.get(r, 0) >= counts.get(r, 0) for r in planned):
                say(
                    "OpenRLHF's roles are on their planned node groups: "
                    + ", ".join(f"{r} on {planned[r]}" for r in ROLES if r in planned)
                )
                return 0
            time.sleep(POLL_S)
    finally:
        ray.shutdown()
    return 0


def main(argv: Sequence[str]) -> int:
    """`python -m hpcplace.runtime.openrlhf_watch ADDRESS PLAN RUN_DIR DRIVER_PID`."""
    if len(argv) != 4 or not argv[3].isdigit():
        print("usage: openrlhf_watch ADDRESS PLAN RUN_DIR DRIVER_PID", file=sys.stderr)
        return 2
    return watch(argv[0], argv[1], argv[2], int(argv[3]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
