"""Submission, status and validation against fake Slurm executables on PATH (and text recorded on
the real test cluster): missing sbatch, refusals quoted with the node group named, nothing recorded
on failure, a retry never submits twice, interrupted submissions adopted, status of het components."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hpcplace.errors import HpcplaceError, SlurmError
from hpcplace.plan.plan import Plan, plan_to_json
from hpcplace.plan.planner import plan_from_file
from hpcplace.slurm import slurm_cli, submit, validate
from tests.slurm.conftest import REPO

DATA = Path(__file__).with_name("data") / "slurm-22.05.8"  # recorded on the 22.05.8 test cluster

SBATCH = r"""#!/bin/bash
echo "$*" >>"$FAKE_DIR/sbatch.calls"
case "${FAKE_SBATCH:-ok}" in
  ok) echo "${FAKE_JOB_ID:-4242}" ;;
  partition) echo "sbatch: error: invalid partition specified: a800" >&2
             echo "sbatch: error: Batch job submission failed: Invalid partition name specified" >&2; exit 1 ;;
  gres) echo "sbatch: error: Batch job submission failed: Requested node configuration is not available" >&2; exit 1 ;;
  hang) sleep 5; echo 4242 ;;
  garbage) echo "Submitted batch job" ;;
esac
"""
SQUEUE = r"""#!/bin/bash
cat "$FAKE_DIR/squeue.out" 2>/dev/null
"""
SACCT = r"""#!/bin/bash
if [ -e "$FAKE_DIR/no-accounting" ]; then
  echo "sacct: error: Slurm accounting storage is disabled" >&2; exit 1
fi
case " $* " in
  *" --noheader "*) cat "$FAKE_DIR/sacct.out" 2>/dev/null ;;
  *) cat "$FAKE_DIR/sacct-submitit.out" 2>/dev/null ;;  # submitit's watcher reads the header
esac
"""
SCONTROL = r"""#!/bin/bash
if [ "$1" = --version ]; then cat "$FAKE_DIR/version.out"; exit; fi
case "$2" in
  job) if [ -e "$FAKE_DIR/scontrol-job.out" ]; then cat "$FAKE_DIR/scontrol-job.out";
       else echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1; fi ;;
  partition) cat "$FAKE_DIR/partitions.out" ;;
  node) cat "$FAKE_DIR/nodes.out" ;;
esac
"""
SCANCEL = r"""#!/bin/bash
echo "$*" >>"$FAKE_DIR/scancel.calls"
"""


@pytest.fixture
def fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory of fake Slurm commands, first on PATH; returns FAKE_DIR (their state)."""
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    for name, text in {
        "sbatch": SBATCH,
        "squeue": SQUEUE,
        "sacct": SACCT,
        "scontrol": SCONTROL,
        "scancel": SCANCEL,
    }.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    (state / "partitions.out").write_text((DATA / "scontrol-show-partition.txt").read_text())
    (state / "nodes.out").write_text((DATA / "scontrol-show-node.txt").read_text())
    (state / "version.out").write_text((DATA / "scontrol-version.txt").read_text())
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_DIR", str(state))
    return state


@pytest.fixture(scope="module")
def hetero() -> Plan:
    return plan_from_file(REPO / "configs" / "hetero-partitions.yaml")


def _calls(state: Path) -> list[str]:
    f = state / "sbatch.calls"
    return f.read_text().splitlines() if f.exists() else []


def test_missing_sbatch(hetero: Plan, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(SlurmError, match="`sbatch` was not found on PATH"):  # (the version as read before)
        submit.submit(hetero, tmp_path / "run", slurm_version=slurm_cli.SlurmVersion(22, 5, 8))
    assert not (tmp_path / "run" / "run.json").exists()
    assert not (tmp_path / "run" / "submit.lock").exists()


def test_success_records_job_and_hash_and_retry_does_not_resubmit(
    hetero: Plan, tmp_path: Path, fake_slurm: Path
) -> None:
    done = submit.submit(hetero, tmp_path / "run")
    assert done.job_id == "4242" and not done.already_submitted
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    script = (tmp_path / "run" / "job.sbatch").read_bytes()
    import hashlib

    assert record["job_id"] == "4242" and record["script_sha256"] == hashlib.sha256(script).hexdigest()
    assert record["het_components"] == ["a800", "rtx4090", "cpu", "robot"]
    assert not (tmp_path / "run" / "submit.lock").exists()
    assert _calls(fake_slurm) == [f"--parsable {tmp_path / 'run' / 'job.sbatch'}"]
    again = submit.submit(hetero, tmp_path / "run")
    assert again.already_submitted and again.job_id == "4242"
    assert len(_calls(fake_slurm)) == 1  # no second sbatch


@pytest.mark.parametrize(
    "mode,needle",
    [
        ("partition", r"node group 'a800' \(het component 0\) uses partition 'a800'"),
        ("gres", r"node group 'rtx4090' \(het component 1\): partition 'rtx4090', 1 node\(s\), GRES gpu:rtx4090:4"),
    ],
)
def test_refusal_quotes_slurm_names_node_group_records_nothing(
    hetero: Plan, tmp_path: Path, fake_slurm: Path, monkeypatch: pytest.MonkeyPatch, mode: str, needle: str
) -> None:
    monkeypatch.setenv("FAKE_SBATCH", mode)
    with pytest.raises(SlurmError, match="Slurm rejected the job: sbatch: error") as info:
        submit.submit(hetero, tmp_path / "run")
    assert pytest.importorskip("re").search(needle, str(info.value))
    assert not (tmp_path / "run" / "run.json").exists()
    assert not (tmp_path / "run" / "submit.lock").exists()
    monkeypatch.setenv("FAKE_SBATCH", "ok")
    assert submit.submit(hetero, tmp_path / "run").job_id == "4242"  # a retry after a refusal submits


def test_unparsable_sbatch_output(
    hetero: Plan, tmp_path: Path, fake_slurm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SBATCH", "garbage")
    with pytest.raises(SlurmError, match="not a job id"):
        submit.submit(hetero, tmp_path / "run")
    assert not (tmp_path / "run" / "run.json").exists()


def test_timeout_keeps_lock_and_retry_adopts_the_job(
    hetero: Plan, tmp_path: Path, fake_slurm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "run"
    monkeypatch.setenv("FAKE_SBATCH", "hang")
    with pytest.raises(SlurmError, match="did not answer") as info:
        submit.submit(hetero, run_dir, timeout=0.5)
    assert "looks for the job before submitting again" in str(info.value)
    assert (run_dir / "submit.lock").exists() and not (run_dir / "run.json").exists()
    # Slurm did accept it: squeue lists a job whose working directory is the run directory
    (fake_slurm / "squeue.out").write_text(f"777+0|{run_dir}\n777+1|{run_dir}\n999|/elsewhere\n")
    monkeypatch.setenv("FAKE_SBATCH", "ok")
    adopted = submit.submit(hetero, run_dir)
    assert adopted.already_submitted and adopted.job_id == "777"
    assert json.loads((run_dir / "run.json").read_text())["job_id"] == "777"
    assert len(_calls(fake_slurm)) == 1  # only the interrupted attempt ran sbatch
    assert not (run_dir / "submit.lock").exists()


def test_stale_lock_without_a_job_submits_once(hetero: Plan, tmp_path: Path, fake_slurm: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (run_dir / "submit.lock").write_text(json.dumps({"pid": dead.pid, "host": os.uname().nodename}))
    assert submit.submit(hetero, run_dir).job_id == "4242"
    assert len(_calls(fake_slurm)) == 1


def test_live_lock_refuses(hetero: Plan, tmp_path: Path, fake_slurm: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    other = subprocess.Popen(["sleep", "30"])  # another `hpcplace submit` still running
    try:
        (run_dir / "submit.lock").write_text(json.dumps({"pid": other.pid, "host": os.uname().nodename}))
        with pytest.raises(SlurmError, match=r"another submission .* is running"):
            submit.submit(hetero, run_dir)
    finally:
        other.kill()
        other.wait()
    assert _calls(fake_slurm) == []


def test_dry_run_writes_and_submits_nothing(hetero: Plan, tmp_path: Path, fake_slurm: Path) -> None:
    text = submit.dry_run_text(hetero, tmp_path / "run")
    assert f"# sbatch --parsable {tmp_path / 'run' / 'job.sbatch'}\n#!/bin/bash\n" in text
    assert not (tmp_path / "run").exists() and _calls(fake_slurm) == []


def test_test_only(hetero: Plan, tmp_path: Path, fake_slurm: Path) -> None:
    submit.test_only(hetero)
    assert _calls(fake_slurm)[0].startswith("--parsable --test-only ")


def test_status_running_from_scontrol(fake_slurm: Path) -> None:
    (fake_slurm / "scontrol-job.out").write_text((DATA / "scontrol-show-job-running.txt").read_text())
    (fake_slurm / "sacct.out").write_text((DATA / "sacct-steps.txt").read_text())
    status = submit.job_status("12")
    assert status.source == "scontrol" and status.state == "RUNNING" and not status.done
    assert [(c.offset, c.partition, c.state, c.nodes) for c in status.components] == [
        (0, "a800", "RUNNING", "a800-1"),
        (1, "cpu", "RUNNING", "cpu-1"),
    ]
    assert [(s.job_id, s.name) for s in status.steps] == [("12+0.0", "actor"), ("12+1.1", "agent")]
    text = submit.format_status(status, ["a800", "cpu"])
    assert "het 0 a800" in text and "het 1 cpu" in text and "12+1.1" in text


def test_status_finished_from_sacct_or_unknown(fake_slurm: Path) -> None:
    (fake_slurm / "sacct.out").write_text((DATA / "sacct-steps.txt").read_text())
    status = submit.job_status("12")
    assert status.source == "sacct" and status.done and status.state == "COMPLETED"
    (fake_slurm / "no-accounting").touch()
    assert submit.job_status("12").source == "none"


def test_watch_until_done(fake_slurm: Path) -> None:
    (fake_slurm / "scontrol-job.out").write_text((DATA / "scontrol-show-job-running.txt").read_text())
    (fake_slurm / "sacct.out").write_text((DATA / "sacct-steps.txt").read_text())
    (fake_slurm / "sacct-submitit.out").write_text((DATA / "sacct-submitit.txt").read_text())
    seen: list[str] = []

    def finish(_s: float) -> None:  # the job completes between two looks
        (fake_slurm / "scontrol-job.out").write_text((DATA / "scontrol-show-job-done.txt").read_text())

    status = submit.watch("12", say=seen.append, sleep=finish)
    assert status.done and status.state == "COMPLETED"
    assert "RUNNING" in seen[0] and "COMPLETED" in seen[-1]


def test_submitit_watcher_reads_het_components() -> None:
    watcher = slurm_cli.HetJobWatcher(delay_s=1)
    info = watcher.read_info((DATA / "sacct-submitit.txt").read_text())
    assert info["12+0"]["State"] == "COMPLETED" and info["12+1"]["NodeList"] == "cpu-1"
    assert "12" not in info  # why submitit alone cannot watch a het job by its leader id
    watcher.register_job("12+0")
    watcher.register_job("12+1")
    assert watcher._make_command() == ["sacct", "-o", "JobID,State,NodeList", "--parsable2", "-j", "12"]


def test_cancel_and_resolve(tmp_path: Path, fake_slurm: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with pytest.raises(submit.UnknownJobError, match=r"was never submitted to Slurm: no job id in run\.json"):
        submit.resolve_job(str(run_dir))
    (run_dir / "run.json").write_text(json.dumps({"job_id": "55"}))
    assert submit.resolve_job(str(run_dir)) == ("55", run_dir.absolute())
    assert submit.resolve_job("77+1") == ("77", None)
    with pytest.raises(submit.UnknownJobError, match="neither a run directory nor a job id"):
        submit.resolve_job("nope")
    (fake_slurm / "sacct.out").write_text("")
    with pytest.raises(submit.UnknownJobError, match="Slurm knows no job 55"):  # neither scontrol nor sacct
        submit.cancel("55")
    (fake_slurm / "scontrol-job.out").write_text((DATA / "scontrol-show-job-running.txt").read_text())
    assert "cancelled job 55" in submit.cancel("55")
    assert (fake_slurm / "scancel.calls").read_text() == "55\n"
    (fake_slurm / "scontrol-job.out").write_text(
        (DATA / "scontrol-show-job-done.txt").read_text().replace("JobState=COMPLETED", "JobState=FAILED", 1)
    )
    assert submit.cancel("55") == "job 55 had already ended: FAILED; nothing to cancel"
    assert (fake_slurm / "scancel.calls").read_text() == "55\n"  # not called again


def _status_with(fake_slurm: Path, states: tuple[str, str]) -> submit.JobStatus:
    text = (DATA / "scontrol-show-job-done.txt").read_text()
    for state in states:
        text = text.replace("JobState=COMPLETED", f"JobState={state}!", 1)
    (fake_slurm / "scontrol-job.out").write_text(text.replace("!", ""))
    (fake_slurm / "sacct.out").write_text("")
    return submit.job_status("12")


@pytest.mark.parametrize(
    ("states", "code"),
    [
        (("COMPLETED", "COMPLETED"), 0),
        (("FAILED", "CANCELLED"), 10),
        (("COMPLETED", "OUT_OF_MEMORY"), 10),
        (("CANCELLED", "CANCELLED"), 11),
        (("TIMEOUT", "CANCELLED"), 12),
        (("PREEMPTED", "COMPLETED"), 13),
        (("RUNNING", "COMPLETED"), 0),
    ],
)
def test_status_exit_codes(fake_slurm: Path, states: tuple[str, str], code: int) -> None:
    assert submit.status_exit_code(_status_with(fake_slurm, states)) == code


def test_cli_status_codes_and_unknown_job(fake_slurm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hpcplace.cli import main

    _status_with(fake_slurm, ("TIMEOUT", "CANCELLED"))
    assert main(["status", "12", "--watch", "--interval", "0"]) == 12
    _status_with(fake_slurm, ("COMPLETED", "COMPLETED"))
    assert main(["status", "12"]) == 0
    (fake_slurm / "scontrol-job.out").unlink()
    capsys.readouterr()
    assert main(["status", "999"]) == 2  # a job id that does not exist is bad input, not a Slurm failure
    err = capsys.readouterr().err
    assert "Slurm knows no job 999" in err and "HINT" in err.upper() and "Traceback" not in err


def test_attempts_record(tmp_path: Path) -> None:
    (tmp_path / "attempts.jsonl").write_text(
        '{"attempt": 0, "event": "start", "job_id": "5", "host": "cpu-1", "time": "T0"}\n'
        '{"attempt": 0, "event": "end", "job_id": "5", "host": "cpu-1", "time": "T1", "exit_code": 143}\n'
        '{"attempt": 1, "event": "st\n'  # a line cut short by a dying node
        '{"attempt": 1, "event": "start", "job_id": "5", "host": "cpu-1", "time": "T2"}\n'
    )
    attempts = submit.read_attempts(tmp_path)
    assert attempts == [submit.Attempt(0, "T0", "cpu-1", "T1", 143), submit.Attempt(1, "T2", "cpu-1", None, None)]
    text = "\n".join(submit.format_attempts(attempts))
    assert "attempt 0: started T0 on cpu-1, ended T1 exit=143; logs in logs/attempt-0/" in text
    assert "attempt 1: started T2 on cpu-1, running" in text


# ------------------------------------------------------------------------------------------------
# validation (pure comparison over text recorded on the test cluster)


@pytest.fixture(scope="module")
def lab_facts() -> validate.ClusterFacts:
    parse = lambda name: [slurm_cli.parse_key_values(x) for x in (DATA / name).read_text().splitlines()]  # noqa: E731
    return validate.parse_cluster_facts(parse("scontrol-show-partition.txt"), parse("scontrol-show-node.txt"))


def test_parse_facts(lab_facts: validate.ClusterFacts) -> None:
    assert sorted(lab_facts.partitions) == ["a800", "cpu", "robot", "rtx4090"]
    a800 = next(n for n in lab_facts.nodes if n.name == "a800-1")
    assert (a800.cpus, a800.memory_mb, a800.gres, a800.partitions) == (16, 64000, {"gpu": {"a800": 8}}, ("a800",))
    robot = next(n for n in lab_facts.nodes if n.name == "robot-1")
    assert robot.gres == {"robot": {None: 4}}


def test_site_gpu_count(lab_facts: validate.ClusterFacts) -> None:
    """What RLinf/ROLL would find on whichever node of the partition the job gets."""
    count = validate.site_gpu_count
    assert count(lab_facts, "a800", None) == validate.SiteGpuCount(
        8, "as all 2 nodes of partition 'a800' have (scontrol show node)"
    )
    assert count(lab_facts, "a800", "a800").count == 8 and count(lab_facts, "rtx4090", None).count == 4
    assert count(lab_facts, "a800", "h100") == validate.SiteGpuCount(  # a GPU partition of another type
        None,
        "partition 'a800' has no GPUs of type 'h100': its GPU type is 'a800'",
        fix="set slurm.gpu_type to 'a800', or leave it out",
    )
    assert count(lab_facts, None, None) == validate.SiteGpuCount(  # the lab's default partition is cpu
        None, "partition 'cpu' (the default) has no nodes with GPUs: name a GPU partition in slurm.partition"
    )
    assert count(lab_facts, "h100", None).source == (
        "partition 'h100' does not exist; the cluster has a800, cpu, robot, rtx4090"
    )
    node = lambda name, gpus, state="IDLE": validate.NodeFacts(  # noqa: E731
        name, ("mixed",), 16, 64000, {"gpu": {None: gpus}}, frozenset(), state
    )
    mixed = validate.ClusterFacts(
        {"mixed": validate.PartitionFacts("mixed", "UP", None, None, default=True)}, (node("n1", 8), node("n2", 4))
    )
    assert count(mixed, None, None) == validate.SiteGpuCount(
        None, "partition 'mixed' (the default) has nodes with 4 or 8 GPUs"
    )
    drained = validate.ClusterFacts(mixed.partitions, (node("n1", 8), node("n2", 4, "IDLE+DRAIN")))
    assert count(drained, None, None).count == 8  # a drained node counts only when no other is left
    assert (
        count(validate.ClusterFacts({}, ()), None, None).source
        == "the cluster has no default partition: set slurm.partition"
    )


def test_rlinf_and_roll_gpu_counts_left_to_run_time_come_from_the_site(
    lab_facts: validate.ClusterFacts, tmp_path: Path
) -> None:
    def site(partition: str | None, gpu_type: str | None) -> validate.SiteGpuCount:
        return validate.site_gpu_count(lab_facts, partition, gpu_type)

    rlinf = tmp_path / "rlinf.yaml"
    rlinf.write_text(
        "cluster:\n  num_nodes: 2\n  component_placement: {'actor,rollout': all}\nslurm: {partition: a800}\n"
    )
    plan = plan_from_file(rlinf, site_gpus=site)
    assert plan.cluster.node_groups[0].gpus_per_node == (8, 8) and plan.component("actor").world_size == 16
    assert (
        "node group 'default': 8 GPUs per node, as all 2 nodes of partition 'a800' have (scontrol show node)"
        " (RLinf discovers them at run time; set slurm.gpus_per_node to fix the count)" in plan.warnings
    )
    rlinf.write_text(rlinf.read_text().replace("{partition: a800}", "{partition: cpu}"))
    with pytest.raises(HpcplaceError) as info:
        plan_from_file(rlinf, site_gpus=site)
    assert info.value.message == (
        "`cluster`: GPUs per node of node group 'default' are unknown (partition 'cpu' has "
        "no nodes with GPUs: name a GPU partition in slurm.partition)"
    )
    rlinf.write_text(rlinf.read_text().replace("{partition: cpu}", "{partition: a800, gpu_type: h100}"))
    with pytest.raises(HpcplaceError) as info:
        plan_from_file(rlinf, site_gpus=site)
    assert info.value.hint == "set slurm.gpu_type to 'a800', or leave it out"  # not "add gpus_per_node"

    roll = tmp_path / "roll.yaml"  # ROLL detects the count on the node: the site's count wins over the config's
    roll.write_text(
        "num_gpus_per_node: 8\nslurm: {partition: rtx4090}\nactor_train: {device_mapping: 'list(range(0,8))'}\n"
    )
    plan = plan_from_file(roll, site_gpus=site)
    assert plan.cluster.node_groups[0].gpus_per_node == (4, 4)
    assert any(w.startswith("num_gpus_per_node 8 (") and "differs from the nodes' 4 GPUs" in w for w in plan.warnings)
    assert plan_from_file(roll).cluster.node_groups[0].gpus_per_node == (8,)  # no site: the config's fallback
    roll.write_text(roll.read_text().replace("rtx4090", "a800"))  # the config's count, confirmed: no warning
    plan = plan_from_file(roll, site_gpus=site)
    assert plan.cluster.node_groups[0].gpus_per_node == (8,)
    assert not any("GPUs per node" in w or "num_gpus_per_node" in w for w in plan.warnings), plan.warnings


def test_gres_parser() -> None:
    assert slurm_cli.parse_gres("gpu:a800:8(S:0-1),robot:4") == {"gpu": {"a800": 8}, "robot": {None: 4}}
    assert slurm_cli.parse_gres("(null)") == {}
    assert slurm_cli.parse_gres("gpu:4,gpu:h100:2") == {"gpu": {None: 4, "h100": 2}}


def test_key_values_keep_spaces() -> None:
    kv = slurm_cli.parse_key_values("NodeName=x OS=Linux 6.1 #1 SMP Gres=gpu:2 WorkDir=/a b/c Reason=None")
    assert kv["OS"] == "Linux 6.1 #1 SMP" and kv["WorkDir"] == "/a b/c" and kv["Gres"] == "gpu:2"


def test_hetero_example_fits_the_lab(hetero: Plan, lab_facts: validate.ClusterFacts) -> None:
    report = validate.check(hetero, lab_facts)
    assert report.ok, report.problems
    assert len(report.checked) == 4


def _variant(tmp_path: Path, group: str) -> Plan:
    from tests.slurm.conftest import plan_yaml

    return plan_yaml(
        tmp_path,
        f"""
        name: v
        cluster:
          node_groups:
            - {group}
          component_placement: {{w: "0"}}
        components: {{w: {{command: ["true"]}}}}
        """,
    )


@pytest.mark.parametrize(
    "group,needle",
    [
        (
            "{label: g, partition: h100, nodes: 1, gpus_per_node: 8, gpu_type: h100}",
            "partition does not exist (partitions: a800, cpu, robot, rtx4090)",
        ),
        (
            "{label: g, partition: a800, nodes: 3, gpus_per_node: 8, gpu_type: a800}",
            "needs 3 node(s) with GRES gpu:a800:8, the partition has 2 such of 2",
        ),
        (
            "{label: g, partition: a800, nodes: 1, gpus_per_node: 8, gpu_type: h100}",
            "needs 1 node(s) with GRES gpu:h100:8, the partition has 0 such of 2",
        ),
        (
            "{label: g, partition: rtx4090, nodes: 1, gpus_per_node: 8, gpu_type: rtx4090}",
            "GRES gpu:rtx4090:8, the partition has 0 such of 1 (rtx4090-1: 8 CPUs, 32000 MB, GRES gpu:rtx4090:4)",
        ),
        ("{label: g, partition: cpu, nodes: 1, cpus_per_node: 64}", "needs 1 node(s) with 64 CPUs"),
        ("{label: g, partition: cpu, nodes: 1, mem_per_node: 1T}", "with 1048576 MB memory"),
        ("{label: g, partition: robot, nodes: 1, hardware: {type: camera, count: 2}}", "GRES camera:2"),
        ("{label: g, partition: cpu, nodes: 1, constraint: ib}", "features 'ib'"),
    ],
)
def test_refuses_jobs_that_can_never_run(
    tmp_path: Path, lab_facts: validate.ClusterFacts, group: str, needle: str
) -> None:
    report = validate.check(_variant(tmp_path, group), lab_facts)
    assert any(needle in p for p in report.problems), report.problems
    assert all("node group 'g' (het component 0" in p for p in report.problems)


def test_too_many_tasks_for_the_cpus(tmp_path: Path, lab_facts: validate.ClusterFacts) -> None:
    from tests.slurm.conftest import plan_yaml

    plan = plan_yaml(
        tmp_path,
        """
        name: v
        cluster:
          node_groups: [{label: cpu, partition: cpu, nodes: 1}]
          component_placement: {w: "0:0-8"}
        components: {w: {command: ["true"]}}
        """,
    )
    assert any("needs 1 node(s) with 9 CPUs" in p for p in validate.check(plan, lab_facts).problems)


def test_missing_command_and_validate_raises(hetero: Plan, lab_facts: validate.ClusterFacts) -> None:
    from dataclasses import replace

    plan = replace(hetero, components=(replace(hetero.components[0], command=()),) + hetero.components[1:])
    with pytest.raises(SlurmError, match="component 'actor' has no command"):
        validate.validate(plan, lab_facts)


def test_time_minutes() -> None:
    assert validate.time_minutes("30") == 30
    assert validate.time_minutes("1:30:00") == 90
    assert validate.time_minutes("2-00:00:00") == 2880
    assert validate.time_minutes("UNLIMITED") is None


def test_cli_validate_accepts_a_ray_mode_framework_config(
    lab_facts: validate.ClusterFacts, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unchanged RLinf config with `--driver` has components without commands of their own: the Ray
    mode's driver starts them, so `hpcplace validate` (and the check `submit` runs first) accepts it."""
    from hpcplace.cli import main

    monkeypatch.setattr(validate, "read_cluster_facts", lambda: lab_facts)
    monkeypatch.setattr(slurm_cli, "site_version", lambda **_: slurm_cli.SlurmVersion(22, 5, 8))
    config = str(Path(__file__).parents[1] / "fixtures" / "rlinf-ray-hetero.yaml")
    assert main(["validate", config, "--driver", "--", "python", "main.py"]) == 0
    assert "the cluster can run this job" in capsys.readouterr().out
    assert main(["validate", config]) == 3  # without a driver the steps mode has nothing to run
    assert "component 'actor' has no command to run" in capsys.readouterr().err


def test_a_framework_config_that_never_fits_names_its_own_keys(
    lab_facts: validate.ClusterFacts, tmp_path: Path
) -> None:
    """AReaL has no node groups: the way out is its cluster: keys (8 GPUs per node asked of 4-GPU nodes)."""
    config = tmp_path / "areal.yaml"
    config.write_text(
        "allocation_mode: sglang:d4+fsdp:d4\ncluster: {n_nodes: 1, n_gpus_per_node: 8}\n"
        "slurm: {partition: rtx4090, gpu_type: rtx4090}\n"
    )
    with pytest.raises(SlurmError) as info:
        validate.validate(plan_from_file(config), lab_facts)
    assert info.value.hint == (
        "fix cluster.n_nodes, cluster.n_gpus_per_node or the slurm: block in the config (or "
        "skip this check with --no-validate)"
    )


def test_submitting_another_plan_into_a_submitted_run_directory_is_refused(tmp_path: Path) -> None:
    """The same plan again: idempotent (the recorded job). Another plan would inherit that job's id and
    status: refused, nothing submitted (no Slurm command is reached either way)."""
    first = plan_from_file(REPO / "configs" / "hetero-partitions.yaml")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "plan.json").write_text(plan_to_json(first))
    (run_dir / "run.json").write_text(json.dumps({"job_id": "41"}))
    again = submit.submit(first, run_dir)
    assert again.already_submitted and again.job_id == "41"
    other = plan_from_file(REPO / "configs" / "collocated-demo.yaml")
    with pytest.raises(HpcplaceError) as info:
        submit.submit(other, run_dir)
    assert info.value.message.startswith(f"{run_dir} already holds job 41 of another plan")
    assert "another -o DIR" in (info.value.hint or "")
