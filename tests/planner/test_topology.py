"""A node group's `topology:`: the planner picks the segment (switches) the job asks Slurm for, reports the
tensor-parallel groups that cross a block or leaf switch, `--strict-topology` refuses them; plan.json keeps it
all; the job script asks for it and orders its nodes by block; bad values are located errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpcplace.cli import main
from hpcplace.config.topology import Topology
from hpcplace.errors import HpcplaceError, PlanError
from hpcplace.plan.gpumap import summary
from hpcplace.plan.plan import plan_to_json
from hpcplace.plan.planner import plan_from_file
from hpcplace.plan.topology import refuse_crossings
from hpcplace.slurm.submit import load_plan
from tests.planner.conftest import Yaml

NATIVE = """
name: t
cluster:
  node_groups:
    - {{label: gb200, partition: gb200, nodes: {nodes}, gpus_per_node: 4, topology: {topology}}}
  component_placement:
    trainer: "0-{last}"
components:
  trainer: {{command: [python3, x.py], tensor_parallel_size: {tp}}}
"""


def native(yml: Yaml, *, nodes: int = 8, topology: str = "{block: 3}", tp: int = 8, last: int | None = None) -> Path:
    last = nodes * 4 - 1 if last is None else last
    return yml.write(NATIVE.format(nodes=nodes, topology=topology, tp=tp, last=last))


def fabric(path: Path) -> tuple[Topology | None, list[tuple[str, tuple[int, ...], tuple[tuple[str, int], ...]]]]:
    plan = plan_from_file(path)
    crossings = [(c.component, c.ranks, c.units) for c in plan.topology_crossings]
    return plan.cluster.node_groups[0].topology, crossings


def test_the_largest_segment_that_fits_a_block_divides_the_nodes_and_keeps_every_group(yml: Yaml) -> None:
    # 8 nodes, blocks of 3: segments 2 or 1 divide 8; TP 8 = 2 nodes: segments of 2 keep every group
    topology, crossings = fabric(native(yml, topology="{block: 3}"))
    assert topology is not None and (topology.kind, topology.size, topology.segment) == ("block", 3, 2)
    assert crossings == []


def test_a_group_wider_than_a_block_is_reported_with_the_blocks_it_spans(yml: Yaml) -> None:
    # TP 12 = 3 nodes of 4 GPUs, blocks of 2: no segment keeps a group whole
    topology, crossings = fabric(native(yml, nodes=6, topology="{block: 2}", tp=12))
    assert topology is not None and topology.segment == 2
    assert crossings == [
        ("trainer", tuple(range(12)), (("gb200", 0), ("gb200", 1))),
        ("trainer", tuple(range(12, 24)), (("gb200", 1), ("gb200", 2))),
    ]
    plan = plan_from_file(native(yml, nodes=6, topology="{block: 2}", tp=12))
    (line,) = [w for w in plan.warnings if w.startswith("topology:")]
    assert "component 'trainer': 2 tensor-parallel groups cross the fabric (2 links" in line
    assert "ranks 0-11 span segments 0-1 of 'gb200'" in line


def test_a_group_that_fits_one_block_asks_for_no_segment(yml: Yaml) -> None:
    topology, crossings = fabric(native(yml, nodes=4, topology="{block: 18}"))
    assert topology is not None and topology.segment is None
    assert crossings == []


def test_a_stated_segment_is_kept_and_its_crossings_reported(yml: Yaml) -> None:
    # segment 3 of 6 nodes: TP 8 groups on nodes (2,3) straddle segments 0 and 1
    topology, crossings = fabric(native(yml, nodes=6, topology="{block: 4, segment: 3}"))
    assert topology is not None and topology.segment == 3
    assert crossings == [("trainer", tuple(range(8, 16)), (("gb200", 0), ("gb200", 1)))]


def test_a_tree_asks_for_the_fewest_leaf_switches_and_cuts_the_nodes_by_switch(yml: Yaml) -> None:
    topology, crossings = fabric(native(yml, nodes=6, topology="{switch: 4}"))
    assert topology is not None and (topology.kind, topology.switches) == ("tree", 2)
    # switch units of 4 nodes: the TP group on nodes (4,5) is inside unit 1, every other one inside unit 0 or 1
    assert crossings == []
    topology, crossings = fabric(native(yml, nodes=6, topology="{switch: 3}"))
    assert topology is not None and topology.switches == 2
    assert [c[1] for c in crossings] == [tuple(range(8, 16))]  # nodes 2 and 3: switch 0 and switch 1


def test_one_gpu_groups_and_groups_on_one_node_never_cross(yml: Yaml) -> None:
    assert fabric(native(yml, nodes=4, topology="{block: 1}", tp=4))[1] == []
    assert fabric(native(yml, nodes=4, topology="{block: 1}", tp=1))[1] == []


def with_settings(yml: Yaml, settings: str, *, nodes: int = 8, topology: str = "{block: 2}", tp: int = 2) -> Path:
    """The native job with more component settings (`ep: 8`, ...) beside its tensor_parallel_size."""
    text = NATIVE.format(nodes=nodes, topology=topology, tp=tp, last=nodes * 4 - 1)
    return yml.write(text.replace(f"tensor_parallel_size: {tp}}}", f"tensor_parallel_size: {tp}, {settings}}}"))


def test_expert_parallel_groups_stay_inside_blocks_where_the_layout_allows(yml: Yaml) -> None:
    # TP 2, EP 4: each MoE all-to-all spans ETP x EP = 8 consecutive GPUs = 2 nodes; blocks of 2 nodes hold
    # them (segments of 2), blocks of 3 do not divide 8 nodes (segments of 2 again: the groups stay whole)
    topology, crossings = fabric(with_settings(yml, "expert_parallel_size: 4"))
    assert topology is not None and topology.segment == 2 and crossings == []
    # ETP 1 x EP 16 = 16 GPUs = 4 nodes: wider than a block of 2, each crosses one link
    topology, crossings = fabric(with_settings(yml, "ep: 16, etp: 1"))
    assert crossings == [
        ("trainer", tuple(range(16)), (("gb200", 0), ("gb200", 1))),
        ("trainer", tuple(range(16, 32)), (("gb200", 2), ("gb200", 3))),
    ]
    plan = plan_from_file(with_settings(yml, "ep: 16, etp: 1"))
    (line,) = [w for w in plan.warnings if w.startswith("topology:")]
    assert line.startswith("topology: component 'trainer': 2 expert-parallel groups cross the fabric (2 links")
    assert [c.what for c in plan.topology_crossings] == ["expert-parallel group"] * 2
    comp = plan.component("trainer")
    assert (comp.expert_parallel_size, comp.expert_tensor_parallel_size) == (16, 1)
    assert "[tp=2 pp=1; ep=16 etp=1]" in summary(plan)
    record = json.loads(plan_to_json(plan))["components"][0]
    assert (record["expert_parallel_size"], record["expert_tensor_parallel_size"]) == (16, 1)
    assert "gpus_per_engine" not in record


def test_the_segment_keeps_expert_parallel_groups_whole(yml: Yaml) -> None:
    # 6 nodes, blocks of 6: segments of 6, 3, 2 or 1 divide 6; EP width 8 GPUs = 2 nodes: a segment of 3
    # would split one in two, so the planner takes 6 (or, stated 3, reports it)
    topology, crossings = fabric(with_settings(yml, "ep: 4", nodes=6, topology="{block: 6}"))
    assert topology is not None and topology.segment is None and crossings == []
    topology, crossings = fabric(with_settings(yml, "ep: 4", nodes=6, topology="{block: 6, segment: 3}"))
    assert [units for _, _, units in crossings] == [(("gb200", 0), ("gb200", 1))]


def test_an_inference_engine_wider_than_its_tensor_parallel_group_stays_in_a_block(yml: Yaml) -> None:
    # engines of TP 4 x PP 2 = 8 GPUs (2 nodes); blocks of 1 node: every engine crosses once, no TP group does
    _, crossings = fabric(with_settings(yml, "gpus_per_engine: 8", nodes=4, topology="{block: 1}", tp=4))
    assert [(ranks, len(units)) for _, ranks, units in crossings] == [(tuple(range(8)), 2), (tuple(range(8, 16)), 2)]
    plan = plan_from_file(with_settings(yml, "gpus_per_engine: 8", nodes=4, topology="{block: 2}", tp=4))
    assert plan.topology_crossings == () and plan.component("trainer").gpus_per_engine == 8


@pytest.mark.parametrize(
    ("settings", "message", "column"),
    [
        (
            "ep: 3",
            "expert_tensor_parallel_size 2 x expert_parallel_size 3 x pipeline_parallel_size 1 = 6 does not divide "
            "its 32 GPUs",
            12,  # the component's settings
        ),
        (
            "ep: 4, pp: 8",
            "= 64 does not divide its 32 GPUs (Megatron-Core's initialize_model_parallel raises",
            12,
        ),
        ("gpus_per_engine: 12", "gpus_per_engine 12 does not divide its 32 GPUs", 12),
        ("gpus_per_engine: 1", "gpus_per_engine 1 is not a multiple of tensor_parallel_size 2", 12),
        ("ep: 0", "expected an integer >= 1", 68),  # the value
        ("ep: 2, expert_parallel_size: 2", "both 'expert_parallel_size' and 'ep' are given", 68),
    ],
)
def test_expert_and_engine_sizes_that_do_not_cut_the_gpus_are_located_errors(
    yml: Yaml, settings: str, message: str, column: int
) -> None:
    with pytest.raises(HpcplaceError) as err:
        plan_from_file(with_settings(yml, settings))
    assert message in str(err.value)
    assert err.value.location is not None and (err.value.location.line, err.value.location.column) == (8, column)


def test_strict_topology_refuses_a_crossing_plan_at_the_topology(yml: Yaml, capsys: pytest.CaptureFixture[str]) -> None:
    path = native(yml, nodes=6, topology="{block: 2}", tp=12)
    plan = plan_from_file(path)
    with pytest.raises(PlanError) as err:
        refuse_crossings(plan.cluster, plan.topology_crossings)
    assert err.value.location is not None and (err.value.location.line, err.value.location.column) == (4, 78)
    assert main(["plan", str(path), "--strict-topology"]) == 2
    out = capsys.readouterr().err
    assert "--strict-topology: model-parallel groups cross the fabric" in out and "ranks 12-23 span segments 1-2" in out
    assert main(["plan", str(native(yml, topology="{block: 3}")), "--strict-topology"]) == 0


def test_plan_json_records_the_fabric_and_load_plan_reads_it_back(yml: Yaml, tmp_path: Path) -> None:
    plan = plan_from_file(native(yml, nodes=6, topology="{block: 2}", tp=12))
    written = tmp_path / "plan.json"
    written.write_text(plan_to_json(plan), encoding="utf-8")
    data = json.loads(written.read_text())
    assert data["node_groups"][0]["topology"] == {"kind": "block", "size": 2, "segment": 2}
    assert data["topology_crossings"][0] == {
        "component": "trainer",
        "group": "tensor-parallel group",
        "ranks": list(range(12)),
        "units": [["gb200", 0], ["gb200", 1]],
        "links": 1,
    }
    back = load_plan(written)
    assert back.cluster.node_groups[0].topology == plan.cluster.node_groups[0].topology
    assert back.topology_crossings == plan.topology_crossings
    assert plan_to_json(back).count("topology") == plan_to_json(plan).count("topology")


def test_a_plan_without_topology_has_no_topology_keys(yml: Yaml) -> None:
    text = plan_to_json(
        plan_from_file(yml.write(NATIVE.replace(", topology: {topology}", "").format(nodes=2, tp=8, last=7)))
    )
    assert '"topology' not in text


@pytest.mark.parametrize(
    ("topology", "message", "column"),
    [
        ("{block: 2, segment: 3}", "a segment of 3 nodes is larger than a block (2 nodes)", 98),
        ("{block: 4, segment: 3}", "a segment of 3 nodes does not divide the group's 8 nodes", 98),
        ("{block: 2, switch: 2}", "give exactly one of block: and switch:", 78),
        ("{switch: 2, segment: 1}", "segment: is for block topologies", 90),
        ("{block: 2, switches: 1}", "switches: is for tree topologies", 89),
        ("{block: 0}", "expected an integer >= 1, got 0", 86),
        ("rack", "unknown topology 'rack'", 78),
        ("{blocks: 2}", "unknown key 'blocks'", 79),
    ],
)
def test_bad_topologies_are_located_errors(yml: Yaml, topology: str, message: str, column: int) -> None:
    path = native(yml, topology=topology)
    with pytest.raises(HpcplaceError) as err:
        plan_from_file(path)
    assert message in err.value.message
    assert err.value.location is not None and err.value.location.line == 4, err.value
    assert err.value.location.column == column, err.value


def test_a_foreign_formats_slurm_block_carries_the_topology(yml: Yaml) -> None:
    path = yml.write(
        """
allocation_mode: sglang[rollout]:d4p1t4|fsdp[actor]:d4p1t4
cluster: {n_nodes: 8, n_gpus_per_node: 4}
slurm: {partition: gb200, topology: {block: 6}}
"""
    )
    plan = plan_from_file(path)
    (group,) = plan.cluster.node_groups
    assert group.topology is not None and (group.topology.size, group.topology.segment) == (6, 4)


def test_the_job_asks_slurm_for_segments_and_orders_its_nodes_by_block(yml: Yaml, tmp_path: Path) -> None:
    path = native(yml, topology="{block: 3}")
    assert main(["render", str(path), "-o", str(tmp_path / "run")]) == 0
    script = (tmp_path / "run" / "job.sbatch").read_text()
    assert "#SBATCH --segment=2\n" in script
    assert "\nhp_fabric 0 block 2  # node group gb200" in script
    assert '--nodes=8 --nodelist="$(hp_nodes 0 0 8)" --ntasks=32' in script
    assert "--relative=" not in script
    tree = native(yml, nodes=6, topology="{switch: 4}", last=23)
    assert main(["render", str(tree), "-o", str(tmp_path / "tree")]) == 0
    script = (tmp_path / "tree" / "job.sbatch").read_text()
    assert "#SBATCH --switches=2\n" in script and "hp_fabric 0 tree" in script


def test_segments_are_refused_on_slurm_older_than_24_05(yml: Yaml) -> None:
    from hpcplace.slurm.container_launch import version_problems

    plan = plan_from_file(native(yml, topology="{block: 3}"))
    (problem,) = version_problems(plan, (22, 5))
    assert "--segment=2" in problem and "Slurm 22.05 does not have" in problem and "24.05 or newer" in problem
    assert version_problems(plan, (24, 5)) == []
    assert version_problems(plan_from_file(native(yml, topology="{switch: 3}")), (22, 5)) == []


# ---- NeMo-RL's cluster.segment_size


@pytest.fixture
def nemo_rl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A NeMo-RL-like checkout (test_nemo_rl_format.py's BASE) with 4 nodes of 4 GPUs, run from its root."""
    from tests.planner.test_nemo_rl_format import BASE

    configs = tmp_path / "examples" / "configs"
    configs.mkdir(parents=True)
    (configs / "base.yaml").write_text(
        BASE.replace("gpus_per_node: 1\n  num_nodes: 1", "gpus_per_node: 4\n  num_nodes: 4\n  segment_size: null")
    )
    monkeypatch.chdir(tmp_path)
    return tmp_path


def nemo_plan(root: Path, segment: str, slurm: str) -> object:
    from hpcplace.config.formats import load_spec
    from hpcplace.plan.planner import plan_from_spec

    site = root / "site.yaml"
    site.write_text(f"slurm: {slurm}\n")
    words = ["--config", "examples/configs/base.yaml", f"cluster.segment_size={segment}"]
    return plan_from_spec(load_spec(site, driver=["uv", "run", "examples/run_grpo.py", *words]))


def test_nemo_rls_segment_size_is_the_segment_the_job_asks_for(nemo_rl: Path) -> None:
    plan = nemo_plan(nemo_rl, "2", "{partition: gb200, topology: {block: 2}}")
    (group,) = plan.cluster.node_groups  # type: ignore[attr-defined]
    assert group.topology.segment == 2 and group.topology.segment_location is not None
    plan = nemo_plan(nemo_rl, "2", "{partition: gb200}")
    assert any("cluster.segment_size 2: node group" in w and "unordered allocation" in w for w in plan.warnings)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("segment", "slurm", "message"),
    [
        (
            "3",
            "{partition: gb200, topology: {block: 4}}",
            "cluster.segment_size 3 does not divide the 4 training nodes",
        ),
        ("4", "{partition: gb200, topology: {block: 2}}", "cluster.segment_size 4 is larger than a block"),
        ("2", "{partition: gb200, topology: {switch: 2}}", "cluster.segment_size 2 needs a block topology"),
        ("1", "{partition: gb200, topology: {block: 4, segment: 2}}", "cluster.segment_size 1 and node group"),
    ],
)
def test_nemo_rls_segment_size_against_the_topology(nemo_rl: Path, segment: str, slurm: str, message: str) -> None:
    with pytest.raises(HpcplaceError, match=message):
        nemo_plan(nemo_rl, segment, slurm)


def test_the_device_map_outlines_each_block(yml: Yaml) -> None:
    import xml.etree.ElementTree as ET

    from hpcplace.plan.gpumap import svg

    ns = "{http://www.w3.org/2000/svg}"
    for nodes, topology, words in [
        (6, "{block: 3}", ["segment 0", "segment 1", "segment 2"]),  # 2-node segments keep the 2-node groups
        (2, "{block: 3}", ["block 0"]),  # the group fits one block
        (6, "{switch: 2}", ["leaf switch 0", "leaf switch 1", "leaf switch 2"]),
    ]:
        root = ET.fromstring(svg(plan_from_file(native(yml, nodes=nodes, topology=topology))))
        outlines = [r for r in root.iter(f"{ns}rect") if r.get("class") == "fabric"]
        labels = [t.text for t in root.iter(f"{ns}text") if (t.text or "").startswith(("segment", "block", "leaf"))]
        assert labels == words and len(outlines) == len(words)
        assert len({r.get("height") for r in outlines}) == 1  # every unit holds as many nodes
