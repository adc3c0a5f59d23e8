"""Commands started INTO a running job from outside it (`hpcplace exec | shell | attach`), stdlib only.

Such a step (`srun --jobid=J --het-group=G --overlap ...` from the login node) is told about its own
het component only: its SLURM_JOB_NODELIST names that component's nodes and no *_HET_GROUP_* variable
exists. The job itself recorded every component's hosts in <run dir>/logs/nodes.txt (`hp_begin`), so
the shim rebuilds the full snapshot from it and computes exactly the environment the rank's own step
computes (`--rank R`). The command comes from a JSON file in the run directory (`--argv FILE`), never
from srun's command line. `--on-node N` runs a command on cluster node rank N with the job's
environment but no rank's (no component): the node's GPUs as the step holds them.
"""

from __future__ import annotations

import json
import os
import sys

from hpcplace.runtime.errors import ShimError
from hpcplace.runtime.ip_order import read_overlay
from hpcplace.runtime.slurm_env import HetGroup, SlurmSnapshot, locate_node

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

NODES_FILE = os.path.join("logs", "nodes.txt")


def read_argv(path: str) -> tuple[str, ...]:
    """The command a CLI wrote for a step: a JSON list of strings."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise ShimError(
            f"cannot read the command file {path}: {exc}",
            hint="it is written by `hpcplace exec|attach` into the run directory",
        ) from None
    if not isinstance(data, list) or not data or not all(isinstance(a, str) for a in data) or not data[0]:
        raise ShimError(f"{path} holds no command (a non-empty JSON list of strings)")
    return tuple(data)


def job_node_lists(run_dir: str) -> dict[int, list[str]]:
    """logs/nodes.txt -> {het group: [host of node 0, node 1, ...]}, a group the job numbered in its framework's
    IP order as it did (logs/ray-order-g<G>.txt, runtime/ip_order.py)."""
    path = os.path.join(run_dir, NODES_FILE)
    out: dict[int, dict[int, str]] = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit():
                    out.setdefault(int(parts[0]), {})[int(parts[1])] = parts[2]
    except OSError as exc:
        raise ShimError(
            f"cannot read {path}: {exc.strerror}",
            hint="the job writes it when it starts: is it running, from this run directory?",
        ) from None
    for (g, j), host in read_overlay(os.path.dirname(path)).items():  # groups in verl's/slime's IP order
        if j in out.get(g, {}):
            out[g][j] = host
    return {g: [nodes[j] for j in sorted(nodes)] for g, nodes in sorted(out.items())}


def attached_snapshot(snapshot: SlurmSnapshot, run_dir: str) -> SlurmSnapshot:
    """The step's snapshot with every het component's node list from the job's logs/nodes.txt."""
    lists = job_node_lists(run_dir)
    if not lists:
        raise ShimError(f"{os.path.join(run_dir, NODES_FILE)} names no node")
    groups = tuple(
        HetGroup(
            index=g,
            job_id=snapshot.job_id,
            nodelist=",".join(lists.get(g, [])),
            partition=None,
            num_tasks=None,
            tasks_per_node=None,
        )
        for g in range(max(lists) + 1)
    )
    return snapshot.replace(groups=groups, het_size=len(groups))


def check_rank_node(snapshot: SlurmSnapshot, process: dict[str, Any], het_groups: Sequence[int], what: str) -> None:
    """The step must run on the node the plan puts this rank on."""
    where = locate_node(snapshot, het_groups)
    planned = (process["het_group"], process["group_node_index"])
    if where != planned:
        g, j = planned
        host = snapshot.groups[g].nodelist.split(",")[j] if g < len(snapshot.groups) else "?"
        raise ShimError(
            f"{what} lives on het group {g} node {j} ({host}), but this step runs on "
            f"{snapshot.node_name} (het group {where[0]} node {where[1]})",
            hint="start it with srun --het-group/--relative of the rank's node (hpcplace exec does)",
        )


def published_master_port(run_dir: str, job_id: str, component: str) -> int | None:
    """The MASTER_PORT the component's rank 0 agreed on in this job (None: it never published one)."""
    from hpcplace.runtime.master_port import port_file

    try:
        with open(port_file(run_dir, job_id, component), encoding="ascii") as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def node_main(argv: Sequence[str]) -> int:
    """`hpcplace-run --on-node N --plan P --argv FILE [--chdir D]`: run FILE's command on node rank N."""
    from hpcplace.runtime.plan_index import PlanIndex
    from hpcplace.runtime.ray_node import (
        AUTH_VARIABLES,
        auth_environment,
        framework_node_env,
        group_node_ranks,
        read_head,
        say,
    )
    from hpcplace.runtime.slurm_env import read_snapshot

    values: dict[str, str] = {}
    args = list(argv)
    while args:
        a = args.pop(0)
        if a in ("--on-node", "--plan", "--argv", "--chdir") and args:
            values[a] = args.pop(0)
        elif a in ("--verbose", "--no-verify"):
            pass
        else:
            say(f"error: unexpected argument {a!r}")
            return 2
    try:
        if not values.get("--on-node", "").isdigit() or "--plan" not in values or "--argv" not in values:
            raise ShimError("usage: --on-node N --plan PLAN --argv FILE [--chdir DIR]")
        rank = int(values["--on-node"])
        plan_path = os.path.abspath(values["--plan"])
        run_dir = os.path.dirname(plan_path)
        command = read_argv(values["--argv"])
        snapshot = attached_snapshot(read_snapshot(os.environ), run_dir)
        with PlanIndex(plan_path) as index:
            header = index.plan
        where = None
        for g, group in enumerate(header["node_groups"]):
            for j, r in enumerate(group_node_ranks(group)):
                if r == rank:
                    where = (g, j)
        if where is None:
            raise ShimError(f"the plan has no node rank {rank}")
        check_rank_node(
            snapshot,
            {"het_group": where[0], "group_node_index": where[1]},
            range(len(snapshot.groups)),
            f"node rank {rank}",
        )
        launch = header.get("launch") or {}
        launch_env = launch.get("env") or {}
        env = dict(os.environ)  # the step's own GPU variables: Slurm set them for this step (the node's GPUs)
        env.update(launch_env)
        env.update((header["node_groups"][where[0]].get("container") or {}).get("env") or {})
        env["RLINF_NODE_RANK"] = str(rank)
        env.update(framework_node_env(header.get("source", {}).get("format"), rank))
        env.update({"HPCPLACE_PLAN": plan_path, "HPCPLACE_RUN_DIR": run_dir, "HPCPLACE_NODE_RANK": str(rank)})
        head = read_head(os.path.join(run_dir, "ray", "head.json"), snapshot.job_id)
        env.pop("RAY_ADDRESS", None)  # the submitting shell's may name another cluster: this job's, or none
        if head:  # joins the job's Ray as its raylets and driver do: RAY_ADDRESS, and their authentication
            env["RAY_ADDRESS"] = f"{head['host']}:{head['port']}"
            for name in AUTH_VARIABLES:
                if name not in launch_env:
                    env.pop(name, None)
            env.update(auth_environment(launch_env, run_dir))
        if values.get("--chdir"):
            os.chdir(values["--chdir"])
    except ShimError as exc:
        say(f"error: {exc}")
        return exc.exit_code or 1
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(command[0], list(command), env)
    except OSError as exc:
        say(f"error: cannot run {command[0]!r}: {exc.strerror}")
        return 127
