"""`hpcplace status | logs | cancel | submit` against fake Slurm commands, as a new user meets them: a job id
finds its run directory, Ray node errors and failure summaries reach `status`, a recorded job id that
now names another run's job is refused, `logs` lists valid ranks and reads hand-sbatch'd directories,
`status --watch` looks often enough to see a job's end within seconds, a second submit says it
submitted nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpcplace.cli import main
from hpcplace.slurm import run_report, slurm_cli, submit
from hpcplace.slurm.slurm_job import lower
from tests.slurm.conftest import REPO
from tests.slurm.test_submit_fake import DATA, _calls, fake_slurm  # noqa: F401  (the fixture)

HETERO = REPO / "configs" / "hetero-partitions.yaml"
ROLL = REPO / "configs" / "roll-example.yaml"


def _cli(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _run_dir(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    *extra: str,
    config: Path = HETERO,
    job_id: str | None = "12",
    started: bool = True,
) -> Path:
    """A rendered run directory as `hpcplace submit` leaves it (run.json names `job_id`), with the
    job's nodes.txt written when `started`."""
    run_dir = tmp_path / "run"
    assert main(["render", str(config), "-o", str(run_dir), *extra]) == 0
    capsys.readouterr()
    plan = submit.load_plan(run_dir / "plan.json")
    if job_id is not None:
        (run_dir / "run.json").write_text(
            json.dumps(
                {
                    "job_id": job_id,
                    "submitted_at": "2026-11-21T06:11:50+00:00",
                    "het_components": [g.label for g in plan.cluster.node_groups],
                }
            )
        )
    if started:
        (run_dir / "logs" / "nodes.txt").write_text(
            "".join(
                f"{g} {i} {group.label}-{i + 1}\n"
                for g, group in enumerate(plan.cluster.node_groups)
                for i in range(group.num_nodes)
            )
        )
    return run_dir


def _slurm_job(fake: Path, work_dir: Path | str, state: str = "COMPLETED") -> None:
    """The controller knows job 12, which runs in `work_dir`."""
    text = (DATA / "scontrol-show-job-done.txt").read_text().replace("WorkDir=/tmp/hp3", f"WorkDir={work_dir}")
    (fake / "scontrol-job.out").write_text(text.replace("JobState=COMPLETED", f"JobState={state}", 1))
    (fake / "sacct.out").write_text("")


def _rank_log(run_dir: Path, component: str, rank: int) -> Path:
    plan = submit.load_plan(run_dir / "plan.json")
    logs = submit.rank_logs(run_dir, lower(plan), submit.read_hosts(run_dir))
    path = next(r.path for r in logs if r.component == component and r.rank == rank)
    assert path is not None
    return path


# ---- 1. status --watch sees the end within seconds --------------------------------------------------


def test_watch_looks_at_least_every_five_seconds(fake_slurm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    delays: list[int] = []

    class Recording(slurm_cli.HetJobWatcher):
        def __init__(self, delay_s: int = 60) -> None:
            delays.append(delay_s)
            super().__init__(delay_s=delay_s)

    monkeypatch.setattr(slurm_cli, "HetJobWatcher", Recording)
    (fake_slurm / "scontrol-job.out").write_text((DATA / "scontrol-show-job-running.txt").read_text())
    (fake_slurm / "sacct.out").write_text((DATA / "sacct-steps.txt").read_text())
    (fake_slurm / "sacct-submitit.out").write_text((DATA / "sacct-submitit.txt").read_text())

    def finish(_s: float) -> None:
        (fake_slurm / "scontrol-job.out").write_text((DATA / "scontrol-show-job-done.txt").read_text())

    assert submit.watch("12", say=lambda _t: None, sleep=finish).done
    assert delays and max(delays) <= 5  # submitit's backoff is capped here: 0, 2, 4, then every 5 s


# ---- 2. a job id finds its run directory -------------------------------------------------------------


def test_status_and_logs_of_a_job_id_find_the_run_directory(
    tmp_path: Path, fake_slurm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _run_dir(tmp_path, capsys)
    _slurm_job(fake_slurm, run_dir)
    (run_dir / "attempts.jsonl").write_text('{"attempt": 0, "event": "start", "host": "a800-1", "time": "T0"}\n')
    (run_dir / "logs" / "preflight.txt").write_text("cpu-1: FAILED: /dev/shm is full\n")
    by_dir = _cli(capsys, "status", run_dir)
    by_id = _cli(capsys, "status", "12")
    assert by_id[0] == by_dir[0] == 0
    # the same report, naming the directory found after the table (its first line stays `job N: STATE ...`)
    assert by_id[1].splitlines()[0] == by_dir[1].splitlines()[0]
    assert by_id[1].replace(f"  run directory: {run_dir}\n", "") == by_dir[1]
    assert "het 0 a800" in by_id[1] and "het 0 ?" not in by_id[1]
    assert "attempt 0: started T0 on a800-1" in by_id[1] and "cpu-1: FAILED: /dev/shm is full" in by_id[1]
    code, out, err = _cli(capsys, "logs", "12", "--list")
    assert code == 0, err
    assert f"inference rank 1 (het 1 node 0 (rtx4090-1), task 1): {run_dir}/logs/inference.rank1.out" in out


def test_a_job_id_whose_directory_is_no_run_is_said_so(
    tmp_path: Path, fake_slurm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _slurm_job(fake_slurm, tmp_path)  # not a run directory
    code, out, _err = _cli(capsys, "status", "12")
    assert code == 0 and out.startswith("job 12: COMPLETED") and "het 0 ?" in out  # Slurm's view alone
    code, _out, err = _cli(capsys, "logs", "12")
    assert code == 2 and f"no run directory found for job 12: Slurm names {tmp_path}" in err


# ---- 3. Ray node errors reach status, also when the head never came up ------------------------------


def test_status_shows_ray_node_errors_without_a_head(
    tmp_path: Path, fake_slurm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _run_dir(tmp_path, capsys, "--driver", "--", "python", "driver.py", config=ROLL)
    _slurm_job(fake_slurm, run_dir, "FAILED")
    error = "Ray node rank 0 (gpu, het 0 node 0, gpu-1): ray start exited with code 2 before the head was up"
    (run_dir / "logs" / "ray-errors.txt").write_text(error + "\n")
    assert not (run_dir / "ray" / "head.json").exists()
    code, out, _err = _cli(capsys, "status", run_dir)
    assert code == 10 and f"Ray: {error}" in out


# ---- 4. the failure, summarised -----------------------------------------------------------------------

BATCH_FAILED = """\
hpcplace: job 12 attempt 0: 20 processes in 5 steps; node-local directory /dev/shm/hpcplace-12
hpcplace: FAILED: component 'inference' (3 tasks; ranks 0-2) exited with code 7: rank 1 on rtx4090-1 failed first \
(srun exited 143: the other ranks were stopped)
srun: error: rtx4090-1: task 1: Exited with exit code 7
srun: error: rtx4090-1: tasks 0,2: Exited with exit code 143
hpcplace:   component 'inference' rank 1 on rtx4090-1: Exited with exit code 7
hpcplace:   component 'inference' ranks 0,2 on rtx4090-1: Exited with exit code 143
hpcplace: stopping the other components with SIGTERM to every task
hpcplace: component 'inference' failed first: the job fails with exit code 7
"""


def test_status_summarises_the_failure(tmp_path: Path, fake_slurm: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = _run_dir(tmp_path, capsys)
    _slurm_job(fake_slurm, run_dir, "FAILED")
    (run_dir / "logs" / "batch-12.out").write_text(BATCH_FAILED)
    log = _rank_log(run_dir, "inference", 1)
    log.write_text(
        "".join(f"step {i}\n" for i in range(20))
        + "Traceback (most recent call last):\n"
        + "x" * 500
        + "\n"
        + "ValueError: failing on purpose\n\n"
    )
    code, out, _err = _cli(capsys, "status", run_dir)
    assert code == 10
    summary = out[out.index("  failure (from the batch log):") :].splitlines()
    assert summary[1] == "    component 'inference' failed first: the job fails with exit code 7"
    assert summary[2].startswith("    FAILED: component 'inference' (3 tasks; ranks 0-2) exited with code 7: rank 1")
    assert summary[3] == f"    last 5 line(s) of inference rank 1's log ({log}):"
    assert summary[4:9] == [
        "      | step 18",
        "      | step 19",
        "      | Traceback (most recent call last):",
        "      | " + "x" * 197 + "...",
        "      | ValueError: failing on purpose",
    ]


def test_a_failure_by_the_time_limit_warning_says_so() -> None:
    """A program that does not trap the default warning's SIGTERM: status repeats the script's why."""
    why = (
        "  this SIGTERM was Slurm's time-limit warning (slurm.signal_before_limit TERM@18; 20s left): the program "
        'does not trap it (docs/slurm-job.md, "Stopping gracefully")'
    )
    text = BATCH_FAILED.replace("hpcplace: stopping the other", f"hpcplace: {why}\nhpcplace: stopping the other")
    failure = run_report.parse_failure(text)
    assert failure is not None and failure.cause == why.strip()
    assert run_report.failure_lines(failure, None, None)[3] == "    " + why.strip()
    assert run_report.parse_failure(BATCH_FAILED).cause is None  # type: ignore[union-attr]


def test_failure_of_an_older_library_and_of_an_earlier_attempt() -> None:
    older = BATCH_FAILED.replace(
        ": rank 1 on rtx4090-1 failed first (srun exited 143: the other ranks were stopped)", ""
    )
    failure = run_report.parse_failure(older)
    assert failure is not None and (failure.component, failure.rank, failure.host) == ("inference", 1, "rtx4090-1")
    requeued = BATCH_FAILED + "hpcplace: job 12 attempt 1: 20 processes in 5 steps; node-local directory x\n"
    assert run_report.parse_failure(requeued) is None  # attempt 1 runs; attempt 0's failure is history
    assert run_report.parse_failure("hpcplace: all steps finished\n") is None


# ---- 5. a recorded job id that now names another run's job --------------------------------------------


def test_status_and_cancel_refuse_a_job_of_another_run(
    tmp_path: Path, fake_slurm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _run_dir(tmp_path, capsys)
    _slurm_job(fake_slurm, "/home/someone/other-run", "RUNNING")
    code, out, err = _cli(capsys, "status", run_dir)
    assert code == 2 and out == ""
    assert (
        f"job 12 is not this run's: Slurm's job 12 runs in /home/someone/other-run (submitted "
        f"2026-11-21T06:11:49), not in {run_dir}"
    ) in err and "the cluster's job ids restarted?" in err
    code, _out, err = _cli(capsys, "cancel", run_dir)
    assert code == 2 and "job 12 is not this run's" in err
    assert not (fake_slurm / "scancel.calls").exists()  # the other run's job was left alone


def test_attach_exec_and_release_refuse_a_job_of_another_run(
    tmp_path: Path, fake_slurm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _run_dir(tmp_path, capsys, "--hold", "--driver", "--", "python3", "x.py")
    _slurm_job(fake_slurm, "/home/someone/other-run", "RUNNING")
    for argv in (
        ["attach", str(run_dir), "--driver", "--", "python3", "y.py"],
        ["exec", str(run_dir), "--node", "0", "--", "true"],
        ["release", str(run_dir)],
    ):
        code, _out, err = _cli(capsys, *argv)
        assert code == 2 and "job 12 is not this run's" in err, (argv, err)
    assert not (fake_slurm / "scancel.calls").exists()


def test_ownership_without_a_working_directory_compares_submit_times(tmp_path: Path) -> None:
    comp = submit.ComponentState(0, "12", "cpu", "COMPLETED", "cpu-1", "", "0:0", "00:01")
    record = {"job_id": "12", "submitted_at": "2026-11-21T06:11:50+00:00"}
    old = submit.JobStatus("12", (comp,), (), "sacct", submit_time="2026-01-02T03:04:05+00:00")
    assert "job 12 is not this run's: Slurm's job 12 was submitted 2026-01-02T03:04:05+00:00" in (
        run_report.ownership_problem(tmp_path, record, old) or ""
    )
    same = submit.JobStatus("12", (comp,), (), "sacct", submit_time="2026-11-21T06:11:49+00:00")
    assert run_report.ownership_problem(tmp_path, record, same) is None
    here = submit.JobStatus("12", (comp,), (), "sacct", work_dir=str(tmp_path).replace('"', "`"))
    assert run_report.ownership_problem(tmp_path, record, here) is None


# ---- 6. a rank that does not exist: the valid ones ----------------------------------------------------


def test_logs_of_a_missing_rank_list_the_ranks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = _run_dir(tmp_path, capsys)
    code, out, err = _cli(capsys, "logs", run_dir, "--component", "inference", "--rank", "9")
    assert code == 2 and out == ""
    assert "no rank 9 in inference: its ranks are 0-2" in err
    code, _out, err = _cli(capsys, "logs", run_dir, "--rank", "99")
    assert code == 2 and "no rank 99 in any component; ranks per component: actor: 0-" in err


def test_ray_logs_of_a_missing_node_rank_list_the_node_ranks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _run_dir(tmp_path, capsys, "--driver", "--", "python", "driver.py", config=ROLL)
    code, out, err = _cli(capsys, "logs", run_dir, "--component", "ray", "--rank", "9")
    assert code == 2 and out == "" and "no Ray node rank 9: the node ranks are 0-" in err


# ---- 7. a rendered directory sbatch'd by hand --------------------------------------------------------


def test_logs_of_a_rendered_directory_sbatched_by_hand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = _run_dir(tmp_path, capsys, job_id=None)
    (run_dir / "logs" / "batch-31.out").write_text("hpcplace: all steps finished\n")
    _rank_log(run_dir, "inference", 1).write_text("hello from rank 1\n")
    code, out, err = _cli(capsys, "logs", run_dir, "--component", "inference", "--rank", "1")
    assert code == 0, err
    assert out.startswith(
        f"(note: {run_dir} records no job id in run.json: it was not submitted by `hpcplace "
        "submit`; showing the logs it holds)"
    )
    assert "hello from rank 1" in out


# ---- 9. submitting a submitted directory again --------------------------------------------------------


def test_submit_again_says_nothing_was_submitted(
    tmp_path: Path, fake_slurm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    code, out, _err = _cli(capsys, "submit", HETERO, "-o", run_dir)
    assert code == 0 and out.splitlines()[-1] == f"job 4242 ({run_dir})"
    code, out, err = _cli(capsys, "submit", HETERO, "-o", run_dir)
    assert code == 0  # idempotent: a retried script is safe (docs/slurm-job.md)
    assert out.splitlines()[-1] == f"already submitted as job 4242 ({run_dir}); nothing submitted"
    assert "already submitted" not in err  # said once, on stdout
    assert len(_calls(fake_slurm)) == 1
    code, out, err = _cli(
        capsys, "submit", HETERO, "slurm.time=5", "-o", run_dir
    )  # another plan: refused, nothing submitted
    assert code == 2 and "already holds job 4242 of another plan" in err and len(_calls(fake_slurm)) == 1


def test_a_job_that_failed_before_its_steps_shows_the_end_of_its_batch_log(
    tmp_path: Path, fake_slurm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No FAILED: block (the script stopped before any step: its library was edited): the batch log's end."""
    run_dir = _run_dir(tmp_path, capsys)
    _slurm_job(fake_slurm, run_dir, "FAILED")
    (run_dir / "logs" / "batch-12.out").write_text(
        "hpcplace: hpcplace-lib.sh in /r is not the library this script was rendered with (sha256 differs)\n"
    )
    code, out, _err = _cli(capsys, "status", run_dir)
    assert code == 10
    assert f"  the batch log ends with ({run_dir / 'logs' / 'batch-12.out'}):" in out, out
    assert "    | hpcplace: hpcplace-lib.sh in /r is not the library" in out
