"""The leftover check (tests/leftovers.py) finds what a test leaves: a new entry in /tmp or /dev/shm, a process
started with the session's marker; and not what was there before or what the harness keeps."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests import leftovers


def test_new_entries_in_tmp_shm_and_ray_home_are_named(tmp_path: Path) -> None:
    root = tmp_path / "root"
    ray_home = tmp_path / "home" / ".ray"  # absent at the start, as on a machine that never ran Ray
    (root / "tmp" / "was-there").mkdir(parents=True)
    (root / "dev" / "shm").mkdir(parents=True)
    before = leftovers.take(root, ray_home)
    (root / "tmp" / "left-by-a-test").mkdir()
    (root / "tmp" / "hpcplace-slurm").mkdir()
    (root / "dev" / "shm" / "hpcplace-777").mkdir()
    ray_home.mkdir(parents=True)
    (ray_home / "auth_token").write_text("written by a local ray.init()")
    assert leftovers.new_files(before, ["hpcplace-slurm"], root, ray_home) == [
        f"{root}/dev/shm/hpcplace-777",
        f"{root}/tmp/left-by-a-test",
        f"{ray_home}/auth_token",
    ]


def test_a_process_with_the_marker_is_named_until_it_ends() -> None:
    token = f"test-{os.getpid()}-{os.urandom(3).hex()}"
    env = {**os.environ, leftovers.SESSION_VARIABLE: token}
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        found = leftovers.settled(lambda: leftovers.marked_processes(token), within=0)
        assert [line.split()[0] for line in found] == [str(proc.pid)]
        assert "time.sleep(60)" in found[0]
    finally:
        proc.kill()
        proc.wait()
    assert leftovers.marked_processes(token) == []


def test_the_command_line_check_fails_naming_a_new_file(tmp_path: Path) -> None:
    snapshot = tmp_path / "machine.json"
    env = {**os.environ, leftovers.SESSION_VARIABLE: f"test-{os.getpid()}-cli"}
    run = [sys.executable, "-m", "tests.leftovers"]
    repo = Path(__file__).resolve().parents[1]
    assert subprocess.run([*run, "snapshot", str(snapshot)], cwd=repo, env=env, check=False).returncode == 0
    with tempfile.TemporaryDirectory(prefix="hpcplace-leftover-probe-") as probe:
        done = subprocess.run(
            [*run, "check", str(snapshot), "1"],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert done.returncode == 1 and f"left on this machine: {probe}" in done.stderr, done.stderr
