"""Upstream configs as their users keep them (issue 10): AReaL's per-engine `backend:` and MoE allocations,
ROLL's env managers and detected GPU count, RLinf's non-model-parallel placement classes, Hydra composition
and overrides. Fixtures under tests/fixtures/ are ours (not copies of upstream files)."""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import pytest

from hpcplace.cli import main
from hpcplace.config.formats import detect_format, load_spec
from hpcplace.errors import HpcplaceError
from hpcplace.plan.planner import plan_from_file, plan_from_spec
from hpcplace.slurm.slurm_job import lower
from tests.planner.conftest import Yaml, gpus_of

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HYDRA = FIXTURES / "hydra"


def gpu_ranks(plan, name: str) -> list[list[int]]:  # type: ignore[no-untyped-def]
    """Per process: cluster-wide GPU indices (8 GPUs per node in these fixtures)."""
    return [[n * 8 + g for n, g in proc] for proc in gpus_of(plan, name)]


# ================================================================================================
# AReaL, current format


def test_areal_per_engine_backends() -> None:
    plan = plan_from_file(FIXTURES / "areal_backend.yaml")
    assert plan.source_format == "areal"
    assert gpu_ranks(plan, "actor") == [[0], [1], [2], [3]]
    assert gpu_ranks(plan, "ref") == gpu_ranks(plan, "actor")  # ${actor.backend}, colocation target actor
    assert gpu_ranks(plan, "critic") == [[4], [5], [6], [7]]  # empty backend inherits the actor's, own GPUs
    assert gpu_ranks(plan, "rollout") == [[8, 9, 10, 11], [12, 13, 14, 15]]  # 2 servers x tp4
    assert [g.components for g in plan.collocation_groups] == [("actor", "ref")]


def test_areal_moe_allocation_uses_attn_world() -> None:
    plan = plan_from_file(FIXTURES / "areal_moe.yaml")
    actor = plan.component("actor")
    assert actor.world_size == 32 and (actor.tensor_parallel_size, actor.pipeline_parallel_size) == (2, 4)
    assert plan.component("rollout").world_size == 8
    assert [c.name for c in plan.components] == ["actor", "rollout"]
    assert any("kl_ctl is 0" in w for w in plan.warnings)  # the ref engine is not created, and the plan says so


def test_areal_detected_without_allocation_mode() -> None:
    data = {"cluster": {"n_nodes": 1, "n_gpus_per_node": 8}, "actor": {"backend": "fsdp:d8"}}
    assert detect_format(data) == "areal"


@pytest.mark.parametrize(
    "backend, message",
    [
        ("megatron:(attn:d4p4t2|ffn:d2p2e4)", "pipeline size differs between attn (p4) and ffn (p2)"),
        ("megatron:(attn:d4p4t2|ffn:d3p4e4)", "attn uses 32 GPUs but ffn uses 48"),
        ("fsdp:(attn:d4|ffn:d4)", "needs megatron or archon"),
        ("fsdp:d2p2", "FSDP supports only data, tensor and context parallelism"),
        ("sglang:d2e2", "invalid or repeated dimension 'e'"),
        ("tpu:d8", "unknown backend 'tpu'"),
    ],
)
def test_areal_backend_errors_point_at_the_engine(yml: Yaml, backend: str, message: str) -> None:
    path = yml.write(f'cluster: {{n_nodes: 8, n_gpus_per_node: 8}}\nactor:\n  backend: "{backend}"\n')
    err = yml.error(path)
    assert message in err.message and str(err).startswith(f"{path}:3:"), str(err)


def _areal_parser():  # type: ignore[no-untyped-def]
    """AReaL's own allocation parser (areal/api/alloc_mode.py of the installed areal==1.0.4). Its module
    imports two small names from areal.api.cli_args, whose import pulls AReaL's whole GPU stack: only those
    are provided here; the parser itself is AReaL's code, run unchanged."""
    spec = importlib.util.find_spec("areal")
    if spec is None or spec.submodule_search_locations is None:
        pytest.skip("areal==1.0.4 is not installed (scripts/test-all.sh installs tests/requirements-frameworks.txt)")
    pytest.importorskip("lark")
    source = Path(next(iter(spec.submodule_search_locations))) / "api" / "alloc_mode.py"

    class SchedulingStrategyType(str, Enum):  # as in areal.api.cli_args
        separation = "separation"
        colocation = "colocation"

    @dataclass
    class SchedulingStrategy:  # as in areal.api.cli_args (the fields the parser touches)
        type: str = "separation"
        target: str | None = None
        fork: bool = True

    import logging

    fakes = {
        "areal": types.ModuleType("areal"),
        "areal.api": types.ModuleType("areal.api"),
        "areal.api.cli_args": types.ModuleType("areal.api.cli_args"),
        "areal.utils": types.ModuleType("areal.utils"),
    }
    fakes["areal.api.cli_args"].SchedulingStrategy = SchedulingStrategy  # type: ignore[attr-defined]
    fakes["areal.api.cli_args"].SchedulingStrategyType = SchedulingStrategyType  # type: ignore[attr-defined]
    fakes["areal.utils"].logging = logging  # type: ignore[attr-defined]
    saved = {k: sys.modules.get(k) for k in fakes}
    sys.modules.update(fakes)
    try:
        loader_spec = importlib.util.spec_from_file_location("areal_alloc_mode_under_test", source)
        module = importlib.util.module_from_spec(loader_spec)  # type: ignore[arg-type]
        loader_spec.loader.exec_module(module)  # type: ignore[union-attr]
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return module


@pytest.mark.parametrize(
    "backend",
    [
        "fsdp:d4",
        "fsdp:d4p1t1",
        "fsdp:d2t2c2",
        "sglang:d2t4",
        "vllm:d1p2t2",
        "sglang:d8",
        "megatron:d2p2t4e4",
        "megatron:(attn:d4p4t2|ffn:d2p4e4)",
        "megatron:(attn:d1p12t4|ffn:d1p12e4)",
        "archon:(attn:d1p6t1c1|ffn:d1p6t1e1)",
        "megatron:(attn:d2p2t2c2|ffn:p2t4e2)",
        "megatron:(attn:d8t2|ffn:e8t2)",
        "archon:d4t2e4",
    ],
)
def test_areal_allocations_match_areal_parser(yml: Yaml, backend: str) -> None:
    alloc = _areal_parser().ModelAllocation.from_str(backend, name="actor")
    engine = "rollout" if backend.startswith(("sglang", "vllm")) else "actor"
    plan = plan_from_file(
        yml.write(f'cluster: {{n_nodes: 8, n_gpus_per_node: 8}}\n{engine}:\n  backend: "{backend}"\n')
    )
    comp = plan.component(engine)
    par = alloc.parallel
    gpus = sum(len(p.local_hardware_ranks) for p in comp.processes)
    assert gpus == par.world_size
    assert (comp.tensor_parallel_size, comp.pipeline_parallel_size) == (
        par.tensor_parallel_size,
        par.pipeline_parallel_size,
    )
    per_process = par.tensor_parallel_size * par.pipeline_parallel_size if engine == "rollout" else 1
    assert comp.world_size == par.world_size // per_process
    # the fabric check's expert-parallel groups: AReaL's EP and expert TP (its default 1, not the attention's t)
    assert (comp.expert_parallel_size, comp.expert_tensor_parallel_size) == (
        par.expert_parallel_size,
        par.expert_tensor_parallel_size if par.expert_parallel_size > 1 else None,
    )


@pytest.mark.parametrize(
    "allocation", ["sglang:d8+d8", "sglang:d8p1t1+d8p1t1", "vllm:d4p1t2+d4p1t1c2", "sglang:d4|(attn:d1p2t2|ffn:d1p2e2)"]
)
def test_areal_allocations_without_a_backend_are_refused_as_areal_refuses_them(yml: Yaml, allocation: str) -> None:
    """AReaL >= 1.0 has no auto-backend (upstream examples such as examples/scaffolding still use it)."""
    with pytest.raises(Exception, match="Backend must be explicitly specified"):
        _areal_parser()._AllocationMode.from_str(allocation)
    err = yml.error(yml.write(f'allocation_mode: "{allocation}"\ncluster: {{n_nodes: 2, n_gpus_per_node: 8}}\n'))
    assert "names no backend: AReaL requires it explicitly" in err.message and "write the backend first" in err.hint


# ================================================================================================
# ROLL


def test_roll_env_managers_and_node_gpus_from_slurm() -> None:
    plan = plan_from_file(FIXTURES / "roll_env_managers.yaml")
    sizes = {c.name: c.world_size for c in plan.components}
    # ROLL: ceil(num_env_groups * group_size / max_env_num_per_worker); vLLM: one worker per tp GPUs
    assert sizes == {"actor_train": 8, "actor_infer": 4, "train_env_manager": 64, "val_env_manager": 2}
    assert gpu_ranks(plan, "actor_infer")[0] == [8, 9]
    assert plan.cluster.node_groups[0].gpus_per_node == (8, 8)


# ================================================================================================
# RLinf placement classes


def test_rlinf_sft_actor_only_with_interpolated_critic_tp() -> None:
    plan = plan_from_file(FIXTURES / "rlinf_sft.yaml")
    assert plan.component("actor").world_size == 8 and plan.weight_sync is None


def test_rlinf_eval_packs_rollout_by_tp() -> None:
    """ModelParallelEvalComponentPlacement: rollout = Packed(first, last, num_hardware_per_process=tp)."""
    plan = plan_from_file(FIXTURES / "rlinf_eval.yaml")
    assert gpu_ranks(plan, "rollout") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert plan.component("reward").world_size == 8


def test_rlinf_multi_agent_engines() -> None:
    plan = plan_from_file(FIXTURES / "rlinf_multiagent.yaml")
    assert gpu_ranks(plan, "rollout") == [[0, 1], [2, 3]]
    assert gpu_ranks(plan, "rollout_judge") == [[4, 5], [6, 7]]  # rollout's process size, not its own tp
    assert any("multi-agent" in w for w in plan.warnings)


JUDGE_TP = "rollout_judge:\n  tensor_parallel_size: 1"
SECOND_ENGINE = ("rollout_judge: 4-7", "rollout_judge: 4-7\n    rollout_x: 6-7")


@pytest.mark.parametrize(
    "changes, message",
    [
        ([("actor,reward: all", "actor: all")], "needs a placement for reward"),
        ([("actor,reward: all", "actor: all\n    reward: 0-3")], "actor and reward must be placed on the same GPUs"),
        ([("actor,reward: all", "actor,reward: 0-5")], "rollout_judge's GPUs are not all among the actor's"),
        ([SECOND_ENGINE], "'rollout_x' has no `rollout_x:` section"),
        (
            [SECOND_ENGINE, (JUDGE_TP, JUDGE_TP + "\nrollout_x: {tensor_parallel_size: 1}")],
            "rollout_x and rollout_judge share GPU 6",
        ),
        ([(JUDGE_TP, "rollout_judge:\n  tensor_parallel_size: 3")], "not divisible by its tensor_parallel_size 3"),
    ],
)
def test_rlinf_multi_agent_checks(yml: Yaml, changes: list[tuple[str, str]], message: str) -> None:
    """RLinf's MultiAgentModelParallelComponentPlacement refuses these; so does the plan, naming the rule."""
    text = (FIXTURES / "rlinf_multiagent.yaml").read_text(encoding="utf-8")
    for old, new in changes:
        assert old in text
        text = text.replace(old, new)
    err = yml.error(yml.write(text))
    assert message in err.message, err.message


RLINF = """
cluster:
  num_nodes: 2
  component_placement: {placement}
  node_groups:
    - label: {label}
      node_ranks: {ranks}
slurm: {{partition: a800, gpus_per_node: 8}}
"""


def test_rlinf_cluster_label_means_every_node(yml: Yaml) -> None:
    plan = plan_from_file(
        yml.write(RLINF.format(placement="{actor: {node_group: cluster, placement: all}}", label="a", ranks="0"))
    )
    assert plan.component("actor").world_size == 16
    err = yml.error(yml.write(RLINF.format(placement="{actor: all}", label="cluster", ranks="0")))
    assert "node group label 'cluster' is reserved" in err.message


@pytest.mark.parametrize("ranks", ["''", "','", "null"])
def test_rlinf_empty_node_ranks(yml: Yaml, ranks: str) -> None:
    err = yml.error(yml.write(RLINF.format(placement="{actor: all}", label="a", ranks=ranks)))
    assert "node_ranks is empty" in err.message


def test_rlinf_inference_checks(yml: Yaml) -> None:
    base = (
        "cluster:\n  num_nodes: 1\n  component_placement: {actor: 0-3, rollout: 4-5, inference: 6-7, reward: 4-5}\n"
        "slurm: {partition: a800, gpus_per_node: 8}\nactor: {model: {tensor_model_parallel_size: 2}}\n"
    )
    err = yml.error(yml.write(base + "algorithm: {recompute_logprobs: false}\n"))
    assert "recompute_logprobs is false" in err.message
    err = yml.error(yml.write(base + "inference: {model: {tensor_model_parallel_size: 4}}\n"))
    assert "inference tensor-parallel size 4 is larger than the inference world size 2" in err.message
    assert plan_from_file(yml.write(base)).component("inference").world_size == 2


# ================================================================================================
# Hydra composition, interpolation, overrides


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCPLACE_FIXTURE_SHARED", str(HYDRA / "shared"))
    monkeypatch.delenv("SOME_UNSET_VARIABLE_PLACEMENT_NEVER_READS", raising=False)


def test_hydra_defaults_searchpath_and_interpolations(shared: None) -> None:
    plan = plan_from_file(HYDRA / "main.yaml")
    assert gpu_ranks(plan, "actor") == [[i] for i in range(8)]
    assert plan.component("actor").tensor_parallel_size == 2  # from model/small.yaml @actor.model
    assert gpu_ranks(plan, "rollout") == [[8, 9], [10, 11], [12, 13]]  # tp = ${actor.model...} = 2
    assert plan.weight_sync is not None and plan.weight_sync.mode == "disaggregated"
    composed = " ".join(plan.composed)
    assert "model/small.yaml @actor.model" in composed and "shared/placement/disaggregated.yaml @cluster" in composed


def test_hydra_overrides_on_the_command_line(shared: None) -> None:
    spec = load_spec(HYDRA / "main.yaml", overrides=["cluster.num_nodes=3", "slurm.gpus_per_node=4"])
    assert spec.cluster.node_groups[0].gpus_per_node == (4, 4, 4)
    assert "override cluster.num_nodes=3" in spec.composed
    composed = load_spec(HYDRA / "main.yaml", overrides=["model@actor.model=large"])
    with pytest.raises(HpcplaceError) as info:
        plan_from_spec(composed)
    err = info.value
    # tp 4 from model/large.yaml: the rollout's 6 GPUs no longer split; the error names the composed file
    assert str(err).startswith(f"{(HYDRA / 'shared' / 'placement' / 'disaggregated.yaml').resolve()}:4:12: rollout")


def test_hydra_error_locations(shared: None, tmp_path: Path) -> None:
    with pytest.raises(HpcplaceError) as info:
        load_spec(HYDRA / "missing_default.yaml")
    assert "Could not load 'model/does_not_exist'" in info.value.message
    # the entry itself (line 2, after `- `), and the options the config group has
    assert str(info.value).startswith(f"{HYDRA / 'missing_default.yaml'}:2:5")
    assert info.value.hint == (
        f"config group 'model' has no option 'does_not_exist'; its options are: large, small "
        f"(the .yaml files in {HYDRA.resolve() / 'model'})"
    )
    with pytest.raises(HpcplaceError) as info:
        load_spec(HYDRA / "twice.yaml")
    assert "component 'actor' is placed twice (first at " in info.value.message
    assert "collocated.yaml:3:3" in info.value.message


def test_hydra_searchpath_env_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HPCPLACE_FIXTURE_SHARED", raising=False)
    with pytest.raises(HpcplaceError) as info:
        load_spec(HYDRA / "main.yaml")
    assert "needs the environment variable HPCPLACE_FIXTURE_SHARED" in info.value.message
    assert "export HPCPLACE_FIXTURE_SHARED=" in (info.value.hint or "")


def test_unresolvable_value_placement_reads(yml: Yaml) -> None:
    path = yml.write(
        "cluster:\n  num_nodes: ${oc.env:HPCPLACE_NOT_SET_ANYWHERE}\n"
        "  component_placement: {actor: all}\nslurm: {partition: a800, gpus_per_node: 8}\n"
    )
    err = yml.error(path)
    assert str(err).startswith(f"{path}:2:14: `cluster.num_nodes`: cannot resolve")


def test_cli_overrides_after_config_and_header(
    shared: None, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["plan", str(HYDRA / "main.yaml"), "cluster.num_nodes=3"]) == 0
    out = capsys.readouterr().out
    assert "composed: override cluster.num_nodes=3" in out and "nodes=3" in out
    assert (
        main(
            [
                "render",
                str(FIXTURES / "areal_moe.yaml"),
                "-o",
                str(tmp_path / "run"),
                "--driver",
                "--",
                "python",
                "main.py",
            ]
        )
        == 0
    )
    script = (tmp_path / "run" / "job.sbatch").read_text()
    assert "--partition" not in script and "(none given: Slurm default)" in script
    assert main(["plan", str(HYDRA / "main.yaml"), "not-an-override"]) == 2
    assert "unexpected argument 'not-an-override'" in capsys.readouterr().err
    assert main(["plan", "cluster.num_nodes=3", str(HYDRA / "main.yaml")]) == 2
    assert "the config comes first" in capsys.readouterr().err
    assert main(["plan", str(HYDRA / "main.yaml"), "model=large"]) == 2  # Hydra's way out is kept
    assert "Could not override 'model'. Did you mean to override model@actor.model?" in capsys.readouterr().err
    # after options too, in the order given (the Hydra habit: `--json cluster.num_nodes=4`)
    assert main(["plan", str(HYDRA / "main.yaml"), "cluster.num_nodes=2", "--json", "cluster.num_nodes=4"]) == 0
    out = capsys.readouterr().out
    assert out.index("override cluster.num_nodes=2") < out.index("override cluster.num_nodes=4")
    assert '"num_nodes": 4' in out
    with pytest.raises(SystemExit):
        main(["plan", str(HYDRA / "main.yaml"), "--json", "--bogus", "cluster.num_nodes=4"])
    assert "unrecognized arguments: --bogus cluster.num_nodes=4" in capsys.readouterr().err


@pytest.mark.parametrize(
    "override, message",
    [
        ("cluster.num_node=4", "the config has no key 'cluster.num_node'; did you mean 'cluster.num_nodes'?"),
        (
            "actor.model.tensor_model_paralel_size=2",
            "no key 'actor.model.tensor_model_paralel_size'; did you mean 'actor.model.tensor_model_parallel_size'?",
        ),
        ("+cluster.num_nodes=4", "the config already has 'cluster.num_nodes'"),
    ],
)
def test_framework_overrides_follow_hydras_key_rules(
    override: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """As Hydra's compose: `key=v` must name an existing key (a typo is refused, not silently added),
    `+key=v` a new one, `++key=v` either; hpcplace's own blocks (slurm, launch) check their own keys."""
    tour = str(FIXTURES.parent.parent / "configs" / "tour" / "rlinf-tour.yaml")
    assert main(["plan", tour, override]) == 2
    assert message in capsys.readouterr().err
    for fine in (
        "+cluster.extra=1",
        "++cluster.num_nodes=4",
        "cluster.num_nodes=4",
        "slurm.time=1:00:00",
        "launch.hold=true",
    ):
        assert main(["plan", tour, fine]) == 0, capsys.readouterr().err
    assert (
        main(
            [
                "plan",
                str(FIXTURES.parent.parent / "configs" / "collocated-demo.yaml"),
                "--set",
                "components.actor.env.NEW_VAR=1",
            ]
        )
        == 0
    )  # the native format adds keys where its schema allows


def test_an_override_that_removes_a_key_keeps_the_files_format(capsys: pytest.CaptureFixture[str]) -> None:
    """`~cluster.num_nodes` on an RLinf config: RLinf's own error, not the native format's unknown keys."""
    tour = str(FIXTURES.parent.parent / "configs" / "tour" / "rlinf-tour.yaml")
    assert main(["plan", tour, "~cluster.num_nodes"]) == 2
    assert "`cluster`: missing required key 'num_nodes'" in capsys.readouterr().err


def test_validate_names_the_default_partition() -> None:
    from hpcplace.slurm import validate

    plan = plan_from_file(FIXTURES / "areal_moe.yaml")
    facts = validate.parse_cluster_facts(
        [{"PartitionName": "debug", "State": "UP", "Default": "YES"}, {"PartitionName": "gpu", "State": "UP"}], []
    )
    report = validate.check(plan, facts)
    assert any("default partition 'debug'" in c for c in report.checked)
    facts = validate.parse_cluster_facts([{"PartitionName": "gpu", "State": "UP"}], [])
    assert any("no default partition" in p for p in validate.check(plan, facts).problems)


def test_lower_without_partition() -> None:
    job = lower(plan_from_file(FIXTURES / "areal_moe.yaml"))
    assert not any(a.startswith("--partition") for a in job.components[0].sbatch_args)


def test_roll_worker_wider_than_a_node_is_explained(yml: Yaml) -> None:
    """Steps mode: the plan holds the tp16 worker (one process per node), but lowering it to job steps
    is refused with the device_mapping's location and the way out (the Ray launch mode)."""
    path = yml.write(
        "slurm: {gpus_per_node: 8}\nactor_infer:\n  device_mapping: list(range(0,16))\n"
        "  strategy_args: {strategy_name: vllm, strategy_config: {tensor_parallel_size: 16}}\n"
    )
    plan = plan_from_spec(load_spec(path))
    assert plan.component("actor_infer").spanning is not None
    with pytest.raises(HpcplaceError) as info:
        lower(plan)
    err = info.value
    assert "needs 16 GPUs per worker; worker 0 spans nodes [0, 1]" in err.message
    assert "ROLL runs such a worker across nodes through Ray" in err.message
    assert str(err).startswith(f"{yml.where(path, 'list(range(0,16))')}:") and "launch: {mode: ray" in err.hint


def _rlinf_checkout(root: Path, searchpath: list[str]) -> Path:
    """A checkout laid out as RLinf's: examples/embodiment/config/<experiment>.yaml and its config groups."""
    config = root / "examples" / "embodiment" / "config"
    (config / "model").mkdir(parents=True)
    (config / "model" / "small.yaml").write_text("tensor_model_parallel_size: 2\n")
    entries = "".join(f"\n    - {e}" for e in searchpath)
    path = config / "experiment.yaml"
    path.write_text(
        "defaults:\n  - model@actor.model: small\n  - _self_\n"
        f"hydra:\n  searchpath:{entries}\n"
        "cluster:\n  num_nodes: 1\n  component_placement: {actor: all}\n"
        "slurm: {gpus_per_node: 4}\n"
    )
    return path


def test_hydra_searchpath_variables_found_as_the_run_scripts_set_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("HP_TEST_EMBODIED_PATH", "HP_TEST_REPO_PATH"):
        monkeypatch.delenv(var, raising=False)
    path = _rlinf_checkout(
        tmp_path / "RLinf",
        [
            "file://${oc.env:HP_TEST_EMBODIED_PATH}/config/",
            "file://${oc.env:HP_TEST_REPO_PATH}/examples/embodiment/config",
        ],
    )
    spec = load_spec(path)
    found = {
        "HP_TEST_EMBODIED_PATH": str((tmp_path / "RLinf" / "examples" / "embodiment").resolve()),
        "HP_TEST_REPO_PATH": str((tmp_path / "RLinf").resolve()),
    }
    # the framework composes the config again in the job: every process and the Ray driver get the values
    assert all(group.env == found for group in spec.cluster.node_groups) and spec.launch.env == found
    assert any(
        "HP_TEST_REPO_PATH is not set: hydra.searchpath was composed with HP_TEST_REPO_PATH=" in n for n in spec.notes
    )
    assert "HP_TEST_REPO_PATH" not in os.environ  # exported only while Hydra composed
    assert plan_from_spec(spec).component("actor").tensor_parallel_size == 2  # model/small.yaml was composed

    monkeypatch.setenv("HP_TEST_REPO_PATH", str(tmp_path / "RLinf"))  # what the shell exports wins
    monkeypatch.setenv("HP_TEST_EMBODIED_PATH", str(tmp_path / "RLinf" / "examples" / "embodiment"))
    spec = load_spec(path)
    assert not spec.launch.env and not any("is not set" in n for n in spec.notes)


@pytest.mark.parametrize(
    "entry",
    [
        "file://${oc.env:HP_TEST_EMBODIED_PATH}/",  # fits every folder: cannot tell
        "file://${oc.env:HP_TEST_EMBODIED_PATH}/no_such_folder",
    ],
)
def test_hydra_searchpath_variable_that_cannot_be_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str
) -> None:
    monkeypatch.delenv("HP_TEST_EMBODIED_PATH", raising=False)
    path = _rlinf_checkout(tmp_path, [entry])
    with pytest.raises(HpcplaceError) as info:
        load_spec(path)
    assert str(info.value).startswith(
        f"{path}:6:7: hydra.searchpath {entry!r} needs the environment variable HP_TEST_EMBODIED_PATH, which is not set"
    )
    assert "export HP_TEST_EMBODIED_PATH=" in (info.value.hint or "")
