"""Which GPUs a process sees, and an NVML check that they are the planned ones.

The plan of a job that takes its nodes whole (slurm.exclusive, the default) gives each process
PHYSICAL GPU indices on its node. A job that shares its nodes (`exclusive: false`, plan.json
`"gpu_ids": "job-relative"`) is given whichever GPUs are free, so its plan's ids are JOB-RELATIVE:
index k is the k-th (ascending) of the GPUs Slurm gave the job on the node. Its steps ask for all of
them with no --gpu-bind, so each task finds them all in CUDA_VISIBLE_DEVICES (physical ids under
ConstrainDevices=no, 0..n-1 under =yes, in the same order) and keeps entry k for plan id k; the
physical ids come from SLURM_STEP_GPUS (_relative_choice). For physical plans: What Slurm put in
CUDA_VISIBLE_DEVICES depends on ConstrainDevices: =no gives physical indices (exactly the planned
ones, or a superset such as all GPUs of the node, which we narrow), =yes gives task-local 0..k-1
(k must equal the planned count; we keep them). Anything else is a binding error, reported before
the program starts. CPU-only processes get "" whatever leaked from the batch step, and
GPU_DEVICE_ORDINAL / ROCR_VISIBLE_DEVICES always equal CUDA_VISIBLE_DEVICES (as Slurm sets them).
SLURM_JOB_GPUS is never consulted: it leaks across het components.
"""

from __future__ import annotations

import os

from hpcplace.runtime.errors import ShimError
from hpcplace.runtime.frozen import Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:  # the shim imports this module: no collections.abc at run time
    from collections.abc import Mapping

NVIDIA_CONTROL = "/dev/nvidiactl"  # exists on every node with an NVIDIA driver and a visible GPU


def preload_wanted(environ: Mapping[str, str]) -> bool:
    """Whether to try torch_memory_saver's preload at all: not when HPCPLACE_MEMORY_SAVER=0 turns it off,
    and never on a node without an NVIDIA GPU (its LD_PRELOAD there stops every process from starting)."""
    return environ.get("HPCPLACE_MEMORY_SAVER", "1") != "0" and os.path.exists(NVIDIA_CONTROL)


GPU_VARIABLES = ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES")

NONE = "none"  # no GPU planned: nothing visible
PHYSICAL = "physical"  # exported ids are physical node indices (ConstrainDevices=no, or no Slurm value)
STEP_LOCAL = "step-local"  # Slurm remapped to 0..k-1 (ConstrainDevices=yes)
LOCAL_MAP = "local-map"  # local backend: planned ids mapped onto this machine's GPUs
VIRTUAL = "virtual"  # local backend without GPUs: planned ids exported, nothing behind them
BY_UUID = "uuid"  # the task was given GPU-<uuid> / MIG-<uuid> ids (a site's prolog, a container runtime)
JOB_RELATIVE = "job-relative"  # planned ids index the job's GPUs on the node (slurm.exclusive: false)
GPU_MODES = (PHYSICAL, STEP_LOCAL, BY_UUID, JOB_RELATIVE)  # modes where real GPUs are bound (NVML check, preload)


class DeviceChoice(Frozen):
    """The decision for one process: what to export, from what, and why."""

    visible: tuple[str, ...]  # CUDA_VISIBLE_DEVICES, split
    planned: tuple[str, ...]  # the plan's physical ids on the node
    seen: str | None  # CUDA_VISIBLE_DEVICES as the task found it
    mode: str
    note: str
    physical: tuple[str, ...] | None = None  # job-relative mode: the node's GPU ids behind `visible`, when known

    @property
    def value(self) -> str:
        return ",".join(self.visible)


def parse_device_list(value: str | None) -> tuple[str, ...] | None:
    """`"0,1"` -> ("0", "1"); "" -> (); None -> None (unset)."""
    if value is None:
        return None
    return tuple(part.strip() for part in value.split(",") if part.strip())


def _is_index(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _is_uuid(text: str) -> bool:
    return text.startswith(("GPU-", "MIG-"))


def choose_devices(
    planned: tuple[str, ...],
    seen: str | None,
    *,
    local_gpus: tuple[str, ...] | None = None,
    relative: bool = False,
    step_gpus: str | None = None,
) -> DeviceChoice:
    """Decide CUDA_VISIBLE_DEVICES for a process with planned GPUs `planned` (physical ids, or with
    `relative` indices into the job's GPUs on the node).

    `seen` is the task's CUDA_VISIBLE_DEVICES as Slurm left it, `step_gpus` its SLURM_STEP_GPUS (the
    step's physical GPU ids). `local_gpus` is only for the local backend: this machine's GPUs (planned
    index i -> local_gpus[i % n]); () means none (virtual)."""
    planned = tuple(planned)
    if not planned:
        note = "no GPU planned: CUDA_VISIBLE_DEVICES=''"
        if seen:
            note += f" (ignoring {seen!r} leaked into the step)"
        return DeviceChoice(visible=(), planned=planned, seen=seen, mode=NONE, note=note)
    if local_gpus is not None:
        return _local_choice(planned, seen, local_gpus)
    if relative:
        return _relative_choice(planned, seen, step_gpus)
    given = parse_device_list(seen)
    if not given:
        return DeviceChoice(
            visible=planned,
            planned=planned,
            seen=seen,
            mode=PHYSICAL,
            note="Slurm set no CUDA_VISIBLE_DEVICES: exporting the planned physical ids",
        )
    if any(_is_uuid(g) for g in given):
        if all(_is_uuid(g) for g in given) and len(given) == len(planned):
            return DeviceChoice(
                visible=given,
                planned=planned,
                seen=seen,
                mode=BY_UUID,
                note=f"GPU UUIDs from the environment for physical {','.join(planned)}",
            )
        raise ShimError(
            f"this task was given CUDA_VISIBLE_DEVICES={seen!r}, but the plan puts it on {len(planned)} GPU(s) "
            f"(physical {','.join(planned)}): UUIDs must name exactly the planned GPUs, and not be mixed with indices",
            hint="bind each task to its planned GPUs (--gpu-bind=map_gpu:...), or give one UUID per planned GPU",
        )
    if set(planned) <= set(given):
        note = "physical ids from Slurm"
        if len(given) > len(planned):
            note += f", narrowed from {seen!r} to the planned ones"
        return DeviceChoice(visible=planned, planned=planned, seen=seen, mode=PHYSICAL, note=note)
    if len(given) == len(planned) and sorted(given) == sorted(str(i) for i in range(len(given))):
        return DeviceChoice(
            visible=given,
            planned=planned,
            seen=seen,
            mode=STEP_LOCAL,
            note=f"step-local ids from Slurm (ConstrainDevices=yes) for physical {','.join(planned)}",
        )
    raise ShimError(
        f"Slurm gave this task CUDA_VISIBLE_DEVICES={seen!r}, but the plan puts it on physical GPU(s) "
        f"{','.join(planned)} ({len(planned)} GPU(s)); neither the physical ids nor {len(planned)} step-local ids",
        hint="the srun step must bind each task to exactly its planned GPUs (--gpu-bind=map_gpu:... or "
        "mask_gpu:..., typed --gpus-per-task always with --gpu-bind)",
    )


def job_gpus(seen: str | None, step_gpus: str | None) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
    """(the ids this task must use for the job's GPUs on the node, ascending; their physical ids when
    known): from the step's CUDA_VISIBLE_DEVICES (every GPU of the job there, no --gpu-bind) and
    SLURM_STEP_GPUS. Indices sort numerically, UUIDs keep Slurm's order."""
    given = parse_device_list(seen) or ()
    if given and all(_is_index(g) for g in given):
        given = tuple(sorted(given, key=int))
    physical = parse_device_list(step_gpus)
    if physical and len(physical) == len(given) and all(_is_index(g) for g in physical):
        return given, tuple(sorted(physical, key=int))
    return given, None  # (ConstrainDevices=no: `given` are physical, but nothing here tells which mode)


def _relative_choice(planned: tuple[str, ...], seen: str | None, step_gpus: str | None) -> DeviceChoice:
    given, physical = job_gpus(seen, step_gpus)
    if not given:
        raise ShimError(
            f"the plan's GPU ids are job-relative (slurm.exclusive: false) and put this task on GPU(s) "
            f"{','.join(planned)} of the job's, but Slurm gave this task no GPU (CUDA_VISIBLE_DEVICES={seen!r})",
            hint="the step must ask for the node's GPUs (--gres=gpu:N) without --gpu-bind: render the job again",
        )
    bad = [p for p in planned if not _is_index(p) or int(p) >= len(given)]
    if bad:
        raise ShimError(
            f"the plan puts this task on job-relative GPU(s) {','.join(planned)}, but the job holds {len(given)} "
            f"GPU(s) on this node (CUDA_VISIBLE_DEVICES={seen!r}): no GPU {','.join(bad)}",
            hint="the node group's gpus_per_node must be the number of GPUs the job asks for per node (--gres)",
        )
    visible = tuple(given[int(p)] for p in planned)
    used = tuple(physical[int(p)] for p in planned) if physical else None
    note = f"job-relative GPU(s) {','.join(planned)} -> {','.join(visible)} of the job's {','.join(given)} on this node"
    if used is not None:
        note += f" (physical {','.join(used)})"
    return DeviceChoice(visible=visible, planned=planned, seen=seen, mode=JOB_RELATIVE, note=note, physical=used)


def _local_choice(planned: tuple[str, ...], seen: str | None, local_gpus: tuple[str, ...]) -> DeviceChoice:
    if not local_gpus:
        return DeviceChoice(
            visible=planned,
            planned=planned,
            seen=seen,
            mode=VIRTUAL,
            note="no GPU on this machine: the planned ids are exported as virtual devices",
        )
    visible: list[str] = []
    for p in planned:
        if not _is_index(p):
            raise ShimError(f"planned GPU id {p!r} is not an index", hint='plan.json lists GPUs as "0".."7"')
        mapped = local_gpus[int(p) % len(local_gpus)]
        if mapped not in visible:
            visible.append(mapped)
    note = f"planned GPU(s) {','.join(planned)} on this machine's {len(local_gpus)} GPU(s)"
    if any(int(p) >= len(local_gpus) for p in planned):
        note += " (oversubscribed: the plan needs more GPUs than this machine has)"
    return DeviceChoice(visible=tuple(visible), planned=planned, seen=seen, mode=LOCAL_MAP, note=note)


def device_environment(choice: DeviceChoice) -> dict[str, str]:
    value = choice.value
    return dict.fromkeys(GPU_VARIABLES, value)


# ----------------------------------------------------------------------------------------------
# NVML verification (nvidia-ml-py, imported lazily: never on the path of CPU-only processes)
# ----------------------------------------------------------------------------------------------


class NvmlDevice(Frozen):
    """A GPU this task can open, in NVML (= CUDA with CUDA_DEVICE_ORDER=PCI_BUS_ID) order."""

    nvml_index: int
    minor: int | None
    name: str
    uuid: str


def query_nvml() -> tuple[tuple[NvmlDevice, ...] | None, str]:
    """(accessible devices, "") or (None, why NVML could not be used)."""
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py (pynvml) is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError subclasses, or a missing libnvidia-ml.so
        return None, f"NVML did not initialize ({exc})"
    try:
        devices = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                name = pynvml.nvmlDeviceGetName(handle)
                uuid = pynvml.nvmlDeviceGetUUID(handle)
            except pynvml.NVMLError:
                continue  # hidden from this task (device cgroup, ConstrainDevices=yes)
            try:
                minor: int | None = pynvml.nvmlDeviceGetMinorNumber(handle)
            except pynvml.NVMLError:
                minor = None
            devices.append(NvmlDevice(nvml_index=i, minor=minor, name=_text(name), uuid=_text(uuid)))
        return tuple(devices), ""
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - the answer is read; a failing shutdown changes nothing
            pass


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _squash(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def check_devices(
    choice: DeviceChoice, devices: tuple[NvmlDevice, ...], gpu_type: str | None, node: str
) -> tuple[list[str], list[str]]:
    """(errors, warnings) comparing the choice with what NVML lets this task open."""
    errors: list[str] = []
    warnings: list[str] = []
    if choice.mode not in GPU_MODES:
        return errors, warnings
    listed = ", ".join(f"{d.nvml_index}:{d.name}" for d in devices) or "none"
    chosen: list[NvmlDevice] = []
    if choice.mode == PHYSICAL:
        for p in choice.visible:
            if not _is_index(p):
                continue
            # CUDA (CUDA_DEVICE_ORDER=PCI_BUS_ID) and NVML count in the same order; hidden GPUs keep their index
            match = [d for d in devices if d.nvml_index == int(p)] or [d for d in devices if d.minor == int(p)]
            if not match:
                errors.append(
                    f"GPU {p} is planned on {node}, but this task cannot open it (it can open "
                    f"{len(devices)} GPU(s): {listed})"
                )
            else:
                chosen.append(match[0])
    elif choice.mode == JOB_RELATIVE:
        for p in choice.physical or ():
            match = [d for d in devices if d.minor == int(p)]
            if not match:
                errors.append(
                    f"job-relative GPU(s) {','.join(choice.planned)} are physical {','.join(choice.physical or ())} "
                    f"on {node}, but this task cannot open GPU {p} ({listed})"
                )
            else:
                chosen.append(match[0])
    elif choice.mode == BY_UUID:
        for u in choice.visible:
            if u.startswith("MIG-"):
                warnings.append(f"{u} is a MIG instance: not verified against the plan")
                continue
            match = [d for d in devices if d.uuid.startswith(u)]  # CUDA accepts a unique UUID prefix
            if not match:
                errors.append(
                    f"CUDA_VISIBLE_DEVICES names {u} on {node}, but this task cannot open a GPU with "
                    f"that UUID ({listed})"
                )
                continue
            chosen.append(match[0])
        physical = sorted(d.nvml_index for d in chosen)
        if len(chosen) == len(choice.planned) and physical != sorted(int(p) for p in choice.planned if _is_index(p)):
            warnings.append(
                f"the GPUs named by UUID have NVML indices {physical}, the plan says {','.join(choice.planned)}"
            )
    else:
        k = len(choice.visible)
        if len(devices) != k:
            errors.append(
                f"CUDA_VISIBLE_DEVICES={choice.seen!r} was read as {k} step-local id(s) (ConstrainDevices=yes) "
                f"for planned physical GPU(s) {','.join(choice.planned)}, but this task can open {len(devices)} "
                f"GPU(s) ({listed}): Slurm bound it to other GPUs than planned"
            )
        else:
            chosen = list(devices)
            minors = sorted(d.minor for d in devices if d.minor is not None)
            if len(minors) == k and minors != sorted(int(p) for p in choice.planned if _is_index(p)):
                warnings.append(
                    f"the GPUs this task can open have minor numbers {minors}, the plan says "
                    f"{','.join(choice.planned)} (fine if gres.conf does not list /dev/nvidia* in order)"
                )
    if gpu_type and chosen and gpu_type.lower() != "gpu":
        wanted = _squash(gpu_type)
        strange = [d.name for d in chosen if wanted not in _squash(d.name)]
        if strange:
            warnings.append(f"planned GPU type {gpu_type!r} but NVML names {sorted(set(strange))}")
    return errors, warnings
