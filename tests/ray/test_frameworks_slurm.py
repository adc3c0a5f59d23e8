"""RLinf, AReaL and ROLL's attach path, as installed packages, under hpcplace's Ray launch mode on
the real Slurm test cluster (marker `slurm`), submitted with `hpcplace submit` as a user does. RLinf's
config is the fixture unchanged (its `slurm:` block included), submitted with `--driver -- python ...`
and validation on; AReaL's and ROLL's carry a `launch:` block with their driver; the drivers (tests/ray/drivers) run the frameworks' own code and write
JSON reports that must agree with plan.json. GPUs: the test cluster has none, so the raylets get
tests/ray/fake_gpu on PYTHONPATH (faking NVML only); the GPU tier runs without it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from hpcplace.slurm import submit
from tests.ray.framework_checks import node_table, rlinf_mismatches
from tests.ray.test_ray_slurm import _small_ray, assert_clean  # noqa: F401 - fixture
from tests.slurm.conftest import LiveCluster, submit_cli, wait_done  # slurm_cluster: tests/ray/conftest.py

pytestmark = [pytest.mark.slurm, pytest.mark.framework_driver]

HERE = Path(__file__).parent
FIXTURE = HERE.parent / "fixtures" / "rlinf-ray-hetero.yaml"
INTERLEAVED = HERE.parent / "fixtures" / "rlinf-ray-interleaved.yaml"
DRIVERS = HERE / "drivers"
FAKE_GPU = HERE / "fake_gpu"


def _need(module: str) -> None:
    pytest.importorskip(module, reason=f"{module} is installed by tests/requirements-frameworks.txt")


def launch_config(tmp_path: Path, name: str, driver: list[str], fixture: Path = FIXTURE) -> Path:
    """The RLinf fixture, unchanged, plus a `launch:` block running `driver` on the head."""
    text = fixture.read_text(encoding="utf-8")
    launch = {"launch": {"mode": "ray", "driver": driver, "env": {"PYTHONPATH": str(FAKE_GPU)}, "join_timeout": 180}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(text + "\n" + yaml.safe_dump(launch, sort_keys=False), encoding="utf-8")
    return path


def run_job(tmp_path: Path, config: Path, *extra: str, overrides: tuple[str, ...] = ()) -> tuple[Path, dict, dict]:
    """`hpcplace submit CONFIG [OVERRIDES] -o RUN EXTRA...` (validation on), until the job completed."""
    run_dir = tmp_path / "run"
    # the job's working directory is tmp_path: RLinf's driver writes output/logs/ relative to it
    job_id = submit_cli(config, run_dir, *extra, overrides=overrides, cwd=tmp_path)
    status = wait_done(run_dir, 420)
    batch = "".join(p.read_text() for p in (run_dir / "logs").glob("*.out"))
    assert status.state == "COMPLETED", status.text + batch[-6000:]
    assert_clean(job_id)
    return run_dir, json.loads((run_dir / "plan.json").read_text()), submit.read_hosts(run_dir)


def run_rlinf(tmp_path: Path, fixture: Path) -> tuple[dict, dict, dict]:
    """RLinf's driver on `fixture`; its report must agree with plan.json in every field and every
    component's workers must spread over exactly the hosts the plan gave it."""
    _need("rlinf")
    config = tmp_path / "rlinf.yaml"
    config.write_bytes(fixture.read_bytes())  # unchanged: RLinf's driver reads this same file
    # the raylets' fake NVML and a longer join timeout for this small machine: Hydra-style overrides
    # after the config, as a user adds them (the file stays as RLinf reads it)
    overrides = (f"+launch.env.PYTHONPATH={FAKE_GPU}", "+launch.join_timeout=180")
    driver = [
        sys.executable,
        str(DRIVERS / "rlinf_driver.py"),
        "--config-path",
        str(tmp_path),
        "--config-name",
        "rlinf",
    ]
    run_dir, plan, hosts = run_job(tmp_path, config, "--driver", "--", *driver, overrides=overrides)
    report = json.loads((run_dir / "rlinf-report.json").read_text())
    assert report["stages"][-1] == "worker groups launched", report.get("traceback")
    assert rlinf_mismatches(report, plan, hosts) == []
    table = node_table(plan)
    for comp in plan["components"]:
        assert {w["host"] for w in report["workers"][comp["name"]]} == {
            hosts[(table[p["cluster_node_rank"]]["het_group"], table[p["cluster_node_rank"]]["index"])]
            for p in comp["processes"]
        }
    return report, plan, hosts


def test_rlinf_scheduler_agrees_with_the_plan(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """RLinf's own Cluster (attached to the Ray cluster hpcplace started), node groups, per-node
    accelerator counts, ComponentPlacement placements and launched WorkerGroups equal plan.json."""
    run_rlinf(tmp_path, FIXTURE)


def test_rlinf_interleaved_node_ranks_agree_with_the_plan(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """RLinf node groups over interleaved ranks listed out of order (a800 "2,0", 4090 1 listed
    first, cpu 3): RLinf's node rank 2 is the a800 component's SECOND host and rank 1 the rtx4090
    host between them; RLinf's node groups, labels, accelerators, placements and workers equal the
    plan, the driver runs on rank 0's host, and no node keeps a node-local dir."""
    report, _, hosts = run_rlinf(tmp_path, INTERLEAVED)
    a800_1, a800_2, rtx = hosts[(0, 0)], hosts[(0, 1)], hosts[(1, 0)]
    assert {r["node_rank"]: report["ray_node_hosts"][r["ray_id"]] for r in report["nodes"]} == {
        0: a800_1,
        1: rtx,
        2: a800_2,
        3: hosts[(2, 0)],
    }
    assert {k: v["node_ranks"] for k, v in report["node_groups"].items()} == {"4090": [1], "a800": [0, 2], "cpu": [3]}
    assert [(w["host"], w["node_rank_env"]) for w in report["workers"]["actor"]] == [
        (a800_1, "0"),
        (a800_1, "0"),
        (a800_2, "2"),
        (a800_2, "2"),
    ]
    assert [w["host"] for w in report["workers"]["env"]] == [a800_1, rtx, a800_2, hosts[(2, 0)]]
    assert report["driver_host"] == a800_1


def test_areal_launcher_attaches_and_places_per_node(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """AReaL's RayLauncher attaches through RAY_ADDRESS (its bare ray.init()) and its per-node
    placement group puts one task per planned GPU on the three GPU nodes."""
    _need("areal")
    config = launch_config(
        tmp_path, "areal", [sys.executable, str(DRIVERS / "areal_driver.py"), "--nodes", "3", "--gpus-per-node", "2"]
    )
    run_dir, plan, hosts = run_job(tmp_path, config)
    report = json.loads((run_dir / "areal-report.json").read_text())
    assert report["error"] is None, report.get("traceback")
    head = hosts[(0, 0)]
    assert report["ray_address_env"].split(":")[0] == head and len(report["ray_nodes"]) == 4
    gpu_hosts = {
        hosts[(g["het_group"], j)]: g["gpus_per_node"][j]
        for g in plan["node_groups"]
        for j in range(g["num_nodes"])
        if g["gpus_per_node"][j]
    }
    per_host: dict[str, list[str]] = {}
    for task in report["tasks"]:
        per_host.setdefault(task["host"], []).append(task["cuda_visible_devices"])
    assert {h: sorted(v) for h, v in per_host.items()} == {h: [str(i) for i in range(n)] for h, n in gpu_hosts.items()}


# ROLL is not on PyPI (the PyPI `roll` is another project): with a ROLL checkout here, the driver also
# runs ROLL's own start-up code from it; without one, only the conditions that code checks.
ROLL_SRC = os.environ.get("HPCPLACE_ROLL_SRC")


def test_roll_attach_checks_find_the_running_cluster(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """What ROLL's init() checks before starting Ray (`ray status` succeeds, ray.init(None) joins
    RAY_ADDRESS) holds on the head: no second head, every node joined, ROLL's env set; with
    HPCPLACE_ROLL_SRC, ROLL's own init() runs and attaches."""
    config = launch_config(tmp_path, "roll", [sys.executable, str(DRIVERS / "roll_attach_driver.py")])
    run_dir, plan, hosts = run_job(tmp_path, config)
    report = json.loads((run_dir / "roll-report.json").read_text())
    head = hosts[(0, 0)]
    assert report["cluster_running"] and report["ray_status_rc"] == 0
    assert report["head_nodes"] == 1 and report["alive_nodes"] == len(node_table(plan))
    assert sorted(report["node_hosts"]) == sorted(hosts.values())
    env = report["env"]
    assert (env["RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"]) == ("0", str(len(node_table(plan))), head)
    assert report["gcs_address"].endswith(f":{env['MASTER_PORT']}")  # the cluster hpcplace started
    if ROLL_SRC:  # ROLL's own init(): it found the cluster, started no head, and returned on the head
        assert (report["roll_is_ray_cluster_running"], report["roll_started_head"]) == (True, False)
        assert report["roll_init_returned"]


def test_roll_worker_wider_than_a_node_lands_as_planned(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """A vLLM tp16 worker over both 8-GPU a800 nodes, in the Ray launch mode: ROLL's placement calls
    (tests/ray/drivers/roll_resources_driver.py) find each node by the NODE_RANK hpcplace gives its raylet,
    and put the worker actor (GPUs of its first node) and each GPU's vLLM worker on the hosts the plan's
    per-node processes name, with the plan's GPUs."""
    report_path = tmp_path / "roll-resources.json"
    config = tmp_path / "roll-span.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "slurm": {"partition": "a800", "gpu_type": "a800", "gpus_per_node": 8},
                "launch": {
                    "mode": "ray",
                    "join_timeout": 180,
                    "driver": [
                        sys.executable,
                        str(DRIVERS / "roll_resources_driver.py"),
                        str(report_path),
                        "8",
                        "16",
                        *[str(g) for g in range(8, 16)],
                        *[str(g) for g in range(8)],
                    ],
                },
                "actor_infer": {
                    "device_mapping": "list(range(8,16))+list(range(0,8))",
                    "strategy_args": {"strategy_name": "vllm", "strategy_config": {"tensor_parallel_size": 16}},
                },
            },
            sort_keys=False,
        ),
        encoding="utf-8",
    )
    _, plan, hosts = run_job(tmp_path, config)
    report = json.loads(report_path.read_text())
    table = node_table(plan)

    def host(rank: int) -> str:
        return hosts[(table[rank]["het_group"], table[rank]["index"])]

    # each node's group holds all 8 of its GPUs (Ray lists them in its own order)
    assert sorted((g["node_rank"], g["host"], sorted(g["visible"].split(","))) for g in report["node_groups"]) == [
        (r, host(r), [str(i) for i in range(8)]) for r in (0, 1)
    ]
    infer = next(c for c in plan["components"] if c["name"] == "actor_infer")
    assert infer["workers"]["processes"] == [[0, 1]]
    first, second = infer["processes"]
    assert (first["cluster_node_rank"], second["cluster_node_rank"]) == (1, 0)  # the worker's first GPU is 8
    worker = report["workers"][0]
    assert worker["actor_host"] == host(first["cluster_node_rank"])
    assert worker["actor_visible"] == ",".join(first["visible_accelerators"])
    for proc in (first, second):
        for local in proc["visible_accelerators"]:
            g = str(proc["cluster_node_rank"] * 8 + int(local))
            assert (worker["gpu_hosts"][g], worker["gpu_visible"][g]) == (host(proc["cluster_node_rank"]), local)
