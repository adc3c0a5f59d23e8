"""Runs as a chain of jobs (launch.chain, `submit --chain N`) without a cluster: the launch block, the
resume overrides per format, the rendered script, chain submission against fake Slurm commands, what
status reads from chain.jsonl, and the shim's HPCPLACE_CHAIN_* (the real cluster: test_chain_cluster.py)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from hpcplace.config.launch import CHAIN_RESUME, LaunchSpec, launch_from_json, with_chain
from hpcplace.errors import SpecError
from hpcplace.plan.plan import Plan
from hpcplace.runtime.ranks import chain_command, chain_environment
from hpcplace.slurm import chain, slurm_cli, submit
from hpcplace.slurm.render import render_run, render_script
from tests.slurm.conftest import plan_yaml
from tests.slurm.test_submit_fake import _calls, fake_slurm  # noqa: F401  (the fixture)

CONFIG = """
name: chained
cluster:
  node_groups:
    - {label: cpu, partition: cpu, nodes: 1}
  component_placement:
    trainer: {node_group: cpu, placement: "0:0"}
components: {trainer: {command: [python, train.py]}}
slurm: {time: "1", signal_before_limit: 45}
"""


def chained(tmp_path: Path, launch: str = "launch: {chain: 3}") -> Plan:
    plan = plan_yaml(tmp_path, CONFIG + launch + "\n")
    return replace(plan, launch=with_chain(plan.launch, None, plan.source_format))


def test_launch_chain_and_resume_parse_and_round_trip(tmp_path: Path) -> None:
    plan = chained(tmp_path, 'launch: {chain: 4, resume: ["--resume", "auto"]}')
    assert plan.launch.chain == 4 and plan.launch.resume == ("--resume", "auto")
    assert launch_from_json(plan.launch.to_json()) == plan.launch
    assert "chain" not in LaunchSpec().to_json()  # a run that is not a chain: plan.json as before


@pytest.mark.parametrize("value", ["0", "101", "true", "two", "1.5"])
def test_bad_chain_is_a_located_error(tmp_path: Path, value: str) -> None:
    with pytest.raises(SpecError) as err:
        plan_yaml(tmp_path, CONFIG + f"launch: {{chain: {value}}}\n")
    text = str(err.value)
    assert "launch.chain must be a number of jobs from 1 to 100" in text and "config.yaml:" in text, text


def test_cli_chain_overrides_and_format_resume_defaults() -> None:
    base = LaunchSpec(chain=2)
    assert with_chain(base, 5, "native") == LaunchSpec(chain=5, resume=())
    assert with_chain(LaunchSpec(), 3, "rlinf").resume == ("runner.resume_dir=auto",)
    assert with_chain(LaunchSpec(), 3, "areal").resume == ("recover.mode=auto",)
    assert with_chain(LaunchSpec(), 3, "roll").resume == ()  # ROLL resumes from a path only the run knows
    assert with_chain(LaunchSpec(resume=("x=1",)), 3, "rlinf").resume == ("x=1",)  # the config's own wins
    assert with_chain(LaunchSpec(), None, "rlinf") == LaunchSpec()  # no chain, no resume
    assert set(CHAIN_RESUME) == {"rlinf", "areal"}
    with pytest.raises(SpecError, match="--chain must be a number of jobs"):
        with_chain(LaunchSpec(), 0, "native")


def test_script_of_a_chain(tmp_path: Path) -> None:
    plan = chained(tmp_path)
    script = render_script(plan, "/shared/runs/a")
    other = render_script(plan, "/shared/runs/b")
    name = chain.chain_job_name("chained", "/shared/runs/a")
    assert f"#SBATCH --job-name={name}" in script and "#SBATCH --dependency=singleton" in script
    assert name not in other  # another run directory, another chain: singleton never orders the two
    assert "hp_chain_window=50" in script  # the 45 s warning + 5 s: a link that ends then reached its limit
    assert "trap 'hp_chain_end $?' EXIT" in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    plain = render_script(plan_yaml(tmp_path, CONFIG, "plain.yaml"), "/shared/runs/a")
    assert "singleton" not in plain and "hp_chain" not in plain and "--job-name=chained\n" in plain


def test_a_het_chain_names_each_component_apart(tmp_path: Path) -> None:
    """singleton holds a job while an earlier one of its name has not ended: with one name on every component,
    a het link's component 1 waits for its own leader and the link never starts (Slurm 22.05, measured)."""
    het = CONFIG.replace(
        "    - {label: cpu, partition: cpu, nodes: 1}\n",
        "    - {label: cpu, partition: cpu, nodes: 1}\n    - {label: rtx, partition: rtx4090, nodes: 1, gpus_per_node: 4}\n",
    ).replace(
        "components: {trainer:",
        '    rollout: {node_group: rtx, placement: "0-3"}\ncomponents: {rollout: {command: [python, gen.py]}, trainer:',
    )
    plan = plan_yaml(tmp_path, het + "launch: {chain: 2}\n")
    name = chain.chain_job_name("chained", "/shared/runs/a")
    lines = [x for x in render_script(plan, "/shared/runs/a").splitlines() if x.startswith("#SBATCH --job-name")]
    assert lines == [f"#SBATCH --job-name={name}", f"#SBATCH --job-name={name}.1"]
    plain = render_script(plan_yaml(tmp_path, het, "plain.yaml"), "/shared/runs/a")
    assert [line for line in plain.splitlines() if line.startswith("#SBATCH --job-name")] == [
        "#SBATCH --job-name=chained"
    ] * 2  # a job that is not a chain keeps one name


def test_submit_a_chain(tmp_path: Path, fake_slurm: Path) -> None:
    plan = chained(tmp_path)
    done = submit.submit(plan, tmp_path / "run", slurm_version=slurm_cli.SlurmVersion(22, 5, 8))
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert done.job_id == "4242" and record["chain"] == ["4242"] * 3 and record["chain_length"] == 3
    calls = _calls(fake_slurm)
    assert [c.split()[:2] for c in calls] == [["--parsable", f"--export=ALL,HPCPLACE_CHAIN_LINK={k}"] for k in range(3)]
    assert chain.chain_ids(record) == ["4242"] * 3
    again = submit.submit(plan, tmp_path / "run", slurm_version=slurm_cli.SlurmVersion(22, 5, 8))
    assert again.already_submitted and len(_calls(fake_slurm)) == 3  # never twice


def test_status_reads_how_each_link_ended() -> None:
    lines = [
        '{"link": 0, "event": "start", "job_id": "7", "attempt": 0, "time": "t0"}',
        '{"link": 0, "event": "end", "job_id": "7", "attempt": 0, "time": "t1", "outcome": "time-limit", '
        '"exit_code": 0, "time_left": 40, "cancelled": ""}',
        "garbage",
        '{"link": 1, "event": "start", "job_id": "8", "attempt": 0, "time": "t2"}',
        '{"link": 1, "event": "end", "job_id": "8", "attempt": 0, "time": "t3", "outcome": "failed", '
        '"exit_code": 3, "time_left": 55, "cancelled": "9"}',
    ]
    records = chain.parse_chain(lines)
    assert records[1].cancelled == ("9",) and records[1].exit_code == 3 and records[0].outcome == "time-limit"
    links = [
        chain.LinkState(0, "7", "COMPLETED", records[0]),
        chain.LinkState(1, "8", "FAILED", records[1]),
        chain.LinkState(2, "9", "CANCELLED", None),
    ]
    text = "\n".join(chain.format_chain(links, 3))
    assert "link 1: job 8 FAILED exit=3: failed: the chain stops here (cancelled the later links: job 9)" in text
    assert "link 2: job 9 CANCELLED: never ran" in text
    assert "the chain stopped at link 1: it failed with exit code 3" in text
    assert chain.chain_exit_code(links) == 10 and chain.current_link(links).link == 1
    running = [links[0], chain.LinkState(1, "8", "RUNNING", chain.LinkRecord(1, "8", "t2")), links[2]]
    running[2] = chain.LinkState(2, "9", "PENDING", None)
    assert chain.chain_exit_code(running) == 0 and chain.current_link(running).link == 1
    assert "link 1 of 3 runs (job 8)" in chain.format_chain(running, 3)[-1]
    timed_out = [chain.LinkState(0, "7", "COMPLETED", records[0])]
    assert "did not finish" in chain.chain_summary(timed_out, 1) and chain.chain_exit_code(timed_out) == 12


def test_shim_chain_environment_and_resume() -> None:
    plan = {"launch": {"chain": 3, "resume": ["--resume"]}}
    env = chain_environment(plan, "/runs/a/plan.json", {"HPCPLACE_CHAIN_LINK": "2"})
    assert env == {
        "HPCPLACE_CHAIN_LINK": "2",
        "HPCPLACE_CHAIN_LENGTH": "3",
        "HPCPLACE_CHAIN_STATE": "/runs/a/chain-state",
    }
    assert chain_command(plan, ("python", "t.py"), env) == ("python", "t.py", "--resume")
    first = chain_environment(plan, "/runs/a/plan.json", {"HPCPLACE_CHAIN_LINK": "x"})
    assert first["HPCPLACE_CHAIN_LINK"] == "0" and chain_command(plan, ("t",), first) == ("t",)
    assert chain_environment({"launch": {"mode": "steps"}}, "/runs/a/plan.json", {}) == {}


@pytest.mark.parametrize(
    ("env", "outcome", "cancels"),
    [
        ({"FAKE_RESTARTS": "1"}, "requeued", False),  # Slurm requeued it: the same link starts again
        ({"FAKE_RESTARTS": "1", "FAKE_FAIL": "trainer"}, "requeued", False),  # its tasks killed by the requeue
        ({}, "finished", True),
        ({"FAKE_FAIL": "trainer"}, "failed", True),
        ({"FAKE_TIME_LEFT": "0:40"}, "time-limit", False),  # 40 s left <= the 45 s warning + 5
    ],
)
def test_a_links_end_decides_the_chain(tmp_path: Path, env: dict[str, str], outcome: str, cancels: bool) -> None:
    """The batch script's own decision at a link's end (fake Slurm commands): a link Slurm requeued
    (scontrol's Restarts= past this attempt's) is neither the training's end nor a failure: it cancels
    nothing, and the later links stay pending behind it; a finished or failed link cancels them; one at
    its time limit lets them run."""
    from tests.slurm.test_script import run_script

    run = tmp_path / "run"
    render_run(chained(tmp_path), run)
    res, _, events = run_script(run, tmp_path, FAKE_PENDING="4243 4244", **{"FAKE_TIME_LEFT": "10:00", **env})
    ends = [r for r in map(json.loads, (run / "chain.jsonl").read_text().splitlines()) if r["event"] == "end"]
    assert [e["outcome"] for e in ends] == [outcome], res.stderr
    assert ("scancel 4243 4244" in events) == cancels, events
    if outcome == "requeued":
        assert "link 0 was requeued by Slurm" in res.stderr and "it runs again as attempt 1" in res.stderr
        record = chain.parse_chain((run / "chain.jsonl").read_text().splitlines())[0]
        links = [chain.LinkState(0, "4242", "PENDING", record), chain.LinkState(1, "4243", "PENDING", None)]
        text = "\n".join(chain.format_chain(links, 2))
        assert "link 0: job 4242 PENDING: was requeued by Slurm: it runs again" in text, text
        assert chain.chain_exit_code(links) == 0 and not chain.chain_done(links)


@pytest.mark.parametrize(
    ("env", "outcome"), [({"FAKE_FAIL": "trainer"}, "failed"), ({"FAKE_SLEEP": "30"}, "time-limit")]
)
def test_slurms_early_warning_alone_is_no_time_limit(tmp_path: Path, env: dict[str, str], outcome: str) -> None:
    """Slurm warns 55 s before the limit (10 s early for TERM@45): a link whose program fails before the
    warning is due failed (its later links cancelled); one still running when the script passes the
    warning on (SIGTERM, which ends it) reached its time limit, though the time left (fake: 55 s) says not."""
    from tests.slurm.test_script import run_warned

    run = tmp_path / "run"
    render_run(chained(tmp_path), run)
    res, events, _ = run_warned(run, tmp_path, FAKE_PENDING="4243", FAKE_TIME_LEFT="0:55", **env)
    ends = [r for r in map(json.loads, (run / "chain.jsonl").read_text().splitlines()) if r["event"] == "end"]
    assert [e["outcome"] for e in ends] == [outcome], res.stderr
    assert ("scancel 4243" in events) == (outcome == "failed"), events
    assert ("scancel --signal=TERM 4242" in events) == (outcome == "time-limit"), events
