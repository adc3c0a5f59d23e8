"""The rendered batch script executed by bash with a fake `srun`/`scontrol` on PATH: fail fast, the
failing component and rank named, leaked GPU variables cleared, cleanup, and hostile values that
reach srun verbatim while nothing unintended runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from hpcplace.config.cluster import Cluster
from hpcplace.errors import SpecError
from hpcplace.plan.plan import Plan
from hpcplace.plan.planner import plan_from_file
from hpcplace.slurm.render import render_run
from hpcplace.slurm.slurm_job import lower, segment_srun_args
from tests.slurm.conftest import HOSTILE, REPO, hostile_values
from tests.slurm.sbatch_readback import read_sbatch_options

FAKEBIN = Path(__file__).with_name("fakebin")


def run_script(run_dir: Path, tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], list[dict], str]:
    fake = tmp_path / "fake"
    fake.mkdir(exist_ok=True)
    full = dict(os.environ)
    full.update(
        {
            "PATH": f"{FAKEBIN}:{os.environ['PATH']}",
            "FAKE_DIR": str(fake),
            "SLURM_JOB_ID": "4242",
            "SLURM_JOB_NODELIST_HET_GROUP_0": "node-a,node-b",
            "SLURM_JOB_NODELIST_HET_GROUP_1": "node-c",
            "SLURM_JOB_NODELIST_HET_GROUP_2": "node-d",
            "SLURM_JOB_NODELIST_HET_GROUP_3": "node-e",
            "SLURM_JOB_NODELIST": "node-a,node-b",
            # what the batch step of a GPU component leaks into every step
            "CUDA_VISIBLE_DEVICES": "0,1",
            "GPU_DEVICE_ORDINAL": "0,1",
            "ROCR_VISIBLE_DEVICES": "0,1",
            "SLURM_JOB_GPUS": "0,1",
        }
    )
    full.update(env)
    res = subprocess.run(
        ["bash", str(run_dir / "job.sbatch")], env=full, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    calls = []
    for argv_file in sorted(fake.glob("call-*.argv")):
        leaked = argv_file.with_suffix(".leaked").read_text().split()
        calls.append({"argv": argv_file.read_bytes().decode().split("\0")[:-1], "leaked": leaked})
    events = (fake / "events.txt").read_text() if (fake / "events.txt").exists() else ""
    return res, calls, events


def _steps(calls: list[dict]) -> list[dict]:
    return [
        c
        for c in calls
        if "--job-name=hpcplace-shm" not in c["argv"] and "--job-name=hpcplace-preflight" not in c["argv"]
    ]


@pytest.fixture(scope="module")
def hetero() -> Plan:
    return plan_from_file(REPO / "configs" / "hetero-partitions.yaml")


def test_success_runs_every_step_with_exact_arguments(hetero: Plan, tmp_path: Path) -> None:
    rendered = render_run(hetero, tmp_path / "run")
    res, calls, events = run_script(rendered.run_dir, tmp_path)
    assert res.returncode == 0, res.stderr
    assert "hpcplace: all steps finished" in res.stderr
    job = lower(hetero)
    steps = _steps(calls)
    assert len(steps) == len(job.steps)
    for call in calls:
        assert call["leaked"] == [], "GPU variables of the batch step reached srun"
    by_component = {c["argv"][c["argv"].index("--component") + 1]: c["argv"] for c in steps}
    for step in job.steps:
        argv = by_component[step.component]
        seg = step.segments[0]
        assert argv[: len(segment_srun_args(job, step, seg))] == list(segment_srun_args(job, step, seg))
        # the command travels in plan.json, never on srun's argv (srun splits its argv at a bare ':')
        assert "--" not in argv and argv[-2:] == ["--component", step.component]
    assert "guard started" in events and "USR1 hpcplace-shm" in events  # the /dev/shm guard was stopped
    assert "preflight" in events and "hpcplace: preflight passed on 5 node(s) in" in res.stderr, res.stderr[:600]
    nodes = (rendered.run_dir / "logs" / "nodes.txt").read_text().split("\n")
    assert nodes[:3] == ["0 0 node-a", "0 1 node-b", "1 0 node-c"]


def test_failing_step_fails_fast_and_names_component_and_rank(hetero: Plan, tmp_path: Path) -> None:
    rendered = render_run(hetero, tmp_path / "run")
    t0 = time.monotonic()
    res, _, events = run_script(rendered.run_dir, tmp_path, FAKE_FAIL="inference", FAKE_SLEEP="120")
    elapsed = time.monotonic() - t0
    assert res.returncode == 7
    assert elapsed < 60, "the other steps were not stopped"
    assert "FAILED: component 'inference' (3 tasks; ranks 0-2) exited with code 7" in res.stderr
    assert "component 'inference' rank 1 on node-a: Exited with exit code 7" in res.stderr
    assert "component 'inference' ranks 0,2 on node-a: Killed" in res.stderr
    # every task of every other step got SIGTERM (scancel --signal=TERM JOBID), none was SIGKILLed
    assert "scancel --signal=TERM 4242" in events
    terminated = {line.split()[-1] for line in events.splitlines() if " task-TERM " in line}
    assert {"actor", "rollout", "env", "agent"} <= terminated
    assert "srun-TERM" not in events
    assert "component 'inference' failed first: the job fails with exit code 7" in res.stderr
    assert "stopping the other components with SIGTERM to every task" in res.stderr
    assert "SIGKILL after 2s" in res.stderr  # the cluster's KillWait (fake scontrol show config)
    assert "component 'agent' (4 tasks) stopped (srun exit 0)" in res.stderr
    assert "hpcplace-shm" in events  # the guard was stopped


def test_headline_names_the_first_failing_rank_and_its_own_code(hetero: Plan, tmp_path: Path) -> None:
    """Rank 2 exits 1, srun then terminates the others (exit 143) and itself exits 143: the headline
    names rank 2 and code 1, not 143."""
    rendered = render_run(hetero, tmp_path / "run")
    res, _calls, _events = run_script(rendered.run_dir, tmp_path, FAKE_FAIL="inference", FAKE_FAIL_STOPPED="1")
    assert res.returncode == 1, res.stderr
    assert (
        "FAILED: component 'inference' (3 tasks; ranks 0-2) exited with code 1: rank 2 on node-a failed first "
        "(srun exited 143: the other ranks were stopped)"
    ) in res.stderr, res.stderr
    assert "exited with code 143" not in res.stderr
    assert "component 'inference' failed first: the job fails with exit code 1" in res.stderr


def test_stubborn_step_gets_sigkill_after_the_grace(hetero: Plan, tmp_path: Path) -> None:
    """A step whose tasks ignore SIGTERM is killed (srun cancels it) after slurm.kill_wait seconds."""
    plan = replace(hetero, slurm={**hetero.slurm, "kill_wait": "1"})
    rendered = render_run(plan, tmp_path / "run")
    assert "hp_kill_wait=1 " in rendered.script.read_text()
    t0 = time.monotonic()
    res, _, events = run_script(
        rendered.run_dir,
        tmp_path,
        FAKE_FAIL="inference",
        FAKE_SLEEP="120",
        FAKE_STUBBORN="rollout",
        FAKE_KILL_WAIT="60",
    )
    elapsed = time.monotonic() - t0
    assert res.returncode == 7, res.stderr
    assert elapsed < 30, "SIGKILL came after the cluster's KillWait (60 s), not slurm.kill_wait (1 s)"
    assert "SIGKILL after 1s" in res.stderr
    assert "still running after 1s: 'rollout'; SIGKILL" in res.stderr
    assert "srun-TERM rollout" in events and "srun-TERM actor" not in events
    attempts = [json.loads(line) for line in (rendered.run_dir / "attempts.jsonl").read_text().splitlines()]
    assert [(a["attempt"], a["event"], a.get("exit_code")) for a in attempts] == [(0, "start", None), (0, "end", 7)]


def test_failed_preflight_stops_the_job_before_any_step(hetero: Plan, tmp_path: Path) -> None:
    """One line per failing node and cause, in the batch log and logs/preflight.txt; no step starts."""
    rendered = render_run(hetero, tmp_path / "run", launcher=("/tmp/v/bin/hpcplace-run",))
    execve = "slurmstepd: error: execve(): /tmp/v/bin/hpcplace-run: No such file or directory"
    # slurmstepd's line reaches srun's stderr (the preflight never ran on node-a, so wrote no file there)
    res, calls, events = run_script(
        rendered.run_dir,
        tmp_path,
        FAKE_PREFLIGHT_ERR=(f"{execve}\\nsrun: error: node-a: task 0: Exited with exit code 2"),
        FAKE_PREFLIGHT=";".join(
            [
                "node-b=hpcplace-preflight: node-b: ok: 8 GPU(s)",
                "node-c=hpcplace-preflight: node-c: FAILED: the node shows 3 GPU(s) (/dev/nvidia{0,1,2}), but the plan expects 4",
                "node-d=Segmentation fault",
            ]
        ),
    )
    assert res.returncode == 1, res.stderr
    assert _steps(calls) == [] and "USR1 hpcplace-shm" in events
    lines = (rendered.run_dir / "logs" / "preflight.txt").read_text().splitlines()
    assert lines == [
        "node-a: FAILED: cannot start the launcher /tmp/v/bin/hpcplace-run on this node: No such file or directory (it, "
        "or the interpreter on its #! line, is not on this node: a venv on a node-local or private path such as /tmp? "
        "Install hpcplace where every node sees it)",
        "node-c: FAILED: the node shows 3 GPU(s) (/dev/nvidia{0,1,2}), but the plan expects 4",
        "node-d: FAILED: the preflight did not report (srun exit 2): Segmentation fault",
        "node-e: FAILED: no preflight output from this node (srun exit 2; see logs/preflight.srun.err)",
    ]
    assert "no program was started" in res.stderr
    for line in lines:
        assert f"hpcplace:   preflight: {line}\n" in res.stderr


def test_preflight_off(hetero: Plan, tmp_path: Path) -> None:
    rendered = render_run(replace(hetero, slurm={**hetero.slurm, "preflight": "false"}), tmp_path / "run")
    res, _, events = run_script(rendered.run_dir, tmp_path, FAKE_PREFLIGHT="node-a=x")
    assert res.returncode == 0, res.stderr
    assert "preflight" not in events and "preflight" not in res.stderr


def test_cpu_only_and_every_step_clear_leaked_variables(tmp_path: Path) -> None:
    plan = plan_from_file(REPO / "configs" / "roll-example.yaml")
    plan = replace(plan, components=tuple(replace(c, command=("true",)) for c in plan.components))
    rendered = render_run(plan, tmp_path / "run")
    res, calls, _ = run_script(
        rendered.run_dir,
        tmp_path,
        SLURM_JOB_NODELIST_HET_GROUP_0="node-a,node-b",
        SLURM_JOB_NODELIST_HET_GROUP_1="node-c",
    )
    assert res.returncode == 0, res.stderr
    assert calls and all(c["leaked"] == [] for c in calls)


# ------------------------------------------------------------------------------------------------
# hostile inputs


def hostile_plan(plan: Plan, value: str, canary: Path) -> Plan:
    if "\n" in value or "\\" in value or not value.replace("\t", " ").isprintable():
        # a partition sbatch could not read back from an #SBATCH line: refused when the node group is made
        with pytest.raises(SpecError, match=r"#SBATCH lines cannot hold|control character|backslash"):
            replace(plan.cluster.node_groups[0], partition=value)
        groups = plan.cluster.node_groups
    else:
        groups = tuple(replace(g, partition=value) if i == 0 else g for i, g in enumerate(plan.cluster.node_groups))
    comps = list(plan.components)
    comps[0] = replace(comps[0], name=value, command=("printf", "%s\n", value, "$(touch " + str(canary) + ")"))
    comps[0] = replace(comps[0], env={"HOSTILE": value})
    return replace(plan, name=value, cluster=Cluster(groups), components=tuple(comps), source=value)


@pytest.mark.parametrize("index", range(len(HOSTILE)), ids=[repr(h)[1:-1][:20] for h in HOSTILE])
def test_hostile_values_render_safely(hetero: Plan, tmp_path: Path, index: int) -> None:
    canary = tmp_path / "canary"
    value = hostile_values(canary)[index]
    plan = hostile_plan(hetero, value, canary)
    run_dir = tmp_path / (
        "run " + "".join(c if c == "\t" or (c.isprintable() and c not in "/\\") else "_" for c in value)
    )
    rendered = render_run(plan, run_dir)
    script = rendered.script.read_text()
    check = subprocess.run(["bash", "-n", str(rendered.script)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    job = lower(plan)
    options = read_sbatch_options(script)
    assert options[0][: len(job.components[0].sbatch_args)] == list(job.components[0].sbatch_args)
    assert f"--chdir={run_dir}" in options[0]
    assert json.loads(rendered.plan_json.read_text())["components"][0]["name"] == value
    res, calls, _ = run_script(rendered.run_dir, tmp_path)
    assert res.returncode == 0, res.stderr
    step = next(c["argv"] for c in _steps(calls) if c["argv"][c["argv"].index("--component") + 1] == value)
    assert "--" not in step  # the command is read from plan.json by the shim
    plan_json = json.loads(rendered.plan_json.read_text())
    assert plan_json["components"][0]["command"] == ["printf", "%s\n", value, f"$(touch {canary})"]
    assert all(c.isprintable() or c in "\n\t" for c in script), "a raw control character reached job.sbatch"
    assert not canary.exists(), "a hostile value was executed"


def run_warned(run_dir: Path, tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], str, float]:
    """run_script, with Slurm's time-limit warning (SIGUSR2 to the batch script, --signal=B:USR2) sent while
    the preflight runs, before any program step exists; also when it was sent (time.time())."""
    fake = tmp_path / "fake"
    fake.mkdir(exist_ok=True)
    full = {**os.environ, "PATH": f"{FAKEBIN}:{os.environ['PATH']}", "FAKE_DIR": str(fake), "SLURM_JOB_ID": "4242"}
    full.update({f"SLURM_JOB_NODELIST_HET_GROUP_{g}": n for g, n in enumerate(("node-a,node-b", "node-c", "node-d"))})
    full.update({"SLURM_JOB_NODELIST": "node-a,node-b", "FAKE_PREFLIGHT_SLEEP": "1", **env})
    proc = subprocess.Popen(
        ["bash", str(run_dir / "job.sbatch")], env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    events = fake / "events.txt"
    deadline = time.monotonic() + 20
    while not (events.exists() and "preflight" in events.read_text()) and time.monotonic() < deadline:
        time.sleep(0.02)
    sent = time.time()
    os.kill(proc.pid, signal.SIGUSR2)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), events.read_text(), sent


def test_an_early_time_limit_warning_waits_for_the_programs_and_its_seconds(hetero: Plan, tmp_path: Path) -> None:
    """Slurm's warning (B:USR2) during the preflight, 32 s before the limit, for USR1@30: nothing is
    signalled then; USR1 goes to every step (`scancel --signal=USR1 JOBID`) once, after every program
    step's tasks started (their rank logs) and 2 s settled, and not before 30 s are left; a second
    warning changes nothing. The script runs on to a clean end."""
    plan = replace(hetero, slurm={**hetero.slurm, "signal_before_limit": "USR1@30"})
    rendered = render_run(plan, tmp_path / "run")
    assert "#SBATCH --signal=B:USR2@30" in rendered.script.read_text()
    res, events, sent = run_warned(rendered.run_dir, tmp_path, FAKE_SLEEP="7", FAKE_TIME_LEFT="0:33")
    assert res.returncode == 0, res.stderr
    assert (
        "time-limit warning from Slurm (slurm.signal_before_limit USR1@30; 33s left): SIGUSR1 goes to the steps in 3s"
        in res.stderr
    ), res.stderr
    lines = events.splitlines()
    delivered = [i for i, line in enumerate(lines) if line == "scancel --signal=USR1 4242"]
    assert len(delivered) == 1, events
    started = [i for i, line in enumerate(lines) if line.split()[1:2] == ["started"]]
    assert len(started) == len(lower(plan).steps) and max(started) < delivered[0], events
    assert "time-limit warning: SIGUSR1 sent to every task of every step (scancel exit 0)" in res.stderr
    # no signal reached anything before: the guard and every step ran on (each ended by itself)
    assert "task-TERM" not in events and events.count("done ") == len(lower(plan).steps), events
    assert not (rendered.run_dir / ".warned-4242-0").exists()  # the cleanup removed the marker
    at = float((tmp_path / "fake" / "scancel-times").read_text().split()[0])
    assert at - sent >= 2.0, at - sent  # no earlier than asked: 33 s left - 30 s (whole seconds)
    last_start = max(
        (tmp_path / "fake" / f).stat().st_mtime for f in os.listdir(tmp_path / "fake") if f.endswith(".argv")
    )
    assert at - last_start >= 1.0, at - last_start  # the programs' tasks had their settle time (whole seconds)


@pytest.mark.parametrize("warned", [True, False])
def test_a_step_killed_by_the_time_limit_warning_is_named(hetero: Plan, tmp_path: Path, warned: bool) -> None:
    """Default warning TERM@120: a program that does not trap SIGTERM dies of it once the script passed
    the warning on; the log says the SIGTERM was the warning, not a crash; the same death without the
    warning is not explained so."""
    no_limit = replace(hetero, slurm={k: v for k, v in hetero.slurm.items() if k != "time"})  # the full default
    rendered = render_run(no_limit, tmp_path / "run")
    assert "hp_warning=TERM@120 " in rendered.script.read_text()
    env = {"FAKE_FAIL": "inference", "FAKE_FAIL_TERM": "wait", "FAKE_SLEEP": "30", "FAKE_TIME_LEFT": "2:00"}
    if warned:
        res, _, _ = run_warned(rendered.run_dir, tmp_path, **env)
    else:
        env.update(FAKE_FAIL_TERM="1")
        res, _, _ = run_script(rendered.run_dir, tmp_path, **env)
    assert res.returncode == 143, res.stderr
    # a first srun error line that is not "Exited with exit code" is reported too (it once killed the script)
    assert "component 'inference' ranks 0,1,2 on node-a: Terminated" in res.stderr
    assert "component 'inference' failed first: the job fails with exit code 143" in res.stderr
    assert ("this SIGTERM was Slurm's time-limit warning" in res.stderr) == warned, res.stderr


@pytest.mark.parametrize(("group", "target"), [("", "4242.3"), ("0", "4242.3"), ("2", "4244.3")])
def test_the_driver_steps_warning_names_its_components_own_job_id(tmp_path: Path, group: str, target: str) -> None:
    """The Ray driver's step is named JOBID.STEP with the job id of the driver's het component: scancel
    drops the +OFFSET of LEADER+OFFSET.STEP (22.05 and 26.05 alike: it exits 0 and signals nothing), and
    inside a later component's step SLURM_JOB_ID is the leader's."""
    from hpcplace.slurm.render import render_library

    lib = tmp_path / "hpcplace-lib.sh"
    lib.write_text(render_library())
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "driver.step").write_text("3\n")
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "srun-pids").write_text("")  # no fake srun runs: the fake scancel signals none
    snippet = (
        'hp_run_dir=$PWD hp_plan= hp_shm= hp_kill_wait=2 hp_attempt=0 hp_warning=TERM@30 hp_images=(); source "$1"; '
        "hp_warn_to=driver hp_driver_group=$2 hp_warn_due=1 hp_warn_at=0 hp_warn_up=1; hp_deliver_warning"
    )
    env = {
        **os.environ,
        "PATH": f"{FAKEBIN}:{os.environ['PATH']}",
        "FAKE_DIR": str(fake),
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_ID_HET_GROUP_0": "4242",
        "SLURM_JOB_ID_HET_GROUP_1": "4243",
        "SLURM_JOB_ID_HET_GROUP_2": "4244",
    }
    res = subprocess.run(
        ["bash", "-c", snippet, "bash", str(lib), group], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    assert (fake / "events.txt").read_text() == f"scancel --signal=TERM {target}\n"
    assert f"SIGTERM sent to the driver (step {target}) only (scancel exit 0)" in res.stderr


FABRIC = """
name: fabric
cluster:
  node_groups:
    - {label: gb200, partition: gb200, nodes: 4, gpus_per_node: 4, gpu_type: gb200, topology: {block: 2}}
  component_placement:
    trainer: "0-15"
    engine: "0-15"
components:
  trainer: {command: ["true"], tensor_parallel_size: 8}
  engine: {command: ["true"], tensor_parallel_size: 8}
"""


def fabric_env(topology: str) -> dict[str, str]:
    """A one-component job on node-a..d whose partition's topology `nvblock` has these blocks (fake scontrol)."""
    return {
        "SLURM_JOB_NODELIST": "node-a,node-b,node-c,node-d",
        "SLURM_JOB_NODELIST_HET_GROUP_0": "",
        "SLURM_JOB_PARTITION": "gb200",
        "FAKE_PARTITION_TOPOLOGY": "nvblock",
        "FAKE_TOPOLOGY": topology,
    }


def test_a_group_with_a_topology_numbers_its_nodes_by_block(tmp_path: Path) -> None:
    """The site's blocks interleave with the names (rack1 = node-a,c; rack2 = node-b,d): the job numbers its
    nodes a, c, b, d (hp_fabric), every step names its nodes in that order, and a failing task srun names in
    its own (sorted) numbering is traced to the plan's rank: srun's task 5 is node-b's second task, rank 9."""
    config = tmp_path / "fabric.yaml"
    config.write_text(FABRIC)
    rendered = render_run(plan_from_file(config), tmp_path / "run")
    topology = "BlockName=rack1 BlockIndex=0 Nodes=node-a,node-c BlockSize=2\\nBlockName=rack2 BlockIndex=1 Nodes=node-b,node-d BlockSize=2"
    res, calls, _ = run_script(
        rendered.run_dir,
        tmp_path,
        **fabric_env(topology),
        FAKE_FAIL="trainer",
        FAKE_FAIL_AT="node-b: task 5",
    )
    logs = rendered.run_dir / "logs"
    assert (logs / "nodes.txt").read_text() == "0 0 node-a\n0 1 node-c\n0 2 node-b\n0 3 node-d\n"
    assert (logs / "fabric.txt").read_text().splitlines() == [
        "0 0 node-a rack1",
        "0 1 node-c rack1",
        "0 2 node-b rack2",
        "0 3 node-d rack2",
    ]
    steps = {
        c["argv"][c["argv"].index("--component") + 1]: c["argv"] for c in _steps(calls) if "--component" in c["argv"]
    }
    assert "--nodelist=node-a,node-c,node-b,node-d" in steps["trainer"]
    assert not any(a.startswith("--relative") for a in steps["trainer"])
    assert res.returncode == 7, res.stderr
    assert "component 'trainer' rank 9 on node-b: Exited with exit code 7" in res.stderr, res.stderr


def test_a_site_without_the_topology_keeps_slurms_order_and_says_so(tmp_path: Path) -> None:
    config = tmp_path / "fabric.yaml"
    config.write_text(FABRIC)
    rendered = render_run(plan_from_file(config), tmp_path / "run")
    res, calls, _ = run_script(
        rendered.run_dir, tmp_path, SLURM_JOB_NODELIST="node-a,node-b,node-c,node-d", SLURM_JOB_NODELIST_HET_GROUP_0=""
    )
    assert res.returncode == 0, res.stderr
    assert (
        "het group 0: the site reports no block topology (scontrol show topology): its nodes keep Slurm's order"
        in res.stderr
    )
    assert (rendered.run_dir / "logs" / "nodes.txt").read_text() == "0 0 node-a\n0 1 node-b\n0 2 node-c\n0 3 node-d\n"
    trainer = next(c["argv"] for c in _steps(calls) if "trainer" in c["argv"])
    assert "--nodelist=node-a,node-b,node-c,node-d" in trainer


def test_a_plan_segment_slurm_gave_from_two_blocks_is_said(tmp_path: Path) -> None:
    """The site's blocks hold 1 and 3 of the job's nodes (no --segment could give that; a site whose blocks
    changed could): the plan's segment of nodes 0-1 spans both blocks, and the job says so at start."""
    config = tmp_path / "fabric.yaml"
    config.write_text(FABRIC)
    rendered = render_run(plan_from_file(config), tmp_path / "run")
    topology = "BlockName=rack1 BlockIndex=0 Nodes=node-a BlockSize=2\\nBlockName=rack2 BlockIndex=1 Nodes=node-b,node-c,node-d BlockSize=2"
    res, _, _ = run_script(
        rendered.run_dir,
        tmp_path,
        **fabric_env(topology),
    )
    assert res.returncode == 0, res.stderr
    assert (
        "het group 0: plan nodes 0-1 lie in block units rack1 rack2 (Slurm gave no whole one): their model-parallel "
        "groups cross the fabric"
    ) in res.stderr
    assert "plan nodes 2-3" not in res.stderr
