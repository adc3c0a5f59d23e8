"""The job script's own clock for the time-limit warning (hp_warning_clock in hpcplace-lib.sh): Slurm sends
its warning once, from a periodic check, and one sent while the batch script starts is lost (a chain link on
Slurm 26.05 with a 1-minute limit got none and ran into its limit). The library is sourced by bash with fake
`squeue` (the time left, from an end time in a file) and `scancel` (records its arguments) on PATH, and its
wait-loop call, hp_deliver_warning, polled as job.sbatch polls it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from hpcplace.slurm.render import render_library

FAKE_SQUEUE = """#!/bin/bash
echo call >>"$FAKE_DIR/squeue.calls"
end=$(<"$FAKE_DIR/end")
[[ $end == UNLIMITED ]] && { echo UNLIMITED; exit 0; }
left=$((end - EPOCHSECONDS)); ((left < 0)) && left=0
printf '%d:%02d\\n' $((left / 60)) $((left % 60))
"""
FAKE_SCANCEL = """#!/bin/bash
echo "$EPOCHSECONDS $*" >>"$FAKE_DIR/scancel.calls"
"""
# job.sbatch's variables and wait loop, reduced to the warning: poll for POLL_S seconds
SCRIPT = """
set -uo pipefail
hp_run_dir=$FAKE_DIR hp_plan=$FAKE_DIR/plan.json hp_shm=/nonexistent hp_kill_wait=1 hp_attempt=0
hp_warning=TERM@30 hp_images=()
source "$FAKE_DIR/hpcplace-lib.sh"
trap hp_warning_received USR2
end=$((EPOCHSECONDS + POLL_S))
while ((EPOCHSECONDS < end)); do hp_deliver_warning; sleep 0.2; done
"""


def poll(tmp_path: Path, end: str, seconds: int, slurm_warns_after: float | None = None) -> tuple[str, list[str], int]:
    """Run the loop for `seconds` with the job ending at `end` (epoch seconds or UNLIMITED); Slurm's own
    USR2 sent after `slurm_warns_after` s if given. Returns the log, scancel's calls, squeue's call count."""
    for name, text in (("squeue", FAKE_SQUEUE), ("scancel", FAKE_SCANCEL)):
        path = tmp_path / "bin" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        path.chmod(0o755)
    (tmp_path / "hpcplace-lib.sh").write_text(render_library(), encoding="utf-8")
    (tmp_path / "end").write_text(end, encoding="utf-8")
    env = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        "FAKE_DIR": str(tmp_path),
        "SLURM_JOB_ID": "77",
        "POLL_S": str(seconds),
    }
    proc = subprocess.Popen(["bash", "-c", SCRIPT], env=env, stderr=subprocess.PIPE, text=True)
    if slurm_warns_after is not None:
        time.sleep(slurm_warns_after)
        proc.send_signal(signal.SIGUSR2)  # as Slurm's --signal=B:USR2@S
    _, log = proc.communicate(timeout=seconds + 30)
    assert proc.returncode == 0, log
    calls = tmp_path / "scancel.calls"
    scancels = calls.read_text().splitlines() if calls.exists() else []
    return log, scancels, len((tmp_path / "squeue.calls").read_text().splitlines())


def test_no_warning_from_slurm_is_passed_on_by_the_scripts_clock(tmp_path: Path) -> None:
    end = int(time.time()) + 33  # the warning is due 3 s from now
    log, scancels, squeues = poll(tmp_path, str(end), 7)
    assert len(scancels) == 1, log
    sent_at, argv = scancels[0].split(" ", 1)
    assert argv == "--signal=TERM 77"  # every task of every step, as for Slurm's own warning
    assert int(sent_at) >= end - 30, (sent_at, end)  # not before its seconds before the limit
    assert "none from Slurm" in log and "by this script's clock" in log, log
    assert squeues <= 3, squeues  # read once, then only when the end seems reached (not every 0.2 s poll)


def test_the_clock_stays_quiet_while_the_end_is_far(tmp_path: Path) -> None:
    log, scancels, squeues = poll(tmp_path, str(int(time.time()) + 600), 3)
    assert scancels == [] and "time-limit warning" not in log, log
    assert squeues == 1


def test_no_time_limit_means_no_clock(tmp_path: Path) -> None:
    log, scancels, squeues = poll(tmp_path, "UNLIMITED", 2)
    assert scancels == [] and squeues == 1, log


def test_slurms_warning_first_is_passed_on_once(tmp_path: Path) -> None:
    """Slurm's warning arrives (early, 58 s left, as Slurm sends it): delivered at 30 s before the end as
    before, and the clock adds no second one."""
    end = int(time.time()) + 33
    log, scancels, _ = poll(tmp_path, str(end), 7, slurm_warns_after=0.5)
    assert len(scancels) == 1, log
    assert "time-limit warning from Slurm" in log and "none from Slurm" not in log, log
