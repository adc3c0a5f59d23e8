"""Ctrl-C of an attached step (`attach.run_step`) against a stand-in srun that handles SIGINT as srun does
(tests/slurm/srun_interrupts.py): every way the SIGINT can arrive ends the step gracefully, hpcplace exits 130,
and srun is never made to abort the step while its task still handles the first SIGINT. The real srun on the
test cluster: tests/slurm/test_hold_cluster.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

FAKE_SRUN = Path(__file__).with_name("srun_interrupts.py")
RUNNER = """
import sys
from pathlib import Path
from hpcplace.slurm import attach
sys.exit(attach.run_step(sys.argv[1:-1], log=Path(sys.argv[-1]), grace_s=3.0))
"""


def _ignore_sigint() -> None:  # a process started in the background by a shell without job control
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def start(tmp_path: Path, *task: str, preexec: Callable[[], None] | None = None) -> subprocess.Popen[str]:
    log = tmp_path / "driver-1.out"
    argv = [
        sys.executable,
        "-c",
        RUNNER,
        sys.executable,
        str(FAKE_SRUN),
        str(tmp_path / "events"),
        str(tmp_path / "graceful"),
        *task,
        str(log),
    ]
    proc = subprocess.Popen(
        argv, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=preexec
    )
    deadline = time.monotonic() + 60
    while not (log.exists() and "started" in log.read_text()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    return proc


def events(tmp_path: Path) -> list[str]:
    path = tmp_path / "events"
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize(
    ("to_group", "preexec"),
    [(True, None), (False, None), (True, _ignore_sigint)],
    ids=["terminal-ctrl-c", "kill-int-hpcplace", "inherited-ignored"],
)
def test_one_ctrl_c_stops_the_task_gracefully_and_exits_130(
    tmp_path: Path, to_group: bool, preexec: Callable[[], None] | None
) -> None:
    proc = start(tmp_path, preexec=preexec)
    (os.killpg if to_group else os.kill)(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "hpcplace: interrupted: stopping this step only" in err
    assert (tmp_path / "graceful").read_text() == "stopped by its SIGINT"  # the task's own handler ran
    assert events(tmp_path) == ["sending Ctrl-C"], err  # one SIGINT reached srun: never an abort


def test_a_task_ignoring_sigint_is_killed_after_the_grace(tmp_path: Path) -> None:
    proc = start(tmp_path, "ignore")
    began = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    # the terminal's SIGINT, hpcplace's own after srun's abort window, then SIGTERM after the 3 s grace
    assert events(tmp_path) == ["sending Ctrl-C", "sending Ctrl-C", "forcing job termination (SIGTERM)"], err
    assert time.monotonic() - began >= 3.0
    assert not (tmp_path / "graceful").exists()


def test_a_step_that_ends_by_itself_returns_its_code(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    code = "import sys; print('hello'); print('oops', file=sys.stderr); sys.exit(7)"
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, sys.executable, "-c", code, str(log)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 7, done.stderr
    assert "hello" in done.stdout and "oops" in done.stderr
    text = log.read_text()  # both streams, each write as it came (a line's text and its newline may be apart)
    assert "hello" in text and "oops" in text and len(text) == len("hello\noops\n")
