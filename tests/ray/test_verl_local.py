"""verl's own placement agrees with hpcplace's plan: tests/ray/drivers/verl_driver.py runs verl 0.9.1's
ResourcePoolManager, RayResourcePool (STRICT_PACK groups sorted by node IP as a string), the WorkerDict of
create_colocated_worker_cls, RayWorkerGroup/spawn and split_resource_pool on a local Ray cluster with fake
GPUs shaped as the plan (ray.cluster_utils; one raylet per planned node, its planned GPUs), and every rank's
node and GPU ids are compared with the plan. The nodes of a two-node pool get the addresses 127.0.0.10
(node rank 0) and 127.0.0.9 (node rank 1): sorted as strings, as verl sorts them, that is the plan's order
(the order hpcplace's start check requires); sorted as numbers it would not be. The fully async trainer's
cases (ASYNC_CASES) run the pools its code makes (the driver's place_fully_async: its modules import the training
stack, so their pool specs are written out there; the pools, groups and worker groups are verl's own code).

The driver runs with hpcplace's steering hook (the run directory's ray/steer, as render writes it, first on
PYTHONPATH): each pool's groups go to the planned nodes by construction, even where two pools' groups would fit
on each other's nodes (equal_pools: Ray alone put them there in 7 of 10 starts on the test cluster), and
ray/steer/steer.log names each group steered."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hpcplace.config.formats import load_spec
from hpcplace.plan.plan import Plan
from hpcplace.plan.planner import plan_from_spec
from hpcplace.runtime.ray_driver import expected_nodes, ip_order_problem
from hpcplace.runtime.ray_node import steer_environment
from hpcplace.slurm.render import write_steer_files

DRIVER = Path(__file__).parent / "drivers" / "verl_driver.py"
ENTRY = ["python3", "-m", "verl.trainer.main_ppo"]
ASYNC_ENTRY = ["python3", "-m", "verl.experimental.fully_async_policy.fully_async_main"]
ASYNC_SET = ["actor_rollout_ref.hybrid_engine=False", "data.train_batch_size=0"]  # as its shell examples set
ONE_STEP_OFF_ENTRY = ["python3", "-m", "verl.experimental.one_step_off_policy.main_ppo"]
TIMEOUT_S = 300

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("verl") is None or importlib.util.find_spec("ray") is None,
    reason="verl and ray are not installed (pip install -e '.[frameworks]'; pip install --no-deps -r "
    "tests/requirements-frameworks.txt)",
)

CASES = {
    # one node: actor_rollout + critic in one WorkerDict per GPU, rollout replicas of TP 2 on them, and a
    # reward model colocated in processes of its own on the same GPUs
    "colocated_sync": (
        "slurm: {partition: a800}\n",
        [
            "trainer.nnodes=1",
            "trainer.n_gpus_per_node=2",
            "reward.reward_model.enable=True",
            "reward.reward_model.rollout.tensor_model_parallel_size=1",
        ],
    ),
    # two nodes, a rollout replica of TP 4 across both, and a reward pool on a node group of its own
    "two_nodes_reward_pool_tp4": (
        "slurm:\n  partition: a800\n  pools: {reward_pool: r4090}\n  node_groups: {r4090: {partition: rtx4090}}\n",
        [
            "trainer.nnodes=2",
            "trainer.n_gpus_per_node=2",
            "actor_rollout_ref.actor.use_kl_loss=True",
            "actor_rollout_ref.rollout.tensor_model_parallel_size=4",
            "reward.reward_model.enable=True",
            "reward.reward_model.enable_resource_pool=True",
            "reward.reward_model.nnodes=1",
            "reward.reward_model.n_gpus_per_node=1",
            "reward.reward_model.rollout.tensor_model_parallel_size=1",
        ],
    ),
    # two pools of equal width on two node groups: without steering, Ray chooses which pool takes which node
    # run_qwen3_0.6b_opd_veomni.sh's 7 + 1 on one 8-GPU node: global_pool and teacher_pool share the node group
    "seven_plus_one_on_one_node": (
        "slurm:\n  partition: a800\n  pools: {teacher_pool: global_pool}\n",
        [
            "trainer.nnodes=1",
            "trainer.n_gpus_per_node=7",
            "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
            "distillation.enabled=True",
            "distillation.nnodes=1",
            "distillation.n_gpus_per_node=1",
            "+distillation.teacher_models.gsm8k.key=openai/gsm8k",
            "+distillation.teacher_models.gsm8k.model_path=Qwen/Qwen3-1.7B",
            "+distillation.teacher_models.gsm8k.num_replicas=1",
            "+distillation.teacher_models.gsm8k.inference.tensor_model_parallel_size=1",
        ],
    ),
    # two teachers at their own TP split a two-node teacher pool that shares its nodes with a reward pool
    "two_teachers_shared_nodes": (
        "slurm:\n  partition: a800\n  pools: {reward_pool: t, teacher_pool: t}\n",
        [
            "trainer.nnodes=1",
            "trainer.n_gpus_per_node=2",
            "reward.reward_model.enable=True",
            "reward.reward_model.enable_resource_pool=True",
            "reward.reward_model.nnodes=1",
            "reward.reward_model.n_gpus_per_node=1",
            "reward.reward_model.rollout.tensor_model_parallel_size=1",
            "distillation.enabled=True",
            "distillation.nnodes=2",
            "distillation.n_gpus_per_node=2",
            "+distillation.teacher_models.a.key=a",
            "+distillation.teacher_models.a.model_path=A",
            "+distillation.teacher_models.a.num_replicas=1",
            "+distillation.teacher_models.a.inference.tensor_model_parallel_size=2",
            "+distillation.teacher_models.b.key=b",
            "+distillation.teacher_models.b.model_path=B",
            "+distillation.teacher_models.b.num_replicas=2",
            "+distillation.teacher_models.b.inference.tensor_model_parallel_size=1",
        ],
    ),
    "equal_pools": (
        "slurm:\n  partition: a800\n  pools: {reward_pool: r4090}\n  node_groups: {r4090: {partition: rtx4090}}\n",
        [
            "trainer.nnodes=1",
            "trainer.n_gpus_per_node=2",
            "reward.reward_model.enable=True",
            "reward.reward_model.enable_resource_pool=True",
            "reward.reward_model.nnodes=1",
            "reward.reward_model.n_gpus_per_node=2",
            "reward.reward_model.rollout.tensor_model_parallel_size=1",
        ],
    ),
}


# verl's fully async trainer (fully_async_main): the driver's place_fully_async
ASYNC_CASES = {
    # trainer-side validation: tp1 hybrid replicas 0-1 on the trainer's 2 GPUs, so the standalone replicas are
    # rollout_pool_2 and rollout_pool_3 (a steer rule each); a reward model replica in rollout_pool_reward_0
    "fully_async_hybrid_then_standalone": (
        "slurm: {partition: a800}\n",
        [
            *ASYNC_SET,
            "trainer.nnodes=1",
            "trainer.n_gpus_per_node=2",
            "async_training.use_trainer_do_validate=True",
            "actor_rollout_ref.actor.use_kl_loss=True",
            "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
            "rollout.nnodes=1",
            "rollout.n_gpus_per_node=2",
            "reward.reward_model.enable=True",
            "reward.reward_model.enable_resource_pool=True",
            "reward.reward_model.nnodes=1",
            "reward.reward_model.n_gpus_per_node=1",
            "reward.reward_model.rollout.tensor_model_parallel_size=1",
        ],
    ),
    # the trainer, a reward replica and a rollout replica on one 4-GPU node (slurm.pools): the driver builds the
    # trainer's groups, then the rollouter's reward replicas, then its rollout replicas (GPUs 0-1, 2, 3)
    "fully_async_replicas_beside_the_trainer": (
        "slurm: {partition: a800, pools: {reward_pool: trainer_pool, rollout_pool: trainer_pool}}\n",
        [
            *ASYNC_SET,
            "trainer.nnodes=1",
            "trainer.n_gpus_per_node=2",
            "critic.enable=False",
            "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
            "rollout.nnodes=1",
            "rollout.n_gpus_per_node=1",
            "reward.reward_model.enable=True",
            "reward.reward_model.enable_resource_pool=True",
            "reward.reward_model.nnodes=1",
            "reward.reward_model.n_gpus_per_node=1",
            "reward.reward_model.rollout.tensor_model_parallel_size=1",
        ],
    ),
    # one standalone replica of TP 2 across two 1-GPU nodes (rollout_pool_0: two groups, sorted by IP)
    "fully_async_replica_across_nodes": (
        "slurm: {partition: a800}\n",
        [
            *ASYNC_SET,
            "trainer.nnodes=1",
            "trainer.n_gpus_per_node=2",
            "critic.enable=False",
            "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
            "rollout.nnodes=2",
            "rollout.n_gpus_per_node=1",
        ],
    ),
}


# verl's one-step-off trainer (one_step_off_policy.main_ppo): the driver's place_one_step_off
ONE_STEP_OFF_SET = [
    "actor_rollout_ref.hybrid_engine=False",
    "algorithm.adv_estimator=grpo",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "trainer.nnodes=1",
    "trainer.n_gpus_per_node=2",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "rollout.nnodes=1",
    "rollout.n_gpus_per_node=2",
]
ONE_STEP_OFF_CASES = {
    # grpo_0.6b_gsm8k_fsdp2_2_6.sh's shape, smaller: actor + ref on 2 trainer GPUs, two tp1 standalone replicas
    # (rollout_pool_0, rollout_pool_1 from replica rank 0) on one 2-GPU rollout node
    "one_step_off_standalone_replicas": (
        "slurm: {partition: a800}\n",
        ONE_STEP_OFF_SET,
    ),
    # the same on one 4-GPU node (slurm.pools): the trainer's groups first (GPUs 0-1), then the replicas (2, 3)
    "one_step_off_replicas_beside_the_trainer": (
        "slurm: {partition: a800, pools: {rollout_pool: trainer_pool}}\n",
        ONE_STEP_OFF_SET,
    ),
}


# verl's SFT trainer on Ray (sft_trainer_ray): the driver's place_sft; two nodes of 2 GPUs (10 CPUs a bundle)
SFT_ENTRY = ["python3", "-m", "verl.trainer.sft_trainer_ray"]
SFT_CASES = {"sft_two_nodes": ("slurm: {partition: a800}\n", ["trainer.nnodes=2", "trainer.n_gpus_per_node=2"])}


def addresses(plan: Plan) -> dict[int, str]:
    """Node rank -> an address: a group's nodes sort as strings in node-rank order, across a digit change."""
    out: dict[int, str] = {}
    first = 20
    for group in plan.cluster.node_groups:
        ranks = [r for r, (_g, _j, label) in expected_nodes(plan_header(plan)).items() if label == group.label]
        if len(ranks) == 2:
            out.update(zip(ranks, ("127.0.0.10", "127.0.0.9"), strict=True))
        else:
            for r in ranks:
                out[r] = f"127.0.0.{first + r}"
    return out


def plan_header(plan: Plan) -> dict[str, Any]:
    from hpcplace.plan.plan import plan_to_json

    header: dict[str, Any] = json.loads(plan_to_json(plan))
    return header


def compare(plan: Plan, records: list[dict[str, Any]]) -> None:
    got: dict[tuple[str, int], tuple[int, tuple[int, ...]]] = {
        (r["component"], r["rank"]): (r["node_rank"], tuple(r["gpus"])) for r in records
    }
    want = {
        (c.name, p.rank): (p.cluster_node_rank, tuple(int(g) for g in p.visible_accelerators))
        for c in plan.components
        for p in c.processes
    }
    assert got == want


# verl's generation server (main_generation_server): the driver's place_generation; two tp1 replicas
GENERATION_ENTRY = ["python3", "-m", "verl.trainer.main_generation_server"]
GENERATION_CASES = {
    "generation_server": (
        "slurm: {partition: a800}\n",
        ["trainer.nnodes=1", "trainer.n_gpus_per_node=2", "actor_rollout_ref.rollout.tensor_model_parallel_size=1"],
    )
}
ENTRIES = [
    (CASES, ENTRY),
    (ASYNC_CASES, ASYNC_ENTRY),
    (ONE_STEP_OFF_CASES, ONE_STEP_OFF_ENTRY),
    (SFT_CASES, SFT_ENTRY),
    (GENERATION_CASES, GENERATION_ENTRY),
]


@pytest.mark.parametrize("case", [case for cases, _ in ENTRIES for case in sorted(cases)])
def test_verl_places_every_rank_as_planned(case: str, tmp_path: Path) -> None:
    cases, entry = next((cases, entry) for cases, entry in ENTRIES if case in cases)
    blocks, overrides = cases[case]
    site = tmp_path / "site.yaml"
    site.write_text(blocks)
    plan = plan_from_spec(load_spec(site, driver=[*entry, *overrides]))
    ips = addresses(plan)
    gpus = {p.cluster_node_rank: 0 for c in plan.components for p in c.processes}
    cpus = dict.fromkeys(gpus, 1)
    for group in plan.cluster.node_groups:
        for rank, (_g, _j, label) in expected_nodes(plan_header(plan)).items():
            if label == group.label:
                gpus[rank] = group.gpus_per_node[0]
                cpus[rank] = group.cpus_per_node or 3 * gpus[rank] + 2
    local = ",".join(f"{ips[r]}:{gpus[r]}:{r}:{cpus[r]}" for r in sorted(ips))
    report_path = tmp_path / "report.json"
    write_steer_files(plan, tmp_path)
    env = {**os.environ, **steer_environment(os.environ, str(tmp_path))}
    run = subprocess.run(
        [sys.executable, str(DRIVER), "--report", str(report_path), "--local", local, "--", *entry, *overrides],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        env=env,
    )
    report = json.loads(report_path.read_text())
    assert "error" not in report, report.get("traceback") or run.stderr[-3000:]
    # hpcplace's start check accepts this cluster (each group's addresses sort as strings in node-rank order)
    nodes = [
        {"Alive": True, "NodeManagerAddress": ips[r], "Labels": {"hpcplace.node_rank": str(r)}} for r in sorted(ips)
    ]
    assert ip_order_problem(nodes, expected_nodes(plan_header(plan)), lambda g, j: "host") is None
    assert set(ips.values()) <= set(report["nodes"].values())  # the raylets had the planned addresses
    compare(plan, report["records"])
    assert {r["component"] for r in report["records"]} == {c.name for c in plan.components}
    log = (tmp_path / "ray" / "steer" / "steer.log").read_text()
    for rule in plan.steer:  # each pool's (or standalone replica's) groups steered, by the rule's name
        names = re.findall(re.escape(rule.what) + r": placement group (\S+): bundles on node ranks", log)
        assert any(re.fullmatch(rule.name, name) for name in names), log
