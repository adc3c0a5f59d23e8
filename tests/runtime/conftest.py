"""Shared helpers for the runtime tests: plans written from configs, and Slurm environments recorded
on the project's real Slurm 22.05 test cluster (scripts/slurm-cluster/)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

from hpcplace.plan.plan import plan_to_json
from hpcplace.plan.planner import plan_from_file
from hpcplace.runtime.plan_index import write_index

REPO = Path(__file__).resolve().parents[2]

# The lab's hardware (a800-1/2: 8 GPUs, rtx4090-1: 4 GPUs, cpu-1) and one component per recorded step shape.
LAB_CONFIG = """
name: lab
cluster:
  node_groups:
    - {label: a800, partition: a800, nodes: 2, gpus_per_node: 8, gpu_type: a800}
    - {label: rtx4090, partition: rtx4090, nodes: 1, gpus_per_node: 4, gpu_type: rtx4090}
    - {label: cpu, partition: cpu, nodes: 1, env: {CPU_GROUP: "yes"}}
  component_placement:
    actor: {node_group: a800, placement: "0-1,8-9"}
    inference: {node_group: rtx4090, placement: "0"}
    agent: {node_group: cpu, placement: "0:0-1"}
    span01: {node_group: "a800,rtx4090", placement: "0-1,8-9,16"}
    span012: {node_group: "a800,rtx4090,cpu", placement: "0:0-1,1:2-3,2:4,3:5-6"}
components:
  actor: {command: [sh, -c, "exit 0"], env: {ACTOR_FLAG: "1"}}
  agent: {command: [sh, -c, "exit 0"]}
"""


def write_plan(directory: Path, config_text: str, name: str = "config.yaml") -> Path:
    """Plan a config with the real planner; write plan.json and its index; return plan.json's path."""
    config = directory / name
    config.write_text(textwrap.dedent(config_text), encoding="utf-8")
    plan_path = directory / "plan.json"
    plan_path.write_text(plan_to_json(plan_from_file(config)), encoding="utf-8")
    write_index(plan_path)
    return plan_path


# ---- recorded Slurm environments --------------------------------------------------------------

BATCH_ENV: dict[str, str] = {
    # batch step of het job 120: component 0 -p a800 -N2 --ntasks-per-node=2 --gres=gpu:a800:2;
    # component 1 -p rtx4090 -n1 --gpus-per-task=rtx4090:1; component 2 -p cpu -n2
    "SLURM_JOB_ID": "120",
    "SLURM_HET_SIZE": "3",
    "SLURM_JOB_ID_HET_GROUP_0": "120",
    "SLURM_JOB_ID_HET_GROUP_1": "121",
    "SLURM_JOB_ID_HET_GROUP_2": "122",
    "SLURM_JOB_NODELIST_HET_GROUP_0": "a800-[1-2]",
    "SLURM_JOB_NODELIST_HET_GROUP_1": "rtx4090-1",
    "SLURM_JOB_NODELIST_HET_GROUP_2": "cpu-1",
    "SLURM_JOB_PARTITION_HET_GROUP_0": "a800",
    "SLURM_JOB_PARTITION_HET_GROUP_1": "rtx4090",
    "SLURM_JOB_PARTITION_HET_GROUP_2": "cpu",
    "SLURM_NTASKS_HET_GROUP_0": "4",
    "SLURM_NTASKS_HET_GROUP_1": "1",
    "SLURM_NTASKS_HET_GROUP_2": "2",
    "SLURM_TASKS_PER_NODE_HET_GROUP_0": "2(x2)",
    "SLURM_TASKS_PER_NODE_HET_GROUP_1": "1",
    "SLURM_TASKS_PER_NODE_HET_GROUP_2": "2",
    # plain variables are component 0's
    "SLURM_JOB_NODELIST": "a800-[1-2]",
    "SLURM_NTASKS": "4",
    "SLURM_JOB_PARTITION": "a800",
    # the batch step runs on a800-1 with its 2 GPUs: these leak into every step
    "SLURM_JOB_GPUS": "0,1",
    "CUDA_VISIBLE_DEVICES": "0,1",
    "GPU_DEVICE_ORDINAL": "0,1",
    "ROCR_VISIBLE_DEVICES": "0,1",
}


def task_env(
    *,
    procid: int,
    host: str,
    localid: int,
    nodeid: int,
    ntasks: int,
    step_nodelist: str,
    cuda: str | None,
    step_gpus: str | None = None,
    partition: str | None = None,
    step_id: str = "4",
) -> dict[str, str]:
    """One task of a step, as srun sets it on top of the batch environment."""
    env = dict(BATCH_ENV)
    env.update(
        {
            "SLURM_PROCID": str(procid),
            "SLURMD_NODENAME": host,
            "SLURM_LOCALID": str(localid),
            "SLURM_NODEID": str(nodeid),
            "SLURM_STEP_NUM_TASKS": str(ntasks),
            "SLURM_NTASKS": str(ntasks),
            "SLURM_STEP_NODELIST": step_nodelist,
            "SLURM_STEP_ID": step_id,
        }
    )
    if partition is not None:
        env["SLURM_JOB_PARTITION"] = partition
    for name in ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES"):
        if cuda is None:
            env.pop(name, None)
        else:
            env[name] = cuda
    if step_gpus is not None:
        env["SLURM_STEP_GPUS"] = step_gpus
    return env


# (procid, host, localid, nodeid, CUDA_VISIBLE_DEVICES as recorded under ConstrainDevices=no)
STEP_HET0 = [
    (0, "a800-1", 0, 0, "0,1"),
    (1, "a800-1", 1, 0, "0,1"),
    (2, "a800-2", 0, 1, "0,1"),
    (3, "a800-2", 1, 1, "0,1"),
]
STEP_HET1 = [(0, "rtx4090-1", 0, 0, "0")]
STEP_HET2 = [(0, "cpu-1", 0, 0, "0,1"), (1, "cpu-1", 1, 0, "0,1")]  # GPU variables leaked from the batch step
STEP_HET01 = STEP_HET0 + [(4, "rtx4090-1", 0, 2, "0")]
# --het-group=0,1,2: NODEID follows component order (rtx4090-1 = 2, cpu-1 = 3), the node list is sorted
STEP_HET012 = [(p, h, lo, n, "0,1,2,3,4,5,6,7") for p, h, lo, n, _ in STEP_HET0] + [
    (4, "rtx4090-1", 0, 2, "0,1,2,3"),
    (5, "cpu-1", 0, 3, "0,1"),
    (6, "cpu-1", 1, 3, "0,1"),
]

STEPS = {
    "0": ("a800-[1-2]", STEP_HET0),
    "1": ("rtx4090-1", STEP_HET1),
    "2": ("cpu-1", STEP_HET2),
    "0,1": ("a800-[1-2],rtx4090-1", STEP_HET01),
    "0,1,2": ("a800-[1-2],cpu-1,rtx4090-1", STEP_HET012),
}


def step_envs(groups: str, *, partition: str | None = None) -> list[dict[str, str]]:
    """Every task's environment of a recorded step (`--het-group=<groups>`)."""
    nodelist, tasks = STEPS[groups]
    return [
        task_env(
            procid=p,
            host=h,
            localid=lo,
            nodeid=n,
            ntasks=len(tasks),
            step_nodelist=nodelist,
            cuda=c,
            step_gpus=c if groups != "2" else None,
            partition=partition,
        )
        for p, h, lo, n, c in tasks
    ]


def localhost_task(procid: int, ntasks: int, step: str, job: str) -> dict[str, str]:
    """A task of job `job` on this host standing in for the lab's rtx4090-1 and cpu-1 (their addresses must
    resolve here: a service's users connect to them), its SLURM_LOCALID its SLURM_PROCID."""
    env = task_env(
        procid=procid, host="localhost", localid=procid, nodeid=0, ntasks=ntasks, step_nodelist="localhost", cuda=None
    )
    env.update(
        SLURM_JOB_NODELIST_HET_GROUP_1="localhost",
        SLURM_JOB_NODELIST_HET_GROUP_2="localhost",
        SLURM_STEP_ID=step,
        **{f"SLURM_JOB_ID{suffix}": job for suffix in ("", "_HET_GROUP_0", "_HET_GROUP_1", "_HET_GROUP_2")},
    )
    return {**base_env(), **env}


def shim_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "hpcplace.runtime", *args]


def base_env() -> dict[str, str]:
    """A clean environment for subprocesses: no Slurm, no GPU variables, no hpcplace variables."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH", "TMPDIR", "SYSTEMROOT")
    return {k: v for k, v in os.environ.items() if k in keep}


def print_env(plan: Path, component: str, env: Mapping[str, str], *extra: str) -> dict:
    """Run the real shim with --print-env in `env`; return its JSON."""
    done = subprocess.run(
        shim_command("--plan", str(plan), "--component", component, "--print-env", *extra),
        env={**base_env(), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
