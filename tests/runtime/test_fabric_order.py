"""The job's fabric order in the tasks: HPCPLACE_NODE_ORDER_<g> (hp_fabric) is the node list a task finds
itself in, HPCPLACE_NODE_UNITS_<g> each node's block; a raylet advertises it as NeMo-RL reads it."""

from __future__ import annotations

import pytest

from hpcplace.runtime.errors import ShimError
from hpcplace.runtime.ray_node import node_resources
from hpcplace.runtime.slurm_env import fabric_unit, locate_node, node_name_at, read_snapshot

BASE = {
    "SLURM_JOB_ID": "7",
    "SLURM_JOB_NODELIST": "nvl-[1-4]",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURMD_NODENAME": "nvl-2",
}
ORDER = {"HPCPLACE_NODE_ORDER_0": "nvl-1,nvl-3,nvl-2,nvl-4", "HPCPLACE_NODE_UNITS_0": "rack1,rack1,rack2,rack2"}


def test_a_task_finds_its_node_in_the_fabric_order() -> None:
    plain = read_snapshot(BASE)
    assert locate_node(plain, [0]) == (0, 1)  # Slurm's order
    ordered = read_snapshot({**BASE, **ORDER})
    assert locate_node(ordered, [0]) == (0, 2)  # the plan's node 2 is nvl-2: the first of rack2
    assert [node_name_at(ordered, 0, j) for j in range(4)] == ["nvl-1", "nvl-3", "nvl-2", "nvl-4"]


def test_an_order_that_is_not_the_groups_nodes_is_refused() -> None:
    with pytest.raises(ShimError, match=r"HPCPLACE_NODE_ORDER_0='nvl-1,nvl-3,nvl-9,nvl-4' is not an order"):
        read_snapshot({**BASE, "HPCPLACE_NODE_ORDER_0": "nvl-1,nvl-3,nvl-9,nvl-4"})


def test_each_nodes_block() -> None:
    env = {**BASE, **ORDER}
    assert [fabric_unit(env, 0, h) for h in ("nvl-1", "nvl-2", "nvl-3", "nvl-4")] == [
        "rack1",
        "rack2",
        "rack1",
        "rack2",
    ]
    assert fabric_unit(env, 1, "nvl-1") is None
    assert fabric_unit({**env, "HPCPLACE_NODE_UNITS_0": "rack1,-,rack2,rack2"}, 0, "nvl-3") is None  # in no block


def test_a_raylet_advertises_its_block_and_topo_rank() -> None:
    node = {"rank": 2, "label": "nvl", "framework": "native", "fabric": ("block", "rack2")}
    assert node_resources(node) == {"ng_nvl": 1, "hpcplace_node_2": 1, "topo_rank": 3, "nvlink_domain_rack2": 1}
    tree = {**node, "fabric": ("tree", "leaf1")}  # a leaf switch is no NVLink domain
    assert node_resources(tree) == {"ng_nvl": 1, "hpcplace_node_2": 1, "topo_rank": 3}
    flat = {"rank": 2, "label": "nvl", "framework": "native", "fabric": (None, None)}
    assert node_resources(flat) == {"ng_nvl": 1, "hpcplace_node_2": 1}
