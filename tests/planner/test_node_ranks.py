"""RLinf node groups with arbitrary `node_ranks` (`0,2`, `1,4,7`, unordered): cluster node ranks are
labels. A group's nodes are its ranks in ascending order (RLinf sorts them); `cluster`/no node_group
and `node` walk every node in cluster node rank order; the het component of a group holds exactly
its nodes, in that order."""

from __future__ import annotations

import json

import pytest

from hpcplace.config.cluster import Cluster, NodeGroup
from hpcplace.errors import HpcplaceError, SpecError
from hpcplace.plan.plan import plan_header
from hpcplace.plan.planner import plan_from_file
from hpcplace.slurm.slurm_job import lower
from tests.planner.conftest import Yaml

INTERLEAVED = """
    cluster:
      num_nodes: 4
      component_placement:
        actor: {node_group: a800, placement: "0-15:0-1"}
        env: {node_group: cpu, placement: "0"}
        rollout: {node_group: rtx4090, placement: "0-3"}
        probe: {node_group: node, placement: "0-3"}
        ref: "0-19:0-4"
      node_groups:
        - {label: a800, node_ranks: "2,0"}
        - {label: rtx4090, node_ranks: 1}
        - {label: cpu, node_ranks: 3}
    slurm:
      node_groups:
        a800: {partition: a800, gpus_per_node: 8, gpu_type: a800}
        rtx4090: {partition: rtx4090, gpus_per_node: 4, gpu_type: rtx4090}
        cpu: {partition: cpu, gpus_per_node: 0}
"""


def rows(plan, name: str) -> list[tuple]:
    return [
        (p.cluster_node_rank, p.visible_accelerators, p.het_group, p.group_node_index, p.node_group_label)
        for p in plan.component(name).processes
    ]


def test_interleaved_groups_place_like_rlinf(yml: Yaml) -> None:
    plan = plan_from_file(yml.write(INTERLEAVED))
    cluster = plan.cluster
    assert [(g.label, g.node_ranks) for g in cluster.node_groups] == [
        ("a800", (0, 2)),
        ("rtx4090", (1,)),
        ("cpu", (3,)),
    ]
    assert [(n.rank, n.group_label, n.index_in_group) for n in cluster.nodes] == [
        (0, "a800", 0),
        (1, "rtx4090", 0),
        (2, "a800", 1),
        (3, "cpu", 0),
    ]
    eight = tuple(map(str, range(8)))
    # node_group a800: its 16 GPUs over nodes 0 then 2 (ascending rank, although listed "2,0")
    assert rows(plan, "actor") == [(0, eight, 0, 0, "a800"), (2, eight, 0, 1, "a800")]
    assert rows(plan, "rollout") == [(1, (str(i),), 1, 0, "rtx4090") for i in range(4)]
    assert rows(plan, "env") == [(3, (), 2, 0, "cpu")]
    # `node`: cluster node ranks, every GPU of the node visible
    assert [(p.cluster_node_rank, len(p.visible_accelerators)) for p in plan.component("probe").processes] == [
        (0, 8),
        (1, 4),
        (2, 8),
        (3, 0),
    ]
    # no node_group: every GPU in cluster node rank order: node 0 (8), node 1 (4), node 2 (8)
    assert [(p.cluster_node_rank, p.visible_accelerators) for p in plan.component("ref").processes] == [
        (0, ("0", "1", "2", "3")),
        (0, ("4", "5", "6", "7")),
        (1, ("0", "1", "2", "3")),
        (2, ("0", "1", "2", "3")),
        (2, ("4", "5", "6", "7")),
    ]


def test_het_components_hold_exactly_their_groups_nodes(yml: Yaml) -> None:
    plan = plan_from_file(yml.write(INTERLEAVED))
    job = lower(plan)
    assert [(c.label, c.partition, c.num_nodes, c.node_ranks) for c in job.components] == [
        ("a800", "a800", 2, (0, 2)),
        ("rtx4090", "rtx4090", 1, (1,)),
        ("cpu", "cpu", 1, (3,)),
    ]
    # the actor's rank 1 runs on the second node of het component 0 (cluster node 2)
    actor = [s for s in job.steps if s.component == "actor"]
    segments = sorted((seg.het_group, seg.relative, seg.num_nodes) for step in actor for seg in step.segments)
    assert segments == [(0, 0, 2)] or segments == [(0, 0, 1), (0, 1, 1)]
    header = plan_header(plan)
    groups = header["node_groups"]
    assert [(g["label"], g["first_node_rank"], g.get("node_ranks")) for g in groups] == [
        ("a800", 0, [0, 2]),
        ("rtx4090", 1, [1]),
        ("cpu", 3, [3]),
    ]
    json.dumps(header)


def test_plan_json_round_trips_interleaved_ranks(yml: Yaml, tmp_path) -> None:
    """status/logs read plan.json back: the cluster they rebuild has the planned node ranks."""
    from hpcplace.plan.plan import plan_to_json
    from hpcplace.slurm.submit import load_plan

    plan = plan_from_file(yml.write(INTERLEAVED))
    path = tmp_path / "plan.json"
    path.write_text(plan_to_json(plan), encoding="utf-8")
    loaded = load_plan(path)
    assert [(n.rank, n.group_label, n.index_in_group) for n in loaded.cluster.nodes] == [
        (n.rank, n.group_label, n.index_in_group) for n in plan.cluster.nodes
    ]
    assert [(g.label, g.node_ranks) for g in loaded.cluster.node_groups] == [
        ("a800", (0, 2)),
        ("rtx4090", (1,)),
        ("cpu", (3,)),
    ]


@pytest.mark.parametrize(
    "listed, expected",
    [("'1,4,7'", (1, 4, 7)), ("'7,1,4'", (1, 4, 7)), ("'7,4,1,4'", (1, 4, 7)), ("'4-5,0'", (0, 4, 5))],
)
def test_any_set_in_any_order(yml: Yaml, listed: str, expected: tuple[int, ...]) -> None:
    plan = plan_from_file(
        yml.write(f"""
        cluster:
          num_nodes: 8
          component_placement: {{actor: {{node_group: g, placement: "all"}}, critic: all}}
          node_groups: [{{label: g, node_ranks: {listed}}}]
        slurm: {{gpus_per_node: 2, partition: p}}
    """)
    )
    g = plan.cluster.group("g")
    assert g is not None and g.node_ranks == expected
    assert [p.cluster_node_rank for p in plan.component("actor").processes] == [r for r in expected for _ in (0, 1)]
    # the unowned ranks form implicit default groups, one per run; every node is still placed in rank order
    assert [p.cluster_node_rank for p in plan.component("critic").processes] == [r for r in range(8) for _ in (0, 1)]
    covered = sorted(r for i in range(len(plan.cluster.node_groups)) for r in plan.cluster.node_ranks(i))
    assert covered == list(range(8))


def test_hardware_group_on_scattered_nodes(yml: Yaml) -> None:
    plan = plan_from_file(
        yml.write("""
        cluster:
          num_nodes: 4
          component_placement:
            env: {node_group: robot, placement: "0-2"}
          node_groups:
            - label: robot
              node_ranks: "3,1"
              hardware:
                type: franka
                configs: [{node_rank: 1}, {node_rank: 3}, {node_rank: 3}]
        slurm: {gpus_per_node: 2, partition: p, node_groups: {robot: {partition: r}}}
    """)
    )
    assert [(p.cluster_node_rank, p.local_hardware_ranks) for p in plan.component("env").processes] == [
        (1, (0,)),
        (3, (0,)),
        (3, (1,)),
    ]


def test_cluster_validates_explicit_ranks() -> None:
    def g(label: str, ranks: tuple[int, ...] | None) -> NodeGroup:
        n = len(ranks) if ranks else 1
        return NodeGroup(label=label, partition="p", num_nodes=n, gpus_per_node=(1,) * n, node_ranks=ranks)

    with pytest.raises(SpecError, match=r"are not each of 0..2 once"):
        Cluster((g("a", (0, 3)), g("b", (1,))))
    with pytest.raises(SpecError, match="some node groups name their node ranks"):
        Cluster((g("a", (0, 2)), g("b", None)))
    with pytest.raises(SpecError, match="distinct ascending"):
        g("a", (2, 0))
    with pytest.raises(HpcplaceError, match="are not each of"):
        Cluster((g("a", (0, 1)), g("b", (1,))))
