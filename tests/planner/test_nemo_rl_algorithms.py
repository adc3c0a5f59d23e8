"""NeMo-RL's entry points beyond GRPO/SFT (hpcplace/config/formats/nemo_rl_layout.py): non-colocated Megatron
generation, PPO, distillation, evaluation, the single controller, cross-tokenizer distillation and the NeMo-Gym
drivers, each as its setup() at 7ea279a asks RayVirtualCluster for GPUs. The configs are small ones written
here with the shape of NeMo-RL's recipes (named beside each test); tests/planner/test_nemo_rl_examples.py plans
the real ones when a checkout is given."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.planner.test_nemo_rl_format import plan_of, refused, slots, spec_of, workdir, write

__all__ = ["workdir"]  # the fixture, shared with test_nemo_rl_format

BASE = "examples/configs/base.yaml"
MEGATRON = ("policy.megatron_cfg.enabled=true", "policy.dtensor_cfg.enabled=false")
NON_COLOCATED = "policy.generation.colocated.enabled=false"


def _on(plan, name: str) -> list[int]:  # type: ignore[no-untyped-def]
    return sorted({n for n, _ in slots(plan, name)})


# ---- GRPO, Megatron generation not colocated (grpo.py init_megatron_generation: MegatronGeneration(cluster=
# inference_cluster) builds a dedicated inference Policy there)


def test_megatron_generation_on_its_own_node(workdir: Path) -> None:
    """grpo-llama3.2-1b-instruct-2n8g-megatron_generation-noncolocated.yaml: 2 nodes of 8, generation 1x8."""
    words = (
        *MEGATRON,
        "policy.generation.backend=megatron",
        NON_COLOCATED,
        "policy.generation.colocated.resources.gpus_per_node=8",
        "policy.generation.colocated.resources.num_nodes=1",
        "cluster.gpus_per_node=8",
        "cluster.num_nodes=2",
    )
    plan = plan_of(workdir, "--config", BASE, *words)
    assert slots(plan, "policy") == [(0, g) for g in range(8)]
    assert slots(plan, "generation") == [(1, g) for g in range(8)]
    gen = plan.component("generation")
    assert (gen.tensor_parallel_size, gen.pipeline_parallel_size) == (1, 1)
    assert gen.collocation_group is None
    assert any(
        "dedicated inference Policy of 8 Megatron workers" in n
        for n in spec_of(workdir, "--config", BASE, *words).notes
    )
    # the inference cluster's groups are steered to the generation node
    spec = spec_of(workdir, "--config", BASE, *words)
    rule = next(r for r in spec.steer if "generation" in r.what and r.pin == "group")
    assert rule.nodes == (1,) and "grpo_inference_cluster" in rule.name


def test_megatron_generation_splits_the_one_node(workdir: Path) -> None:
    """tests/functional/grpo_megatron_generation_non_colocated.sh: 1 node of 2, generation takes 1 GPU."""
    plan = plan_of(
        workdir,
        "--config",
        BASE,
        *MEGATRON,
        "policy.generation.backend=megatron",
        NON_COLOCATED,
        "policy.generation.colocated.resources.gpus_per_node=1",
        "cluster.gpus_per_node=2",
    )
    assert slots(plan, "policy") == [(0, 0)]
    assert slots(plan, "generation") == [(0, 1)]


def test_megatron_generation_parallelism_is_mcore_generation_configs(workdir: Path) -> None:
    """merged_inference_megatron_cfg: mcore_generation_config's TP wins; Policy's world-size rule applies."""
    words = (
        *MEGATRON,
        "policy.generation.backend=megatron",
        NON_COLOCATED,
        "policy.generation.colocated.resources.gpus_per_node=4",
        "policy.generation.colocated.resources.num_nodes=1",
        "cluster.gpus_per_node=4",
        "cluster.num_nodes=2",
    )
    plan = plan_of(
        workdir, "--config", BASE, *words, "++policy.generation.mcore_generation_config.tensor_model_parallel_size=2"
    )
    assert plan.component("generation").tensor_parallel_size == 2
    assert plan.component("policy").tensor_parallel_size == 1
    err = refused(
        workdir, "--config", BASE, *words, "++policy.generation.mcore_generation_config.tensor_model_parallel_size=3"
    )
    assert "generation's 4 workers" in err.message and "TP(3)" in err.message
    assert err.location is not None and err.location.path == "<--driver>"


def test_megatron_generation_pools_on_node_groups(workdir: Path) -> None:
    blocks = textwrap.dedent(
        """\
        slurm:
          node_groups:
            h100: {partition: h100, gpu_type: h100}
            h20: {partition: h20, gpu_type: h20}
          pools: {training: h100, generation: h20}
        """
    )
    plan = plan_of(
        workdir,
        "--config",
        BASE,
        *MEGATRON,
        "policy.generation.backend=megatron",
        NON_COLOCATED,
        "policy.generation.colocated.resources.gpus_per_node=2",
        "policy.generation.colocated.resources.num_nodes=1",
        "cluster.gpus_per_node=2",
        "cluster.num_nodes=3",
        blocks=blocks,
    )
    assert {p.node_group_label for p in plan.component("policy").processes} == {"h100"}
    assert {p.node_group_label for p in plan.component("generation").processes} == {"h20"}
    assert plan.component("generation").world_size == 2


def test_colocated_megatron_generation_is_the_policy(workdir: Path) -> None:
    plan = plan_of(
        workdir, "--config", BASE, *MEGATRON, "policy.generation.backend=megatron", "cluster.gpus_per_node=4"
    )
    assert [c.name for c in plan.components] == ["policy"]


# ---- PPO (ppo.py setup(): Policy and Value("lm_value") on the train cluster)

PPO = """\
defaults: base.yaml
value:
  dtensor_cfg: {enabled: true, _v2: true, tensor_parallel_size: 2, context_parallel_size: 1}
  megatron_cfg: {enabled: false}
"""


def test_ppo_colocated_policy_value_and_generation_share_the_gpus(workdir: Path) -> None:
    """ppo_math_1B.yaml: one node, everything colocated."""
    config = write(workdir, "examples/configs/ppo.yaml", PPO)
    plan = plan_of(workdir, "--config", config, "cluster.gpus_per_node=4", script="run_ppo.py")
    every = [(0, g) for g in range(4)]
    assert slots(plan, "policy") == slots(plan, "value") == slots(plan, "generation") == every
    assert plan.component("value").tensor_parallel_size == 2
    groups = {plan.component(n).collocation_group for n in ("policy", "value", "generation")}
    assert len(groups) == 1 and None not in groups


def test_ppo_non_colocated_and_its_refusals(workdir: Path) -> None:
    """ppo-...-2n8g-...-noncolocated: the train cluster holds policy and value, generation its own node."""
    config = write(workdir, "examples/configs/ppo.yaml", PPO)
    words = (
        NON_COLOCATED,
        "policy.generation.colocated.resources.gpus_per_node=2",
        "policy.generation.colocated.resources.num_nodes=1",
        "cluster.gpus_per_node=2",
        "cluster.num_nodes=2",
    )
    plan = plan_of(workdir, "--config", config, *words, script="run_ppo.py")
    assert _on(plan, "policy") == _on(plan, "value") == [0]
    assert _on(plan, "generation") == [1]
    err = refused(workdir, "--config", config, *words, "policy.generation.backend=sglang", script="run_ppo.py")
    assert "supports only vLLM" in err.message
    err = refused(workdir, "--config", config, "policy.generation.backend=megatron", script="run_ppo.py")
    assert "requires vllm or sglang" in err.message
    err = refused(workdir, "--config", config, "cluster.gpus_per_node=3", script="run_ppo.py")
    assert "value's 3 workers" in err.message  # Value: world size divisible by TP 2


# ---- distillation (distillation.py setup(): teacher and student Policies on the train cluster)

DISTILLATION = """\
defaults: base.yaml
teacher:
  dtensor_cfg: {enabled: true, tensor_parallel_size: 2, context_parallel_size: 1}
  megatron_cfg: {enabled: false}
"""


def test_distillation_colocated_and_not(workdir: Path) -> None:
    config = write(workdir, "examples/configs/distillation.yaml", DISTILLATION)
    plan = plan_of(workdir, "--config", config, "cluster.gpus_per_node=4", script="run_distillation.py")
    every = [(0, g) for g in range(4)]
    assert slots(plan, "teacher") == slots(plan, "policy") == slots(plan, "generation") == every
    assert plan.component("teacher").tensor_parallel_size == 2
    plan = plan_of(
        workdir,
        "--config",
        config,
        NON_COLOCATED,
        "policy.generation.colocated.resources.gpus_per_node=2",
        "cluster.gpus_per_node=4",
        script="run_distillation.py",
    )
    assert slots(plan, "teacher") == slots(plan, "policy") == [(0, 0), (0, 1)]
    assert slots(plan, "generation") == [(0, 2), (0, 3)]
    err = refused(
        workdir,
        "--config",
        config,
        *MEGATRON,
        "policy.generation.backend=megatron",
        NON_COLOCATED,
        "policy.generation.colocated.resources.gpus_per_node=2",
        "cluster.gpus_per_node=4",
        script="run_distillation.py",
    )
    assert "not supported for Megatron generation" in err.message
    assert err.location is not None and err.location.column > len("uv run examples/run_distillation.py --config ")
    plan = plan_of(
        workdir, "--config", config, "cluster.gpus_per_node=4", script="nemo_gym/run_distillation_nemo_gym.py"
    )
    assert [c.name for c in plan.components] == ["teacher", "policy", "generation"]


# ---- evaluation (evals/eval.py setup(): vLLM on eval_cluster; run_eval.py merges OmegaConf.from_cli)

EVAL = """\
generation:
  backend: vllm
  vllm_cfg: {tensor_parallel_size: 1, pipeline_parallel_size: 1, async_engine: false}
  colocated: {enabled: true}
cluster: {gpus_per_node: 1, num_nodes: 1}
"""


def test_eval_is_vllm_engines_on_every_gpu(workdir: Path) -> None:
    """tests/functional/eval.sh (the default evals/eval.yaml, cluster.gpus_per_node=2) and eval_async.sh."""
    write(workdir, "examples/configs/evals/eval.yaml", EVAL)
    plan = plan_of(workdir, "cluster.gpus_per_node=2", blocks="format: nemo_rl\n", script="run_eval.py")
    assert [c.name for c in plan.components] == ["generation"]
    assert slots(plan, "generation") == [(0, 0), (0, 1)]
    plan = plan_of(
        workdir,
        "cluster.gpus_per_node=2",
        "generation.vllm_cfg.async_engine=True",
        "generation.vllm_cfg.pipeline_parallel_size=2",
        blocks="format: nemo_rl\n",
        script="run_eval.py",
    )
    assert plan.component("generation").pipeline_parallel_size == 2
    # OmegaConf.from_cli adds keys that do not exist (Hydra's rules would refuse it)
    plan = plan_of(workdir, "--config", "examples/configs/evals/eval.yaml", "cluster.extra=1", script="run_eval.py")
    assert plan.component("generation").world_size == 1
    err = refused(
        workdir,
        "--config",
        "examples/configs/evals/eval.yaml",
        "cluster.gpus_per_node=2",
        "generation.vllm_cfg.pipeline_parallel_size=2",
        script="run_eval.py",
    )
    assert "async_engine" in err.message
    err = refused(
        workdir, "--config", "examples/configs/evals/eval.yaml", "generation.backend=sglang", script="run_eval.py"
    )
    assert "only the vLLM backend" in err.message


# ---- the single controller (single_controller_utils/setup.py _build_clusters)


def test_single_controller(workdir: Path) -> None:
    words = ("--config", BASE, NON_COLOCATED, "policy.generation.colocated.resources.gpus_per_node=1")
    plan = plan_of(workdir, *words, "cluster.gpus_per_node=4", script="run_grpo_single_controller.py")
    assert slots(plan, "policy") == [(0, 0), (0, 1), (0, 2)]
    assert slots(plan, "generation") == [(0, 3)]
    # several nodes: resources.num_nodes defaults to 1, and its GPUs per node need not be the cluster's
    plan = plan_of(
        workdir, *words, "cluster.gpus_per_node=4", "cluster.num_nodes=3", script="run_grpo_single_controller.py"
    )
    assert _on(plan, "policy") == [0, 1] and slots(plan, "generation") == [(2, 0)]
    err = refused(
        workdir,
        "--config",
        BASE,
        *MEGATRON,
        "policy.generation.backend=megatron",
        script="run_grpo_single_controller.py",
    )
    assert "only supports vllm or sglang" in err.message


# ---- cross-tokenizer distillation (xtoken_off_policy_distillation.py: one cluster, teacher_<i> + student)

XTOKEN = """\
defaults: base.yaml
teachers:
  - dtensor_cfg: {enabled: true, _v2: true, tensor_parallel_size: 2, context_parallel_size: 1}
  - dtensor_cfg: {enabled: true, _v2: true, tensor_parallel_size: 1, context_parallel_size: 1}
"""


def test_xtoken_teachers_and_student_share_the_cluster(workdir: Path) -> None:
    """xtoken_multiteacher_off_policy_distillation.yaml: two teachers."""
    config = write(workdir, "examples/configs/xtoken.yaml", XTOKEN)
    plan = plan_of(
        workdir, "--config", config, "cluster.gpus_per_node=2", script="run_xtoken_off_policy_distillation.py"
    )
    assert [c.name for c in plan.components] == ["teacher_0", "teacher_1", "policy"]
    assert slots(plan, "teacher_0") == slots(plan, "policy") == [(0, 0), (0, 1)]
    assert plan.component("teacher_0").tensor_parallel_size == 2
    err = refused(
        workdir, "--config", config, "cluster.gpus_per_node=3", script="run_xtoken_off_policy_distillation.py"
    )
    assert "teachers[0]'s 3 workers" in err.message
    # an override names a list element as OmegaConf does (tests/functional/xtoken_off_policy_distillation.sh)
    plan = plan_of(
        workdir,
        "--config",
        config,
        "cluster.gpus_per_node=3",
        "teachers.0.dtensor_cfg.tensor_parallel_size=1",
        "teachers.1.dtensor_cfg.tensor_parallel_size=3",
        script="run_xtoken_off_policy_distillation.py",
    )
    assert plan.component("teacher_0").tensor_parallel_size == 1
    assert plan.component("teacher_1").tensor_parallel_size == 3
    plan = plan_of(
        workdir,
        "--config",
        config,
        "cluster.gpus_per_node=2",
        "~teachers.1",
        script="run_xtoken_off_policy_distillation.py",
    )
    assert [c.name for c in plan.components] == ["teacher_0", "policy"]
    err = refused(workdir, "--config", config, "teachers.2.weight=1", script="run_xtoken_off_policy_distillation.py")
    assert "the config has no key 'teachers.2.weight'" in err.message


# ---- NeMo-Gym's drivers call the same setup()


def test_nemo_gym_grpo_is_grpo(workdir: Path) -> None:
    """tests/functional/grpo_async_gym.sh: examples/nemo_gym/run_grpo_nemo_gym.py."""
    plan = plan_of(workdir, "--config", BASE, "cluster.gpus_per_node=2", script="nemo_gym/run_grpo_nemo_gym.py")
    assert slots(plan, "policy") == slots(plan, "generation") == [(0, 0), (0, 1)]
    err = refused(workdir, "--config", BASE, "++env.nemo_gym.num_gpu_nodes=2", script="nemo_gym/run_grpo_nemo_gym.py")
    assert "placed by NeMo-Gym" in err.message


def test_every_new_cluster_is_steered(workdir: Path) -> None:
    """Each algorithm's RayVirtualCluster names are in the steering rules of its components."""
    config = write(workdir, "examples/configs/ppo.yaml", PPO)
    words = (
        NON_COLOCATED,
        "policy.generation.colocated.resources.gpus_per_node=2",
        "policy.generation.colocated.resources.num_nodes=1",
        "cluster.gpus_per_node=2",
        "cluster.num_nodes=2",
    )
    spec = spec_of(workdir, "--config", config, *words, script="run_ppo.py")
    names = " ".join(r.name for r in spec.steer)
    assert "ppo_train_cluster" in names and "ppo_inference_cluster" in names


# ---- GRPO's on-policy-distillation teachers on their own nodes (opd.reserve_teacher_clusters)

OPD = """\
on_policy_distillation:
  enabled: true
  teacher_model_by_agent_name: {math: Qwen/A, code: Qwen/B, chat: Qwen/A}
  deduplicate_shared_teacher_checkpoints: true
  non_colocated_teachers:
    enabled: true
    default_teacher_cfg: {tensor_model_parallel_size: 2, num_nodes: 1, gpus_per_node: 4}
    teacher_overrides: {code: {num_nodes: 2, gpus_per_node: 2, tensor_model_parallel_size: 4}}
"""


def test_opd_teachers_take_nodes_after_the_policys(workdir: Path) -> None:
    """mopd-qwen3-1.7b-3n8g-megatron-pack.yaml's shape: teachers' clusters of their own nodes."""
    config = write(workdir, "examples/configs/mopd.yaml", "defaults: base.yaml\n" + OPD)
    words = ("--config", config, "policy.generation.vllm_cfg.async_engine=true", "cluster.gpus_per_node=4")
    plan = plan_of(workdir, *words, "cluster.num_nodes=4")
    assert [c.name for c in plan.components] == ["policy", "generation", "teacher_math", "teacher_code"]
    assert _on(plan, "policy") == _on(plan, "generation") == [0]  # 4 nodes - 3 teacher nodes
    assert slots(plan, "teacher_math") == [(1, g) for g in range(4)]  # `chat` shares math's checkpoint
    assert slots(plan, "teacher_code") == [(2, 0), (2, 1), (3, 0), (3, 1)]
    assert plan.component("teacher_code").tensor_parallel_size == 4
    spec = spec_of(workdir, *words, "cluster.num_nodes=4")
    rule = next(r for r in spec.steer if "teacher_code" in r.what and r.pin == "group")
    assert rule.name.startswith("(?:teacher_code)") and rule.nodes == (2, 3)
    err = refused(workdir, *words, "cluster.num_nodes=3")
    assert "policy_nodes > 0 after reserving OPD teacher nodes" in err.message
    err = refused(workdir, "--config", config, "cluster.gpus_per_node=4", "cluster.num_nodes=4")
    assert "require async GRPO" in err.message
    err = refused(workdir, *words, "cluster.num_nodes=4", "cluster.gpus_per_node=2")
    assert "gpus_per_node 4 <= cluster.gpus_per_node 2" in err.message
