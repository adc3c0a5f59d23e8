"""The real shim as a subprocess: exec keeps the pid, exit codes and signals reach the caller unchanged,
refusals stop before the program starts."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runtime.conftest import LAB_CONFIG, base_env, print_env, shim_command, step_envs, write_plan


@pytest.fixture(scope="module")
def lab_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_plan(tmp_path_factory.mktemp("lab"), LAB_CONFIG)


@pytest.fixture
def task() -> Iterator[dict[str, str]]:
    """actor rank 1 on a800-1 (recorded --het-group=0 step), with a job id of its own."""
    job = f"t{uuid.uuid4().hex[:12]}"
    env = {**step_envs("0")[1], "SLURM_JOB_ID_HET_GROUP_0": job}
    yield env
    shutil.rmtree(f"/dev/shm/hpcplace-{job}", ignore_errors=True)


def run(plan: Path, env: dict[str, str], *cmd: str, component: str = "actor") -> subprocess.CompletedProcess[str]:
    args = shim_command("--plan", str(plan), "--component", component, *(("--", *cmd) if cmd else ()))
    return subprocess.run(args, env={**base_env(), **env}, capture_output=True, text=True, timeout=60)


def test_exit_code_passes_through(lab_plan: Path, task: dict[str, str]) -> None:
    assert run(lab_plan, task, "sh", "-c", "exit 7").returncode == 7


def test_signal_passes_through(lab_plan: Path, task: dict[str, str]) -> None:
    done = run(lab_plan, task, "sh", "-c", "kill -TERM $$")
    assert done.returncode == -signal.SIGTERM


def test_exec_replaces_the_shim(lab_plan: Path, task: dict[str, str]) -> None:
    proc = subprocess.Popen(
        shim_command("--plan", str(lab_plan), "--component", "actor", "--", "sh", "-c", "echo $$"),
        env={**base_env(), **task},
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = proc.communicate(timeout=60)
    assert int(out) == proc.pid


def test_program_sees_the_computed_environment(lab_plan: Path, task: dict[str, str]) -> None:
    done = run(
        lab_plan,
        task,
        "sh",
        "-c",
        'echo "$RANK $WORLD_SIZE $LOCAL_RANK $CUDA_VISIBLE_DEVICES $MASTER_ADDR $SLURM_JOB_GPUS $ACTOR_FLAG"; '
        'test -d "$HPCPLACE_SHM_DIR" && echo shm',
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["1 4 1 1 a800-1 0,1 1", "shm"]
    printed = print_env(lab_plan, "actor", task)
    assert printed["env"]["RANK"] == "1" and printed["command"] == ["sh", "-c", "exit 0"]


def test_plan_command_is_the_default(lab_plan: Path, task: dict[str, str]) -> None:
    done = run(lab_plan, task)
    assert done.returncode == 0, done.stderr


def test_refusal_stops_before_the_program(lab_plan: Path, task: dict[str, str], tmp_path: Path) -> None:
    marker = tmp_path / "started"
    done = run(lab_plan, {**task, "RANK": "5", "WORLD_SIZE": "4"}, "touch", str(marker))
    assert done.returncode == 2
    assert "RANK='5'" in done.stderr and "WORLD_SIZE" not in done.stderr.split("HINT")[0]
    assert "Traceback" not in done.stderr
    assert not marker.exists()


def test_a_task_that_starts_after_the_job_began_stopping_runs_nothing_and_leaves_nothing(
    lab_plan: Path, task: dict[str, str], tmp_path: Path
) -> None:
    """The job script's stop marker (written before it signals the steps) is there: the task's stop signal
    came before its process ran, so it neither starts the program nor leaves the node-local directory it
    made (the node's guard removed the job's already: run S of issue 36, a job that failed within a second)."""
    job = task["SLURM_JOB_ID_HET_GROUP_0"]
    started = tmp_path / "started"
    marker = lab_plan.parent / f".stopping-{job}-1"
    marker.touch()
    try:
        later = run(lab_plan, {**task, "SLURM_RESTART_COUNT": "0"}, "touch", str(started))
        assert later.returncode == 0 and started.exists(), later.stderr  # another attempt's marker: not this one's
        started.unlink()
        shutil.rmtree(f"/dev/shm/hpcplace-{job}")
        stopping = run(lab_plan, {**task, "SLURM_RESTART_COUNT": "1"}, "touch", str(started))
    finally:
        marker.unlink()
    assert stopping.returncode == 143, stopping.stderr
    assert "actor rank 1: the job is stopping" in stopping.stderr and "Traceback" not in stopping.stderr
    assert not started.exists()
    assert not os.path.lexists(f"/dev/shm/hpcplace-{job}")


def _ray_node_task(tmp_path: Path, tmpdir: Path) -> tuple[str, list[str], dict[str, str]]:
    """A Ray-mode node task of a job of its own (its id, argv and environment), its plan and logs in tmp_path."""
    plan = write_plan(tmp_path, LAB_CONFIG + "launch: {driver: [python3, -c, pass]}\n")
    (tmp_path / "logs").mkdir()
    job = f"t{uuid.uuid4().hex[:12]}"
    env = {k: job if k.startswith("SLURM_JOB_ID") else v for k, v in step_envs("0,1,2")[0].items()}
    return job, shim_command("--ray-node", "--plan", str(plan)), {**base_env(), **env, "TMPDIR": str(tmpdir)}


def test_a_ray_node_that_starts_after_the_job_began_stopping_starts_no_ray_and_leaves_nothing(tmp_path: Path) -> None:
    """The Ray mode's node task, in the same case: its temp dirs (in the job's node-local directory and $TMPDIR)
    are removed and no Ray starts."""
    spill = tmp_path / "spill"
    spill.mkdir()
    job, command, env = _ray_node_task(tmp_path, spill)
    (tmp_path / f".stopping-{job}-0").touch()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    log = (tmp_path / "logs" / "ray.a800-1.out").read_text(encoding="utf-8")
    assert done.returncode == 0, done.stderr + log
    assert "the job's stop (sent before this task started) received" in log, log
    assert not (tmp_path / "ray" / "head.json").exists()
    assert not os.path.lexists(f"/dev/shm/hpcplace-{job}")
    assert list(spill.iterdir()) == []


def test_a_ray_node_whose_directory_went_as_the_job_stopped_reports_the_stop(tmp_path: Path) -> None:
    """The job's guard removed the node-local directory between two of the Ray node's mkdirs (the job stopping
    as it starts; here: a $TMPDIR that is gone): the stop, not an error. Without the stop marker, an error; and
    either way the directories it made before are removed."""
    job, command, env = _ray_node_task(tmp_path, tmp_path / "gone")
    log = tmp_path / "logs" / "ray.a800-1.out"
    failed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert failed.returncode == 2 and f"cannot create {tmp_path}/gone/hpcplace-ray-{job}-n0" in log.read_text()
    assert not os.path.lexists(f"/dev/shm/hpcplace-{job}")  # the temp dir it made before is gone again
    (tmp_path / f".stopping-{job}-0").touch()
    stopped = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert stopped.returncode == 0, stopped.stderr + log.read_text()
    assert "the job's stop (sent before this task started) received" in log.read_text()
    assert not os.path.lexists(f"/dev/shm/hpcplace-{job}")


def test_errors_are_messages_not_tracebacks(lab_plan: Path, task: dict[str, str]) -> None:
    missing = run(lab_plan, {}, "true")
    assert missing.returncode == 2 and "missing Slurm variables" in missing.stderr
    assert "Traceback" not in missing.stderr
    assert run(lab_plan, task, "no-such-program-hpcplace").returncode == 127
    usage = subprocess.run(shim_command("--component", "actor"), capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "missing --plan" in usage.stderr
    bad = subprocess.run(
        shim_command("--plan", str(lab_plan), "--component", "actor", "true"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "unknown argument 'true'" in bad.stderr
    assert subprocess.run(shim_command("--help"), capture_output=True, text=True, timeout=60).stdout.startswith("usage")


def test_debug_note_without_nvml(lab_plan: Path, task: dict[str, str]) -> None:
    done = run(lab_plan, {**task, "HPCPLACE_DEBUG": "1"}, "true")
    assert done.returncode == 0
    assert "actor rank 1/4 on a800-1" in done.stderr
    assert "GPUs not verified" in done.stderr or "warning" not in done.stderr


def test_console_script(lab_plan: Path, task: dict[str, str]) -> None:
    script = shutil.which("hpcplace-run")
    if script is None:
        pytest.skip("hpcplace-run is not on PATH (package not installed)")
    done = subprocess.run(
        [script, "--plan", str(lab_plan), "--component", "actor", "--", "sh", "-c", "exit 5"],
        env={**base_env(), **task, "PATH": os.environ["PATH"]},
        timeout=60,
    )
    assert done.returncode == 5


def test_path_search_in_the_new_environment(lab_plan: Path, task: dict[str, str], tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    (first / "tool").write_text("#!/bin/sh\nexit 3\n")  # not executable: skipped, like a shell does
    (second / "tool").write_text("#!/bin/sh\nexit 4\n")
    (second / "tool").chmod(0o755)
    path = f"{first}:{second}:{os.environ['PATH']}"
    assert run(lab_plan, {**task, "PATH": path}, "tool").returncode == 4
    denied = run(lab_plan, {**task, "PATH": f"{first}:{os.environ['PATH']}"}, "tool")
    assert denied.returncode == 126 and "permission denied" in denied.stderr


def test_offloading_component_never_preloads_memory_saver_without_a_gpu(tmp_path: Path, task: dict[str, str]) -> None:
    """torch_memory_saver's LD_PRELOAD would stop every process on a node without libcuda."""
    plan = write_plan(tmp_path, LAB_CONFIG.replace('env: {ACTOR_FLAG: "1"}', 'env: {ACTOR_FLAG: "1"}, offload: true'))
    assert '"offload": true' in plan.read_text()
    printed = print_env(plan, "actor", task)
    if not os.path.exists("/dev/nvidiactl"):
        assert "LD_PRELOAD" not in printed["env"]
    done = run(plan, task, "sh", "-c", 'test -z "$LD_PRELOAD" || case "$LD_PRELOAD" in *memory_saver*) exit 9;; esac')
    if not os.path.exists("/dev/nvidiactl"):
        assert done.returncode == 0, done.stderr


def test_chdir_runs_the_program_in_the_submission_directory(
    lab_plan: Path, task: dict[str, str], tmp_path: Path
) -> None:
    args = shim_command("--plan", str(lab_plan), "--component", "actor", "--chdir", str(tmp_path), "--", "pwd")
    done = subprocess.run(args, env={**base_env(), **task}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == str(tmp_path), done.stderr
    missing = shim_command(
        "--plan", str(lab_plan), "--component", "actor", "--chdir", str(tmp_path / "gone"), "--", "pwd"
    )
    done = subprocess.run(missing, env={**base_env(), **task}, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "cannot change to the working directory" in done.stderr
    assert "Traceback" not in done.stderr
