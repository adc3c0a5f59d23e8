"""Services in the job on the real cluster (hpcplace.config.services, runtime/services.py): a reward server on
the RTX 4090 node and a sandbox pool on the CPU node beside a trainer on both A800 nodes, in one heterogeneous
job; the trainer starts once every replica is ready and finds them by the addresses in its command; when it ends
the services are stopped with SIGTERM; a service that ends early fails the job naming it."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest

from tests.slurm.conftest import REPO, LiveCluster, cli, submit_cli, wait_done

pytestmark = pytest.mark.slurm

CONFIG = """
name: services
cluster:
  node_groups:
    - {label: a800, partition: a800, nodes: 2, gpus_per_node: 8, gpu_type: a800, cpus_per_node: 4}
    - {label: rtx4090, partition: rtx4090, nodes: 1, gpus_per_node: 4, gpu_type: rtx4090, cpus_per_node: 4}
    - {label: cpu, partition: cpu, nodes: 1, cpus_per_node: 4}
  component_placement:
    trainer: {node_group: a800, placement: "0,8"}
components:
  trainer: {command: [PY, REPO/examples/services/client.py, --reward-url, "{rm.0.url}", --sandboxes, "{sandbox.addr}"]}
services:
  rm:
    node_group: rtx4090
    gpus: 2
    command: [PY, REPO/examples/services/standin_server.py, --port, "{port}", --warmup, "2"]
    ready: {http: /health}
    timeout: 60
  sandbox:
    node_group: cpu
    replicas: 2
    command: [PY, REPO/examples/services/standin_server.py, --kind, tcp, --port, "{port}"]
slurm: {time: "00:10:00"}
"""


def run_logs(run_dir: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted((run_dir / "logs").rglob("*")) if p.is_file())


def config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "services.yaml"
    path.write_text(text.replace("PY", sys.executable).replace("REPO", str(REPO)))
    return path


def test_services_beside_a_trainer_in_one_het_job(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    submit_cli(config(tmp_path, CONFIG), run_dir, env=slurm_cluster.env, cwd=tmp_path)
    status = wait_done(run_dir)
    logs = run_logs(run_dir)
    assert status.state == "COMPLETED", status.text + "\n" + logs[-4000:]
    addresses = {
        f"{p.parent.name}.{p.stem}": json.loads(p.read_text()) for p in sorted((run_dir / "services").glob("*/*.json"))
    }
    assert {k: v["host"] for k, v in addresses.items()} == {
        "rm.0": "rtx4090-1",
        "sandbox.0": "cpu-1",
        "sandbox.1": "cpu-1",
    }
    rm = addresses["rm.0"]
    for rank in (0, 1):
        assert f"client {rank}: rewards [1.0, 2.0, 3.0] from http://rtx4090-1:{rm['port']}" in logs, logs[-4000:]
        for name in ("sandbox.0", "sandbox.1"):
            where = f"cpu-1:{addresses[name]['port']}"
            assert f"client {rank}: sandbox {where} answered 'echo rank {rank}'" in logs
    assert "standin_server: http on rtx4090-1:" in logs and "with GPUs 0,1" in logs  # the planned 2 GPUs
    assert "the job's work is done: stopping its service(s)" in logs
    assert logs.count("standin_server: SIGTERM: stopping") == 3, logs[-4000:]  # graceful, every replica
    assert sorted(p.name for p in (run_dir / "services").glob("*/*.ready")) == ["0.ready", "0.ready", "1.ready"]
    # a service is a component like any other for `logs` and `status`
    shown = cli("logs", run_dir, "--component", "sandbox", env=slurm_cluster.env)
    assert shown.returncode == 0 and shown.stdout.count("standin_server: tcp on cpu-1:") == 2, (
        shown.stdout + shown.stderr
    )
    assert "rewards" not in shown.stdout
    assert len(status.components) == 3, status.text  # a800, rtx4090, cpu: one het component each


def test_a_service_that_dies_fails_the_job_naming_it(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    text = CONFIG.replace(
        'command: [PY, REPO/examples/services/standin_server.py, --port, "{port}", --warmup, "2"]',
        'command: [PY, -c, "import sys; print(\'loading failed\', file=sys.stderr); sys.exit(3)", "{port}"]',
    )
    run_dir = tmp_path / "run"
    submit_cli(config(tmp_path, text), run_dir, env=slurm_cluster.env, cwd=tmp_path)
    status = wait_done(run_dir)
    logs = run_logs(run_dir)
    assert status.state == "FAILED", status.text
    assert "FAILED: component 'rm'" in logs and "exited with code 3" in logs, logs[-4000:]
    assert "service 'rm' ended while the job still needed it" in logs
    assert "loading failed" in logs
    assert "client 0: rewards" not in logs  # the trainer never got past its wait


RAY_CONFIG = """
name: services-ray
cluster:
  node_groups:
    - {label: a800, partition: a800, nodes: 1, gpus_per_node: 8, gpu_type: a800}
    - {label: rtx, partition: rtx4090, nodes: 1, gpus_per_node: 4, gpu_type: rtx4090}
  component_placement:
    actor: {node_group: a800, placement: "0-7"}
    rollout: {node_group: rtx, placement: "0-1"}
services:
  judge:
    node_group: rtx
    placement: "2-3:0"
    command: [PY, REPO/examples/services/standin_server.py, --port, "{port}", --warmup, "2"]
    ready: {http: /health}
    timeout: 90
launch:
  mode: ray
  driver: [PY, DRIVER, "{judge.0.url}", OUT]
  join_timeout: 120
slurm: {time: "00:10:00"}
"""

# The driver: what Ray offers on each node (the judge's GPUs must not be among them), and one request to the
# judge by the address hpcplace filled in.
RAY_DRIVER = """\
import json, os, sys, urllib.request
import ray

ray.init(address=os.environ["RAY_ADDRESS"])
nodes = {n["NodeManagerHostname"]: n["Resources"] for n in ray.nodes() if n["Alive"]}
request = urllib.request.Request(sys.argv[1] + "/get_reward", data=json.dumps({"query": ["xy"]}).encode())
with urllib.request.urlopen(request, timeout=30) as answer:
    rewards = json.loads(answer.read())["rewards"]
with open(sys.argv[2], "w") as out:
    json.dump({"url": sys.argv[1], "rewards": rewards, "nodes": nodes,
               "addrs": os.environ.get("HPCPLACE_SERVICE_JUDGE_ADDRS")}, out)
"""


def test_a_judge_beside_a_ray_driver(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    driver = tmp_path / "driver.py"
    driver.write_text(RAY_DRIVER)
    out = tmp_path / "seen.json"
    text = RAY_CONFIG.replace("DRIVER", str(driver)).replace("OUT", str(out))
    run_dir = tmp_path / "run"
    env = {**slurm_cluster.env, "HPCPLACE_RAY_ARGS": "--object-store-memory=80000000"}  # 2 cores, 24 GiB here
    submit_cli(config(tmp_path, text), run_dir, env=env, cwd=tmp_path)
    status = wait_done(run_dir)
    logs = run_logs(run_dir)
    assert status.state == "COMPLETED", status.text + "\n" + logs[-4000:]
    seen = json.loads(out.read_text())
    judge = json.loads((run_dir / "services" / "judge" / "0.json").read_text())
    assert seen["url"] == f"http://rtx4090-1:{judge['port']}" and seen["rewards"] == [2.0]
    assert seen["addrs"] == f"rtx4090-1:{judge['port']}"
    assert seen["nodes"]["rtx4090-1"].get("GPU") == 2.0, seen["nodes"]  # GPUs 2-3 are the judge's
    assert seen["nodes"]["a800-1"].get("GPU") == 8.0, seen["nodes"]
    # The judge's GPUs 2-3 as Slurm numbered them for its mask_gpu:0xc step: physical ids under ConstrainDevices=no;
    # under =yes, 26.05 numbers them from 0, while 22.05 does not bind a one-task step (it sees and may open all 4
    # GPUs, physical ids) and the shim narrows them to 2,3.
    served = re.search(r"standin_server: http on rtx4090-1:\d+ with GPUs (\S+)", logs)
    assert served, logs[-4000:]
    assert served[1] in (("2,3",) if slurm_cluster.mode == "no" else ("2,3", "0,1")), served[0]
    assert "service(s) judge ready; running the driver" in logs
    assert logs.count("standin_server: SIGTERM: stopping") == 1 and "service 'judge' stopped" in logs
    shown = cli("logs", run_dir, "--component", "judge", env=slurm_cluster.env)  # a service's logs in the Ray mode
    assert shown.returncode == 0 and "service judge replica 0" in shown.stdout, shown.stdout + shown.stderr
    assert "standin_server: http on rtx4090-1:" in shown.stdout and "Ray node rank" not in shown.stdout


EXEC_CONFIG = """
name: services-exec
cluster:
  node_groups:
    - {label: cpu, partition: cpu, nodes: 1, cpus_per_node: 2}
    - {label: rtx4090, partition: rtx4090, nodes: 1, gpus_per_node: 4, gpu_type: rtx4090, cpus_per_node: 2}
  component_placement:
    trainer: {node_group: cpu, placement: "0"}
components:
  trainer: {command: [PY, -c, "WAIT", RELEASE]}
services:
  rm:
    node_group: rtx4090
    gpus: 1
    command: [PY, REPO/examples/services/standin_server.py, --port, "{port}"]
    ready: {http: /health}
    timeout: 60
slurm: {time: "00:10:00"}
"""
# the trainer holds the job until the test releases it (at most 3 minutes)
WAIT = "import os, sys, time; [time.sleep(0.2) for _ in range(900) if not os.path.exists(sys.argv[1])]"
# run inside the service's replica by `hpcplace exec`: where it is, what it was given, and its own server's answer
PROBE = (
    "import json, os, socket, urllib.request; port = os.environ['HPCPLACE_SERVICE_PORT']; "
    "answer = urllib.request.urlopen(f'http://localhost:{port}/health', timeout=10).status; "
    "print(json.dumps({'host': socket.gethostname(), 'port': port, 'name': os.environ['HPCPLACE_SERVICE_NAME'], "
    "'cuda': os.environ.get('CUDA_VISIBLE_DEVICES'), 'health': answer}))"
)


def test_exec_reaches_a_running_service_replica(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """`hpcplace exec RUN --component rm --rank 0 -- CMD` runs CMD on the replica's node with the replica's own
    environment (its port, name and GPU), where it reaches the server by localhost; the job then ends as usual."""
    release = tmp_path / "release"
    text = EXEC_CONFIG.replace('"WAIT"', json.dumps(WAIT)).replace("RELEASE", str(release))
    run_dir = tmp_path / "run"
    submit_cli(config(tmp_path, text), run_dir, env=slurm_cluster.env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "services" / "rm" / "0.ready").exists():
            assert time.monotonic() < deadline, run_logs(run_dir)[-3000:]
            time.sleep(0.5)
        res = cli(
            "exec", run_dir, "--component", "rm", "--rank", "0", "--", sys.executable, "-c", PROBE,
            env=slurm_cluster.env, cwd=tmp_path,
        )  # fmt: skip
        assert res.returncode == 0, res.stdout + res.stderr
        seen = json.loads(res.stdout.strip().splitlines()[-1])
        rm = json.loads((run_dir / "services" / "rm" / "0.json").read_text())
        assert seen == {"host": "rtx4090-1", "port": str(rm["port"]), "name": "rm", "cuda": "0", "health": 200}
        status = cli("status", run_dir, env=slurm_cluster.env)
        assert status.returncode == 0 and "rm" in status.stdout, status.stdout + status.stderr
    finally:
        release.touch()
    status = wait_done(run_dir)
    assert status.state == "COMPLETED", status.text + run_logs(run_dir)[-3000:]
    assert "service 'rm' stopped" in run_logs(run_dir)
    shown = cli("logs", run_dir, "--component", "rm", "--rank", "0", env=slurm_cluster.env)
    assert shown.returncode == 0 and "standin_server: http on rtx4090-1:" in shown.stdout, shown.stdout


@pytest.mark.one_release
def test_every_link_of_a_chain_starts_its_services_again(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """A 2-link chain (tests/slurm/chain_counter.py: 5 steps a link, 10 in all) with a reward server: each link is a
    new job that starts the service again, waits for it, hands the trainer its address, and stops it when the
    link ends (at its time-limit warning, or when the training finished)."""
    from tests.slurm.test_chain_cluster import COUNTER, links_seen, submit_chain, wait_chain

    text = f"""
name: chain-services
cluster:
  node_groups:
    - {{label: cpu, partition: cpu, nodes: 1}}
    - {{label: rtx4090, partition: rtx4090, nodes: 1, gpus_per_node: 4, gpu_type: rtx4090}}
  component_placement:
    trainer: {{node_group: cpu, placement: "0:0"}}
components:
  trainer: {{command: [PY, {COUNTER}, "10", "5"], env: {{RM_URL: "{{rm.0.url}}"}}}}
services:
  rm:
    node_group: rtx4090
    gpus: 1
    command: [PY, REPO/examples/services/standin_server.py, --port, "{{port}}"]
    ready: {{http: /health}}
    timeout: 60
launch: {{chain: 2, resume: ["--resumed"]}}
slurm: {{time: "1", signal_before_limit: 30}}
"""
    run_dir = tmp_path / "run"
    ids = submit_chain(config(tmp_path, text), run_dir)
    code, out = wait_chain(run_dir, timeout=300)
    assert code == 0, out + run_logs(run_dir)[-3000:]
    assert [(s["link"], s["start_count"], s["job"]) for s in links_seen(run_dir)] == [
        ("0", 0, ids[0]),
        ("1", 5, ids[1]),
    ]
    for folder in (run_dir / "logs" / "link-0", run_dir / "logs"):  # link 0's step logs, then link 1's
        served = (folder / "rm.rank0.out").read_text(errors="replace")
        assert "standin_server: http on rtx4090-1:" in served and "SIGTERM: stopping" in served, served
    first, last = ((run_dir / "logs" / f"batch-{job}.out").read_text(errors="replace") for job in ids)
    # link 0: the time-limit warning goes to every step, the service's too; that end fails nothing
    assert "service 'rm' (1 task) ended with the time-limit warning" in first and "FAILED" not in first, first
    assert "service 'rm' stopped" in last and "FAILED" not in last, last  # link 1: stopped once training is done
