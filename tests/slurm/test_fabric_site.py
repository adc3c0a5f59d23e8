"""The site's fabric (`scontrol show topology`, recorded from the test cluster: Slurm 26.05's topology.yaml, and
24.11's and 22.05's one topology.conf) against a plan's node groups: `validate`'s problems and warnings, and
`topology: site`."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcplace.config.topology import Topology
from hpcplace.errors import SlurmError
from hpcplace.slurm.fabric import SiteFabric, fabric_problems, parse_fabric, site_topology

RECORDED = Path(__file__).with_name("data")
DATA = RECORDED / "slurm-26.05.5"
NVL = ["nvl-1", "nvl-2", "nvl-3", "nvl-4"]


def recorded(name: str) -> SiteFabric:
    return parse_fabric((DATA / f"scontrol-show-topology-{name}.txt").read_text(), name)


def test_blocks_and_leaf_switches_as_slurm_prints_them() -> None:
    blocks = recorded("nvblock")
    assert blocks.kind == "block"
    assert [(u.name, u.nodes, u.size) for u in blocks.units] == [
        ("rack1", ("nvl-1", "nvl-3"), 2),
        ("rack2", ("nvl-2", "nvl-4"), 2),
    ]
    tree = recorded("nvtree")
    assert tree.kind == "tree"  # the spine (level 1) is no leaf
    assert [(u.name, u.nodes) for u in tree.units] == [("leaf1", ("nvl-1", "nvl-4")), ("leaf2", ("nvl-2", "nvl-3"))]
    assert parse_fabric("", None).kind is None


@pytest.mark.parametrize(
    "path", sorted(RECORDED.glob("slurm-*/scontrol-show-topology-*.txt")), ids=lambda p: f"{p.parent.name}/{p.name}"
)
def test_every_release_prints_the_test_clusters_fabric_as_parsed(path: Path) -> None:
    """Each release's own print of the test cluster's fabric (up.sh: 25.05+ one topology per partition, older
    ones the cluster's one, whose blocks or switches also hold every other node)."""
    name = path.stem.removeprefix("scontrol-show-topology-")
    fabric = parse_fabric(path.read_text(), name)
    assert fabric.kind == ("block" if name.endswith("block") else "tree")
    nvl = {u.name: u.nodes for u in fabric.units if set(u.nodes) <= set(NVL)}
    if fabric.kind == "block":
        assert nvl == {"rack1": ("nvl-1", "nvl-3"), "rack2": ("nvl-2", "nvl-4")}
        assert {u.size for u in fabric.units} == {2}  # the base level only (AggregatedBlock lines are not units)
    else:
        assert nvl == {"leaf1": ("nvl-1", "nvl-4"), "leaf2": ("nvl-2", "nvl-3")}  # the spine is no leaf


def check(
    topology: Topology, nodes: int, fabric: SiteFabric, idle: list[str] | None = None, known: list[str] | None = None
):
    return fabric_problems(
        "node group 'nvl'", topology, nodes, fabric, NVL, NVL if idle is None else idle, frozenset(known or NVL)
    )


def test_a_plan_that_fits_the_sites_blocks() -> None:
    found = check(Topology("block", 2, segment=2), 4, recorded("nvblock"))
    assert found.problems == () and found.warnings == ()
    assert found.checked == (
        "node group 'nvl': 2 block(s) of topology 'nvblock' hold the partition; 2 segment(s) of 2 node(s) fit",
    )


def test_what_can_never_run_and_what_waits() -> None:
    fabric = recorded("nvblock")
    assert check(Topology("block", 4, segment=2), 4, fabric).problems == (
        "node group 'nvl': the config says 4 nodes per block; topology 'nvblock''s blocks hold 2 (BlockSize)",
    )
    (problem,) = check(Topology("block", 2, segment=2), 6, fabric).problems
    assert problem == "node group 'nvl': needs 3 segment(s) of 2 node(s); the partition's blocks hold 2 at most"
    (warning,) = check(Topology("block", 2, segment=2), 4, fabric, idle=["nvl-1", "nvl-2", "nvl-3"]).warnings
    assert (
        warning
        == "node group 'nvl': needs 2 segment(s) of 2 node(s); 1 are free now (the job waits for whole segments)"
    )
    (problem,) = check(Topology("tree", 2, switches=1), 4, fabric).problems
    assert (
        problem
        == "node group 'nvl': the plan assumes a tree topology; topology 'nvblock' is block topology (scontrol show topology)"
    )
    (problem,) = check(Topology("block", 2), 2, SiteFabric(None, None, ())).problems
    assert "the cluster's topology is no block or tree topology" in problem


def test_leaf_switches_and_unknown_nodes_are_warnings() -> None:
    (warning,) = check(Topology("tree", 2, switches=1), 4, recorded("nvtree")).warnings
    assert "1 leaf switch(es) hold at most 2 of the 4 nodes" in warning
    (warning,) = check(
        Topology("block", 2, segment=2), 4, recorded("nvblock"), known=["nvl-1", "nvl-2", "nvl-3"]
    ).warnings
    assert (
        warning
        == "node group 'nvl': topology 'nvblock' names 1 node(s) the cluster does not have (scontrol show node): nvl-4"
    )


def test_topology_site_takes_the_blocks_holding_the_partition() -> None:
    stated = Topology("site", None, segment=2)
    assert site_topology(recorded("nvblock"), NVL, stated) == Topology("block", 2, 2, None, "nvblock")
    assert site_topology(recorded("nvtree"), NVL, stated).size == 2
    with pytest.raises(SlurmError, match="has no blocks or leaf switches"):
        site_topology(SiteFabric("flat", None, ()), NVL, stated)
