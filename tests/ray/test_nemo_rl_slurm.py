"""NeMo-RL jobs with training and generation on two partitions of the real Slurm test cluster (marker `slurm`):
NeMo-RL's own example config, unchanged, with overrides on the command; hpcplace's blocks put each pool on its
node group. The driver (tests/ray/drivers/nemo_rl/run_grpo.py) runs NeMo-RL's own load_config,
parse_hydra_overrides, init_ray and RayVirtualCluster (its placement groups, and for an engine wider than a node
its unified group and topology sort) from the checkout in HPCPLACE_NEMO_RL_SRC (on a path the nodes see). The
pools' nodes have the same GPU count, so unsteered Ray could put either pool on the other's partition (it did in
5 of 10 starts) and order a wide engine's ranks by its random node ids; with hpcplace's steering every worker
must run on its planned node and GPU, on every start (conftest.py: the repeated proof), and the watcher beside
the driver must find nothing. Skipped without the checkout (NeMo-RL is not on PyPI)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from tests.ray.test_ray_slurm import assert_clean
from tests.slurm.conftest import LiveCluster, submit_cli, wait_done  # steer_cluster: tests/ray/conftest.py

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.framework_driver,
    pytest.mark.skipif(
        not os.environ.get("HPCPLACE_NEMO_RL_SRC"),
        reason="HPCPLACE_NEMO_RL_SRC is not set: NeMo-RL's code comes from a checkout (not on PyPI)",
    ),
]
HERE = Path(__file__).parent
DRIVER = HERE / "drivers" / "nemo_rl" / "run_grpo.py"
FAKE_GPU = HERE / "fake_gpu"
A800 = {"partition": "a800", "gpu_type": "a800", "cpus_per_node": 4, "mem_per_node": 4000}
RTX = {"partition": "rtx4090", "gpu_type": "rtx4090", "cpus_per_node": 4, "mem_per_node": 4000}
CASES = {
    # training on the a800 partition's two nodes, generation (TP 1) on the rtx4090 node: per-node groups
    "two_partitions": ({"train": A800, "gen": RTX}, 1, 1, {"train": [0, 1], "gen": [2]}),
    # training on rtx4090, one TP 4 engine across both a800 nodes: one unified group, ordered by topo_rank
    "engine_wider_than_a_node": ({"train": RTX, "gen": A800}, 2, 4, {"train": [0], "gen": [1, 2]}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_nemo_rl_pools_on_two_partitions_land_as_planned(
    steer_cluster: LiveCluster, start: int, case: str, tmp_path: Path
) -> None:
    groups, gen_nodes, tp, want_ranks = CASES[case]
    src = os.environ["HPCPLACE_NEMO_RL_SRC"]
    driver = [
        sys.executable,
        str(DRIVER),
        "--config",
        f"{src}/examples/configs/grpo_math_1B.yaml",
        "cluster.num_nodes=3",
        "cluster.gpus_per_node=2",
        "policy.generation.colocated.enabled=false",
        f"policy.generation.colocated.resources.num_nodes={gen_nodes}",
        "policy.generation.colocated.resources.gpus_per_node=2",
        f"policy.generation.vllm_cfg.tensor_parallel_size={tp}",
    ]
    blocks = {
        "format": "nemo_rl",
        "slurm": {"time": "00:05:00", "node_groups": groups, "pools": {"training": "train", "generation": "gen"}},
        "launch": {
            "driver": driver,
            "env": {"PYTHONPATH": str(FAKE_GPU), "NEMO_RL_SRC": src},
            "join_timeout": 180,
        },
    }
    config = tmp_path / "nemo-rl.yaml"
    config.write_text(yaml.safe_dump(blocks, sort_keys=False))
    run_dir = tmp_path / "run"
    job_id = submit_cli(config, run_dir, cwd=tmp_path)
    status = wait_done(run_dir, 300)
    plan = json.loads((run_dir / "plan.json").read_text())
    logs = "".join(p.read_text(errors="replace") for p in (run_dir / "logs").glob("*.out"))
    assert status.state == "COMPLETED", status.text + logs[-6000:]
    labels = {g["label"]: g for g in plan["node_groups"]}
    ranks = {k: list(range(g["first_node_rank"], g["first_node_rank"] + g["num_nodes"])) for k, g in labels.items()}
    assert ranks == want_ranks
    errors = run_dir / "logs" / "ray-errors.txt"
    assert not errors.exists() or "NeMo-RL placement" not in errors.read_text()
    report = json.loads((run_dir / "nemo-rl-report.json").read_text())
    planned = {c["name"]: c for c in plan["components"]}
    for name in ("policy", "generation"):
        got = [(w["node_rank"], w["gpu"]) for w in report[name]]
        want = [
            (p["cluster_node_rank"], [int(g) for g in p["visible_accelerators"]]) for p in planned[name]["processes"]
        ]
        assert got == want, (name, got, want)
    assert [w["unified"] for w in report["generation"]] == [tp > 2] * len(report["generation"])
    log = (run_dir / "ray" / "steer" / "steer.log").read_text()
    assert "NeMo-RL policy (training pool): placement group grpo_train_cluster-node0" in log, log
    tail = "grpo_inference_cluster-unified" if tp > 2 else "grpo_inference_cluster-node0"
    assert f"NeMo-RL generation (generation pool): placement group {tail}" in log, log
    assert_clean(job_id)
