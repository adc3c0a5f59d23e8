"""What a new user met (issue 20), planner side: a too-wide ROLL mapping and `slurm.nodes`, a group
without a partition, hints that name the right thing, and the plan summary / SVG."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from hpcplace.cli import main
from hpcplace.config.formats import load_spec
from hpcplace.plan.gpumap import summary, svg
from hpcplace.plan.planner import plan_from_file, plan_from_spec
from hpcplace.slurm.render import render_script
from tests.planner.conftest import Yaml
from tests.planner.test_formats import assert_error_at

SVG_NS = "{http://www.w3.org/2000/svg}"

ROLL_WIDE = """
    num_gpus_per_node: 8
    actor_train:
      device_mapping: list(range(0,16))
    actor_infer:
      device_mapping: list(range(0,24))
"""


# ------------------------------------------------------------------------------------------------
# 1. a ROLL device_mapping that grows the job; slurm.nodes


def test_roll_mapping_that_adds_a_node_is_reported(yml: Yaml) -> None:
    path = yml.write(ROLL_WIDE)
    plan = plan_from_file(path)
    assert len(plan.cluster.nodes) == 3
    (warning,) = [w for w in plan.warnings if "actor_infer" in w]
    assert f"device_mapping ({yml.where(path, 'list(range(0,24))')})" in warning
    assert "reaches GPU 23, so the job takes 3 nodes of 8 GPUs where the other workers need 2" in warning
    assert "slurm.nodes: 2" in warning


def test_roll_workers_of_equal_reach_give_no_warning(yml: Yaml) -> None:
    plan = plan_from_file(yml.write(ROLL_WIDE.replace("0,24", "0,16")))
    assert len(plan.cluster.nodes) == 2 and plan.warnings == ()


def test_slurm_nodes_refuses_a_mapping_that_needs_more(yml: Yaml) -> None:
    path = yml.write(ROLL_WIDE)
    err = yml.error(path, overrides=["slurm.nodes=2"])
    assert_error_at(
        err,
        yml.where(path, "list(range(0,24))"),
        "worker 'actor_infer': device_mapping reaches GPU 23, which needs 3 nodes of 8 GPUs, but "
        "slurm.nodes (<override slurm.nodes=2>:1:13) pins the job to 2",
        "with 2 nodes the GPU ids are 0-15: narrow the mapping (e.g. list(range(0,16))), or raise slurm.nodes",
    )
    assert err.exit_code == 2


def test_slurm_nodes_pins_the_count(yml: Yaml) -> None:
    path = yml.write(ROLL_WIDE.replace("0,24", "0,16") + "    slurm: {nodes: 3}\n")
    plan = plan_from_file(path)
    assert len(plan.cluster.nodes) == 3  # one more than the mappings need: idle, and said so
    assert any("nodes [2] run no process" in w for w in plan.warnings)
    assert len(plan_from_file(yml.write(ROLL_WIDE), overrides=["slurm.nodes=3"]).cluster.nodes) == 3


def test_slurm_nodes_is_roll_only(yml: Yaml) -> None:
    rlinf = yml.write("""
        cluster: {num_nodes: 1, component_placement: {actor: all}}
        slurm: {gpus_per_node: 8, nodes: 2}
    """)
    err = yml.error(rlinf)
    assert_error_at(
        err,
        yml.where(rlinf, "nodes: 2"),
        "slurm.nodes pins the node count of a ROLL config",
        "set cluster.num_nodes (RLinf) or cluster.n_nodes (AReaL) instead",
    )
    native = yml.write("""
        name: x
        cluster:
          node_groups: [{label: a800, partition: a800, nodes: 1, gpus_per_node: 8}]
          component_placement: {actor: all}
        slurm: {nodes: 2}
    """)
    assert_error_at(
        yml.error(native),
        yml.where(native, "nodes: 2"),
        "a native config gives each node group its own",
        "set `nodes:` in cluster.node_groups",
    )


# ------------------------------------------------------------------------------------------------
# 2. a native group without `partition:`

NO_PARTITION = """
    name: x
    cluster:
      node_groups: [{label: a800, nodes: 1, gpus_per_node: 8}]
      component_placement: {actor: all}
    components: {actor: {command: [python, main.py]}}
"""


def test_group_without_partition_is_said_in_plan_and_header(yml: Yaml, capsys: pytest.CaptureFixture[str]) -> None:
    path = yml.write(NO_PARTITION)
    plan = plan_from_file(path)
    assert plan.cluster.node_groups[0].partition == "a800"
    expected = (
        f"node group 'a800' ({yml.where(path, '{label')}) gives no partition: it asks Slurm for partition "
        "'a800', its label; add `partition:` if the cluster names it otherwise"
    )
    assert plan.warnings == (expected,)
    assert main(["plan", str(path)]) == 0
    assert f"  warning: {expected}" in capsys.readouterr().out
    header = render_script(plan, "/srv/run").split("# ====\n")[0]
    assert f"#   {expected}" in header
    given = plan_from_file(yml.write(NO_PARTITION.replace("label: a800,", "label: a800, partition: gpu,")))
    assert given.warnings == ()
    null = plan_from_file(yml.write(NO_PARTITION.replace("label: a800,", "label: a800, partition: null,")))
    assert len(null.warnings) == 1 and "gives no partition" in null.warnings[0]


# ------------------------------------------------------------------------------------------------
# 3. hints that name the right thing


def test_node_ranks_past_num_nodes_name_num_nodes(yml: Yaml) -> None:
    path = yml.write("""
        cluster:
          num_nodes: 5
          node_groups: [{label: a, node_ranks: 2-5}]
          component_placement: {actor: all}
        slurm: {gpus_per_node: 8}
    """)
    assert_error_at(
        yml.error(path),
        yml.where(path, "2-5"),
        "node ranks '2-5' is out of range: only 5 nodes (0-4)",
        "cluster.num_nodes is 5: node ranks count from 0 to 4; raise cluster.num_nodes or lower the ranks",
    )


@pytest.mark.parametrize(
    "placement, hint",
    [
        (
            "{node_group: a800, placement: '0-16'}",
            "node group 'a800' has 16 GPUs (2 nodes x 8): ranks 0-15; count from 0 within the selected node group(s)",
        ),
        (
            "{node_group: 'a800,rtx', placement: '0-20'}",
            "node groups 'a800', 'rtx' have 20 GPUs (a800: 2 nodes x 8, rtx: 1 node x 4): ranks 0-19; count from 0 within "
            "the selected node group(s)",
        ),
        (
            "'0-99'",
            "node groups 'a800', 'rtx' have 20 GPUs (a800: 2 nodes x 8, rtx: 1 node x 4): ranks 0-19; count from "
            "0 within the selected node group(s)",
        ),
        (
            "{node_group: cpu, placement: '1:0-1'}",
            "node group 'cpu' has 1 node: rank 0; count from 0 within the selected node group(s)",
        ),
    ],
)
def test_out_of_range_hint_counts_the_group(yml: Yaml, placement: str, hint: str) -> None:
    path = yml.write(f"""
        name: x
        cluster:
          node_groups:
            - {{label: a800, partition: a800, nodes: 2, gpus_per_node: 8}}
            - {{label: rtx, partition: rtx, nodes: 1, gpus_per_node: 4}}
            - {{label: cpu, partition: cpu, nodes: 1}}
          component_placement: {{actor: {placement}}}
    """)
    err = yml.error(path)
    assert "is out of range" in err.message
    assert err.hint == hint


def test_missing_hydra_default_points_at_the_entry(yml: Yaml) -> None:
    (yml.tmp_path / "model").mkdir()
    for name in ("small", "large"):
        (yml.tmp_path / "model" / f"{name}.yaml").write_text("tp: 1\n", encoding="utf-8")
    path = yml.write("""
        defaults:
          - _self_
          - model@actor.model: smal
        cluster: {num_nodes: 1, component_placement: {actor: all}}
        slurm: {gpus_per_node: 8}
    """)
    err = yml.error(path)
    assert_error_at(
        err,
        yml.where(path, "smal"),
        "Could not find 'model/smal'",
        f"config group 'model' has no option 'smal'; its options are: large, small (the .yaml files in "
        f"{(yml.tmp_path / 'model').resolve()})",
    )
    nogroup = yml.write(
        "defaults: [{optimizer: adam}, _self_]\ncluster: {num_nodes: 1, component_placement: {actor: all}}\n"
    )
    err = yml.error(nogroup)
    assert err.hint is not None and err.hint.startswith("there is no config group folder 'optimizer'")


def test_misspelt_roll_worker_key_suggests_the_key(yml: Yaml) -> None:
    path = yml.write("""
        num_gpus_per_node: 8
        actor_train:
          device_mapping: list(range(0,8))
        actor_infer:
          device_maping: list(range(0,8))
    """)
    assert_error_at(
        yml.error(path),
        yml.where(path, "device_maping"),
        "unknown key 'device_maping' in worker 'actor_infer'; did you mean 'device_mapping'?",
    )
    # ROLL's many other worker keys are not refused
    fine = yml.write("""
        num_gpus_per_node: 8
        actor_train:
          device_mapping: list(range(0,8))
          model_args: {dtype: bf16}
          strategy_args: {strategy_name: megatron_train, strategy_config: {}}
          infer_batch_size: 4
    """)
    assert plan_from_file(fine).component("actor_train").world_size == 8
    typo = yml.write(fine.read_text().replace("strategy_name", "stratgy_name"))
    assert "did you mean 'strategy_name'?" in yml.error(typo).message


def test_unknown_key_suggestions_in_every_format(yml: Yaml) -> None:
    rlinf = yml.write("""
        cluster: {num_nodes: 1, component_placement: {actor: all}}
        slurm: {gpus_per_node: 8, partiton: a800}
    """)
    assert "unknown key 'partiton' in `slurm`; did you mean 'partition'?" in yml.error(rlinf).message
    far = yml.write("""
        cluster: {num_nodes: 1, component_placement: {actor: all}}
        slurm: {gpus_per_node: 8, zzz: 1}
    """)
    assert yml.error(far).message == "unknown key 'zzz' in `slurm`"


# ------------------------------------------------------------------------------------------------
# 4. the plan summary and SVG

MIXED = """
    name: mixed
    cluster:
      node_groups:
        - {label: a800, partition: a800, nodes: 2, gpus_per_node: 8}
        - {label: rtx, partition: rtx, nodes: 1, gpus_per_node: 4}
      component_placement:
        actor: {node_group: a800, placement: "0-8"}
        a_very_long_component_name: {node_group: a800, placement: "9"}
        rollout: {node_group: rtx, placement: "0-1"}
"""


def test_summary_plurals_ranges_alignment_idle_gpus(yml: Yaml) -> None:
    plan = plan_from_file(yml.write(MIXED))
    text = summary(plan)
    assert text.splitlines()[0].endswith("3 components, 12 processes, 3 nodes")
    assert "  [1] rtx          partition=rtx        nodes=1    gpus/node=4  node ranks 2\n" in text
    assert "on nodes 0-1" in text and "rtx (gpu) on node 2" in text
    comp_lines = [line for line in text.splitlines() if "world_size=" in line]
    assert len({line.index("world_size=") for line in comp_lines}) == 1  # aligned past the long name
    assert "  a_very_long_component_name world_size=1 " in text
    node1 = text.split("  node 1 (a800#1, a800):\n")[1].split("  node 2")[0].splitlines()
    assert node1[:2] == ["      GPU0     actor 8", "      GPU1     a_very_long_component_name 0"]
    assert node1[2:] == [f"      GPU{g}     idle" for g in range(2, 8)]
    assert "      GPU3     idle" in text.split("  node 2 (rtx#0, rtx):\n")[1]
    # more than half of a node idle is a warning; exactly half (rtx: 2 of 4) is not
    idle_warnings = [w for w in plan.warnings if "run no process; the job holds" in w]
    assert idle_warnings == [
        "node group 'a800': most GPUs of node 1 (6 of 8) run no process; the job holds every "
        "GPU of its nodes (they show as idle in the map)"
    ]
    one = summary(
        plan_from_file(
            yml.write(
                MIXED.replace("nodes: 2,", "nodes: 1,")
                .replace('"0-8"', '"0-7"')
                .replace('a_very_long_component_name: {node_group: a800, placement: "9"}', "")
            )
        )
    )
    assert "2 components, 10 processes, 2 nodes" in one


def test_summary_singular_counts(yml: Yaml) -> None:
    path = yml.write("""
        name: one
        cluster:
          node_groups: [{label: a800, partition: a800, nodes: 1, gpus_per_node: 1}]
          component_placement: {actor: all}
        slurm: {time: "1:00:00"}
    """)
    text = summary(plan_from_file(path))
    assert text.splitlines()[0].endswith("1 component, 1 process, 1 node")
    assert "  time limit: 1:00:00\n" in text


def test_summary_says_when_the_partition_time_limit_applies(yml: Yaml) -> None:
    text = summary(plan_from_file(yml.write(MIXED)))
    assert "  time limit: none given (slurm.time): the partitions' default time limits apply\n" in text


def test_svg_draws_idle_gpus_with_a_legend(yml: Yaml) -> None:
    root = ET.fromstring(svg(plan_from_file(yml.write(MIXED))))
    idle = [r for r in root.iter(f"{SVG_NS}rect") if r.get("class") == "idle"]
    # node 1: GPUs 2-7, node 2: GPUs 2-3, plus the legend swatch
    assert len(idle) == 6 + 2 + 1
    assert all(r.get("stroke-dasharray") for r in idle)
    titles = [t.text for r in idle for t in r.iter(f"{SVG_NS}title")]
    assert "GPU7: idle (allocated, no process)" in titles
    assert "idle GPU (allocated)" in [t.text for t in root.iter(f"{SVG_NS}text")]
    full = ET.fromstring(
        svg(
            plan_from_file(
                yml.write(MIXED.replace('"0-8"', '"0-7"').replace('"9"', '"8-15"').replace('"0-1"', '"0-3"'))
            )
        )
    )
    assert not [r for r in full.iter(f"{SVG_NS}rect") if r.get("class") == "idle"]  # nothing idle, no legend


def test_svg_option_says_what_it_wrote(yml: Yaml, capsys: pytest.CaptureFixture[str]) -> None:
    path = yml.write(MIXED)
    target = yml.tmp_path / "map.svg"
    assert main(["plan", str(path), "--svg", str(target)]) == 0
    said = capsys.readouterr().err.splitlines()
    assert said[-1] == f"hpcplace: wrote the device map to {target} (3 of 3 nodes)"
    assert all(line.startswith("hpcplace: warning: ") for line in said[:-1])  # the config has no commands
    assert main(["plan", str(path), "--svg", str(target), "--max-nodes", "1"]) == 0
    said = capsys.readouterr().err.splitlines()
    assert said[-1] == f"hpcplace: wrote the device map to {target} (1 of 3 nodes, --max-nodes for more)"


@pytest.mark.parametrize(
    "where, message",
    [
        ("missing/map.svg", "the folder {tmp}/missing does not exist"),
        (".", "is a directory"),
    ],
)
def test_svg_into_a_bad_path_is_a_usage_error(
    yml: Yaml, capsys: pytest.CaptureFixture[str], where: str, message: str
) -> None:
    path = yml.write(MIXED)
    target = yml.tmp_path / where
    assert main(["plan", str(path), "--svg", str(target)]) == 2
    err = capsys.readouterr().err
    assert message.format(tmp=yml.tmp_path) in err and "Traceback" not in err
    assert f"\nhpcplace: error: --svg {target}" in "\n" + err


def test_native_spec_is_unchanged_by_the_warning(yml: Yaml) -> None:
    """The partition note is a plan warning only: the spec keeps the label as the partition."""
    spec = load_spec(yml.write(NO_PARTITION))
    assert spec.cluster.node_groups[0].partition == "a800"
    assert plan_from_spec(spec).warnings == spec.notes
