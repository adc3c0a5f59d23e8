"""Rank and environment computation, the plan's env, refusal to overwrite, and the Python API."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcplace.errors import SpecError
from hpcplace.runtime import ProcessEnv, process_info
from hpcplace.runtime.errors import ShimError
from hpcplace.runtime.plan_index import write_index
from hpcplace.runtime.ranks import PORT_BASE, PORT_SPAN, master_port, merge_environment, shm_dir
from hpcplace.runtime.shim import Options, Resolved, resolve
from tests.runtime.conftest import LAB_CONFIG, REPO, step_envs, task_env, write_plan


@pytest.fixture(scope="module")
def lab_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_plan(tmp_path_factory.mktemp("lab"), LAB_CONFIG)


@pytest.fixture(scope="module")
def strided_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    text = (REPO / "configs" / "model-parallel-strided.yaml").read_text()
    return write_plan(tmp_path_factory.mktemp("strided"), text)


def resolved(plan: Path, component: str, env: dict[str, str]) -> Resolved:
    return resolve(
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


def test_torch_and_rlinf_variables_for_a_recorded_step(lab_plan: Path) -> None:
    envs = step_envs("0")
    got = [resolved(lab_plan, "actor", env).changes for env in envs]
    assert [c["RANK"] for c in got] == ["0", "1", "2", "3"]
    assert {c["WORLD_SIZE"] for c in got} == {"4"}
    assert [c["LOCAL_RANK"] for c in got] == ["0", "1", "0", "1"]
    assert [c["NODE_LOCAL_RANK"] for c in got] == ["0", "1", "0", "1"]
    assert {c["LOCAL_WORLD_SIZE"] for c in got} == {"2"} == {c["NODE_LOCAL_WORLD_SIZE"] for c in got}
    assert [c["NODE_RANK"] for c in got] == ["0", "0", "1", "1"]
    assert [c["CLUSTER_NODE_RANK"] for c in got] == ["0", "0", "1", "1"] == [c["HPCPLACE_NODE_RANK"] for c in got]
    assert {c["MASTER_ADDR"] for c in got} == {"a800-1"}
    assert len({c["MASTER_PORT"] for c in got}) == 1
    first = got[0]
    assert first["ISOLATE_ACCELERATOR"] == "1" and first["ACCELERATOR_TYPE"] == "a800"
    assert first["LOCAL_HARDWARE_RANKS"] == "0" and first["NODE_GROUP_LABEL"] == "a800"
    assert first["HPCPLACE_JOB_ID"] == "120" and first["HPCPLACE_SHM_DIR"] == "/dev/shm/hpcplace-120/node-a800-1"
    assert first["HPCPLACE_PLAN"] == str(lab_plan.resolve()) and first["HPCPLACE_COMPONENT"] == "actor"
    assert first["HPCPLACE_RANK"] == "0" and first["HPCPLACE_WORLD_SIZE"] == "4"
    assert first["ACTOR_FLAG"] == "1"  # the component's env from plan.json
    assert first["HPCPLACE_COLLOCATION_GROUP"] == "colloc-0"  # actor shares its GPUs with span01
    agent = resolved(lab_plan, "agent", step_envs("2")[0]).changes
    assert agent["HPCPLACE_COLLOCATION_GROUP"] is None


def test_master_addr_of_a_multi_group_component_is_rank0_host(lab_plan: Path) -> None:
    env = step_envs("0,1")[4]  # rtx4090-1 task
    changes = resolved(lab_plan, "span01", env).changes
    assert changes["RANK"] == "4" and changes["MASTER_ADDR"] == "a800-1"
    assert changes["NODE_RANK"] == "2" and changes["CLUSTER_NODE_RANK"] == "2"


def test_master_port_distinct_per_component_and_job(lab_plan: Path) -> None:
    ports = {
        c: resolved(lab_plan, c, env).changes["MASTER_PORT"]
        for c, env in (
            ("actor", step_envs("0")[0]),
            ("inference", step_envs("1")[0]),
            ("agent", step_envs("2")[0]),
            ("span01", step_envs("0,1")[0]),
        )
    }
    assert len(set(ports.values())) == 4
    assert master_port("120", 0) != master_port("121", 0)
    for job in ("1", "120", "99999999", "demo-local-20260101-000000-42"):
        for ci in range(40):
            assert PORT_BASE <= master_port(job, ci) < PORT_BASE + PORT_SPAN < 32768
        assert len({master_port(job, ci) for ci in range(32)}) == 32
    assert master_port("demo-local-x", 1) == master_port("demo-local-x", 1)


def test_weight_sync_peers(strided_plan: Path) -> None:
    """actor TP=4, rollout TP=2 collocated: rollout 0 = GPUs 0,2, fed by actor ranks 0 and 2."""

    def env_for(rank: int, gpu: str, ntasks: int) -> dict[str, str]:
        return task_env(
            procid=rank, host="a800-1", localid=rank, nodeid=0, ntasks=ntasks, step_nodelist="a800-1", cuda=gpu
        )

    one_group = {"SLURM_HET_SIZE": "1", "SLURM_JOB_NODELIST_HET_GROUP_0": "a800-1"}
    actor2 = resolved(strided_plan, "actor", {**env_for(2, "2", 8), **one_group}).changes
    assert actor2["HPCPLACE_WEIGHT_SYNC_TARGETS"] == "0:1"
    assert actor2["HPCPLACE_WEIGHT_SYNC_SOURCES"] is None
    rollout0 = resolved(strided_plan, "rollout", {**env_for(0, "0,2", 4), **one_group}).changes
    assert rollout0["HPCPLACE_WEIGHT_SYNC_SOURCES"] == "0,2"
    assert rollout0["HPCPLACE_WEIGHT_SYNC_TARGETS"] is None
    assert rollout0["CUDA_VISIBLE_DEVICES"] == "0,2"
    assert rollout0["HPCPLACE_COLLOCATION_GROUP"] == actor2["HPCPLACE_COLLOCATION_GROUP"] is not None


def test_plan_env_may_not_set_computed_variables(tmp_path: Path) -> None:
    # refused at plan time, pointing at the key ...
    with pytest.raises(SpecError, match="'RANK' is set by hpcplace") as info:
        write_plan(tmp_path, LAB_CONFIG.replace('env: {ACTOR_FLAG: "1"}', 'env: {RANK: "9"}'))
    assert info.value.location is not None and info.value.location.line > 1
    # ... and still by the shim, for a plan.json written by something else
    plan = write_plan(tmp_path, LAB_CONFIG)
    text = plan.read_text()
    assert text.count('"ACTOR_FLAG": "1"') == 1
    plan.write_text(text.replace('"ACTOR_FLAG": "1"', '"RANK": "9"'))
    write_index(plan)
    with pytest.raises(ShimError, match="sets RANK"):
        resolved(plan, "actor", step_envs("0")[0])


# ---- refusal to overwrite -------------------------------------------------------------------------


def test_refuses_user_variables_and_names_them(lab_plan: Path) -> None:
    env = step_envs("0")[0]
    changes = resolved(lab_plan, "actor", env).changes
    with pytest.raises(ShimError) as info:
        merge_environment({**env, "RANK": "5", "MASTER_PORT": "1234"}, changes)
    text = str(info.value)
    assert "RANK='5'" in text and "MASTER_PORT='1234'" in text and "env -u RANK" in text


def test_same_value_and_leaked_gpu_variables_are_fine(lab_plan: Path) -> None:
    env = step_envs("0")[1]
    changes = resolved(lab_plan, "actor", env).changes
    merged = merge_environment({**env, "RANK": "1", "CUDA_VISIBLE_DEVICES": "0,1"}, changes)
    assert merged["CUDA_VISIBLE_DEVICES"] == "1" and merged["RANK"] == "1"
    assert merged["SLURM_JOB_GPUS"] == "0,1"  # Slurm's own variables are left alone


def test_variables_to_unset_count_as_conflicts(lab_plan: Path) -> None:
    env = step_envs("1")[0]
    changes = resolved(lab_plan, "inference", env).changes
    assert changes["HPCPLACE_WEIGHT_SYNC_TARGETS"] is None
    merged = merge_environment(env, changes)
    assert "HPCPLACE_WEIGHT_SYNC_TARGETS" not in merged
    with pytest.raises(ShimError, match="HPCPLACE_WEIGHT_SYNC_TARGETS='0:0' \\(hpcplace sets unset\\)"):
        merge_environment({**env, "HPCPLACE_WEIGHT_SYNC_TARGETS": "0:0"}, changes)


# ---- the Python API -----------------------------------------------------------------------------


def test_process_info_reads_back_what_the_shim_sets(lab_plan: Path, strided_plan: Path) -> None:
    for plan, component, env in (
        (lab_plan, "actor", step_envs("0")[3]),
        (lab_plan, "agent", step_envs("2")[1]),
        (lab_plan, "span012", step_envs("0,1,2")[4]),
    ):
        result = resolved(plan, component, env)
        info = process_info(merge_environment(env, result.changes))
        assert info == result.info
        assert isinstance(info, ProcessEnv)
    info = resolved(lab_plan, "actor", step_envs("0")[3]).info
    assert info.rank == 3 and info.visible_devices == ("1",) and info.physical_devices == ("1",)
    with pytest.raises(AttributeError):
        info.rank = 0  # type: ignore[misc]


def test_process_info_outside_the_shim() -> None:
    with pytest.raises(ShimError, match="not started through hpcplace-run: missing RANK"):
        process_info({})


def test_shm_dir_is_safe() -> None:
    assert shm_dir("120") == "/dev/shm/hpcplace-120"
    assert shm_dir("a/../b c") == "/dev/shm/hpcplace-a_.._b_c"
