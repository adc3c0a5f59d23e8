"""What the job script does the same way on every Slurm version (22.05 -> 26.05), CPU side:

1. every srun it runs names its CPUs, memory and GRES itself, and the batch environment's requests that
   srun would read (SLURM_CPUS_PER_TASK[_HET_GROUP_K], SLURM_TRES_PER_TASK, SRUN_CPUS_PER_TASK, ...) are
   unset before the first srun;
2. each rank's log file is named by component and plan rank (written by the rank's shim), never by
   srun's %t or %N, and `logs`/`status` find it; runs rendered before keep their old files found;
3. the preflight names a node whose device constraint failed (Slurm 25.05+ fails the step then).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from hpcplace.plan.planner import plan_from_file
from hpcplace.slurm import submit
from hpcplace.slurm.attach import LiveRun, node_target, step_args, step_environment
from hpcplace.slurm.render import render_run, render_script
from hpcplace.slurm.slurm_job import RANK_LOG_VARIABLE, STEP_REQUEST_VARIABLES, lower, rank_log_name, rank_log_pattern
from tests.runtime.conftest import LAB_CONFIG, base_env, shim_command, step_envs, write_plan
from tests.slurm.conftest import REPO
from tests.slurm.test_script import FAKEBIN, run_script

CONFIGS = sorted(p.stem for p in (REPO / "configs").glob("*.yaml"))


# ---- 1. explicit CPUs, memory and GRES on every srun ---------------------------------------------------


def srun_segments(script: str) -> list[list[str]]:
    """Every srun of a rendered script, split into its colon-separated parts' options (the words before
    the program)."""
    text = script.replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        if line.lstrip().startswith("#") or not re.search(r"(^|\s)srun\s", line):
            continue
        words = shlex.split(line.split(" >logs/")[0].split(" 2>")[0].rstrip("&"), posix=True)
        rest = words[words.index("srun") + 1 :]
        part: list[str] = []
        for word in rest + [":"]:
            if word == ":":
                out.append(part)
                part = []
            elif word.startswith("-") and (not part or part[-1].startswith("-")):
                part.append(word)
            elif part and part[-1].startswith("-"):
                part.append("PROGRAM")  # the program and its words end the options
    return [[w for w in p if w != "PROGRAM"] for p in out]


def _explicit(options: list[str]) -> list[str]:
    """What a part of an srun leaves to srun's defaults or environment (empty: nothing)."""
    missing = []
    if not any(o.startswith("--cpus-per-task=") or o == "--whole" for o in options):
        missing.append("CPUs (--cpus-per-task or --whole)")
    if not any(o.startswith(("--mem=", "--mem-per-cpu=")) for o in options):
        missing.append("memory (--mem)")
    if not any(o.startswith(("--gres=", "--gpus")) for o in options):
        missing.append("GRES (--gres, or --gres=none)")
    if any(o.startswith(("--output=", "--error=")) and "%t" in o for o in options):
        missing.append("a log name without %t")
    return missing


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("mode", ["steps", "ray"])
def test_every_srun_names_its_cpus_memory_and_gres(config: str, mode: str) -> None:
    plan = plan_from_file(REPO / "configs" / f"{config}.yaml")
    if mode == "ray":
        from dataclasses import replace

        from hpcplace.config.launch import LaunchSpec

        plan = replace(plan, launch=LaunchSpec("ray", ("python3", "driver.py"), {}, 60))
    try:
        script = render_script(plan, "/r")
    except Exception as exc:  # noqa: BLE001 - a config the Ray mode (or the steps mode) refuses is not this test's
        pytest.skip(f"{config} does not render in the {mode} mode: {exc}")
    parts = srun_segments(script)
    assert len(parts) >= 4, parts  # clean-up, guard, preflight, and the steps
    for options in parts:
        assert not _explicit(options), (_explicit(options), options)
    first_srun = min(i for i, line in enumerate(script.splitlines()) if line.lstrip().startswith("srun "))
    clear = next(i for i, line in enumerate(script.splitlines()) if line.startswith("hp_clear_requests "))
    assert clear < first_srun
    assert "%t" not in script and "%N" not in script


def test_the_parser_sees_a_missing_option() -> None:
    """The check above fails where an srun leaves its CPUs, memory or GRES to Slurm."""
    script = (
        "srun --het-group=0 --nodes=1 --mem=0 --overlap prog \\\n    : --het-group=1 --cpus-per-task=1 --mem=0 prog\n"
    )
    first, second = srun_segments(script)
    assert _explicit(first) == ["CPUs (--cpus-per-task or --whole)", "GRES (--gres, or --gres=none)"]
    assert _explicit(second) == ["GRES (--gres, or --gres=none)"]


def test_attached_steps_name_theirs_and_drop_the_requests_of_the_allocation() -> None:
    plan = plan_from_file(REPO / "configs" / "hetero-partitions.yaml")
    job = lower(plan)
    run = LiveRun(REPO / "no-run", "12", plan, ("hpcplace-run",))
    for rank in range(len(plan.cluster.nodes)):
        for gpus in (True, False):
            options = step_args(job, run, node_target(plan, rank), "exec", gpus=gpus)
            assert not _explicit(options), options
    inside = {
        "SLURM_TRES_PER_TASK": "cpu=16",
        "SLURM_CPUS_PER_TASK_HET_GROUP_1": "8",
        "SRUN_CPUS_PER_TASK": "4",
        "SLURM_GPU_BIND": "closest",
        "SLURM_EXACT": "1",
        "SLURM_CONF": "/etc/slurm/slurm.conf",
        "HOME": "/h",
    }
    assert step_environment(inside) == {"SLURM_CONF": "/etc/slurm/slurm.conf", "HOME": "/h"}


REQUESTS = {
    # 23.11+: the leader's -c (implies --exact) and, from 25.05, its TRES per task beside group 1's own -c:
    # "cpus_per_task set by two different environment variables" if srun read both
    "SLURM_CPUS_PER_TASK": "16",
    "SLURM_TRES_PER_TASK": "cpu=16",
    "SLURM_CPUS_PER_TASK_HET_GROUP_0": "16",
    "SLURM_CPUS_PER_TASK_HET_GROUP_1": "8",
    "SLURM_CPUS_PER_TASK_PACK_GROUP_1": "8",
    "SRUN_CPUS_PER_TASK": "4",
    "SLURM_GPUS_PER_NODE_HET_GROUP_1": "2",
    "SLURM_NTASKS_PER_GPU": "1",
    "SLURM_GPU_BIND": "closest",
    "SLURM_STEP_GRES": "none",
    "SLURM_EXACT": "1",
}


def test_the_job_script_runs_no_srun_with_the_allocations_requests(tmp_path: Path) -> None:
    """The batch environment as Slurm 25.05 leaves it (and a user's SRUN_CPUS_PER_TASK): no srun of the
    job sees any of it; everything else (SLURM_JOB_ID, the node lists) stays."""
    plan = plan_from_file(REPO / "configs" / "hetero-partitions.yaml")
    rendered = render_run(plan, tmp_path / "run")
    spy = tmp_path / "spybin"
    spy.mkdir()
    (spy / "srun").write_text(
        f'#!/bin/bash\nenv | grep -E "^(SLURM_|SRUN_)" >>"$FAKE_DIR/srun-env.$$"\nexec {FAKEBIN}/srun "$@"\n'
    )
    (spy / "srun").chmod(0o755)
    res, calls, _ = run_script(rendered.run_dir, tmp_path, PATH=f"{spy}:{FAKEBIN}:{os.environ['PATH']}", **REQUESTS)
    assert res.returncode == 0, res.stderr
    seen = [(tmp_path / "fake" / f).read_text() for f in os.listdir(tmp_path / "fake") if f.startswith("srun-env.")]
    assert len(seen) == len(calls) >= 6
    for env in seen:
        names = {line.split("=", 1)[0] for line in env.splitlines()}
        assert not names & set(REQUESTS), names & set(REQUESTS)
        assert "SLURM_JOB_ID" in names and "SLURM_JOB_NODELIST_HET_GROUP_1" in names
    assert set(STEP_REQUEST_VARIABLES) >= {k.split("_HET_GROUP_")[0].split("_PACK_GROUP_")[0] for k in REQUESTS}


# ---- 2. per-rank log files named by component and plan rank ------------------------------------------


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory holding the lab plan (with a component spanning three het groups)."""
    run_dir = tmp_path_factory.mktemp("lab")
    write_plan(run_dir, LAB_CONFIG)
    (run_dir / "logs").mkdir()
    return run_dir


def test_each_task_of_a_spanning_step_writes_the_file_logs_finds(lab: Path) -> None:
    """span012 over het groups 0,1,2 with the environments recorded on Slurm 22.05: each task's shim
    writes its output (stdout and stderr, its own and its program's) to the file named by its plan
    rank, and `rank_logs` finds that file for that rank whatever the hosts are called."""
    plan = submit.load_plan(lab / "plan.json")
    job = lower(plan)
    step = next(s for s in job.steps if s.component == "span012")
    assert len(step.segments) == 3
    job_id = f"t{uuid.uuid4().hex[:12]}"
    pattern = str(lab / rank_log_pattern(step.name))
    try:
        for env in step_envs("0,1,2"):
            env = {**env, "SLURM_JOB_ID_HET_GROUP_0": job_id, RANK_LOG_VARIABLE: pattern}
            done = subprocess.run(
                shim_command(
                    "--plan",
                    str(lab / "plan.json"),
                    "--component",
                    "span012",
                    "--",
                    "sh",
                    "-c",
                    f'echo "out $RANK ${{{RANK_LOG_VARIABLE}-unset}}"; echo "err $RANK" >&2',
                ),
                env={**base_env(), **env},
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0 and done.stdout == done.stderr == "", done
    finally:
        shutil.rmtree(f"/dev/shm/hpcplace-{job_id}", ignore_errors=True)
    hosts = {(0, 0): "n-a", (0, 1): "n-b", (1, 0): "n-c", (2, 0): "n-d"}  # NodeNames unlike any hostname
    for hosts_known in (hosts, {}):
        logs = [r for r in submit.rank_logs(lab, job, hosts_known) if r.component == "span012"]
        assert [r.rank for r in logs] == list(range(7))
        for r in logs:
            assert r.path == lab / rank_log_name(step.name, r.rank)
            assert r.path.read_text() == f"out {r.rank} unset\nerr {r.rank}\n"


def test_a_shim_that_cannot_find_its_rank_says_so_on_sruns_stderr(lab: Path, tmp_path: Path) -> None:
    pattern = str(tmp_path / "x.rank{rank}.out")
    env = {**step_envs("0")[0], RANK_LOG_VARIABLE: pattern, "SLURM_STEP_NUM_TASKS": "9"}
    done = subprocess.run(
        shim_command("--plan", str(lab / "plan.json"), "--component", "actor", "--", "true"),
        env={**base_env(), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "this step has 9 tasks" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_runs_rendered_before_keep_their_srun_named_logs(tmp_path: Path) -> None:
    """`logs/<step>.<host>.<%t>.out` of a run rendered before the rank-named logs: still found, with
    Slurm 22.05's het offset (0,1 | 3,4) and 25.11's numbering (0,1 | 1,2) alike."""
    plan = submit.load_plan(write_plan(tmp_path, LAB_CONFIG))
    job = lower(plan)
    step = next(s for s in job.steps if s.component == "span01")
    hosts = {(0, 0): "a800-1", (0, 1): "a800-2", (1, 0): "rtx4090-1"}
    for numbers in (
        {"a800-1": (0, 1), "a800-2": (2, 3), "rtx4090-1": (5,)},  # 22.05: group 1 offset
        {"a800-1": (0, 1), "a800-2": (2, 3), "rtx4090-1": (0,)},
    ):  # 25.11: no offset
        logs = tmp_path / "logs"
        shutil.rmtree(logs, ignore_errors=True)
        logs.mkdir()
        ranks = iter(step.ranks)
        for host in ("a800-1", "a800-2", "rtx4090-1"):
            for t in numbers[host]:
                (logs / f"{step.name}.{host}.{t}.out").write_text(f"rank {next(ranks)}\n")
        found = [r for r in submit.rank_logs(tmp_path, job, hosts) if r.component == "span01"]
        assert [r.path.read_text() for r in found if r.path] == [f"rank {r.rank}\n" for r in found]


def test_logs_and_status_show_the_rank_named_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hpcplace.cli import main
    from hpcplace.slurm import run_report

    run_dir = tmp_path / "run"
    assert main(["render", str(REPO / "configs" / "hetero-partitions.yaml"), "-o", str(run_dir)]) == 0
    (run_dir / "logs" / "nodes.txt").write_text("0 0 a800-1\n0 1 a800-2\n1 0 rtx4090-1\n2 0 cpu-1\n3 0 robot-1\n")
    (run_dir / "logs" / "inference.rank1.out").write_text("Traceback: boom in rank 1\n")
    (run_dir / "logs" / "batch-12.out").write_text(
        "hpcplace: FAILED: component 'inference' (3 tasks; ranks 0-2) exited with code 7: rank 1 on rtx4090-1 "
        "failed first\n"
    )
    capsys.readouterr()
    assert main(["logs", str(run_dir), "--component", "inference", "--rank", "1"]) == 0
    assert "Traceback: boom in rank 1" in capsys.readouterr().out
    lines = run_report.read_failure(run_dir, "12")
    assert any("boom in rank 1" in line for line in lines), lines


# ---- 3. the preflight names a failed device constraint ---------------------------------------------------


def _preflight(tmp_path: Path, err: str, nodes: str = "") -> tuple[list[str], str]:
    plan = plan_from_file(REPO / "configs" / "hetero-partitions.yaml")
    rendered = render_run(plan, tmp_path / "run")
    res, _, _ = run_script(
        rendered.run_dir,
        tmp_path,
        FAKE_PREFLIGHT=nodes or "node-b=hpcplace-preflight: node-b: ok",
        FAKE_PREFLIGHT_ERR=err,
    )
    assert res.returncode == 1, res.stderr
    return (rendered.run_dir / "logs" / "preflight.txt").read_text().splitlines(), res.stderr


def test_a_device_constraint_that_failed_for_a_task_is_named(tmp_path: Path) -> None:
    """Slurm 25.05+ on a ConstrainDevices=yes node whose per-task constraint cannot be applied:
    slurmstepd's error reaches srun's stderr, the task never starts."""
    lines, stderr = _preflight(
        tmp_path,
        "slurmstepd-node-c: error: Could not apply device constrain to task 0\\n"
        "srun: error: task 0 launch failed: Slurmd could not execve job",
        nodes=";".join(f"{n}=hpcplace-preflight: {n}: ok" for n in ("node-a", "node-b", "node-d", "node-e")),
    )
    assert lines == [
        "node-c: FAILED: device constraint failed on node node-c: Could not apply device constrain to task 0 (Slurm "
        "25.05 and later fail a step whose ConstrainDevices limits cannot be applied; earlier versions ran it "
        "unconstrained): the node's device cgroup cannot be set up (slurmd's log there says why); ask the cluster's "
        "admins, or leave the node out"
    ], lines
    assert "hpcplace:   preflight: node-c: FAILED: device constraint failed on node node-c" in stderr


def test_a_step_whose_device_constraint_failed_on_a_node_is_named(tmp_path: Path) -> None:
    """The whole step's constraint failed (slurmd's log alone says `Could not apply device constrain to
    step`): srun says the task could not be launched; the node that wrote nothing and whose task never
    exited is named."""
    lines, _ = _preflight(
        tmp_path,
        "srun: error: task 0 launch failed: Slurmd could not execve job",
        nodes=";".join(f"{n}=hpcplace-preflight: {n}: ok" for n in ("node-a", "node-b", "node-c", "node-d")),
    )
    assert lines == [
        "node-e: FAILED: device constraint failed on node node-e, or another part of Slurm's task set-up there: srun "
        'says "task 0 launch failed: Slurmd could not execve job" before the preflight could start (Slurm 25.05 and '
        "later fail a step whose ConstrainDevices limits cannot be applied; slurmd's log on node-e then says \"Could "
        "not apply device constrain\"); ask the cluster's admins, or leave the node out"
    ]


def test_a_launcher_that_cannot_start_is_not_taken_for_a_device_constraint(tmp_path: Path) -> None:
    lines, _ = _preflight(
        tmp_path,
        "slurmstepd-node-c: error: execve(): /v/hpcplace-run: No such file or directory\\n"
        "srun: error: node-c: task 0: Exited with exit code 2",
        nodes=";".join(f"{n}=hpcplace-preflight: {n}: ok" for n in ("node-a", "node-b", "node-d", "node-e")),
    )
    assert len(lines) == 1 and lines[0].startswith(
        "node-c: FAILED: cannot start the launcher /v/hpcplace-run on this node: No such file or directory"
    ), lines


def test_the_preflight_writes_its_nodes_file_itself(lab: Path, tmp_path: Path) -> None:
    """`hpcplace-run --preflight` names its file by SLURMD_NODENAME (what logs/nodes.txt holds), not srun's %N."""
    env = {
        **step_envs("2")[0],
        "HPCPLACE_PREFLIGHT_LOG": str(tmp_path / "preflight.{node}.out"),
        "HPCPLACE_PREFLIGHT_TIMEOUT": "20",
    }
    done = subprocess.run(
        shim_command("--preflight", "--plan", str(lab / "plan.json")),
        env={**base_env(), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout == done.stderr == "", done
    text = (tmp_path / "preflight.cpu-1.out").read_text()
    assert text.startswith("hpcplace-preflight: cpu-1: "), text
