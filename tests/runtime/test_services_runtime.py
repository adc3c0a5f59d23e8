"""Services at run time (runtime/services.py): ports, addresses, readiness against real servers on this host,
and the real shim starting a replica (its address published, its prober forked) and a task that waits for it
and gets its address in its command."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from hpcplace.runtime import services
from tests.runtime.conftest import REPO, localhost_task, shim_command, write_plan


def test_references_are_replaced_by_every_or_one_replica() -> None:
    addresses = {"rm": [("a800-1", 20001), ("a800-2", 20002)]}
    text = "--url {rm.0.url} --all {rm.addr} --h {rm.1.host} --p {rm.1.port} ${oc.env:X} {other.addr} {rm.0.ip}"
    assert services.substitute(text, addresses) == (
        "--url http://a800-1:20001 --all a800-1:20001,a800-2:20002 --h a800-2 --p 20002 ${oc.env:X} {other.addr} "
        "{rm.0.ip}"
    )
    assert services.service_environment({"reward-model": [("h", 1), ("g", 2)]}) == {
        "HPCPLACE_SERVICE_REWARD_MODEL_ADDRS": "h:1,g:2",
        "HPCPLACE_SERVICE_REWARD_MODEL_0_ADDR": "h:1",
        "HPCPLACE_SERVICE_REWARD_MODEL_1_ADDR": "g:2",
    }


def test_an_automatic_port_skips_one_in_use_and_a_fixed_port_is_kept() -> None:
    first = services.derived_port("777", 1, 0)
    assert services.choose_port(None, "777", 1, 0, lambda p: True) == first
    taken = {first}
    chosen = services.choose_port(None, "777", 1, 0, lambda p: p not in taken)
    assert chosen != first and services.PORT_BASE <= chosen < services.PORT_BASE + services.PORT_SPAN
    assert services.choose_port(5000, "777", 1, 0, lambda p: False) == 5000
    assert services.derived_port("777", 1, 0) != services.derived_port("777", 1, 1)  # replicas start apart
    with pytest.raises(OSError, match="no free port"):
        services.choose_port(None, "777", 1, 0, lambda p: False)


@pytest.fixture
def http_server() -> Iterator[tuple[int, threading.Event]]:
    """A real HTTP server on this host: /health answers 503 until `ready` is set, then 200."""
    ready = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            code = (200 if ready.is_set() else 503) if self.path == "/health" else 404
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server.server_address[1], ready
    server.shutdown()
    server.server_close()


def test_probes_answer_what_they_saw(http_server, tmp_path: Path) -> None:
    port, ready = http_server
    assert "answered 'HTTP/1.0 503" in (services.probe("http", "/health", "127.0.0.1", port, str(tmp_path)) or "")
    assert "404" in (services.probe("http", "/other", "127.0.0.1", port, str(tmp_path)) or "")
    ready.set()
    assert services.probe("http", "/health", "127.0.0.1", port, str(tmp_path)) is None
    assert services.probe("tcp", None, "127.0.0.1", port, str(tmp_path)) is None
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        closed = free.getsockname()[1]
    assert "127.0.0.1:" in (services.probe("tcp", None, "127.0.0.1", closed, str(tmp_path)) or "")
    assert "no file" in (services.probe("file", "up", "h", 1, str(tmp_path)) or "")
    (tmp_path / "up").write_text("")
    assert services.probe("file", "up", "h", 1, str(tmp_path)) is None


def test_a_prober_writes_ready_or_why_not(http_server, tmp_path: Path) -> None:
    port, ready = http_server
    record = {"ready": {"kind": "http", "path": "/health"}, "timeout": 30}
    threading.Timer(0.3, ready.set).start()
    assert services.probe_until(str(tmp_path), "rm", 0, record, "127.0.0.1", port)
    assert Path(services.ready_file(str(tmp_path), "rm", 0)).is_file()
    ready.clear()
    ticks = iter(range(1000))
    assert not services.probe_until(
        str(tmp_path),
        "rm",
        1,
        {**record, "timeout": 5},
        "127.0.0.1",
        port,
        clock=lambda: next(ticks),
        sleep=lambda s: None,
    )
    why = Path(services.failed_file(str(tmp_path), "rm", 1)).read_text()
    assert why.startswith("service 'rm' replica 1 on 127.0.0.1 was not ready within its timeout of 5 s")
    assert "waited for GET /health to return 2xx; last: GET /health on 127.0.0.1:" in why and "503" in why
    assert not services.probe_until(str(tmp_path), "rm", 2, record, "127.0.0.1", port, alive=lambda: False)
    assert "ended before it was ready" in Path(services.failed_file(str(tmp_path), "rm", 2)).read_text()


def test_a_waiter_reads_ready_failed_or_never_started(tmp_path: Path) -> None:
    run = str(tmp_path)
    waits = {"rm": (2, 10.0)}
    assert services.services_state(run, waits, 0.0) == (False, None)
    Path(services.ready_file(run, "rm", 0)).parent.mkdir(parents=True)
    Path(services.ready_file(run, "rm", 0)).write_text("0.1\n")
    assert services.services_state(run, waits, 0.0) == (False, None)
    late = services.services_state(run, waits, 10.0 + services.START_MARGIN_S + 1)
    assert late == (
        False,
        f"service 'rm' replica 1 was not ready within {10 + services.START_MARGIN_S:g} s: it never started (no address published)",
    )
    Path(services.failed_file(run, "rm", 1)).write_text("service 'rm' replica 1 on h ended before it was ready\n")
    assert services.wait_services(run, waits) == "service 'rm' replica 1 on h ended before it was ready"
    Path(services.failed_file(run, "rm", 1)).unlink()
    Path(services.ready_file(run, "rm", 1)).write_text("0.2\n")
    assert services.wait_services(run, waits) is None


CONFIG = f"""
name: svc
cluster:
  node_groups:
    - {{label: a800, partition: a800, nodes: 2, gpus_per_node: 8, gpu_type: a800}}
    - {{label: rtx4090, partition: rtx4090, nodes: 1, gpus_per_node: 4, gpu_type: rtx4090}}
    - {{label: cpu, partition: cpu, nodes: 1}}
  component_placement:
    inference: {{node_group: rtx4090, placement: "0"}}
components:
  inference:
    command: [{sys.executable}, -c, "import sys, os; print(sys.argv[1:], os.environ['HPCPLACE_SERVICE_POOL_ADDRS'], os.environ['POOL_0'])", "{{pool.1.addr}}", "{{pool.url}}"]
    env: {{POOL_0: "{{pool.0.addr}}"}}
services:
  pool:
    node_group: cpu
    replicas: 2
    command: [{sys.executable}, {REPO}/examples/services/standin_server.py, --kind, tcp, --port, "{{port}}"]
    timeout: 60
"""


JOB = f"9{os.getpid()}"  # the shims' job: its /dev/shm directory is removed after each test (shm_cleanup)


@pytest.fixture(autouse=True)
def shm_cleanup() -> Iterator[None]:
    yield
    shutil.rmtree(f"/dev/shm/hpcplace-{JOB}", ignore_errors=True)


def lab_task(procid: int, ntasks: int, step: str) -> dict[str, str]:
    return localhost_task(procid, ntasks, step, JOB)


def test_the_shim_starts_replicas_and_a_task_waits_for_them(tmp_path: Path) -> None:
    plan = write_plan(tmp_path, CONFIG)
    user = subprocess.Popen(
        shim_command("--plan", str(plan), "--component", "inference"),
        env=lab_task(0, 1, "7"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.5)
    assert user.poll() is None  # waiting: no replica has started yet
    replicas = [
        subprocess.Popen(
            shim_command("--plan", str(plan), "--component", "pool"),
            env={**lab_task(i, 2, "8"), "SLURM_JOB_NODELIST_HET_GROUP_2": "localhost"},
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in (0, 1)
    ]
    try:
        out, err = user.communicate(timeout=60)
        assert user.returncode == 0, err
        records = [json.loads((tmp_path / "services" / "pool" / f"{i}.json").read_text()) for i in (0, 1)]
        assert [r["host"] for r in records] == ["localhost", "localhost"] and all(r["step"] == "8" for r in records)
        ports = [r["port"] for r in records]
        assert ports[0] != ports[1]
        assert f"['localhost:{ports[1]}', 'http://localhost:{ports[0]},http://localhost:{ports[1]}']" in out
        assert f"localhost:{ports[0]},localhost:{ports[1]} localhost:{ports[0]}" in out  # ..._ADDRS, the env's
        assert "waiting for service(s) pool to be ready" in err
        assert all((tmp_path / "services" / "pool" / f"{i}.ready").is_file() for i in (0, 1))
    finally:
        for r in replicas:
            r.terminate()
        for r in replicas:
            r.communicate(timeout=30)
    assert all(r.returncode == 0 for r in replicas)  # the stand-in's graceful SIGTERM


def test_a_task_fails_naming_the_replica_that_never_became_ready(tmp_path: Path) -> None:
    config = CONFIG.replace("--kind, tcp", "--kind, http").replace(
        "timeout: 60", "timeout: 1\n    ready: {http: /nope}"
    )
    plan = write_plan(tmp_path, config)
    replicas = [
        subprocess.Popen(
            shim_command("--plan", str(plan), "--component", "pool"),
            env=lab_task(i, 2, "8"),
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in (0, 1)
    ]
    try:
        done = subprocess.run(
            shim_command("--plan", str(plan), "--component", "inference"),
            env=lab_task(0, 1, "7"),
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        for r in replicas:
            r.terminate()
        for r in replicas:
            r.communicate(timeout=30)
    assert done.returncode != 0
    assert (
        "was not ready within its timeout of 1 s (waited for GET /nope to return 2xx; last: GET /nope on localhost:"
        in done.stderr
    )
    assert "service 'pool' replica " in done.stderr and "404" in done.stderr


def test_a_raylet_leaves_the_services_gpus_and_cpus_out(tmp_path: Path) -> None:
    """Ray mode: a node that hosts a service advertises only what the service does not hold, as the raylet
    computes it from plan.json (ray_node.service_share) and as the script's summary says (ray_cluster)."""
    from hpcplace.plan.planner import plan_from_file
    from hpcplace.ray.ray_cluster import ray_nodes
    from hpcplace.runtime.plan_index import PlanIndex
    from hpcplace.runtime.ray_node import group_cpus_needed, node_facts, service_share

    config = tmp_path / "ray.yaml"
    config.write_text(
        """
name: svc
cluster:
  node_groups:
    - {label: a800, partition: a800, nodes: 1, gpus_per_node: 8, cpus_per_node: 16}
    - {label: rtx4090, partition: rtx4090, nodes: 1, gpus_per_node: 4, cpus_per_node: 8}
  component_placement:
    actor: {node_group: a800, placement: "0-7"}
    rollout: {node_group: rtx4090, placement: "0-1"}
launch: {mode: ray, driver: [python3, main.py, --judge, "{judge.0.url}"]}
services:
  judge: {node_group: rtx4090, placement: "2-3:0", command: [python3, judge.py, "{port}"], cpus_per_replica: 3}
"""
    )
    plan = plan_from_file(config)
    planned = {n.rank: n for n in ray_nodes(plan)}
    assert planned[1].gpus == ("0", "1") and planned[1].num_cpus == 5 and planned[0].gpus == tuple("01234567")
    plan_path = write_plan(tmp_path, config.read_text(), name="again.yaml")
    with PlanIndex(plan_path) as index:
        header = index.plan
        held = service_share(index, 1, 0)
        node = node_facts(header, 1, 0, group_cpus_needed(index, 1), held)
        head = node_facts(header, 0, 0, group_cpus_needed(index, 0), service_share(index, 0, 0))
    assert held == (frozenset({"2", "3"}), 3)
    assert (node["gpus"], node["num_cpus"]) == (planned[1].gpus, planned[1].num_cpus)
    assert (head["gpus"], head["num_cpus"]) == (planned[0].gpus, planned[0].num_cpus)


def test_a_command_run_into_a_replica_gets_the_port_it_published(tmp_path: Path) -> None:
    """`hpcplace exec RUN --component rm --rank 0`: the running replica holds its port (a fresh choice would
    skip it as taken), so the command gets the published one; a replica's own start chooses."""
    components = [
        {"name": "rm", "world_size": 1, "service": {"port": None, "ready": {"kind": "tcp"}, "timeout": 5, "after": []}}
    ]
    run = str(tmp_path)
    services.publish(run, "rm", 0, "cpu-1", 23456)
    common = {"run_dir": run, "job_id": "42", "is_free": lambda port: True}
    _, fresh, _ = services.task_services(components, components[0], 0, ["x", "{port}"], {}, **common)
    command, attached, _ = services.task_services(
        components, components[0], 0, ["x", "{port}"], {}, attached=True, **common
    )
    assert fresh["HPCPLACE_SERVICE_PORT"] == str(services.derived_port("42", 0, 0))
    assert attached["HPCPLACE_SERVICE_PORT"] == "23456" and command == ("x", "23456")
