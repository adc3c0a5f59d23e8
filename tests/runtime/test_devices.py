"""Device visibility under both ConstrainDevices modes, leaked variables, and the NVML check."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcplace.runtime.devices import (
    BY_UUID,
    JOB_RELATIVE,
    LOCAL_MAP,
    NONE,
    PHYSICAL,
    STEP_LOCAL,
    VIRTUAL,
    NvmlDevice,
    check_devices,
    choose_devices,
    device_environment,
    query_nvml,
)
from hpcplace.runtime.errors import ShimError
from hpcplace.runtime.shim import Options, resolve
from tests.runtime.conftest import LAB_CONFIG, step_envs, write_plan


@pytest.fixture(scope="module")
def lab_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_plan(tmp_path_factory.mktemp("lab"), LAB_CONFIG)


def changes_for(plan: Path, component: str, env: dict[str, str]) -> dict[str, str | None]:
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
    ).changes


# ---- the rules ------------------------------------------------------------------------------------


def test_cpu_process_sees_no_gpu_whatever_leaked() -> None:
    choice = choose_devices((), "0,1")
    assert choice.mode == NONE and choice.value == ""
    assert "leaked" in choice.note
    assert device_environment(choice) == {
        "CUDA_VISIBLE_DEVICES": "",
        "GPU_DEVICE_ORDINAL": "",
        "ROCR_VISIBLE_DEVICES": "",
    }


def test_physical_exact_superset_and_unset() -> None:
    assert choose_devices(("3",), "3").visible == ("3",)
    narrowed = choose_devices(("2", "3"), "0,1,2,3,4,5,6,7")
    assert narrowed.mode == PHYSICAL and narrowed.value == "2,3" and "narrowed" in narrowed.note
    unset = choose_devices(("4", "5"), None)
    assert unset.mode == PHYSICAL and unset.value == "4,5"


def test_step_local_ids_are_kept() -> None:
    """ConstrainDevices=yes: map_gpu:3,1 gives every task "0"; mask_gpu:0xC gives "0,1" for physical 2,3."""
    assert choose_devices(("3",), "0").mode == STEP_LOCAL
    choice = choose_devices(("2", "3"), "0,1")
    assert choice.mode == STEP_LOCAL and choice.value == "0,1" and choice.planned == ("2", "3")


@pytest.mark.parametrize(
    "planned, seen", [(("1",), "2"), (("2", "3"), "0"), (("2", "3"), "0,1,2"), (("4", "5"), "1,2")]
)
def test_other_bindings_are_errors(planned: tuple[str, ...], seen: str) -> None:
    with pytest.raises(ShimError, match="gpu-bind"):
        choose_devices(planned, seen)


def test_job_relative_ids_index_the_jobs_gpus_in_both_constrain_modes() -> None:
    """A job sharing its node got GPUs 4,5 (of 8): every task of its steps sees both (no --gpu-bind),
    "4,5" under ConstrainDevices=no, "0,1" under =yes; plan id k keeps the k-th, and the physical ids
    come from SLURM_STEP_GPUS (ascending, whatever Slurm's order)."""
    no = choose_devices(("1",), "4,5", relative=True, step_gpus="4,5")
    assert (no.mode, no.value, no.physical) == (JOB_RELATIVE, "5", ("5",))
    yes = choose_devices(("1",), "0,1", relative=True, step_gpus="5,4")
    assert (yes.mode, yes.value, yes.physical) == (JOB_RELATIVE, "1", ("5",))
    both = choose_devices(("0", "1"), "1,0", relative=True, step_gpus="4,5")
    assert (both.value, both.physical) == ("0,1", ("4", "5"))
    assert both.note == "job-relative GPU(s) 0,1 -> 0,1 of the job's 0,1 on this node (physical 4,5)"
    unknown = choose_devices(("0",), "6,7", relative=True)  # no SLURM_STEP_GPUS: the physical ids unknown
    assert (unknown.value, unknown.physical) == ("6", None)
    # the same ids read as physical: a binding error
    with pytest.raises(ShimError, match="gpu-bind"):
        choose_devices(("0", "1"), "4,5")
    with pytest.raises(ShimError, match=r"the job holds 2 GPU\(s\) on this node .*: no GPU 2"):
        choose_devices(("2",), "4,5", relative=True, step_gpus="4,5")
    with pytest.raises(ShimError, match="Slurm gave this task no GPU"):
        choose_devices(("0",), None, relative=True)
    assert choose_devices((), "4,5", relative=True).value == ""  # a CPU process still sees none


def test_nvml_job_relative_checks_the_physical_gpus() -> None:
    choice = choose_devices(("1",), "0,1", relative=True, step_gpus="4,5")
    hidden = tuple(d for d in gpus(8) if d.minor in (4, 5))  # ConstrainDevices=yes: NVML sees the job's two
    assert check_devices(choice, hidden, "a800", "n") == ([], [])
    errors, _ = check_devices(choice, tuple(d for d in gpus(8) if d.minor == 4), "a800", "n")
    assert errors and "cannot open GPU 5" in errors[0]


def test_local_backend_mapping_and_virtual() -> None:
    assert choose_devices(("0", "1"), None, local_gpus=()).mode == VIRTUAL
    mapped = choose_devices(("4", "5"), None, local_gpus=("0", "1"))
    assert mapped.mode == LOCAL_MAP and mapped.value == "0,1" and "oversubscribed" in mapped.note
    assert choose_devices(("0", "2"), "6,7", local_gpus=("6", "7")).value == "6"
    assert choose_devices(("1",), None, local_gpus=("0", "1", "2", "3")).value == "1"


# ---- recorded steps through the shim --------------------------------------------------------------


def test_recorded_gres_step_is_narrowed_per_task(lab_plan: Path) -> None:
    """--gres=gpu:a800:2 gives both tasks of a node "0,1" (CD=no and yes); the plan gives one GPU each."""
    seen = [changes_for(lab_plan, "actor", env)["CUDA_VISIBLE_DEVICES"] for env in step_envs("0")]
    assert seen == ["0", "1", "0", "1"]


def test_constrain_devices_yes_map_gpu(lab_plan: Path) -> None:
    """CD=yes with --gpu-bind=map_gpu:0,1: every task sees "0"; VISIBLE_DEVICES keeps the physical id."""
    for env in step_envs("0"):
        local = {
            **env,
            "CUDA_VISIBLE_DEVICES": "0",
            "GPU_DEVICE_ORDINAL": "0",
            "ROCR_VISIBLE_DEVICES": "0",
            "SLURM_STEP_GPUS": "0",
        }
        changes = changes_for(lab_plan, "actor", local)
        assert changes["CUDA_VISIBLE_DEVICES"] == "0"
        assert changes["VISIBLE_DEVICES"] == str(env["SLURM_LOCALID"])
        assert changes["HPCPLACE_DEVICE_MODE"] == (PHYSICAL if env["SLURM_LOCALID"] == "0" else STEP_LOCAL)


def test_constrain_devices_no_map_gpu(lab_plan: Path) -> None:
    for env in step_envs("0"):
        k = env["SLURM_LOCALID"]
        physical = {**env, "CUDA_VISIBLE_DEVICES": k, "GPU_DEVICE_ORDINAL": k, "ROCR_VISIBLE_DEVICES": k}
        changes = changes_for(lab_plan, "actor", physical)
        assert changes["CUDA_VISIBLE_DEVICES"] == changes["GPU_DEVICE_ORDINAL"] == changes["ROCR_VISIBLE_DEVICES"] == k


def test_typed_gpus_per_task_without_gpu_bind_sets_nothing(lab_plan: Path) -> None:
    """--gpus-per-task=a800:N without --gpu-bind leaves CUDA_VISIBLE_DEVICES unset: export the planned ids."""
    env = step_envs("0")[3]
    for name in ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES"):
        del env[name]
    assert changes_for(lab_plan, "actor", env)["CUDA_VISIBLE_DEVICES"] == "1"


def test_leaked_gpus_in_cpu_only_step(lab_plan: Path) -> None:
    for env in step_envs("2"):
        assert env["CUDA_VISIBLE_DEVICES"] == "0,1" and env["SLURM_JOB_GPUS"] == "0,1"
        changes = changes_for(lab_plan, "agent", env)
        assert changes["CUDA_VISIBLE_DEVICES"] == changes["ROCR_VISIBLE_DEVICES"] == ""
        assert changes["VISIBLE_DEVICES"] == "" and changes["LOCAL_ACCELERATOR_RANK"] == "-1"


def test_wrong_binding_stops_before_the_program(lab_plan: Path) -> None:
    env = {**step_envs("0")[1], "CUDA_VISIBLE_DEVICES": "5"}
    with pytest.raises(ShimError, match="CUDA_VISIBLE_DEVICES='5'"):
        changes_for(lab_plan, "actor", env)


# ---- NVML check (pure part; the query runs on GPU machines) ----------------------------------------


def gpus(n: int, name: str = "NVIDIA A800-SXM4-80GB", minors: list[int] | None = None) -> tuple[NvmlDevice, ...]:
    minors = minors if minors is not None else list(range(n))
    return tuple(NvmlDevice(nvml_index=i, minor=minors[i], name=name, uuid=f"GPU-{i}") for i in range(n))


def test_nvml_physical_ok_and_missing_gpu() -> None:
    assert check_devices(choose_devices(("2", "3"), "0,1,2,3"), gpus(8), "a800", "a800-1") == ([], [])
    errors, _ = check_devices(choose_devices(("6",), "6"), gpus(4), "a800", "a800-1")
    assert errors and "GPU 6" in errors[0] and "cannot open it" in errors[0]


def test_nvml_physical_matches_the_nvml_index_not_the_position() -> None:
    """ConstrainDevices hides GPUs 0-5 from NVML: the two openable ones are NVML 6 and 7, not positions 0, 1."""
    hidden = tuple(d for d in gpus(8) if d.nvml_index >= 6)
    assert check_devices(choose_devices(("6", "7"), "6,7"), hidden, "a800", "n") == ([], [])
    errors, _ = check_devices(choose_devices(("0",), "0"), hidden, "a800", "n")
    assert errors and "GPU 0 is planned" in errors[0]
    by_minor = (NvmlDevice(nvml_index=0, minor=3, name="NVIDIA A800", uuid="GPU-a"),)  # index unknown: minor
    assert check_devices(choose_devices(("3",), "3"), by_minor, "a800", "n") == ([], [])


def test_gpu_and_mig_uuids_are_accepted_and_verified() -> None:
    choice = choose_devices(("2",), "GPU-2")
    assert choice.mode == BY_UUID and choice.value == "GPU-2"
    assert device_environment(choice)["CUDA_VISIBLE_DEVICES"] == "GPU-2"
    assert check_devices(choice, gpus(4), "a800", "n") == ([], [])
    _, warnings = check_devices(choose_devices(("0",), "GPU-2"), gpus(4), "a800", "n")
    assert warnings and "NVML indices [2]" in warnings[0]
    errors, _ = check_devices(choose_devices(("0",), "GPU-9"), gpus(4), "a800", "n")
    assert errors and "GPU-9" in errors[0]
    mig = choose_devices(("0",), "MIG-4b5c6d")
    assert mig.mode == BY_UUID and "not verified" in check_devices(mig, gpus(1), "a800", "n")[1][0]
    for seen in ("GPU-1,GPU-2", "GPU-1,3"):
        with pytest.raises(ShimError, match="UUIDs must name exactly the planned GPUs"):
            choose_devices(("1",) if seen == "GPU-1,GPU-2" else ("1", "3"), seen)


def test_nvml_step_local_checks_what_the_task_can_open() -> None:
    choice = choose_devices(("2", "3"), "0,1")
    assert check_devices(choice, gpus(2, minors=[2, 3]), "a800", "n") == ([], [])
    errors, _ = check_devices(choice, gpus(8), "a800", "n")  # ConstrainDevices=no: 0,1 are physical 0,1
    assert errors and "other GPUs than planned" in errors[0]
    _, warnings = check_devices(choice, gpus(2, minors=[0, 1]), "a800", "n")
    assert warnings and "minor numbers" in warnings[0]


def test_nvml_gpu_type_mismatch_is_a_warning() -> None:
    errors, warnings = check_devices(choose_devices(("0",), "0"), gpus(1, "NVIDIA H100 80GB HBM3"), "a800", "n")
    assert errors == [] and "a800" in warnings[0]
    assert check_devices(choose_devices(("0",), "0"), gpus(1, "NVIDIA GeForce RTX 4090"), "rtx4090", "n") == ([], [])


def test_nvml_not_used_for_cpu_or_local_choices() -> None:
    assert check_devices(choose_devices((), "0"), (), None, "n") == ([], [])
    assert check_devices(choose_devices(("0",), None, local_gpus=()), (), "a800", "n") == ([], [])


def test_query_nvml_without_nvidia_ml_py_or_driver() -> None:
    devices, why = query_nvml()
    if devices is None:
        assert why
    else:  # a GPU machine
        assert all(d.uuid for d in devices)
