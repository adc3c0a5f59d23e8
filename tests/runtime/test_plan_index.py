"""The plan index: O(1) lookups in a 65,536-process plan, layout validation, stale-index detection."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from hpcplace.runtime.errors import ShimError
from hpcplace.runtime.plan_index import PlanIndex, index_path, write_index
from hpcplace.runtime.shim import Options, resolve
from tests.runtime.conftest import LAB_CONFIG, write_plan

BIG_CONFIG = """
name: big
cluster:
  node_groups:
    - {label: gpu, partition: gpu, nodes: 8192, gpus_per_node: 8, gpu_type: h100}
  component_placement:
    actor: all
components:
  actor: {command: ["true"]}
"""


@pytest.fixture(scope="module")
def big_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_plan(tmp_path_factory.mktemp("big"), BIG_CONFIG)


@pytest.fixture
def lab_plan(tmp_path: Path) -> Path:
    return write_plan(tmp_path, LAB_CONFIG)


def bytes_read() -> int:
    """Bytes this process has read through read()/pread() so far (Linux /proc accounting)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def test_lookups_match_the_full_parse(big_plan: Path) -> None:
    doc = json.loads(big_plan.read_text())
    processes = doc["components"][0]["processes"]
    assert len(processes) == 65536
    with PlanIndex(big_plan) as index:
        assert index.het_groups(0) == [0]
        for rank in [0, 1, 7, 8, 65535] + random.Random(4).sample(range(65536), 200):
            expected = processes[rank]
            assert index.process(0, rank) == expected
            found = index.process_at(0, expected["het_group"], expected["group_node_index"], expected["local_rank"])
            assert found == expected
        assert index.process_at(0, 0, 8191, 8) is None
        assert index.process_at(0, 0, 8192, 0) is None
        assert index.process_at(0, 1, 0, 0) is None
        assert index.processes_on(0, 0, 8191) == 8
        with pytest.raises(ShimError, match="no rank 65536"):
            index.process(0, 65536)


def test_a_lookup_reads_a_few_kilobytes_not_the_plan(big_plan: Path) -> None:
    plan_size = big_plan.stat().st_size
    assert plan_size > 20_000_000
    before = bytes_read()
    with PlanIndex(big_plan) as index:
        header = bytes_read() - before
        record = index.process_at(0, 0, 8191, 7)
    total = bytes_read() - before
    assert record is not None and record["rank"] == 65535
    assert total < 200_000, (header, total)  # the header (node groups) plus ~400 bytes, not 23 MB
    assert total - header < 1_000


def test_shim_finds_the_last_process_of_the_big_plan(big_plan: Path) -> None:
    env = {
        "SLURM_JOB_ID": "9",
        "SLURM_JOB_NODELIST": "gpu[0001-8192]",
        "SLURMD_NODENAME": "gpu8192",
        "SLURM_PROCID": "65535",
        "SLURM_LOCALID": "7",
        "SLURM_STEP_NUM_TASKS": "65536",
        "CUDA_VISIBLE_DEVICES": "7",
    }
    resolved = resolve(
        Options(
            plan=str(big_plan), component="actor", command=(), chdir=None, print_env=True, verify=False, verbose=False
        ),
        env,
    )
    assert resolved.info.rank == 65535 and resolved.info.master_addr == "gpu0001"
    assert resolved.changes["CUDA_VISIBLE_DEVICES"] == "7" and resolved.command == ("true",)


def test_index_holds_the_header(lab_plan: Path) -> None:
    with PlanIndex(lab_plan) as index:
        assert [c["name"] for c in index.components] == ["actor", "inference", "agent", "span01", "span012"]
        assert "processes" not in index.components[0]
        assert index.plan["node_groups"][2]["env"] == {"CPU_GROUP": "yes"}
        assert index.het_groups(index.component_index("span012")) == [0, 1, 2]
        with pytest.raises(ShimError, match="components: actor"):
            index.component_index("nope")


def test_rejects_plans_without_one_process_per_line(tmp_path: Path, lab_plan: Path) -> None:
    doc = json.loads(lab_plan.read_text())
    one_line = tmp_path / "one-line.json"
    one_line.write_text(json.dumps(doc))
    with pytest.raises(ShimError, match="one process per line"):
        write_index(one_line)
    indented = tmp_path / "indented.json"
    indented.write_text(json.dumps(doc, indent=2))
    with pytest.raises(ShimError, match="process 0 alone"):
        write_index(indented)
    not_a_plan = tmp_path / "x.json"
    not_a_plan.write_text('{"schema": "other"}')
    with pytest.raises(ShimError, match="not an hpcplace plan"):
        write_index(not_a_plan)
    broken = tmp_path / "broken.json"
    broken.write_text(lab_plan.read_text()[:-10])
    with pytest.raises(ShimError, match="not valid JSON"):
        write_index(broken)


def test_two_processes_on_one_line(tmp_path: Path, lab_plan: Path) -> None:
    lines = lab_plan.read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.strip().startswith('{"rank":0'))
    lines[first : first + 2] = [lines[first] + lines[first + 1].strip()]
    bad = tmp_path / "two.json"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(ShimError):
        write_index(bad)


def test_stale_or_missing_index(tmp_path: Path, lab_plan: Path) -> None:
    lab_plan.write_text(lab_plan.read_text() + " ")
    with pytest.raises(ShimError, match="changed after its index was written"):
        PlanIndex(lab_plan)
    Path(index_path(lab_plan)).unlink()
    with pytest.raises(ShimError, match="cannot open the plan index") as info:
        PlanIndex(lab_plan)
    assert "write_index" in str(info.value)
    with pytest.raises(ShimError, match="cannot open plan"):
        PlanIndex(tmp_path / "missing.json")


def test_same_size_edit_is_caught_at_lookup(lab_plan: Path) -> None:
    """Swap the lines of ranks 0 and 2 of actor (same length): the size matches, the rank does not."""
    lines = lab_plan.read_text().split("\n")
    first = next(i for i, line in enumerate(lines) if line.strip().startswith('{"rank":0'))
    a, b = lines[first], lines[first + 2]
    assert len(a) == len(b)
    lines[first], lines[first + 2] = b, a
    lab_plan.write_text("\n".join(lines))
    with PlanIndex(lab_plan) as index, pytest.raises(ShimError, match="index is stale"):
        index.process(0, 0)
