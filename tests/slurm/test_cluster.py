"""The real-cluster tier (marker `slurm`): every example config submitted to the project's Slurm
test cluster, every task reporting (through hpcplace-run) where it ran, its ranks, environment and
the fake GPU device files it may open; the report must equal the plan exactly, under
ConstrainDevices=no and =yes. Plus fail-fast, the hostile-input canary, the CLI, cancel, refusals.
Every job goes in through the `hpcplace` command line as a user types it (tests/slurm/conftest.py `cli`,
`submit_cli`): a config file, `hpcplace submit CONFIG -o RUN_DIR` with validation on, `hpcplace status`."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from hpcplace.commands.slurm_cmds import default_launcher
from hpcplace.plan.plan import Plan
from hpcplace.plan.planner import plan_from_file
from hpcplace.slurm import submit, validate
from hpcplace.slurm.slurm_job import lower
from tests.slurm.conftest import (
    CLUSTER_DIR,
    REPO,
    REPORTER,
    JobShm,
    LiveCluster,
    RunStatus,
    cli,
    config_yaml,
    submit_cli,
    wait_done,
    with_command,
)

pytestmark = pytest.mark.slurm

# The command formats' examples (verl, OpenRLHF, slime: a launch block with the framework's command) run only
# as their framework's Ray driver; tests/ray/test_{verl,openrlhf}_slurm.py run those drivers' placement here.
# Examples with services (a reporter in place of a server is never ready) run in test_services_cluster.py.
EXAMPLES = [
    c
    for c in sorted((REPO / "configs").glob("*.yaml"))
    if "\nlaunch:" not in "\n" + c.read_text() and "\nservices:" not in "\n" + c.read_text()
]
JOB_TIMEOUT_S = 180


def reporter_command(reports: Path, *extra: str) -> tuple[str, ...]:
    return (sys.executable, str(REPORTER), str(reports), *extra)


def with_reporter(plan: Plan, reports: Path, *extra: str) -> Plan:
    command = reporter_command(reports, *extra)
    return replace(plan, components=tuple(replace(c, command=command) for c in plan.components))


def shm_dir(job_id: str) -> JobShm:
    """The job's /dev/shm directory on every node (each node has its own /dev/shm)."""
    return JobShm(job_id)


@dataclass(frozen=True)
class Run:
    """A job submitted with `hpcplace submit`, once ended: its plan as plan.json says, where it ran."""

    job_id: str
    run_dir: Path
    plan: Plan
    status: RunStatus
    reports: Path


def run_config(config: Path, tmp_path: Path, name: str = "run", *extra: str) -> Run:
    """Every component of `config` replaced by the reporter, submitted through the CLI, waited for."""
    reports = tmp_path / f"{name}-reports"
    reports.mkdir()
    (tmp_path / f"{name}-config").mkdir()
    config = with_command(config, tmp_path / f"{name}-config", reporter_command(reports, *extra))
    run_dir = tmp_path / name
    job_id = submit_cli(config, run_dir)
    status = wait_done(run_dir)
    return Run(job_id, run_dir, submit.load_plan(run_dir / "plan.json"), status, reports)


def host_devices(host: str) -> list[int]:
    folder = CLUSTER_DIR / "dev" / host
    return sorted(int(p.name[6:]) for p in folder.glob("nvidia*")) if folder.is_dir() else []


def expected_cuda(visible: list[str], mode: str) -> str:
    """CD=no: Slurm gives physical ids (the shim narrows to the plan's); CD=yes: task-local 0..k-1."""
    if mode == "no":
        return ",".join(visible)
    return ",".join(str(i) for i in range(len(visible)))


def check_reports(plan: Plan, run_dir: Path, reports: Path, mode: str) -> None:
    """Every planned process reported exactly once, on its planned host, with its planned ranks and
    exactly its planned devices; srun's task order is the step order the script relies on."""
    hosts = submit.read_hosts(run_dir)
    job = lower(plan)
    task_of = {}
    for step in job.steps:
        for task, rank in enumerate(step.ranks):
            task_of[(step.component, rank)] = (step.index, task)
    got = {
        (r["env"]["HPCPLACE_COMPONENT"], int(r["env"]["HPCPLACE_RANK"])): r
        for r in (json.loads(p.read_text()) for p in reports.glob("*.json"))
    }
    assert len(got) == plan.num_processes == len(list(reports.glob("*.json")))
    for comp in plan.components:
        for p in comp.processes:
            report = got[(comp.name, p.rank)]
            env = report["env"]
            where = f"{comp.name} rank {p.rank}"
            assert report["host"] == hosts[(p.het_group, p.group_node_index)], where
            assert env["RANK"] == str(p.rank) and env["LOCAL_RANK"] == str(p.local_rank), where
            assert env["WORLD_SIZE"] == str(comp.world_size), where
            assert env["SLURM_LOCALID"] == str(p.local_rank), where
            assert env["SLURM_PROCID"] == str(task_of[(comp.name, p.rank)][1]), where
            visible = list(p.visible_accelerators)
            assert env.get("CUDA_VISIBLE_DEVICES") == expected_cuda(visible, mode), where
            assert env.get("GPU_DEVICE_ORDINAL") == env.get("CUDA_VISIBLE_DEVICES"), where
            assert "SLURM_JOB_GPUS" not in env, where  # the batch step's value never leaks in
            # CD=no: a task may open every device file of its node (the plan may declare fewer GPUs
            # than the node has); CD=yes: exactly its planned GPUs
            want_devices = [int(v) for v in visible] if mode == "yes" else host_devices(report["host"])
            assert sorted(report["devices"]) == sorted(want_devices), where
            assert report["device_errors"] == {}, where
            assert report["shm_dir_exists"], where


def _fits(plan: Plan) -> validate.Report:
    return validate.check(with_reporter(plan, Path("/nonexistent")), validate.read_cluster_facts())


@pytest.mark.parametrize("config", EXAMPLES, ids=[c.stem for c in EXAMPLES])
def test_example_runs_exactly_as_planned(lab: LiveCluster, config: Path, tmp_path: Path) -> None:
    plan = plan_from_file(config)
    report = _fits(plan)
    if not report.ok:
        # the plan asks for hardware this test cluster lacks: the check must say which node group,
        # and `hpcplace submit` (validating) refuses it before sbatch
        assert all("node group" in p for p in report.problems), report.problems
        (tmp_path / "cfg").mkdir()
        refused = cli("submit", with_command(config, tmp_path / "cfg", ["true"]), "-o", tmp_path / "run")
        assert refused.returncode != 0 and "can never run on this cluster" in refused.stderr, refused
        assert not (tmp_path / "run" / "run.json").exists()
        return
    run = run_config(config, tmp_path)
    assert run.status.state == "COMPLETED", run.status.text
    check_reports(run.plan, run.run_dir, run.reports, lab.mode)
    assert shm_dir(run.job_id).left_after() == [], "the per-job /dev/shm directory was left behind"


LATE_LAUNCHER = """#!/bin/bash
# The rollout's tasks start their shim only once the job began stopping (its stop marker is there) and its stop
# signal came, absorbed here: a task whose process had not run yet when that signal came. The inference's tasks
# (one fails at once) start theirs only once every rollout task absorbs signals.
case " $* " in
*" --component rollout "*)
  stopped=
  trap stopped=1 TERM INT HUP USR1
  : >{ready}/"$SLURM_PROCID"
  for _ in $(seq 600); do [[ -n $stopped ]] && compgen -G {marker} >/dev/null && break; sleep 0.1; done;;
*" --component inference "*)
  for _ in $(seq 600); do (($(ls {ready} | wc -l) >= {rollouts})) && break; sleep 0.1; done;;
esac
exec {launcher} "$@"
"""


def test_a_task_that_starts_after_the_job_began_stopping_leaves_nothing(
    slurm_cluster: LiveCluster, tmp_path: Path
) -> None:
    """inference fails at once; the rollout's tasks start after the job script's stop signal (as a step launched
    just before the failure does on a loaded machine: run S of issue 36 left /dev/shm/hpcplace-<job> that way).
    Their shim makes no node-local directory that outlives the job and starts no program. kill_wait 60: the
    late tasks are never SIGKILLed before their shim ran, however slow this machine is."""
    source = REPO / "configs" / "hetero-partitions.yaml"
    reports, ready, run_dir = tmp_path / "reports", tmp_path / "ready", tmp_path / "run"
    for folder in (reports, ready, tmp_path / "cfg"):
        folder.mkdir()
    config = with_command(source, tmp_path / "cfg", reporter_command(reports))
    launcher = tmp_path / "late-launcher"
    launcher.write_text(
        LATE_LAUNCHER.format(
            ready=shlex.quote(str(ready)),
            rollouts=len(plan_from_file(source).component("rollout").processes),
            marker=shlex.quote(f"{run_dir}/.stopping-") + "*",
            launcher=shlex.join(default_launcher()),
        ),
        encoding="utf-8",
    )
    launcher.chmod(0o755)
    env = {**slurm_cluster.env, "HPCPLACE_TEST_FAIL": "inference:1", "HPCPLACE_TEST_HOLD": "120"}
    job_id = submit_cli(config, run_dir, "--launcher", str(launcher), overrides=["slurm.kill_wait=60"], env=env)
    status = wait_done(run_dir)
    assert status.state == "FAILED" and status.code == 10, status.text
    batch = next((run_dir / "logs").glob("batch-*.out")).read_text()
    assert "component 'inference' (3 tasks; ranks 0-2) exited with code 7" in batch, batch
    assert "still running after 60s" not in batch, batch  # the late rollout tasks ended by themselves
    logs = "\n".join(p.read_text(errors="replace") for p in (run_dir / "logs").rglob("*") if p.is_file())
    assert "rollout rank 0: the job is stopping (stopped before this task started): not starting it" in logs, logs
    assert not list(reports.glob("rollout*")), "a rollout program started after the job began stopping"
    assert shm_dir(job_id).left_after() == []


def test_irregular_layouts(lab: LiveCluster, tmp_path: Path) -> None:
    """Different task counts per node, several GPUs per process, a component spanning
    three het groups, GPU-less and robot groups, unused nodes (relative placement)."""
    config = config_yaml(
        tmp_path,
        """
        name: irregular
        cluster:
          node_groups:
            - {label: a800, partition: a800, nodes: 2, gpus_per_node: 8, gpu_type: a800}
            - {label: rtx4090, partition: rtx4090, nodes: 1, gpus_per_node: 4, gpu_type: rtx4090}
            - {label: cpu, partition: cpu, nodes: 1}
            - {label: robot, partition: robot, nodes: 1, hardware: {type: robot, count: 4}}
          component_placement:
            ragged: {node_group: a800, placement: "0-1:0-3,3-5,7-10:7-14"}
            pairs: {node_group: rtx4090, placement: "0-1:0,2-3:1"}
            span: {node_group: node, placement: "0-4:0-9"}
            arm: {node_group: robot, placement: "1-3:0-2"}
        components: {}
        """,
    )
    run = run_config(config, tmp_path)
    assert len(lower(run.plan).steps) >= 5  # ragged needs two steps
    assert run.status.state == "COMPLETED", run.status.text
    check_reports(run.plan, run.run_dir, run.reports, lab.mode)


def test_failing_step_fails_fast(slurm_cluster: LiveCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCPLACE_TEST_FAIL", "inference:1")
    monkeypatch.setenv("HPCPLACE_TEST_HOLD", "120")  # everyone else would run for two minutes
    t0 = time.monotonic()
    run = run_config(REPO / "configs" / "hetero-partitions.yaml", tmp_path)
    elapsed = time.monotonic() - t0
    assert run.status.state == "FAILED", run.status.text
    assert run.status.code == 10, run.status.text
    assert elapsed < 60, f"the job took {elapsed:.0f} s: the other steps were not stopped"
    batch = next((run.run_dir / "logs").glob("batch-*.out")).read_text()
    # the headline names the rank that failed first and its own code (srun's may be the others' 143)
    assert (
        "FAILED: component 'inference' (3 tasks; ranks 0-2) exited with code 7: rank 1 on rtx4090-1 failed first"
        in batch
    ), batch
    assert "component 'inference' rank 1 on rtx4090-1: Exited with exit code 7" in batch
    assert run.status.exit_codes[0] == "7:0", run.status.text  # the failing task's code, not srun's 143
    assert shm_dir(run.job_id).left_after() == []  # the job ends before its steps' last task exits
    failing = cli("logs", run.run_dir, "--component", "inference", "--rank", "1")
    assert failing.returncode == 0 and "failing on purpose" in failing.stdout, failing
    # status by job id: the run directory is found; the failure is summarised with the rank's last lines
    by_id = cli("status", run.job_id)
    assert by_id.returncode == 10 and f"  run directory: {run.run_dir}" in by_id.stdout, by_id
    assert "het 1 rtx4090" in by_id.stdout and "het 0 ?" not in by_id.stdout, by_id.stdout
    assert "component 'inference' failed first: the job fails with exit code 7" in by_id.stdout, by_id.stdout
    assert "| reporter: failing on purpose as inference:1" in by_id.stdout, by_id.stdout
    wrong = cli("logs", run.job_id, "--component", "inference", "--rank", "9")
    assert wrong.returncode == 2 and "its ranks are 0-2" in wrong.stderr, wrong


def test_a_component_over_three_het_groups_names_its_failing_rank_and_logs(
    slurm_cluster: LiveCluster, tmp_path: Path
) -> None:
    """srun numbers a het step's tasks per het group in its messages (`cpu-1: task 0`) and, on Slurm 22.05,
    adds the group's index to %t in file names (0,1 | 3,4 | 6,7): the batch log, status and logs name
    each rank by its group's own task order."""
    # Rank 4 fails once every rank has said who it is: a rank the failure stops before its print reaches its log
    # would prove nothing about the logs (seen on a loaded machine).
    said = tmp_path / "said"
    said.mkdir()
    program = tmp_path / "rank.py"
    program.write_text(
        "import os, pathlib, sys, time\n"
        "rank = os.environ['RANK']\n"
        "print('I am rank', rank, flush=True)\n"
        f"said = pathlib.Path({str(said)!r})\n"
        "(said / rank).touch()\n"
        "end = time.time() + 120\n"
        "while rank == '4' and len(os.listdir(said)) < 6 and time.time() < end:\n"
        "    time.sleep(0.1)\n"
        "sys.exit(7 if rank == '4' else 0)\n"
    )
    config = config_yaml(
        tmp_path,
        f"""
        name: span3
        cluster:
          node_groups:
            - {{label: a800, partition: a800, nodes: 1, gpus_per_node: 8, gpu_type: a800}}
            - {{label: rtx4090, partition: rtx4090, nodes: 1, gpus_per_node: 4, gpu_type: rtx4090}}
            - {{label: cpu, partition: cpu, nodes: 1}}
          component_placement:
            span: {{node_group: node, placement: "0-2:0-5"}}
        components:
          span: {{command: [{sys.executable}, "{program}"]}}
        """,
    )
    run_dir = tmp_path / "run"
    submit_cli(config, run_dir)
    status = wait_done(run_dir)
    assert status.state == "FAILED", status.text
    hosts = submit.read_hosts(run_dir)
    batch = next((run_dir / "logs").glob("batch-*.out")).read_text()
    assert f"exited with code 7: rank 4 on {hosts[(2, 0)]} failed first" in batch, batch
    assert f"component 'span' rank 4 on {hosts[(2, 0)]}: Exited with exit code 7" in batch, batch
    assert "| I am rank 4" in status.text, status.text  # the failing rank's own log
    for rank in range(6):
        shown = cli("logs", run_dir, "--component", "span", "--rank", str(rank))
        assert shown.returncode == 0 and f"I am rank {rank}" in shown.stdout, (rank, shown.stdout)


def _hostile(canary: Path) -> list[str]:
    return [
        "a 0",
        'a"=0"',
        "a'; touch " + str(canary),
        f"$(touch {canary})",
        f"`touch {canary}`",
        f"x; touch {canary} #",
        "back\\slash",
        "new\nline",
        "${HOME}",
        "&& touch " + str(canary),
    ]


def test_hostile_canary(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """Values a shell would act on, typed into a config's command and the run directory given to
    `hpcplace submit -o`, reach the program and sbatch verbatim; the canary file is never created."""
    canary = tmp_path / "canary"
    hostile = _hostile(canary)
    reports = tmp_path / "reports"
    reports.mkdir()
    (tmp_path / "cfg").mkdir()
    config = with_command(
        REPO / "configs" / "hetero-partitions.yaml", tmp_path / "cfg", reporter_command(reports, *hostile)
    )
    run_dir = tmp_path / f"run dir 'q' \"d\" $(touch {canary}) ;x"
    job_id = submit_cli(config, run_dir)
    status = wait_done(run_dir)
    assert status.state == "COMPLETED", status.text
    plan = submit.load_plan(run_dir / "plan.json")
    got = [json.loads(p.read_text()) for p in reports.glob("*.json")]
    assert len(got) == plan.num_processes
    assert all(r["argv"] == hostile for r in got)
    assert not canary.exists(), "a hostile value was executed"
    # sbatch read --chdir back exactly (scontrol; slurmdbd stores `"` as a backquote)
    assert submit.slurm_cli.show_job(job_id)[0]["WorkDir"] == str(run_dir)


def test_hostile_names_stay_inert(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """Defence in depth, through the Python API on purpose: a config cannot name a component or a job
    like this (the parser refuses it, file:line:col), but a plan built in Python can; rendered into
    the script, such names are still never executed."""
    canary = tmp_path / "canary"
    hostile = _hostile(canary)
    plan = plan_from_file(REPO / "configs" / "hetero-partitions.yaml")
    comps = list(plan.components)
    comps[2] = replace(comps[2], name="inf 'q' $(touch " + str(canary) + ")")  # a hostile component name
    plan = replace(plan, name=f"job $(touch {canary})", components=tuple(comps))
    reports = tmp_path / "reports"
    reports.mkdir()
    plan = with_reporter(plan, reports, *hostile)
    run_dir = tmp_path / f"run dir 'q' \"d\" $(touch {canary}) ;x"
    done = submit.submit(plan, run_dir)
    status = wait_done(run_dir)
    assert status.state == "COMPLETED", status.text
    got = [json.loads(p.read_text()) for p in reports.glob("*.json")]
    assert len(got) == plan.num_processes
    assert all(r["argv"] == hostile for r in got)
    assert {r["env"]["HPCPLACE_COMPONENT"] for r in got} == {c.name for c in plan.components}
    assert not canary.exists(), "a hostile value was executed"
    assert submit.slurm_cli.show_job(done.job_id)[0]["WorkDir"] == str(run_dir)


def test_cli_submit_status_logs_cancel(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    config = tmp_path / "demo.yaml"
    reporter = shlex.join([sys.executable, str(REPORTER), str(reports)])
    config.write_text(f"""
name: cli-demo
cluster:
  node_groups:
    - {{label: a800, partition: a800, nodes: 1, gpus_per_node: 8, gpu_type: a800}}
    - {{label: cpu, partition: cpu, nodes: 1}}
  component_placement:
    actor: {{node_group: a800, placement: "0-3"}}
    agent: {{node_group: cpu, placement: "0:0-1"}}
components:
  actor: {{command: {json.dumps(reporter)}}}
  agent: {{command: {json.dumps(reporter)}}}
""")
    dry = cli("submit", config, "--dry-run", "-o", tmp_path / "dry")
    assert dry.returncode == 0 and "#SBATCH hetjob" in dry.stdout and not (tmp_path / "dry").exists()
    test_only = cli("submit", config, "--test-only")
    assert test_only.returncode == 0 and "to start at" in test_only.stdout, test_only.stderr
    run_dir = tmp_path / "run"
    job_id = submit_cli(config, run_dir)
    assert json.loads((run_dir / "run.json").read_text())["job_id"] == job_id
    again = cli("submit", config, "-o", run_dir)
    assert again.returncode == 0 and "already submitted" not in again.stderr  # said once, on stdout
    assert f"already submitted as job {job_id} ({run_dir}); nothing submitted" in again.stdout, again.stdout
    watch = cli("status", run_dir, "--watch", "--interval", "0.3", timeout=JOB_TIMEOUT_S)
    assert watch.returncode == 0, watch.stderr
    assert "COMPLETED" in watch.stdout.splitlines()[-1] or "COMPLETED" in watch.stdout
    assert f"job {job_id}: COMPLETED" in watch.stdout and "het 1 cpu" in watch.stdout
    logs = cli("logs", run_dir, "--component", "agent", "--rank", "1", "--list")
    assert logs.returncode == 0 and "agent rank 1 (het 1 node 0 (cpu-1), task 1)" in logs.stdout
    by_id = cli("logs", job_id, "--component", "agent", "--rank", "1", "--list")  # the run found from the job
    assert by_id.returncode == 0 and by_id.stdout == logs.stdout, by_id
    # cancel: a long job, cancelled while running; every component ends CANCELLED, /dev/shm cleaned
    for old in reports.glob("*.json"):
        old.unlink()
    held_id = submit_cli(config, tmp_path / "held", env={**slurm_cluster.env, "HPCPLACE_TEST_HOLD": "120"})
    deadline = time.monotonic() + 60
    while len(list(reports.glob("*.json"))) < 6 and time.monotonic() < deadline:  # every process started
        time.sleep(0.2)
    cancel = cli("cancel", tmp_path / "held")
    assert cancel.returncode == 0, cancel.stderr
    status = wait_done(tmp_path / "held", 60)
    assert status.code == 11 and status.components, status.text
    assert all(" CANCELLED" in line for line in status.components), status.text
    assert shm_dir(held_id).left_after(20) == []


def test_slurm_refusal_names_node_group(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    refused = """
        name: refused
        cluster:
          node_groups:
            - {label: big, partition: PARTITION, nodes: 1, gpus_per_node: 8, gpu_type: GPU}
            - {label: cpu, partition: cpu, nodes: 1}
          component_placement: {w: {node_group: big, placement: "0"}, v: {node_group: cpu, placement: "0"}}
        components: {w: {command: ["true"]}, v: {command: ["true"]}}
        """
    config = config_yaml(tmp_path, refused.replace("PARTITION", "a800").replace("GPU", "h100"))
    checked = cli("validate", config)
    assert checked.returncode != 0, checked
    assert re.search(r"node group 'big' \(het component 0, partition 'a800'\): needs 1 node", checked.stderr), checked
    validated = cli("submit", config, "-o", tmp_path / "run0")  # validation on: refused before sbatch
    assert validated.returncode != 0 and "node group 'big'" in validated.stderr, validated
    assert not (tmp_path / "run0" / "run.json").exists()
    skipped = cli("submit", config, "-o", tmp_path / "run", "--no-validate")  # what sbatch says without it
    assert skipped.returncode != 0, skipped
    assert re.search(r"Requested node configuration is not available[\s\S]*node group 'big'", skipped.stderr), skipped
    assert not (tmp_path / "run" / "run.json").exists() and not (tmp_path / "run" / "submit.lock").exists()
    missing = config_yaml(tmp_path, refused.replace("PARTITION", "nosuch").replace("GPU", "a800"), "missing.yaml")
    skipped = cli("submit", missing, "-o", tmp_path / "run2", "--no-validate")
    assert skipped.returncode != 0, skipped
    assert re.search(r"invalid partition specified: nosuch[\s\S]*node group 'big'", skipped.stderr), skipped


def test_collocated_demo_runs_on_the_cluster(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """Issue 5's example, unchanged, through `hpcplace submit` from the repository root: actor and rollout
    take turns on the same GPUs of one node, weights cross /dev/shm, the rollout sees every version."""
    run_dir = tmp_path / "demo"
    job_id = submit_cli("configs/collocated-demo.yaml", run_dir, cwd=REPO)
    status = wait_done(run_dir)
    logs = "\n".join(p.read_text(errors="replace") for p in sorted((run_dir / "logs").glob("*")) if p.is_file())
    assert status.state == "COMPLETED", status.text + "\n" + logs[-3000:]
    for rank in (0, 1):
        seen = [line for line in logs.splitlines() if line.startswith(f"rollout[{rank}] gen")]
        assert [line.split("weights v")[1].split()[0] for line in seen] == ["0", "1", "2", "3"], logs[-3000:]
    assert shm_dir(job_id).left_after() == []


def test_no_partition_validates_against_the_default_partition(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """An RLinf config naming no partition: no --partition is rendered and validate names the live
    cluster's default partition (cpu on the test cluster)."""
    config = tmp_path / "nopart.yaml"
    config.write_text(
        "cluster:\n  num_nodes: 1\n  component_placement:\n"
        "    agent: {node_group: node, placement: '0:0-1'}\nslurm: {gpus_per_node: 0}\n"
    )
    plan = plan_from_file(config)
    assert plan.cluster.node_groups[0].partition is None
    report = _fits(plan)
    assert report.ok, report.problems
    assert any("default partition 'cpu'" in c for c in report.checked), report.checked
    assert not any(a.startswith("--partition") for a in lower(plan).components[0].sbatch_args)


def test_rlinf_interleaved_node_ranks_land_as_planned(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """RLinf node groups over interleaved cluster node ranks (a800 = nodes 2,0 listed out of order,
    rtx4090 = node 1, cpu = node 3): each group is one het component holding exactly its nodes, and
    every task runs on the host of its planned cluster node rank with its planned GPUs."""
    config = config_yaml(
        tmp_path,
        """
        cluster:
          num_nodes: 4
          component_placement:
            actor: {node_group: a800, placement: "0-15:0-3"}
            rollout: {node_group: rtx4090, placement: "0-3:0-1"}
            env: {node_group: cpu, placement: "0:0-1"}
            probe: {node_group: node, placement: "0-3"}
            ref: "0-19:0-4"
          node_groups:
            - {label: a800, node_ranks: "2,0"}
            - {label: rtx4090, node_ranks: 1}
            - {label: cpu, node_ranks: 3}
        slurm:
          node_groups:
            a800: {partition: a800, gpus_per_node: 8, gpu_type: a800}
            rtx4090: {partition: rtx4090, gpus_per_node: 4, gpu_type: rtx4090}
            cpu: {partition: cpu, gpus_per_node: 0}
        """,
        name="rlinf-interleaved.yaml",
    )
    run = run_config(config, tmp_path)
    plan, reports = run.plan, run.reports
    assert [(g.label, g.node_ranks) for g in plan.cluster.node_groups] == [
        ("a800", (0, 2)),
        ("rtx4090", (1,)),
        ("cpu", (3,)),
    ]
    assert run.status.state == "COMPLETED", run.status.text
    check_reports(plan, run.run_dir, reports, slurm_cluster.mode)
    # cluster node rank -> host: ranks 0 and 2 are the a800 component's two hosts, in that order
    hosts = submit.read_hosts(run.run_dir)
    host_of = {n.rank: hosts[(n.group_index, n.index_in_group)] for n in plan.cluster.nodes}
    assert [host_of[r].split("-")[0] for r in range(4)] == ["a800", "rtx4090", "a800", "cpu"]
    assert host_of[0] != host_of[2]
    got = [json.loads(p.read_text()) for p in reports.glob("*.json")]
    for r in got:
        comp = plan.component(r["env"]["HPCPLACE_COMPONENT"])
        p = comp.processes[int(r["env"]["HPCPLACE_RANK"])]
        assert r["host"] == host_of[p.cluster_node_rank], (comp.name, p.rank)
        assert r["env"]["HPCPLACE_NODE_RANK"] == str(p.cluster_node_rank), (comp.name, p.rank)
    # RLinf's rule, stated independently: the default group walks GPUs over nodes 0 (8), 1 (4), 2 (8)
    ref = plan.component("ref").processes
    assert [(p.cluster_node_rank, p.visible_accelerators[0]) for p in ref] == [
        (0, "0"),
        (0, "4"),
        (1, "0"),
        (2, "0"),
        (2, "4"),
    ]


def test_rlinf_robot_group_with_uneven_hardware_lands_as_planned(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """An RLinf robot node group over two nodes (the a800 partition) whose Franka configs all name node 1:
    node 0 has none, so hardware ranks 0 and 1 are node 1's two arms. The group renders without a GRES
    (the fewest per node is 0), is allocated, and each env task runs on the host of group node 1 with
    its planned LOCAL_HARDWARE_RANKS; the probe on node 0 still runs there."""
    config = config_yaml(
        tmp_path,
        """
        cluster:
          num_nodes: 3
          component_placement:
            env: {node_group: franka, placement: 0-1}
            actor: {node_group: gpu, placement: 0-3}
            probe: {node_group: node, placement: 0-2}
          node_groups:
            - label: franka
              node_ranks: 0-1
              hardware:
                type: Franka
                configs:
                  - {node_rank: 1, robot_ip: 10.0.0.11, disable_validate: true}
                  - {node_rank: 1, robot_ip: 10.0.0.12, disable_validate: true}
            - {label: gpu, node_ranks: 2}
        slurm:
          node_groups:
            franka: {partition: a800, gpus_per_node: 0}
            gpu: {partition: rtx4090, gpus_per_node: 4, gpu_type: rtx4090}
        """,
        name="rlinf-uneven-robots.yaml",
    )
    run = run_config(config, tmp_path)
    plan, reports = run.plan, run.reports
    assert plan.cluster.node_groups[0].hardware.per_node == (0, 2)  # type: ignore[union-attr]
    assert lower(plan).components[0].gres is None
    assert run.status.state == "COMPLETED", run.status.text
    check_reports(plan, run.run_dir, reports, slurm_cluster.mode)
    hosts = submit.read_hosts(run.run_dir)
    got = {
        (r["env"]["HPCPLACE_COMPONENT"], int(r["env"]["HPCPLACE_RANK"])): r
        for r in (json.loads(p.read_text()) for p in reports.glob("*.json"))
    }
    robot_host = hosts[(0, 1)]
    assert robot_host.startswith("a800-") and robot_host != hosts[(0, 0)]
    for rank in (0, 1):
        env = got[("env", rank)]
        assert env["host"] == robot_host and env["env"]["LOCAL_HARDWARE_RANKS"] == str(rank)
        assert env["env"]["NODE_GROUP_LABEL"] == "franka"
    assert got[("probe", 0)]["host"] == hosts[(0, 0)]  # the robot-less node is allocated and runs its task


def test_rlinf_experiment_as_its_checkout_has_it(lab: LiveCluster, tmp_path: Path) -> None:
    """An RLinf experiment as the checkout has it: `hydra.searchpath` through EMBODIED_PATH, which the shell
    did not export, and no GPU count (RLinf discovers it on the node). `hpcplace submit` composes it with the
    EMBODIED_PATH the framework's run script would export, reads 8 GPUs per node from partition a800, and
    every process runs on its planned GPUs with that EMBODIED_PATH."""
    embodied = tmp_path / "RLinf" / "examples" / "embodiment"
    (embodied / "config" / "model").mkdir(parents=True)
    (embodied / "config" / "model" / "small.yaml").write_text("tensor_model_parallel_size: 1\n")
    reports = tmp_path / "reports"
    reports.mkdir()
    config = config_yaml(
        embodied / "config",
        f"""
        defaults:
          - model@actor.model: small
          - _self_
        hydra:
          searchpath:
            - file://${{oc.env:EMBODIED_PATH}}/config/
        cluster:
          num_nodes: 1
          component_placement:
            actor: 0-5
            env: 6-7
        hpcplace:
          components:
            actor: {{command: {json.dumps(list(reporter_command(reports)))}}}
            env: {{command: {json.dumps(list(reporter_command(reports)))}}}
        """,
        name="experiment.yaml",
    )
    env = {k: v for k, v in os.environ.items() if k != "EMBODIED_PATH"}
    submit_cli(config, tmp_path / "run", overrides=["slurm.partition=a800"], env=env)
    status = wait_done(tmp_path / "run")
    assert status.state == "COMPLETED", status.text
    plan = submit.load_plan(tmp_path / "run" / "plan.json")
    assert plan.cluster.node_groups[0].gpus_per_node == (8,)
    check_reports(plan, tmp_path / "run", reports, lab.mode)
    got = [json.loads(p.read_text()) for p in reports.glob("*.json")]
    assert {r["env"].get("EMBODIED_PATH") for r in got} == {str(embodied.resolve())}
