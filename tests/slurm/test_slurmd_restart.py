"""The test cluster keeps a node whose slurmd crashed (scripts/slurm-cluster/slurmd-keeper keeps each slurmd, as a
site's systemd unit does): Debian's slurmd 22.05.8 once died of a heap corruption inside Slurm mid-run, the node
went DOWN and every later test that needed it timed out. A crash now costs the node a second, not the run."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests import leftovers
from tests.slurm.conftest import CLUSTER_DIR, LiveCluster, slurmd_crashes, slurmd_pid, wait_for

NODE = "cpu-1"
KEEPER = Path(__file__).parents[2] / "scripts" / "slurm-cluster" / "slurmd-keeper"


def _slurmd_pid() -> int | None:
    """The node's live slurmd; None while it is not running."""
    pid = slurmd_pid(NODE)
    try:
        return pid if pid is not None and Path(f"/proc/{pid}/comm").read_text().strip() == "slurmd" else None
    except OSError:
        return None


@pytest.mark.slurm
def test_a_crashed_slurmd_is_restarted_and_its_node_keeps_its_job_and_takes_new_ones(
    slurm_cluster: LiveCluster,
) -> None:
    # A job's Ctrl-C reaches its programs: no task starts with SIGINT or SIGQUIT ignored (the keeper starts
    # slurmd as systemd does, every signal at its default; once it did not, and on 26.05 every task ignored SIGINT).
    assert _task_on_the_node(slurm_cluster) == (NODE, 0)
    job = slurm_cluster.run(
        "sbatch", "--parsable", "-p", "cpu", "-w", NODE, "-J", "survives-slurmd", "-o", "/dev/null", "--wrap", "sleep 6"
    )
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip().split(";")[0]

    def state() -> str:
        return slurm_cluster.run("squeue", "-h", "-j", job_id, "-o", "%T").stdout.strip()

    wait_for(f"job {job_id} running", lambda: state() == "RUNNING", 30)
    # and no other job ending on the node: an RPC to a slurmd that crashes is lost (Slurm resends a lost
    # TERMINATE_JOB a minute later, and the node stays busy with it till then)
    on_node = ["squeue", "-h", "-w", NODE, "-o", "%i"]
    wait_for(f"only job {job_id} on {NODE}", lambda: slurm_cluster.run(*on_node).stdout.split() == [job_id], 30)

    old = _slurmd_pid()
    assert old is not None, f"no slurmd of {NODE} running"
    # kept by the keeper, whose name is how the machine's leftover check knows it for the cluster's
    status = Path(f"/proc/{old}/status").read_text()
    keeper = next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:"))
    assert Path(f"/proc/{keeper}/comm").read_text().strip() == "slurmd-keeper"
    assert "slurmd-keeper" in leftovers.CLUSTER_DAEMONS
    # Its crash, without a core file: SIGSEGV as in the crash seen; said in the crash log, which the session
    # prints at its end (tests/conftest.py), so that no reader takes it for Slurm's.
    resource.prlimit(old, resource.RLIMIT_CORE, (0, 0))
    with (CLUSTER_DIR / "log" / "slurmd-crashes.log").open("a", encoding="utf-8") as log_file:
        print(
            f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {__name__} crashes slurmd of {NODE} on purpose:",
            file=log_file,
        )
    log_before, crashes_before = slurmd_crashes()
    os.kill(old, signal.SIGSEGV)

    wait_for(f"a new slurmd of {NODE}", lambda: _slurmd_pid() not in (None, old), 15)
    log, crashes = slurmd_crashes()
    new = crashes[len(crashes_before) :] if log == log_before else crashes
    assert len(new) == 1 and f"slurmd of {NODE} died of signal 11" in new[0], crashes

    # The job running through the crash completes (a node set DOWN under it would have failed it: NODE_FAIL),
    # and the node runs a new step at once.
    wait_for(f"job {job_id} done", lambda: state() == "", 60)
    acct = slurm_cluster.run("sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State,ExitCode")
    assert acct.stdout.strip().splitlines()[:1] == ["COMPLETED|0:0"], acct.stdout + acct.stderr
    assert _task_on_the_node(slurm_cluster) == (NODE, 0), "the restarted slurmd's tasks"


def _task_on_the_node(cluster: LiveCluster) -> tuple[str, int]:
    """A task's host name and which of SIGINT and SIGQUIT it starts with ignored (as a bit mask; 0: neither, as
    a terminal's foreground job has them)."""
    step = cluster.run(
        "srun", "-p", "cpu", "-w", NODE, "-t", "1", "sh", "-c", "hostname; grep ^SigIgn: /proc/self/status", timeout=60
    )
    assert step.returncode == 0, step.stderr
    name, sigign = step.stdout.split()[:1] + step.stdout.split()[-1:]
    return name, int(sigign, 16) & (1 << (signal.SIGINT - 1) | 1 << (signal.SIGQUIT - 1))


def _keep(
    tmp_path: Path, first_start: str, later_starts: str = "exit 0", ignoring: str = "", window_s: int = 60
) -> tuple[int, list[str], list[str]]:
    """The cluster's slurmd keeper, started with the signals `ignoring` names ignored, with a stand-in slurmd
    whose first start does `first_start` and later ones `later_starts` (the real slurmd's exits are the
    cluster's whole life): the keeper's exit status, the stand-in's starts and the crash log."""
    starts, crashes, fake = tmp_path / "starts", tmp_path / "crashes.log", tmp_path / "slurmd"
    fake.write_text(
        f"""#!/bin/sh
ulimit -c 0
echo "$*" >>{starts}
if [ "$(wc -l <{starts})" -eq 1 ]; then {first_start}; else {later_starts}; fi
"""
    )
    fake.chmod(0o755)
    keep = f'trap "" {ignoring}; exec "$0" "$@"' if ignoring else 'exec "$0" "$@"'
    res = subprocess.run(
        ["sh", "-c", keep, str(KEEPER), str(fake), NODE, str(crashes), str(window_s)],
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    logged = crashes.read_text().splitlines() if crashes.exists() else []
    return res.returncode, starts.read_text().splitlines(), logged


@pytest.mark.parametrize("signal_name", ["SEGV", "ABRT", "BUS"])
def test_a_slurmd_that_crashes_is_started_again_and_the_crash_logged(tmp_path: Path, signal_name: str) -> None:
    status, starts, crashes = _keep(tmp_path, f"kill -{signal_name} $$")
    number = getattr(signal, f"SIG{signal_name}")
    assert (status, starts) == (0, [f"-D -N {NODE}"] * 2)
    assert len(crashes) == 1 and crashes[0].endswith(
        f"slurmd of {NODE} died of signal {number} (exit status {128 + number}): restart 1 of 5"
    ), crashes


@pytest.mark.parametrize(
    ("first_start", "status"), [("kill -TERM $$", 143), ("kill -KILL $$", 137), ("exit 1", 1), ("exit 0", 0)]
)
def test_a_slurmd_that_is_stopped_or_exits_is_not_started_again(tmp_path: Path, first_start: str, status: int) -> None:
    """down.sh's SIGTERM (or its SIGKILL after the grace) must end the keeper too, or it would race a new
    slurmd against the teardown; a slurmd that exits (a bad config) is not retried."""
    assert _keep(tmp_path, first_start) == (status, [f"-D -N {NODE}"], [])


def test_slurmd_starts_with_every_signal_at_its_default_however_the_keeper_was_started(tmp_path: Path) -> None:
    """Started from a shell's background job, the keeper inherits SIGINT and SIGQUIT ignored, and a shell cannot
    undo that for its own commands: slurmd (and through it every task) would have them ignored too."""
    seen = tmp_path / "sigign"
    _keep(tmp_path, f"grep ^SigIgn: /proc/self/status >{seen}", ignoring="INT QUIT")
    assert seen.read_text().split() == ["SigIgn:", "0" * 16]


def test_a_slurmd_that_keeps_crashing_is_left_down_after_five_restarts(tmp_path: Path) -> None:
    status, starts, crashes = _keep(tmp_path, "kill -SEGV $$", "kill -SEGV $$")
    assert (status, len(starts), len(crashes)) == (139, 6, 6)
    assert crashes[-2].endswith("restart 5 of 5")
    assert crashes[-1].endswith(
        "died of signal 11 (exit status 139): not started again (5 restarts, each within 60 s of the start before)"
    )


def test_a_crash_after_a_quiet_while_counts_from_one_again(tmp_path: Path) -> None:
    """Five crashes in a row, then one after the window: restarted (a long-lived cluster's rare crashes never add
    up to a node left down)."""
    starts = tmp_path / "starts"
    later = f'if [ "$(wc -l <{starts})" -eq 6 ]; then sleep 2.2; kill -SEGV $$; elif [ "$(wc -l <{starts})" -lt 6 ]; then kill -SEGV $$; fi'
    status, started, crashes = _keep(tmp_path, "kill -SEGV $$", later, window_s=2)
    assert (status, len(started)) == (0, 7)
    assert [line.rsplit(": ", 1)[1] for line in crashes] == [f"restart {n} of 5" for n in (1, 2, 3, 4, 5, 1)]
