"""The Ray launch mode's lowering: Plan -> the Ray cluster the job brings up (pure, no I/O).

One Ray node per allocated node of every het component, all started by ONE srun step (a segment
per het component, one task per node), so every raylet starts at once. The head is the host of
cluster node rank 0 (het component 0, node 0: the batch host). Each raylet gets, from the plan:
RLINF_NODE_RANK = its cluster node rank, `--num-gpus` = the node's GPUs (the step holds all of them,
so CUDA_VISIBLE_DEVICES lists 0..n-1 in both ConstrainDevices modes), `--num-cpus`, a custom
resource `ng_<label>: 1` and labels hpcplace.group/partition/gpu_type/node_rank. The in-job half is
hpcplace.runtime.ray_node (every node) and hpcplace.runtime.ray_driver (the head).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass

from hpcplace.config.launch import BARE_PYTHON_RE
from hpcplace.config.rank_syntax import compress_ranks
from hpcplace.errors import SpecError
from hpcplace.plan.plan import Plan

RAY_STEP = "ray"
DRIVER_STEP = "driver"
# Ray label values follow Kubernetes' syntax; a value that does not is left out (resources still pin).
_LABEL_VALUE_RE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)$")


@dataclass(frozen=True)
class RayNode:
    """One raylet: where it runs and what it advertises."""

    rank: int  # cluster node rank = RLINF_NODE_RANK
    het_group: int
    index: int  # node index inside its het component (Slurm's node list order)
    label: str
    partition: str | None  # None: Slurm's default partition
    gpu_type: str | None
    gpus: tuple[str, ...]  # physical GPU ids the raylet exposes ("0".."n-1")
    num_cpus: int
    env: dict[str, str]  # the node group's env, then this node's RLinf env_configs env_vars
    python: str | None = None  # RLinf env_configs python_interpreter_path: runs `ray start` (None: the job's)

    @property
    def resources(self) -> dict[str, int]:
        return {group_resource(self.label): 1}

    @property
    def labels(self) -> dict[str, str]:
        raw = {
            "hpcplace.group": self.label,
            "hpcplace.partition": self.partition or "",
            "hpcplace.gpu_type": self.gpu_type or "",
            "hpcplace.node_rank": str(self.rank),
        }
        return {k: v for k, v in raw.items() if _LABEL_VALUE_RE.match(v)}


def group_resource(label: str) -> str:
    """The custom Ray resource of a node group (`ng_a800`): 1 per node of the group."""
    return f"ng_{label}"


def ray_nodes(plan: Plan) -> tuple[RayNode, ...]:
    """Every node of the plan's cluster, in cluster node rank order (nodes[0] is the head)."""
    # imported here: the node-side module brings subprocess, socket and the plan index, which every
    # command importing the slurm stage (plan, render) would otherwise load for the Ray mode only
    from hpcplace.runtime.ray_node import framework_node_env

    if not plan.launch.is_ray:
        raise SpecError("the plan is not in the ray launch mode", hint="set launch.mode: ray")
    cpus_needed: dict[int, int] = {}
    held_gpus: dict[int, set[str]] = {}  # what the job's services hold (their own steps): left out of Ray
    held_cpus: dict[int, int] = {}
    for comp in plan.components:
        for p in comp.processes:
            rank = p.cluster_node_rank
            if comp.service is not None:
                held_gpus.setdefault(rank, set()).update(p.visible_accelerators)
                held_cpus[rank] = held_cpus.get(rank, 0) + comp.cpus_per_process
            else:
                cpus_needed[rank] = cpus_needed.get(rank, 0) + comp.cpus_per_process
    nodes = []
    for g, group in enumerate(plan.cluster.node_groups):
        # A node group is one kind of node: each of its raylets advertises the same CPUs (the most any
        # of them needs), as Ray's own count would on identical nodes. ROLL's per-node placement groups
        # (half a node's CPUs each, not pinned to a node) can then be placed on any of them.
        group_cpus = max((cpus_needed.get(rank, 0) for rank in plan.cluster.node_ranks(g)), default=0)
        for j, rank in enumerate(plan.cluster.node_ranks(g)):
            gpus = group.gpus_per_node[j]
            nodes.append(
                RayNode(
                    rank=rank,
                    het_group=g,
                    index=j,
                    label=group.label,
                    partition=group.partition,
                    gpu_type=group.gpu_type if gpus else None,
                    gpus=tuple(str(i) for i in range(gpus) if str(i) not in held_gpus.get(rank, ())),
                    num_cpus=max((group.cpus_per_node or group_cpus) - held_cpus[rank], 0)
                    if held_cpus.get(rank)
                    else max(group.cpus_per_node or group_cpus, 1),
                    env={
                        **group.env,
                        **(group.node_env[j] if group.node_env else {}),
                        **framework_node_env(plan.source_format, rank),
                    },
                    python=group.python_interpreter[j] if group.python_interpreter else None,
                )
            )
    return tuple(sorted(nodes, key=lambda n: n.rank))


def head_node(plan: Plan) -> RayNode:
    """The Ray head: the node of cluster node rank 0. The RLinf format orders het components by each
    group's lowest node rank, so that is het component 0's first node (the batch host); a Cluster
    built otherwise may put it elsewhere, and the driver step follows it."""
    return ray_nodes(plan)[0]


def ray_summary(plan: Plan) -> list[str]:
    """The script's comment lines: which host is which node rank, and what each raylet gets."""
    from hpcplace.runtime.ray_node import STEER_DIR, framework_node_env, node_resources

    launch = plan.launch
    nodes = ray_nodes(plan)
    lines = [
        f"Ray cluster: {len(nodes)} node(s), one raylet each, all started by one srun step; "
        f"head = cluster node rank 0; join timeout {launch.join_timeout:g} s"
    ]
    for n in nodes:
        raylet = {"rank": n.rank, "label": n.label, "framework": plan.source_format}
        framework = framework_node_env(plan.source_format, n.rank)
        gpus = f"{len(n.gpus)} GPU(s) CUDA_VISIBLE_DEVICES={','.join(n.gpus)}" if n.gpus else "no GPU"
        role = "head" if n.rank == 0 else "worker"
        where = f"partition {n.partition}" if n.partition else "the default partition"
        lines.append(
            f"  node rank {n.rank} ({role}): het {n.het_group} node {n.index} ({n.label}, {where}): "
            f"RLINF_NODE_RANK={n.rank}, --num-cpus={n.num_cpus}, {gpus}, "
            f"resources {{{', '.join(f'{k}: {v}' for k, v in node_resources(raylet).items())}}}"
            + "".join(f", {k}={v} ({plan.source_format})" for k, v in framework.items())
            + (f", env {', '.join(sorted(set(n.env) - set(framework)))}" if set(n.env) - set(framework) else "")
            + (f", python {n.python}" if n.python else "")
        )
    if launch.driver:
        lines.append(f"driver (on the head, argv from plan.json launch.driver): {shlex.join(launch.driver)}")
    else:
        lines.append("no driver: the job holds the Ray cluster for `hpcplace attach RUN --driver -- CMD...`")
    if plan.steer:
        lines.append(
            f"steered (the hook {STEER_DIR}/sitecustomize.py, first on PYTHONPATH of the driver and every raylet, "
            f"adds hpcplace_node_<rank>: 0.001 to each matching request; decisions in {STEER_DIR}/steer.log):"
        )
        lines += [f"  {rule.describe()}" for rule in plan.steer]
    if launch.hold:
        lines.append(
            "launch.hold: the Ray cluster stays up after the driver, until `hpcplace release RUN`, cancel or "
            "the time limit; `hpcplace attach` runs further drivers on the head"
        )
    if launch.dashboard:
        lines.append(
            "launch.dashboard: the Ray dashboard on the head, on a port after the GCS port (ray/head.json, "
            "`hpcplace status RUN`)"
        )
    if (
        launch.driver
        and os.path.isabs(launch.driver[0])
        and BARE_PYTHON_RE.fullmatch(os.path.basename(launch.driver[0]))
    ):
        lines.append(
            f"driver interpreter: {launch.driver[0]} (a bare `python` driver is rendered as the submitting "
            "environment's interpreter, so the head runs the Python the job was submitted with)"
        )
    if launch.env:
        lines.append("launch.env: " + ", ".join(sorted(launch.env)))
    return lines


def node_ranks_text(plan: Plan) -> str:
    return compress_ranks(range(len(plan.cluster.nodes)))
