"""The in-job Ray pieces' pure parts: port choice, raylet argv/env, join bookkeeping."""

from __future__ import annotations

import json
import re
import stat
from dataclasses import replace
from pathlib import Path

from hpcplace.config.launch import LaunchSpec
from hpcplace.plan.planner import plan_from_file
from hpcplace.runtime.ray_driver import driver_env, expected_nodes, joined_ranks, missing_text
from hpcplace.runtime.ray_node import (
    AUTH_TOKEN,
    AUTH_VARIABLES,
    label_ok,
    node_facts,
    port_candidates,
    ray_start_argv,
    raylet_env,
)

REPO = Path(__file__).resolve().parents[2]

HEADER = {
    "node_groups": [
        {
            "label": "a800",
            "partition": "a800",
            "num_nodes": 2,
            "first_node_rank": 0,
            "gpus_per_node": [8, 8],
            "gpu_type": "a800",
            "cpus_per_node": None,
            "env": {"G": "1"},
        },
        {
            "label": "cpu",
            "partition": "cpu",
            "num_nodes": 1,
            "first_node_rank": 2,
            "gpus_per_node": [0],
            "gpu_type": None,
            "cpus_per_node": 16,
            "env": {},
        },
    ]
}


def test_port_candidates_per_job_and_in_range() -> None:
    a, b = port_candidates("101"), port_candidates("102")
    assert a[0] != b[0] and len(set(a)) == len(a)
    assert all(20000 <= p <= 32768 - 256 for p in a + b)  # each block of 256 below Linux's ephemeral ports
    assert port_candidates("101") == a  # deterministic: the same job always tries the same ports


def test_node_facts_and_raylet_argv() -> None:
    node = node_facts(HEADER, 0, 1, cpus_needed=5)
    assert node["rank"] == 1 and node["gpus"] == tuple(str(i) for i in range(8)) and node["num_cpus"] == 5
    cpu = node_facts(HEADER, 1, 0, cpus_needed=1)
    assert cpu["rank"] == 2 and cpu["gpus"] == () and cpu["num_cpus"] == 16 and cpu["gpu_type"] is None
    argv = ray_start_argv("/py", node, head=False, port=20010, address="h:20010", temp_dir="/t", spill_dir="/s")
    assert argv[:5] == ["/py", "-m", "ray.scripts.scripts", "start", "--block"]
    assert "--num-gpus=8" in argv and "--num-cpus=5" in argv and "--address=h:20010" in argv
    assert json.loads(next(a for a in argv if a.startswith("--resources="))[12:]) == {
        "ng_a800": 1,
        "hpcplace_node_1": 1,
    }
    labels = next(a for a in argv if a.startswith("--labels="))[9:]
    assert "hpcplace.node_rank=1" in labels and "hpcplace.group=a800" in labels
    head = ray_start_argv(
        "/py",
        node_facts(HEADER, 0, 0),
        head=True,
        port=20010,
        address=None,
        temp_dir="/t",
        spill_dir="/s",
        extra=["--object-store-memory=1"],
    )
    assert "--head" in head and "--port=20010" in head and head[-1] == "--object-store-memory=1"
    cpu_argv = ray_start_argv("/py", cpu, head=False, port=1, address="h:1", temp_dir="/t", spill_dir="/s")
    assert "hpcplace.gpu_type" not in next(a for a in cpu_argv if a.startswith("--labels="))  # empty: left out
    default = {**cpu, "partition": None}  # no partition named: Slurm's default; no label, and no TypeError
    default_argv = ray_start_argv("/py", default, head=False, port=1, address="h:1", temp_dir="/t", spill_dir="/s")
    assert "hpcplace.partition" not in next(a for a in default_argv if a.startswith("--labels="))


def test_label_values() -> None:
    assert label_ok("a800") and label_ok("rtx-4090.x") and not label_ok("") and not label_ok("a b")
    assert not label_ok("-a") and not label_ok("x" * 64)


def test_raylet_env_scrubs_leaked_gpus_and_sets_the_rank() -> None:
    node = node_facts(HEADER, 1, 0)
    env = raylet_env(
        {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7", "SLURM_JOB_GPUS": "0", "PATH": "/bin"}, node, {"L": "v"}, ""
    )
    assert env["CUDA_VISIBLE_DEVICES"] == "" and "SLURM_JOB_GPUS" not in env and "GPU_DEVICE_ORDINAL" not in env
    assert env["RLINF_NODE_RANK"] == "2" and env["L"] == "v" and env["PATH"] == "/bin"
    gpu = raylet_env({}, node_facts(HEADER, 0, 0), {}, "0,1")
    assert gpu["CUDA_VISIBLE_DEVICES"] == gpu["GPU_DEVICE_ORDINAL"] == "0,1" and gpu["G"] == "1"


def test_every_ray_process_of_the_job_authenticates_alike(tmp_path: Path) -> None:
    """The raylets and the driver get one Ray authentication: the job's token when its run directory has one,
    whatever the submitting shell exports; launch.env's own choice when it sets RAY_AUTH_MODE; no token for a
    run directory rendered without one (not Ray's per-process guess from ~/.ray/auth_token)."""
    shell = {"RAY_AUTH_MODE": "disabled", "RAY_AUTH_TOKEN": "shell's", "RAY_AUTH_TOKEN_PATH": "/home/u/t", "X": "1"}
    node = node_facts(HEADER, 1, 0)

    def both(launch_env: dict[str, str]) -> list[dict[str, str]]:
        raylet = raylet_env(shell, node, launch_env, "", run_dir=str(tmp_path))
        driver = driver_env(
            shell, head="h", port=1, num_nodes=1, plan_path=str(tmp_path / "plan.json"), launch_env=launch_env
        )
        return [{k: env[k] for k in (*AUTH_VARIABLES, "X") if k in env} for env in (raylet, driver)]

    assert both({}) == [{"RAY_AUTH_MODE": "disabled", "X": "1"}] * 2  # rendered without a token
    token = tmp_path / AUTH_TOKEN
    token.parent.mkdir()
    token.write_text("t")
    assert both({}) == [{"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token), "X": "1"}] * 2
    own = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": "/site/ray-token"}
    assert both(own) == [{**own, "X": "1"}] * 2
    assert both({"RAY_AUTH_MODE": "disabled"}) == [{"RAY_AUTH_MODE": "disabled", "X": "1"}] * 2


def test_render_writes_a_new_token_for_a_ray_job_only(tmp_path: Path) -> None:
    """A Ray-mode run directory holds its own random token, readable by its owner only; a steps-mode one none."""
    from hpcplace.slurm.render import render_run

    steps_plan = plan_from_file(REPO / "configs" / "hetero-partitions.yaml")
    ray_plan = replace(steps_plan, launch=LaunchSpec("ray", ("python", "train.py")))
    first = render_run(ray_plan, tmp_path / "a").run_dir / AUTH_TOKEN
    second = render_run(ray_plan, tmp_path / "b").run_dir / AUTH_TOKEN
    assert stat.S_IMODE(first.stat().st_mode) == 0o600
    assert re.fullmatch(r"[0-9a-f]{64}", first.read_text()) and first.read_text() != second.read_text()
    steps = render_run(steps_plan, tmp_path / "c").run_dir
    assert not (steps / AUTH_TOKEN).exists()


def test_join_bookkeeping_names_missing_nodes() -> None:
    expected = expected_nodes(HEADER)
    assert expected == {0: (0, 0, "a800"), 1: (0, 1, "a800"), 2: (1, 0, "cpu")}
    nodes = [
        {"Alive": True, "Labels": {"hpcplace.node_rank": "0"}},
        {"Alive": False, "Labels": {"hpcplace.node_rank": "1"}},
        {"Alive": True, "Labels": {}},
    ]
    assert joined_ranks(nodes) == {0}
    text = missing_text([2, 1], expected, lambda g, j: f"host{g}{j}")
    assert text == (
        "node rank 1 on host01 (node group a800, het group 0 node 1); "
        "node rank 2 on host10 (node group cpu, het group 1 node 0)"
    )


def test_driver_env_is_the_contract() -> None:
    env = driver_env(
        {"CUDA_VISIBLE_DEVICES": "0", "X": "1"},
        head="h",
        port=20010,
        num_nodes=3,
        plan_path="/r/plan.json",
        launch_env={"P": "q"},
    )
    assert {
        k: env[k]
        for k in (
            "RAY_ADDRESS",
            "RANK",
            "WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
            "HPCPLACE_PLAN",
            "HPCPLACE_RUN_DIR",
            "P",
            "X",
        )
    } == {
        "RAY_ADDRESS": "h:20010",
        "RANK": "0",
        "WORLD_SIZE": "3",
        "MASTER_ADDR": "h",
        "MASTER_PORT": "20010",
        "HPCPLACE_PLAN": "/r/plan.json",
        "HPCPLACE_RUN_DIR": "/r",
        "P": "q",
        "X": "1",
    }
    assert "CUDA_VISIBLE_DEVICES" not in env


INTERLEAVED = {
    "node_groups": [  # RLinf node_ranks a800 "2,0", rtx 1, cpu 3 (plan.json lists node_ranks)
        {
            "label": "a800",
            "partition": "a800",
            "num_nodes": 2,
            "first_node_rank": 0,
            "node_ranks": [0, 2],
            "gpus_per_node": [8, 8],
            "gpu_type": "a800",
            "cpus_per_node": None,
            "env": {},
        },
        {
            "label": "rtx",
            "partition": "rtx4090",
            "num_nodes": 1,
            "first_node_rank": 1,
            "node_ranks": [1],
            "gpus_per_node": [4],
            "gpu_type": "rtx4090",
            "cpus_per_node": None,
            "env": {},
        },
        {
            "label": "cpu",
            "partition": "cpu",
            "num_nodes": 1,
            "first_node_rank": 3,
            "node_ranks": [3],
            "gpus_per_node": [0],
            "gpu_type": None,
            "cpus_per_node": 2,
            "env": {},
        },
    ]
}


def test_interleaved_node_ranks_reach_raylets_and_the_join_wait() -> None:
    """The a800 component's second host is cluster node rank 2 (its RLINF_NODE_RANK and label), and
    the driver waits for all four ranks (WORLD_SIZE 4), not first_node_rank + j."""
    assert [node_facts(INTERLEAVED, g, j)["rank"] for g, j in ((0, 0), (0, 1), (1, 0), (2, 0))] == [0, 2, 1, 3]
    second = node_facts(INTERLEAVED, 0, 1)
    assert raylet_env({}, second, {}, "0")["RLINF_NODE_RANK"] == "2"
    argv = ray_start_argv("/py", second, head=False, port=1, address="h:1", temp_dir="/t", spill_dir="/s")
    assert "hpcplace.node_rank=2" in next(a for a in argv if a.startswith("--labels="))
    assert expected_nodes(INTERLEAVED) == {0: (0, 0, "a800"), 1: (1, 0, "rtx"), 2: (0, 1, "a800"), 3: (2, 0, "cpu")}
    text = missing_text([2], expected_nodes(INTERLEAVED), lambda g, j: f"host{g}{j}")
    assert text == "node rank 2 on host01 (node group a800, het group 0 node 1)"


def test_the_raylets_cpus_are_the_scripts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """In the job each raylet computes its CPUs from plan.json: the busiest node of its group, as the
    script's summary (hpcplace.ray.ray_cluster.ray_nodes) says, though the group's nodes need different counts."""
    from pathlib import Path

    from hpcplace.ray.ray_cluster import ray_nodes
    from hpcplace.runtime.plan_index import PlanIndex
    from hpcplace.runtime.ray_node import group_cpus_needed
    from hpcplace.slurm.submit import load_plan
    from tests.runtime.conftest import write_plan

    roll = (
        (Path(__file__).parents[2] / "configs" / "roll-example.yaml").read_text().replace("  cpus_per_node: 16\n", "")
    )
    plan_path = write_plan(tmp_path, roll + "launch: {mode: ray, driver: [python, x.py]}\n")
    plan = load_plan(plan_path)
    needs = [
        sum(c.cpus_per_process for c in plan.components for p in c.processes if p.cluster_node_rank == r)
        for r in (0, 1)
    ]
    assert needs[0] != needs[1]
    with PlanIndex(str(plan_path)) as index:
        assert group_cpus_needed(index, 0) == max(needs)
    assert [n.num_cpus for n in ray_nodes(plan)] == [max(needs)] * 2
