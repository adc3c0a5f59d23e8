"""slime's own placement agrees with hpcplace's plan: tests/ray/drivers/slime_driver.py runs a checkout's
`create_placement_groups` (its PACK group and its (node IP, GPU id) sort) and `allocate_train_group(...).create()`
(with a probe actor class) on a local Ray cluster with fake GPUs and one IP per node in node-rank order, and every
actor rank's node and GPU, and every engine part's slice of slime's reordered rollout bundles, are compared with
plan.json. Needs HPCPLACE_SLIME_SRC (slime is not on PyPI: skipped in CI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcplace.config.formats import load_spec
from hpcplace.plan.planner import plan_from_spec

DRIVER = Path(__file__).parent / "drivers" / "slime_driver.py"
CASES = {
    "disaggregated": ["--actor-num-nodes", "1", "--actor-num-gpus-per-node", "4", "--rollout-num-gpus", "4",
                      "--rollout-num-gpus-per-engine", "2"],
    "colocated": ["--actor-num-nodes", "2", "--actor-num-gpus-per-node", "4", "--colocate",
                  "--rollout-num-gpus-per-engine", "4"],
    "engine_wider_than_a_node": ["--actor-num-nodes", "1", "--actor-num-gpus-per-node", "4", "--rollout-num-gpus",
                                 "8", "--rollout-num-gpus-per-engine", "8", "--num-gpus-per-node", "4"],
    "prefill_decode": ["--actor-num-nodes", "1", "--actor-num-gpus-per-node", "4", "--rollout-num-gpus", "8",
                       "--rollout-num-gpus-per-engine", "2", "--num-gpus-per-node", "4", "--prefill-num-servers", "1"],
    "sglang_config": ["--actor-num-nodes", "1", "--actor-num-gpus-per-node", "4", "--rollout-num-gpus", "12",
                      "--rollout-num-gpus-per-engine", "2", "--num-gpus-per-node", "4", "--sglang-config", "{config}"],
}  # fmt: skip
# two models: the first with encoder (written last, started first), prefill and decode groups at three engine sizes;
# the second a placeholder, then one-GPU engines
SGLANG_CONFIG = """
sglang:
  - name: actor
    server_groups:
      - {worker_type: prefill, num_gpus: 2}
      - {worker_type: decode, num_gpus: 4, num_gpus_per_engine: 4}
      - {worker_type: encoder, num_gpus: 2, num_gpus_per_engine: 1}
  - name: ref
    model_path: /ref
    num_gpus_per_engine: 1
    server_groups:
      - {worker_type: placeholder, num_gpus: 2}
      - {worker_type: regular, num_gpus: 2}
"""


@pytest.mark.parametrize("case", sorted(CASES))
def test_slime_placement_agrees(tmp_path: Path, case: str) -> None:
    src = os.environ.get("HPCPLACE_SLIME_SRC")
    if not src:
        pytest.skip("HPCPLACE_SLIME_SRC (a THUDM/slime checkout) is not set: slime is not on PyPI, so CI has none")
    pytest.importorskip("ray")
    config = tmp_path / "sglang.yaml"
    config.write_text(SGLANG_CONFIG, encoding="utf-8")
    flags = [w.replace("{config}", str(config)) for w in CASES[case]]
    site = tmp_path / "site.yaml"
    site.write_text("slurm: {gpus_per_node: 4}\n", encoding="utf-8")
    plan = plan_from_spec(load_spec(str(site), driver=["python3", "train.py", *flags]))
    report_path = tmp_path / "report.json"
    nodes = ",".join(str(n) for g in plan.cluster.node_groups for n in g.gpus_per_node)
    subprocess.run(
        [sys.executable, str(DRIVER), "--report", str(report_path), "--nodes", nodes, "--", *flags],
        capture_output=True,
        timeout=300,
        check=False,
    )
    report = json.loads(report_path.read_text())
    assert report["error"] is None, report.get("traceback")
    ip_of_rank = report["node_ips"]  # node rank k has the k-th IP: the order slime sorts by
    actor = next(c for c in plan.components if c.name == "actor")
    planned = [(ip_of_rank[p.cluster_node_rank], [int(g) for g in p.visible_accelerators]) for p in actor.processes]
    assert sorted((r["rank"], r["ip"], r["gpus"]) for r in report["actor"]) == [
        (rank, ip, gpus) for rank, (ip, gpus) in enumerate(planned)
    ]
    # slime's engine groups in its order, each from its own first bundle of the rollout on; the plan's rollout
    # components are the groups that start engines, in the same order (a placeholder only takes its GPUs)
    bundles = report["rollout_bundles"]
    groups = report.get("server_groups") or [{"worker_type": "regular", "num_gpus": len(bundles)}]
    engines = [c for c in plan.components if c.name not in ("actor", "critic")]
    start = 0
    for group in groups:
        if group["worker_type"] != "placeholder":
            component = engines.pop(0)
            assert component.tensor_parallel_size == group.get("num_gpus_per_engine", component.tensor_parallel_size)
            at = start
            for p in component.processes:  # engine part i: the group's next k reordered bundles, on one node
                k = len(p.visible_accelerators)
                part = bundles[at : at + k]
                at += k
                assert {b["ip"] for b in part} == {ip_of_rank[p.cluster_node_rank]}, (component.name, part)
                assert [b["gpu"] for b in part] == [int(g) for g in p.visible_accelerators], (component.name, part)
            assert at <= start + group["num_gpus"], group
        start += group["num_gpus"]
    assert start == len(bundles) and not engines, engines
