"""Lowering a node group's container (hpcplace.config.container) into how its tasks start (pure).

Every srun of the job that starts hpcplace's shim on a node (component steps, preflight, Ray nodes and
driver, `exec`/`attach` steps) starts it the same way per het group: srun options (pyxis's
`--container-*`, Slurm's `--container`) and a launcher (the program srun execs). Without a container the
launcher is the job's (`hpcplace-run --chdir WORKDIR`); in one it is the image's Python running the shim
carried in the run directory (CARRY_DIR: hpcplace need not be installed in the image), for Apptainer
behind `apptainer exec` and a host-side check of the runtime and the image (ENTER_SCRIPT). The steps
that only touch the node's /dev/shm (the guard, the clean-up) run on the host: every runtime here
shares the host's /dev/shm, which the preflight checks inside the image.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hpcplace.config.container import Container
from hpcplace.errors import SlurmError
from hpcplace.plan.plan import Plan

CARRY_DIR = "hpcplace-runtime"  # in the run directory: hpcplace/runtime/*.py, the entry and the enter script
CARRY_ENTRY = "hpcplace-run.py"  # `python3 RUN/hpcplace-runtime/hpcplace-run.py ...` is hpcplace-run
ENTER_SCRIPT = "enter-container.sh"  # apptainer: checks the runtime and the image on the node, then execs
JOB_ID = "${SLURM_JOB_ID}"  # in srun options: the job script writes the job id there (pyxis container names)
# The oldest Slurm whose `srun --container` runs what hpcplace's steps need: 22.05 allows one task per node
# in a containerized step ("_modify_config: unexpected number of tasks 2 > 1") and sets no SLURM_PROCID
# inside; slurmstepd's container.c drops that limit in 23.02 (read in SchedMD/slurm; run here on 24.11, 26.05).
OCI_OLDEST = (23, 2)


@dataclass(frozen=True)
class GroupLaunch:
    """How one het group's tasks start hpcplace's shim."""

    het_group: int
    container: Container | None
    srun_args: tuple[str, ...]  # before the program, on every srun of the group (may hold JOB_ID)
    launcher: tuple[str, ...]  # the program srun execs and its arguments, up to hpcplace-run's own options


def container_name(job_id: str) -> str:
    """pyxis's --container-name: the job id in it, so no later job picks up this job's container (NeMo-RL
    PR #4066). One name for the job: pyxis keeps one set of options per srun (`pyxis_problem`)."""
    return f"hpcplace-{job_id}"


def pyxis_problem(plan: Plan) -> str | None:
    """Why the plan's pyxis containers cannot be started, or None. pyxis (a SPANK plugin) keeps ONE set of
    options per srun process, refusing a second --container-image of another value ("specified multiple
    times", NVIDIA/pyxis args.c), and a het step's srun spans every het group it starts (the preflight and
    the Ray node step span them all): a job may use pyxis only if every node group runs in the same pyxis
    container."""
    containers = [g.container for g in plan.cluster.node_groups]
    uses_pyxis = any(c is not None and c.runtime == "pyxis" for c in containers)
    if not uses_pyxis or all(c == containers[0] for c in containers):  # == ignores where the settings were written
        return None
    what = ", ".join(
        f"{g.label}: {g.container.describe() if g.container else 'no container'}" for g in plan.cluster.node_groups
    )
    return (
        f"node groups in different containers with pyxis among them ({what}): pyxis keeps one set of options "
        "per srun, and the job's preflight (and a Ray job's node step) is one srun over every node group"
    )


def workdir_of(launcher: Sequence[str]) -> str | None:
    """The `--chdir DIR` the job's launcher carries (the submit directory), or None."""
    words = list(launcher)
    return words[words.index("--chdir") + 1] if "--chdir" in words[:-1] else None


def group_launch(het_group: int, container: Container | None, launcher: Sequence[str], run_dir: str) -> GroupLaunch:
    """The srun options and launcher of one het group (`launcher`: the job's, used as is without a container)."""
    if container is None:
        return GroupLaunch(het_group, None, (), tuple(launcher))
    workdir = workdir_of(launcher)
    carry = f"{run_dir}/{CARRY_DIR}"
    shim = (container.python, f"{carry}/{CARRY_ENTRY}", "--chdir", container.workdir or workdir or run_dir)
    seen: list[str] = []  # the run directory and the submit directory, then the user's mounts
    for path in (run_dir, workdir):
        if path and not any(path == s or path.startswith(s.rstrip("/") + "/") for s in seen):
            seen.append(path)
    for path in seen if container.runtime != "oci" else ():  # the others split binds on ',' and ':'
        if "," in path or ":" in path:
            raise SlurmError(
                f"the directory {path} holds a ',' or ':': node group {het_group}'s container runtime "
                f"({container.runtime}) cannot bind it into the image (its bind list splits on them)",
                hint="choose a run directory (-o DIR) and a working directory without ',' and ':'",
            )
    mounts = [f"{p}:{p}" for p in seen] + [m.text() for m in container.mounts]
    if container.is_apptainer:
        kind = "path" if container.image_is_path else "ref"
        argv = (
            "/bin/bash",
            f"{carry}/{ENTER_SCRIPT}",
            kind,
            container.image,
            container.runtime,
            "exec",
            "--nv",  # the node's NVIDIA driver libraries and devices (accepted silently where there is none)
            "--bind",
            ",".join(mounts),
            *container.args,
            container.image,
            *shim,
        )
        return GroupLaunch(het_group, container, (), argv)
    if container.runtime == "pyxis":
        srun = (
            f"--container-image={container.image}",
            f"--container-mounts={','.join(mounts)}",
            f"--container-workdir={container.workdir or workdir or run_dir}",
            f"--container-name={container_name(JOB_ID)}",
            *container.args,
        )
        return GroupLaunch(het_group, container, srun, shim)
    return GroupLaunch(het_group, container, (f"--container={container.image}",), shim)  # oci


def group_launches(plan: Plan, launcher: Sequence[str], run_dir: str) -> tuple[GroupLaunch, ...]:
    """Per node group (= het group, in order), how its tasks start the shim."""
    return tuple(
        group_launch(g, group.container, launcher, run_dir) for g, group in enumerate(plan.cluster.node_groups)
    )


def uses_containers(plan: Plan) -> bool:
    return any(g.container is not None for g in plan.cluster.node_groups)


def version_problems(plan: Plan, version: tuple[int, int]) -> list[str]:
    """What the site's Slurm (major, minor) cannot run of the plan's containers, or ask for of its fabric."""
    from hpcplace.slurm.fabric import version_problems as fabric_version_problems

    problems = fabric_version_problems(plan, version)
    for group in plan.cluster.node_groups:
        c = group.container
        if c is not None and c.runtime == "oci" and version < OCI_OLDEST:
            problems.append(
                f"node group {group.label!r}: Slurm {version[0]}.{version[1]:02d}'s --container (runtime oci) runs one "
                "task per node per step and sets no SLURM_PROCID inside; hpcplace needs Slurm "
                f"{OCI_OLDEST[0]}.{OCI_OLDEST[1]:02d} or newer for it (use runtime apptainer or pyxis on this site)"
            )
    return problems


def refuse_unsupported(plan: Plan, version: tuple[int, int]) -> None:
    """`submit` (with or without --no-validate): a container runtime the site's Slurm cannot run is refused."""
    problems = version_problems(plan, version)
    if problems:
        raise SlurmError(
            "this site's Slurm cannot run the plan:\n  - " + "\n  - ".join(problems),
            hint="docs/slurm-versions.md lists which Slurm versions each runtime and topology needs",
        )
