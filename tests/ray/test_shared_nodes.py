"""Jobs that share nodes (`exclusive: false`): every Ray port in a per-job block below the node's
ephemeral range, Ray's socket paths short whatever the run directory, the driver's RAY_ADDRESS its own
cluster's, MASTER_PORT below the ephemeral range; and what `hpcplace status` shows of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpcplace.runtime import master_port as mp
from hpcplace.runtime.errors import ShimError
from hpcplace.runtime.ranks import PORT_BASE, PORT_SPAN, PORT_STRIDE, master_port
from hpcplace.runtime.ray_driver import driver_env
from hpcplace.runtime.ray_node import (
    AF_UNIX_MAX,
    RAY_BLOCK,
    RAY_FIXED,
    SOCKET_TAIL,
    block_ports,
    choose_ports,
    port_blocks,
    ray_start_argv,
    ray_temp_dir,
    raylet_env,
)
from hpcplace.slurm.run_report import ray_node_lines, read_ray_nodes

NODE = {"label": "a800", "partition": "p", "gpu_type": None, "rank": 0, "num_cpus": 2, "gpus": (), "env": {}}


def _all_ports(ports: dict[str, int]) -> set[int]:
    fixed = {p for k, p in ports.items() if k in RAY_FIXED}
    return fixed | set(range(ports["min_worker"], ports["max_worker"] + 1))


def test_blocks_lie_below_the_ephemeral_range_and_differ_per_job() -> None:
    for below in (32768, 30000, 15000, 5000):
        blocks = port_blocks("4242", below)
        assert blocks and all(b + RAY_BLOCK <= below for b in blocks), below
        assert len(set(blocks)) == len(blocks)
    assert port_blocks("100")[0] != port_blocks("101")[0]
    assert port_blocks("100")[0] + RAY_BLOCK == port_blocks("101")[0]  # neighbours, never overlapping
    assert port_blocks("7", 1100) == []  # no room at all


def test_every_port_of_two_jobs_on_one_node_is_distinct() -> None:
    a = choose_ports("500", 32768, lambda p: True, head=True, client=True)
    b = choose_ports("501", 32768, lambda p: True, head=True, client=True)
    assert set(a) == set(RAY_FIXED) | {"min_worker", "max_worker"}
    assert not _all_ports(a) & _all_ports(b)
    assert max(_all_ports(a) | _all_ports(b)) < 32768
    worker = block_ports(a["gcs"], head=False, client=True)
    assert not {"gcs", "dashboard", "client_server"} & set(worker)  # the head's alone


def test_a_block_with_a_fixed_port_in_use_is_skipped() -> None:
    first = port_blocks("900")[0]
    taken = {first + RAY_FIXED["node_manager"]}  # another job's raylet holds it
    ports = choose_ports("900", 32768, lambda p: p not in taken, head=False, client=False)
    assert ports["node_manager"] == first + RAY_BLOCK + RAY_FIXED["node_manager"]
    busy_worker = {first + 100}  # a worker port in use: Ray's raylet skips it, the block stays
    assert choose_ports("900", 32768, lambda p: p not in busy_worker, head=True, client=False)["gcs"] == (first)
    with pytest.raises(ShimError, match="has a port in use"):
        choose_ports("900", 32768, lambda p: False, head=True, client=False)
    with pytest.raises(ShimError, match="ephemeral port range") as err:
        choose_ports("900", 1100, lambda p: True, head=True, client=False)
    assert "ip_local_port_range" in (err.value.hint or "")


def test_ray_start_pins_every_port() -> None:
    ports = block_ports(20480, head=True, client=True)
    argv = ray_start_argv(
        "/py",
        NODE,
        head=True,
        port=ports["gcs"],
        address=None,
        temp_dir="/t",
        spill_dir="/s",
        dashboard_port=ports["dashboard"],
        ports=ports,
    )
    flags = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    for flag in (
        "port",
        "node-manager-port",
        "object-manager-port",
        "dashboard-port",
        "dashboard-agent-grpc-port",
        "dashboard-agent-listen-port",
        "metrics-export-port",
        "runtime-env-agent-port",
        "ray-client-server-port",
        "min-worker-port",
        "max-worker-port",
    ):
        assert 20480 <= int(flags[flag]) < 20480 + RAY_BLOCK, flag
    assert not any(a.endswith("port=0") for a in argv)  # nothing left to the OS
    worker = ray_start_argv(
        "/py",
        NODE,
        head=False,
        port=20480,
        address="h:20480",
        temp_dir="/t",
        spill_dir="/s",
        ports=block_ports(20736, head=False, client=False),
    )
    assert "--node-manager-port=20737" in worker and "--ray-client-server-port" not in " ".join(worker)


def test_socket_paths_fit_af_unix_whatever_the_run_directory() -> None:
    for job in ("1", "12345678", "123456789012"):
        for rank in (0, 999):
            path = ray_temp_dir(job, rank)
            assert path.startswith(f"/dev/shm/hpcplace-{job}/") and len(path + SOCKET_TAIL) <= AF_UNIX_MAX
    with pytest.raises(ShimError, match="AF_UNIX"):
        ray_temp_dir("9" * 60, 0)


def test_raylet_and_driver_never_take_the_shells_ray_address() -> None:
    shell = {"RAY_ADDRESS": "10.9.9.9:6379", "TMPDIR": "/var/tmp/" + "x" * 200, "PATH": "/bin"}
    env = raylet_env(shell, NODE, {}, "", "/dev/shm/hpcplace-7/ray-n0")
    assert "RAY_ADDRESS" not in env and env["RAY_TMPDIR"] == "/dev/shm/hpcplace-7/ray-n0"
    drv = driver_env(
        shell,
        head="a800-1",
        port=20480,
        num_nodes=1,
        plan_path="/r/plan.json",
        launch_env={"RAY_ADDRESS": "elsewhere:1"},
        temp_dir="/dev/shm/hpcplace-7/ray-n0",
    )
    assert drv["RAY_ADDRESS"] == "a800-1:20480" and drv["RAY_TMPDIR"] == "/dev/shm/hpcplace-7/ray-n0"


def test_master_port_candidates_stay_below_the_ephemeral_range() -> None:
    for job in ("1", "700", "12345"):
        derived = master_port(job, 2)
        for below in (32768, 20000, 12000):
            ports = mp.candidates(derived, PORT_BASE, PORT_SPAN, PORT_STRIDE, below)
            assert all(PORT_BASE <= p < below for p in ports), (job, below)
            assert all((p - PORT_BASE) % PORT_STRIDE == (derived - PORT_BASE) % PORT_STRIDE for p in ports)
    with pytest.raises(ShimError, match="ephemeral"):
        mp.candidates(master_port("1", 0), PORT_BASE, PORT_SPAN, PORT_STRIDE, PORT_BASE + 10)


def test_ephemeral_range_parsing(tmp_path: Path) -> None:
    assert mp.parse_port_range("32768\t60999\n") == (32768, 60999)
    assert mp.parse_port_range("junk") is None and mp.parse_port_range("9 3") is None
    f = tmp_path / "range"
    f.write_text("15000 40000\n")
    assert mp.ephemeral_range(str(f)) == (15000, 40000)
    assert mp.ephemeral_range(str(tmp_path / "absent")) == mp.EPHEMERAL_DEFAULT


def test_status_shows_each_nodes_ports_and_dirs(tmp_path: Path) -> None:
    nodes = tmp_path / "ray" / "nodes"
    nodes.mkdir(parents=True)
    head = block_ports(20480, head=True, client=False)
    rec = {"rank": 0, "host": "a800-1", "ports": head, "ephemeral": [32768, 60999], "temp_dir": "/dev/shm/x"}
    (nodes / "n0.json").write_text(json.dumps({**rec, "spill_dir": "/tmp/s"}))
    (nodes / "n1.json").write_text("{broken")
    lines = ray_node_lines(read_ray_nodes(tmp_path))
    assert lines[0].startswith("Ray node rank 0 on a800-1: ports GCS 20480, node manager 20481")
    assert "workers 20496-20735 (ephemeral range 32768-60999)" in lines[0] and "dashboard 20483" in lines[0]
    assert lines[1] == "  temp dir /dev/shm/x, spill dir /tmp/s" and len(lines) == 2
