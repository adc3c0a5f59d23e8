"""Snapshots and process identity from Slurm environments recorded on the real 22.05 test cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcplace.runtime.errors import ShimError
from hpcplace.runtime.shim import Options, resolve
from hpcplace.runtime.slurm_env import locate_node, node_name_at, read_snapshot
from tests.runtime.conftest import BATCH_ENV, LAB_CONFIG, step_envs, task_env, write_plan


@pytest.fixture(scope="module")
def lab_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_plan(tmp_path_factory.mktemp("lab"), LAB_CONFIG)


def identify(plan: Path, component: str, env: dict[str, str]) -> tuple[int, dict[str, str | None]]:
    resolved = resolve(
        Options(
            plan=str(plan),
            component=component,
            command=("true",),
            chdir=None,
            print_env=True,
            verify=False,
            verbose=False,
        ),
        env,
    )
    return resolved.info.rank, resolved.changes


def test_batch_step_snapshot() -> None:
    env = {**BATCH_ENV, "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURMD_NODENAME": "a800-1"}
    snap = read_snapshot(env)
    assert snap.job_id == "120"
    assert snap.het_size == 3
    assert [g.nodelist for g in snap.groups] == ["a800-[1-2]", "rtx4090-1", "cpu-1"]
    assert [g.partition for g in snap.groups] == ["a800", "rtx4090", "cpu"]
    assert [g.job_id for g in snap.groups] == ["120", "121", "122"]
    assert [g.num_tasks for g in snap.groups] == [4, 1, 2]
    assert snap.groups[0].tasks_per_node == "2(x2)"
    assert snap.job_gpus == "0,1" and snap.cuda_visible_devices == "0,1"
    assert not snap.synthetic
    with pytest.raises(AttributeError):
        snap.job_id = "1"  # type: ignore[misc]


def test_component_job_id_is_the_leaders() -> None:
    """In a step of component 1, SLURM_JOB_ID is 121; every component must share one job id (120)."""
    env = step_envs("1")[0]
    env["SLURM_JOB_ID"] = "121"
    assert read_snapshot(env).job_id == "120"


def test_pack_group_aliases() -> None:
    env = {
        k.replace("HET_GROUP", "PACK_GROUP").replace("SLURM_HET_SIZE", "SLURM_PACK_SIZE"): v
        for k, v in step_envs("0,1")[4].items()
    }
    snap = read_snapshot(env)
    assert snap.het_size == 3
    assert snap.groups[1].nodelist == "rtx4090-1"
    assert locate_node(snap, [0, 1]) == (1, 0)


def test_het_size_inferred_from_group_lists() -> None:
    env = step_envs("0")[0]
    del env["SLURM_HET_SIZE"]
    assert read_snapshot(env).het_size == 3


def test_plain_job_without_het_groups() -> None:
    env = {
        "SLURM_JOB_ID": "77",
        "SLURM_JOB_NODELIST": "n[001-004]",
        "SLURM_PROCID": "5",
        "SLURM_LOCALID": "1",
        "SLURMD_NODENAME": "n003",
        "SLURM_JOB_PARTITION": "gpu",
    }
    snap = read_snapshot(env)
    assert snap.het_size == 1 and snap.job_id == "77"
    assert locate_node(snap, [0]) == (0, 2)
    assert node_name_at(snap, 0, 3) == "n004"


def test_missing_variables_are_named_together() -> None:
    with pytest.raises(ShimError) as info:
        read_snapshot({"SLURMD_NODENAME": "a800-1"})
    text = str(info.value)
    for name in ("SLURM_JOB_NODELIST", "SLURM_JOB_ID", "SLURM_PROCID", "SLURM_LOCALID"):
        assert name in text
    assert "HINT" in text


def test_missing_group_list_and_bad_integers() -> None:
    env = step_envs("0")[0]
    del env["SLURM_JOB_NODELIST_HET_GROUP_2"]
    env["SLURM_LOCALID"] = "x"
    with pytest.raises(ShimError) as info:
        read_snapshot(env)
    assert "SLURM_JOB_NODELIST_HET_GROUP_2" in str(info.value)
    assert "SLURM_LOCALID='x'" in str(info.value)


def test_malformed_node_list_is_reported() -> None:
    env = step_envs("0")[0]
    env["SLURM_JOB_NODELIST_HET_GROUP_0"] = "a800-[1-2"
    with pytest.raises(ShimError, match="unclosed"):
        read_snapshot(env)


def test_hostname_fallback_and_fqdn() -> None:
    env = step_envs("1")[0]
    del env["SLURMD_NODENAME"]
    snap = read_snapshot(env, hostname="rtx4090-1.cluster.example")
    assert locate_node(snap, [1]) == (1, 0)


@pytest.mark.parametrize(
    "groups, component", [("0", "actor"), ("1", "inference"), ("2", "agent"), ("0,1", "span01"), ("0,1,2", "span012")]
)
def test_every_task_of_a_recorded_step_finds_a_distinct_process(lab_plan: Path, groups: str, component: str) -> None:
    envs = step_envs(groups, partition="rtx4090")  # SLURM_JOB_PARTITION is unreliable: must not matter
    ranks = [identify(lab_plan, component, env)[0] for env in envs]
    assert sorted(ranks) == list(range(len(envs)))


def test_multi_group_step_uses_node_lists_not_nodeid(lab_plan: Path) -> None:
    """--het-group=0,1,2: cpu-1 has NODEID 3 while it is 3rd in the sorted step list; rtx4090-1 has NODEID 2."""
    envs = step_envs("0,1,2")
    by_host = {}
    for env in envs:
        rank, changes = identify(lab_plan, "span012", env)
        by_host.setdefault(env["SLURMD_NODENAME"], []).append((int(env["SLURM_LOCALID"]), rank, changes))
    assert [r for _, r, _ in by_host["rtx4090-1"]] == [4]
    assert [r for _, r, _ in sorted(by_host["cpu-1"])] == [5, 6]
    rtx = by_host["rtx4090-1"][0][2]
    assert rtx["HPCPLACE_HET_GROUP"] == "1" and rtx["HPCPLACE_PARTITION"] == "rtx4090"
    assert rtx["NODE_GROUP_LABEL"] == "rtx4090" and rtx["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    cpu = by_host["cpu-1"][0][2]
    assert cpu["CUDA_VISIBLE_DEVICES"] == "" and cpu["HPCPLACE_PARTITION"] == "cpu"
    assert cpu["CPU_GROUP"] == "yes"  # node group env from plan.json
    for _, _, changes in by_host["a800-1"] + by_host["a800-2"]:
        assert changes["MASTER_ADDR"] == "a800-1"
        assert changes["ISOLATE_ACCELERATOR"] == "0"


def test_task_on_an_unplanned_node_or_extra_local_task(lab_plan: Path) -> None:
    env = step_envs("1")[0]
    with pytest.raises(ShimError, match="not in the node lists"):
        identify(lab_plan, "actor", {**env, "SLURM_STEP_NUM_TASKS": "4"})
    env = step_envs("0")[1]
    with pytest.raises(ShimError, match="SLURM_LOCALID=2"):
        identify(lab_plan, "actor", {**env, "SLURM_LOCALID": "2"})


def test_step_with_the_wrong_number_of_tasks(lab_plan: Path) -> None:
    env = step_envs("0")[0]
    with pytest.raises(ShimError, match="this step has 5 tasks"):
        identify(lab_plan, "actor", {**env, "SLURM_STEP_NUM_TASKS": "5"})


def test_unknown_component(lab_plan: Path) -> None:
    with pytest.raises(ShimError, match="'critic' is not in the plan"):
        identify(lab_plan, "critic", step_envs("0")[0])


def test_task_env_helper_matches_the_table() -> None:
    env = task_env(
        procid=4, host="rtx4090-1", localid=0, nodeid=2, ntasks=5, step_nodelist="a800-[1-2],rtx4090-1", cuda="0"
    )
    assert env["SLURM_JOB_GPUS"] == "0,1"  # leaked from the batch step, never trusted
    assert read_snapshot(env).step_nodelist == "a800-[1-2],rtx4090-1"
