"""The steering hook (hpcplace.runtime.steer_hook): which requests it pins where, what it leaves alone, and, on a
real local Ray cluster, that the pinned bundles and actors land on the planned nodes whatever Ray would choose."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcplace.config.steer import SteerRule, steer_from_json
from hpcplace.errors import SpecError
from hpcplace.runtime import steer_hook
from hpcplace.runtime.ray_node import STEER_DIR, STEER_TABLE, node_resources, steer_environment
from hpcplace.runtime.steer_hook import steer_actor, steer_placement_group

GROUP = {"what": "pool", "pin": "group", "nodes": [3, 5], "name": r"poolverl_group_[0-9_]+:(?P<index>[0-9]+)"}
UNNAMED = {"what": "actor+ref", "pin": "bundle", "nodes": [0, 0, 1], "ordinal": 1}
ACTOR = {"what": "ref", "pin": "rank", "nodes": [2, 4], "actor_class": "ReferenceModelActor", "rank_arg": 1}


def bundles(n: int) -> list[dict[str, float]]:
    return [{"GPU": 1, "CPU": 1} for _ in range(n)]


def test_a_named_group_goes_to_the_node_of_its_index() -> None:
    new, line = steer_placement_group([GROUP], "poolverl_group_2_2:1", bundles(2), None)
    assert new == [{"GPU": 1, "CPU": 1, "hpcplace_node_5": 0.001}] * 2
    assert "bundles on node ranks 5,5" in line
    assert steer_placement_group([GROUP], "otherverl_group_2:0", bundles(2), None) == (None, "")
    new, line = steer_placement_group([GROUP], "poolverl_group_2_2_2:2", bundles(2), None)
    assert new is None and "number 2; the plan has 2: not steered" in line


def test_a_replica_group_counts_the_replicas_before_it() -> None:
    rule = {**GROUP, "nodes": [7, 8, 9, 10], "stride": 2, "name": r"r_(?P<replica>\d+)g:(?P<index>\d+)"}
    assert steer_placement_group([rule], "r_1g:1", bundles(1), None)[0] == [
        {"GPU": 1, "CPU": 1, "hpcplace_node_10": 0.001}
    ]


def test_unnamed_groups_match_by_the_drivers_order_and_size() -> None:
    new, _ = steer_placement_group([UNNAMED], "", bundles(3), 1)
    assert [next(k for k in b if k.startswith("hpcplace_node_")) for b in new or []] == [
        "hpcplace_node_0",
        "hpcplace_node_0",
        "hpcplace_node_1",
    ]
    assert steer_placement_group([UNNAMED], "", bundles(3), 0) == (None, "")  # another of the driver's groups
    assert steer_placement_group([UNNAMED], "", bundles(3), None) == (None, "")  # not in the driver
    assert steer_placement_group([UNNAMED], "named", bundles(3), 1) == (None, "")
    new, line = steer_placement_group([UNNAMED], "", bundles(4), 1)
    assert new is None and "has 4 bundles; the plan has 3: not steered" in line


def test_a_users_own_pin_is_kept() -> None:
    own = [{"GPU": 1, "hpcplace_node_9": 0.5}, {"GPU": 1, "ng_gen": 0.1}, {"GPU": 1, "mine": 1}]
    new, line = steer_placement_group([UNNAMED], "", own, 1)
    assert new == [own[0], own[1], {"GPU": 1, "mine": 1, "hpcplace_node_1": 0.001}]
    assert "bundles 0,1 keep their own hpcplace resources" in line


def test_actors_by_class_and_rank_unless_placed_otherwise() -> None:
    resources, line = steer_actor([ACTOR], "ReferenceModelActor", [2, 1, None, None], {}, {"resources": {"x": 1}})
    assert resources == {"x": 1, "hpcplace_node_4": 0.001} and "rank 1 on node rank 4" in line
    assert steer_actor([ACTOR], "PolicyModelActor", [2, 1], {}, {}) == (None, "")
    assert steer_actor([ACTOR], "ReferenceModelActor", [2, 0], {}, {"scheduling_strategy": object()}) == (None, "")
    assert steer_actor([ACTOR], "ReferenceModelActor", [2, 0], {}, {"placement_group": object()}) == (None, "")
    none, line = steer_actor([ACTOR], "ReferenceModelActor", [2, 5], {}, {})
    assert none is None and "rank 5" in line
    none, line = steer_actor([ACTOR], "ReferenceModelActor", [2, 0], {}, {"resources": {"ng_a": 0.1}})
    assert none is None and "keeps its own" in line


def test_rules_round_trip_through_plan_json_and_refuse_nonsense() -> None:
    rules = (
        SteerRule("a", "group", (0, 1), name=r"x(?P<index>\d)"),
        SteerRule("b", "bundle", (1,), ordinal=0),
        SteerRule("c", "rank", (2, 2), actor_class="C", rank_arg=2),
    )
    assert steer_from_json(json.loads(json.dumps([r.to_json() for r in rules]))) == rules
    with pytest.raises(ValueError):
        SteerRule("d", "group", (0,), name="x", ordinal=0)
    with pytest.raises(ValueError):
        SteerRule("d", "nodes", (0,), name="x")
    with pytest.raises(SpecError, match="bad steer rule"):
        steer_from_json([{"what": "x", "pin": "group", "nodes": [0], "name": "("}])


def test_raylets_advertise_their_node_and_nemo_rl_its_topo_rank() -> None:
    assert node_resources({"rank": 3, "label": "gen", "framework": "verl"}) == {"ng_gen": 1, "hpcplace_node_3": 1}
    assert node_resources({"rank": 0, "label": "t", "framework": "nemo_rl"})["topo_rank"] == 1


def test_the_hook_goes_first_on_pythonpath_only_where_the_run_has_a_table(tmp_path: Path) -> None:
    assert steer_environment({"PYTHONPATH": "/a"}, str(tmp_path)) == {}
    folder = tmp_path / STEER_DIR
    folder.mkdir(parents=True)
    (folder / STEER_TABLE).write_text("{}")
    env = steer_environment({"PYTHONPATH": f"/a:{folder}"}, str(tmp_path))
    assert env == {"PYTHONPATH": f"{folder}:/a", "HPCPLACE_STEER": str(folder / STEER_TABLE)}


PROBE = r"""
import json, os, sys
import ray
from ray.cluster_utils import Cluster
from ray.util.placement_group import placement_group as imported_early

cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
for rank in range(3):
    cluster.add_node(num_cpus=8, num_gpus=4, resources={f"hpcplace_node_{rank}": 1})
cluster.wait_for_nodes()
ray.init(address=cluster.address)
rank_of = {n["NodeID"]: next((int(k[14:]) for k in n["Resources"] if k.startswith("hpcplace_node_")), -1)
           for n in ray.nodes()}
out = {"sitecustomize_chain": os.environ.get("NEXT_SITECUSTOMIZE_RAN")}
groups = {
    "pool0": ray.util.placement_group([{"GPU": 1, "CPU": 1}] * 2, strategy="STRICT_PACK", name="poolverl_group_2_2:0"),
    "pool1": imported_early([{"GPU": 1, "CPU": 1}] * 2, strategy="STRICT_PACK", name="poolverl_group_2_2:1"),
    "unnamed0": imported_early([{"GPU": 1, "CPU": 1}] * 2, strategy="PACK"),
    "unnamed1": imported_early([{"GPU": 1, "CPU": 1}] * 3, strategy="PACK"),
    "other": imported_early([{"CPU": 1}], name="not-ours"),
}
stuck = imported_early([{"GPU": 5}], strategy="STRICT_PACK", name="poolverl_group_5:0")  # node rank 2 has 4 GPUs
ray.get([pg.ready() for pg in groups.values()])
import time; time.sleep(3)  # the hook's watch (HPCPLACE_STEER_PENDING_S=1) says it is still pending
ray.util.remove_placement_group(stuck)
table = ray.util.placement_group_table()
for key, pg in groups.items():
    got = table[pg.id.hex()]["bundles_to_node_id"]
    out[key] = [rank_of[got[b]] for b in sorted(got)]

@ray.remote(num_cpus=0.1)
class ReferenceModelActor:
    def __init__(self, world_size, rank, addr, port):
        pass
    def node(self):
        return ray.get_runtime_context().get_node_id()

refs = [ReferenceModelActor.remote(2, r, None, None) for r in range(2)]
refs += [ReferenceModelActor.options(num_cpus=0.1).remote(2, 1, None, None)]
out["actors"] = [rank_of[n] for n in ray.get([a.node.remote() for a in refs])]
print("RESULT " + json.dumps(out))
ray.shutdown()
cluster.shutdown()
"""


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")
def test_on_a_real_ray_cluster_every_steered_request_lands_on_its_planned_node(tmp_path: Path) -> None:
    rules = [
        {**GROUP, "nodes": [2, 1]},
        {"what": "u0", "pin": "bundle", "nodes": [1, 0], "ordinal": 0},
        {"what": "u1", "pin": "bundle", "nodes": [2, 0, 1], "ordinal": 1},
        {**ACTOR, "nodes": [2, 0]},
    ]
    folder = tmp_path / STEER_DIR
    folder.mkdir(parents=True)
    (folder / "sitecustomize.py").write_text(Path(steer_hook.__file__).read_text())
    (folder / STEER_TABLE).write_text(json.dumps({"rules": rules}))
    nxt = tmp_path / "next"
    nxt.mkdir()
    (nxt / "sitecustomize.py").write_text("import os\nos.environ['NEXT_SITECUSTOMIZE_RAN'] = __name__\n")
    env = {**os.environ, "PYTHONPATH": str(nxt), "HPCPLACE_STEER_PENDING_S": "1"}
    env.update(steer_environment(env, str(tmp_path)))
    run = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, env=env, check=False, cwd=tmp_path
    )
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, run.stdout[-2000:] + run.stderr[-4000:]
    got = json.loads(lines[-1][7:])
    assert got["sitecustomize_chain"] == "sitecustomize"  # the next sitecustomize on the path still ran
    assert got["pool0"] == [2, 2] and got["pool1"] == [1, 1]
    assert got["unnamed0"] == [1, 0] and got["unnamed1"] == [2, 0, 1]
    assert got["actors"][:2] == [2, 0] and got["actors"][2] == 0  # rank 1 of the third: node rank 0
    log = (folder / "steer.log").read_text()
    assert "placement group poolverl_group_2_2:1: bundles on node ranks 1,1" in log
    assert "not-ours" not in log
    assert "placement group poolverl_group_5:0 is still pending after 1 s" in log and "hpcplace_node_2" in log
    assert "placement group poolverl_group_2_2:0 is still pending" not in log
    assert "hpcplace steer: warning: placement group poolverl_group_5:0 is still pending" in run.stderr
