"""A NeMo-RL job with training and generation on two partitions of the real Slurm test cluster (marker
`slurm`): NeMo-RL's own example config, unchanged, with overrides on the command; hpcplace's blocks put
the training pool on a800 and the generation pool on rtx4090. The driver (tests/ray/drivers/nemo_rl/
run_grpo.py) runs NeMo-RL's own load_config, parse_hydra_overrides, init_ray and RayVirtualCluster from the
checkout in HPCPLACE_NEMO_RL_SRC (on a path the nodes see), so Ray, not the test, decides which node takes
each of NeMo-RL's placement groups: the job must either run every worker where the plan says (each group on
one node of its pool's node group, its GPUs as planned) or fail within seconds naming the difference
(hpcplace's watcher beside the driver), never run a pool on another partition silently. Skipped without the
checkout (NeMo-RL is not on PyPI)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from tests.ray.test_ray_slurm import assert_clean
from tests.slurm.conftest import LiveCluster, submit_cli, wait_done  # slurm_cluster: tests/ray/conftest.py

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


def test_nemo_rl_training_and_generation_on_two_partitions(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    src = os.environ["HPCPLACE_NEMO_RL_SRC"]
    driver = [
        sys.executable,
        str(DRIVER),
        "--config",
        f"{src}/examples/configs/grpo_math_1B.yaml",
        "cluster.num_nodes=3",
        "cluster.gpus_per_node=2",
        "policy.generation.colocated.enabled=false",
        "policy.generation.colocated.resources.num_nodes=1",
        "policy.generation.colocated.resources.gpus_per_node=2",
    ]
    node = {"cpus_per_node": 4, "mem_per_node": 4000}
    blocks = {
        "format": "nemo_rl",
        "slurm": {
            "time": "00:05:00",
            "node_groups": {
                "train": {"partition": "a800", "gpu_type": "a800", **node},
                "gen": {"partition": "rtx4090", "gpu_type": "rtx4090", **node},
            },
            "pools": {"training": "train", "generation": "gen"},
        },
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
    groups = {g["label"]: g for g in plan["node_groups"]}
    ranks = {
        label: list(range(g["first_node_rank"], g["first_node_rank"] + g["num_nodes"])) for label, g in groups.items()
    }
    assert ranks == {"train": [0, 1], "gen": [2]}
    errors = run_dir / "logs" / "ray-errors.txt"
    if status.state != "COMPLETED":  # Ray put a pool on the other partition: stopped, and said which
        text = errors.read_text() if errors.exists() else ""
        assert "NeMo-RL placement: NeMo-RL's placement group grpo_" in text, status.text + logs[-6000:]
        assert "the plan puts" in text
        print("watcher stopped the job:", text)
        assert_clean(job_id)
        return
    assert not errors.exists() or "NeMo-RL placement" not in errors.read_text()
    report = json.loads((run_dir / "nemo-rl-report.json").read_text())
    planned = {c["name"]: c for c in plan["components"]}
    for name, label in (("policy", "train"), ("generation", "gen")):
        workers = report[name]
        assert len(workers) == planned[name]["world_size"]
        by_group: dict[int, list[dict]] = {}
        for w in workers:
            by_group.setdefault(w["group"], []).append(w)
        nodes = set()
        for members in by_group.values():  # each of NeMo-RL's per-node groups: one node of the pool's group
            assert len({w["node_rank"] for w in members}) == 1, members
            assert members[0]["node_rank"] in ranks[label], (name, members)
            assert [w["gpu"] for w in members] == [[0], [1]]  # bundle b on GPU b, as planned
            nodes.add(members[0]["node_rank"])
        assert sorted(nodes) == ranks[label]  # the pool's nodes, each once
    assert_clean(job_id)
