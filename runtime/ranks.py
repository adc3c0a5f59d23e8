"""Compute one process's environment from its plan record; merge it into a base environment.

Pure functions: the shim (from the Slurm snapshot) and the local backend (from a synthetic one)
both call `compute_process_env`, then `environment_changes`, then `merge_environment`; only the
caller applies the result.
"""

from __future__ import annotations

from hpcplace.runtime.devices import GPU_VARIABLES, JOB_RELATIVE, DeviceChoice, choose_devices
from hpcplace.runtime.errors import ShimError
from hpcplace.runtime.process_env import ProcessEnv
from hpcplace.runtime.shm_dir import node_dir_path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from hpcplace.runtime.slurm_env import SlurmSnapshot

ACTOR = "actor"  # the planner's model-parallel component names (weight-sync peers)
ROLLOUT = "rollout"
SHM_ROOT = "/dev/shm"

# MASTER_PORT: 10000 + (job_key * 32 + component_index) mod 22752. Below Linux's ephemeral range
# (32768+), distinct for the components of one job, and shifted by 32 per job id.
PORT_BASE = 10000
PORT_STRIDE = 32
PORT_SPAN = 711 * PORT_STRIDE

# Variables Slurm (or the batch step) sets that the shim must replace without complaint.
OVERRIDABLE = frozenset(GPU_VARIABLES)


def master_port(job_id: str, component_index: int) -> int:
    if job_id.isascii() and job_id.isdigit():
        key = int(job_id)
    else:  # local run ids: FNV-1a, stable across processes (hash() is salted)
        key = 0xCBF29CE484222325
        for byte in job_id.encode():
            key = ((key ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return PORT_BASE + (key * PORT_STRIDE + component_index) % PORT_SPAN


def shm_dir(job_id: str, node: str | None = None) -> str:
    """The job's node-local directory /dev/shm/hpcplace-<jobid>, or with `node` that node's own
    directory inside it (HPCPLACE_SHM_DIR: batons and weight stores of that node live there)."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in job_id)
    job = f"{SHM_ROOT}/hpcplace-{safe}"
    return job if node is None else node_dir_path(job, node)


def shm_node(snapshot: SlurmSnapshot, process: Mapping[str, Any]) -> str:
    """Which node's directory a process uses: Slurm's node name (SLURMD_NODENAME, as the job
    script's /dev/shm guard sees it) on a cluster; the plan's node on the local backend, where every
    planned node is this one host and so shares its /dev/shm."""
    if snapshot.synthetic:
        return f"plan{int(process['cluster_node_rank'])}"
    return snapshot.node_name


def weight_sync_peers(
    plan: Mapping[str, Any], component: str, rank: int
) -> tuple[tuple[tuple[int, int], ...] | None, tuple[int, ...] | None]:
    """(targets, sources): rollout (dp, tp) shards an actor rank feeds / actor ranks feeding a rollout rank."""
    sync = plan.get("weight_sync")
    if not isinstance(sync, dict):
        return None, None
    table = sync.get("actor_to_rollout") or []
    if component == ACTOR:
        targets = table[rank] if rank < len(table) else []
        return tuple((int(dp), int(tp)) for dp, tp in targets), None
    if component == ROLLOUT:
        return None, tuple(a for a, targets in enumerate(table) if any(dp == rank for dp, _ in targets))
    return None, None


def compute_process_env(
    *,
    plan: Mapping[str, Any],
    component: Mapping[str, Any],
    component_index: int,
    process: Mapping[str, Any],
    snapshot: SlurmSnapshot,
    plan_path: str,
    master_addr: str,
    local_gpus: tuple[str, ...] | None = None,
) -> tuple[ProcessEnv, DeviceChoice]:
    """The ProcessEnv of one process (plan record + what Slurm gave the task) and the device decision."""
    name = str(component["name"])
    rank = int(process["rank"])
    choice = choose_devices(
        tuple(process["visible_accelerators"]),
        snapshot.cuda_visible_devices,
        local_gpus=local_gpus,
        relative=plan.get("gpu_ids") == JOB_RELATIVE,
        step_gpus=snapshot.step_gpus,
    )
    targets, sources = weight_sync_peers(plan, name, rank)
    group = component.get("collocation_group")
    info = ProcessEnv(
        plan_path=plan_path,
        component=name,
        job_id=snapshot.job_id,
        rank=rank,
        world_size=int(component["world_size"]),
        local_rank=process["local_rank"],
        local_world_size=process["local_world_size"],
        node_rank=process["placement_node_rank"],
        cluster_node_rank=process["cluster_node_rank"],
        master_addr=master_addr,
        master_port=master_port(snapshot.job_id, component_index),
        visible_devices=choice.visible,
        physical_devices=choice.planned if choice.physical is None else choice.physical,
        device_mode=choice.mode,
        isolate_accelerator=bool(process["isolate_accelerator"]),
        local_accelerator_rank=process["local_accelerator_rank"],
        local_hardware_ranks=tuple(process["local_hardware_ranks"]),
        accelerator_type=str(process["accelerator_type"]),
        node_group_label=str(process["node_group_label"]),
        partition=process["partition"] or "",
        het_group=process["het_group"],  # "": Slurm's default partition
        group_node_index=process["group_node_index"],
        resource_type=str(process["resource_type"]),
        shm_dir=shm_dir(snapshot.job_id, shm_node(snapshot, process)),
        collocation_group=str(group) if group else None,
        weight_sync_targets=targets,
        weight_sync_sources=sources,
    )
    return info, choice


def plan_environment(
    plan: Mapping[str, Any], component: Mapping[str, Any], process: Mapping[str, Any]
) -> dict[str, str]:
    """The user's env from plan.json: the node group's, its container's (`container.env`), then its node's
    (RLinf env_configs), then the component's (component wins), RLinf's order: node env_configs before the
    worker's own env. Set by the shim, inside the container: an image's own ENV never overrides them."""
    env: dict[str, str] = {}
    groups = plan.get("node_groups") or []
    g = process["het_group"]
    if isinstance(groups, list) and isinstance(g, int) and 0 <= g < len(groups):
        env.update(groups[g].get("env") or {})
        env.update((groups[g].get("container") or {}).get("env") or {})
        per_node = groups[g].get("node_env") or []
        j = process.get("group_node_index")
        if isinstance(j, int) and 0 <= j < len(per_node):
            env.update(per_node[j] or {})
    env.update(component.get("env") or {})
    return {str(k): str(v) for k, v in env.items()}


def environment_changes(info: ProcessEnv, extra: Mapping[str, str]) -> dict[str, str | None]:
    """Computed variables plus the plan's env; the plan may not set a variable hpcplace computes."""
    changes = info.environment()
    bad = sorted(repr(name) for name, value in extra.items() if not _env_name_ok(name) or "\x00" in value)
    if bad:
        raise ShimError(
            f"the plan's env for component {info.component!r} has invalid variables: {', '.join(bad)}",
            hint="names use letters, digits and '_' (not starting with a digit); values cannot hold NUL",
        )
    clash = sorted(name for name in extra if name in changes)
    if clash:
        raise ShimError(
            f"the plan's env for component {info.component!r} sets {', '.join(clash)}, which "
            "hpcplace computes from the placement",
            hint="remove them from the component's / node group's env in the config",
        )
    changes.update(extra)
    return changes


def _env_name_ok(name: str) -> bool:
    """[A-Za-z_][A-Za-z0-9_]* without importing `re` on the shim's hot path."""
    return bool(name) and name.isascii() and not name[0].isdigit() and all(c.isalnum() or c == "_" for c in name)


def merge_environment(base: Mapping[str, str], changes: Mapping[str, str | None]) -> dict[str, str]:
    """base + changes, refusing to silently replace a variable the user set to something else.

    GPU visibility variables are always replaced (Slurm sets them, and they leak from the batch step).
    """
    conflicts = []
    for name, value in changes.items():
        current = base.get(name)
        if current is not None and current != value and name not in OVERRIDABLE:
            wanted = "unset" if value is None else repr(value)
            conflicts.append(f"{name}={current!r} (hpcplace sets {wanted})")
    if conflicts:
        names = " ".join(f"-u {c.split('=', 1)[0]}" for c in conflicts)
        raise ShimError(
            "refusing to overwrite variables already set in the environment: " + "; ".join(conflicts),
            hint=f"hpcplace computes these from the plan; unset them first (e.g. `env {names} ...`) "
            "or remove them from your job script / shell",
        )
    merged = dict(base)
    for name, value in changes.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = value
    return merged


# A run as a chain of jobs (launch.chain, hpcplace.slurm.chain): which link this is comes from the batch
# script (HPCPLACE_CHAIN_LINK, from `hpcplace submit`); the chain's length and its state directory (kept
# across links, for the program's checkpoints) from the plan and its run directory.
CHAIN_STATE_DIR = "chain-state"


def chain_environment(plan: Mapping[str, Any], plan_path: str, environ: Mapping[str, str]) -> dict[str, str]:
    """HPCPLACE_CHAIN_LINK (0-based), HPCPLACE_CHAIN_LENGTH and HPCPLACE_CHAIN_STATE for a chain's process;
    empty when the run is not a chain. A link number that is not one reads as the first link."""
    launch = plan.get("launch") or {}
    length = launch.get("chain") if isinstance(launch, dict) else None
    if not isinstance(length, int) or isinstance(length, bool) or length < 1:
        return {}
    raw = environ.get("HPCPLACE_CHAIN_LINK", "0")
    link = int(raw) if raw.isdigit() else 0
    run_dir = plan_path.rpartition("/")[0] or "."
    return {
        "HPCPLACE_CHAIN_LINK": str(link),
        "HPCPLACE_CHAIN_LENGTH": str(length),
        "HPCPLACE_CHAIN_STATE": f"{run_dir}/{CHAIN_STATE_DIR}",
    }


def chain_command(plan: Mapping[str, Any], command: Sequence[str], chain_env: Mapping[str, str]) -> tuple[str, ...]:
    """The plan's command (a component's, or the Ray driver's; never a service's) as a chain's link runs it:
    from the second link on with launch.resume appended (the framework's resume switch, e.g.
    runner.resume_dir=auto)."""
    launch = plan.get("launch") or {}
    resume = launch.get("resume") if isinstance(launch, dict) else None
    if int(chain_env.get("HPCPLACE_CHAIN_LINK", "0")) < 1 or not isinstance(resume, list):
        return tuple(command)
    return (*command, *(str(a) for a in resume))
