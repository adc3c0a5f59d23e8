"""OpenRLHF's own train_ppo_ray placement under hpcplace's Ray launch mode on the real Slurm test cluster
(marker `slurm`), across two partitions: `hpcplace submit` of an OpenRLHF command (the planned command, run
through tests/ray/drivers/openrlhf_driver.py, which runs OpenRLHF's module with probes where models would load)
with the actor (a placement group) and the reference model (1-GPU actors, no group) on the a800 partition's two
2-GPU nodes, the vLLM engine (a TP 2 group, made first) and the reward model (1-GPU actors) on the rtx4090 node.
Unsteered, Ray picks the node of each: the engine's group and the actor's fit on either partition. With
hpcplace's steering every rank's host and GPUs must equal plan.json, on every start (conftest.py: the repeated
proof), and the run-time check beside the driver (runtime/openrlhf_watch.py) must find nothing."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import yaml

from tests.ray.test_frameworks_slurm import DRIVERS, FAKE_GPU, run_job
from tests.ray.test_openrlhf_local import observed
from tests.ray.test_ray_slurm import _small_ray, assert_clean  # noqa: F401 - fixture
from tests.slurm.conftest import LiveCluster

pytestmark = [pytest.mark.slurm, pytest.mark.framework_driver]

ARGV = [
    "--actor.num_nodes", "1", "--actor.num_gpus_per_node", "2", "--ref.num_nodes", "1",
    "--ref.num_gpus_per_node", "1", "--algo.kl.init_coef", "0.01", "--vllm.num_engines", "1",
    "--vllm.tensor_parallel_size", "2", "--reward.num_nodes", "1", "--reward.num_gpus_per_node", "1",
    "--reward.model_name_or_path", "r", "--algo.advantage.estimator", "reinforce", "--actor.model_name_or_path", "m",
]  # fmt: skip


def openrlhf_job(tmp_path: Path, argv: list[str], pools: dict[str, str], **blocks: object) -> tuple[Path, Path]:
    """A config of OpenRLHF's `argv` run through the probe driver (report at the returned path): the actor's
    two 2-GPU a800 nodes, the rtx4090 node as node group `gen` (`pools` puts roles there), `blocks` beside."""
    report_path = tmp_path / "openrlhf-report.json"
    driver = [sys.executable, str(DRIVERS / "openrlhf_driver.py"), "--report", str(report_path), "--"]
    node = {"cpus_per_node": 4, "mem_per_node": 4000}
    config = {
        "format": "openrlhf",
        "slurm": {
            "partition": "a800",
            "gpus_per_node": 2,
            "gpu_type": "a800",
            **node,
            "node_groups": {"gen": {"partition": "rtx4090", "gpu_type": "rtx4090", "gpus_per_node": 4, **node}},
            "pools": pools,
        },
        **blocks,
        "launch": {
            "driver": [*driver, "python3", "-m", "openrlhf.cli.train_ppo_ray", *argv],
            "env": {"PYTHONPATH": str(FAKE_GPU), "OPENRLHF_PROBE_PARENT": str(tmp_path)},
            "join_timeout": 180,
        },
    }
    path = tmp_path / "openrlhf.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path, report_path


def test_openrlhf_roles_across_two_partitions_land_as_planned(
    steer_cluster: LiveCluster, start: int, tmp_path: Path
) -> None:
    if importlib.util.find_spec("openrlhf") is None:
        pytest.skip("openrlhf is not installed (tests/requirements-frameworks.txt, --no-deps)")
    path, report_path = openrlhf_job(tmp_path, ARGV, {"vllm": "gen", "reward": "gen"})
    run_dir, plan, hosts = run_job(tmp_path, path)
    report = json.loads(report_path.read_text())
    assert report["error"] is None, report.get("traceback") or report["error"]
    assert [(g["label"], g["partition"], g["num_nodes"]) for g in plan["node_groups"]] == [
        ("default", "a800", 2),
        ("gen", "rtx4090", 1),
    ]
    host_of_node = [n["host"] for n in report["nodes"]]
    got = {key: sorted((host_of_node[n], g) for n, g in gpus) for key, gpus in observed(report).items()}
    want = {
        (c["name"], rank): sorted(
            (hosts[(p["het_group"], p["group_node_index"])], int(g)) for g in p["visible_accelerators"]
        )
        for c in plan["components"]
        for rank, p in enumerate(c["processes"])
    }
    if "vllm" in {c["name"] for c in plan["components"]}:  # an engine spanning nodes: one process per node part
        engine = sorted(x for (name, _), v in want.items() if name == "vllm" for x in v)
        want = {k: v for k, v in want.items() if k[0] != "vllm"} | {("vllm", 0): engine}
    assert got == want, (got, want)
    log = (run_dir / "ray" / "steer" / "steer.log").read_text()
    for line in ("OpenRLHF vllm: placement group unnamed #0", "OpenRLHF actor: placement group unnamed #1"):
        assert line in log, log
    assert "OpenRLHF ref: actor ReferenceModelActor rank 0 on node rank" in log, log
    assert "OpenRLHF reward: actor RewardModelActor rank 0 on node rank 2" in log, log
    errors = run_dir / "logs" / "ray-errors.txt"
    assert not errors.exists() or "OpenRLHF placement" not in errors.read_text()


def test_openrlhf_reads_rewards_from_a_serve_rm_service_of_the_same_job(
    slurm_cluster: LiveCluster, tmp_path: Path
) -> None:
    """configs/openrlhf-serve-rm-service.yaml's shape, small: OpenRLHF's own train_ppo_ray (through the probe
    driver) on the a800 group, its vLLM engine on the rtx4090 group, and a reward server as a service of the same
    job beside the engine (examples/services/standin_server.py answers /get_reward as serve_rm does).
    `--reward.remote_url {rm.0.url}/get_reward` reaches OpenRLHF as the service's address, so it starts no
    reward model; the driver starts once the server answers; the engine asks it for a reward with OpenRLHF's own
    HTTP client; the service is stopped when the driver ends."""
    if importlib.util.find_spec("openrlhf") is None:
        pytest.skip("openrlhf is not installed (tests/requirements-frameworks.txt, --no-deps)")
    argv = ARGV[: ARGV.index("--reward.num_nodes")] + ARGV[ARGV.index("--reward.model_name_or_path") + 2 :]
    server = Path(__file__).parents[2] / "examples" / "services" / "standin_server.py"
    service = {
        "node_group": "gen",
        "gpus": 1,
        "command": [sys.executable, str(server), "--port", "{port}", "--warmup", "2"],
        "ready": {"http": "/health"},
        "timeout": 120,
    }
    argv += ["--reward.remote_url", "{rm.0.url}/get_reward"]
    path, report_path = openrlhf_job(tmp_path, argv, {"vllm": "gen"}, services={"rm": service})
    run_dir, plan, _hosts = run_job(tmp_path, path)
    report = json.loads(report_path.read_text())
    assert report["error"] is None, report.get("traceback") or report["error"]
    rm = json.loads((run_dir / "services" / "rm" / "0.json").read_text())
    url = f"http://{rm['host']}:{rm['port']}/get_reward"
    assert report["argv"][-2:] == ["--reward.remote_url", url]  # the address, filled in before OpenRLHF parsed it
    assert rm["host"] == "rtx4090-1"
    components = {c["name"] for c in plan["components"]}
    assert "reward" not in components and "rm" in components  # a remote reward model: no RewardModelActor
    engines = [r for r in report["records"] if "engine" in r]
    assert engines and all(
        e.get("remote_rm") == {"endpoints": [url], "answers": [{"rewards": [5.0], "service": "rm", "replica": "0"}]}
        for e in engines
    ), engines  # OpenRLHF's client got the reward for "query" (5 characters) from the service
    logs = "".join(p.read_text(errors="replace") for p in sorted((run_dir / "logs").rglob("*")) if p.is_file())
    assert "service(s) rm ready; running the driver" in logs and "service 'rm' stopped" in logs, logs[-3000:]
