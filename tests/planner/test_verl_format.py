"""verl's placement read from its command (hpcplace/config/formats/verl.py): composition with verl's own config
files (the installed verl 0.9.1, tests/requirements-frameworks.txt), pools, roles, rollout replicas, refusals
located at the word of the command that caused them."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

from hpcplace.config.formats import load_spec
from hpcplace.config.formats import verl as verl_format
from hpcplace.errors import PlanError, SpecError
from hpcplace.plan.planner import plan_from_spec
from hpcplace.runtime.ray_driver import ip_order_problem

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("verl") is None,
    reason="verl is not installed (pip install --no-deps -r tests/requirements-frameworks.txt): its config files "
    "are what hpcplace composes",
)
ENTRY = ["python3", "-m", "verl.trainer.main_ppo"]


def site(tmp_path: Path, text: str = "slurm: {partition: a800, gpu_type: a800}\n") -> Path:
    path = tmp_path / "site.yaml"
    path.write_text(text)
    return path


def spec_of(tmp_path: Path, *words: str, text: str | None = None):  # type: ignore[no-untyped-def]  # the spec
    return load_spec(site(tmp_path, text) if text else site(tmp_path), driver=[*ENTRY, *words])


def where(plan, component: str) -> list[tuple[int, tuple[int, ...]]]:  # type: ignore[no-untyped-def]  # a Plan
    """(cluster node rank, GPUs) of each rank of a component."""
    return [
        (p.cluster_node_rank, tuple(int(g) for g in p.visible_accelerators))
        for p in plan.component(component).processes
    ]


def error(tmp_path: Path, *words: str, text: str | None = None) -> SpecError:
    with pytest.raises(SpecError) as err:
        spec_of(tmp_path, *words, text=text)
    return err.value


def column_of(words: list[str], index: int) -> int:
    return 1 + sum(len(w) + 1 for w in words[:index])


def test_default_config_is_one_node_of_eight_gpus_with_colocated_roles(tmp_path: Path) -> None:
    spec = spec_of(tmp_path)
    assert spec.launch.mode == "ray" and spec.launch.driver == tuple(ENTRY)
    plan = plan_from_spec(spec)
    assert [(g.label, g.num_nodes, g.gpus_per_node, g.partition) for g in spec.cluster.node_groups] == [
        ("global_pool", 1, (8,) * 1, "a800")
    ]
    # gae (verl's default adv_estimator) makes a critic; no KL: actor_rollout without ref; one WorkerDict per GPU
    assert {c.name for c in plan.components} == {"actor_rollout", "critic", "rollout"}
    assert where(plan, "actor_rollout") == [(0, (g,)) for g in range(8)] == where(plan, "critic")
    assert plan.component("rollout").tensor_parallel_size == 2
    assert any("4 replica(s) of tp2 dp1 pp1 = 2 GPUs on global_pool ranks 0-1, 2-3, 4-5, 6-7" in n for n in spec.notes)


def test_two_nodes_kl_and_grpo_make_actor_rollout_ref_without_critic(tmp_path: Path) -> None:
    plan = plan_from_spec(
        spec_of(
            tmp_path,
            "trainer.nnodes=2",
            "trainer.n_gpus_per_node=4",
            "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.actor.use_kl_loss=True",
            "actor_rollout_ref.rollout.tensor_model_parallel_size=8",
        )
    )
    assert {c.name for c in plan.components} == {"actor_rollout_ref", "rollout"}
    assert where(plan, "actor_rollout_ref") == [(r // 4, (r % 4,)) for r in range(8)]
    assert plan.component("rollout").tensor_parallel_size == 8  # one replica over both nodes (4 GPUs each)


def test_reward_pool_on_its_own_node_group_and_partition(tmp_path: Path) -> None:
    text = (
        "slurm:\n  partition: a800\n  gpu_type: a800\n  pools: {reward_pool: r4090}\n"
        "  node_groups:\n    r4090: {partition: rtx4090, gpu_type: rtx4090}\n"
    )
    spec = spec_of(
        tmp_path,
        "trainer.nnodes=2",
        "trainer.n_gpus_per_node=4",
        "reward.reward_model.enable=True",
        "reward.reward_model.enable_resource_pool=True",
        "reward.reward_model.nnodes=1",
        "reward.reward_model.n_gpus_per_node=2",
        "reward.reward_model.rollout.tensor_model_parallel_size=1",
        text=text,
    )
    plan = plan_from_spec(spec)
    groups = [(g.label, g.partition, g.gpu_type, g.num_nodes, g.gpus_per_node) for g in spec.cluster.node_groups]
    assert groups == [("global_pool", "a800", "a800", 2, (4, 4)), ("r4090", "rtx4090", "rtx4090", 1, (2,))]
    assert where(plan, "reward_model") == [(2, (0,)), (2, (1,))]
    assert not any("may swap nodes" in n for n in spec.notes)  # 4-GPU groups cannot fit on the 2-GPU node


def test_pools_of_equal_width_are_steered_each_to_its_own_node_group(tmp_path: Path) -> None:
    spec = spec_of(
        tmp_path,
        "reward.reward_model.enable=True",
        "reward.reward_model.enable_resource_pool=True",
        "reward.reward_model.nnodes=1",
    )
    assert not any("Ray chooses" in n for n in spec.notes)
    rules = {r.what: r for r in spec.steer}
    assert [(r.pin, r.nodes) for r in spec.steer] == [("group", (0,)), ("group", (1,))]
    assert re.fullmatch(rules["verl global_pool"].name, "global_poolverl_group_8:0")
    assert not re.fullmatch(rules["verl global_pool"].name, "reward_poolverl_group_8:0")
    assert re.fullmatch(rules["verl reward_pool"].name, "reward_poolverl_group_8:0")


def test_launch_steer_false_leaves_the_pools_to_ray_and_the_plan_says_so(tmp_path: Path) -> None:
    from hpcplace.plan.plan import plan_to_json
    from hpcplace.slurm.render import render_run
    from hpcplace.slurm.submit import load_plan

    words = ["reward.reward_model.enable=True", "reward.reward_model.enable_resource_pool=True"]
    words += ["reward.reward_model.nnodes=1"]
    steered = plan_from_spec(spec_of(tmp_path, *words))
    assert steered.steer and "steer" in json.loads(plan_to_json(steered))
    text = "slurm: {partition: a800, gpu_type: a800}\nlaunch: {steer: false}\n"
    plan = plan_from_spec(spec_of(tmp_path, *words, text=text))
    assert plan.steer == () and not plan.launch.steer
    assert any("launch.steer is false" in w and "verl global_pool" in w for w in plan.warnings)
    data = json.loads(plan_to_json(plan))
    assert "steer" not in data and data["launch"]["steer"] is False
    run = render_run(plan, tmp_path / "run")  # no hook in the run directory: nothing is steered
    assert not (run.run_dir / "ray" / "steer").exists()
    assert load_plan(run.plan_json).launch.steer is False
    run = render_run(steered, tmp_path / "steered")
    assert (run.run_dir / "ray" / "steer" / "sitecustomize.py").is_file()
    assert load_plan(run.plan_json).steer == steered.steer


def test_an_override_of_a_missing_key_is_refused_at_its_word_with_the_closest_key(tmp_path: Path) -> None:
    words = [*ENTRY, "trainer.nnode=2"]
    err = error(tmp_path, "trainer.nnode=2")
    assert "did you mean 'trainer.nnodes'" in err.message
    assert err.location is not None and (err.location.path, err.location.column) == ("<--driver>", column_of(words, 3))


def test_plus_adds_and_refuses_an_existing_key_as_hydra_does(tmp_path: Path) -> None:
    spec_of(tmp_path, "+trainer.my_new_key=1")
    # Hydra appends over a key whose value is null (critic.enable: null in verl's critic.yaml), as it does
    assert "critic" not in {e.components[-1] for e in spec_of(tmp_path, "+critic.enable=False").placements}
    err = error(tmp_path, "+trainer.nnodes=2")
    assert "already has 'trainer.nnodes'" in err.message


def test_a_bad_value_is_located_at_the_override_that_set_it(tmp_path: Path) -> None:
    words = [*ENTRY, "data.train_batch_size=8", "trainer.nnodes=0"]
    err = error(tmp_path, *words[3:])
    assert "trainer.nnodes must be at least 1" in err.message
    assert err.location is not None and err.location.column == column_of(words, 4) + len("trainer.nnodes=")


def test_rollout_replica_not_divisible_by_node_width_is_refused_with_verls_reason(tmp_path: Path) -> None:
    err = error(tmp_path, "trainer.nnodes=2", "actor_rollout_ref.rollout.tensor_model_parallel_size=12")
    assert "world_size 12 must be divisible by gpus_per_node 8" in err.message
    assert err.location is not None and err.location.path == "<--driver>"


def test_a_replica_wider_than_the_pool_is_refused(tmp_path: Path) -> None:
    err = error(tmp_path, "actor_rollout_ref.rollout.tensor_model_parallel_size=16")
    assert "verl would start no rollout server" in err.message


def test_reward_replicas_must_divide_the_reward_pool(tmp_path: Path) -> None:
    err = error(
        tmp_path,
        "reward.reward_model.enable=True",
        "reward.reward_model.enable_resource_pool=True",
        "reward.reward_model.nnodes=1",
        "reward.reward_model.n_gpus_per_node=3",
        "reward.reward_model.rollout.tensor_model_parallel_size=2",
    )
    assert "split_size must be a divisor of world_size" in err.message


def test_reward_pool_of_zero_gpus_is_refused_as_verl_does(tmp_path: Path) -> None:
    err = error(tmp_path, "reward.reward_model.enable_resource_pool=True")  # nnodes: 0 in verl's reward.yaml
    assert "reward.reward_model.nnodes must be greater than 0" in err.message


def test_separate_async_plans_the_standalone_rollout_pool(tmp_path: Path) -> None:
    spec = spec_of(
        tmp_path,
        "trainer.v1.trainer_mode=separate_async",
        "trainer.n_gpus_per_node=4",
        "actor_rollout_ref.rollout.nnodes=1",
        "actor_rollout_ref.rollout.n_gpus_per_node=2",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    )
    plan = plan_from_spec(spec)
    assert [(g.label, g.num_nodes, g.gpus_per_node) for g in spec.cluster.node_groups] == [
        ("global_pool", 1, (4,)),
        ("rollout_pool", 1, (2,)),  # verl: one pool per replica of min(n_gpus_per_node, tp*dp*pp) GPUs; 2 a node
    ]
    assert len(plan.component("rollout_standalone").processes) == 2
    # steered: replica r's pool rollout_pool_<r> (verl's RolloutReplica.init_standalone) on the group's node r // 2
    from hpcplace.runtime.steer_hook import pin_targets

    rule = next(r.to_json() for r in spec.steer if "rollout_pool" in r.what)
    assert pin_targets(rule, "rollout_pool_1verl_group_1:0", 1, None) == ([1], "")
    assert pin_targets(rule, "rollout_pool_0verl_group_1:0", 1, None) == ([1], "")
    assert pin_targets(rule, "rollout_pool_reward_0verl_group_1:0", 1, None) == (None, "")  # not planned here
    rollout = [(p.cluster_node_rank, p.rank) for p in plan.component("rollout_standalone").processes]
    assert rollout == [(1, 0), (1, 1)]


def test_separate_async_refuses_a_colocated_reward_model(tmp_path: Path) -> None:
    err = error(
        tmp_path,
        "trainer.v1.trainer_mode=separate_async",
        "actor_rollout_ref.rollout.nnodes=1",
        "reward.reward_model.enable=True",
    )
    assert "Colocate reward model" in err.message


def test_unknown_trainer_mode_lists_verls_trainers(tmp_path: Path) -> None:
    err = error(tmp_path, "trainer.v1.trainer_mode=fast")
    assert "Available trainers: colocate_async, separate_async, sync" in err.message


def test_pool_names_and_shared_groups_in_the_slurm_block(tmp_path: Path) -> None:
    err = error(tmp_path, text="slurm:\n  pools: {reward_pol: x}\n")
    assert "did you mean 'reward_pool'" in err.message and err.location is not None and err.location.line == 2
    err = error(tmp_path, text="slurm:\n  pools: {reward_pool: x}\n")
    assert "this command makes no reward_pool" in err.message


def test_a_node_group_with_fewer_gpus_than_its_pool_is_refused(tmp_path: Path) -> None:
    err = error(tmp_path, text="slurm: {partition: a800, gpus_per_node: 4}\n")
    assert "global_pool needs 8 GPUs on each of its 1 node(s)" in err.message


def test_other_entry_points_and_unexpanded_words_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"has no module verl\.trainer\.main_generation: python would stop"):
        load_spec(site(tmp_path), format="verl", driver=["python3", "-m", "verl.trainer.main_generation"])
    err = error(tmp_path, "trainer.nnodes=2", "$@")
    assert "'$@' is neither a Hydra override" in err.message and err.hint is not None and "unexpanded" in err.hint


def test_without_any_verl_config_says_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(verl_format.SOURCE_ENV, raising=False)
    monkeypatch.setattr(verl_format.importlib.util, "find_spec", lambda name: None)
    err = error(tmp_path)
    assert "HPCPLACE_VERL_SRC is not set; verl is not installed in this Python" in err.message
    assert err.hint is not None and "verl==0.9.1" in err.hint


def test_a_checkout_named_by_the_environment_is_composed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.find_spec("verl")
    assert spec is not None and spec.origin is not None
    checkout = tmp_path / "verl-src"
    shutil.copytree(Path(spec.origin).parent / "trainer" / "config", checkout / "verl" / "trainer" / "config")
    monkeypatch.setenv(verl_format.SOURCE_ENV, str(checkout))
    assert any(str(checkout) in f for f in spec_of(tmp_path, "trainer.nnodes=3").composed)


def test_ip_order_check_names_the_difference() -> None:
    expected = {0: (0, 0, "global_pool"), 1: (0, 1, "global_pool"), 2: (1, 0, "reward_pool")}
    nodes = [
        {"Alive": True, "NodeManagerAddress": "10.0.0.9", "Labels": {"hpcplace.node_rank": "0"}},
        {"Alive": True, "NodeManagerAddress": "10.0.0.10", "Labels": {"hpcplace.node_rank": "1"}},
        {"Alive": True, "NodeManagerAddress": "10.0.0.2", "Labels": {"hpcplace.node_rank": "2"}},
    ]
    problem = ip_order_problem(nodes, expected, lambda g, j: f"h{g}{j}")
    assert problem is not None and "10.0.0.10 (node rank 1, h01), 10.0.0.9 (node rank 0, h00)" in problem
    nodes[1]["NodeManagerAddress"] = "10.0.0.11"
    nodes[0]["NodeManagerAddress"] = "10.0.0.10"
    assert ip_order_problem(nodes, expected, lambda g, j: "h") is None


def test_node_groups_ask_for_verls_bundle_cpus_and_the_task_runner(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, "critic.enable=False")
    # one WorkerDict per GPU whose bundle holds 3 CPUs (actor_rollout 2 + rollout 1), plus verl's TaskRunner
    assert spec.cluster.node_groups[0].cpus_per_node == 3 * 8 + 1
    assert (spec.component("actor_rollout").cpus_per_process, spec.component("rollout").cpus_per_process) == (2, 1)
    given = spec_of(tmp_path, text="slurm: {partition: a800, cpus_per_node: 64}\n")
    assert given.cluster.node_groups[0].cpus_per_node == 64


def test_raylets_of_a_verl_job_carry_no_rocr_visible_devices() -> None:
    from hpcplace.runtime.ray_node import raylet_env

    slurm = {"ROCR_VISIBLE_DEVICES": "0,1", "CUDA_VISIBLE_DEVICES": "0,1", "PATH": "/bin"}
    verl_env = raylet_env(slurm, {"env": {}, "rank": 1, "framework": "verl"}, {}, "0,1")
    assert "ROCR_VISIBLE_DEVICES" not in verl_env and verl_env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert raylet_env(slurm, {"env": {}, "rank": 1, "framework": "rlinf"}, {}, "0,1")["ROCR_VISIBLE_DEVICES"] == "0,1"


def test_distillation_makes_a_teacher_pool_after_the_reward_pool(tmp_path: Path) -> None:
    spec = spec_of(
        tmp_path,
        "distillation.enabled=True",
        "distillation.nnodes=1",
        "distillation.n_gpus_per_node=4",
        "reward.reward_model.enable_resource_pool=True",
        "reward.reward_model.nnodes=1",
        "reward.reward_model.n_gpus_per_node=2",
    )
    assert [(g.label, g.gpus_per_node) for g in spec.cluster.node_groups] == [
        ("global_pool", (8,)),
        ("reward_pool", (2,)),
        ("teacher_pool", (4,)),
    ]
    assert len(plan_from_spec(spec).component("teacher_model").processes) == 4
    # reward_pool (2 per node) is created before teacher_pool (4): its groups fit on the teacher's node
    assert [r.what for r in spec.steer] == ["verl global_pool", "verl reward_pool", "verl teacher_pool"]
    assert any("reward_pool (1x2 GPUs) is reserved by verl" in n for n in spec.notes)
    err = error(tmp_path, "distillation.enabled=True")  # nnodes: 0 in verl's distillation.yaml
    assert "config.distillation.nnodes must be greater than 0" in err.message


TEACHERS = [  # run_qwen3_8b_mopd_fsdp.sh's two teachers (verl 1dda039), each 1 replica of TP 2
    "distillation.enabled=True",
    "distillation.nnodes=1",
    "distillation.n_gpus_per_node=4",
    "+distillation.teacher_models.gsm8k.key=openai/gsm8k",
    "+distillation.teacher_models.gsm8k.model_path=Qwen/Qwen3-32B",
    "+distillation.teacher_models.gsm8k.num_replicas=1",
    "+distillation.teacher_models.gsm8k.inference.tensor_model_parallel_size=2",
    "+distillation.teacher_models.geo3k.key=hiyouga/geometry3k",
    "+distillation.teacher_models.geo3k.model_path=Qwen/Qwen3-VL-32B-Instruct",
    "+distillation.teacher_models.geo3k.num_replicas=1",
    "+distillation.teacher_models.geo3k.inference.tensor_model_parallel_size=2",
]


def test_a_single_teacher_fills_the_pool_with_replicas_of_its_tp(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, "distillation.enabled=True", "distillation.nnodes=1", "distillation.n_gpus_per_node=4")
    plan = plan_from_spec(spec)
    # the default entry teacher_model (TP 2 in verl's distillation.yaml): 4 // 2 = 2 replicas, key "default"
    assert plan.component("teacher_model").tensor_parallel_size == 2
    assert where(plan, "teacher_model") == [(1, (g,)) for g in range(4)]
    assert any("teacher_model (key default): 2 replica(s) of tp2" in n and "ranks 0-1, 2-3" in n for n in spec.notes)
    words = ["distillation.enabled=True", "distillation.nnodes=1", "distillation.n_gpus_per_node=3"]
    err = error(tmp_path, *words)  # verl's DistillationConfig: the TP must divide the pool
    assert "Single teacher's per_replica_world_size (2) must divide the distillation resource pool size" in err.message
    assert err.location is not None and err.location.column == column_of([*ENTRY, *words], 5) + len(words[2]) - 1


def test_several_teachers_split_the_pool_in_order_at_their_own_tp(tmp_path: Path) -> None:
    plan = plan_from_spec(spec_of(tmp_path, *TEACHERS))
    # teacher_model (the default entry) is dropped beside others; gsm8k then geo3k, each on its own GPUs
    assert {c.name for c in plan.components if c.name.startswith("teacher")} == {"teacher_gsm8k", "teacher_geo3k"}
    assert where(plan, "teacher_gsm8k") == [(1, (0,)), (1, (1,))]
    assert where(plan, "teacher_geo3k") == [(1, (2,)), (1, (3,))]
    assert plan.component("teacher_geo3k").tensor_parallel_size == 2
    three = [
        w.replace("geo3k.inference.tensor_model_parallel_size=2", "geo3k.inference.tensor_model_parallel_size=1")
        for w in TEACHERS
    ]
    three = [w.replace("geo3k.num_replicas=1", "geo3k.num_replicas=2") for w in three]
    plan = plan_from_spec(spec_of(tmp_path, *three))
    assert plan.component("teacher_geo3k").tensor_parallel_size == 1
    assert where(plan, "teacher_geo3k") == [(1, (2,)), (1, (3,))]


def test_teachers_that_do_not_fill_the_pool_are_refused_with_verls_reason(tmp_path: Path) -> None:
    words = [w.replace("n_gpus_per_node=4", "n_gpus_per_node=6") for w in TEACHERS]
    err = error(tmp_path, *words)
    assert "Sum of teacher (num_replicas * per_replica_world_size) (4) must match the distillation" in err.message
    assert "n_gpus_per_node=6 * nnodes=1 = 6" in err.message
    assert err.location is not None and err.location.column == column_of([*ENTRY, *words], 5) + len(words[2]) - 1
    err = error(tmp_path, *[w for w in TEACHERS if "geo3k.model_path" not in w])
    assert "geo3k: model_path must be specified" in err.message
    assert err.location is not None and err.location.path == "<--driver>"
    err = error(tmp_path, *[w.replace("geometry3k", "gsm8k").replace("hiyouga", "openai") for w in TEACHERS])
    assert "Duplicate teacher key openai/gsm8k" in err.message


def test_a_teacher_replica_across_a_node_boundary_is_refused_as_verl_does(tmp_path: Path) -> None:
    # 2 nodes x 3 GPUs: gsm8k's replica takes bundles 0-1, geo3k's first 2-3, across nodes 0 and 1
    words = [w.replace("n_gpus_per_node=4", "n_gpus_per_node=3").replace("nnodes=1", "nnodes=2") for w in TEACHERS]
    words = [w.replace("geo3k.num_replicas=1", "geo3k.num_replicas=2") for w in words]
    err = error(tmp_path, *words)
    assert "Teacher 'hiyouga/geometry3k' replica 0 sub-pool bundles [2, 4) span 2 node(s)" in err.message
    assert err.location is not None and err.location.path == "<--driver>"


def test_ascend_npus_are_refused_at_the_device_word(tmp_path: Path) -> None:
    words = [*ENTRY, "trainer.nnodes=1", "trainer.device=npu"]
    err = error(tmp_path, *words[3:])
    assert "Ascend NPUs are not supported yet" in err.message and err.hint is not None
    assert err.location is not None and err.location.column == column_of(words, 4) + len("trainer.device=")
    assert "CUDA GPUs only" in error(tmp_path, "trainer.device=cpu").message
    spec_of(tmp_path, "trainer.device=cuda")


def test_prefill_decode_replicas_are_planned_prefill_first(tmp_path: Path) -> None:
    spec = spec_of(
        tmp_path,
        "actor_rollout_ref.rollout.name=sglang",
        "actor_rollout_ref.rollout.disaggregation.enabled=True",
    )
    plan = plan_from_spec(spec)
    # verl: a replica of 1 prefill (tp2) + 1 decode (tp2) = 4 GPUs, so 2 replicas on 8 GPUs, not 4 of tp2
    assert "rollout" not in {c.name for c in plan.components}
    assert where(plan, "rollout_prefill") == [(0, (0,)), (0, (1,)), (0, (4,)), (0, (5,))]
    assert where(plan, "rollout_decode") == [(0, (2,)), (0, (3,)), (0, (6,)), (0, (7,))]
    assert any("2 replica(s)" in n and "ranks 0-3, 4-7" in n for n in spec.notes)
    plan = plan_from_spec(
        spec_of(
            tmp_path,
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.disaggregation.enabled=True",
            "actor_rollout_ref.rollout.disaggregation.decode_replicas=2",
            "actor_rollout_ref.rollout.disaggregation.decode_tensor_model_parallel_size=1",
        )
    )
    # 2 + 2 x 1 = 4 GPUs a replica; decode servers of tp1
    assert where(plan, "rollout_decode") == [(0, (2,)), (0, (3,)), (0, (6,)), (0, (7,))]
    assert plan.component("rollout_decode").tensor_parallel_size == 1


def test_prefill_decode_refusals_are_verls(tmp_path: Path) -> None:
    pd = ["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.disaggregation.enabled=True"]
    err = error(tmp_path, *pd, "actor_rollout_ref.rollout.disaggregation.decode_replicas=4")
    assert "PD replica needs 10 GPUs but gpus_per_node=8" in err.message
    err = error(tmp_path, *pd, "actor_rollout_ref.rollout.disaggregation.prefill_replicas=2")
    assert "prefill_replicas=1 only (got 2)" in err.message
    err = error(tmp_path, *pd, "actor_rollout_ref.rollout.disaggregation.transfer_backend=mori")
    assert "vllm PD replica takes nixl, mooncake" in err.message
    err = error(tmp_path, "actor_rollout_ref.rollout.name=hf", pd[1])
    assert "requires rollout.name in ('sglang', 'vllm'); got 'hf'" in err.message


OPD_7_PLUS_1 = [  # run_qwen3_0.6b_opd_veomni.sh (verl 1dda039): 7 training GPUs and a 1-GPU teacher on one node
    "trainer.n_gpus_per_node=7",
    "trainer.nnodes=1",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "distillation.enabled=True",
    "distillation.n_gpus_per_node=1",
    "distillation.nnodes=1",
    "+distillation.teacher_models.gsm8k.key=openai/gsm8k",
    "+distillation.teacher_models.gsm8k.model_path=Qwen/Qwen3-1.7B",
    "+distillation.teacher_models.gsm8k.num_replicas=1",
    "+distillation.teacher_models.gsm8k.inference.tensor_model_parallel_size=1",
]


def test_two_pools_share_one_node_as_verl_allows(tmp_path: Path) -> None:
    text = "slurm:\n  partition: a800\n  pools: {teacher_pool: global_pool}\n"
    spec = spec_of(tmp_path, *OPD_7_PLUS_1, text=text)
    assert [(g.label, g.num_nodes, g.gpus_per_node) for g in spec.cluster.node_groups] == [("global_pool", 1, (8,))]
    plan = plan_from_spec(spec)
    assert where(plan, "actor_rollout") == [(0, (g,)) for g in range(7)]
    assert where(plan, "teacher_gsm8k") == [(0, (7,))]  # after global_pool's 7, created first
    # both pools' groups are steered to the one node, each by its own name
    assert [(r.what, r.nodes) for r in spec.steer] == [("verl global_pool", (0,)), ("verl teacher_pool", (0,))]
    # the node's CPUs: 3 a bundle for 8 bundles, plus the TaskRunner's
    assert spec.cluster.node_groups[0].cpus_per_node == 3 * 8 + 1
    assert any("node group 'global_pool' holds global_pool (1x7) then teacher_pool (1x1)" in n for n in spec.notes)
    # without slurm.pools each pool keeps a node group of its own
    assert [g.label for g in spec_of(tmp_path, *OPD_7_PLUS_1).cluster.node_groups] == ["global_pool", "teacher_pool"]


def test_shared_node_group_of_several_nodes_pins_each_pools_groups(tmp_path: Path) -> None:
    text = "slurm:\n  partition: a800\n  pools: {global_pool: x, reward_pool: x}\n"
    words = ["trainer.nnodes=2", "trainer.n_gpus_per_node=6", "reward.reward_model.enable=True"]
    words += ["reward.reward_model.enable_resource_pool=True", "reward.reward_model.nnodes=1"]
    words += ["reward.reward_model.n_gpus_per_node=2", "reward.reward_model.rollout.tensor_model_parallel_size=1"]
    spec = spec_of(tmp_path, *words, text=text)
    assert [(g.label, g.num_nodes, g.gpus_per_node) for g in spec.cluster.node_groups] == [("x", 2, (8, 8))]
    plan = plan_from_spec(spec)
    assert where(plan, "reward_model") == [(0, (6,)), (0, (7,))]
    assert where(plan, "critic") == [(n, (g,)) for n in (0, 1) for g in range(6)]
    assert [(r.what, r.nodes) for r in spec.steer] == [("verl global_pool", (0, 1)), ("verl reward_pool", (0,))]
    err = error(tmp_path, *words, text=text.replace("partition: a800", "partition: a800\n  gpus_per_node: 7"))
    assert "global_pool (2x6) + reward_pool (1x2) need 8 GPUs on a node" in err.message


def test_the_standalone_rollout_pool_does_not_share_a_node_group(tmp_path: Path) -> None:
    text = "slurm:\n  partition: a800\n  pools: {rollout_pool: global_pool}\n"
    err = error(
        tmp_path,
        "trainer.v1.trainer_mode=separate_async",
        "trainer.n_gpus_per_node=4",
        "actor_rollout_ref.rollout.nnodes=1",
        "actor_rollout_ref.rollout.n_gpus_per_node=4",
        text=text,
    )
    assert "rollout_pool and global_pool on one node group 'global_pool'" in err.message
    assert err.location is not None and err.location.line == 3


ASYNC = ["python3", "-m", "verl.experimental.fully_async_policy.fully_async_main"]
ASYNC_SET = ["actor_rollout_ref.hybrid_engine=False", "data.train_batch_size=0"]  # as its shell examples set


def async_spec(tmp_path: Path, *words: str, text: str | None = None):  # type: ignore[no-untyped-def]  # the spec
    return load_spec(site(tmp_path, text) if text else site(tmp_path), driver=[*ASYNC, *ASYNC_SET, *words])


def async_error(tmp_path: Path, *words: str, text: str | None = None) -> SpecError:
    with pytest.raises(SpecError) as err:
        async_spec(tmp_path, *words, text=text)
    return err.value


def steered(spec, name: str, bundles: int = 1) -> list[int] | None:  # type: ignore[no-untyped-def]  # a spec
    """The nodes hpcplace's hook gives a placement group of that name (None: no rule steers it)."""
    from hpcplace.runtime.steer_hook import pin_targets

    for rule in spec.steer:
        targets, why = pin_targets(rule.to_json(), name, bundles, None)
        assert why == ""
        if targets is not None:
            return targets
    return None


def test_fully_async_places_a_trainer_pool_and_one_pool_per_standalone_replica(tmp_path: Path) -> None:
    # dapo_7b_math_fsdp2_4_4.sh's sizes: 4 training GPUs, 4 rollout GPUs, gen_tp=1
    words = ["trainer.n_gpus_per_node=4", "rollout.n_gpus_per_node=4", "algorithm.adv_estimator=grpo"]
    spec = async_spec(tmp_path, *words, "actor_rollout_ref.rollout.tensor_model_parallel_size=1")
    plan = plan_from_spec(spec)
    assert [(g.label, g.num_nodes, g.gpus_per_node) for g in spec.cluster.node_groups] == [
        ("trainer_pool", 1, (4,)),  # create_resource_pool_manager: [trainer.n_gpus_per_node] * trainer.nnodes
        ("rollout_pool", 1, (4,)),  # rollout.nnodes x rollout.n_gpus_per_node: one pool per tp1 replica, 4 a node
    ]
    assert {c.name for c in plan.components} == {"actor", "rollout_standalone"}  # grpo: no critic; no KL: no ref
    assert where(plan, "actor") == [(0, (g,)) for g in range(4)]
    assert where(plan, "rollout_standalone") == [(1, (g,)) for g in range(4)]
    assert steered(spec, "trainer_poolverl_group_4:0", 4) == [0] * 4
    assert steered(spec, "rollout_pool_0verl_group_1:0") == [1]
    assert steered(spec, "rollout_pool_3verl_group_1:0") == [1]
    # 3 CPUs a trainer bundle, plus the TaskRunner, trainer, rollouter and message queue actors (1 + 10 + 10 + 2)
    assert spec.cluster.node_groups[0].cpus_per_node == 3 * 4 + 23


def test_fully_async_hybrid_replicas_come_first_and_number_the_standalone_ones_after(tmp_path: Path) -> None:
    spec = async_spec(
        tmp_path,
        "async_training.use_trainer_do_validate=True",
        "trainer.n_gpus_per_node=4",
        "rollout.n_gpus_per_node=4",
        "critic.enable=False",
        "actor_rollout_ref.actor.use_kl_loss=True",
    )
    plan = plan_from_spec(spec)
    # the trainer's workers carry a rollout engine (Role.ActorRollout) and host 4 // 2 sleeping tp2 replicas
    assert {c.name for c in plan.components} == {"actor_rollout", "ref", "rollout", "rollout_standalone"}
    assert where(plan, "rollout") == [(0, (g,)) for g in range(4)] == where(plan, "ref")
    assert plan.component("rollout").tensor_parallel_size == 2
    # standalone replicas are replica_rank 2 and 3 (start_rank = the hybrid count): rollout_pool_2, rollout_pool_3
    assert [(g.label, g.num_nodes, g.gpus_per_node) for g in spec.cluster.node_groups][1] == ("rollout_pool", 1, (4,))
    assert steered(spec, "rollout_pool_2verl_group_2:0", 2) == [1, 1]
    assert steered(spec, "rollout_pool_3verl_group_2:0", 2) == [1, 1]
    assert steered(spec, "rollout_pool_0verl_group_2:0", 2) is None  # verl makes no such pool


def test_fully_async_with_only_hybrid_replicas_has_no_rollout_nodes(tmp_path: Path) -> None:
    spec = async_spec(tmp_path, "async_training.use_dynamic_resource_scheduling=True", "rollout.nnodes=0")
    plan = plan_from_spec(spec)
    assert [g.label for g in spec.cluster.node_groups] == ["trainer_pool"]
    assert {c.name for c in plan.components} == {"actor_rollout", "critic", "rollout"}
    assert len(plan.component("rollout").processes) == 8


def test_fully_async_refuses_what_its_trainer_and_rollouter_assert_at_the_key(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as caught:
        load_spec(site(tmp_path), driver=[*ASYNC, "data.train_batch_size=0"])
    err = caught.value  # ppo_trainer.yaml's hybrid_engine: true
    assert "asserts `not hybrid_engine`" in err.message
    assert err.location is not None and err.location.path.endswith("ppo_trainer.yaml")
    words = [*ASYNC, *ASYNC_SET, "data.gen_batch_size=4"]
    err = async_error(tmp_path, "data.gen_batch_size=4")
    assert "got 4: verl's FullyAsyncRollouter asserts 'gen_batch_size must be one'" in err.message
    assert err.location is not None and err.location.column == column_of(words, 5) + len("data.gen_batch_size=")
    err = async_error(tmp_path, "rollout.nnodes=0")
    assert "'nnodes must be > 0 in standalone mode'" in err.message
    err = async_error(tmp_path, "reward.reward_model.enable=True")
    assert "GenRM/DisRM in fully async mode requires standalone mode" in err.message
    err = async_error(tmp_path, "actor_rollout_ref.rollout.mode=sync")
    assert "asserts rollout.mode == 'async'" in err.message
    trtllm = ["async_training.use_trainer_do_validate=True", "actor_rollout_ref.rollout.name=trtllm"]
    err = async_error(tmp_path, *trtllm)
    assert "init_hybrid_colocated(worker_group, None)" in err.message  # verl's AttributeError, said before the job
    at = column_of([*ASYNC, *ASYNC_SET, *trtllm], 6) + len("actor_rollout_ref.rollout.name=")
    assert err.location is not None and err.location.column == at
    err = async_error(tmp_path, "actor_rollout_ref.rollout.tensor_model_parallel_size=16")  # rollout: 1 x 8 GPUs
    assert "no rollout replica fits" in err.message and "verl would start no rollout server" in err.message


def test_fully_async_reward_model_is_standalone_replicas_of_their_own(tmp_path: Path) -> None:
    rm = "reward.reward_model"
    words = [f"{rm}.enable=True", f"{rm}.enable_resource_pool=True", f"{rm}.nnodes=1", f"{rm}.n_gpus_per_node=2"]
    spec = async_spec(tmp_path, *words, f"{rm}.rollout.tensor_model_parallel_size=1")
    groups = [(g.label, g.num_nodes, g.gpus_per_node) for g in spec.cluster.node_groups]
    assert groups == [("trainer_pool", 1, (8,)), ("reward_pool", 1, (2,)), ("rollout_pool", 1, (8,))]
    assert steered(spec, "rollout_pool_reward_1verl_group_1:0") == [1]  # RewardModelManager's init_standalone
    assert steered(spec, "rollout_pool_1verl_group_2:0", 2) == [2, 2]
    # sharing the trainer's node: the driver waits for the trainer's init_workers, then the rollouter's, which makes
    # the reward replicas before the rollout ones: trainer_pool, reward_pool, rollout_pool in POOLS order
    text = "slurm:\n  partition: a800\n  pools: {reward_pool: trainer_pool, rollout_pool: trainer_pool}\n"
    shared = async_spec(
        tmp_path,
        *words,
        f"{rm}.rollout.tensor_model_parallel_size=1",
        "trainer.n_gpus_per_node=4",
        "rollout.n_gpus_per_node=2",
        text=text,
    )
    assert [(g.label, g.num_nodes, g.gpus_per_node) for g in shared.cluster.node_groups] == [("trainer_pool", 1, (8,))]
    plan = plan_from_spec(shared)
    assert where(plan, "reward_model") == [(0, (4,)), (0, (5,))]
    assert where(plan, "rollout_standalone") == [(0, (6,)), (0, (7,))]
    # verl's v1 separate_async trainer: an order hpcplace does not read
    err = error(
        tmp_path,
        "trainer.v1.trainer_mode=separate_async",
        "actor_rollout_ref.rollout.nnodes=1",
        "actor_rollout_ref.rollout.n_gpus_per_node=2",
        text="slurm:\n  partition: a800\n  pools: {rollout_pool: global_pool}\n",
    )
    assert "one pool of PACK placement groups per standalone replica (rollout_pool)" in err.message


def test_fully_async_teachers_take_their_pool_after_the_reward_model(tmp_path: Path) -> None:
    spec = async_spec(tmp_path, "distillation.enabled=True", "distillation.nnodes=1", "distillation.n_gpus_per_node=4")
    plan = plan_from_spec(spec)
    assert [g.label for g in spec.cluster.node_groups] == ["trainer_pool", "teacher_pool", "rollout_pool"]
    assert where(plan, "teacher_model") == [(1, (g,)) for g in range(4)]
    assert steered(spec, "teacher_poolverl_group_4:0", 4) == [1] * 4


def test_fully_async_composes_its_megatron_config_from_the_same_verl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # its searchpath file://verl/trainer/config is relative to the folder verl starts in: the checkout's root
    spec = async_spec(tmp_path, "--config-name=fully_async_ppo_megatron_trainer")
    assert any(f.endswith("trainer/config/ppo_megatron_trainer.yaml") for f in spec.composed)
    found = importlib.util.find_spec("verl")
    assert found is not None and found.origin is not None
    checkout = tmp_path / "verl-src"
    for part in ("trainer/config", "experimental/fully_async_policy/config"):
        shutil.copytree(Path(found.origin).parent / part, checkout / "verl" / part)
    monkeypatch.setenv(verl_format.SOURCE_ENV, str(checkout))
    composed = async_spec(tmp_path, "trainer.nnodes=2").composed  # pkg://verl.trainer.config: the checkout's
    assert len(composed) > 2 and all(f.startswith(str(checkout)) for f in composed)


ONE_STEP_OFF = [
    "python3",
    "-m",
    "verl.experimental.one_step_off_policy.main_ppo",
    "actor_rollout_ref.hybrid_engine=False",
]


def one_step_off_spec(tmp_path: Path, *words: str, text: str | None = None):  # type: ignore[no-untyped-def]  # spec
    return load_spec(site(tmp_path, text) if text else site(tmp_path), driver=[*ONE_STEP_OFF, *words])


def test_one_step_off_replicas_may_share_the_trainers_node(tmp_path: Path) -> None:
    """grpo_0.6b_gsm8k_fsdp2_2_6.sh as written, for one 8-GPU node: `slurm.pools: {rollout_pool: trainer_pool}`.
    The TaskRunner builds the trainer's worker groups, then the replicas: GPUs 0-5 train, 6-7 serve."""
    words = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.use_kl_loss=True"]
    words += ["trainer.n_gpus_per_node=6", "rollout.n_gpus_per_node=2", "rollout.nnodes=1"]
    words += ["actor_rollout_ref.rollout.tensor_model_parallel_size=2"]
    text = "slurm:\n  partition: a800\n  pools: {rollout_pool: trainer_pool}\n"
    spec = one_step_off_spec(tmp_path, *words, text=text)
    plan = plan_from_spec(spec)
    assert [(g.label, g.num_nodes, g.gpus_per_node) for g in spec.cluster.node_groups] == [("trainer_pool", 1, (8,))]
    assert where(plan, "actor") == [(0, (g,)) for g in range(6)]
    assert where(plan, "rollout_standalone") == [(0, (6,)), (0, (7,))]
    assert steered(spec, "trainer_poolverl_group_6:0", 6) == [0] * 6
    assert steered(spec, "rollout_pool_0verl_group_2:0", 2) == [0, 0]


def test_one_step_off_places_a_trainer_pool_and_standalone_replicas(tmp_path: Path) -> None:
    # grpo_0.6b_gsm8k_fsdp2_2_6.sh's sizes: 6 training GPUs and 2 rollout GPUs, gen_tp=2, KL loss
    words = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.use_kl_loss=True"]
    words += ["trainer.n_gpus_per_node=6", "rollout.n_gpus_per_node=4", "rollout.nnodes=1"]
    spec = one_step_off_spec(tmp_path, *words, "actor_rollout_ref.rollout.tensor_model_parallel_size=2")
    plan = plan_from_spec(spec)
    assert [(g.label, g.num_nodes, g.gpus_per_node) for g in spec.cluster.node_groups] == [
        ("trainer_pool", 1, (6,)),  # separation's create_resource_pool_manager
        ("rollout_pool", 1, (4,)),  # LLMServerManager: 1 x 4 // tp2 = 2 standalone replicas, one pool each
    ]
    assert {c.name for c in plan.components} == {"actor", "ref", "rollout_standalone"}  # KL loss: ref; grpo: no critic
    assert where(plan, "actor") == [(0, (g,)) for g in range(6)] == where(plan, "ref")
    assert where(plan, "rollout_standalone") == [(1, (g,)) for g in range(4)]
    assert steered(spec, "trainer_poolverl_group_6:0", 6) == [0] * 6
    assert steered(spec, "rollout_pool_0verl_group_2:0", 2) == [1, 1]  # replica ranks from 0: no hybrid replica
    assert steered(spec, "rollout_pool_1verl_group_2:0", 2) == [1, 1]
    assert spec.cluster.node_groups[0].cpus_per_node == 3 * 6 + 10  # bundles of 3 CPUs + OneStepTaskRunner's 10
    assert any("OneStepTaskRunner actor 10 more" in n for n in spec.notes)


def test_one_step_off_refuses_what_its_trainer_cannot_run_at_the_key(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as caught:
        load_spec(site(tmp_path), driver=ONE_STEP_OFF[:3])
    err = caught.value  # ppo_trainer.yaml's hybrid_engine: true
    assert "asserts `not hybrid_engine`" in err.message and "OneStepOffRayTrainer" in err.message
    assert err.location is not None and err.location.path.endswith("ppo_trainer.yaml")
    cases = {
        "actor_rollout_ref.rollout.mode=sync": "asserts rollout.mode == 'async'",
        "reward.reward_model.enable=True": "KeyError: Role.RewardModel",
        "distillation.enabled=True": "teacher_client is None",
        "rollout.nnodes=0": "'nnodes must be > 0 in standalone mode'",
    }
    for word, words in cases.items():
        with pytest.raises(SpecError) as caught:
            one_step_off_spec(tmp_path, word)
        err = caught.value
        assert words in err.message, (word, err.message)
        at = column_of([*ONE_STEP_OFF, word], 4) + len(word.partition("=")[0]) + 1
        assert err.location is not None and err.location.column == at, (word, err.location)
    with pytest.raises(SpecError) as caught:  # rollout: 1 x 8 GPUs (one_step_off_ppo_trainer.yaml's), a tp16 replica
        one_step_off_spec(tmp_path, "actor_rollout_ref.rollout.tensor_model_parallel_size=16")
    assert "fewer than one replica's 16 (tp*dp*pp): verl would start no rollout server" in caught.value.message
    assert caught.value.location is not None and caught.value.location.path.endswith("one_step_off_ppo_trainer.yaml")


def test_one_step_off_reads_its_megatron_config_and_keeps_the_reward_pool_empty(tmp_path: Path) -> None:
    rm = "reward.reward_model"
    spec = one_step_off_spec(
        tmp_path,
        "--config-path=config",  # relative: Hydra reads it from verl/experimental/one_step_off_policy
        "--config-name=one_step_off_ppo_megatron_trainer.yaml",
        f"{rm}.enable_resource_pool=True",
    )
    assert any(f.endswith("trainer/config/ppo_megatron_trainer.yaml") for f in spec.composed)
    assert [g.label for g in spec.cluster.node_groups] == ["trainer_pool", "rollout_pool"]  # no reward_pool
    assert any("reserves no GPUs for a reward model" in n for n in spec.notes)


SFT = ["python", "-m", "verl.trainer.sft_trainer_ray"]


def test_sft_trainer_ray_is_one_pool_of_training_workers_with_ten_cpus_a_gpu(tmp_path: Path) -> None:
    # tests/special_e2e/sft/run_sft_engine.sh in ray mode: trainer.nnodes=${NNODES} trainer.n_gpus_per_node=${NUM_GPUS}
    spec = load_spec(site(tmp_path), driver=[*SFT, "trainer.nnodes=2", "trainer.n_gpus_per_node=4"])
    plan = plan_from_spec(spec)
    assert [(g.label, g.num_nodes, g.gpus_per_node) for g in spec.cluster.node_groups] == [("sft_pool", 2, (4, 4))]
    assert [c.name for c in plan.components] == ["trainer"]
    assert where(plan, "trainer") == [(n, (g,)) for n in (0, 1) for g in range(4)]
    # RayResourcePool's own name: 6 random letters and digits; group i (one per node) on node i
    assert steered(spec, "Xy3k9Qverl_group_4_4:1", 4) == [1] * 4
    assert steered(spec, "rollout_pool_0verl_group_4_4:1", 4) is None
    assert spec.cluster.node_groups[0].cpus_per_node == 10 * 4  # max_colocate_count 10; the trainer is the driver
    with pytest.raises(SpecError) as caught:
        load_spec(site(tmp_path), driver=[*SFT, "trainer.n_gpus_per_node=0"])
    assert "trainer.n_gpus_per_node must be at least 1" in caught.value.message
    assert caught.value.location is not None and caught.value.location.column == column_of(SFT, 3) + len(
        "trainer.n_gpus_per_node="
    )


GENERATION = ["python3", "-m", "verl.trainer.main_generation_server"]


def test_generation_server_is_standalone_replicas_counted_by_tp(tmp_path: Path) -> None:
    # examples/generation/run_deepseek_llm_7b.sh: trainer.nnodes=1 trainer.n_gpus_per_node=8, ROLLOUT_TP=2
    words = ["trainer.nnodes=1", "trainer.n_gpus_per_node=8", "actor_rollout_ref.rollout.tensor_model_parallel_size=4"]
    spec = load_spec(site(tmp_path), driver=[*GENERATION, *words])
    plan = plan_from_spec(spec)
    # two replicas of 4 GPUs share the one node verl was given (each replica's pool is one PACK group of 4)
    assert [(g.label, g.num_nodes, g.gpus_per_node) for g in spec.cluster.node_groups] == [("rollout_pool", 1, (8,))]
    assert [c.name for c in plan.components] == ["rollout"] and plan.component("rollout").tensor_parallel_size == 4
    assert where(plan, "rollout") == [(0, (g,)) for g in range(8)]
    assert steered(spec, "rollout_pool_0verl_group_4:0", 4) == [0] * 4
    assert steered(spec, "rollout_pool_1verl_group_4:0", 4) == [0] * 4
    assert spec.cluster.node_groups[0].cpus_per_node == 2 * 8  # a standalone replica's bundles; no driver actor
    # start_server counts replicas by tp alone: with dp 2 it would start 2 replicas of 8 GPUs on 8
    dp = [*words, "actor_rollout_ref.rollout.data_parallel_size=2"]
    with pytest.raises(SpecError) as caught:
        load_spec(site(tmp_path), driver=[*GENERATION, *dp])
    assert "= 2 replica(s) of tp*dp*pp = 8 GPUs each, 16 GPUs where there are 8" in caught.value.message
    assert caught.value.location is not None and caught.value.location.column == column_of(
        [*GENERATION, *words], 5
    ) + len("actor_rollout_ref.rollout.tensor_model_parallel_size=")


def test_standalone_replicas_narrower_than_a_node_fill_each_node_in_replica_order(tmp_path: Path) -> None:
    """The shipped default (run_deepseek_llm_7b.sh, tp 2) on two nodes: 8 replicas, 4 a node, replica r on node
    r // 4 and its GPUs after the replicas before it there; replicas wider than a node still span whole nodes."""
    words = ["trainer.nnodes=2", "trainer.n_gpus_per_node=8", "actor_rollout_ref.rollout.tensor_model_parallel_size=2"]
    spec = load_spec(site(tmp_path), driver=[*GENERATION, *words])
    plan = plan_from_spec(spec)
    assert [(g.num_nodes, g.gpus_per_node) for g in spec.cluster.node_groups] == [(2, (8, 8))]
    assert where(plan, "rollout") == [(n, (g,)) for n in (0, 1) for g in range(8)]
    assert [steered(spec, f"rollout_pool_{r}verl_group_2:0", 2) for r in range(8)] == [[r // 4] * 2 for r in range(8)]
    wide = ["trainer.nnodes=2", "trainer.n_gpus_per_node=8", "actor_rollout_ref.rollout.tensor_model_parallel_size=16"]
    spec = load_spec(site(tmp_path), driver=[*GENERATION, *wide])
    assert [(g.num_nodes, g.gpus_per_node) for g in spec.cluster.node_groups] == [(2, (8, 8))]
    assert [steered(spec, f"rollout_pool_0verl_group_8_8:{i}", 8) for i in (0, 1)] == [[0] * 8, [1] * 8]
    # tp 3 on two nodes of 8: verl starts 16 // 3 = 5 replicas, 2 fit whole on each node, and Ray would split the
    # fifth one's group over the nodes' leftover GPUs
    odd = ["trainer.nnodes=2", "trainer.n_gpus_per_node=8", "actor_rollout_ref.rollout.tensor_model_parallel_size=3"]
    with pytest.raises(SpecError) as caught:
        load_spec(site(tmp_path), driver=[*GENERATION, *odd])
    assert "5 standalone replica(s) of tp*dp*pp = 3 GPUs on 2 node(s) of 8 GPUs: 2 fit whole" in caught.value.message
    assert "replica 4 would have its PACK placement group split" in caught.value.message
    # on one node the same tp leaves 2 GPUs idle and plans
    one = ["trainer.nnodes=1", "trainer.n_gpus_per_node=8", "actor_rollout_ref.rollout.tensor_model_parallel_size=3"]
    plan = plan_from_spec(load_spec(site(tmp_path), driver=[*GENERATION, *one]))
    assert where(plan, "rollout") == [(0, (g,)) for g in range(6)]


def test_an_entry_point_verl_lacks_or_hpcplace_does_not_plan_is_refused_at_its_word(tmp_path: Path) -> None:
    # examples/remax_trainer/run_qwen2.5_math_7b_sync_fsdp.sh runs verl.trainer.main_ppo_sync, which 0.9.1 lacks
    for module, words in (
        ("main_ppo_sync", "has no module verl.trainer.main_ppo_sync: python would stop"),
        ("main_eval", "verl.trainer.main_eval is not a trainer whose placement hpcplace reads"),
    ):
        with pytest.raises(SpecError) as caught:
            load_spec(site(tmp_path), driver=["python3", "-m", f"verl.trainer.{module}", "trainer.nnodes=1"])
        assert words in caught.value.message
        assert caught.value.hint is not None and "verl.trainer.sft_trainer_ray" in caught.value.hint
        assert caught.value.location is not None and caught.value.location.column == column_of(["python3", "-m"], 2)


def dapo_recipe(root: Path) -> None:
    """The layout `python -m recipe.dapo.main_dapo` runs in: verl-recipe's dapo package at recipe/dapo of the folder
    the driver starts in, its Hydra config composing verl's ppo_trainer through `file://verl/trainer/config` (the
    shape of verl-recipe's dapo_trainer.yaml, with a DAPO-only key of its own)."""
    (root / "recipe" / "dapo" / "config").mkdir(parents=True)
    (root / "recipe" / "dapo" / "main_dapo.py").write_text("")
    (root / "recipe" / "dapo" / "config" / "dapo_trainer.yaml").write_text(
        "hydra:\n  searchpath:\n    - file://verl/trainer/config\n"
        "defaults:\n  - ppo_trainer\n  - _self_\n"
        "algorithm:\n  filter_groups:\n    enable: False\n"
    )


def test_dapo_recipe_runs_verls_legacy_ppo_task_runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dapo_recipe(tmp_path)
    monkeypatch.chdir(tmp_path)
    words = ["trainer.nnodes=2", "algorithm.adv_estimator=grpo", "algorithm.filter_groups.enable=True"]
    dapo = load_spec(site(tmp_path), driver=["python3", "-m", "recipe.dapo.main_dapo", *words])
    assert dapo.source_format == "verl"
    ppo = spec_of(tmp_path, *words[:2])
    assert [(g.label, g.num_nodes) for g in dapo.cluster.node_groups] == [("global_pool", 2)]
    assert plan_from_spec(dapo).components == plan_from_spec(ppo).components  # main_ppo_v0's pools and roles
    v1 = load_spec(site(tmp_path), driver=["python3", "-m", "recipe.dapo.main_dapo", "trainer.use_v1=True"])
    assert any("recipe.dapo runs verl's legacy TaskRunner" in n for n in v1.notes)
    with pytest.raises(SpecError, match="DAPOTaskRunner maps no role to the teacher_pool"):
        load_spec(site(tmp_path), driver=["python3", "-m", "recipe.dapo.main_dapo", "distillation.enabled=True"])
    monkeypatch.chdir(tmp_path / "recipe")  # python -m finds no recipe package here
    with pytest.raises(SpecError, match=re.escape("recipe.dapo.main_dapo is not in this folder")):
        load_spec(site(tmp_path), driver=["python3", "-m", "recipe.dapo.main_dapo"])


def test_dapo_with_transfer_queue_is_refused_with_pythons_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verl-recipe's recipe/dapo/dapo_transfer_queue (30B_megatron_dapo_npu.sh) imports recipe.transfer_queue,
    which verl-recipe 48ea0a7 lacks: python stops there; where it is there, its trainer's pools are not read."""
    dapo_recipe(tmp_path)
    monkeypatch.chdir(tmp_path)
    command = ["python3", "-m", "recipe.dapo.dapo_transfer_queue.main_dapo", "trainer.nnodes=1"]
    with pytest.raises(SpecError) as caught:
        load_spec(site(tmp_path), driver=command)
    assert "No module named 'recipe.transfer_queue'" in caught.value.message
    assert caught.value.location is not None and caught.value.location.column == column_of(command, 2)
    (tmp_path / "recipe" / "transfer_queue").mkdir()
    (tmp_path / "recipe" / "transfer_queue" / "ray_trainer.py").write_text("")
    with pytest.raises(SpecError, match="whose resource pools hpcplace does not read"):
        load_spec(site(tmp_path), driver=command)


# ---- the fabric check's sizes: Megatron expert parallelism and rollout engines wider than their TP

MEGATRON = ["model_engine=megatron", "trainer.nnodes=2", "trainer.n_gpus_per_node=4"]
BLOCK_OF_ONE_NODE = "slurm: {partition: a800, gpu_type: a800, topology: {block: 1}}\n"


def test_a_megatron_actors_expert_groups_are_checked_against_the_fabric(tmp_path: Path) -> None:
    words = [
        *MEGATRON,
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
        "actor_rollout_ref.actor.megatron.expert_model_parallel_size=4",
    ]
    plan = plan_from_spec(spec_of(tmp_path, *words, text=BLOCK_OF_ONE_NODE))
    actor = plan.component("actor_rollout")
    # verl passes expert_tensor_parallel_size null: Megatron-Core takes the TP, so ETP 2 x EP 4 = 8 ranks
    assert (actor.tensor_parallel_size, actor.expert_parallel_size, actor.expert_tensor_parallel_size) == (2, 4, None)
    (crossing,) = [c for c in plan.topology_crossings if c.what == "expert-parallel group"]
    assert (crossing.component, crossing.ranks) == ("actor_rollout", tuple(range(8)))
    assert [c.units for c in plan.topology_crossings] == [(("global_pool", 0), ("global_pool", 1))]
    # ETP 1: groups of 4 consecutive ranks, each on one node
    narrow = plan_from_spec(
        spec_of(
            tmp_path, *words, "actor_rollout_ref.actor.megatron.expert_tensor_parallel_size=1", text=BLOCK_OF_ONE_NODE
        )
    )
    assert narrow.component("actor_rollout").expert_tensor_parallel_size == 1 and narrow.topology_crossings == ()


def test_a_megatron_actors_tensor_parallel_groups_are_checked_without_expert_parallelism(tmp_path: Path) -> None:
    words = [*MEGATRON, "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=8"]
    plan = plan_from_spec(spec_of(tmp_path, *words, text=BLOCK_OF_ONE_NODE))
    actor = plan.component("actor_rollout")
    assert (actor.tensor_parallel_size, actor.pipeline_parallel_size, actor.expert_parallel_size) == (8, 1, 1)
    assert [(c.component, c.what, c.ranks) for c in plan.topology_crossings] == [
        ("actor_rollout", "tensor-parallel group", tuple(range(8)))
    ]
    fits = plan_from_spec(
        spec_of(
            tmp_path, *MEGATRON, "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4", text=BLOCK_OF_ONE_NODE
        )
    )
    assert fits.component("actor_rollout").tensor_parallel_size == 4 and fits.topology_crossings == ()


def test_ref_and_critic_read_their_own_megatron_expert_sizes(tmp_path: Path) -> None:
    words = [
        *MEGATRON,
        "algorithm.adv_estimator=gae",
        "actor_rollout_ref.actor.use_kl_loss=True",
        "actor_rollout_ref.actor.megatron.expert_model_parallel_size=4",
        "critic.megatron.expert_model_parallel_size=8",
        "critic.megatron.expert_tensor_parallel_size=1",
    ]
    spec = spec_of(tmp_path, *words, text=BLOCK_OF_ONE_NODE)
    plan = plan_from_spec(spec)
    assert plan.component("actor_rollout_ref").expert_parallel_size == 4  # ref's sizes default to the actor's
    assert not any("parallel sizes differ" in n for n in spec.notes)
    critic = plan.component("critic")
    assert (critic.expert_parallel_size, critic.expert_tensor_parallel_size) == (8, 1)
    assert [c.component for c in plan.topology_crossings] == ["critic"]
    other = spec_of(tmp_path, *words, "actor_rollout_ref.ref.megatron.expert_model_parallel_size=2")
    assert any("actor_rollout_ref.ref.megatron's parallel sizes differ" in n for n in other.notes)


def test_expert_sizes_that_do_not_cut_the_gpus_are_refused_at_their_word(tmp_path: Path) -> None:
    words = [*MEGATRON, "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.megatron.expert_model_parallel_size=3"]
    with pytest.raises(PlanError, match="= 3 does not divide its 8 GPUs") as caught:
        plan_from_spec(spec_of(tmp_path, *words))
    assert caught.value.location is not None
    assert caught.value.location.column == column_of([*ENTRY, *words], len(ENTRY) + 4) + len(words[4]) - 1


def test_fsdp_and_ep_one_record_no_expert_sizes(tmp_path: Path) -> None:
    fsdp = plan_from_spec(spec_of(tmp_path, "+actor_rollout_ref.actor.megatron.expert_model_parallel_size=4"))
    megatron = plan_from_spec(spec_of(tmp_path, *MEGATRON))
    for plan in (fsdp, megatron):  # an FSDP actor's megatron section is not its engine
        assert all(c.expert_parallel_size == 1 and c.expert_tensor_parallel_size is None for c in plan.components)
    assert fsdp.component("actor_rollout").tensor_parallel_size == 1  # FSDP shards data, not layers


def test_a_rollout_replica_wider_than_its_tp_is_one_engine(tmp_path: Path) -> None:
    words = [
        "trainer.nnodes=2",
        "trainer.n_gpus_per_node=4",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
        "actor_rollout_ref.rollout.data_parallel_size=4",
    ]
    plan = plan_from_spec(spec_of(tmp_path, *words, text=BLOCK_OF_ONE_NODE))
    rollout = plan.component("rollout")
    assert (rollout.tensor_parallel_size, rollout.gpus_per_engine) == (2, 8)
    assert [(c.component, c.what, c.ranks) for c in plan.topology_crossings] == [
        ("rollout", "inference engine", tuple(range(8)))
    ]
    assert plan_from_spec(spec_of(tmp_path, *words[:3])).component("rollout").gpus_per_engine is None  # = its TP


def test_prefill_decode_servers_are_engines_of_their_own_tp(tmp_path: Path) -> None:
    plan = plan_from_spec(
        spec_of(
            tmp_path,
            "actor_rollout_ref.rollout.name=sglang",
            "actor_rollout_ref.rollout.disaggregation.enabled=True",
            "actor_rollout_ref.rollout.disaggregation.transfer_backend=nixl",
        )
    )
    assert [plan.component(c).gpus_per_engine for c in ("rollout_prefill", "rollout_decode")] == [None, None]


def test_sft_on_megatron_reads_its_engines_expert_sizes(tmp_path: Path) -> None:
    words = [*SFT, "engine=megatron", "optim=megatron", "trainer.nnodes=2", "trainer.n_gpus_per_node=4"]
    text = BLOCK_OF_ONE_NODE
    plan = plan_from_spec(load_spec(site(tmp_path, text), driver=[*words, "engine.expert_model_parallel_size=8"]))
    trainer = plan.component("trainer")
    assert (trainer.tensor_parallel_size, trainer.expert_parallel_size) == (1, 8)
    assert [c.what for c in plan.topology_crossings] == ["expert-parallel group"]
    assert plan_from_spec(load_spec(site(tmp_path, text), driver=words)).topology_crossings == ()
