"""Jobs that share nodes (`slurm: {exclusive: false}`) on the real test cluster (issue 27): two Ray-mode
jobs and two steps-mode jobs at once on the same two nodes, submitted from a shell whose RAY_ADDRESS
names another cluster; each driver sees only its own cluster, each rendezvous only its own ranks, and
every TCP port a Ray job's processes listen on lies in that node's block below the ephemeral range.
And a Ray job whose run directory path is 200 characters long."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hpcplace.runtime.ray_node import AF_UNIX_MAX, RAY_BLOCK
from tests.slurm.conftest import LiveCluster, cli, config_yaml, submit_cli, wait_done

pytestmark = pytest.mark.slurm

PROBE = Path(__file__).with_name("shared_nodes_probe.py")
RAY_ARGS = "--object-store-memory=80000000"  # small machine, several raylets
# No GPUs here: GPU jobs sharing nodes (job-relative GPU ids) are test_shared_gpus_cluster.py's.
GROUP = "{label: a800, partition: a800, nodes: 2, cpus_per_node: 2, mem_per_node: 6000}"


def config(tmp_path: Path, name: str, command: list[str] | None, launch: dict[str, object] | None = None) -> Path:
    text = f"""\
        name: {name}
        cluster:
          node_groups:
            - {GROUP}
          component_placement:
            actor: "0-1:0-3"
        slurm: {{exclusive: false, time: "5"}}
        """
    text = textwrap.dedent(text)
    if command is not None:
        text += f"components:\n  actor: {{command: {json.dumps(command)}}}\n"
    if launch is not None:
        text += f"launch: {json.dumps(launch)}\n"
    return config_yaml(tmp_path, text, f"{name}.yaml")


def shell_env(cluster: LiveCluster) -> dict[str, str]:
    """The submitting shell: this interpreter first on PATH, and a RAY_ADDRESS of some other cluster."""
    path = f"{Path(sys.executable).parent}:{cluster.env.get('PATH', os.defpath)}"
    return {**cluster.env, "PATH": path, "RAY_ADDRESS": "10.77.0.99:6379", "HPCPLACE_RAY_ARGS": RAY_ARGS}


def job_pids(job_id: str) -> list[int]:
    """This job's processes on every node (each node is a namespace on this machine): its Ray temp dir
    in their command line or environment (Ray workers rename themselves, RAY_TMPDIR stays)."""
    marker = f"/dev/shm/hpcplace-{job_id}/".encode()
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker in Path(f"/proc/{entry}/cmdline").read_bytes() + Path(f"/proc/{entry}/environ").read_bytes():
                    out.append(int(entry))
            except OSError:
                continue
    return out


def sockets_of(pid: int) -> tuple[set[int], list[str]]:
    """(TCP ports the process listens on, AF_UNIX paths it has bound), from /proc."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
        tables = {
            name: Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:] for name in ("tcp", "tcp6", "unix")
        }
    except OSError:
        return set(), []
    ports = {
        int(f[1].rsplit(":", 1)[1], 16)
        for name in ("tcp", "tcp6")
        for f in (line.split() for line in tables[name])
        if f[3] == "0A" and f[9] in inodes  # LISTEN
    }
    paths = [f[7] for f in (line.split() for line in tables["unix"]) if len(f) > 7 and f[6] in inodes]
    return ports, paths


def node_blocks(run_dir: Path) -> dict[str, tuple[int, int, int]]:
    """host -> (its block's first port, the worker range's last, the ephemeral range's first port)."""
    out = {}
    for path in (run_dir / "ray" / "nodes").glob("n*.json"):
        rec = json.loads(path.read_text())
        ports = rec["ports"]
        out[rec["host"]] = (min(ports.values()), ports["max_worker"], rec["ephemeral"][0])
    return out


def test_two_ray_and_two_steps_jobs_share_nodes(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    env = shell_env(slurm_cluster)
    tags = ["rayA", "rayB", "stepsA", "stepsB"]
    every = ",".join(tags)
    runs, jobs = {}, {}
    for tag in tags:
        mode = "ray" if tag.startswith("ray") else "steps"
        cmd = [sys.executable, str(PROBE), mode, str(out), tag, every]
        run = tmp_path / f"run-{tag}"
        if mode == "ray":
            jobs[tag] = submit_cli(
                config(tmp_path, f"shared-{tag}", None, {"join_timeout": 80}), run, "--driver", "--", *cmd, env=env
            )
        else:
            jobs[tag] = submit_cli(config(tmp_path, f"shared-{tag}", cmd), run, env=env)
        runs[tag] = run
    deadline = time.monotonic() + 150
    while not all((out / f"{t}.json").exists() for t in ("rayA", "rayB")) and time.monotonic() < deadline:
        time.sleep(0.3)
    try:
        for tag in ("rayA", "rayB"):
            rec = json.loads((out / f"{tag}.json").read_text())
            head = json.loads((runs[tag] / "ray" / "head.json").read_text())
            assert rec["job"] == jobs[tag] and rec["marker"] == jobs[tag] and rec["markers"] == 1, rec
            assert rec["ray_address"] == f"{head['host']}:{head['port']}", rec
            assert sorted(n["host"] for n in rec["nodes"]) == ["a800-1", "a800-2"], rec  # its own two, no more
            blocks = node_blocks(runs[tag])
            for node in rec["nodes"]:
                first, last, _low = blocks[node["host"]]
                assert first <= node["node_manager"] <= last and first <= node["object"] <= last, (node, blocks)
            for w in rec["workers"]:
                assert w["ray_tmpdir"].startswith(f"/dev/shm/hpcplace-{jobs[tag]}/"), w
                assert w["session"].startswith(f"/dev/shm/hpcplace-{jobs[tag]}/"), w
            listening: set[int] = set()
            for pid in job_pids(jobs[tag]):
                ports, paths = sockets_of(pid)
                assert all(len(p.encode()) <= AF_UNIX_MAX for p in paths), paths
                assert all(p.startswith(f"/dev/shm/hpcplace-{jobs[tag]}/") for p in paths if "/sockets/" in p), paths
                listening |= ports
            allowed = {p for first, last, _ in blocks.values() for p in range(first, last + 1)}
            assert listening and listening <= allowed, (tag, sorted(listening - allowed), blocks)
            assert all(last < low for _, last, low in blocks.values()), blocks
            assert all(last - first < RAY_BLOCK for first, last, _ in blocks.values()), blocks
        a_blocks, b_blocks = node_blocks(runs["rayA"]), node_blocks(runs["rayB"])
        for host in a_blocks:  # on each shared node, the two jobs' blocks never meet
            assert a_blocks[host][1] < b_blocks[host][0] or b_blocks[host][1] < a_blocks[host][0], (a_blocks, b_blocks)
        status = cli("status", runs["rayA"]).stdout
        assert "Ray node rank 0 on a800-1: ports GCS" in status and "temp dir /dev/shm/hpcplace-" in status, status
        (tmp_path / "status-sample.txt").write_text(status)
        print(status)
    finally:
        (out / "release").write_text("")
    for tag in tags:
        done = wait_done(runs[tag], timeout=90)
        assert done.state == "COMPLETED", (tag, done.text)
    for tag in ("stepsA", "stepsB"):
        ranks = [json.loads((out / f"{tag}.rank{r}.json").read_text()) for r in range(4)]
        assert all(r["got"] == jobs[tag] == r["job"] for r in ranks), ranks
        assert all(r["port"] < r["ephemeral_low"] for r in ranks), ranks


def test_ray_job_with_a_200_character_run_directory(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "release").write_text("")  # nothing inspects this one's sockets
    run = tmp_path / "r"
    run = run.with_name("r" + "x" * (200 - len(str(run))))
    assert len(str(run)) == 200
    env = {**shell_env(slurm_cluster), "TMPDIR": str(tmp_path)}
    cmd = [sys.executable, str(PROBE), "ray", str(out), "long", "long"]
    submit_cli(config(tmp_path, "long-run-dir", None, {"join_timeout": 80}), run, "--driver", "--", *cmd, env=env)
    done = wait_done(run, timeout=120)
    assert done.state == "COMPLETED", (done.text, [p.read_text()[-2000:] for p in (run / "logs").glob("*.out")])
    rec = json.loads((out / "long.json").read_text())
    assert rec["marker"] == rec["job"] and len(rec["nodes"]) == 2, rec
