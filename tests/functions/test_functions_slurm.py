"""Python callables as components on the real test cluster (marker `slurm`): a 2-component het job
(a800 GPU group + cpu group) returns every rank's value, computed on its planned host with its
planned ranks and GPUs; a raising rank fails the job fast and is named with its traceback.
The functions API is Python on purpose; the same kinds of job (an a800 + cpu het job, a failing rank
stopping the rest) go through the `hpcplace` command line in tests/slurm/test_cluster.py."""

from __future__ import annotations

import os
import socket
import textwrap
import time
from pathlib import Path

import pytest

from hpcplace.functions import FunctionError, submit_functions
from hpcplace.runtime import process_info
from hpcplace.slurm import submit
from tests.slurm.conftest import REPO, LiveCluster, slurm_cluster  # noqa: F401 - the fixture

pytestmark = pytest.mark.slurm

CONFIG = """
name: functions-slurm
cluster:
  node_groups:
    - {label: a800, partition: a800, nodes: 1, gpus_per_node: 8, gpu_type: a800}
    - {label: cpu, partition: cpu, nodes: 1}
  component_placement:
    actor: {node_group: a800, placement: "0-1:0,2-3:1"}
    rollout: {node_group: cpu, placement: "0:0-1"}
slurm: {time: "00:05:00"}
"""
TIMEOUT_S = 120


def where(tag: str) -> dict[str, object]:
    info = process_info()
    return {
        "tag": tag,
        "rank": int(os.environ["RANK"]),
        "world": int(os.environ["WORLD_SIZE"]),
        "info_rank": info.rank,
        "host": socket.gethostname(),
        "cuda": os.environ["CUDA_VISIBLE_DEVICES"],
        "job": os.environ["HPCPLACE_JOB_ID"],
    }


def fail_on_rank_1(tag: str) -> dict[str, object]:
    if os.environ["RANK"] == "1":
        raise RuntimeError(f"rollout rank 1 gives up ({tag})")
    time.sleep(240)  # stopped by the failure long before this
    return where(tag)


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(REPO)  # the ranks import this module by name: the job runs in the submit directory
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(CONFIG), encoding="utf-8")
    return path


def test_every_rank_returns_its_value(slurm_cluster: LiveCluster, config: Path, tmp_path: Path) -> None:
    job = submit_functions(config, {"actor": where, "rollout": where}, run_dir=tmp_path / "run", args=("x",))
    assert job.job_id is not None
    assert job.wait(timeout=TIMEOUT_S) == "COMPLETED"
    results = job.results()
    plan = submit.load_plan(job.run_dir / "plan.json")  # what the job ran
    hosts = submit.read_hosts(job.run_dir)
    for comp in plan.components:
        got = results[comp.name]
        assert len(got) == comp.world_size
        for p, r in zip(comp.processes, got):
            label = f"{comp.name} rank {p.rank}"
            assert (r["tag"], r["rank"], r["info_rank"], r["world"]) == ("x", p.rank, p.rank, comp.world_size), label
            assert r["host"] == hosts[(p.het_group, p.group_node_index)], label
            assert r["job"] == job.job_id, label
            want = (
                ",".join(p.visible_accelerators)
                if slurm_cluster.mode == "no"
                else (",".join(str(i) for i in range(len(p.visible_accelerators))))
            )
            assert r["cuda"] == want, label
    assert [r["cuda"] for r in results["rollout"]] == ["", ""]


def test_a_raising_rank_fails_the_job_and_is_named(slurm_cluster: LiveCluster, config: Path, tmp_path: Path) -> None:
    t0 = time.monotonic()
    job = submit_functions(
        config, {"actor": fail_on_rank_1, "rollout": fail_on_rank_1}, run_dir=tmp_path / "run", args=("y",)
    )
    assert job.wait(timeout=TIMEOUT_S) == "FAILED"
    assert time.monotonic() - t0 < 90, "the other ranks were not stopped"
    with pytest.raises(FunctionError) as caught:
        job.results()
    text = str(caught.value)
    assert "component 'actor' rank 1 raised on a800-1" in text or "component 'rollout' rank 1 raised on cpu-1" in text
    assert "in fail_on_rank_1" in text and "RuntimeError: rollout rank 1 gives up (y)" in text
    assert f"hpcplace logs {job.run_dir} --component" in text
