"""`hpcplace submit CONFIG --driver -- python DRIVER` on the real Slurm test cluster (marker `slurm`): the
bare `python` is rendered as the submitting environment's interpreter and the launcher as an absolute
path, and the job runs with them (the nodes' PATH is never asked)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.ray.test_ray_slurm import CONFIG, PROBE, RAY_ARGS
from tests.slurm.conftest import LiveCluster, cli, run_status, submit_cli, wait_done

pytestmark = pytest.mark.slurm


def test_cli_bare_python_driver_runs_with_the_submitting_interpreter(
    slurm_cluster: LiveCluster, tmp_path: Path
) -> None:
    config = tmp_path / "ray.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    out, run_dir = tmp_path / "probe.json", tmp_path / "run"
    env = {**slurm_cluster.env, "HPCPLACE_RAY_ARGS": RAY_ARGS}
    python = os.path.abspath(shutil.which("python", path=env.get("PATH")) or sys.executable)
    sub = subprocess.run(
        [
            sys.executable,
            "-m",
            "hpcplace.cli",
            "submit",
            str(config),
            "-o",
            str(run_dir),
            "--driver",
            "--",
            "python",
            str(PROBE),
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert sub.returncode == 0, sub.stderr
    script = (run_dir / "job.sbatch").read_text()
    assert f"# driver interpreter: {python} " in script
    assert f"launcher (starts hpcplace's shim in every task): {Path(sys.executable).parent}/hpcplace-run " in script
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["launch"]["driver"][0] == python
    job_id = json.loads((run_dir / "run.json").read_text())["job_id"]
    status = wait_done(job_id)
    assert status.state == "COMPLETED", (status, [p.read_text() for p in (run_dir / "logs").glob("*.out")][:3])
    assert len(json.loads(out.read_text())["nodes"]) == 4


def test_ray_mode_on_the_default_partition(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """No partition named (Slurm's default, `cpu` on the test cluster): the raylets start without a
    partition label and the driver sees the planned node."""
    config = tmp_path / "ray.yaml"  # an RLinf config naming no partition
    config.write_text(
        "cluster:\n  num_nodes: 1\n  component_placement:\n    env: {node_group: node, placement: '0'}\n"
        "slurm: {gpus_per_node: 0}\n",
        encoding="utf-8",
    )
    out, run_dir = tmp_path / "probe.json", tmp_path / "run"
    submit_cli(
        config,
        run_dir,
        "--driver",
        "--",
        sys.executable,
        str(PROBE),
        str(out),
        env={**slurm_cluster.env, "HPCPLACE_RAY_ARGS": RAY_ARGS},
    )
    assert "(default, the default partition)" in (run_dir / "job.sbatch").read_text()
    status = wait_done(run_dir)
    assert status.state == "COMPLETED", (status, [p.read_text() for p in (run_dir / "logs").glob("*.out")][:3])
    nodes = list(json.loads(out.read_text())["nodes"].values())
    assert len(nodes) == 1 and nodes[0]["labels"]["hpcplace.group"] == "default", nodes
    assert "hpcplace.partition" not in nodes[0]["labels"], nodes


def test_status_shows_the_ray_node_error_when_ray_start_fails_on_the_head(
    slurm_cluster: LiveCluster, tmp_path: Path
) -> None:
    """`ray start` refuses its arguments on every node, the head included (so no ray/head.json is ever
    written): `hpcplace status` still shows the node errors of logs/ray-errors.txt."""
    config = tmp_path / "ray.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    run_dir = tmp_path / "run"
    submit_cli(
        config,
        run_dir,
        "--driver",
        "--",
        sys.executable,
        str(PROBE),
        str(tmp_path / "probe.json"),
        env={**slurm_cluster.env, "HPCPLACE_RAY_ARGS": f"{RAY_ARGS} --bogus-flag"},
    )
    status = wait_done(run_dir, 180)
    assert status.state == "FAILED", status.text
    assert not (run_dir / "ray" / "head.json").exists()
    errors = (run_dir / "logs" / "ray-errors.txt").read_text()
    assert "Ray node rank 0" in errors, errors
    assert "Ray: Ray node rank 0" in status.text, status.text


def test_status_names_the_ray_process_that_died(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """A raylet killed under a held Ray cluster: `ray start --block` stops, and `hpcplace status` says which
    of Ray's processes died, with its exit code (from the node-local session, read before it is removed)."""
    config = tmp_path / "ray.yaml"
    config.write_text(
        "name: ray-dies\ncluster:\n  node_groups:\n    - {label: cpu, partition: cpu, nodes: 1}\n"
        "  component_placement:\n    env: {node_group: cpu, placement: '0'}\n"
        "launch: {mode: ray, hold: true, join_timeout: 120}\n",
        encoding="utf-8",
    )
    run_dir = tmp_path / "run"
    env = {**slurm_cluster.env, "HPCPLACE_RAY_ARGS": RAY_ARGS}
    job_id = submit_cli(config, run_dir, env=env)
    try:
        deadline = time.monotonic() + 120
        log = run_dir / "logs" / "ray.cpu-1.out"
        while not log.exists() or "This command will now block" not in log.read_text():  # ray start is done
            assert time.monotonic() < deadline and not run_status(run_dir).done, run_status(run_dir).text
            time.sleep(0.5)
        while True:
            # `[r]`: the pattern matches the raylet's own argv, not the exec step's that carries it
            kill = cli(
                "exec",
                run_dir,
                "--node",
                "0",
                "--",
                "pkill",
                "-KILL",
                "-f",
                f"[r]aylet_socket_name=/dev/shm/hpcplace-{job_id}/ray-n0/",
                env=env,
            )
            if kill.returncode == 0:
                break
            assert time.monotonic() < deadline and not run_status(run_dir).done, kill.stderr + run_status(run_dir).text
            time.sleep(0.5)
        status = wait_done(run_dir, 120)
    finally:
        cli("cancel", run_dir, env=env)
    assert status.state == "FAILED", status.text
    assert (
        "Ray: Ray node rank 0 on cpu-1 (node group cpu, het group 0 node 0): Ray's raylet [exit code=-9 "
        "(signal 9)] died, so ray start stopped (exit code 1)" in status.text
    ), status.text
    assert "the end of its log is in logs/ray.cpu-1.out" in status.text
    assert f"last 5 line(s) of Ray's output on that node ({run_dir / 'logs' / 'ray.cpu-1.out'}):" in status.text
    assert "Remaining processes will be killed." in status.text  # what `ray start --block` said last
    assert "waiting for every node to join" not in status.text  # a held job without a driver waits for none
