"""slime's own placement under hpcplace's Ray launch mode on the real Slurm test cluster (marker `slurm`), its actor
and rollout on two partitions: the actor on the a800 partition's two 2-GPU nodes, the rollout (one engine of 2
GPUs) on the rtx4090 node (4 GPUs, 2 planned). tests/ray/drivers/slime_driver.py runs a checkout's
`create_placement_groups` (its one PACK group of 6 bundles, its InfoActors and (node IP, GPU id) sort) and
`allocate_train_group(...).create()` with a probe actor class. Unsteered, PACK fills the largest node first (4 of
the 6 bundles on rtx4090), so slime's sort would give actor ranks the rtx4090 GPUs; steered, each node holds its
planned bundles, and every actor rank and rollout bundle must be on its planned node and GPU, on every start
(conftest.py: the repeated proof). Needs HPCPLACE_SLIME_SRC on a path the nodes see (slime is not on PyPI:
skipped in CI)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from hpcplace.slurm import submit
from tests.ray.test_frameworks_slurm import DRIVERS, FAKE_GPU, run_job
from tests.ray.test_ray_slurm import _small_ray, assert_clean  # noqa: F401 - fixture
from tests.slurm.conftest import LiveCluster

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.framework_driver,
    pytest.mark.skipif(
        not os.environ.get("HPCPLACE_SLIME_SRC"),
        reason="HPCPLACE_SLIME_SRC (a THUDM/slime checkout) is not set: slime is not on PyPI, so CI has none",
    ),
]
FLAGS = ["--actor-num-nodes", "2", "--actor-num-gpus-per-node", "2", "--rollout-num-gpus", "2",
         "--rollout-num-gpus-per-engine", "2", "--num-gpus-per-node", "2"]  # fmt: skip


def test_slime_actor_and_rollout_on_two_partitions_land_as_planned(
    steer_cluster: LiveCluster, start: int, tmp_path: Path
) -> None:
    src = os.environ["HPCPLACE_SLIME_SRC"]
    report_path = tmp_path / "slime-report.json"
    driver = [sys.executable, str(DRIVERS / "slime_driver.py"), "--report", str(report_path), "--"]
    node = {"cpus_per_node": 4, "mem_per_node": 4000}
    config = {
        "format": "slime",
        "slurm": {
            "partition": "a800",
            "gpu_type": "a800",
            "gpus_per_node": 2,
            **node,
            "node_groups": {"gen": {"partition": "rtx4090", "gpu_type": "rtx4090", "gpus_per_node": 4, **node}},
            "pools": {"rollout": "gen"},
        },
        "launch": {
            "driver": [*driver, "python3", "train.py", *FLAGS],
            "env": {"PYTHONPATH": str(FAKE_GPU), "SLIME_SRC": src},
            "join_timeout": 180,
        },
    }
    path = tmp_path / "slime.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    run_dir, plan, _hosts = run_job(tmp_path, path)
    report = json.loads(report_path.read_text())
    assert report["error"] is None, report.get("traceback")
    assert [(g["label"], g["partition"], g["num_nodes"]) for g in plan["node_groups"]] == [
        ("default", "a800", 2),
        ("gen", "rtx4090", 1),
    ]
    rank_of = report["node_ranks"]
    planned = {c["name"]: c["processes"] for c in plan["components"]}
    got_actor = sorted((r["rank"], rank_of[r["node_id"]], r["gpus"]) for r in report["actor"])
    want_actor = [
        (rank, p["cluster_node_rank"], [int(g) for g in p["visible_accelerators"]])
        for rank, p in enumerate(planned["actor"])
    ]
    assert got_actor == want_actor
    got_rollout = [(rank_of[b["node_id"]], b["gpu"]) for b in report["rollout_bundles"]]
    want_rollout = [(p["cluster_node_rank"], int(g)) for p in planned["rollout"] for g in p["visible_accelerators"]]
    assert got_rollout == want_rollout
    # the actor group's two nodes are numbered in slime's order, IP addresses as numbers (runtime/ip_order.py)
    published = [json.loads((run_dir / "ray" / "order" / f"g0-{j}.json").read_text()) for j in range(2)]
    by_number = sorted(published, key=lambda r: [int(p) for p in r["address"].split(".")])
    assert [submit.read_hosts(run_dir)[(0, j)] for j in range(2)] == [r["host"] for r in by_number]
    log = (run_dir / "ray" / "steer" / "steer.log").read_text()
    assert "slime's placement group: placement group unnamed #0: bundles on node ranks 0,0,1,1,2,2" in log, log
