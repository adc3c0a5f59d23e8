"""Iterating on a live allocation (issue 18) on the real test cluster (marker `slurm`), all through the
CLI as a user does it: a held Ray job -> attach a driver that creates a detached named actor -> attach a
second driver that finds it -> exec as a planned rank (its GPUs and ranks) and on a node -> Ctrl-C an
attached driver (the cluster stays) -> cancel (every node clean). Steps mode: hold -> exec -> release."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcplace.slurm import submit
from tests.ray.test_ray_slurm import RAY_ARGS, assert_clean
from tests.slurm.conftest import HPCPLACE, JobShm, LiveCluster, cli, run_status, submit_cli, wait_done, wait_for

pytestmark = pytest.mark.slurm

DRIVER = Path(__file__).parents[1] / "ray" / "attach_driver.py"
RAY_CONFIG = """
name: ray-hold
cluster:
  node_groups:
    - {label: a800, partition: a800, nodes: 1, gpus_per_node: 8, gpu_type: a800}
    - {label: cpu, partition: cpu, nodes: 1}
  component_placement:
    actor: {node_group: a800, placement: "0-7:0-3"}
    env: {node_group: cpu, placement: "0"}
launch: {mode: ray, hold: true, join_timeout: 120, env: {HP_LAUNCH_VAR: "a'; echo $x :"}}
"""
STEPS_CONFIG = """
name: steps-hold
cluster:
  node_groups:
    - {label: a800, partition: a800, nodes: 1, gpus_per_node: 8, gpu_type: a800}
  component_placement:
    actor: "0-3"
components:
  actor: {command: [sh, -c, "exit 0"], env: {HP_ACTOR_VAR: "x y"}}
"""
RUNNING_CONFIG = """
name: steps-running
cluster:
  node_groups:
    - {label: a800, partition: a800, nodes: 1, gpus_per_node: 8, gpu_type: a800}
  component_placement:
    actor: "0-3"
    learner: "4-5"
components:
  actor: {command: [sh, -c, "exit 0"]}
  learner: {command: [sleep, "600"]}
launch: {hold: true}
"""
ENV_PROBE = [sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"]


@pytest.fixture(autouse=True)
def _small_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCPLACE_RAY_ARGS", RAY_ARGS)


def batch_log(run_dir: Path) -> str:
    return "".join(p.read_text() for p in (run_dir / "logs").glob("batch-*.out"))


def held(run_dir: Path) -> str | None:
    status = run_status(run_dir)
    assert not status.done, f"the held job ended:\n{status.text}\n{batch_log(run_dir)}"
    return status.text if "held: the job stays up" in status.text else None


def exec_env(run_dir: Path, *where: str) -> dict[str, str]:
    res = cli("exec", run_dir, *where, "--", *ENV_PROBE)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_held_ray_cluster_attach_exec_interrupt_cancel(lab: LiveCluster, tmp_path: Path) -> None:
    config = tmp_path / "ray.yaml"
    config.write_text(RAY_CONFIG, encoding="utf-8")
    run_dir = tmp_path / "run"
    job_id = submit_cli(config, run_dir)  # launch.hold and no driver: the job holds the Ray cluster
    try:
        text = wait_for("the job to hold", lambda: held(run_dir))
        assert f"hpcplace attach {run_dir} --driver" in text
        wait_for("the Ray head", lambda: (run_dir / "ray" / "head.json").exists())
        hosts = submit.read_hosts(run_dir)

        # 1. a driver that creates a detached named actor
        res = cli(
            "attach", run_dir, "--driver", "--", sys.executable, DRIVER, "create", tmp_path / "d1.json", timeout=180
        )
        assert res.returncode == 0, res.stdout + res.stderr
        first = json.loads((tmp_path / "d1.json").read_text())
        token = first["token"]
        assert f"create: token {token}" in res.stdout  # streamed to the terminal ...
        assert f"create: token {token}" in (run_dir / "logs" / "driver-1.out").read_text()  # ... and the log
        head_info = json.loads((run_dir / "ray" / "head.json").read_text())
        env = first["env"]
        assert env["RAY_ADDRESS"] == f"{hosts[(0, 0)]}:{head_info['port']}" and env["SLURMD_NODENAME"] == hosts[(0, 0)]
        assert env["RANK"] == "0" and env["WORLD_SIZE"] == "2" and env["MASTER_ADDR"] == hosts[(0, 0)]
        assert env["HPCPLACE_PLAN"] == str(run_dir / "plan.json") and env["HP_LAUNCH_VAR"] == "a'; echo $x :"
        assert first["nodes"] == 2

        # 2. the next driver finds it: the same cluster
        res = cli(
            "attach", run_dir, "--driver", "--", sys.executable, DRIVER, "find", tmp_path / "d2.json", timeout=180
        )
        assert res.returncode == 0, res.stdout + res.stderr
        assert json.loads((tmp_path / "d2.json").read_text())["token"] == token
        assert (run_dir / "logs" / "driver-2.out").exists()
        listing = cli("logs", run_dir, "--component", "driver", "--list").stdout
        assert f"attached driver 1 (hpcplace attach): {run_dir / 'logs' / 'driver-1.out'}" in listing, listing
        assert "attached driver 2" in listing

        # 3. exec as actor rank 3 (planned: a800 node, GPUs 6-7) and on node rank 1 (the cpu node)
        plan = submit.load_plan(run_dir / "plan.json")
        p3 = plan.components[0].processes[3]
        env = exec_env(run_dir, "--component", "actor", "--rank", "3")
        assert env["SLURMD_NODENAME"] == hosts[(0, 0)]
        assert env["CUDA_VISIBLE_DEVICES"] == ",".join(p3.visible_accelerators) == "6,7"
        assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == ("3", "3", "4", "4")
        assert env["HPCPLACE_COMPONENT"] == "actor" and env["SLURM_JOB_ID"] == job_id
        env = exec_env(run_dir, "--component", "env", "--rank", "0")
        assert env["SLURMD_NODENAME"] == hosts[(1, 0)] and env["CUDA_VISIBLE_DEVICES"] == "" and env["RANK"] == "0"
        env = exec_env(run_dir, "--node", "1")
        assert env["SLURMD_NODENAME"] == hosts[(1, 0)] and env["HPCPLACE_NODE_RANK"] == "1"
        assert env["RAY_ADDRESS"] == f"{hosts[(0, 0)]}:{head_info['port']}"
        res = cli("exec", run_dir, "--component", "actor", "--rank", "3", "--", "sh", "-c", "exit 7")
        assert res.returncode == 7, res.stdout + res.stderr

        # 4. Ctrl-C an attached driver (SIGINT to the process group, as a terminal sends it)
        proc = subprocess.Popen(
            [
                str(HPCPLACE),
                "attach",
                str(run_dir),
                "--driver",
                "--",
                sys.executable,
                str(DRIVER),
                "sleep",
                str(tmp_path / "d3.json"),
            ],
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        log = run_dir / "logs" / "driver-3.out"
        wait_for("the sleeping driver", lambda: log.exists() and "started" in log.read_text())
        busy = cli("attach", run_dir, "--driver", "--", "true")
        assert busy.returncode == 2 and "another attached driver is running" in busy.stderr, busy.stderr
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, out + err
        assert "hpcplace: interrupted: stopping this step only" in err, err
        assert (tmp_path / "d3.json.stopped").read_text() == "KeyboardInterrupt", err  # gracefully: its own handler
        steps = lambda: lab.run("squeue", "-h", "--steps", "-j", job_id, "-o", "%i %j").stdout  # noqa: E731
        wait_for("the attached step to end", lambda: " attach" not in steps(), 30)
        assert held(run_dir)  # the job, and its Ray cluster, are still up
        res = cli(
            "attach", run_dir, "--driver", "--", sys.executable, DRIVER, "find", tmp_path / "d4.json", timeout=180
        )
        assert res.returncode == 0 and json.loads((tmp_path / "d4.json").read_text())["token"] == token, res.stderr
    finally:
        cli("cancel", run_dir)
    status = wait_done(run_dir)
    assert status.state == "CANCELLED", status.text
    assert_clean(job_id)
    assert JobShm(job_id).left() == []


def shell(run_dir: Path, *where: str) -> str:
    """`hpcplace shell RUN ...` in a pseudo-terminal, typing a command and `exit 5`: what it printed."""
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [str(HPCPLACE), "shell", str(run_dir), *where], stdin=slave, stdout=slave, stderr=slave, start_new_session=True
    )
    os.close(slave)
    os.write(master, b'echo "rank=$RANK devices=$CUDA_VISIBLE_DEVICES"; exit 5\n')
    out = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the terminal closed: the shell ended
            break
        if not chunk:
            break
        out += chunk
    assert proc.wait(timeout=30) == 5, out.decode(errors="replace")
    os.close(master)
    return out.decode(errors="replace")


def test_held_steps_job_exec_release(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    config = tmp_path / "steps.yaml"
    config.write_text(STEPS_CONFIG, encoding="utf-8")
    run_dir = tmp_path / "run"
    job_id = submit_cli(config, run_dir, "--hold")
    try:
        wait_for("the job to hold", lambda: held(run_dir))
        assert "all steps finished" in batch_log(run_dir)
        env = exec_env(run_dir, "--component", "actor", "--rank", "2")
        assert env["CUDA_VISIBLE_DEVICES"] == "2" and env["RANK"] == "2" and env["WORLD_SIZE"] == "4"
        assert env["HP_ACTOR_VAR"] == "x y" and env["HPCPLACE_SHM_DIR"].startswith(f"/dev/shm/hpcplace-{job_id}/")
        assert JobShm(job_id).exists()  # the node-local state stays while the job holds
        out = shell(run_dir, "--component", "actor", "--rank", "1")
        assert "rank=1 devices=1" in out, out
        res = cli("release", run_dir, "--wait", timeout=180)
        assert res.returncode == 0, res.stdout + res.stderr
    finally:
        cli("cancel", run_dir)
    status = wait_done(run_dir)
    assert status.state == "COMPLETED", status.text + batch_log(run_dir)
    assert "released (hpcplace release)" in batch_log(run_dir)
    assert JobShm(job_id).left_after() == []


def test_release_while_a_component_runs_and_exec_beside_it(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    config = tmp_path / "steps.yaml"
    config.write_text(RUNNING_CONFIG, encoding="utf-8")
    run_dir = tmp_path / "run"
    job_id = submit_cli(config, run_dir)
    try:
        wait_for("the actor to finish", lambda: "component 'actor' (4 tasks) finished" in batch_log(run_dir))
        assert "holds: after its components it stays up" in run_status(run_dir).text
        env = exec_env(run_dir, "--component", "learner", "--rank", "1")  # overlaps the running learner step
        assert env["CUDA_VISIBLE_DEVICES"] == "5" and env["RANK"] == "1" and env["WORLD_SIZE"] == "2"
        res = cli("release", run_dir, "--wait", timeout=180)
        assert res.returncode == 0, res.stdout + res.stderr
    finally:
        cli("cancel", run_dir)
    status = wait_done(run_dir)
    assert status.state == "COMPLETED", status.text + batch_log(run_dir)
    assert "released while 'learner' still ran: stopping them" in batch_log(run_dir)
    assert JobShm(job_id).left_after() == []
