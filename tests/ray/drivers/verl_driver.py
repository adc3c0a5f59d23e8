"""Run verl's own placement code for a verl command's overrides and report where every rank landed.

    python verl_driver.py --report R.json [--local IP:GPUS:RANK[:CPUS],...] -- [python3 -m verl.trainer.main_ppo] key=value ...
    python verl_driver.py ... -- python3 -m verl.experimental.fully_async_policy.fully_async_main key=value ...
    python verl_driver.py ... -- python3 -m verl.experimental.one_step_off_policy.main_ppo key=value ...
    python verl_driver.py ... -- python3 -m verl.trainer.sft_trainer_ray key=value ...
    python verl_driver.py ... -- python3 -m verl.trainer.main_generation_server key=value ...

The overrides are composed with verl's own config files by Hydra (as verl.trainer.main_ppo's @hydra.main
does). The pools are those of verl's PPOTrainer._init_resource_pool_mgr (verl 0.9.1
verl/trainer/ppo/v1/trainer_base.py; that module imports the GPU training stack, so its 20 lines of pool
spec are written out here); everything after that is verl's code unchanged: ResourcePoolManager,
create_resource_pool (its GPU check), RayResourcePool's STRICT_PACK placement groups sorted by node IP,
create_colocated_worker_cls (the WorkerDict of actor/ref/critic), RayWorkerGroup and spawn,
split_resource_pool and RayWorkerGroup(bin_pack=False) for a reward model's replicas
(RewardModelManager + RolloutReplica.init_colocated), rollout replicas = consecutive WorkerDict ranks
(RolloutReplica.init_hybrid). Each worker reports its RANK, node and Ray GPU ids.

For fully_async_main (place_fully_async) the config is fully_async_ppo_trainer, and the pools are those its
code makes (verl 0.9.1 verl/experimental/fully_async_policy and separation/utils.py, written out: those modules
import the training stack): trainer_pool, the reward model's and the rollout's standalone replicas each in a
ResourcePoolManager pool of its own (max_colocate_count 2) with RayWorkerGroup(bin_pack=False), as
RolloutReplica.init_standalone makes them, and hybrid replicas as slices of the trainer's workers. For
one_step_off_policy.main_ppo (place_one_step_off: one_step_off_ppo_trainer) the same trainer_pool with the actor's
WorkerDict, then standalone rollout replicas numbered from 0 (LLMServerManager without a worker group). For
sft_trainer_ray (place_sft: sft_trainer_engine) SFTTrainer._build_engine's RayResourcePool and RayWorkerGroup;
for main_generation_server (place_generation: ppo_trainer) start_server's standalone replicas.

Without --local it attaches to RAY_ADDRESS (hpcplace's Ray launch mode); node ranks are the raylets'
`hpcplace.node_rank` labels. With --local it starts a ray.cluster_utils.Cluster whose nodes have the given
IP addresses (127.0.0.x) and GPU counts, each with the resource hpcplace_node_<rank> as hpcplace's raylets have
(so hpcplace's steering hook, on PYTHONPATH with HPCPLACE_STEER set, pins verl's groups there).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import ray

HOMES = {  # entry point -> its folder in the verl package and its default config
    "main_ppo": ("trainer", "ppo_trainer"),
    "fully_async_main": ("experimental/fully_async_policy", "fully_async_ppo_trainer"),
    "one_step_off": ("experimental/one_step_off_policy", "one_step_off_ppo_trainer"),
    "sft": ("trainer", "sft_trainer_engine"),
    "generation": ("trainer", "ppo_trainer"),
}


def compose(overrides: list[str], entry: str) -> Any:
    import importlib.util

    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    spec = importlib.util.find_spec("verl")
    assert spec is not None and spec.origin is not None
    home, name = HOMES[entry]
    root = Path(os.environ.get("HPCPLACE_VERL_SRC") or Path(spec.origin).parent.parent)
    folder = root / "verl" / home / "config"
    # one_step_off's config finds ppo_trainer through `file://verl/trainer/config`, relative to the folder verl
    # starts in: its scripts start at a checkout's root, so the driver composes from the verl's root
    os.chdir(root)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(folder), version_base=None):
        return hydra_compose(config_name=name, overrides=overrides)


def pool_spec(config: Any) -> tuple[dict[str, list[int]], list[str], str]:
    """resource_pool_spec, the WorkerDict's roles and the reward model's pool, as PPOTrainer builds them."""
    use_ref = bool(config.algorithm.get("use_kl_in_reward", False) or config.actor_rollout_ref.actor.use_kl_loss)
    lora = config.actor_rollout_ref.model.get("lora", {}).get("rank", 0) or config.actor_rollout_ref.model.get(
        "lora_rank", 0
    )
    ref_in_actor = lora > 0 or config.actor_rollout_ref.model.get("lora_adapter_path") is not None
    roles = ["actor_rollout_ref" if use_ref and not ref_in_actor else "actor_rollout"]
    critic = config.critic.enable if config.critic.enable is not None else config.algorithm.adv_estimator == "gae"
    roles += ["critic"] if critic else []
    spec = {"global_pool": [config.trainer.n_gpus_per_node] * config.trainer.nnodes}
    rm = config.reward.reward_model
    reward = "global_pool"
    if rm.enable_resource_pool:
        spec["reward_pool"] = [rm.n_gpus_per_node] * rm.nnodes
        reward = "reward_pool"
    if config.distillation.enabled:
        spec["teacher_pool"] = [config.distillation.n_gpus_per_node] * config.distillation.nnodes
    return spec, roles, reward


def teachers(config: Any) -> list[tuple[str, int, int]]:
    """(component, num_replicas, per_replica_world_size) of each teacher in verl's order, as
    DistillationConfig._resolve_teacher_models resolves them (verl 0.9.1 verl/workers/config/distillation.py;
    that module imports the training stack): `teacher_model` alone fills the pool, beside others it is dropped;
    RolloutConfig's defaults (tp 2, dp 1, pp 1) for sizes an added entry does not give."""
    models = dict(config.distillation.teacher_models)
    pool = config.distillation.n_gpus_per_node * config.distillation.nnodes
    out = []
    for name, entry in models.items():
        if len(models) > 1 and name == "teacher_model":
            continue
        inference = entry.get("inference", {})
        width = inference.get("tensor_model_parallel_size", 2) * inference.get("data_parallel_size", 1)
        width *= inference.get("pipeline_model_parallel_size", 1)
        if len(models) == 1:
            out.append(("teacher_model", pool // width, width))
        else:
            out.append((f"teacher_{name}", entry.num_replicas, width))
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--report", required=True)
    parser.add_argument("--local", default="")
    opts, overrides = parser.parse_known_args()
    entries = {
        "verl.trainer.main_ppo": "main_ppo",
        "fully_async_main": "fully_async_main",
        "one_step_off_policy.main_ppo": "one_step_off",
        "sft_trainer_ray": "sft",
        "main_generation_server": "generation",
    }
    at = next((i for i, w in enumerate(overrides) if w.endswith(tuple(entries))), None)
    entry = next((name for tail, name in entries.items() if overrides[at].endswith(tail)), "") if at is not None else ""
    overrides = overrides[at + 1 :] if at is not None else [o for o in overrides if o != "--"]
    report: dict[str, Any] = {"records": [], "overrides": overrides}
    cluster = None
    t0 = time.time()
    try:
        if opts.local:
            from ray.cluster_utils import Cluster

            cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
            for item in opts.local.split(","):
                ip, gpus, rank, *cpus = item.split(":")  # CPUs: the plan's cpus_per_node, when given
                cluster.add_node(
                    num_cpus=int(cpus[0]) if cpus else 3 * int(gpus) + 2,
                    num_gpus=int(gpus),
                    node_ip_address=ip,
                    resources={f"hpcplace_node_{rank}": 1},
                )
            cluster.wait_for_nodes()
            ray.init(address=cluster.address)
        else:
            ray.init()  # RAY_ADDRESS: the cluster hpcplace started
        rank_of = {}
        for n in ray.nodes():
            if not n["Alive"]:
                continue
            label = (n.get("Labels") or {}).get("hpcplace.node_rank")
            marks = [int(k[len("hpcplace_node_") :]) for k in n["Resources"] if k.startswith("hpcplace_node_")]
            rank_of[n["NodeID"]] = int(label) if label is not None else (marks[0] if marks else -1)
        report["nodes"] = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
        config = compose(overrides, entry or "main_ppo")
        placers = {
            "fully_async_main": place_fully_async,
            "one_step_off": place_one_step_off,
            "sft": place_sft,
            "generation": place_generation,
        }
        placer = placers.get(entry, place)
        report["records"] = placer(config, rank_of)
    except Exception as exc:  # noqa: BLE001 - any failure of verl's code goes into the report the test reads
        report["error"] = f"{type(exc).__name__}: {exc}"
        report["traceback"] = traceback.format_exc()
    finally:
        report["seconds"] = round(time.time() - t0, 1)
        Path(opts.report).write_text(json.dumps(report, indent=1), encoding="utf-8")
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
    print(json.dumps({k: v for k, v in report.items() if k != "records"}, indent=1))
    return 0 if "error" not in report else 1


def probe_class() -> Any:
    from verl.single_controller.base import Worker
    from verl.single_controller.base.decorator import Dispatch, register

    class Probe(Worker):  # stands where verl's ActorRolloutRefWorker / TrainingWorker / rollout worker would
        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def where(self) -> dict[str, Any]:
            return {
                "rank": int(os.environ["RANK"]),
                "node_id": ray.get_runtime_context().get_node_id(),
                "gpus": [int(g) for g in ray.get_gpu_ids()],
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            }

    return Probe


def recorder(records: list[dict[str, Any]], rank_of: dict[str, int]) -> Any:
    def add(component: str, rank: int, where: dict[str, Any]) -> None:
        records.append(
            {
                **where,
                "worker_rank": where["rank"],
                "component": component,
                "rank": rank,
                "node_rank": rank_of.get(where["node_id"], -1),
            }
        )

    return add


def place(config: Any, rank_of: dict[str, int]) -> list[dict[str, Any]]:
    from verl.single_controller.ray.base import (
        RayClassWithInitArgs,
        RayWorkerGroup,
        ResourcePoolManager,
        create_colocated_worker_cls,
        split_resource_pool,
    )

    Probe = probe_class()
    spec, roles, reward_pool = pool_spec(config)
    manager = ResourcePoolManager(resource_pool_spec=spec, mapping=dict.fromkeys(roles, "global_pool"))
    manager.create_resource_pool()
    pools = manager.resource_pool_dict
    records: list[dict[str, Any]] = []
    add = recorder(records, rank_of)

    class_dict = {role: RayClassWithInitArgs(cls=ray.remote(Probe)) for role in roles}
    wg_dict = RayWorkerGroup(
        resource_pool=pools["global_pool"], ray_cls_with_init=create_colocated_worker_cls(class_dict=class_dict)
    )
    spawned = wg_dict.spawn(prefix_set=class_dict.keys())
    for role in roles:
        for where in spawned[role].where():
            add(role, where["rank"], where)
    rollout = config.actor_rollout_ref.rollout
    width = rollout.tensor_model_parallel_size * rollout.data_parallel_size * rollout.pipeline_model_parallel_size
    hybrid = spawned[roles[0]].where()
    for replica in range(len(hybrid) // width):  # LLMServerManager: world // (tp*dp*pp) replicas
        for where in hybrid[replica * width : (replica + 1) * width]:  # RolloutReplica.init_hybrid's slice
            add("rollout", where["rank"], where)
    rm = config.reward.reward_model
    if rm.enable:
        r_width = rm.rollout.tensor_model_parallel_size * rm.rollout.data_parallel_size
        r_width *= rm.rollout.pipeline_model_parallel_size
        for replica, sub in enumerate(split_resource_pool(pools[reward_pool], split_size=r_width)):
            group = RayWorkerGroup(
                resource_pool=sub, ray_cls_with_init=RayClassWithInitArgs(cls=ray.remote(Probe)), bin_pack=False
            )
            for where in group.where():
                add("reward_model", replica * r_width + where["rank"], where)
    if config.distillation.enabled:  # MultiTeacherModelManager, then each TeacherModelManager, split the pool
        resolved = teachers(config)
        by_teacher = split_resource_pool(pools["teacher_pool"], split_size=[n * w for _, n, w in resolved])
        for (component, _replicas, width), sub in zip(resolved, by_teacher, strict=True):
            for replica, part in enumerate(split_resource_pool(sub, split_size=width)):
                group = RayWorkerGroup(
                    resource_pool=part, ray_cls_with_init=RayClassWithInitArgs(cls=ray.remote(Probe)), bin_pack=False
                )
                for where in group.where():
                    add(component, replica * width + where["rank"], where)
    return records


def width_of(rollout: Any) -> int:
    return int(rollout.tensor_model_parallel_size * rollout.data_parallel_size * rollout.pipeline_model_parallel_size)


def standalone_replicas(
    kind: str, count: int, first: int, width: int, gpus_per_node: int, component: str, add: Any
) -> None:
    """`count` replicas as RolloutReplica.init_standalone makes them (kind "" or "reward_"): replica r's own pool
    `rollout_pool_<kind><first + r>` of [min(gpus_per_node, width)] * nodes, ResourcePoolManager(
    max_colocate_count=2), RayWorkerGroup(bin_pack=False, name_prefix=rollout_<kind>standalone_<rank>);
    records rank r * width + worker rank."""
    from verl.single_controller.ray.base import RayClassWithInitArgs, RayWorkerGroup, ResourcePoolManager

    Probe = probe_class()
    per_node = min(gpus_per_node, width)
    for r in range(count):
        name = f"rollout_pool_{kind}{first + r}"
        manager = ResourcePoolManager(
            resource_pool_spec={name: [per_node] * (width // per_node)}, mapping=None, max_colocate_count=2
        )
        manager.create_resource_pool()
        group = RayWorkerGroup(
            resource_pool=manager.resource_pool_dict[name],
            ray_cls_with_init=RayClassWithInitArgs(cls=ray.remote(Probe)),
            bin_pack=False,
            name_prefix=f"rollout_{kind}standalone_{first + r}",
        )
        for where in group.where():
            add(component, r * width + where["rank"], where)


def trainer_pool(config: Any, train_role: str, add: Any) -> tuple[list[str], dict[str, Any]]:
    """verl.experimental.separation's trainer_pool (create_resource_pool_manager) with one WorkerDict per GPU of
    the roles create_role_worker_mapping and SeparateRayPPOTrainer's classes give it; (roles, their groups)."""
    from verl.single_controller.ray.base import (
        RayClassWithInitArgs,
        RayWorkerGroup,
        ResourcePoolManager,
        create_colocated_worker_cls,
    )

    Probe = probe_class()
    roles = [train_role]
    critic = config.critic.enable if config.critic.enable is not None else config.algorithm.adv_estimator == "gae"
    roles += ["critic"] if critic else []
    use_ref = config.algorithm.get("use_kl_in_reward", False) or config.actor_rollout_ref.actor.use_kl_loss
    roles += ["ref"] if use_ref else []
    spec = {"trainer_pool": [config.trainer.n_gpus_per_node] * config.trainer.nnodes}
    manager = ResourcePoolManager(resource_pool_spec=spec, mapping=dict.fromkeys(roles, "trainer_pool"))
    manager.create_resource_pool()
    class_dict = {role: RayClassWithInitArgs(cls=ray.remote(Probe)) for role in roles}
    wg_dict = RayWorkerGroup(
        resource_pool=manager.resource_pool_dict["trainer_pool"],
        ray_cls_with_init=create_colocated_worker_cls(class_dict=class_dict),
    )
    spawned = wg_dict.spawn(prefix_set=class_dict.keys())
    for role in roles:
        for where in spawned[role].where():
            add(role, where["rank"], where)
    return roles, spawned


def place_one_step_off(config: Any, rank_of: dict[str, int]) -> list[dict[str, Any]]:
    """one_step_off_policy.main_ppo: OneStepOffRayTrainer.init_workers (trainer_pool, Role.Actor), then
    LLMServerManager.create(config): main() copies rollout.nnodes / n_gpus_per_node into actor_rollout_ref.rollout,
    and with no worker group every replica is standalone, replica ranks from 0."""
    records: list[dict[str, Any]] = []
    add = recorder(records, rank_of)
    trainer_pool(config, "actor", add)
    width = width_of(config.actor_rollout_ref.rollout)
    count = config.rollout.n_gpus_per_node * config.rollout.nnodes // width
    standalone_replicas("", count, 0, width, config.rollout.n_gpus_per_node, "rollout_standalone", add)
    return records


def place_sft(config: Any, rank_of: dict[str, int]) -> list[dict[str, Any]]:
    """sft_trainer_ray: SFTTrainer._build_engine, its two lines as they are (the module imports the training
    stack): RayResourcePool(process_on_nodes=[n_gpus_per_node] * nnodes) and a RayWorkerGroup on it."""
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

    records: list[dict[str, Any]] = []
    add = recorder(records, rank_of)
    pool = RayResourcePool(process_on_nodes=[config.trainer.n_gpus_per_node] * config.trainer.nnodes)
    group = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=RayClassWithInitArgs(ray.remote(probe_class())))
    for where in group.where():
        add("trainer", where["rank"], where)
    return records


def place_generation(config: Any, rank_of: dict[str, int]) -> list[dict[str, Any]]:
    """main_generation_server.start_server: (trainer.n_gpus_per_node * trainer.nnodes) // tp replicas, each
    RolloutReplica.init_standalone with gpus_per_node = trainer.n_gpus_per_node, replica ranks from 0."""
    records: list[dict[str, Any]] = []
    add = recorder(records, rank_of)
    rollout = config.actor_rollout_ref.rollout
    count = config.trainer.n_gpus_per_node * config.trainer.nnodes // rollout.tensor_model_parallel_size
    standalone_replicas("", count, 0, width_of(rollout), config.trainer.n_gpus_per_node, "rollout", add)
    return records


def place_fully_async(config: Any, rank_of: dict[str, int]) -> list[dict[str, Any]]:
    """fully_async_main: FullyAsyncTrainer.init_workers (trainer_pool), then FullyAsyncRollouter.init_workers:
    the reward model's standalone replicas (RewardLoopManager(rm_resource_pool=None)), the teacher pool, the
    hybrid replicas on the trainer's workers and the standalone rollout replicas numbered after them."""
    from verl.single_controller.ray.base import (
        RayClassWithInitArgs,
        RayWorkerGroup,
        ResourcePoolManager,
        split_resource_pool,
    )

    Probe = probe_class()
    records: list[dict[str, Any]] = []
    add = recorder(records, rank_of)
    async_training = config.async_training
    hybrid = bool(
        async_training.use_trainer_do_validate or async_training.get("use_dynamic_resource_scheduling", False)
    )
    roles, spawned = trainer_pool(config, "actor_rollout" if hybrid else "actor", add)
    rm = config.reward.reward_model
    if rm.enable:
        width = width_of(rm.rollout)
        count = rm.n_gpus_per_node * rm.nnodes // width
        standalone_replicas("reward_", count, 0, width, rm.n_gpus_per_node, "reward_model", add)
    if config.distillation.enabled:  # FullyAsyncRollouter._create_teacher_model_manager, then as main_ppo's
        teacher_spec = {"teacher_pool": [config.distillation.n_gpus_per_node] * config.distillation.nnodes}
        teacher_manager = ResourcePoolManager(resource_pool_spec=teacher_spec, mapping={})
        teacher_manager.create_resource_pool()
        resolved = teachers(config)
        by_teacher = split_resource_pool(
            teacher_manager.resource_pool_dict["teacher_pool"], split_size=[n * w for _, n, w in resolved]
        )
        for (component, _replicas, width), sub in zip(resolved, by_teacher, strict=True):
            for replica, part in enumerate(split_resource_pool(sub, split_size=width)):
                group = RayWorkerGroup(
                    resource_pool=part, ray_cls_with_init=RayClassWithInitArgs(cls=ray.remote(Probe)), bin_pack=False
                )
                for where in group.where():
                    add(component, replica * width + where["rank"], where)
    width = width_of(config.actor_rollout_ref.rollout)
    hybrids = 0
    if hybrid:  # FullyAsyncLLMServerManager step 1: init_hybrid on the trainer's workers, replica ranks 0..
        workers = spawned[roles[0]].where()
        hybrids = len(workers) // width
        for replica in range(hybrids):
            for where in workers[replica * width : (replica + 1) * width]:
                add("rollout", where["rank"], where)
    # step 2: main() copies rollout.nnodes / n_gpus_per_node into actor_rollout_ref.rollout; start_rank = hybrids
    count = config.rollout.n_gpus_per_node * config.rollout.nnodes // width
    standalone_replicas("", count, hybrids, width, config.rollout.n_gpus_per_node, "rollout_standalone", add)
    return records


if __name__ == "__main__":
    sys.exit(main())
