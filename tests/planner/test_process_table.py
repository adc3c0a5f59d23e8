"""The compact process table (process_table.Processes) and the streamed plan.json + index.

Three paths must agree exactly: the per-node fast path for rank maps (SpreadLists), the
per-process path for explicit lists, and plain tuples of Placements (a plan read back from JSON);
and the index written from the writer's spans must be the bytes `write_index` gives from the file."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest
from hypothesis import given

from hpcplace.config.rank_syntax import SpreadLists, expand_rank_map, parse_rank_map
from hpcplace.errors import HpcplaceError, PlanError
from hpcplace.plan.placement import Placement, resource_space
from hpcplace.plan.plan import plan_to_json, write_plan_json
from hpcplace.plan.process_table import Processes, build_processes, node_processes
from hpcplace.runtime.plan_index import PlanIndex, index_path, write_index
from hpcplace.slurm.render import write_plan_files
from tests.planner.conftest import cluster, group, plan_of
from tests.planner.test_properties import SETTINGS, cases


def _both(clu, selection, text):
    """(fast path result or error, per-process path result or error) for one placement string."""
    space = resource_space(clu, selection)
    parts = parse_rank_map(text, space.size, resource_name=space.resource_name)
    out = []
    for lists in (SpreadLists(parts), expand_rank_map(parts)):
        try:
            out.append(tuple(build_processes(clu, space, lists)))
        except PlanError as exc:
            out.append(str(exc))
    return out


@SETTINGS
@given(cases())
def test_rank_map_fast_path_equals_the_per_process_path(case) -> None:
    groups, selection, text = case
    try:
        fast, slow = _both(cluster(*groups), selection, text)
    except HpcplaceError:
        return  # the string or selection itself is invalid: both paths never run
    assert fast == slow


def test_fast_path_hands_a_node_crossing_process_to_the_exact_error() -> None:
    clu = cluster(group("a", 4, nodes=2))
    fast, slow = _both(clu, ("a",), "2-7:0-1")  # 3 GPUs each: process 0 takes GPUs 2-4 across nodes 0 and 1
    assert fast == slow and "would span nodes [0, 1]" in fast


def test_spread_lists_equal_expand_rank_map() -> None:
    parts = parse_rank_map("0-1:0-3,3-5,7-10:7-14", 16)
    lazy = SpreadLists(parts)
    assert lazy == expand_rank_map(parts) and list(lazy) == expand_rank_map(parts)
    assert len(lazy) == 15 and lazy[-1] == [10] and lazy[4] == [3] and lazy[2:4] == [[1], [1]]
    assert lazy.resource_ranks() == [0, 1, 3, 4, 5, 7, 8, 9, 10]


def test_processes_is_a_sequence_of_placements() -> None:
    plan = plan_of(cluster(group("a", 4, nodes=3)), {"actor": "all:0-23", "x": ("node", "0-2")})
    procs = plan.component("actor").processes
    assert isinstance(procs, Processes) and len(procs) == 24
    eager = tuple(procs)
    assert procs == eager and eager == tuple(procs[i] for i in range(24))
    assert procs[-1] == eager[23] and procs[5:8] == eager[5:8]
    assert eager[9] == Placement(9, 1, 1, 0, "gpu", 1, 8, ("0",), True, (0,), "a", "p-a", 0, 1, "gpu")
    with pytest.raises(IndexError):
        procs[24]
    views = procs.nodes()
    assert [(v.cluster_node_rank, list(v.ranks)) for v in views] == [
        (n, list(range(8 * n, 8 * n + 8))) for n in range(3)
    ]
    assert node_processes(eager) == [replace(v, ranks=tuple(v.ranks)) for v in views]


HOSTILE = 'a%d "q" 100%s'


def _hostile_plan():
    clu = cluster(
        group("gp", 4, nodes=2, gpu_type=HOSTILE, partition=HOSTILE + "p"), group("cpu", 0, nodes=2, partition="c%%")
    )
    return plan_of(
        clu,
        {"actor,rollout": ("gp", "all"), "env": ("gp", "0-3:0-7"), "agent": ("cpu", "0-1:0-5"), "x": ("node", "1,3")},
    )


def test_streamed_json_equals_the_per_placement_json_even_with_percent_and_quotes() -> None:
    plan = _hostile_plan()
    eager = replace(plan, components=tuple(replace(c, processes=tuple(c.processes)) for c in plan.components))
    text = plan_to_json(plan)
    assert text == plan_to_json(eager)
    out = io.StringIO()
    assert write_plan_json(plan, out) == len(text) and out.getvalue() == text
    assert json.dumps(HOSTILE) in text and json.dumps(HOSTILE + "p") in text


def test_index_from_the_writers_spans_is_the_index_write_index_builds(tmp_path) -> None:
    plan = _hostile_plan()
    path = tmp_path / "plan.json"
    write_plan_files(plan, path)
    streamed = (tmp_path / "plan.json.idx").read_bytes()
    assert path.read_text() == plan_to_json(plan)
    write_index(path)
    assert (tmp_path / "plan.json.idx").read_bytes() == streamed
    with PlanIndex(path) as index:
        env = index.component_index("env")
        for rank in (0, 3, 7):
            assert index.process(env, rank)["rank"] == rank
        assert index.process_at(index.component_index("agent"), 1, 1, 2)["rank"] == 5
    assert index_path(path).endswith(".idx")
