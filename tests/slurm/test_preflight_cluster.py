"""The per-node preflight on the real Slurm test cluster (marker `slurm`): a good job passes it and runs;
each failure case fails the job before any program starts, naming the node and the cause in the batch
log, in logs/preflight.txt and in `hpcplace status`."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest

from hpcplace.config.launch import LaunchSpec
from hpcplace.plan.plan import Plan
from hpcplace.slurm import submit
from tests.slurm.conftest import CLUSTER_DIR, REPORTER, LiveCluster, plan_yaml, wait_done

pytestmark = pytest.mark.slurm

SMALL = """
name: preflight
cluster:
  node_groups:
    - {label: rtx, partition: rtx4090, nodes: 1, gpus_per_node: 4, gpu_type: rtx4090}
    - {label: cpu, partition: cpu, nodes: 1}
  component_placement:
    inference: {node_group: rtx, placement: "0-3"}
    agent: {node_group: cpu, placement: "0:0-1"}
"""


def with_reporter(plan: Plan, reports: Path) -> Plan:
    command = (sys.executable, str(REPORTER), str(reports))
    return replace(plan, components=tuple(replace(c, command=command) for c in plan.components))


def batch_log(run_dir: Path) -> str:
    return "".join(p.read_text() for p in sorted((run_dir / "logs").glob("batch-*.out")))


def job_times(job_id: str, within: float = 60) -> tuple[float, float]:
    """(start, end) of the job's batch component as epoch seconds (sacct, which may still say End=Unknown
    for a moment after the job ended: polled)."""
    deadline = time.monotonic() + within
    while True:
        out = subprocess.run(
            ["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "Start,End"], capture_output=True, text=True, check=True
        ).stdout.split()
        start, end = out[0].split("|") if out else ("Unknown", "Unknown")
        if "Unknown" not in (start, end) or time.monotonic() > deadline:
            return datetime.fromisoformat(start).timestamp(), datetime.fromisoformat(end).timestamp()
        time.sleep(0.5)


def run_failing(plan: Plan, run_dir: Path, **kwargs: object) -> tuple[str, str, Path]:
    """Submit a job whose preflight must fail; (batch log, logs/preflight.txt, reports dir)."""
    reports = run_dir.with_name(run_dir.name + "-reports")
    reports.mkdir()
    done = submit.submit(with_reporter(plan, reports), run_dir, **kwargs)  # type: ignore[arg-type]
    status = wait_done(done.job_id, timeout=120)
    log = batch_log(run_dir)
    assert status.state == "FAILED", (status, log)
    assert not list(reports.iterdir()), f"a program started although the preflight failed: {log}"
    preflight = (run_dir / "logs" / "preflight.txt").read_text()
    assert "no program was started" in log
    return log, preflight, run_dir


def status_text(run_dir: Path, env: dict[str, str]) -> str:
    res = subprocess.run(
        [sys.executable, "-m", "hpcplace.cli", "status", str(run_dir)], env=env, capture_output=True, text=True
    )
    return res.stdout + res.stderr


def test_good_job_passes_the_preflight_and_runs(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    plan = plan_yaml(tmp_path, SMALL)
    reports = tmp_path / "reports"
    reports.mkdir()
    done = submit.submit(with_reporter(plan, reports), tmp_path / "run")
    status = wait_done(done.job_id)
    log = batch_log(tmp_path / "run")
    assert status.state == "COMPLETED", (status, log)
    assert re.search(r"preflight passed on 2 node\(s\) in [0-9.]+ s", log), log
    assert len(list(reports.glob("*.json"))) == plan.num_processes
    rtx = (tmp_path / "run" / "logs" / "preflight.rtx4090-1.out").read_text()
    assert "hpcplace-preflight: rtx4090-1: ok: 4 GPU(s)" in rtx, rtx
    assert not (tmp_path / "run" / "logs" / "preflight.txt").exists()


def test_launcher_the_nodes_cannot_see_fails_within_seconds(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """A venv on a node-local path: the launcher exists on the submit host (here: in its /tmp), not on
    the nodes (their /tmp is their own)."""
    launcher = shutil.which("hpcplace-run")
    assert launcher
    private = Path(tempfile.mkdtemp(prefix="hpcplace-node-local-venv-", dir="/tmp"))
    try:
        shutil.copy2(launcher, private / "hpcplace-run")
        plan = plan_yaml(tmp_path, SMALL)
        log, preflight, run_dir = run_failing(plan, tmp_path / "run", launcher=(str(private / "hpcplace-run"),))
    finally:
        shutil.rmtree(private)
    for host in ("rtx4090-1", "cpu-1"):
        line = (
            f"{host}: FAILED: cannot start the launcher {private}/hpcplace-run on this node: No such file or directory"
        )
        assert line in preflight and f"preflight: {line}" in log, log
    assert len(preflight.splitlines()) == 2
    assert "a venv on a node-local or private path" in preflight
    start, end = job_times(submit.resolve_job(str(run_dir))[0])
    assert end - start <= 10, f"the job took {end - start:.0f} s to fail"
    shown = status_text(run_dir, slurm_cluster.env)
    assert "preflight failed" in shown and "cpu-1: FAILED: cannot start the launcher" in shown, shown


def test_fewer_gpus_than_planned_fail_the_job(
    slurm_cluster: LiveCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rtx4090-1 shows 3 of its 4 GPUs (one fell off the bus): a device dir with only nvidia0-2."""
    devices = tmp_path / "dev" / "rtx4090-1"
    devices.mkdir(parents=True)
    for k in range(3):
        (devices / f"nvidia{k}").symlink_to(CLUSTER_DIR / "dev" / "rtx4090-1" / f"nvidia{k}")
    (tmp_path / "dev" / "cpu-1").mkdir()
    monkeypatch.setenv("HPCPLACE_GPU_DEVICE_DIR", str(tmp_path / "dev" / "{node}"))
    log, preflight, _ = run_failing(plan_yaml(tmp_path, SMALL), tmp_path / "run")
    assert re.search(
        r"rtx4090-1: FAILED: the node shows 3 GPU\(s\) \(.*/nvidia\{0,1,2\}\), but the plan expects 4 "
        r"on rtx4090-1 \(node group rtx, het group 0 node 0\)",
        preflight,
    ), preflight
    assert "cpu-1" not in preflight  # a CPU node has no GPUs to check
    assert "preflight: rtx4090-1: FAILED: the node shows 3 GPU(s)" in log


def test_full_dev_shm_fails_the_job(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """The nodes' /dev/shm is a 2 GiB tmpfs (HPCPLACE_SLURM_NODE_SHM): a job needing 3 GiB per node."""
    plan = plan_yaml(tmp_path, SMALL + "slurm: {shm_per_node: 3G}\n")
    _, preflight, _ = run_failing(plan, tmp_path / "run")
    for host in ("rtx4090-1", "cpu-1"):
        assert re.search(
            rf"{host}: FAILED: /dev/shm has [0-9.]+ GiB free, the plan needs 3.0 GiB per node "
            r"\(slurm.shm_per_node\)",
            preflight,
        ), preflight


def test_ray_mode_without_ray_in_the_interpreter_fails(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """The raylets' interpreter (RLinf's python_interpreter_path) is a Python without ray."""
    python = "/usr/bin/python3"
    check = subprocess.run([python, "-c", "import ray"], capture_output=True)
    if check.returncode == 0:
        pytest.skip(f"{python} has ray installed")
    plan = plan_yaml(tmp_path, SMALL)
    groups = tuple(
        replace(g, python_interpreter=(python,) * g.num_nodes) if g.label == "cpu" else g
        for g in plan.cluster.node_groups
    )
    plan = replace(
        plan,
        cluster=replace(plan.cluster, node_groups=groups),
        launch=LaunchSpec("ray", (sys.executable, "-c", "pass"), {}, 60),
    )
    done = submit.submit(plan, tmp_path / "run")
    status = wait_done(done.job_id, timeout=120)
    log = batch_log(tmp_path / "run")
    assert status.state == "FAILED", (status, log)
    preflight = (tmp_path / "run" / "logs" / "preflight.txt").read_text()
    # checked from the run directory, whose ray/ folder (the job's token) would import as an empty package
    assert re.search(
        r"cpu-1: FAILED: Ray: /usr/bin/python3 -c 'import ray' .*: failed \(exit 1\): "
        r"ray here is the folder \S+/run/ray, not the package: it is not installed in this Python",
        preflight,
    ), preflight
    assert "rtx4090-1" not in preflight
    assert not (tmp_path / "run" / "ray" / "head.json").exists()  # no raylet started


def test_programs_and_scripts_that_cannot_start_fail_within_seconds(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """Through the CLI, as a user types it: a component's `python3 train.py` whose script is not in the
    working directory, a program without its execute bit, and (Ray mode) a driver script that is not
    there fail the job in its preflight, each named, before anything starts."""
    noexec = tmp_path / "noexec.sh"
    noexec.write_text("#!/bin/sh\necho hi\n")
    noexec.chmod(0o644)
    steps = tmp_path / "steps.yaml"
    steps.write_text(
        SMALL + "components:\n  inference: {command: [python3, train.py]}\n  agent: {command: [./noexec.sh]}\n"
    )
    cases = [
        (
            steps,
            [],
            [
                "rtx4090-1: FAILED: component 'inference': the script 'train.py' "
                f"({tmp_path}/train.py) does not exist on this node",
                "cpu-1: FAILED: component 'agent': './noexec.sh' is not executable (chmod +x ./noexec.sh",
            ],
        ),
        (
            tmp_path / "ray.yaml",
            ["--driver", "--", "python", "driver.py"],
            [f"FAILED: the Ray driver: the script 'driver.py' ({tmp_path}/driver.py) does not exist on this node"],
        ),
    ]
    (tmp_path / "ray.yaml").write_text(SMALL)
    for i, (config, extra, expected) in enumerate(cases):
        run_dir = tmp_path / f"run{i}"
        res = subprocess.run(
            [sys.executable, "-m", "hpcplace.cli", "submit", str(config), "-o", str(run_dir), *extra],
            env=slurm_cluster.env,
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
        )
        assert res.returncode == 0, res.stdout + res.stderr
        job_id = submit.resolve_job(str(run_dir))[0]
        status = wait_done(run_dir, timeout=120)
        assert status.state == "FAILED", (status, batch_log(run_dir))
        preflight = (run_dir / "logs" / "preflight.txt").read_text()
        for line in expected:
            assert line in preflight, preflight
        start, end = job_times(job_id)
        assert end - start <= 10, f"the job took {end - start:.0f} s to fail"
        assert not (run_dir / "ray" / "head.json").exists()  # no Ray bring-up paid for
