"""Python callables as components, run through the local backend: every rank's return value comes
back in rank order, computed from the environment the shim gives that rank; a raising rank names
its component and rank with the original traceback; components without a callable keep their command."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from hpcplace.functions import FunctionError, run_functions_local, submit_functions
from hpcplace.runtime import process_info

REPO = Path(__file__).resolve().parents[2]

CONFIG = f"""
name: functions
cluster:
  node_groups:
    - {{label: gpu, partition: gpu, nodes: 2, gpus_per_node: 2, gpu_type: a800}}
    - {{label: cpu, partition: cpu, nodes: 1}}
  component_placement:
    actor: {{node_group: gpu, placement: "0-3"}}
    rollout: {{node_group: cpu, placement: "0:0-1"}}
    agent: {{node_group: cpu, placement: "0"}}
components:
  agent: {{command: [{json.dumps(sys.executable)}, -c, "print('agent ran')"]}}
"""


def train(scale: int, *, offset: int = 0) -> dict[str, object]:
    info = process_info()
    rank = int(os.environ["RANK"])
    return {
        "value": rank * scale + offset,
        "rank": info.rank,
        "world": info.world_size,
        "component": info.component,
        "cuda": os.environ["CUDA_VISIBLE_DEVICES"],
    }


def generate(scale: int, *, offset: int = 0) -> str:
    return f"sample-{os.environ['RANK']}-of-{os.environ['WORLD_SIZE']}-{scale}-{offset}"


def explode(scale: int, *, offset: int = 0) -> str:
    if os.environ["RANK"] == "1":
        raise ValueError(f"boom on rank {os.environ['RANK']} (scale {scale})")
    return "fine"


def vanish(scale: int) -> str:
    if os.environ["RANK"] == "0":
        os._exit(5)  # no exception, no record
    return "fine"


def unpicklable_result(scale: int) -> object:
    return threading.Lock()


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(REPO)  # the ranks import this module by name (cloudpickle pickles it by reference)
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(CONFIG), encoding="utf-8")
    return path


def test_results_per_rank(config: Path, tmp_path: Path) -> None:
    job = run_functions_local(
        config, {"actor": train, "rollout": generate}, run_dir=tmp_path / "run", args=(10,), kwargs={"offset": 1}
    )
    assert job.job_id is None and job.exit_code == 0 and job.wait() == "COMPLETED"
    results = job.results()
    assert sorted(results) == ["actor", "rollout"]
    assert [r["value"] for r in results["actor"]] == [1, 11, 21, 31]
    assert [r["rank"] for r in results["actor"]] == [0, 1, 2, 3]
    assert {r["world"] for r in results["actor"]} == {4}
    assert {r["component"] for r in results["actor"]} == {"actor"}
    assert [r["cuda"] for r in results["actor"]] == ["0", "1", "0", "1"]  # no GPU here: virtual, as planned
    assert results["rollout"] == ["sample-0-of-2-10-1", "sample-1-of-2-10-1"]
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    commands = {c["name"]: c["command"] for c in plan["components"]}
    assert commands["agent"] == [sys.executable, "-c", "print('agent ran')"]  # no callable: command kept
    assert commands["actor"] == [
        sys.executable,
        "-m",
        "hpcplace.runtime.call",
        str(tmp_path / "run" / "functions" / "actor.pkl"),
        str(tmp_path / "run" / "results"),
    ]
    assert sorted(p.name for p in (tmp_path / "run" / "results").iterdir()) == [
        "actor.0.pkl",
        "actor.1.pkl",
        "actor.2.pkl",
        "actor.3.pkl",
        "rollout.0.pkl",
        "rollout.1.pkl",
    ]


def test_a_raising_rank_is_named_with_its_traceback(config: Path, tmp_path: Path) -> None:
    job = submit_functions(
        config, {"actor": generate, "rollout": explode}, run_dir=tmp_path / "run", args=(7,), local=True
    )
    assert job.exit_code == 1 and job.state() == "FAILED"
    with pytest.raises(FunctionError) as caught:
        job.results()
    text = str(caught.value)
    assert "component 'rollout' rank 1 raised" in text
    assert "Traceback (most recent call last)" in text and "in explode" in text
    assert "ValueError: boom on rank 1 (scale 7)" in text
    assert "[rollout 1]" in text  # the hint points at its prefixed output


def test_a_rank_without_result_is_named(config: Path, tmp_path: Path) -> None:
    job = run_functions_local(config, {"actor": generate, "rollout": vanish}, run_dir=tmp_path / "run", args=(1,))
    assert job.exit_code == 5
    with pytest.raises(FunctionError, match=r"left no result \(exit code 5\): [\s\S]*rollout rank 0"):
        job.results()


def test_an_unpicklable_result_is_an_error(config: Path, tmp_path: Path) -> None:
    job = run_functions_local(
        config, {"actor": generate, "rollout": unpicklable_result}, run_dir=tmp_path / "run", args=(1,)
    )
    assert job.exit_code == 1
    with pytest.raises(
        FunctionError, match=r"component 'rollout' rank [01] raised[\s\S]*could not be saved: TypeError"
    ):
        job.results()


def test_refusals(config: Path, tmp_path: Path) -> None:
    with pytest.raises(FunctionError, match=r"no component 'critic'[\s\S]*actor, rollout, agent"):
        run_functions_local(config, {"critic": train}, run_dir=tmp_path / "a")
    lock = threading.Lock()
    with pytest.raises(FunctionError, match="cannot pickle the function of component 'actor'"):
        run_functions_local(config, {"actor": lambda: lock, "rollout": generate}, run_dir=tmp_path / "b")
    assert [p.name for p in (tmp_path / "b").iterdir()] == []  # nothing half-written
    with pytest.raises(FunctionError, match="'rollout' have neither a function nor a command"):
        run_functions_local(config, {"actor": train}, run_dir=tmp_path / "c")
    assert not (tmp_path / "c").exists()  # refused before anything was written
    everything = {"actor": generate, "rollout": generate, "agent": generate}
    assert run_functions_local(config, everything, run_dir=tmp_path / "d", args=(1,)).results()["agent"] == [
        "sample-0-of-1-1-0"
    ]
    with pytest.raises(FunctionError, match="already holds a run"):
        run_functions_local(config, everything, run_dir=tmp_path / "d", args=(1,))
