"""The real-cluster tier (marker `slurm`) for runs longer than the time limit (issue 27, part 3): a run
submitted as a chain of jobs (`hpcplace submit --chain N`), every link the same job.sbatch under a
singleton dependency. Links run chain_counter.py, which resumes a step counter from
$HPCPLACE_CHAIN_STATE. A 1-minute limit with a 30 s warning (SIGTERM@30) ends a link ~30 s in; a link that
ends with no more than the warning's seconds + 5 s left counts as reaching its limit, so a link that finishes
must end within ~25 s of its start (a 45 s warning left 10 s, and a slow start on a loaded CI machine took 8).

- 3 links: links 0 and 1 are stopped by the warning (the next resumes), link 2 finishes the count;
- a link that exits 0 at once ends the chain: the later links are cancelled and never run;
- a failing link stops the chain: later links cancelled, `status` says why (exit 10);
- `cancel` of a chain cancels the running link and the pending ones;
- the Ray launch mode: a 2-link chain whose driver resumes the counter (the warning reaches the driver).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from tests.slurm.conftest import LiveCluster, cli, config_yaml

pytestmark = pytest.mark.slurm

COUNTER = Path(__file__).with_name("chain_counter.py")


def chain_config(tmp_path: Path, name: str, args: list[str], chain: int = 3) -> Path:
    command = json.dumps([sys.executable, str(COUNTER), *args])
    return config_yaml(
        tmp_path,
        f"""
        name: chain-{name}
        cluster:
          node_groups:
            - {{label: cpu, partition: cpu, nodes: 1}}
          component_placement:
            trainer: {{node_group: cpu, placement: "0:0"}}
        components: {{trainer: {{command: {command}}}}}
        launch: {{chain: {chain}, resume: ["--resumed"]}}
        slurm: {{time: "1", signal_before_limit: 30}}
        """,
        f"{name}.yaml",
    )


def submit_chain(config: Path, run_dir: Path, *extra: str) -> list[str]:
    res = cli("submit", config, "-o", run_dir, *extra)
    assert res.returncode == 0, res.stdout + res.stderr
    ids = json.loads((run_dir / "run.json").read_text())["chain"]
    assert f"chain of {len(ids)} jobs: {' '.join(ids)}" in res.stdout, res.stdout
    return [str(i) for i in ids]


def wait_chain(run_dir: Path, timeout: float) -> tuple[int, str]:
    """`hpcplace status --watch RUN` of the chain: its exit code and output, once no link is left."""
    res = cli("status", run_dir, "--watch", "--interval", "0.5", timeout=timeout)
    return res.returncode, res.stdout + res.stderr


def records(run_dir: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (run_dir / "chain.jsonl").read_text().splitlines()]


def links_seen(run_dir: Path) -> list[dict[str, object]]:
    path = run_dir / "chain-state" / "links.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_three_links_resume_a_counter(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """TOTAL 12, 5 steps per link: links 0 and 1 end at their time-limit warning with 5 and 10 steps;
    link 2 resumes at 10, reaches 12 and exits 0: the chain ends with the training done (status 0)."""
    run_dir = tmp_path / "run"
    t0 = time.monotonic()
    ids = submit_chain(chain_config(tmp_path, "three", ["12", "5"]), run_dir)
    assert len(ids) == 3
    code, text = wait_chain(run_dir, timeout=240)
    elapsed = time.monotonic() - t0
    assert code == 0, text
    assert (run_dir / "chain-state" / "count").read_text() == "12"
    seen = links_seen(run_dir)
    assert [(s["link"], s["length"], s["start_count"], s["job"]) for s in seen] == [
        ("0", "3", 0, ids[0]),
        ("1", "3", 5, ids[1]),
        ("2", "3", 10, ids[2]),
    ], seen
    assert [s["argv"] for s in seen] == [[], ["--resumed"], ["--resumed"]]  # launch.resume from link 1 on
    ends = {r["link"]: r for r in records(run_dir) if r["event"] == "end"}
    assert [ends[k]["outcome"] for k in (0, 1, 2)] == ["time-limit", "time-limit", "finished"], ends
    assert "the chain ended at link 2: the training finished" in text
    # each link's logs: the earlier links' step logs moved to logs/link-K, every batch log kept
    assert (run_dir / "logs" / "link-0").is_dir() and (run_dir / "logs" / "link-1").is_dir()
    logs = cli("logs", run_dir, "--link", "0")
    assert logs.returncode == 0 and "link 0 of a chain of 3" in logs.stdout, logs.stdout + logs.stderr
    assert "reached its time limit" in logs.stdout
    print(f"3-link chain done in {elapsed:.1f} s")


def test_a_link_that_finishes_or_fails_ends_the_chain(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """Two chains at once (their own job names): one whose first link exits 0 at once (the training is
    done), one whose first link fails with exit code 3. Both cancel their later links, which never run."""
    done_dir, failed_dir = tmp_path / "done", tmp_path / "failed"
    done_ids = submit_chain(chain_config(tmp_path, "done", ["0", "5"]), done_dir)
    failed_ids = submit_chain(chain_config(tmp_path, "failed", ["10", "5", "3"]), failed_dir)
    code, text = wait_chain(done_dir, timeout=90)
    assert code == 0, text
    assert "the chain ended at link 0: the training finished" in text
    assert f"link 1: job {done_ids[1]} CANCELLED" in text and f"link 2: job {done_ids[2]} CANCELLED" in text
    assert [s["link"] for s in links_seen(done_dir)] == ["0"]  # the later links never ran
    code, text = wait_chain(failed_dir, timeout=90)
    assert code == 10, text
    assert "the chain stopped at link 0: it failed with exit code 3" in text, text
    end = [r for r in records(failed_dir) if r["event"] == "end"]
    assert end[0]["outcome"] == "failed" and end[0]["exit_code"] == 3
    assert str(end[0]["cancelled"]).split() == failed_ids[1:], end
    assert [s["link"] for s in links_seen(failed_dir)] == ["0"]
    assert "failed with exit code 3: the chain stops here" in "\n".join(
        p.read_text() for p in (failed_dir / "logs").glob("batch-*.out")
    )


def test_cancel_cancels_every_link(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """`hpcplace cancel RUN` of a chain whose first link runs: that link and both pending ones end
    CANCELLED, and nothing starts after it."""
    run_dir = tmp_path / "run"
    ids = submit_chain(chain_config(tmp_path, "cancel", ["100", "1"]), run_dir)
    deadline = time.monotonic() + 60
    while not links_seen(run_dir) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert links_seen(run_dir), "link 0 never started"
    res = cli("cancel", run_dir)
    assert res.returncode == 0, res.stdout + res.stderr
    assert all(f"link {k}: cancelled job {ids[k]}" in res.stdout for k in range(3)), res.stdout
    code, text = wait_chain(run_dir, timeout=60)
    assert code in (10, 11), text  # link 0's own end (SIGTERM) records it as failed; the rest CANCELLED
    assert f"link 1: job {ids[1]} CANCELLED" in text and f"link 2: job {ids[2]} CANCELLED" in text
    assert [s["link"] for s in links_seen(run_dir)] == ["0"]


def test_a_ray_mode_chain_resumes_its_driver(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """`launch: {mode: ray, chain: 2}`: each link starts its own Ray cluster; the driver (chain_counter.py
    --ray: ray.init and a task on the cluster first) resumes the counter from HPCPLACE_CHAIN_STATE, with
    launch.resume appended from link 1 on. TOTAL 8, 5 steps per link: link 0 ends at its time-limit
    warning (SIGTERM to the driver alone), link 1 resumes at 5 and finishes (Ray's start, then 3 steps: 8 s
    on Slurm 26.05). A 2-minute limit, so a finishing link has ~85 s (see the module docstring): with 1 minute
    its ~25 s were too few for Ray's start on a machine loaded far beyond its cores (load 25 on 2)."""
    run_dir = tmp_path / "run"
    config = config_yaml(
        tmp_path,
        """
        name: chain-ray
        cluster:
          node_groups:
            - {label: cpu, partition: cpu, nodes: 1}
          component_placement:
            trainer: {node_group: cpu, placement: "0:0"}
        launch: {mode: ray, chain: 2, resume: ["--resumed"], join_timeout: 60}
        slurm: {time: "2", signal_before_limit: 30}
        """,
        "ray.yaml",
    )
    env = {**slurm_cluster.env, "HPCPLACE_RAY_ARGS": "--object-store-memory=80000000"}
    res = cli(
        "submit", config, "-o", run_dir, "--driver", "--", sys.executable, str(COUNTER), "8", "5", "--ray", env=env
    )
    assert res.returncode == 0, res.stdout + res.stderr
    ids = [str(i) for i in json.loads((run_dir / "run.json").read_text())["chain"]]
    code, text = wait_chain(run_dir, timeout=300)
    assert code == 0, text + "".join(p.read_text() for p in (run_dir / "logs").rglob("batch-*.out"))
    assert (run_dir / "chain-state" / "count").read_text() == "8"
    seen = links_seen(run_dir)
    assert [(s["link"], s["length"], s["start_count"], s["argv"]) for s in seen] == [
        ("0", "2", 0, ["--ray"]),
        ("1", "2", 5, ["--ray", "--resumed"]),
    ], seen
    assert all(s["ray_task_host"] == "cpu-1" and s["ray_address"] for s in seen), seen
    assert [s["job"] for s in seen] == ids, (seen, ids)
    ends = {r["link"]: r for r in records(run_dir) if r["event"] == "end"}
    assert [ends[k]["outcome"] for k in (0, 1)] == ["time-limit", "finished"], ends
    batch = (run_dir / "logs" / f"batch-{ids[0]}.out").read_text()
    assert "time-limit warning: SIGTERM sent to the driver (step" in batch, batch


def test_a_requeued_link_is_the_same_link_starting_again(slurm_cluster: LiveCluster, tmp_path: Path) -> None:
    """`slurm.requeue: true`, 2 links, TOTAL 15, 5 steps per link: link 0 is requeued while it runs
    (`scontrol requeue`, as a preemption would): it records `requeued`, cancels nothing, link 1 stays
    pending behind it; link 0 runs again as attempt 1 (from the counter its SIGTERM saved), ends at its
    time-limit warning, and link 1 resumes and finishes."""
    run_dir = tmp_path / "run"
    config = chain_config(tmp_path, "requeue", ["15", "5"], chain=2)
    config.write_text(config.read_text().replace('slurm: {time: "1",', 'slurm: {requeue: true, time: "1",'))
    ids = submit_chain(config, run_dir)
    deadline = time.monotonic() + 60
    while not links_seen(run_dir) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert links_seen(run_dir), "link 0 never started"
    time.sleep(1)  # its 5 steps
    res = slurm_cluster.run("scontrol", "requeue", ids[0])
    assert res.returncode == 0, res.stderr
    deadline = time.monotonic() + 60  # Slurm holds a requeued job back (BeginTime): let it start now
    while len(links_seen(run_dir)) < 2 and time.monotonic() < deadline:
        slurm_cluster.run("scontrol", "update", f"JobId={ids[0]}", "StartTime=now")
        time.sleep(1)
    code, text = wait_chain(run_dir, timeout=150)
    assert code == 0, text
    seen = links_seen(run_dir)
    assert [(s["link"], s["start_count"], s["job"]) for s in seen] == [
        ("0", 0, ids[0]),
        ("0", 5, ids[0]),
        ("1", 10, ids[1]),
    ], seen
    assert (run_dir / "chain-state" / "count").read_text() == "15"
    ends = [(r["link"], r["attempt"], r["outcome"], r["cancelled"]) for r in records(run_dir) if r["event"] == "end"]
    assert ends == [(0, 0, "requeued", ""), (0, 1, "time-limit", ""), (1, 0, "finished", "")], ends
    assert "the chain ended at link 1: the training finished" in text
