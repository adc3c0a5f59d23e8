"""Fast checks (no cluster) of the pieces the framework proofs rest on: the NVML fake fakes what it
says and nothing when off, and the report-vs-plan comparison catches each kind of disagreement."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcplace.plan.plan import plan_to_json
from hpcplace.plan.planner import plan_from_file
from tests.ray.framework_checks import group_node_ranks, node_table, rlinf_mismatches

HERE = Path(__file__).parent
FIXTURE = HERE.parent / "fixtures" / "rlinf-ray-hetero.yaml"
INTERLEAVED = HERE.parent / "fixtures" / "rlinf-ray-interleaved.yaml"

PROBE = """
import json, ray._private.thirdparty.pynvml as nvml
from ray._private.accelerators.nvidia_gpu import NvidiaGPUAcceleratorManager as M
print(json.dumps([M.get_current_node_num_accelerators(), M.get_current_node_accelerator_type(),
                  getattr(nvml, "HPCPLACE_FAKE", None)]))
"""


def _nvml_view(env: dict[str, str]) -> list:
    full = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "FAKE_NVML")}
    full.update(env)
    out = subprocess.run([sys.executable, "-c", PROBE], env=full, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_fake_nvml_reports_the_raylets_planned_gpus() -> None:
    pytest.importorskip("ray")
    fake = str(HERE / "fake_gpu")
    assert _nvml_view({"PYTHONPATH": fake, "CUDA_VISIBLE_DEVICES": "0,1,3"})[:2] == [3, "A800"]
    assert _nvml_view(
        {"PYTHONPATH": fake, "CUDA_VISIBLE_DEVICES": "", "FAKE_NVML_GPU_MODEL": "NVIDIA GeForce RTX 4090"}
    )[:2] == [0, None]
    two = _nvml_view(
        {"PYTHONPATH": fake, "CUDA_VISIBLE_DEVICES": "4,5", "FAKE_NVML_GPU_MODEL": "NVIDIA H100 80GB HBM3"}
    )
    assert two[:2] == [2, "H100"]
    assert _nvml_view({"PYTHONPATH": fake, "CUDA_VISIBLE_DEVICES": "0,1", "FAKE_NVML": "0"})[2] is None


def _plan(fixture: Path = FIXTURE) -> dict:
    return json.loads(plan_to_json(plan_from_file(fixture)))


def _perfect_report(plan: dict) -> dict:
    """What RLinf reports when it agrees with the plan (shape of tests/ray/drivers/rlinf_driver.py)."""
    table = node_table(plan)
    nodes = [
        {
            "node_rank": r,
            "node_labels": [t["label"]],
            "ray_id": f"id{r}",
            "num_accelerators": t["gpus"],
            "accelerator_type": "NV_GPU" if t["gpus"] else "NO_ACCEL",
            "env_node_rank": str(r),
        }
        for r, t in table.items()
    ]
    placements, workers = {}, {}
    for comp in plan["components"]:
        placements[comp["name"]] = [
            dict(p, accelerator_type="NV_GPU" if table[p["cluster_node_rank"]]["gpus"] else "NO_ACCEL")
            for p in comp["processes"]
        ]
        workers[comp["name"]] = [
            {
                "rank": p["rank"],
                "ray_node_id": f"id{p['cluster_node_rank']}",
                "node_rank_env": str(p["cluster_node_rank"]),
                "host": f"h{p['cluster_node_rank']}",
                "cuda_visible_devices": ",".join(p["visible_accelerators"]),
            }
            for p in comp["processes"]
        ]
    groups = {g["label"]: {"node_ranks": group_node_ranks(g)} for g in plan["node_groups"]}
    return {
        "stages": ["worker groups launched"],
        "error": None,
        "num_nodes": len(table),
        "ray_nodes": len(table),
        "nodes": nodes,
        "node_groups": groups,
        "placements": placements,
        "workers": workers,
        "ray_node_hosts": {f"id{r}": f"h{r}" for r in table},
    }


def test_checker_agrees_with_a_faithful_report_and_names_each_difference() -> None:
    plan = _plan()
    hosts = {(t["het_group"], t["index"]): f"h{r}" for r, t in node_table(plan).items()}
    good = _perfect_report(plan)
    assert rlinf_mismatches(good, plan, hosts) == []
    cases = [
        (lambda r: r["nodes"][2].update(num_accelerators=4), "node rank 2"),
        (lambda r: r["nodes"][1].update(env_node_rank="3"), "node rank 1"),
        (lambda r: r["node_groups"]["a800"].update(node_ranks=[0]), "node group a800"),
        (lambda r: r["placements"]["actor"][3].update(cluster_node_rank=0), "actor rank 3: cluster_node_rank"),
        (lambda r: r["placements"]["rollout"][1].update(visible_accelerators=["1"]), "rollout rank 1: visible"),
        (lambda r: r["workers"]["env"][0].update(cuda_visible_devices="0"), "env worker 0: CUDA_VISIBLE_DEVICES"),
        (lambda r: r["workers"]["reward"][1].update(host="h0"), "reward worker 1: on host h0"),
        (lambda r: r["ray_node_hosts"].update(id0="h9"), "node rank 0: Ray node on h9"),
        (lambda r: r.update(error="AssertionError: boom"), "boom"),
    ]
    for mutate, expected in cases:
        report = copy.deepcopy(good)
        mutate(report)
        found = rlinf_mismatches(report, plan, hosts)
        assert any(expected in m for m in found), (expected, found)


def test_interleaved_node_ranks_map_each_host_to_its_listed_rank() -> None:
    """RLinf node groups a800 = "2,0", 4090 = 1, cpu = 3: the a800 het component's second host is
    cluster node rank 2 (not first_node_rank + 1 = 1), and the checker holds RLinf to exactly that."""
    plan = _plan(INTERLEAVED)
    assert [(g["label"], g["node_ranks"]) for g in plan["node_groups"]] == [
        ("a800", [0, 2]),
        ("4090", [1]),
        ("cpu", [3]),
    ]
    table = node_table(plan)
    assert {r: (t["label"], t["het_group"], t["index"], t["gpus"]) for r, t in table.items()} == {
        0: ("a800", 0, 0, 2),
        1: ("4090", 1, 0, 2),
        2: ("a800", 0, 1, 2),
        3: ("cpu", 2, 0, 0),
    }
    hosts = {(0, 0): "a800-1", (0, 1): "a800-2", (1, 0): "rtx4090-1", (2, 0): "cpu-1"}
    good = _perfect_report(plan)
    good["ray_node_hosts"] = {f"id{r}": hosts[(t["het_group"], t["index"])] for r, t in table.items()}
    for comp in good["workers"].values():
        for w in comp:
            w["host"] = good["ray_node_hosts"][w["ray_node_id"]]
    assert rlinf_mismatches(good, plan, hosts) == []
    cases = [
        # what a first_node_rank + j reading of the plan would have accepted
        (lambda r: r["node_groups"]["a800"].update(node_ranks=[0, 1]), "node group a800"),
        (lambda r: r["node_groups"]["4090"].update(node_ranks=[2]), "node group 4090"),
        (lambda r: r["ray_node_hosts"].update(id2="rtx4090-1", id1="a800-2"), "node rank 1: Ray node on a800-2"),
        # RLinf's node rank 2 carrying node rank 1's GPUs / labels
        (lambda r: r["nodes"][2].update(node_labels=["4090"]), "node rank 2"),
        (lambda r: r["workers"]["actor"][2].update(host="rtx4090-1"), "actor worker 2: on host rtx4090-1"),
        (lambda r: r["workers"]["actor"][3].update(node_rank_env="1", ray_node_id="id1"), "actor worker 3"),
        (lambda r: r["placements"]["actor"][2].update(cluster_node_rank=1), "actor rank 2: cluster_node_rank"),
    ]
    for mutate, expected in cases:
        report = copy.deepcopy(good)
        mutate(report)
        found = rlinf_mismatches(report, plan, hosts)
        assert any(expected in m for m in found), (expected, found)
