"""OpenRLHF's train_ppo_ray command (hpcplace/config/formats/openrlhf.py): read as its argparse parser reads it,
refused where OpenRLHF refuses, planned as its Ray placement places it. The flag table is checked against the
installed openrlhf's own source (tests/requirements-frameworks.txt)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from pathlib import Path

import pytest
from packaging.version import Version

from hpcplace.config.argparse_ast import file_flags
from hpcplace.config.formats import load_spec
from hpcplace.config.formats.openrlhf import PLACEMENT_FLAGS, pack, planned_version
from hpcplace.config.formats.openrlhf_flags import release_for, releases
from hpcplace.config.framework_version import PlannedVersion
from hpcplace.errors import SpecError
from hpcplace.plan.plan import Plan, write_plan_json
from hpcplace.plan.planner import plan_from_spec
from hpcplace.slurm.submit import load_plan

ENTRY = ["python3", "-m", "openrlhf.cli.train_ppo_ray"]
MODELS = ["--actor.model_name_or_path", "m", "--reward.model_name_or_path", "r"]


def site(tmp_path: Path, text: str = "slurm: {partition: a800, gpus_per_node: 8}\n") -> str:
    path = tmp_path / "site.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def plan(tmp_path: Path, *words: str, text: str | None = None) -> Plan:
    path = site(tmp_path) if text is None else site(tmp_path, text)
    return plan_from_spec(load_spec(path, driver=[*ENTRY, *words]))


def refused(tmp_path: Path, *words: str, text: str | None = None) -> SpecError:
    with pytest.raises(SpecError) as err:
        plan(tmp_path, *words, text=text)
    return err.value


def column(words: list[str], index: int) -> int:
    """The column of words[index] in `--driver -- WORDS` (joined by spaces)."""
    return 1 + sum(len(w) + 1 for w in words[:index])


def gpus(p: Plan, name: str) -> list[tuple[int, tuple[str, ...]]]:
    comp = next(c for c in p.components if c.name == name)
    return [(x.cluster_node_rank, x.visible_accelerators) for x in comp.processes]


# ---- the parser ------------------------------------------------------------------------------------------


def test_defaults_start_actor_ref_critic_reward_on_their_own_eight_gpus(tmp_path: Path) -> None:
    p = plan(tmp_path, *MODELS)
    assert [c.name for c in p.components] == ["actor", "ref", "critic", "reward"]  # gae: a critic, kl 0.01: a ref
    assert [c.world_size for c in p.components] == [8, 8, 8, 8]
    assert len(p.cluster.nodes) == 4 and p.source_format == "openrlhf"
    assert p.launch.is_ray and p.launch.driver == (*ENTRY, *MODELS)


def test_equals_sign_abbreviations_and_switches_as_argparse(tmp_path: Path) -> None:
    p = plan(
        tmp_path,
        "--actor.num_n=1",  # a unique prefix stands for the flag (allow_abbrev)
        "--actor.num_gpus_per_node=4",
        "--ref.num_gpus_per_node",
        "4",
        "--train.colocate_actor_r",
        "--algo.advantage.estimator=rloo",
        "--rollout.n_samples_per_prompt",
        "2",
        "--reward.remote_url",
        "http://rm",
        "--actor.eps_clip_low_high",  # nargs=2 takes both words, a negative number included
        "-0.2",
        "0.3",
    )
    assert [c.name for c in p.components] == ["actor", "ref"]
    assert gpus(p, "actor") == gpus(p, "ref") == [(0, (str(g),)) for g in range(4)]


@pytest.mark.parametrize(
    ("words", "index", "message", "hint"),
    [
        (["--actor.nodes", "2"], 0, "has no flag --actor.nodes", "did you mean --actor.num_nodes?"),
        (["--actor.num_nodes", "two"], 1, "invalid int value: 'two'", "takes an integer"),
        (["--actor.num", "2"], 0, "ambiguous option: --actor.num could match --actor.num_gpus_per_node", None),
        (["--train.colocate_all=true"], 0, "ignored explicit argument 'true'", None),
        (["--actor.num_nodes"], 0, "expected one argument", None),
        (["--actor.eps_clip_low_high", "0.2"], 1, "expected 2 arguments", None),
        (["--algo.advantage.estimator", "grpo"], 1, "invalid choice: 'grpo'", None),
        (["extra"], 0, "takes no positional argument", None),
        (["--help"], 0, "prints its help and exits", None),
    ],
)
def test_what_argparse_refuses_is_refused_at_the_word(
    tmp_path: Path, words: list[str], index: int, message: str, hint: str | None
) -> None:
    err = refused(tmp_path, *words)
    assert message in err.message
    assert err.location is not None and err.location.column == column([*ENTRY, *words], len(ENTRY) + index)
    if hint is not None:
        assert err.hint is not None and hint in err.hint


def test_old_flag_names_are_refused_by_0_10_2_and_read_when_an_older_release_is_stated(tmp_path: Path) -> None:
    err = refused(tmp_path, "--actor_num_nodes", "2")  # read as the installed 0.11.2
    assert "OpenRLHF 0.11.2's parser has no flag --actor_num_nodes" in err.message
    assert "OpenRLHF 0.9.0 to 0.10.1.post2 have it" in err.message and "calls it --actor.num_nodes" in err.message
    assert 'state it: `hpcplace: {framework_version: "0.10.1.post2"}`' in err.message
    old = 'slurm: {gpus_per_node: 8}\nhpcplace: {framework_version: "0.10.1"}\n'
    p = plan(
        tmp_path,
        "--actor_num_nodes",
        "1",
        "--colocate_all_models",
        "--vllm_num_engines",
        "8",
        "--pretrain",
        "m",
        "--reward_pretrain",
        "r",
        text=old,
    )
    assert {c.name for c in p.components} == {"actor", "ref", "critic", "reward", "vllm"}
    assert all(c.collocation_group == "colloc-0" for c in p.components)
    err = refused(tmp_path, "--actor.num_nodes", "1", text=old)
    assert "OpenRLHF 0.10.1's parser has no flag --actor.num_nodes" in err.message
    assert "calls it --actor_num_nodes" in err.message and "state it" not in err.message  # stated already


def release_site(version: str) -> str:
    return f'slurm: {{gpus_per_node: 8}}\nhpcplace: {{framework_version: "{version}"}}\n'


def test_a_stated_release_is_read_with_its_own_flags_and_hints_name_only_its_flags(tmp_path: Path) -> None:
    """Issue 37: 0.10.2 to 0.11.1's train_ppo_ray have --algo.advantage.is_correction_enable (0.11.2 replaced it)."""
    words = ["--algo.advantage.is_correction_enable", "--algo.advantage.is_correction_type", "tis"]
    words += ["--reward.remote_url", "x", "--algo.advantage.estimator", "reinforce"]
    p = plan(tmp_path, *words, text=release_site("0.11.0"))
    assert [c.name for c in p.components] == ["actor", "ref"]
    err = refused(tmp_path, *words)  # the installed 0.11.2 refuses it, and says which releases have it
    assert "OpenRLHF 0.11.2's parser has no flag --algo.advantage.is_correction_enable" in err.message
    assert "OpenRLHF 0.10.2 to 0.11.1 have it" in err.message and '{framework_version: "0.11.1"}' in err.message
    err = refused(tmp_path, "--algo.advantage.is_correction_level", "token", text=release_site("0.11.0"))
    assert "OpenRLHF 0.11.0's parser has no flag --algo.advantage.is_correction_level" in err.message
    assert "OpenRLHF 0.11.2 has it" in err.message
    err = refused(tmp_path, "--algo.advantage.is_correction_lev", "token", text=release_site("0.11.0"))
    assert err.hint is not None and err.hint.startswith("did you mean --")
    named = err.hint.removeprefix("did you mean ").rstrip("?")
    assert release_for(Version("0.11.0")).has(named) and named.startswith("--algo.advantage.is_correction_")


def test_each_release_has_its_own_defaults(tmp_path: Path) -> None:
    """--micro_rollout_batch_size was 8 before 0.10.0 (then 1): 1 x 16 // 8 = 2 sample batches for 8 actors."""
    words = ["--rollout_batch_size", "16", "--remote_rm_url", "x", "--advantage_estimator", "reinforce"]
    err = refused(tmp_path, *words, text=release_site("0.9.10"))
    assert "= 2 < 8 actor processes" in err.message
    p = plan(tmp_path, *words, text=release_site("0.10.0"))
    assert [c.world_size for c in p.components] == [8, 8]


def test_a_version_between_releases_is_read_as_the_newest_release_before_it(tmp_path: Path) -> None:
    p = plan(tmp_path, "--actor.model_name_or_path", "m", "--reward.remote_url", "x", text=release_site("0.10.3.dev1"))
    assert any("read with the flags of OpenRLHF 0.10.2" in w for w in p.warnings)
    p = plan(tmp_path, "--actor.model_name_or_path", "m", "--reward.remote_url", "x", text=release_site("9.0"))
    assert any("newer than 0.11.2: rerun scripts/gen_openrlhf_flags.py" in w for w in p.warnings)
    err = refused(tmp_path, "--pretrain", "m", text=release_site("0.8.11"))
    assert "hpcplace plans OpenRLHF 0.9.0 and later" in err.message


def test_ray_job_submit_is_read_after_its_double_dash_and_the_plan_says_what_the_driver_is(tmp_path: Path) -> None:
    words = ["ray", "job", "submit", "--address=http://127.0.0.1:8265", "--", *ENTRY, *MODELS]
    p = plan_from_spec(load_spec(site(tmp_path), driver=words))
    assert [c.name for c in p.components] == ["actor", "ref", "critic", "reward"]
    assert any("ray job submit" in n and "python3 -m openrlhf.cli.train_ppo_ray" in n for n in p.warnings)
    assert p.launch.is_ray and p.launch.driver == (*ENTRY, *MODELS)  # the job runs the part after `--`


def test_the_deepspeed_entry_points_are_not_ray_drivers(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not OpenRLHF's Ray driver"):
        load_spec(site(tmp_path), format="openrlhf", driver=["python3", "-m", "openrlhf.cli.train_sft"])


# ---- OpenRLHF's own checks -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("words", "flag", "message"),
    [
        (
            ["--train.colocate_all", "--vllm.num_engines", "4", *MODELS],
            "--vllm.num_engines",
            "must be equal to vllm_num_engines * vllm_tensor_parallel_size, got 8 and 4",
        ),
        (
            ["--train.colocate_actor_ref", "--ref.num_gpus_per_node", "4", *MODELS],
            "--train.colocate_actor_ref",
            "must be the same when colocate actor and ref model",
        ),
        (
            ["--train.colocate_critic_reward", "--critic.num_nodes", "2", *MODELS],
            "--train.colocate_critic_reward",
            "must be the same when colocate critic and reward model",
        ),
        (["--ds.packing_samples", *MODELS], "--ds.packing_samples", "Only support `--packing_samples` with vLLM"),
        (["--algo.advantage.estimator", "rloo", *MODELS], "--algo.advantage.estimator", "requires n_samples"),
        (["--actor.num_gpus_per_node", "0", *MODELS], "--actor.num_gpus_per_node", "would have no GPU"),
        (["--rollout.batch_size", "4", *MODELS], "--rollout.batch_size", "number of sample batches"),
        (["--actor.model_name_or_path", "m"], None, "takes the critic's model from --reward.model_name_or_path"),
    ],
)
def test_openrlhfs_asserts_are_refused_with_its_reason_at_the_flag(
    tmp_path: Path, words: list[str], flag: str | None, message: str
) -> None:
    err = refused(tmp_path, *words)
    assert message in err.message
    full = [*ENTRY, *words]
    index = full.index(flag) if flag is not None else 2  # a default: the entry point's word
    assert err.location is not None and err.location.column == column(full, index)


# ---- the placement ---------------------------------------------------------------------------------------


def test_colocate_all_puts_every_role_and_the_engines_tp_groups_on_the_actors_gpus(tmp_path: Path) -> None:
    p = plan(tmp_path, "--train.colocate_all", "--vllm.num_engines", "4", "--vllm.tensor_parallel_size", "2", *MODELS)
    assert len(p.cluster.nodes) == 1
    assert {c.collocation_group for c in p.components} == {"colloc-0"}
    assert gpus(p, "vllm") == [(0, (str(2 * e), str(2 * e + 1))) for e in range(4)]
    assert gpus(p, "critic") == gpus(p, "actor") == [(0, (str(g),)) for g in range(8)]


def test_separate_groups_follow_rays_pack_in_openrlhfs_order(tmp_path: Path) -> None:
    text = "slurm: {gpus_per_node: 4}\n"
    words = ["--actor.num_gpus_per_node", "4", "--ref.num_gpus_per_node", "2", "--critic.num_gpus_per_node", "2"]
    words += ["--reward.num_gpus_per_node", "2", "--vllm.num_engines", "3", "--vllm.tensor_parallel_size", "2"]
    p = plan(tmp_path, *words, *MODELS, text=text)
    # vLLM first (6 GPUs: node 0 whole, then 2 of node 1), the actor on the next empty node, the ref on the
    # least loaded (empty node 3), the critic on the first of the two half-used nodes, the reward on the last
    assert gpus(p, "vllm") == [(0, ("0", "1")), (0, ("2", "3")), (1, ("0", "1"))]
    assert gpus(p, "actor") == [(2, (str(g),)) for g in range(4)]
    assert gpus(p, "ref") == [(3, ("0",)), (3, ("1",))]
    assert gpus(p, "critic") == [(1, ("2",)), (1, ("3",))]
    assert gpus(p, "reward") == [(3, ("2",)), (3, ("3",))]


def test_a_role_packed_on_fewer_nodes_than_its_flags_say_is_noted(tmp_path: Path) -> None:
    p = plan(tmp_path, "--actor.num_nodes", "2", "--actor.num_gpus_per_node", "4", "--reward.remote_url", "x")
    assert gpus(p, "actor") == [(0, (str(g),)) for g in range(8)]
    assert any("takes 1 node(s) of 8 GPUs" in w for w in p.warnings)


def test_engines_wider_than_a_node_are_one_process_per_node(tmp_path: Path) -> None:
    words = ["--vllm.num_engines", "1", "--vllm.tensor_parallel_size", "16", "--reward.remote_url", "x"]
    p = plan(tmp_path, *words, "--algo.advantage.estimator", "reinforce")
    comp = next(c for c in p.components if c.name == "vllm")
    assert comp.spanning is not None and comp.spanning.workers == ((0, 1),)
    assert gpus(p, "vllm") == [(0, tuple(str(g) for g in range(8))), (1, tuple(str(g) for g in range(8)))]


def test_pack_takes_the_least_loaded_node_that_holds_the_group_else_spreads() -> None:
    free = [[0, 1], list(range(4)), [3]]
    assert pack(free, 2) == [(1, 0), (1, 1)]
    assert pack(free, 4) == [(0, 0), (0, 1), (1, 2), (1, 3)]
    assert pack(free, 2) is None and free == [[], [], [3]]


# ---- heterogeneous pools ---------------------------------------------------------------------------------

HETERO = """
slurm:
  partition: a800
  gpus_per_node: 4
  node_groups:
    gen: {partition: h20, gpus_per_node: 8, gpu_type: h20}
  pools: {vllm: gen}
"""


def test_slurm_pools_puts_the_engines_on_their_own_partition(tmp_path: Path) -> None:
    words = ["--actor.num_gpus_per_node", "4", "--ref.num_gpus_per_node", "4", "--train.colocate_actor_ref"]
    words += ["--vllm.num_engines", "2", "--vllm.tensor_parallel_size", "4", "--reward.remote_url", "x"]
    words += ["--algo.advantage.estimator", "reinforce"]
    p = plan(tmp_path, *words, text=HETERO)
    assert [(g.label, g.partition, g.num_nodes) for g in p.cluster.node_groups] == [
        ("default", "a800", 1),
        ("gen", "h20", 1),
    ]
    vllm = next(c for c in p.components if c.name == "vllm")
    assert vllm.node_groups == ("gen",) and [x.partition for x in vllm.processes] == ["h20", "h20"]
    # steered: train() makes the actor+ref group first, then the engines' group, on the gen node
    assert [(r.what, r.ordinal, r.nodes) for r in p.steer] == [
        ("OpenRLHF actor+ref", 0, (0, 0, 0, 0)),
        ("OpenRLHF vllm", 1, tuple(x.cluster_node_rank for x in vllm.processes for _ in range(4))),
    ]


@pytest.mark.parametrize(
    ("roles", "message"),
    [
        ("{vlm: gen}", "'vlm' is no OpenRLHF role"),
        ("{vllm: generation}", "node group 'generation' is not in slurm.node_groups"),
        ("{actor: gen}", "puts actor, ref on node groups default, gen"),
        ("{critic: gen}", "the command starts no critic"),
    ],
)
def test_slurm_pools_errors_are_located(tmp_path: Path, roles: str, message: str) -> None:
    words = ["--actor.num_gpus_per_node", "4", "--ref.num_gpus_per_node", "4", "--train.colocate_actor_ref"]
    words += ["--vllm.num_engines", "2", "--reward.remote_url", "x", "--algo.advantage.estimator", "reinforce"]
    err = refused(tmp_path, *words, text=HETERO.replace("{vllm: gen}", roles))
    assert message in err.message
    assert err.location is not None and err.location.line == 7


def test_unknown_gpus_per_node_says_where_to_give_it(tmp_path: Path) -> None:
    err = refused(tmp_path, *MODELS, text="slurm: {partition: a800}\n")
    assert "GPUs per node of node group 'default' are unknown" in err.message
    assert err.hint is not None and "slurm.gpus_per_node" in err.hint


# ---- the flag table against OpenRLHF's own parser ----------------------------------------------------------


def test_the_flag_table_of_the_installed_release_is_its_own_parser() -> None:
    """The data scripts/gen_openrlhf_flags.py wrote for the installed release equals that release's parser."""
    spec = importlib.util.find_spec("openrlhf")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("openrlhf is not installed (tests/requirements-frameworks.txt)")
    release = release_for(Version(importlib.metadata.version("openrlhf")))
    assert str(release.version) == importlib.metadata.version("openrlhf"), "rerun scripts/gen_openrlhf_flags.py"
    folder = Path(next(iter(spec.submodule_search_locations))) / "cli"
    for table, source in ((release.train_ppo_ray, "train_ppo_ray.py"), (release.serve_rm, "serve_rm.py")):
        theirs = file_flags(folder / source)
        assert set(theirs) == set(table)
        for name, info in theirs.items():
            flag = table[name]
            kind = info["action"] if info.get("action") in ("store_true", "store_false") else info.get("type", "str")
            assert (flag.kind, flag.nargs) == (kind, info.get("nargs")), name
            assert flag.choices == (tuple(info["choices"]) if info.get("choices") else None), name  # type: ignore[arg-type]
    theirs = file_flags(folder / "train_ppo_ray.py")
    for name in PLACEMENT_FLAGS:
        assert release.defaults[name] == theirs[name].get("default", False), name  # False: store_true's own


# ---- the version in plan.json ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "recorded"),
    [
        (release_site("0.11.0"), {"version": "0.11.0", "source": "stated"}),
        (release_site("0.10.3.dev1"), {"version": "0.10.3.dev1", "source": "stated", "read_as": "0.10.2"}),
        (None, {"version": "0.11.2", "source": "installed"}),  # the installed openrlhf (tests/requirements-...)
    ],
)
def test_plan_json_records_the_version_planned_and_reads_it_back(
    tmp_path: Path, text: str | None, recorded: dict[str, str]
) -> None:
    p = plan(tmp_path, "--actor.model_name_or_path", "m", "--reward.remote_url", "x", text=text)
    path = tmp_path / "plan.json"
    with path.open("w", encoding="utf-8") as out:
        write_plan_json(p, out)
    assert json.loads(path.read_text(encoding="utf-8"))["source"]["framework_version"] == recorded
    assert load_plan(path).framework_version == p.framework_version == PlannedVersion.from_json(recorded)


def test_with_no_openrlhf_known_the_newest_release_read_is_planned_and_recorded(tmp_path: Path) -> None:
    assert planned_version(None) == PlannedVersion(str(releases()[-1].version), "newest")
    assert release_for(None) == releases()[-1]
