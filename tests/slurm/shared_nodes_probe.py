"""What one job of tests/slurm/test_shared_nodes_cluster.py runs (stdlib, plus Ray in `ray` mode).

`steps OUT TAG TAGS`: every rank of a steps-mode component meets at MASTER_ADDR:MASTER_PORT; rank 0
listens there and tells each rank its job id, so a rank that reached another job's rendezvous sees a
wrong id. `ray OUT TAG TAGS`: a Ray driver puts a named actor holding its job id, waits until every job
in TAGS has started (all run at once), then checks that the actor it finds is its own and that its
cluster holds only its own nodes; it writes what it saw to OUT/TAG.json, then waits for OUT/release
(the test inspects the job's sockets meanwhile).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

WAIT_S = 70.0


def ephemeral_low() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def barrier(out: Path, tag: str, tags: list[str]) -> None:
    """Say this job has started; wait until every job of `tags` has (they overlap in time)."""
    (out / f"{tag}.started").write_text(os.environ.get("SLURM_JOB_ID", ""))
    deadline = time.monotonic() + WAIT_S
    while not all((out / f"{t}.started").exists() for t in tags):
        if time.monotonic() > deadline:
            raise SystemExit(f"{tag}: not every job of {tags} started within {WAIT_S} s")
        time.sleep(0.2)


def steps(out: Path, tag: str, tags: list[str]) -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    host, port, job = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), os.environ["SLURM_JOB_ID"]
    if rank == 0:
        with socket.create_server(("", port)) as server:
            barrier(out, tag, tags)
            server.settimeout(WAIT_S)
            heard: set[str] = set()
            while len(heard) < world - 1:  # a connection that says no rank (a port probe) does not count
                conn, _ = server.accept()
                with conn:
                    conn.settimeout(5)
                    said = conn.recv(64).decode()
                    if said:
                        heard.add(said)
                        conn.sendall(job.encode())
        got = job
    else:
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                with socket.create_connection((host, port), timeout=5) as conn:
                    conn.settimeout(WAIT_S)  # rank 0 answers once every job started (its barrier)
                    conn.sendall(str(rank).encode())
                    got = conn.recv(64).decode()
                break
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise SystemExit(f"{tag} rank {rank}: cannot reach rank 0 at {host}:{port}: {exc}") from None
                time.sleep(0.2)
    record = {"job": job, "got": got, "port": port, "ephemeral_low": ephemeral_low()}
    (out / f"{tag}.rank{rank}.json").write_text(json.dumps(record))


def ray_driver(out: Path, tag: str, tags: list[str]) -> None:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    job = os.environ["SLURM_JOB_ID"]
    ray.init(log_to_driver=False)  # RAY_ADDRESS: the one hpcplace set, whatever the submitting shell had

    @ray.remote
    class Marker:
        def __init__(self, job: str) -> None:
            self.job = job

        def get(self) -> str:
            return self.job

    @ray.remote(num_cpus=0)
    def where() -> dict[str, str]:
        node = getattr(ray._private.worker.global_worker, "node", None)
        session = node.get_session_dir_path() if node is not None else ""
        return {"ray_tmpdir": os.environ.get("RAY_TMPDIR", ""), "session": session}

    mine = Marker.options(name="hp-marker", namespace="hp-shared").remote(job)  # type: ignore[attr-defined]
    ray.get(mine.get.remote())
    barrier(out, tag, tags)
    found = ray.get(ray.get_actor("hp-marker", namespace="hp-shared").get.remote())
    nodes = [n for n in ray.nodes() if n["Alive"]]
    workers = ray.get(
        [
            where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
            for n in nodes
        ]
    )
    record = {
        "job": job,
        "ray_address": os.environ.get("RAY_ADDRESS"),
        "marker": found,
        "markers": len([a for a in ray.util.list_named_actors(all_namespaces=True) if a["name"] == "hp-marker"]),
        "nodes": [
            {"host": n["NodeManagerHostname"], "node_manager": n["NodeManagerPort"], "object": n["ObjectManagerPort"]}
            for n in nodes
        ],
        "workers": workers,
    }
    (out / f"{tag}.json").write_text(json.dumps(record))
    deadline = time.monotonic() + WAIT_S
    while not (out / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.2)


if __name__ == "__main__":
    mode, out_dir, this, every = sys.argv[1:5]
    (steps if mode == "steps" else ray_driver)(Path(out_dir), this, every.split(","))
