"""NeMo-RL's format (hpcplace/config/formats/nemo_rl.py): the command read as NeMo-RL's scripts read it,
the config loaded with its `defaults:` inheritance and Hydra overrides, GRPO/SFT placement as its
setup() asks RayVirtualCluster for it, and its resource asserts refused at the key that set the value.
Small configs written here (CI has no NeMo-RL checkout; tests/planner/test_nemo_rl_agreement.py
compares with NeMo-RL's own code when one is given)."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpcplace.config.formats import load_spec
from hpcplace.errors import HpcplaceError, SpecError
from hpcplace.plan.planner import plan_from_spec

BASE = """\
grpo: {num_prompts_per_step: 8}
policy:
  model_name: m
  dtensor_cfg: {enabled: true, tensor_parallel_size: 1, context_parallel_size: 1}
  megatron_cfg: {enabled: false, tensor_model_parallel_size: 1, pipeline_model_parallel_size: 1,
                 context_parallel_size: 1}
  generation:
    backend: vllm
    vllm_cfg: {tensor_parallel_size: 1, pipeline_parallel_size: 1, async_engine: false}
    colocated:
      enabled: true
      resources: {gpus_per_node: null, num_nodes: null}
data:
  default: {env_name: math}
env:
  math: {num_workers: 8}
cluster:
  gpus_per_node: 1
  num_nodes: 1
"""


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    """A NeMo-RL-like checkout: examples/configs/base.yaml; the driver (and hpcplace) run from its root."""
    configs = tmp_path / "examples" / "configs"
    configs.mkdir(parents=True)
    (configs / "base.yaml").write_text(BASE)
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(old)


def write(root: Path, rel: str, text: str) -> str:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return rel


def spec_of(root: Path, *words: str, blocks: str = "slurm: {partition: gpu}\n", script: str = "run_grpo.py"):
    site = root / "site.yaml"
    site.write_text(blocks)
    return load_spec(site, driver=["uv", "run", f"examples/{script}", *words])


def plan_of(root: Path, *words: str, **kw: str):
    return plan_from_spec(spec_of(root, *words, **kw))


def slots(plan, name: str) -> list[tuple[int, int]]:
    comp = plan.component(name)
    return [(p.cluster_node_rank, p.local_accelerator_rank) for p in comp.processes]


def refused(root: Path, *words: str, **kw: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        spec_of(root, *words, **kw)
    return info.value


# ---- the command and the config


def test_detected_from_the_driver_and_run_in_ray_mode(workdir: Path) -> None:
    spec = spec_of(workdir, "--config", "examples/configs/base.yaml")
    assert spec.source_format == "nemo_rl"
    assert spec.launch.mode == "ray"
    assert spec.launch.driver[:3] == ("uv", "run", "examples/run_grpo.py")
    assert all(not c.command for c in spec.components.values())


def test_defaults_inheritance_merges_as_nemo_rl(workdir: Path) -> None:
    write(workdir, "examples/configs/mid.yaml", "defaults: base.yaml\ncluster: {num_nodes: 2}\n")
    child = write(
        workdir,
        "examples/configs/sub/child.yaml",
        """\
        defaults: [../mid.yaml]
        cluster: {gpus_per_node: 4}
        policy:
          generation:
            vllm_cfg: {tensor_parallel_size: 2}
        """,
    )
    plan = plan_of(workdir, "--config", child)
    assert plan.component("policy").world_size == 8  # 2 nodes (mid) x 4 GPUs (child)
    assert plan.component("generation").tensor_parallel_size == 2  # merged, pipeline_parallel_size kept
    assert plan.component("generation").pipeline_parallel_size == 1


def test_override_marker_replaces_a_section(workdir: Path) -> None:
    child = write(
        workdir,
        "examples/configs/child.yaml",
        """\
        defaults: base.yaml
        cluster:
          _override_: true
          gpus_per_node: 2
        """,
    )
    err = refused(workdir, "--config", child)  # the parent's num_nodes is gone with its section
    assert "cluster.num_nodes" in err.message


def test_missing_value_keeps_the_parent(workdir: Path) -> None:
    child = write(workdir, "examples/configs/child.yaml", 'defaults: base.yaml\ncluster: {gpus_per_node: "???"}\n')
    assert plan_of(workdir, "--config", child).component("policy").world_size == 1


def test_error_in_a_parent_points_at_the_parent(workdir: Path) -> None:
    write(workdir, "examples/configs/bad.yaml", "defaults: base.yaml\ncluster: {gpus_per_node: two}\n")
    child = write(workdir, "examples/configs/child.yaml", "defaults: bad.yaml\n")
    err = refused(workdir, "--config", child)
    assert err.location is not None
    assert err.location.path.endswith("bad.yaml") and err.location.line == 2


def test_overrides_with_hydra_rules_and_located_words(workdir: Path) -> None:
    plan = plan_of(workdir, "--config=examples/configs/base.yaml", "cluster.num_nodes=2", "cluster.gpus_per_node=4")
    assert plan.component("policy").world_size == 8
    err = refused(workdir, "--config", "examples/configs/base.yaml", "cluster.num_node=2")
    assert "did you mean 'cluster.num_nodes'" in err.message
    assert err.location is not None and err.location.path == "<--driver>"
    assert err.location.column == len("uv run examples/run_grpo.py --config examples/configs/base.yaml ") + 1
    err = refused(workdir, "--config", "examples/configs/base.yaml", "+cluster.num_nodes=2")
    assert "already has 'cluster.num_nodes'" in err.message
    plan = plan_of(workdir, "--config", "examples/configs/base.yaml", "++cluster.num_nodes=3")
    assert plan.component("policy").world_size == 3
    err = refused(workdir, "--config", "examples/configs/base.yaml", "~cluster.gpus_per_node")
    assert "cluster.gpus_per_node" in err.message  # deleted, then required by the placement


def test_value_from_override_is_located_at_its_word(workdir: Path) -> None:
    blocks = "launch:\n  driver: [uv, run, examples/run_grpo.py, --config, examples/configs/base.yaml, cluster.num_nodes=x]\n"
    site = workdir / "site.yaml"
    site.write_text(blocks)
    with pytest.raises(SpecError) as info:
        load_spec(site)
    assert info.value.location is not None
    assert (info.value.location.path, info.value.location.line, info.value.location.column) == (
        str(site),
        2,
        blocks.splitlines()[1].index("cluster.num_nodes=x") + 1,
    )


def test_config_path_missing_and_entry_points(workdir: Path) -> None:
    err = refused(workdir, "--config", "examples/configs/nope.yaml")
    assert "not found" in err.message and "directory the driver runs in" in (err.hint or "")
    err = refused(workdir, blocks="format: nemo_rl\n")
    assert "no --config" in err.message and "examples/configs/grpo_math_1B.yaml" in err.message
    write(workdir, "examples/configs/grpo_math_1B.yaml", "defaults: base.yaml\ncluster: {gpus_per_node: 2}\n")
    spec = spec_of(workdir, blocks="format: nemo_rl\n")  # run_grpo.py's own default, beside the script
    assert spec.source.endswith("grpo_math_1B.yaml")
    assert plan_from_spec(spec).component("policy").world_size == 2
    err = refused(workdir, "--config", "examples/configs/base.yaml", blocks="format: nemo_rl\n", script="run_gpro.py")
    assert "not one of NeMo-RL's entry points" in err.message and "did you mean" in err.message
    assert err.location is not None and err.location.column == len("uv run ") + 1


# ---- GRPO placement


def test_colocated_generation_shares_the_policy_gpus(workdir: Path) -> None:
    plan = plan_of(
        workdir,
        "--config",
        "examples/configs/base.yaml",
        "cluster.num_nodes=2",
        "cluster.gpus_per_node=4",
        "policy.generation.vllm_cfg.tensor_parallel_size=2",
    )
    expected = [(n, g) for n in range(2) for g in range(4)]
    assert slots(plan, "policy") == expected
    assert slots(plan, "generation") == expected
    assert plan.component("generation").tensor_parallel_size == 2
    assert plan.component("policy").collocation_group == plan.component("generation").collocation_group is not None


def test_non_colocated_generation_takes_whole_nodes(workdir: Path) -> None:
    plan = plan_of(
        workdir,
        "--config",
        "examples/configs/base.yaml",
        "cluster.num_nodes=3",
        "cluster.gpus_per_node=2",
        "policy.generation.colocated.enabled=false",
        "policy.generation.colocated.resources.num_nodes=1",
        "policy.generation.colocated.resources.gpus_per_node=2",
    )
    assert slots(plan, "policy") == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert slots(plan, "generation") == [(2, 0), (2, 1)]


DYNAMO = (
    "policy.generation.backend=dynamo",
    "+policy.generation.vllm_cfg.expert_parallel_size=1",
    "policy.generation.colocated.enabled=false",
    "cluster.num_nodes=2",
    "cluster.gpus_per_node=4",
    "policy.generation.colocated.resources.num_nodes=1",
    "policy.generation.colocated.resources.gpus_per_node=4",
)


def test_dynamo_engines_are_tp_pp_consecutive_gpus_of_a_generation_node(workdir: Path) -> None:
    # FixedDynamoWorkerPool: per inference placement group (a node), engines of TP*PP bundles, never across nodes
    plan = plan_of(
        workdir, "--config", "examples/configs/base.yaml", *DYNAMO, "policy.generation.vllm_cfg.tensor_parallel_size=2"
    )
    assert slots(plan, "policy") == [(0, g) for g in range(4)]
    assert slots(plan, "generation") == [(1, g) for g in range(4)]
    assert plan.component("generation").tensor_parallel_size == 2
    assert any("generation backend dynamo: one managed Dynamo vLLM worker per engine of 2" in w for w in plan.warnings)


@pytest.mark.parametrize(
    ("words", "says"),
    [
        (("policy.generation.colocated.enabled=true",), "colocated.enabled=true with policy.generation.backend='dynamo'"),
        (("policy.generation.vllm_cfg.tensor_parallel_size=8",), "tp*pp=8 exceeds cluster.num_gpus_per_node=4"),
        (("policy.generation.vllm_cfg.tensor_parallel_size=3",), "4 GPU bundles, which is not divisible by engine_world_size=3"),
        (
            ("policy.generation.vllm_cfg.tensor_parallel_size=2", "policy.generation.vllm_cfg.expert_parallel_size=4"),
            "expert_parallel_size to be 1 or equal tensor_parallel_size",
        ),
        (("+grpo.async_grpo={in_flight_weight_updates: true}",), "in_flight_weight_updates=true with"),
    ],
)  # fmt: skip
def test_dynamos_own_refusals(workdir: Path, words: tuple[str, ...], says: str) -> None:
    err = refused(workdir, "--config", "examples/configs/base.yaml", *DYNAMO, *words)
    assert says in err.message and err.location is not None


def test_non_colocated_on_one_node_splits_it(workdir: Path) -> None:
    plan = plan_of(
        workdir,
        "--config",
        "examples/configs/base.yaml",
        "cluster.gpus_per_node=8",
        "policy.generation.colocated.enabled=false",
        "policy.generation.colocated.resources.gpus_per_node=2",
    )
    assert slots(plan, "policy") == [(0, g) for g in range(6)]
    assert slots(plan, "generation") == [(0, 6), (0, 7)]


def test_reward_model_nodes(workdir: Path) -> None:
    words = (
        "--config",
        "examples/configs/base.yaml",
        "data.default.env_name=reward_model",
        "+env.reward_model={resources: {num_nodes: 1, gpus_per_node: 2}}",
    )
    plan = plan_of(workdir, *words, "cluster.num_nodes=3", "cluster.gpus_per_node=4")
    assert slots(plan, "policy") == [(n, g) for n in range(2) for g in range(4)]
    assert slots(plan, "reward_model") == [(2, 0), (2, 1)]
    # steered: the environment actor's RayVirtualCluster `grpo_reward_model_cluster` on the reward model's node
    from hpcplace.runtime.steer_hook import pin_targets

    def steered(name: str, bundles: int) -> list[list[int]]:
        found = (pin_targets(r.to_json(), name, bundles, None)[0] for r in plan.steer)
        return [nodes for nodes in found if nodes is not None]

    assert steered("grpo_reward_model_cluster-node0", 2) == [[2, 2]]
    assert steered("grpo_policy_cluster-node1", 4) == [[1] * 4]
    assert steered("grpo_policy_cluster-unified", 8) == [[0] * 4 + [1] * 4]
    assert steered("grpo_policy_cluster-node2", 4) == []  # no third policy node: left to Ray, logged
    plan = plan_of(workdir, *words, "cluster.gpus_per_node=4")  # one node: the reward model takes its last GPUs
    assert slots(plan, "policy") == [(0, 0), (0, 1)]
    assert slots(plan, "reward_model") == [(0, 2), (0, 3)]
    err = refused(workdir, *words, "cluster.num_nodes=1", "cluster.gpus_per_node=2")
    assert "NeMo-RL asserts" in err.message and err.location is not None and err.location.path == "<--driver>"


def test_heterogeneous_pools_through_the_slurm_block(workdir: Path) -> None:
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
        "examples/configs/base.yaml",
        "cluster.num_nodes=3",
        "cluster.gpus_per_node=2",
        "policy.generation.colocated.enabled=false",
        "policy.generation.colocated.resources.num_nodes=1",
        "policy.generation.colocated.resources.gpus_per_node=2",
        blocks=blocks,
    )
    groups = {g.label: (g.partition, g.num_nodes, g.gpu_type) for g in plan.cluster.node_groups}
    assert groups == {"h100": ("h100", 2, "h100"), "h20": ("h20", 1, "h20")}
    assert {p.node_group_label for p in plan.component("policy").processes} == {"h100"}
    assert {p.node_group_label for p in plan.component("generation").processes} == {"h20"}
    bad = blocks.replace("generation: h20", "generation: h2")
    err = refused(workdir, "--config", "examples/configs/base.yaml", blocks=bad)
    assert "no node group 'h2'" in err.message and "did you mean 'h20'" in err.message
    err = refused(workdir, "--config", "examples/configs/base.yaml", blocks=blocks)  # colocated: no generation nodes
    assert "no generation nodes of its own" in err.message


@pytest.mark.parametrize(
    ("words", "key", "says"),
    [
        (
            (
                "cluster.num_nodes=2",
                "policy.generation.colocated.enabled=false",
                "policy.generation.colocated.resources.num_nodes=1",
            ),
            "gpus_per_node",
            "equal to cluster.gpus_per_node",
        ),
        (
            (
                "cluster.num_nodes=2",
                "cluster.gpus_per_node=2",
                "policy.generation.colocated.enabled=false",
                "policy.generation.colocated.resources.num_nodes=2",
                "policy.generation.colocated.resources.gpus_per_node=2",
            ),
            "num_nodes",
            "train_nodes > 0",
        ),
        (
            (
                "cluster.gpus_per_node=2",
                "policy.generation.colocated.enabled=false",
                "policy.generation.colocated.resources.gpus_per_node=2",
            ),
            "gpus_per_node",
            "GPUs are left for training",
        ),
        (
            ("cluster.num_nodes=2", "cluster.gpus_per_node=3", "policy.generation.vllm_cfg.tensor_parallel_size=2"),
            "tensor_parallel_size",
            "does not divide",
        ),
        (
            ("cluster.gpus_per_node=4", "policy.generation.vllm_cfg.pipeline_parallel_size=2"),
            "pipeline_parallel_size",
            "async_engine",
        ),
        (
            (
                "cluster.num_nodes=2",
                "cluster.gpus_per_node=2",
                "policy.generation.backend=trtllm",
                "+policy.generation.trtllm_cfg={tensor_parallel_size: 4}",
            ),
            "tensor_parallel_size",
            "cross-node tensor parallelism is only supported for non-colocated",
        ),
        (
            (
                "policy.generation.backend=trtllm",
                "+policy.generation.trtllm_cfg={tensor_parallel_size: 1, pipeline_parallel_size: 2}",
            ),
            "pipeline_parallel_size",
            "does not support pipeline parallelism",
        ),
        (
            ("cluster.gpus_per_node=3", "policy.dtensor_cfg.tensor_parallel_size=2"),
            "tensor_parallel_size",
            "PP(1) * CP(1) * TP(2)",
        ),
    ],
)
def test_nemo_rl_asserts_are_refused_at_their_keys(workdir: Path, words: tuple[str, ...], key: str, says: str) -> None:
    err = refused(workdir, "--config", "examples/configs/base.yaml", *words)
    assert says in err.message
    assert err.location is not None
    if err.location.path.endswith("base.yaml"):
        line = BASE.splitlines()[err.location.line - 1]
        assert key in line[: err.location.column + len(key)]
    else:
        assert err.location.path == "<--driver>"


# ---- SFT


def test_sft_places_one_worker_per_gpu(workdir: Path) -> None:
    cfg = write(
        workdir,
        "examples/configs/sft.yaml",
        BASE.split("  generation:")[0] + "cluster: {gpus_per_node: 2, num_nodes: 2}\n",
    )
    plan = plan_of(workdir, "--config", cfg, script="run_sft.py")
    assert [c.name for c in plan.components] == ["policy"]
    assert slots(plan, "policy") == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_inheritance_files_listed_and_cycles_refused(workdir: Path) -> None:
    child = write(workdir, "examples/configs/child.yaml", "defaults: base.yaml\ncluster: {num_nodes: 2}\n")
    spec = spec_of(workdir, "--config", child, "cluster.gpus_per_node=2")
    assert spec.composed == (
        "examples/configs/base.yaml",
        "examples/configs/child.yaml",
        "override cluster.gpus_per_node=2",
    )
    write(workdir, "examples/configs/a.yaml", "defaults: b.yaml\n")
    write(workdir, "examples/configs/b.yaml", "defaults: [a.yaml]\n")
    err = refused(workdir, "--config", "examples/configs/a.yaml")
    assert "inherits from itself" in err.message
    assert err.location is not None and err.location.path == "examples/configs/b.yaml"
    err = refused(workdir, "--config", write(workdir, "examples/configs/lost.yaml", "defaults: nowhere.yaml\n"))
    assert "parent config 'nowhere.yaml' not found" in err.message
    assert err.location is not None and (err.location.path, err.location.line) == ("examples/configs/lost.yaml", 1)


def test_sglang_engines_take_the_first_num_gpus(workdir: Path) -> None:
    sglang = (
        "policy.generation.backend=sglang",
        "+policy.generation.sglang_cfg={sglang_server_config: {num_gpus: 4, num_gpus_per_engine: 2}}",
    )
    plan = plan_of(
        workdir, "--config", "examples/configs/base.yaml", "cluster.num_nodes=2", "cluster.gpus_per_node=4", *sglang
    )
    assert slots(plan, "generation") == [(0, 0), (0, 1), (0, 2), (0, 3)]
    assert plan.component("generation").tensor_parallel_size == 2
    assert slots(plan, "policy") == [(n, g) for n in range(2) for g in range(4)]
    err = refused(workdir, "--config", "examples/configs/base.yaml", "cluster.gpus_per_node=2", *sglang)
    assert "the generation cluster has 2 GPUs" in err.message
    assert err.location is not None and err.location.path == "<--driver>"


def test_a_stated_framework_version_is_checked_where_written(workdir: Path) -> None:
    spec = spec_of(workdir, "--config", "examples/configs/base.yaml", blocks="hpcplace: {framework_version: 0.6.0}\n")
    assert spec.source_format == "nemo_rl"
    err = refused(workdir, "--config", "examples/configs/base.yaml", blocks="hpcplace:\n  framework_version: latest\n")
    assert "NeMo-RL version 'latest' is not a version" in err.message
    assert err.location is not None and (err.location.line, err.location.column) == (2, 22)


# ---- expert parallelism and engines: what the fabric check (hpcplace/plan/topology.py) reads

MEGATRON = (
    "--config",
    "examples/configs/base.yaml",
    "cluster.num_nodes=4",
    "cluster.gpus_per_node=4",
    "policy.dtensor_cfg.enabled=false",
    "policy.megatron_cfg.enabled=true",
    "policy.megatron_cfg.tensor_model_parallel_size=2",
)
BLOCK_OF_ONE_NODE = "slurm: {partition: gb200, topology: {block: 1}}\n"


def test_megatrons_expert_parallel_sizes_with_a_null_etp_being_megatrons_tp(workdir: Path) -> None:
    # _apply_moe_config passes both keys to Megatron; a null ETP is Megatron-core's TP (not TP*CP, the plan's TP)
    words = (
        *MEGATRON,
        "policy.megatron_cfg.context_parallel_size=2",
        "+policy.megatron_cfg.expert_model_parallel_size=4",
    )
    comp = plan_of(workdir, *words, "+policy.megatron_cfg.expert_tensor_parallel_size=null").component("policy")
    assert (comp.tensor_parallel_size, comp.expert_parallel_size, comp.expert_tensor_parallel_size) == (4, 4, 2)
    comp = plan_of(workdir, *words, "+policy.megatron_cfg.expert_tensor_parallel_size=1").component("policy")
    assert (comp.expert_parallel_size, comp.expert_tensor_parallel_size, comp.gpus_per_engine) == (4, 1, None)
    comp = plan_of(workdir, *MEGATRON, "+policy.megatron_cfg.expert_model_parallel_size=1").component("policy")
    assert (comp.expert_parallel_size, comp.expert_tensor_parallel_size) == (1, None)  # no MoE all-to-all: as before


def test_an_expert_parallel_group_wider_than_a_block_is_reported(workdir: Path) -> None:
    # ETP 2 x EP 4 = 8 consecutive GPUs = 2 nodes of 4: blocks of one node split each of the 2 groups
    words = (*MEGATRON, "+policy.megatron_cfg.expert_model_parallel_size=4")
    plan = plan_of(workdir, *words, blocks=BLOCK_OF_ONE_NODE)
    found = [(c.component, c.what, c.ranks) for c in plan.topology_crossings]
    assert found == [("policy", "expert-parallel group", tuple(range(g * 8, g * 8 + 8))) for g in range(2)]
    assert any("2 expert-parallel groups cross the fabric" in w for w in plan.warnings)
    assert plan_of(workdir, *words, blocks="slurm: {partition: gb200, topology: {block: 2}}\n").topology_crossings == ()
    with pytest.raises(HpcplaceError) as err:  # 16 GPUs are no whole number of ETP 2 x EP 3 x PP 1 groups
        plan_of(workdir, *MEGATRON, "+policy.megatron_cfg.expert_model_parallel_size=3")
    assert "= 6 does not divide its 16 GPUs" in str(err.value)


def test_dtensor_v2_expert_parallelism_keeps_experts_whole(workdir: Path) -> None:
    # Automodel's moe_mesh: EP innermost of the non-PP ranks, experts unsplit (ETP 1); DTensor v1 has no EP
    words = (
        "--config",
        "examples/configs/base.yaml",
        "cluster.gpus_per_node=8",
        "+policy.dtensor_cfg.expert_parallel_size=8",
    )
    comp = plan_of(workdir, *words, "+policy.dtensor_cfg._v2=true").component("policy")
    assert (comp.expert_parallel_size, comp.expert_tensor_parallel_size) == (8, 1)
    assert plan_of(workdir, *words).component("policy").expert_parallel_size == 1


def test_vllm_engines_and_their_expert_parallel_data_parallel_group(workdir: Path) -> None:
    # an engine (a tied worker group) is TP*PP consecutive GPUs; EP > TP makes EP/TP engines one vLLM data-parallel
    # group (VLLM_DP_SIZE) whose all-to-all spans EP consecutive GPUs, experts whole
    words = ("--config", "examples/configs/base.yaml", "cluster.num_nodes=2", "cluster.gpus_per_node=4")
    ep = ("policy.generation.vllm_cfg.tensor_parallel_size=2", "+policy.generation.vllm_cfg.expert_parallel_size=8")
    gen = plan_of(workdir, *words, *ep).component("generation")
    assert (gen.tensor_parallel_size, gen.expert_parallel_size, gen.expert_tensor_parallel_size) == (2, 8, 1)
    assert gen.gpus_per_engine is None  # as wide as its tensor-parallel group
    plan = plan_of(workdir, *words, *ep, blocks=BLOCK_OF_ONE_NODE)
    assert [(c.component, c.what) for c in plan.topology_crossings] == [("generation", "expert-parallel group")]
    err = refused(workdir, *words, *ep, "policy.generation.vllm_cfg.async_engine=true")
    assert "expert_parallel_size 8 > tensor_parallel_size 2 with async_engine" in err.message
    assert err.location is not None and err.location.path == "<--driver>"
    pp = ("policy.generation.vllm_cfg.tensor_parallel_size=2", "policy.generation.vllm_cfg.pipeline_parallel_size=4")
    plan = plan_of(workdir, *words, *pp, "policy.generation.vllm_cfg.async_engine=true", blocks=BLOCK_OF_ONE_NODE)
    gen = plan.component("generation")
    assert (gen.gpus_per_engine, gen.expert_parallel_size) == (8, 1)
    assert [(c.component, c.what, c.ranks) for c in plan.topology_crossings] == [
        ("generation", "inference engine", tuple(range(8)))
    ]
