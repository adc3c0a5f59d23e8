"""slime's train.py command (hpcplace/config/formats/slime.py): the flags its placement reads, slime's own
refusals, the one IP-sorted placement group planned, heterogeneous pools. The flag table is checked against a
slime checkout when HPCPLACE_SLIME_SRC names one (slime is not on PyPI: skipped in CI)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hpcplace.config.argparse_ast import file_flags
from hpcplace.config.formats import load_spec
from hpcplace.config.formats.slime_flags import PLACEMENT_FLAGS, releases
from hpcplace.errors import SpecError
from hpcplace.plan.plan import Plan
from hpcplace.plan.planner import plan_from_spec

ENTRY = ["python3", "train.py"]


def plan(tmp_path: Path, *words: str, text: str = "slurm: {partition: a800, gpus_per_node: 8}\n") -> Plan:
    path = tmp_path / "site.yaml"
    path.write_text("format: slime\n" + text, encoding="utf-8")  # a misspelt flag hides the entry point
    return plan_from_spec(load_spec(str(path), driver=[*ENTRY, *words]))


def refused(tmp_path: Path, *words: str, text: str = "slurm: {gpus_per_node: 8}\n") -> SpecError:
    with pytest.raises(SpecError) as err:
        plan(tmp_path, *words, text=text)
    return err.value


def gpus(p: Plan, name: str) -> list[tuple[int, tuple[str, ...]]]:
    comp = next(c for c in p.components if c.name == name)
    return [(x.cluster_node_rank, x.visible_accelerators) for x in comp.processes]


def test_colocated_actor_and_engines_share_the_gpus(tmp_path: Path) -> None:
    p = plan(tmp_path, "--actor-num-nodes", "1", "--actor-num-gpus-per-node", "8", "--colocate",
             "--rollout-num-gpus-per-engine", "2", "--lr", "1e-6", "--attention-backend", "flash")  # fmt: skip
    assert [c.name for c in p.components] == ["actor", "rollout"]
    assert gpus(p, "rollout") == [(0, (str(2 * e), str(2 * e + 1))) for e in range(4)]
    assert {c.collocation_group for c in p.components} == {"colloc-0"}


def test_disaggregated_engines_start_at_the_actors_offset_and_the_ppo_critic_shares_the_actor(
    tmp_path: Path,
) -> None:
    words = ["--actor-num-nodes", "1", "--actor-num-gpus-per-node", "4", "--rollout-num-gpus", "12"]
    p = plan(tmp_path, *words, "--rollout-num-gpus-per-engine", "4", "--advantage-estimator", "ppo")
    assert len(p.cluster.nodes) == 2
    assert gpus(p, "actor") == gpus(p, "critic") == [(0, (str(g),)) for g in range(4)]
    assert gpus(p, "rollout") == [(0, ("4", "5", "6", "7")), (1, ("0", "1", "2", "3")), (1, ("4", "5", "6", "7"))]


def test_an_engine_wider_than_a_node_is_one_process_per_node(tmp_path: Path) -> None:
    p = plan(tmp_path, "--actor-num-nodes", "2", "--rollout-num-gpus", "16", "--rollout-num-gpus-per-engine", "16")
    comp = next(c for c in p.components if c.name == "rollout")
    assert comp.spanning is not None and comp.spanning.workers == ((0, 1),)
    assert [x.cluster_node_rank for x in comp.processes] == [2, 3]


@pytest.mark.parametrize("extra", [[], ["--colocate"], ["--rollout-num-gpus", "8"]])
def test_loaded_rollout_data_trains_only_with_no_engines(tmp_path: Path, extra: list[str]) -> None:
    # slime's parse_args sets debug_train_only for --load-debug-rollout-data; its placement group then holds the
    # actor's GPUs (_get_placement_group_layout) and RolloutServer starts no engine
    p = plan(tmp_path, "--actor-num-nodes", "1", "--actor-num-gpus-per-node", "4", *extra,
             "--load-debug-rollout-data", "dump/{rollout_id}.pt")  # fmt: skip
    assert [c.name for c in p.components] == ["actor"]
    assert gpus(p, "actor") == [(0, (str(g),)) for g in range(4)] and len(p.cluster.nodes) == 1
    assert any("--load-debug-rollout-data trains on the saved rollouts only" in n for n in p.warnings)


def test_prefill_servers_split_the_engines_into_a_prefill_then_a_decode_group(tmp_path: Path) -> None:
    # SglangConfig.from_prefill_num_servers: 1 x 2 GPUs of prefill engines, the other 6 of decode, after the actor
    p = plan(tmp_path, "--actor-num-nodes", "1", "--actor-num-gpus-per-node", "8", "--rollout-num-gpus", "8",
             "--rollout-num-gpus-per-engine", "2", "--prefill-num-servers", "1")  # fmt: skip
    assert [c.name for c in p.components] == ["actor", "rollout_prefill", "rollout_decode"]
    assert gpus(p, "rollout_prefill") == [(1, ("0", "1"))]
    assert gpus(p, "rollout_decode") == [(1, (str(2 * e), str(2 * e + 1))) for e in range(1, 4)]
    assert any("prefill-decode disaggregation (--prefill-num-servers)" in n for n in p.warnings)
    err = refused(tmp_path, "--colocate", "--rollout-num-gpus-per-engine", "4", "--prefill-num-servers", "2")
    assert "No decode GPUs: total 8, prefill 8" in err.message  # colocated: the rollout has the actor's 8 GPUs
    assert err.location is not None and err.location.column == 1 + sum(
        len(w) + 1 for w in [*ENTRY, "--colocate", "--rollout-num-gpus-per-engine", "4"]
    )  # at the flag


def test_train_only_with_colocate_starts_no_engines(tmp_path: Path) -> None:
    p = plan(tmp_path, "--actor-num-nodes", "1", "--colocate", "--debug-train-only")
    assert [c.name for c in p.components] == ["actor"]


@pytest.mark.parametrize(
    ("words", "message", "word"),
    [
        (["--actor-num-nodes", "1"], "adds --rollout-num-gpus to the actor's GPUs, and it is not given", 1),
        (["--debug-train-only", "--debug-rollout-only"], "cannot be set at the same time", 3),
        (["--load-debug-rollout-data", "d.pt", "--debug-rollout-only"], "sets debug_train_only", 4),
        (["--actor-num-node", "2", "--colocate"], "close to --actor-num-nodes", 2),
        (["--colocate", "--rollout-num-gpus-per-engine", "6", "--sglang-pp-size", "4"], "divisible by", 3),
        (["--colocate", "--sglang-config", "x.yaml"], "--sglang-config: file 'x.yaml' not found", 3),
        (["--actor-num-nodes", "x"], "invalid int value: 'x'", 3),
        (["--rollout-num-gpus", "8", "--rollout-num-gpus-per-engine", "16"], "do not make whole engines", 2),
    ],
)
def test_refusals_are_located_at_the_word(tmp_path: Path, words: list[str], message: str, word: int) -> None:
    err = refused(tmp_path, *words)
    assert message in err.message
    full = [*ENTRY, *words]
    assert err.location is not None and err.location.column == 1 + sum(len(w) + 1 for w in full[: word - 1 + 1])


def test_ray_job_submit_runs_the_part_after_its_double_dash(tmp_path: Path) -> None:
    wrapped = ["ray", "job", "submit", "--address=http://127.0.0.1:8265", "--runtime-env-json={}", "--"]
    p = plan(tmp_path, "--colocate", "--rollout-num-gpus-per-engine", "2")
    q = plan_from_spec(
        load_spec(
            str(tmp_path / "site.yaml"), driver=[*wrapped, *ENTRY, "--colocate", "--rollout-num-gpus-per-engine", "2"]
        )
    )
    assert q.launch.driver == p.launch.driver == (*ENTRY, "--colocate", "--rollout-num-gpus-per-engine", "2")
    assert q.components == p.components and any("ray job submit" in w for w in q.warnings)


def test_async_training_refuses_colocation(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("slurm: {gpus_per_node: 8}\n", encoding="utf-8")
    with pytest.raises(SpecError, match="Colocation is not supported for async training"):
        load_spec(str(path), driver=["python3", "train_async.py", "--colocate", "--actor-num-nodes", "1"])


def test_unknown_flags_are_ignored_as_slime_ignores_them(tmp_path: Path) -> None:
    p = plan(tmp_path, "--colocate", "--some-megatron-flag", "3", "--sglang-mem-fraction-static", "0.7")
    assert [c.world_size for c in p.components] == [8, 8]


# slime's docs/en/advanced/sglang-config.md (624b824): prefill-decode, several models, placeholders, overrides
PD = """
sglang:
  - name: actor
    server_groups:
      - worker_type: prefill
        num_gpus: 4
        num_gpus_per_engine: 2    # 2 prefill engines, TP=2
      - worker_type: decode
        num_gpus: 12
        num_gpus_per_engine: 4    # 3 decode engines, TP=4
"""
MULTI_MODEL = """
sglang:
  - name: actor
    update_weights: true
    server_groups:
      - {worker_type: regular, num_gpus: 8, num_gpus_per_engine: 4}
  - name: ref
    model_path: /path/to/ref_model
    update_weights: false
    server_groups:
      - {worker_type: regular, num_gpus: 4, num_gpus_per_engine: 2}
  - name: reward
    model_path: /path/to/reward_model
    update_weights: false
    engine_groups:                # slime's older name for server_groups
      - {worker_type: regular, num_gpus: 4, num_gpus_per_engine: 2, overrides: {tp_size: 1, pp_size: 2}}
"""
# slime's own tests/test_qwen2.5_0.5B_sglang_config.py: 3 groups of one model, the last a placeholder
PLACEHOLDER = """
sglang:
  - name: default
    server_groups:
      - {worker_type: regular, num_gpus: 4, num_gpus_per_engine: 2}
      - {worker_type: regular, num_gpus: 2, num_gpus_per_engine: 1}
      - {worker_type: placeholder, num_gpus: 2}
"""


def sglang(tmp_path: Path, text: str) -> str:
    path = tmp_path / "sglang.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_sglang_config_groups_take_the_rollouts_gpus_in_order_each_at_its_own_engine_size(tmp_path: Path) -> None:
    actor = ["--actor-num-nodes", "1", "--actor-num-gpus-per-node", "8"]
    p = plan(tmp_path, *actor, "--rollout-num-gpus", "16", "--sglang-config", sglang(tmp_path, PD))
    assert [c.name for c in p.components] == ["actor", "rollout_prefill", "rollout_decode"]
    assert gpus(p, "rollout_prefill") == [(1, ("0", "1")), (1, ("2", "3"))]
    assert gpus(p, "rollout_decode") == [
        (1, ("4", "5", "6", "7")),
        (2, ("0", "1", "2", "3")),
        (2, ("4", "5", "6", "7")),
    ]
    assert [c.tensor_parallel_size for c in p.components] == [1, 2, 4]
    assert any("server group 0 (prefill) of model 'actor' on GPUs 0..3" in w for w in p.warnings)

    p = plan(tmp_path, "--colocate", "--rollout-num-gpus", "16", "--actor-num-nodes", "2",
             "--sglang-config", sglang(tmp_path, MULTI_MODEL))  # fmt: skip
    assert [c.name for c in p.components] == ["actor", "rollout_actor", "rollout_ref", "rollout_reward"]
    assert gpus(p, "rollout_actor") == [(0, ("0", "1", "2", "3")), (0, ("4", "5", "6", "7"))]
    assert gpus(p, "rollout_ref") == [(1, ("0", "1")), (1, ("2", "3"))]
    assert gpus(p, "rollout_reward") == [(1, ("4", "5")), (1, ("6", "7"))]
    assert [c.tensor_parallel_size for c in p.components] == [1, 4, 2, 1]  # reward: its overrides' tp_size

    p = plan(tmp_path, "--colocate", "--rollout-num-gpus", "8", "--sglang-config", sglang(tmp_path, PLACEHOLDER))
    assert [c.name for c in p.components] == ["actor", "rollout_1", "rollout_2"]  # the placeholder starts nothing
    assert gpus(p, "rollout_1") == [(0, ("0", "1")), (0, ("2", "3"))]
    assert gpus(p, "rollout_2") == [(0, ("4",)), (0, ("5",))]


def test_sglang_config_starts_a_models_encoder_groups_first(tmp_path: Path) -> None:
    epd = """
sglang:
  - name: vlm
    server_groups:
      - {worker_type: prefill, num_gpus: 2}
      - {worker_type: encoder, num_gpus: 2}
      - {worker_type: decode, num_gpus: 4, num_gpus_per_engine: 4}
"""
    words = ["--colocate", "--rollout-num-gpus-per-engine", "2", "--sglang-config", sglang(tmp_path, epd)]
    p = plan(tmp_path, *words)
    assert gpus(p, "rollout_encoder") == [(0, ("0", "1"))]  # slime's phase 1: the encoders, from the first GPU
    assert gpus(p, "rollout_prefill") == [(0, ("2", "3"))]
    assert gpus(p, "rollout_decode") == [(0, ("4", "5", "6", "7"))]


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        ("other: 1\n", "sglang config must have a 'sglang' key, got ['other']", 1),
        ("sglang:\n  - name: a\n    server_groups:\n      - {worker_type: mixed, num_gpus: 8}\n",
         "Invalid worker_type 'mixed', must be one of", 4),
        ("sglang:\n  - name: a\n    server_groups:\n      - {worker_type: regular, num_gpu: 8}\n",
         "unexpected keyword argument 'num_gpu'", 4),
        ("sglang:\n  - name: a\n    server_groups:\n      - {worker_type: regular}\n",
         "missing required argument: 'num_gpus'", 4),
        ("sglang:\n  - name: a\n    server_groups:\n      - {worker_type: regular, num_gpus: 0}\n",
         "num_gpus must be > 0, got 0", 4),
        ("sglang:\n  - server_groups: []\n", "missing required key 'name'", 2),
        ("sglang:\n  - name: a\n    server_groups:\n      - {worker_type: regular, num_gpus: 4}\n"
         "      - {worker_type: regular, num_gpus: 4, overrides: {model_path: /other}}\n",
         "has server groups with different model_path values", 5),
        ("sglang:\n  - name: a\n    num_gpus_per_engine: 4\n    server_groups:\n"
         "      - {worker_type: regular, num_gpus: 8, num_gpus_per_engine: 16}\n",
         "do not make whole engines of 16 GPUs (2 nodes each)", 5),
    ],
)  # fmt: skip
def test_sglang_config_refusals_are_slimes_at_the_value(tmp_path: Path, text: str, message: str, line: int) -> None:
    path = sglang(tmp_path, text)
    err = refused(tmp_path, "--colocate", "--sglang-config", path)
    assert message in err.message
    assert err.location is not None and err.location.path == path and err.location.line == line


def test_sglang_config_must_hold_the_rollouts_gpus_and_excludes_the_legacy_flags(tmp_path: Path) -> None:
    path = sglang(tmp_path, PD)
    err = refused(tmp_path, "--actor-num-nodes", "1", "--rollout-num-gpus", "8", "--sglang-config", path)
    assert "sglang_config total GPUs (16) != rollout_num_gpus (8)" in err.message
    assert err.location is not None and err.location.column == 1 + sum(
        len(w) + 1 for w in [*ENTRY, "--actor-num-nodes", "1"]
    )
    err = refused(tmp_path, "--colocate", "--sglang-config", path)  # colocated: the actor's 8 GPUs
    assert "sglang_config total GPUs (16) != rollout_num_gpus (8)" in err.message and "--colocate" in err.message
    err = refused(tmp_path, "--colocate", "--sglang-config", path, "--prefill-num-servers", "1")
    assert "sglang_config and prefill_num_servers are mutually exclusive" in err.message
    err = refused(tmp_path, "--actor-num-nodes", "1", "--sglang-config", path, "--rollout-external-engine-addrs", "h:1")
    assert "sglang_config cannot be set with --rollout-external-engine-addrs" in err.message
    # an engine part that would not fit on its node (slime starts it there anyway)
    crossing = "sglang:\n  - name: a\n    server_groups:\n      - {worker_type: regular, num_gpus: 6, num_gpus_per_engine: 2}\n      - {worker_type: regular, num_gpus: 10, num_gpus_per_engine: 4}\n"
    err = refused(tmp_path, "--colocate", "--actor-num-nodes", "2", "--sglang-config", sglang(tmp_path, crossing))
    assert "engine 0 of server group 1 (regular) of model 'a' starts at GPU 6 of a 8-GPU node" in err.message
    assert err.location is not None and err.location.line == 5
    # slime never reads the config when it starts no engine
    p = plan(tmp_path, "--colocate", "--debug-train-only", "--sglang-config", str(tmp_path / "absent.yaml"))
    assert [c.name for c in p.components] == ["actor"]


HETERO = """
slurm:
  partition: a800
  gpus_per_node: 8
  node_groups:
    gen: {partition: h20, gpus_per_node: 4, gpu_type: h20}
  pools: {rollout: gen}
"""


def test_slurm_pools_put_the_rollout_on_its_partition_after_the_actor(tmp_path: Path) -> None:
    words = ["--actor-num-nodes", "1", "--rollout-num-gpus", "8", "--rollout-num-gpus-per-engine", "2"]
    p = plan(tmp_path, *words, text=HETERO)
    assert [(g.label, g.partition, g.num_nodes) for g in p.cluster.node_groups] == [
        ("default", "a800", 1),
        ("gen", "h20", 2),
    ]
    assert gpus(p, "rollout") == [(1, ("0", "1")), (1, ("2", "3")), (2, ("0", "1")), (2, ("2", "3"))]
    assert any("IP sorts after" in w for w in p.warnings)
    err = refused(tmp_path, "--colocate", text=HETERO)
    assert "--colocate shares the actor's GPUs" in err.message and err.location is not None
    err = refused(tmp_path, *words, text=HETERO.replace("{rollout: gen}", "{rolout: gen}"))
    assert "'rolout' is not a slime pool" in err.message and err.hint is not None and "'rollout'" in err.hint


def test_the_newest_release_read_has_the_checkouts_placement_flags() -> None:
    """slime_releases.json (scripts/gen_slime_flags.py, from the release tags) against a checkout's parsers."""
    src = os.environ.get("HPCPLACE_SLIME_SRC")
    if not src:
        pytest.skip("HPCPLACE_SLIME_SRC (a THUDM/slime checkout) is not set: slime is not on PyPI, so CI has none")
    theirs = {
        **file_flags(Path(src) / "slime" / "utils" / "arguments.py"),
        **file_flags(Path(src) / "slime" / "backends" / "sglang_utils" / "arguments.py"),
    }
    newest = releases()[-1]
    for name in PLACEMENT_FLAGS:
        if name not in theirs:
            assert not newest.has(name), name
            continue
        info, flag = theirs[name], newest.flags[name]
        kind = "store_true" if info.get("action") == "store_true" else info.get("type", "str")
        assert (flag.kind, flag.nargs) == (kind, info.get("nargs")), name
        assert newest.defaults.get(name) == info.get("default", False if kind == "store_true" else None), name


def test_the_driver_step_checks_slimes_numeric_ip_order_over_the_gpu_nodes() -> None:
    """slime sorts its group's GPUs by IP address as numbers (10.0.0.9 before 10.0.0.10, unlike verl's
    string sort) over every GPU node, whatever its node group; CPU-only nodes hold none of its bundles."""
    from hpcplace.runtime.ray_driver import ip_order_problem

    expected = {0: (0, 0, "actor"), 1: (0, 1, "actor"), 2: (1, 0, "gen"), 3: (2, 0, "cpu")}
    nodes = [
        {"Alive": True, "NodeManagerAddress": address, "Labels": {"hpcplace.node_rank": str(rank)}}
        for rank, address in enumerate(["10.0.0.9", "10.0.0.10", "10.0.0.11", "10.0.0.1"])
    ]
    gpu_groups = frozenset({0, 1})
    assert ip_order_problem(nodes, expected, lambda g, j: "h", "slime", gpu_groups) is None
    assert ip_order_problem(nodes, expected, lambda g, j: "h", "verl", gpu_groups) is not None  # a string sort
    nodes[2]["NodeManagerAddress"] = "10.0.0.2"  # the generation node sorts before the actor's
    problem = ip_order_problem(nodes, expected, lambda g, j: f"h{g}{j}", "slime", gpu_groups)
    assert problem is not None
    assert "slime orders the job's GPU nodes by IP address as numbers: 10.0.0.2 (node rank 2, h10)" in problem
    assert "slime would put them on node rank 2" in problem


# ---- expert parallelism and engines: what the fabric check (hpcplace/plan/topology.py) reads

ONE_NODE_BLOCKS = "slurm: {partition: gb200, gpus_per_node: 8, topology: {block: 1}}\n"
TWO_ACTOR_NODES = ["--actor-num-nodes", "2", "--actor-num-gpus-per-node", "8", "--colocate"]


def test_megatrons_expert_parallel_flags_size_the_actors_and_critics_moe_groups(tmp_path: Path) -> None:
    # Megatron's parser (slime's, ignore_unknown_args): ETP x EP consecutive ranks, a missing ETP being the TP
    words = ["--actor-num-nodes", "2", "--actor-num-gpus-per-node", "8", "--colocate", "--advantage-estimator", "ppo",
             "--tensor-model-parallel-size", "2", "--expert-model-parallel-size", "4"]  # fmt: skip
    p = plan(tmp_path, *words)
    for name in ("actor", "critic"):
        comp = p.component(name)
        assert (comp.expert_parallel_size, comp.expert_tensor_parallel_size) == (4, 2)
    comp = plan(tmp_path, *words, "--expert-tensor-parallel-size", "1").component("actor")
    assert (comp.expert_parallel_size, comp.expert_tensor_parallel_size) == (4, 1)
    assert plan(tmp_path, *words[:-2]).component("actor").expert_tensor_parallel_size is None  # no EP: as before
    err = refused(tmp_path, *words[:-1], "0")
    assert "--expert-model-parallel-size is 0" in err.message and err.location is not None
    # ETP 2 x EP 8 = 16 GPUs = 2 nodes: blocks of one node split it
    p = plan(tmp_path, *words[:-1], "8", text=ONE_NODE_BLOCKS)
    found = {(c.component, c.what, c.ranks) for c in p.topology_crossings}
    assert found == {(name, "expert-parallel group", tuple(range(16))) for name in ("actor", "critic")}


def test_an_sglang_engine_wider_than_its_tensor_parallel_group_is_checked_against_the_blocks(tmp_path: Path) -> None:
    # --rollout-num-gpus-per-engine 16 with --sglang-pp-size 2: TP 8 fits a node, the engine spans two
    words = [*TWO_ACTOR_NODES, "--rollout-num-gpus-per-engine", "16", "--sglang-pp-size", "2"]
    p = plan(tmp_path, *words, text=ONE_NODE_BLOCKS)
    rollout = p.component("rollout")
    assert (rollout.tensor_parallel_size, rollout.gpus_per_engine) == (8, 16)
    assert [(c.component, c.what) for c in p.topology_crossings if c.what == "inference engine"] == [
        ("rollout", "inference engine")
    ]
    assert plan(tmp_path, *words[:-2]).component("rollout").gpus_per_engine is None  # as wide as its TP group
    assert plan(tmp_path, *words, text=ONE_NODE_BLOCKS.replace("block: 1", "block: 2")).topology_crossings == ()


def test_the_megatron_actors_tensor_parallel_groups_are_checked_without_expert_parallelism(tmp_path: Path) -> None:
    words = [*TWO_ACTOR_NODES, "--tensor-model-parallel-size", "16", "--pipeline-model-parallel-size", "1"]
    p = plan(tmp_path, *words, text=ONE_NODE_BLOCKS)
    actor = p.component("actor")
    assert (actor.tensor_parallel_size, actor.pipeline_parallel_size, actor.expert_parallel_size) == (16, 1, 1)
    assert ("actor", "tensor-parallel group", tuple(range(16))) in {
        (c.component, c.what, c.ranks) for c in p.topology_crossings
    }
    fits = plan(tmp_path, *TWO_ACTOR_NODES, "--tensor-model-parallel-size", "8", text=ONE_NODE_BLOCKS)
    assert fits.component("actor").tensor_parallel_size == 8
    assert not [c for c in fits.topology_crossings if c.component == "actor"]
