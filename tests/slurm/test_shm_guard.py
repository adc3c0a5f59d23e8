"""The node-local directory's guard (hp_guard in hpcplace-lib.sh): a stop that comes while it makes the job's
directories still removes them. A job whose preflight fails at once stops the guard within milliseconds of its
start; the guard used to install its traps only after making the directories, so a SIGUSR1 between the two
killed it and left /dev/shm/hpcplace-<job> on the node (seen on the test cluster: a container preflight that
failed in 0.0 s). A slow `mkdir` on PATH holds the guard in that window, so the signal lands there every time."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from hpcplace.slurm.render import render_library

SLOW_MKDIR = """#!/bin/bash
/bin/mkdir "$@" || exit
touch "$FAKE_DIR/mkdir-$#-ran"
sleep 1
"""
SCRIPT = """
set -uo pipefail
hp_run_dir=$FAKE_DIR hp_plan=$FAKE_DIR/plan.json hp_shm=$FAKE_DIR/shm/hpcplace-77 hp_kill_wait=1 hp_attempt=0
hp_warning=TERM@30 hp_images=()
source "$FAKE_DIR/hpcplace-lib.sh"
exec "${hp_guard[@]}"
"""


def stop(guard: subprocess.Popen[str], sig: signal.Signals) -> int:
    """Signal the guard; its exit code. Its `sleep` is killed with its process group (in a job, Slurm ends the
    step's processes)."""
    guard.send_signal(sig)
    try:
        return guard.wait(timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(guard.pid, signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGTERM])
def test_a_stop_while_the_guard_makes_its_directories_removes_them(tmp_path: Path, sig: signal.Signals) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "shm").mkdir()
    mkdir = tmp_path / "bin" / "mkdir"
    mkdir.write_text(SLOW_MKDIR, encoding="utf-8")
    mkdir.chmod(0o755)
    (tmp_path / "hpcplace-lib.sh").write_text(render_library(), encoding="utf-8")
    env = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        "FAKE_DIR": str(tmp_path),
        "SLURM_JOB_ID": "77",
        "SLURMD_NODENAME": "a800-1",
    }
    guard = subprocess.Popen(["bash", "-c", SCRIPT], env=env, start_new_session=True, text=True)
    deadline = time.monotonic() + 30
    while not list(tmp_path.glob("mkdir-*-ran")):  # the job's directory is made; the guard waits on mkdir
        assert guard.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    assert stop(guard, sig) == 0
    assert list((tmp_path / "shm").iterdir()) == []


def test_the_guard_keeps_its_directories_until_stopped(tmp_path: Path) -> None:
    (tmp_path / "shm").mkdir()
    (tmp_path / "hpcplace-lib.sh").write_text(render_library(), encoding="utf-8")
    env = {**os.environ, "FAKE_DIR": str(tmp_path), "SLURM_JOB_ID": "77", "SLURMD_NODENAME": "a800-1"}
    guard = subprocess.Popen(["bash", "-c", SCRIPT], env=env, start_new_session=True, text=True)
    node = tmp_path / "shm" / "hpcplace-77" / "node-a800-1"
    deadline = time.monotonic() + 30
    while not node.is_dir():
        assert guard.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.5)
    assert guard.poll() is None and node.is_dir()
    assert stop(guard, signal.SIGUSR1) == 0
    assert list((tmp_path / "shm").iterdir()) == []


def test_a_guard_that_starts_after_the_job_began_stopping_stops_by_itself(tmp_path: Path) -> None:
    """hp_stop_steps writes the stop marker, then signals every task; a guard step whose task was not running yet
    (a component that failed within milliseconds, its guard's srun still starting under load) misses the signal,
    was later SIGKILLed with its srun and left /dev/shm/hpcplace-<job> (seen on the test cluster)."""
    (tmp_path / "shm").mkdir()
    (tmp_path / "hpcplace-lib.sh").write_text(render_library(), encoding="utf-8")
    (tmp_path / ".stopping-77-0").touch()  # hp_stop_marker of job 77, attempt 0
    env = {**os.environ, "FAKE_DIR": str(tmp_path), "SLURM_JOB_ID": "77", "SLURMD_NODENAME": "a800-1"}
    guard = subprocess.Popen(["bash", "-c", SCRIPT], env=env, start_new_session=True, text=True)
    try:
        assert guard.wait(timeout=30) == 0  # no signal: the marker stops it
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(guard.pid, signal.SIGKILL)
    assert list((tmp_path / "shm").iterdir()) == []
