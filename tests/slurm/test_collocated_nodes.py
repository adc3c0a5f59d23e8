"""Collocation on more than one node, on the real test cluster, where every node has its own
/dev/shm and /tmp (issue 12), and the job's node-local directory claimed first by another user
(issue 8)."""

from __future__ import annotations

import json
import os
import pwd
import re
import signal
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests.colocate.colocate_invariants import check_invariants, read_events
from tests.slurm.conftest import (
    REPO,
    JobShm,
    LiveCluster,
    cluster_nodes,
    node_root,
    shared_paths,
    submit_cli,
    wait_done,
)

pytestmark = pytest.mark.slurm

JOB_TIMEOUT_S = 240

TWO_BY_TWO = """\
name: collocated-two-nodes
cluster:
  node_groups:
    - {label: a800, partition: a800, nodes: 2, gpus_per_node: 8, gpu_type: a800, cpus_per_node: 16, mem_per_node: 64000}
  component_placement:
    actor,rollout: {node_group: a800, placement: "0-1,8-9"}
components:
  actor:   {command: ["python3", "examples/collocated_demo.py", "--role", "actor", "--cycles", "CYCLES"], offload: true}
  rollout: {command: ["python3", "examples/collocated_demo.py", "--role", "rollout", "--cycles", "CYCLES"], offload: true}
"""


def job_env(cluster: LiveCluster, **extra: str) -> dict[str, str]:
    """The submitting environment (the job inherits it): this interpreter's python3 first on PATH."""
    path = f"{Path(sys.executable).parent}:{cluster.env.get('PATH', os.defpath)}"
    return {**cluster.env, "PATH": path, **extra}


def submit_config(cluster: LiveCluster, tmp_path: Path, text: str, env: dict[str, str]) -> tuple[str, Path]:
    config = tmp_path / "config.yaml"
    config.write_text(text)
    run_dir = tmp_path / "run"
    return submit_cli(config, run_dir, env=env, cwd=REPO), run_dir


def all_logs(run_dir: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted((run_dir / "logs").glob("*")) if p.is_file())


def wait_no_shm(job_id: str, timeout: float = 20) -> list[str]:
    """What is left of the job in any node's /dev/shm (the guard may need a moment after the job)."""
    deadline = time.monotonic() + timeout
    left = JobShm(job_id).left()
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = JobShm(job_id).left()
    return left


# ------------------------------------------------------------------------------------------------
def test_every_node_has_its_own_dev_shm_and_tmp(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """The test cluster is faithful: a file one node puts in /dev/shm or /tmp is invisible to the
    other node and to this host; the shared run directory (pytest's tmp_path) is visible to both."""
    shared = tmp_path / "shared"
    shared.mkdir()
    script = (
        "n=$SLURMD_NODENAME; touch /dev/shm/probe-$n /tmp/probe-$n; sleep 1; "
        'echo "$n shm=$(cd /dev/shm && echo probe-*) tmp=$(cd /tmp && echo probe-*) '
        'size=$(df -k --output=size /dev/shm | tail -1 | tr -d " ")"; '
        f"touch {shared}/seen-$n; rm -f /dev/shm/probe-$n /tmp/probe-$n"
    )
    res = slurm_cluster.run(
        "srun", "-p", "a800", "-N2", "--ntasks-per-node=1", "-t", "1", "bash", "-c", script, timeout=60
    )
    assert res.returncode == 0, res.stderr
    lines = sorted(res.stdout.split("\n"))[-2:]
    for line, node in zip(lines, ("a800-1", "a800-2")):
        assert line.startswith(f"{node} shm=probe-{node} tmp=probe-{node} size="), res.stdout
        assert 1 << 20 <= int(line.split("size=")[1]) <= 8 << 20, line  # KiB: about 2 GiB per node
    assert sorted(p.name for p in shared.iterdir()) == ["seen-a800-1", "seen-a800-2"]
    assert not list(Path("/dev/shm").glob("probe-a800-*")) and not list(Path("/tmp").glob("probe-a800-*"))
    roots = {node: node_root(node) for node in cluster_nodes()}
    assert all(roots.values()), roots
    assert len({os.stat(r / "dev/shm").st_dev for r in roots.values()}) == len(roots)  # one tmpfs each
    # ... yet the checkout and the venv the tests run from are there on every node, at the same path,
    # wherever they are (/tmp included: up.sh binds them into each node's own /tmp)
    console = Path(sys.executable).parent / "hpcplace-run"
    for node in cluster_nodes():
        partition = node.rsplit("-", 1)[0]  # a800-1 -> a800 (scripts/slurm-cluster/up.sh)
        seen = slurm_cluster.run(
            "srun",
            "-p",
            partition,
            "-w",
            node,
            "-N1",
            "-t",
            "1",
            "bash",
            "-c",
            'for p; do test -e "$p" || echo "missing $p"; done',
            "-",
            *shared_paths(),
            str(console),
            str(REPO / "pyproject.toml"),
            timeout=60,
        )
        assert seen.returncode == 0 and seen.stdout == "", (node, seen.stdout, seen.stderr)


TWO_BY_EIGHT_TP = """\
name: collocated-two-nodes-tp
cluster:
  node_groups:
    - {label: a800, partition: a800, nodes: 2, gpus_per_node: 8, gpu_type: a800, cpus_per_node: 16, mem_per_node: 64000}
  component_placement:
    actor,rollout: all
components:
  actor:   {tensor_parallel_size: 4, offload: true, command: ["python3", "examples/collocated_demo.py", "--role", "actor", "--cycles", "CYCLES"]}
  rollout: {tensor_parallel_size: 2, offload: true, command: ["python3", "examples/collocated_demo.py", "--role", "rollout", "--cycles", "CYCLES"]}
"""


def weight_sources_from_plan(plan: dict) -> dict[int, list[int]]:
    """rollout rank -> the actor ranks feeding it, from the plan's weight_sync map (as the shim
    exports HPCPLACE_WEIGHT_SYNC_SOURCES); without a map, actor r feeds rollout r."""
    sync = plan.get("weight_sync") or {}
    table = sync.get("actor_to_rollout")
    rollouts = next(c for c in plan["components"] if c["name"] == "rollout")["processes"]
    if not table:
        return {p["rank"]: [p["rank"]] for p in rollouts}
    return {
        p["rank"]: [a for a, targets in enumerate(table) if any(dp == p["rank"] for dp, _ in targets)] for p in rollouts
    }


@pytest.mark.parametrize("layout", ["2x2", "2x8-tp4-tp2"])
def test_collocated_demo_on_two_nodes(lab: LiveCluster, tmp_path: Path, layout: str) -> None:
    """Actor and rollout collocated on two a800 nodes (GPUs 0-1 of each; or all 8 with actor TP=4 and
    rollout TP=2 strided): every cycle completes; per node no device has two owners and every offload
    precedes the next onload; every rollout rank reads exactly the weights its own node's actor (its
    source in the plan's weight_sync map) published; nothing of the job is left in any node's /dev/shm."""
    if layout != "2x2" and lab.mode == "no":
        # All 8 GPUs of each node: both modes number them 0-7 alike, so one mode tells all (the 2x2 layout runs
        # in both); 50 s of the tier's time on each release.
        pytest.skip("the whole-node layout runs in ConstrainDevices=yes only (both modes number all 8 GPUs alike)")
    cycles = 3 if layout == "2x2" else 2
    text = (TWO_BY_TWO if layout == "2x2" else TWO_BY_EIGHT_TP).replace("CYCLES", str(cycles))
    events = tmp_path / "events.log"
    job_id, run_dir = submit_config(lab, tmp_path, text, job_env(lab, HPCPLACE_COLLOCATE_EVENTS=str(events)))
    status = wait_done(run_dir)
    logs = all_logs(run_dir)
    assert status.state == "COMPLETED", status.text + "\n" + logs[-4000:]
    plan = json.loads((run_dir / "plan.json").read_text())
    hosts = {int(g_j.split()[1]): g_j.split()[2] for g_j in (run_dir / "logs" / "nodes.txt").read_text().splitlines()}
    node_of = {
        (c["name"], p["rank"]): hosts[p["cluster_node_rank"]] for c in plan["components"] for p in c["processes"]
    }
    devices_of = {
        (c["name"], p["rank"]): set(p["visible_accelerators"]) for c in plan["components"] for p in c["processes"]
    }
    by_node: dict[str, list[dict]] = defaultdict(list)
    for e in read_events(str(events)):
        by_node[e["node"]].append(e)
    assert sorted(by_node) == ["a800-1", "a800-2"]
    for node, node_events in by_node.items():
        gens = check_invariants(node_events, [["actor"], ["rollout"]])
        assert [sorted(gens[g]) for g in sorted(gens)] == [["rollout"], ["actor"]] * cycles + [["rollout"]], node
        assert {(e["component"], e["rank"]) for e in node_events} == {k for k, n in node_of.items() if n == node}
        assert {d for e in node_events for d in e["devices"]} == {
            d for k, n in node_of.items() if n == node for d in devices_of[k]
        }
    published = {}  # (node, actor rank, version) -> fingerprint
    for m in re.finditer(
        r"actor\[(\d+)\] gen \d+: .* published weights v(\d+) fp=([0-9a-f]+) \(node ([\w.-]+)\)", logs
    ):
        published[(m[4], int(m[1]), int(m[2]))] = m[3]
    num_actors = sum(1 for k in node_of if k[0] == "actor")
    assert len(published) == num_actors * cycles, logs[-4000:]
    sources = weight_sources_from_plan(plan)
    for rank, feeding in sources.items():
        node = node_of[("rollout", rank)]
        assert feeding and all(node_of[("actor", a)] == node for a in feeding), (rank, feeding)  # per node
        seen = re.findall(
            rf"rollout\[{rank}\] gen \d+: weights v(\d+) fp=([0-9a-f]+), .* \(node ([\w.-]+), "
            r"from actor-(\d+)\)",
            logs,
        )
        assert [int(v) for v, _, _, _ in seen] == list(range(cycles + 1)), logs[-4000:]
        for version, fp, seen_node, source in seen[1:]:
            assert seen_node == node and int(source) == feeding[0]
            assert published[(node, int(source), int(version))] == fp  # its node's actor's weights
    assert wait_no_shm(job_id) == []


def _pid_of(job_id: str, component: str, rank: int, timeout: float = 60) -> int:
    """The pid of a job's process (same pid namespace as the cluster's nodes), by its environment."""
    want = {
        f"HPCPLACE_JOB_ID={job_id}".encode(),
        f"HPCPLACE_COMPONENT={component}".encode(),
        f"HPCPLACE_RANK={rank}".encode(),
    }
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                env = set((proc / "environ").read_bytes().split(b"\0"))
                cmd = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if want <= env and b"collocated_demo.py" in cmd:
                return int(proc.name)
        time.sleep(0.2)
    raise AssertionError(f"{component} rank {rank} of job {job_id} never started")


def test_killed_actor_on_node_1_fails_the_job_naming_it(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """SIGKILL of actor rank 2 (on a800-2) mid-run: the job fails naming that rank and node, node 0's
    ranks are stopped (the job ends, no hang), and no node's /dev/shm keeps anything of the job."""
    events = tmp_path / "events.log"
    job_id, run_dir = submit_config(
        slurm_cluster,
        tmp_path,
        TWO_BY_TWO.replace("CYCLES", "400"),
        job_env(slurm_cluster, HPCPLACE_COLLOCATE_EVENTS=str(events)),
    )
    pid = _pid_of(job_id, "actor", 2)
    deadline = time.monotonic() + 60  # wait until node 1 has taken a few turns
    while time.monotonic() < deadline:
        if (
            events.exists()
            and sum(
                '"actor"' in line and '"offload_end"' in line and '"a800-2"' in line
                for line in events.read_text().splitlines()
            )
            >= 2
        ):
            break
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
    started = time.monotonic()
    status = wait_done(run_dir, 120)
    took = time.monotonic() - started
    logs = all_logs(run_dir)
    assert status.state != "COMPLETED", logs[-3000:]
    batch = "\n".join(p.read_text(errors="replace") for p in (run_dir / "logs").glob("batch-*.out"))
    assert re.search(r"component 'actor' rank 2 on a800-2: .*(Killed|signal 9)", batch), batch[-3000:]
    assert took < 60, f"the job took {took:.0f} s to stop after the kill"
    assert wait_no_shm(job_id) == []


@pytest.mark.parametrize("squat", ["other-uid", "symlink"])
def test_squatted_node_local_directory_fails_the_job_at_once(
    slurm_cluster: LiveCluster, tmp_path: Path, squat: str
) -> None:
    """Another user creates /dev/shm/hpcplace-<next job id> first (job ids are predictable), on every
    node: the job fails at once, its error names the path and the owner, nothing of it is left, and
    the squatter's directory is untouched (nothing written into it or through the symlink)."""
    probe = slurm_cluster.run("sbatch", "--parsable", "--hold", "-p", "cpu", "-t", "1", "--wrap", "true")
    assert probe.returncode == 0, probe.stderr
    probe_id = probe.stdout.strip().split(";")[0]
    slurm_cluster.run("scancel", probe_id)
    job_guess = str(int(probe_id) + 1)  # the cluster lock is ours: nobody else submits meanwhile
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    planted = []
    for node in cluster_nodes():
        root = node_root(node)
        assert root is not None
        path = root / f"dev/shm/hpcplace-{job_guess}"
        if squat == "other-uid":
            # what `mkdir -m 0700` by user nobody leaves (made here: nobody cannot enter /proc/<pid>/root)
            path.mkdir(mode=0o700)
            os.chown(path, pwd.getpwnam("nobody").pw_uid, pwd.getpwnam("nobody").pw_gid)
        else:
            path.symlink_to(victim)
        planted.append(path)
    try:
        job_id, run_dir = submit_config(
            slurm_cluster, tmp_path, TWO_BY_TWO.replace("CYCLES", "3"), job_env(slurm_cluster)
        )
        assert job_id == job_guess
        started = time.monotonic()
        status = wait_done(run_dir, 120)
        assert time.monotonic() - started < 60
        logs = all_logs(run_dir)
        assert status.state != "COMPLETED", logs[-3000:]
        path = f"/dev/shm/hpcplace-{job_id}"
        if squat == "other-uid":
            assert re.search(rf"{re.escape(path)} is owned by nobody \(uid \d+\), not by this job's user", logs), logs[
                -3000:
            ]
        else:
            assert f"{path} is a symlink" in logs, logs[-3000:]
        for p in planted:  # the squatter's directory untouched, nothing written through the link
            assert os.path.lexists(p) and (p.is_symlink() == (squat == "symlink"))
            if squat == "other-uid":
                assert list(p.iterdir()) == []
        assert list(victim.iterdir()) == []
    finally:
        for p in planted:
            if p.is_symlink():
                p.unlink()
            elif p.is_dir():
                os.rmdir(p)
    assert wait_no_shm(job_guess) == []
