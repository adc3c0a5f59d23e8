"""Input formats: native (errors with file:line:col), RLinf unchanged + slurm facts, ROLL, AReaL."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcplace.config.formats import detect_format, load_spec
from hpcplace.errors import HpcplaceError, SpecError
from hpcplace.plan.planner import plan_from_file, plan_from_spec
from tests.planner.conftest import Yaml, gpus_of

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"

NATIVE_HEAD = """
name: t
cluster:
  node_groups:
    - {label: a800, partition: gpu-a, nodes: 2, gpus_per_node: 8, gpu_type: a800}
    - {label: rtx, nodes: 1, gpus_per_node: 4}
    - {label: cpu, nodes: 1}
  component_placement:
"""


def native(placements: str, tail: str = "") -> str:
    return NATIVE_HEAD + "\n".join("    " + line for line in placements.strip("\n").splitlines()) + "\n" + tail


def assert_error_at(err: HpcplaceError, where: str, message: str, hint: str | None = None) -> None:
    text = str(err)
    assert text.startswith(f"{where}: "), text
    assert message in text.splitlines()[0], text
    if hint is not None:
        assert f"\n  HINT: {hint}" in text, text


# ================================================================================================
# native format


def test_native_minimal(yml: Yaml) -> None:
    plan = plan_from_file(yml.write(native("actor: 0-3")))
    assert plan.source_format == "native"
    assert [g.partition for g in plan.cluster.node_groups] == ["gpu-a", "rtx", "cpu"]  # partition defaults to label
    assert gpus_of(plan, "actor") == [[(0, 0)], [(0, 1)], [(0, 2)], [(0, 3)]]


def test_rank_error_in_a_double_quoted_value_points_at_the_part(yml: Yaml) -> None:
    path = yml.write(native('actor: {node_group: a800, placement: "0-3, 5-4"}'))
    err = yml.error(path)
    assert_error_at(
        err, yml.where(path, "5-4"), "GPU ranks '5-4': start 5 is greater than end 4", "write it ascending: `4-5`"
    )
    assert "placement '0-3, 5-4' of actor (a800)" in err.message


def test_rank_error_in_a_plain_value_points_at_the_part(yml: Yaml) -> None:
    path = yml.write(native("rollout: 0-3,2-5"))
    assert_error_at(
        yml.error(path),
        yml.where(path, "2-5"),
        "GPU ranks '2-5' overlap or precede the previous part (which ends at 3)",
    )
    path = yml.write(native("rollout: {node_group: rtx, placement: '0-3,9-99'}"))
    assert_error_at(
        yml.error(path), yml.where(path, "9-99"), "GPU ranks '9-99' is out of range: only 4 resources (0-3) here"
    )


def test_rank_error_in_a_single_quoted_value(yml: Yaml) -> None:
    path = yml.write(native("env: '0-3,0-1:0-2'"))
    assert_error_at(
        yml.error(path),
        yml.where(path, "0-1:0-2"),
        "GPU ranks '0-1' overlap or precede the previous part (which ends at 3)",
    )
    path = yml.write(native("env: {node_group: rtx, placement: '0-2:0-1'}"))
    assert_error_at(
        yml.error(path),
        yml.where(path, "0-2:0-1"),
        "part '0-2:0-1': 2 processes on 3 GPUs; one count must divide the other",
    )


def test_process_all_points_at_the_process_part(yml: Yaml) -> None:
    path = yml.write(native("agent: {node_group: cpu, placement: '0:ALL'}"))
    assert_error_at(yml.error(path), yml.where(path, "ALL"), "process ranks cannot be 'all'")


def test_process_ranks_from_zero_error_points_at_them(yml: Yaml) -> None:
    path = yml.write(native("actor: 0-3:1-4"))
    assert_error_at(yml.error(path), yml.where(path, "1-4"), "process ranks '1-4' must start at 0", "write `0-3:0-3`")


def test_invalid_yaml(yml: Yaml) -> None:
    path = yml.write("name: t\ncluster: [\n")
    err = yml.error(path)
    assert str(err).startswith(f"{path}:3:1: invalid YAML")
    assert "HINT: check indentation and quoting" in str(err)


def test_duplicate_keys(yml: Yaml) -> None:
    path = yml.write(native("actor: 0-3\nactor: 4-7"))
    assert_error_at(
        yml.error(path),
        yml.where(path, "actor", nth=2),
        "duplicate key 'actor'",
        "each key may appear once in a mapping; merge the two entries",
    )
    path = yml.write(native("actor: 0-3") + "name: again\n")
    assert_error_at(yml.error(path), yml.where(path, "name", nth=2), "duplicate key 'name'")


def line_of(where: str) -> str:
    """`path:line:` of a `path:line:col` (for errors whose exact column is not the point)."""
    return where.rsplit(":", 1)[0] + ":"


def test_unknown_key_in_a_node_group(yml: Yaml) -> None:
    path = yml.write(NATIVE_HEAD.replace("gpu_type: a800}", "gpu_type: a800, gpus: 8}") + "    actor: 0\n")
    err = yml.error(path)
    assert str(err).startswith(line_of(yml.where(path, "gpus: 8")))
    assert "unknown key 'gpus' in `cluster.node_groups.0`" in err.message
    assert "HINT: allowed keys: account, constraint, cpus_per_node," in str(err)


def test_unknown_top_level_key(yml: Yaml) -> None:
    path = yml.write(native("actor: 0", "clsuter: {}\n"))
    err = yml.error(path)
    assert str(err).startswith(line_of(yml.where(path, "clsuter")))
    assert err.message == "unknown key 'clsuter' in `top level`; did you mean 'cluster'?"
    assert err.hint == "allowed keys: cluster, components, container, format, launch, name, services, slurm"


def test_unknown_component_setting(yml: Yaml) -> None:
    path = yml.write(native("actor: 0", "components:\n  actor: {comand: [x]}\n"))
    err = yml.error(path)
    assert str(err).startswith(line_of(yml.where(path, "comand")))
    assert err.message == "unknown key 'comand' in `components.actor`; did you mean 'command'?"


def test_component_placed_twice(yml: Yaml) -> None:
    path = yml.write(native("actor,rollout: 0-3\nrollout: 4-7"))
    err = yml.error(path)
    assert str(err).startswith(line_of(yml.where(path, "rollout", nth=2)))
    assert err.message == f"component 'rollout' is placed twice (first at {path}:8:5)"
    assert (err.hint or "").startswith("a component name may appear in only one key of component_placement")


def test_settings_without_placement(yml: Yaml) -> None:
    path = yml.write(native("actor: 0", "components:\n  critic: {offload: true}\n"))
    err = yml.error(path)
    assert str(err).startswith(line_of(yml.where(path, "critic")))
    assert err.message == "component 'critic' has settings but no placement"


@pytest.mark.parametrize(
    "tail, key, message",
    [
        ("clsuter:\n  x: 1\n", "clsuter", "unknown key 'clsuter'"),
        ("components:\n  critic:\n    offload: true\n", "critic", "has settings but no placement"),
    ],
)
def test_key_errors_point_at_the_key(yml: Yaml, tail: str, key: str, message: str) -> None:
    path = yml.write(native("actor: 0", tail))
    assert_error_at(yml.error(path), yml.where(path, key), message)


def test_yaml_list_node_group(yml: Yaml) -> None:
    """RLinf's list form is broken; ours must work and equal the comma string."""
    listed = plan_from_file(yml.write(native("actor:\n  node_group: [rtx, a800]\n  placement: 2-5")))
    comma = plan_from_file(yml.write(native("actor: {node_group: 'rtx, a800', placement: 2-5}")))
    assert listed.component("actor").processes == comma.component("actor").processes
    assert gpus_of(listed, "actor") == [[(2, 2)], [(2, 3)], [(0, 0)], [(0, 1)]]


def test_integer_placement_equals_string(yml: Yaml) -> None:
    as_int = plan_from_file(yml.write(native("actor: 5")))
    as_str = plan_from_file(yml.write(native('actor: "5"')))
    assert as_int.component("actor").processes == as_str.component("actor").processes
    assert gpus_of(as_int, "actor") == [[(0, 5)]]


def test_comma_key_places_components_alike(yml: Yaml) -> None:
    plan = plan_from_file(yml.write(native("'actor, rollout': {node_group: rtx, placement: all}")))
    assert plan.component("actor").processes == plan.component("rollout").processes
    assert plan.component("actor").world_size == 4


@pytest.mark.parametrize(
    "value, message",
    [
        ("true", "placement must be a string like `0-7` or an integer, got True"),
        ("[0, 1]", "placement must be a string like `0-7` or an integer, got [0, 1]"),
        ("", "no placement given"),  # `{actor,rollout: all}` in flow style: YAML's `actor` key is empty
        ("{node_group: rtx}", "missing required key 'placement'"),
        ("{node_group: rtx, placement: 0, extra: 1}", "unknown key 'extra'"),
        ("{node_group: '', placement: 0}", "empty node group label"),
        ("{node_group: nope, placement: 0}", "unknown node group 'nope'"),
    ],
)
def test_placement_value_errors(yml: Yaml, value: str, message: str) -> None:
    path = yml.write(native(f"actor: {value}"))
    err = yml.error(path)
    assert str(err).startswith(f"{path}:8:"), str(err)
    assert message in str(err)


@pytest.mark.parametrize("value, gpu", [("1:0", 1), ("010", 10)])
def test_unquoted_placement_keeps_its_text(yml: Yaml, value: str, gpu: int) -> None:
    path = yml.write(f"""
        name: t
        cluster:
          node_groups: [{{label: a, nodes: 8, gpus_per_node: 8}}]
          component_placement:
            actor: {value}
    """)
    try:
        plan = plan_from_file(path)
    except SpecError as exc:
        assert "quote" in str(exc)  # rejecting the ambiguous value, asking for quotes, is fine too
        return
    assert gpus_of(plan, "actor") == [[(gpu // 8, gpu % 8)]]


def test_node_group_errors(yml: Yaml) -> None:
    head = "name: t\ncluster:\n  component_placement: {actor: 0}\n  node_groups:\n"
    cases = [
        ("    - {label: a, gpus_per_node: 8}\n", "missing required key 'nodes'", "{label", "{label"),
        ("    - {label: a, nodes: 2, gpus_per_node: [8]}\n", "gpus_per_node: 1 values for 2 nodes", "[8]", "[8]"),
        ("    - {label: a, nodes: 0}\n", "expected an integer >= 1, got 0", "0}", "nodes: 0"),
        ("    - {label: node, nodes: 1}\n", "node group label 'node' is reserved", "{label", "{label"),
        (
            "    - {label: a, nodes: 1}\n    - {label: A, nodes: 1}\n",
            "duplicate node group label 'A'",
            "{label: A",
            "{label: A",
        ),
        ("    - {label: 'a b', nodes: 1}\n", "invalid node group label 'a b'", "'a b'", "'a b'"),
        (
            "    - {label: a, nodes: 1, hardware: {type: robot, count: [1, 2]}}\n",
            "hardware.count: 2 values for 1",
            "[1, 2]",
            "[1, 2]",
        ),
        ("    - {label: a, nodes: 1, mem_per_node: 12Q}\n", "invalid memory size '12Q'", "12Q", "12Q"),
    ]
    for body, message, needle, line_hint in cases:
        path = yml.write(head + body)
        assert_error_at(yml.error(path), yml.where(path, needle, line_hint=line_hint), message)


def test_native_settings(yml: Yaml) -> None:
    path = yml.write(
        native(
            "actor: 0-1",
            """
components:
  actor: {command: "python3 -c 'print(1)'", env: {A: 1, B: true}, offload: true, tp: 2, cpus_per_process: 4,
          mem_per_process: 4G}
""".lstrip("\n"),
        )
    )
    spec = load_spec(path)
    actor = spec.component("actor")
    assert actor.command == ("python3", "-c", "print(1)")
    assert actor.env == {"A": "1", "B": "1"}
    assert (actor.offload, actor.tensor_parallel_size, actor.cpus_per_process, actor.mem_per_process_mb) == (
        True,
        2,
        4,
        4096,
    )


def test_tp_given_twice(yml: Yaml) -> None:
    path = yml.write(native("actor: 0-1", "components:\n  actor: {tp: 2, tensor_parallel_size: 2}\n"))
    assert "both 'tensor_parallel_size' and 'tp' are given" in str(yml.error(path))


def test_missing_file_and_unknown_format(tmp_path: Path, yml: Yaml) -> None:
    with pytest.raises(SpecError, match="config file not found"):
        load_spec(tmp_path / "nope.yaml")
    with pytest.raises(SpecError, match="cannot tell the config format") as info:
        load_spec(yml.write("hello: world\n"))
    assert "format: native|rlinf|roll|areal" in (info.value.hint or "")
    with pytest.raises(SpecError, match="must be a YAML mapping"):
        load_spec(yml.write("- 1\n- 2\n"))


def test_detect_format() -> None:
    assert detect_format({"format": "ROLL"}) == "roll"
    assert detect_format({"allocation_mode": "d8"}) == "areal"
    assert detect_format({"cluster": {"num_nodes": 1, "component_placement": {}}}) == "rlinf"
    assert detect_format({"cluster": {"node_groups": [], "component_placement": {}}}) == "native"
    assert detect_format({"num_gpus_per_node": 8}) == "roll"


# ================================================================================================
# RLinf format

RLINF = """
cluster:
  num_nodes: 5
  component_placement:
    actor: {node_group: a800, placement: 0-15}
    rollout: {node_group: ["4090"], placement: 0-7}
    env: {node_group: robot, placement: "0-3:0-7"}
    agent: {node_group: node, placement: "0-4:0-9"}
  node_groups:
    - {label: a800, node_ranks: 0-1}
    - {label: "4090", node_ranks: "2, 3"}
    - label: robot
      node_ranks: 4
      hardware:
        type: franka
        configs: [{node_rank: 4, robot_ip: 10.0.0.1}, {node_rank: 4, robot_ip: 10.0.0.2},
                  {node_rank: 4, robot_ip: 10.0.0.3}, {node_rank: 4, robot_ip: 10.0.0.4}]
      env_configs: [{node_ranks: 4, env_vars: [{ROBOT: "1"}]}]
slurm:
  gpus_per_node: 0
  partition: default-part
  node_groups:
    a800: {partition: a800, gpus_per_node: 8, gpu_type: a800, mem_per_node: 64G}
    "4090": {partition: rtx4090, gpus_per_node: 4, gpu_type: rtx4090}
"""


def test_rlinf_cluster_facts(yml: Yaml) -> None:
    plan = plan_from_file(yml.write(RLINF))
    assert plan.source_format == "rlinf"
    groups = plan.cluster.node_groups
    assert [(g.label, g.partition, g.num_nodes, g.gpus_per_node, g.gpu_type) for g in groups] == [
        ("a800", "a800", 2, (8, 8), "a800"),
        ("4090", "rtx4090", 2, (4, 4), "rtx4090"),
        ("robot", "default-part", 1, (0,), None),
    ]
    assert groups[0].mem_per_node_mb == 65536
    assert groups[2].hardware is not None and groups[2].hardware.per_node == (4,)
    assert groups[2].env == {} and groups[2].node_env == ({"ROBOT": "1"},)  # per node (RLinf env_configs)
    assert plan.component("actor").world_size == 16
    assert gpus_of(plan, "rollout")[-1] == [(3, 3)]
    assert [p.local_hardware_ranks for p in plan.component("env").processes] == [(r // 2,) for r in range(8)]
    assert [p.cluster_node_rank for p in plan.component("agent").processes] == [r // 2 for r in range(10)]


def test_rlinf_example_config() -> None:
    plan = plan_from_file(CONFIGS / "rlinf-heterogeneous.yaml")
    assert {c.name: c.world_size for c in plan.components} == {"actor": 16, "rollout": 4, "env": 8, "agent": 16}
    # sized for the test cluster: no node runs more one-CPU processes than it has CPUs
    for node in plan.cluster.nodes:
        group = plan.cluster.node_groups[node.group_index]
        on_node = sum(1 for c in plan.components for p in c.processes if p.cluster_node_rank == node.rank)
        assert group.cpus_per_node is not None and on_node <= group.cpus_per_node, node


def test_rlinf_misspelt_component_is_warned_about(yml: Yaml) -> None:
    """RLinf configures a placed component from its section: `actr` placed next to an unplaced `actor:`
    section is a typo (a warning: RLinf itself fails only when it builds that worker)."""
    text = (CONFIGS / "tour" / "rlinf-tour.yaml").read_text()
    plan = plan_from_file(yml.write(text.replace("actor,rollout,reward: all", "actr,rollout,reward: all")))
    assert "component 'actr' is placed, but the config has no `actr:` section; did you mean 'actor'?" in plan.warnings
    assert not any("is placed, but" in w for w in plan_from_file(CONFIGS / "tour" / "rlinf-tour.yaml").warnings)


def test_rlinf_actor_gpus_not_a_multiple_of_its_model_parallel_size(yml: Yaml) -> None:
    text = (CONFIGS / "tour" / "rlinf-tour.yaml").read_text()
    with pytest.raises(HpcplaceError) as info:
        plan_from_file(yml.write(text.replace("actor,rollout,reward: all", "actor,rollout,reward: 0-9")))
    assert info.value.message == "actor has 10 GPUs, not a multiple of tp*pp = 4*1"
    assert info.value.hint == (
        "place the actor on a multiple of 4 GPUs (8 or 12), or change the actor's tensor/pipeline-parallel sizes"
    )


def test_rlinf_missing_gpus_per_node(yml: Yaml) -> None:
    path = yml.write("""
        cluster:
          num_nodes: 2
          component_placement:
            actor,rollout: all
        slurm:
          partition: a800
    """)
    err = yml.error(path)
    assert_error_at(err, yml.where(path, "num_nodes"), "GPUs per node of node group 'default' are unknown")
    assert "slurm: {gpus_per_node: 8}" in (err.hint or "")
    assert "--set slurm.gpus_per_node=8" in (err.hint or "")
    plan = plan_from_spec(load_spec(path, overrides=["slurm.gpus_per_node=8"]))
    assert plan.component("actor").world_size == 16
    assert plan.cluster.node_groups[0].gpus_per_node == (8, 8)


def test_rlinf_missing_partition_means_slurm_default(yml: Yaml) -> None:
    from hpcplace.slurm.slurm_job import lower

    path = yml.write("cluster: {num_nodes: 1, component_placement: {actor: all}}\nslurm: {gpus_per_node: 8}\n")
    plan = plan_from_file(path)
    assert plan.cluster.node_groups[0].partition is None
    assert not any(a.startswith("--partition") for a in lower(plan).components[0].sbatch_args)
    plan = plan_from_spec(load_spec(path, overrides=["slurm.partition=gpu"]))
    assert plan.cluster.node_groups[0].partition == "gpu"


def test_overrides_replace_values_and_reject_garbage(yml: Yaml) -> None:
    path = yml.write(
        "cluster: {num_nodes: 1, component_placement: {actor: all}}\nslurm: {gpus_per_node: 8, partition: a}\n"
    )
    spec = load_spec(path, overrides=["slurm.gpus_per_node=4", "cluster.num_nodes=2"])
    assert spec.cluster.node_groups[0].gpus_per_node == (4, 4)
    with pytest.raises(SpecError, match="invalid override 'slurm'"):
        load_spec(path, overrides=["slurm"])
    with pytest.raises(SpecError, match="is not a mapping"):
        load_spec(path, overrides=["slurm.gpus_per_node.x=1"])


def test_overrides_take_flow_lists_and_mappings_as_hydra_does() -> None:
    tour = CONFIGS / "tour" / "rlinf-tour.yaml"
    spec = load_spec(
        tour,
        overrides=[
            "cluster.component_placement={actor: 0-7, rollout: 8-15, reward: 8-15}",
            "launch.mode=ray",
            "launch.driver=[python, main.py, --x, 1:00]",
        ],
    )
    assert {n for e in spec.placements for n in e.components} == {"actor", "rollout", "reward"}
    assert spec.launch.driver == ("python", "main.py", "--x", "1:00")  # base-60 text kept, as in a file


def test_overrides_index_list_items_by_position() -> None:
    """`cluster.node_groups.0.nodes=1`, as Hydra takes it; a position the list lacks is named."""
    spec = load_spec(CONFIGS / "hetero-partitions.yaml", overrides=["cluster.node_groups.1.nodes=3"])
    assert spec.cluster.node_groups[1].num_nodes == 3
    with pytest.raises(SpecError) as info:
        load_spec(CONFIGS / "hetero-partitions.yaml", overrides=["cluster.node_groups.9.nodes=1"])
    assert "'cluster.node_groups' is a list of 4 item(s); '9' is not one of its positions" in info.value.message
    assert info.value.location is not None and info.value.location.line > 1


def test_rlinf_uncovered_nodes_form_default_groups(yml: Yaml) -> None:
    path = yml.write("""
        cluster:
          num_nodes: 4
          component_placement: {actor: all}
          node_groups: [{label: mid, node_ranks: 1-2}]
        slurm: {gpus_per_node: 2, partition: p}
    """)
    plan = plan_from_file(path)
    assert [(g.label, g.num_nodes) for g in plan.cluster.node_groups] == [("default", 1), ("mid", 2), ("default-2", 1)]
    assert plan.component("actor").world_size == 8


@pytest.mark.parametrize(
    "groups, message",
    [
        ("[{label: a, node_ranks: 0-1}, {label: b, node_ranks: 1-2}]", "node 1 is in node groups 'a' and 'b'"),
        ("[{label: a, node_ranks: 0-5}]", "node ranks '0-5' is out of range"),
        ("[{label: a, node_ranks: [0, 2]}]", "RLinf parses node_ranks as text and refuses a list"),
        ("[{label: a, node_ranks: 0, bogus: 1}]", "unknown key 'bogus'"),
    ],
)
def test_rlinf_node_group_errors(yml: Yaml, groups: str, message: str) -> None:
    path = yml.write(
        f"cluster:\n  num_nodes: 3\n  component_placement: {{actor: all}}\n  node_groups: {groups}\n"
        "slurm: {gpus_per_node: 2, partition: p}\n"
    )
    err = yml.error(path)
    assert str(err).startswith(f"{path}:4:"), str(err)
    assert message in err.message


def test_rlinf_component_settings(yml: Yaml) -> None:
    spec = load_spec(CONFIGS / "rlinf-hybrid.yaml")
    assert all(spec.component(n).offload for n in ("actor", "env", "rollout"))
    path = yml.write("""
        cluster: {num_nodes: 1, component_placement: {"actor,rollout,reward": all}}
        actor: {model: {tensor_model_parallel_size: 4}}
        rollout: {tensor_parallel_size: 2}
        slurm: {gpus_per_node: 8, partition: p}
    """)
    plan = plan_from_file(path)
    assert plan.weight_sync is not None and plan.weight_sync.mode == "collocated"
    assert (plan.weight_sync.actor_tp, plan.weight_sync.rollout_tp) == (4, 2)


RLINF_MOE = """
cluster:
  num_nodes: 4
  component_placement: {actor: 0-15, inference: 16-23, "rollout,reward": 24-31}
actor:
  training_backend: %s
  model: {tensor_model_parallel_size: 2, expert_model_parallel_size: 8%s}
inference: {model: {tensor_model_parallel_size: 1}}
rollout: {tensor_parallel_size: 2}
slurm: {gpus_per_node: 8, partition: p, topology: {block: 1}}
"""


def test_rlinf_megatron_expert_sizes_feed_the_fabric_check(yml: Yaml) -> None:
    plan = plan_from_file(yml.write(RLINF_MOE % ("megatron", "")))
    actor, inference = plan.component("actor"), plan.component("inference")
    # Megatron's unset ETP is the tensor size: ETP x EP = 2 x 8 = 16 consecutive ranks, over two 1-node blocks
    assert (actor.expert_parallel_size, actor.expert_tensor_parallel_size) == (8, None)
    # RLinf's Megatron inference worker copies the actor's model config but its tensor/pipeline sizes
    assert (inference.expert_parallel_size, inference.expert_tensor_parallel_size) == (8, None)
    assert (plan.component("rollout").expert_parallel_size, plan.component("rollout").gpus_per_engine) == (1, None)
    assert [(c.component, c.what, c.ranks) for c in plan.topology_crossings] == [
        ("actor", "expert-parallel group", tuple(range(16)))
    ]
    plan = plan_from_file(yml.write(RLINF_MOE % ("megatron", ", expert_tensor_parallel_size: 1")))
    assert [(plan.component(n).expert_tensor_parallel_size) for n in ("actor", "inference")] == [1, 1]
    assert plan.topology_crossings == ()  # 1 x 8 ranks: one node each
    fsdp = plan_from_file(yml.write(RLINF_MOE % ("fsdp", "")))  # FSDP does not read Megatron's keys
    assert (fsdp.component("actor").expert_parallel_size, fsdp.topology_crossings) == (1, ())


def test_rlinf_expert_size_in_the_hpcplace_block_must_agree(yml: Yaml) -> None:
    text = RLINF_MOE % ("megatron", "") + "hpcplace: {components: {actor: {expert_parallel_size: 4}}}\n"
    path = yml.write(text)
    err = yml.error(path)
    assert str(err).startswith(yml.where(path, "8", line_hint="expert_model_parallel_size") + ": "), str(err)
    assert "hpcplace.components.actor.expert_parallel_size = 4 conflicts with RLinf's 8" in err.message


# ================================================================================================
# ROLL format

ROLL = """
num_gpus_per_node: 8
slurm: {partition: a800}
actor_train:
  device_mapping: %s
"""


ROLL_MOE = """
num_gpus_per_node: 8
slurm: {partition: a800, topology: {block: 1}}
actor_train:
  strategy_args:
    strategy_name: megatron_train
    strategy_config: {tensor_model_parallel_size: 2, expert_model_parallel_size: 8%s}
  device_mapping: list(range(0,32))
reference:
  strategy_args:
    strategy_name: megatron_infer
    strategy_config: {expert_model_parallel_size: 4, expert_tensor_parallel_size: 1}
  device_mapping: list(range(0,32))
actor_infer:
  strategy_args: {strategy_name: vllm, strategy_config: {tensor_parallel_size: 4}}
  device_mapping: list(range(0,32))
"""


def test_roll_megatron_expert_sizes_feed_the_fabric_check(yml: Yaml) -> None:
    plan = plan_from_file(yml.write(ROLL_MOE % ""))
    train, ref, infer = (plan.component(n) for n in ("actor_train", "reference", "actor_infer"))
    # an unset ETP is Megatron's default, the strategy's tensor size: groups of 2 x 8 = 16 GPUs, two nodes each
    assert (train.expert_parallel_size, train.expert_tensor_parallel_size) == (8, 2)
    assert (ref.expert_parallel_size, ref.expert_tensor_parallel_size) == (4, 1)
    assert (infer.expert_parallel_size, infer.expert_tensor_parallel_size, infer.gpus_per_engine) == (1, None, None)
    assert [(c.component, c.what, c.ranks) for c in plan.topology_crossings] == [
        ("actor_train", "expert-parallel group", tuple(range(16))),
        ("actor_train", "expert-parallel group", tuple(range(16, 32))),
    ]
    plan = plan_from_file(yml.write(ROLL_MOE % ", expert_tensor_parallel_size: 1"))
    assert plan.component("actor_train").expert_tensor_parallel_size == 1 and plan.topology_crossings == ()


def test_roll_megatron_tensor_parallel_groups_feed_the_fabric_check(yml: Yaml) -> None:
    text = ROLL_MOE.replace("expert_model_parallel_size: 8%s", "pipeline_model_parallel_size: 2")
    plan = plan_from_file(yml.write(text.replace("tensor_model_parallel_size: 2", "tensor_model_parallel_size: 16")))
    train = plan.component("actor_train")
    assert (train.tensor_parallel_size, train.pipeline_parallel_size, train.expert_parallel_size) == (16, 2, 1)
    assert ("actor_train", "tensor-parallel group", tuple(range(16))) in {
        (c.component, c.what, c.ranks) for c in plan.topology_crossings
    }
    plan = plan_from_file(yml.write(text))
    assert plan.component("actor_train").tensor_parallel_size == 2
    assert plan.component("reference").tensor_parallel_size == 1  # unset: Megatron's 1
    assert [c for c in plan.topology_crossings if c.component == "actor_train"] == []


def test_roll_expert_sizes_that_do_not_cut_the_mapping_or_disagree_are_refused(yml: Yaml) -> None:
    path = yml.write(ROLL_MOE.replace("list(range(0,32))", "list(range(0,24))", 1) % "")
    assert "= 16 does not divide its 24 GPUs" in yml.error(path).message
    path = yml.write(ROLL_MOE % "" + "hpcplace: {components: {actor_train: {etp: 1}}}\n")
    err = yml.error(path)
    assert str(err).startswith(yml.where(path, "2", line_hint="tensor_model_parallel_size") + ": "), str(err)
    assert "hpcplace.components.actor_train.expert_tensor_parallel_size = 1 conflicts with ROLL's 2" in err.message


@pytest.mark.parametrize(
    "mapping, gpus",
    [
        ("list(range(0,16))", list(range(16))),
        ('"list(range( 0 , 4 ))"', [0, 1, 2, 3]),
        ('"range(0, 8, 2)"', [0, 2, 4, 6]),
        ('"range(3)"', [0, 1, 2]),
        ("'[0,1,2]'", [0, 1, 2]),
        ("[4, 5]", [4, 5]),
        ('"[0, 1,]"', [0, 1]),
        ('"[0,1] + list(range(4,6)) + range(9, 10)"', [0, 1, 4, 5, 9]),
    ],
)
def test_roll_device_mapping_grammar(yml: Yaml, mapping: str, gpus: list[int]) -> None:
    plan = plan_from_file(yml.write(ROLL % mapping))
    assert plan.source_format == "roll"
    assert gpus_of(plan, "actor_train") == [[(g // 8, g % 8)] for g in gpus]
    assert plan.cluster.node_groups[0].num_nodes == max(gpus) // 8 + 1


@pytest.mark.parametrize(
    "mapping, message, needle",
    [
        ("\"__import__('os').system('touch {marker}')\"", "unexpected text \"__import__('os').sys\"", None),
        ('"list(range(0,8)); import os"', "unexpected text '; import os'", "; import"),
        ("__import__('os').system('touch {marker}')", "unexpected text \"__import__('os').sys\"", "__import__"),
        ("\"list(range(0,8)) or open('{marker}', 'w')\"", 'unexpected text "or open(', None),
        ('"[x for x in range(8)]"', "unexpected text 'x for x in range(8)]'", "x for"),
        ("\"eval('1')\"", "unexpected text \"eval('1')\"", None),
        ('"list(range(0,8)"', "expected ) at the end", None),
        ('"range(8,0,-1)"', "unexpected text '-1)'", "-1)"),
        ('"range(0,8,0)"', "range takes 1 to 3 arguments and a non-zero step", None),
        ('"range(1,2,3,4)"', "range takes 1 to 3 arguments and a non-zero step", None),
        ('"[0,0]"', "device_mapping lists GPU 0 twice", '"[0,0]"'),
        ('"[]"', "device_mapping is empty", '"[]"'),
        ("5", "device_mapping must be a list or a string, got 5", "5"),
    ],
)
def test_roll_device_mapping_is_never_evaluated(
    yml: Yaml, tmp_path: Path, mapping: str, message: str, needle: str | None
) -> None:
    marker = tmp_path / "pwned"
    path = yml.write(ROLL % mapping.replace("{marker}", str(marker)))
    err = yml.error(path)
    if needle is not None:
        assert_error_at(err, yml.where(path, needle), message)
    else:
        assert str(err).startswith(f"{path}:4:"), str(err)
        assert message in err.message
    assert not marker.exists()


def test_roll_example_config() -> None:
    plan = plan_from_file(CONFIGS / "roll-example.yaml")
    train, infer, sandbox = (plan.component(n) for n in ("actor_train", "actor_infer", "code_sandbox"))
    assert train.world_size == 16 and {p.cluster_node_rank for p in train.processes} == {0, 1}
    assert infer.world_size == 6
    assert [p.local_hardware_ranks for p in infer.processes] == [(0, 1), (2, 3), (4, 5), (6, 7), (0, 1), (2, 3)]
    assert [p.cluster_node_rank for p in infer.processes] == [0, 0, 0, 0, 1, 1]
    assert sandbox.world_size == 8 and sandbox.resource_type == "node"
    # ROLL's allocate_placement_group: CPU-only worker r on GPU node r % num_nodes
    assert [p.cluster_node_rank for p in sandbox.processes] == [0, 1, 0, 1, 0, 1, 0, 1]
    assert [p.local_rank for p in sandbox.processes] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_roll_world_size_is_computed_like_roll(yml: Yaml) -> None:
    """ROLL overwrites world_size with len(device_mapping) // num_gpus_per_worker: so does the plan, aloud."""
    plan = plan_from_file(yml.write(ROLL % "list(range(0,8))" + "  world_size: 3\n"))
    assert plan.component("actor_train").world_size == 8
    assert any(
        "world_size 3 is replaced by ROLL's len(device_mapping) // num_gpus_per_worker = 8 // 1 = 8" in w
        for w in plan.warnings
    )
    plan = plan_from_file(yml.write(ROLL % "list(range(0,8))" + "  world_size: 4\n  num_gpus_per_worker: 2\n"))
    assert plan.component("actor_train").world_size == 4


def test_roll_vllm_gpus_conflict(yml: Yaml) -> None:
    vllm = (
        "  strategy_args: {strategy_name: vllm, strategy_config: {tensor_parallel_size: 2, "
        "pipeline_parallel_size: 2}}\n"
    )
    plan = plan_from_file(yml.write(ROLL % "list(range(0,8))" + "  num_gpus_per_worker: 2\n" + vllm))
    assert plan.component("actor_train").world_size == 2  # ROLL: vLLM workers get tp * pp GPUs
    assert any("num_gpus_per_worker 2" in w and "replaced by ROLL's 4" in w for w in plan.warnings)
    train = plan_from_file(
        yml.write(
            ROLL % "list(range(0,8))" + "  num_gpus_per_worker: 2\n  strategy_args: {strategy_name: megatron_train}\n"
        )
    )
    assert train.component("actor_train").world_size == 8  # ROLL forces 1 GPU per training worker
    plan = plan_from_file(yml.write(ROLL % "list(range(0,8))" + vllm))
    assert [p.local_hardware_ranks for p in plan.component("actor_train").processes] == [(0, 1, 2, 3), (4, 5, 6, 7)]


def test_roll_gpus_not_divisible(yml: Yaml) -> None:
    path = yml.write(ROLL % "list(range(0,6))" + "  num_gpus_per_worker: 4\n")
    assert "6 GPUs are not divisible by num_gpus_per_worker 4" in str(yml.error(path))


def test_roll_cpu_only_workers(yml: Yaml) -> None:
    body = ROLL % "list(range(0,4))" + "rewards:\n  sandbox: {world_size: 3}\n"
    plan = plan_from_file(yml.write(body))
    sandbox = plan.component("sandbox")
    assert sandbox.world_size == 3 and sandbox.resource_type == "node"
    assert len(plan.cluster.node_groups) == 1  # without a CPU partition they run on the GPU node
    two = plan_from_file(yml.write(body.replace("list(range(0,4))", "list(range(0,16))")))
    assert [p.cluster_node_rank for p in two.component("sandbox").processes] == [0, 1, 0]  # as ROLL: r % nodes
    on_cpu = plan_from_file(
        yml.write(body.replace("{partition: a800}", "{partition: a800, cpu_partition: cpu, cpu_nodes: 3}"))
    )
    assert [p.cluster_node_rank for p in on_cpu.component("sandbox").processes] == [1, 2, 3]
    assert on_cpu.cluster.node_groups[1].partition == "cpu"


def test_roll_cpu_worker_cannot_ask_for_gpus(yml: Yaml) -> None:
    path = yml.write(ROLL % "list(range(0,4))" + "sandbox: {world_size: 3, num_gpus_per_worker: 1}\n")
    err = yml.error(path)
    assert_error_at(
        err,
        yml.where(path, "1}", line_hint="sandbox"),
        "CPU-only worker 'sandbox' (no device_mapping) cannot ask for GPUs",
    )


def test_roll_detected_gpus_per_node_win(yml: Yaml) -> None:
    """ROLL overwrites num_gpus_per_node with the count it detects: the node's GPUs (slurm facts) win."""
    path = yml.write((ROLL % "list(range(0,8))").replace("{partition: a800}", "{partition: a800, gpus_per_node: 4}"))
    plan = plan_from_file(path)
    assert plan.cluster.node_groups[0].gpus_per_node == (4, 4)
    assert any("ROLL uses the count it detects" in w and "num_gpus_per_node 8" in w for w in plan.warnings)


def test_roll_without_num_gpus_per_node(yml: Yaml) -> None:
    body = "slurm: {partition: a800%s}\nactor_train: {device_mapping: 'list(range(0,16))'}\n"
    plan = plan_from_file(yml.write(body % ", gpus_per_node: 8"))
    assert plan.cluster.node_groups[0].gpus_per_node == (8, 8)
    err = yml.error(yml.write("format: roll\n" + body % ""))
    assert "GPUs per node are unknown" in err.message and "slurm: {gpus_per_node: 8}" in (err.hint or "")


@pytest.mark.parametrize(
    "manager, world",
    [
        ("{max_env_num_per_worker: 16, num_env_groups: 128, group_size: 8}", 64),
        ("{num_env_groups: 10, group_size: 4, group_size_redundancy: 1, max_env_num_per_worker: 16}", 4),
        ("{num_env_groups: 8, group_size: 8}", 1),  # max_env_num_per_worker unset: every env in one worker
        ("{group_size: 2, max_env_num_per_worker: 100}", 3),  # num_env_groups defaults to 128
    ],
)
def test_roll_env_managers_are_cpu_components(yml: Yaml, manager: str, world: int) -> None:
    plan = plan_from_file(
        yml.write(
            ROLL % "list(range(0,8))" + f"train_env_manager: {manager}\n"
            "val_env_manager: {num_env_groups: 4, group_size: 1, max_env_num_per_worker: 2}\n"
        )
    )
    comps = {c.name: c for c in plan.components}
    assert comps["train_env_manager"].world_size == world
    assert comps["val_env_manager"].world_size == 2
    assert comps["train_env_manager"].resource_type == "node"  # CPU processes on the node, no GPU of their own


def test_roll_needs_partition_and_workers(yml: Yaml) -> None:
    assert (
        plan_from_file(yml.write("num_gpus_per_node: 8\nw: {world_size: 1}\n")).cluster.node_groups[0].partition is None
    )
    assert "no ROLL workers found" in str(yml.error(yml.write("num_gpus_per_node: 8\nslurm: {partition: p}\n")))


# ================================================================================================
# AReaL format

AREAL = """
allocation_mode: %s
cluster: {n_nodes: 2, n_gpus_per_node: 8}
slurm: {partition: a800}
"""


def test_areal_example_config() -> None:
    plan = plan_from_file(CONFIGS / "areal-colocated.yaml")
    assert plan.source_format == "areal"
    assert gpus_of(plan, "rollout") == gpus_of(plan, "actor") == [[(0, g)] for g in range(8)]
    assert [g.components for g in plan.collocation_groups] == [("rollout", "actor")]
    assert plan.weight_sync is not None and plan.weight_sync.mode == "collocated"


def test_areal_disaggregated_in_gpu_order(yml: Yaml) -> None:
    plan = plan_from_file(yml.write(AREAL % "sglang[rollout]:d2p1t2+fsdp[actor]:d8p1t1"))
    assert gpus_of(plan, "rollout") == [[(0, 0), (0, 1)], [(0, 2), (0, 3)]]
    assert gpus_of(plan, "actor") == [[(0, g)] for g in range(4, 8)] + [[(1, g)] for g in range(4)]
    assert plan.component("rollout").tensor_parallel_size == 2
    assert plan.collocation_groups == ()
    assert plan.weight_sync is not None and plan.weight_sync.mode == "disaggregated"


def test_areal_three_groups(yml: Yaml) -> None:
    plan = plan_from_file(yml.write(AREAL % "sglang[rollout]:d4t1|fsdp[actor]:d4 + fsdp[ref]:d4"))
    assert gpus_of(plan, "ref") == [[(0, g)] for g in range(4, 8)]
    assert gpus_of(plan, "actor") == [[(0, g)] for g in range(4)]


@pytest.mark.parametrize("strategy", ["{type: colocation, target: actor}", "{type: collocation, target: actor}"])
def test_areal_scheduling_strategy_agrees(yml: Yaml, strategy: str) -> None:
    mode = "sglang[rollout]:d8p1t1|fsdp[actor]:d8p1t1"
    path = yml.write(AREAL % mode + f"rollout:\n  scheduling_strategy: {strategy}\n")
    assert plan_from_file(path).collocation_groups[0].components == ("rollout", "actor")


@pytest.mark.parametrize(
    "mode, strategy, message, needle",
    [
        (
            "sglang[rollout]:d8+fsdp[actor]:d8",
            "{type: colocation, target: actor}",
            "rollout is scheduled in colocation with actor, but the allocation mode places them on different GPUs ('+')",
            "actor}",
        ),
        (
            "sglang[rollout]:d8|fsdp[actor]:d8",
            "{type: colocation, target: critic}",
            "colocation target 'critic' is not in the allocation mode",
            "critic",
        ),
        (
            "sglang[rollout]:d8|fsdp[actor]:d8",
            "{type: colocation}",
            "scheduling_strategy colocation needs a target",
            "{type",
        ),
        (
            "sglang[rollout]:d8|fsdp[actor]:d8",
            "{type: separation}",
            "rollout asks for separation but the allocation mode colocates it with actor",
            "{type",
        ),
        ("sglang[rollout]:d8|fsdp[actor]:d8", "{type: bogus}", "unknown scheduling_strategy type 'bogus'", "bogus"),
    ],
)
def test_areal_scheduling_strategy_conflicts(yml: Yaml, mode: str, strategy: str, message: str, needle: str) -> None:
    path = yml.write(AREAL % mode + f"rollout:\n  scheduling_strategy: {strategy}\n")
    assert_error_at(yml.error(path), yml.where(path, needle, line_hint="scheduling_strategy"), message)


@pytest.mark.parametrize(
    "mode, needle, message",
    [
        ("sglang[rollout]:d8t1|fsdp[actor]:d8x1", "fsdp[actor]", "invalid or repeated dimension 'x'"),
        ("sglang[rollout]:d8t1|fsdp[actor]:d8d1", "fsdp[actor]", "invalid or repeated dimension 'd'"),
        ("sglang[rollout]:d8 + ???", "???", "invalid allocation '???'"),
        (
            "sglang[rollout]:d4t2|fsdp[actor]:d4",
            "sglang",
            "colocated allocations must use the same number of GPUs: rollout=8, actor=4",
        ),
        ("sglang[rollout]:d16t2", "sglang", "the allocation needs 32 GPUs but the cluster has 2x8 = 16"),
        ("sglang[rollout]:d8|sglang[rollout]:d8", "sglang", "component 'rollout' appears twice"),
        ("fsdp[actor]:d0", "fsdp", "dimension d0 must be >= 1"),
        ("vllm[rollout]:d2p2t2|fsdp[actor]:d8", "vllm", "colocated rollout with pipeline parallelism is not supported"),
    ],
)
def test_areal_allocation_mode_errors(yml: Yaml, mode: str, needle: str, message: str) -> None:
    path = yml.write(AREAL % mode)
    assert_error_at(yml.error(path), yml.where(path, needle, line_hint="allocation_mode"), message)


@pytest.mark.parametrize(
    "mode, sizes, crossing",
    [
        # the MoE syntax: e and t of the ffn part; 2 x 8 = 16 consecutive ranks span the actor's two nodes
        ("megatron[actor]:(attn:d8t2|ffn:e8t2)", (8, 2), tuple(range(16))),
        # e of a plain training allocation, the expert tensor size AReaL's default 1: 8 ranks, one node each
        ("megatron[actor]:d8t2e8", (8, 1), None),
        ("archon[actor]:(attn:d4p2t2|ffn:d1p2e4t2)", (4, 2), None),  # 2 x 4 ranks per pipeline stage
        ("megatron[actor]:d16", (1, None), None),
    ],
)
def test_areal_expert_sizes_feed_the_fabric_check(
    yml: Yaml, mode: str, sizes: tuple[int, int | None], crossing: tuple[int, ...] | None
) -> None:
    text = AREAL.replace("n_nodes: 2", "n_nodes: 3").replace("a800}", "a800, topology: {block: 1}}")
    plan = plan_from_file(yml.write(text % f"sglang[rollout]:d4t2 + {mode}"))
    actor, rollout = plan.component("actor"), plan.component("rollout")
    assert (actor.expert_parallel_size, actor.expert_tensor_parallel_size) == sizes
    assert (rollout.expert_parallel_size, rollout.gpus_per_engine) == (1, None)  # an engine is one process
    assert [(c.component, c.what, c.ranks) for c in plan.topology_crossings] == (
        [("actor", "expert-parallel group", crossing)] if crossing else []
    )


def test_areal_expert_sizes_that_do_not_cut_the_gpus_or_disagree_are_refused(yml: Yaml) -> None:
    path = yml.write(AREAL % "megatron[actor]:d3e2")
    assert_error_at(
        yml.error(path),
        yml.where(path, "megatron", line_hint="allocation_mode"),
        "allocation 'megatron[actor]:d3e2': expert parallelism e2 x pipeline p1 does not divide its 3 GPUs",
    )
    path = yml.write(AREAL % "megatron[actor]:d8e4" + "hpcplace: {components: {actor: {ep: 2}}}\n")
    assert "hpcplace.components.actor.expert_parallel_size = 2 conflicts with the allocation mode's 4" in str(
        yml.error(path)
    )


def test_areal_without_partition_uses_slurm_default(yml: Yaml) -> None:
    path = yml.write("allocation_mode: fsdp:d8\ncluster: {n_nodes: 1, n_gpus_per_node: 8}\n")
    assert plan_from_file(path).cluster.node_groups[0].partition is None


@pytest.mark.parametrize(
    "mapping, needle",
    [
        ('"eval(1)"', "eval"),
        ('"list(range(0,8))  or 1"', "or 1"),
    ],
)
def test_roll_error_column_points_at_the_offending_text(yml: Yaml, mapping: str, needle: str) -> None:
    path = yml.write(ROLL % mapping)
    assert str(yml.error(path)).startswith(yml.where(path, needle) + ": ")


def test_unknown_node_group_points_at_the_node_group_value(yml: Yaml) -> None:
    path = yml.write(native("actor: {placement: 0, node_group: [rtx, nope]}"))
    err = yml.error(path)
    line = next(i for i, text in enumerate(Path(path).read_text().splitlines(), 1) if "nope" in text)
    column = Path(path).read_text().splitlines()[line - 1].index("[rtx") + 1
    assert str(err).startswith(f"{path}:{line}:{column}:"), str(err)
