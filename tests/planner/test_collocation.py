"""Collocation groups: components holding the same device on a node, and the turns (phases) they take."""

from __future__ import annotations

from pathlib import Path

from hpcplace.plan.plan import CollocationGroup
from hpcplace.plan.planner import plan_from_file
from tests.planner.conftest import cluster, group, plan_of

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def one_node():
    return cluster(group("a800", 8, gpu_type="a800"))


def test_hybrid_example_config() -> None:
    """RLinf hybrid: env 0-3 and rollout 4-7 run together, then the actor takes 0-7."""
    plan = plan_from_file(CONFIGS / "rlinf-hybrid.yaml")
    assert plan.collocation_groups == (
        CollocationGroup(
            name="colloc-0",
            components=("actor", "env", "rollout"),
            phases=(("actor",), ("env", "rollout")),
            devices=((0, tuple(range(8))),),
            resource_type="a800",
        ),
    )
    assert {c.name: c.collocation_group for c in plan.components} == {
        "actor": "colloc-0",
        "env": "colloc-0",
        "rollout": "colloc-0",
    }


def test_phases_follow_plan_order() -> None:
    plan = plan_of(one_node(), {"env": "0-3", "rollout": "4-7", "actor": "0-7"})
    assert plan.collocation_groups[0].phases == (("env", "rollout"), ("actor",))


def test_collocation_is_transitive_and_phases_are_disjoint() -> None:
    plan = plan_of(one_node(), {"a": "0-3", "b": "2-5", "c": "4-7", "d": "6"})
    (grp,) = plan.collocation_groups
    assert grp.components == ("a", "b", "c", "d")
    assert grp.phases == (("a", "c"), ("b", "d"))
    devices = {
        c.name: {(p.cluster_node_rank, h) for p in c.processes for h in p.local_hardware_ranks} for c in plan.components
    }
    for phase in grp.phases:
        for i, x in enumerate(phase):
            for y in phase[i + 1 :]:
                assert devices[x].isdisjoint(devices[y])


def test_disjoint_components_are_not_collocated() -> None:
    plan = plan_of(one_node(), {"env": "0-3", "rollout": "4-7"})
    assert plan.collocation_groups == ()
    assert [c.collocation_group for c in plan.components] == [None, None]


def test_same_local_gpu_on_different_nodes_is_not_shared() -> None:
    plan = plan_of(
        cluster(group("a800", 8, nodes=2), group("rtx", 8)),
        {"a": ("a800", "0-7"), "b": ("a800", "8-15"), "c": ("rtx", "0-7")},
    )
    assert plan.collocation_groups == ()


def test_two_separate_groups() -> None:
    plan = plan_of(cluster(group("a800", 8, nodes=2)), {"actor,rollout": "0-7", "ref": "8-15", "reward": "12-15"})
    assert [(g.name, g.components, g.devices) for g in plan.collocation_groups] == [
        ("colloc-0", ("actor", "rollout"), ((0, tuple(range(8))),)),
        ("colloc-1", ("ref", "reward"), ((1, tuple(range(8))),)),
    ]
    assert [c.collocation_group for c in plan.components] == ["colloc-0", "colloc-0", "colloc-1", "colloc-1"]


def test_sharing_inside_one_component_is_not_collocation() -> None:
    plan = plan_of(one_node(), {"env": "0-3:0-7"})
    assert plan.collocation_groups == ()


def test_shared_robots_are_collocated() -> None:
    clu = cluster(group("gpu", 8), group("robot", 0, hardware=("franka", 4)))
    plan = plan_of(clu, {"env": ("robot", "0-3"), "calib": ("robot", "2-3:0-3")})
    (grp,) = plan.collocation_groups
    assert grp.components == ("env", "calib")
    assert grp.resource_type == "franka"
    assert grp.devices == ((1, (0, 1, 2, 3)),)
    assert grp.phases == (("env",), ("calib",))


def test_node_kind_components_are_never_collocated() -> None:
    clu = cluster(group("a800", 8, nodes=2), group("cpu", 0, nodes=2))
    plan = plan_of(
        clu,
        {"agent": ("node", "0-3"), "judge": ("node", "0-3:0-7"), "sandbox": ("cpu", "0-1"), "tool": ("cpu", "0-1:0-3")},
    )
    assert plan.collocation_groups == ()
    assert all(c.collocation_group is None for c in plan.components)


def test_node_label_next_to_gpu_components_is_not_collocated() -> None:
    """A `node`-label process sees every GPU of its node but owns none of them."""
    plan = plan_of(cluster(group("a800", 8)), {"actor": "0-7", "agent": ("node", "0:0-3")})
    assert plan.collocation_groups == ()
