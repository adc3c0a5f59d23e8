"""`network:` on the real Slurm test cluster (marker `slurm`): every node has a second network (`fab0`,
its own bridge and subnet; node names resolve to the first, `eth0`). A steps-mode job and a Ray-mode job
whose node groups name it must advertise only addresses on it; a wrong interface name fails the job at
the preflight, naming the node and the interface."""

from __future__ import annotations

import ipaddress
import json
import sys
import time
from pathlib import Path

import pytest

from hpcplace.runtime.network import INTERFACE_VARIABLES
from tests.slurm.conftest import CLUSTER_DIR, LiveCluster, config_yaml, submit_cli, wait_done

pytestmark = pytest.mark.slurm

RAY_ARGS = "--object-store-memory=80000000"  # as tests/ray: a small machine running several raylets
ENV_KEYS = (
    "MASTER_ADDR",
    "MASTER_PORT",
    *INTERFACE_VARIABLES,
    "HPCPLACE_NETWORK_ADDR",
    "RANK",
    "SLURMD_NODENAME",
)
# Each rank writes its environment, then rank 0 listens on MASTER_ADDR:MASTER_PORT and the others
# connect to it from their own HPCPLACE_NETWORK_ADDR: the rendezvous a torch.distributed job makes.
RANK_PROGRAM = f"""
import json, os, socket, sys, time
env = {{k: os.environ.get(k) for k in {ENV_KEYS!r}}}
with open(os.path.join(sys.argv[1], "%s%s.json" % (sys.argv[2], env["RANK"])), "w") as f:
    json.dump(env, f)
addr, port = env["MASTER_ADDR"], int(env["MASTER_PORT"])
if env["RANK"] == "0":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((addr, port)); s.listen(8)
    s.settimeout(60)
    for _ in range(int(os.environ["WORLD_SIZE"]) - 1):
        c, peer = s.accept(); c.sendall(peer[0].encode()); c.close()
else:
    for _ in range(600):
        try:
            c = socket.create_connection((addr, port), timeout=5, source_address=(env["HPCPLACE_NETWORK_ADDR"], 0)); break
        except OSError:
            time.sleep(0.1)
    with open(os.path.join(sys.argv[1], "%s-peer%s.txt" % (sys.argv[2], env["RANK"])), "w") as f:
        f.write(c.recv(64).decode())
"""
# The Ray driver: every node's address as the GCS knows it, and what the driver itself was given.
RAY_DRIVER = """
import json, os, sys, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init()
nodes = [{"ip": n["NodeManagerAddress"], "rank": n.get("Labels", {}).get("hpcplace.node_rank")} for n in ray.nodes() if n["Alive"]]
@ray.remote(num_cpus=0)
def where():
    return {k: os.environ.get(k) for k in ("NCCL_SOCKET_IFNAME", "HPCPLACE_NETWORK_ADDR")}
tasks = [where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
         for n in ray.nodes() if n["Alive"]]
env = {k: os.environ.get(k) for k in ("RAY_ADDRESS", "MASTER_ADDR", "NCCL_SOCKET_IFNAME", "HPCPLACE_NETWORK_ADDR")}
with open(sys.argv[1], "w") as f:
    json.dump({"nodes": nodes, "env": env, "tasks": ray.get(tasks)}, f)
"""


def fabric() -> ipaddress.IPv4Network:
    """The test cluster's second network (up.sh writes `fab0 10.99.0.0/24` into $DIR/networks)."""
    for line in (CLUSTER_DIR / "networks").read_text(encoding="utf-8").splitlines():
        name, subnet = line.split()
        if name == "fab0":
            return ipaddress.IPv4Network(subnet)
    raise AssertionError("the test cluster has no fab0 network")


def on_fabric(address: str | None) -> bool:
    return address is not None and ipaddress.IPv4Address(address) in fabric()


def batch_log(run_dir: Path) -> str:
    return "".join(p.read_text() for p in sorted((run_dir / "logs").glob("batch-*.out")))


def test_steps_job_advertises_only_the_second_network(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "rank.py"
    script.write_text(RANK_PROGRAM, encoding="utf-8")
    config = config_yaml(
        tmp_path,
        f"""
name: net-steps
cluster:
  node_groups:
    - {{label: a800, partition: a800, nodes: 2, gpus_per_node: 8, gpu_type: a800, network: [ib0, fab0]}}
    - {{label: cpu, partition: cpu, nodes: 1, network: {fabric()}}}
  component_placement:
    trainer: {{node_group: a800, placement: "0-15:0-1"}}
    agent: {{node_group: cpu, placement: "0"}}
components:
  trainer: {{command: [{sys.executable}, {script}, {out}, trainer]}}
  agent: {{command: [{sys.executable}, {script}, {out}, agent]}}
""",
    )
    run_dir = tmp_path / "run"
    submit_cli(config, run_dir)
    status = wait_done(run_dir, 120)
    assert status.state == "COMPLETED", batch_log(run_dir)
    ranks = [json.loads((out / f"trainer{r}.json").read_text()) for r in range(2)]
    agent = json.loads((out / "agent0.json").read_text())
    for env in [*ranks, agent]:
        assert on_fabric(env["MASTER_ADDR"]) and on_fabric(env["HPCPLACE_NETWORK_ADDR"]), env
        for key in ENV_KEYS[2:8]:
            assert env[key] == "fab0", (key, env)
    # MASTER_ADDR: the component's rank 0's own address on fab0 (a800-1's for the trainer, cpu-1's for the agent)
    assert ranks[0]["MASTER_ADDR"] == ranks[1]["MASTER_ADDR"] == ranks[0]["HPCPLACE_NETWORK_ADDR"], ranks
    assert agent["MASTER_ADDR"] == agent["HPCPLACE_NETWORK_ADDR"], agent  # the `network: <subnet>` group
    assert len({env["HPCPLACE_NETWORK_ADDR"] for env in [*ranks, agent]}) == 3  # each node its own address
    # rank 0's listener on MASTER_ADDR saw rank 1 connect from its address on fab0
    assert (out / "trainer-peer1.txt").read_text() == ranks[1]["HPCPLACE_NETWORK_ADDR"]
    preflight = "".join(p.read_text() for p in (run_dir / "logs").glob("preflight.*.out"))
    assert preflight.count("network fab0 ") == 3 and preflight.count(" answers") == 2, preflight


def test_ray_job_binds_and_joins_on_the_second_network(
    slurm_cluster: LiveCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HPCPLACE_RAY_ARGS", RAY_ARGS)
    out = tmp_path / "ray.json"
    driver = tmp_path / "driver.py"
    driver.write_text(RAY_DRIVER, encoding="utf-8")
    config = config_yaml(
        tmp_path,
        """
name: net-ray
cluster:
  node_groups:
    - {label: a800, partition: a800, nodes: 2, gpus_per_node: 8, gpu_type: a800, network: fab0}
    - {label: cpu, partition: cpu, nodes: 1, network: fab0}
  component_placement:
    actor: {node_group: a800, placement: "0-15"}
    env: {node_group: cpu, placement: "0"}
launch: {mode: ray, join_timeout: 120}
""",
    )
    run_dir = tmp_path / "run"
    submit_cli(config, run_dir, "--driver", "--", sys.executable, str(driver), str(out))
    status = wait_done(run_dir, 150)
    assert status.state == "COMPLETED", batch_log(run_dir) + (run_dir / "logs" / "driver.out").read_text()
    report = json.loads(out.read_text())
    head = json.loads((run_dir / "ray" / "head.json").read_text())
    assert on_fabric(head["host"]) and head["interface"] == "fab0", head
    assert len(report["nodes"]) == 3 and all(on_fabric(n["ip"]) for n in report["nodes"]), report
    assert report["env"]["RAY_ADDRESS"] == f"{head['host']}:{head['port']}", report
    assert report["env"]["MASTER_ADDR"] == head["host"] and report["env"]["NCCL_SOCKET_IFNAME"] == "fab0"
    head_node = next(n for n in report["nodes"] if n["rank"] == "0")
    assert head_node["ip"] == head["host"]
    # Ray workers on every node inherit the raylet's interface variables and own address
    assert sorted(t["HPCPLACE_NETWORK_ADDR"] for t in report["tasks"]) == sorted(n["ip"] for n in report["nodes"])
    assert all(t["NCCL_SOCKET_IFNAME"] == "fab0" for t in report["tasks"])


def test_wrong_interface_fails_at_the_preflight(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    config = config_yaml(
        tmp_path,
        f"""
name: net-wrong
cluster:
  node_groups:
    - {{label: a800, partition: a800, nodes: 1, gpus_per_node: 8, gpu_type: a800, network: fab0}}
    - {{label: cpu, partition: cpu, nodes: 1, network: fab7}}
  component_placement:
    actor: {{node_group: a800, placement: "0-7"}}
    env: {{node_group: cpu, placement: "0"}}
components:
  actor: {{command: [touch, {marker}]}}
  env: {{command: [touch, {marker}]}}
""",
    )
    run_dir = tmp_path / "run"
    started = time.monotonic()
    submit_cli(config, run_dir)
    status = wait_done(run_dir, 90)
    took = time.monotonic() - started
    log = batch_log(run_dir)
    assert status.state == "FAILED", log
    assert not marker.exists(), "a program started although the preflight failed"
    preflight = (run_dir / "logs" / "preflight.txt").read_text()
    line = next(x for x in preflight.splitlines() if x.startswith("cpu-1: FAILED: network fab7"))
    assert "interface fab7 does not exist" in line and "fab0 " in line and "eth0 " in line, line
    assert "a800-1: FAILED" not in preflight, preflight  # the head's fab0 is fine
    assert took < 30, f"the failing job took {took:.1f} s"
