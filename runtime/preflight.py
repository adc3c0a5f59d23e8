"""`hpcplace-run --preflight --plan plan.json`: one task per node, before any user program starts.

The batch script runs it as one srun step over every node of every het component (the launcher
itself, so a venv the node cannot see fails right there with slurmstepd's `execve(): ...`, which the
script turns into a line naming the node). On its node it checks, against the plan:

- the programs of the node's components (and in the Ray mode the raylet's interpreter and, on the
  head, the driver) can be started; a Python of a collocated component imports hpcplace.runtime;
- the GPUs the node shows equal the plan's count for the node, and the ones the plan uses on it can
  be opened (ConstrainDevices=yes hides the others: opening them fails with EPERM);
- for GPU nodes, the driver supports torch's CUDA build, and torch_memory_saver's hook loads where a
  component offloads (runtime/gpu_checks.py, run in a child process: NVML or CUDA may hang);
- /dev/shm is writable with `slurm.shm_per_node` free (when the plan gives that figure);
- in the Ray mode, `import ray` works in the raylet's interpreter;
- in a node group's container image (it runs inside it, with the image's Python): /dev/shm is the
  node's where components share devices on the node (the job's node-local directory, which the guard
  task made on the host, is there), and the node's InfiniBand devices are inside when it has any.

It prints `hpcplace-preflight: <node>: ok: ...` or one `hpcplace-preflight: <node>: FAILED: <cause>`
line per problem and exits 1 on any. The checks are pure functions of facts (tested on their own);
gathering the facts is the only I/O. Everything that imports more than the standard library runs in a
child interpreter with a timeout (HPCPLACE_PREFLIGHT_TIMEOUT, default 60 s), so a hung import cannot
hang the job.
"""

from __future__ import annotations

import os
import sys

from hpcplace.runtime.errors import ShimError
from hpcplace.runtime.frozen import Frozen
from hpcplace.runtime.programs import shebang_words

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

    from hpcplace.runtime.plan_index import PlanIndex

PROG = "hpcplace-preflight"
DEVICE_DIR_VARIABLE = "HPCPLACE_GPU_DEVICE_DIR"  # where the node's nvidia<N> files are; `{node}`: node name
TIMEOUT_VARIABLE = "HPCPLACE_PREFLIGHT_TIMEOUT"
LOG_VARIABLE = "HPCPLACE_PREFLIGHT_LOG"  # set by the job script: this node's output file, `{node}` = node name
DEFAULT_TIMEOUT_S = 60.0
SHM = "/dev/shm"


# ----------------------------------------------------------------------------------------------
# facts -> problems (pure)
# ----------------------------------------------------------------------------------------------


class GpuFacts(Frozen):
    """What the node shows: the minors of its nvidia<N> device files, the ones this task can open
    (ConstrainDevices=yes: only the job's), and CUDA_VISIBLE_DEVICES as Slurm set it for this step."""

    device_dir: str
    present: tuple[int, ...]
    openable: tuple[int, ...]
    slurm_visible: str | None
    step_gpus: str | None = None  # SLURM_STEP_GPUS: the step's physical GPU ids


def _ids(values: Sequence[int]) -> str:
    return ",".join(str(v) for v in values) or "none"


def job_gpu_ids(facts: GpuFacts) -> tuple[int, ...]:
    """The physical ids of the GPUs Slurm gave the job on this node, ascending (what job-relative plan
    ids index): SLURM_STEP_GPUS, else the devices the job may open (ConstrainDevices=yes), else
    CUDA_VISIBLE_DEVICES (ConstrainDevices=no: physical ids)."""
    from hpcplace.runtime.devices import job_gpus

    given, physical = job_gpus(facts.slurm_visible, facts.step_gpus)
    if physical is not None:
        return tuple(int(p) for p in physical)
    if len(facts.openable) < len(facts.present):
        return facts.openable
    return tuple(int(g) for g in given if g.isdigit())


def job_gpus_note(ids: Sequence[int], used: Sequence[int]) -> str:
    """The ok line's GPU note of a job sharing its nodes: the job's GPUs on the node, the physical ones
    its plan's job-relative ids `used` stand for (`hpcplace status` reads it: slurm/run_report.py)."""
    physical = [ids[k] for k in used if k < len(ids)]
    return f"the job's GPU(s) {_ids(ids)}, of which the plan uses {_ids(physical)} (job-relative {_ids(used)})"


def relative_gpu_problems(facts: GpuFacts, expected: int, used: Sequence[int], where: str) -> list[str]:
    """A job that shares its nodes (plan ids job-relative): the job holds `expected` GPUs here, and
    the ones the plan uses (indices into them) can be opened."""
    ids = job_gpu_ids(facts)
    problems = []
    if len(ids) != expected:
        problems.append(
            f"Slurm gave the job {len(ids)} GPU(s) on {where} ({_ids(ids)}), but the plan expects {expected} "
            "(job-relative ids, slurm.exclusive: false): check the job's --gres and gres.conf"
        )
    beyond = [k for k in used if k >= len(ids)]
    if beyond:
        problems.append(f"the plan uses job-relative GPU(s) {_ids(beyond)} on {where}, beyond the job's {len(ids)}")
    closed = [ids[k] for k in used if k < len(ids) and ids[k] not in facts.openable]
    if closed:
        problems.append(
            f"the job's GPU(s) {_ids(closed)} on {where} cannot be opened ({facts.device_dir}/nvidia{{{_ids(closed)}}}; "
            f"can open: {_ids(facts.openable)})"
        )
    return problems


def gpu_problems(facts: GpuFacts, expected: int, used: Sequence[int], where: str, relative: bool = False) -> list[str]:
    """The node's GPUs against the plan: `expected` GPUs (the node group's gpus_per_node for this
    node), of which the plan's processes use `used` (physical indices, or with `relative` indices into
    the job's GPUs on the node: relative_gpu_problems)."""
    if not expected and not used:
        return []
    if relative:
        return relative_gpu_problems(facts, expected, used, where)
    problems = []
    constrained = len(facts.openable) < len(facts.present)  # ConstrainDevices=yes hides the others
    shown = facts.openable if constrained else facts.present
    if len(shown) < expected:
        what = (
            f"this job can open {len(shown)} of its {len(facts.present)} GPU device(s) ({_ids(shown)}; "
            "ConstrainDevices=yes)"
            if constrained
            else f"the node shows {len(shown)} GPU(s) ({facts.device_dir}/nvidia{{{_ids(shown)}}})"
        )
        fix = (
            "the cluster's gpus_per_node is wrong for this node, or a GPU is missing (nvidia-smi on the node)"
            if shown
            else f"no GPU driver's device files on this node? ({DEVICE_DIR_VARIABLE} names where they "
            "are when not in /dev; nvidia-smi on the node)"
        )
        problems.append(f"{what}, but the plan expects {expected} on {where}: {fix}")
    missing = sorted(set(used) - set(facts.openable))
    if missing and len(shown) >= expected:
        problems.append(
            f"the plan uses GPU(s) {_ids(missing)} on {where}, but this job cannot open "
            f"{facts.device_dir}/nvidia{{{_ids(missing)}}} (can open: {_ids(facts.openable)}): "
            "Slurm gave the job other GPUs than planned"
        )
    seen = [v for v in (facts.slurm_visible or "").split(",") if v.strip()]
    if facts.slurm_visible is not None and len(seen) != expected:
        problems.append(
            f"Slurm gave this node's preflight step CUDA_VISIBLE_DEVICES={facts.slurm_visible!r} "
            f"({len(seen)} GPU(s)), but the plan expects {expected} on {where}: check the job's "
            "--gres and gres.conf"
        )
    return problems


def gpu_warnings(facts: GpuFacts, expected: int) -> list[str]:
    """More GPUs than the plan counts is no failure (the job uses the planned ones; the demo plans 2 GPUs
    on 8-GPU nodes), but worth a line: the cluster description may be short of what the node has."""
    constrained = len(facts.openable) < len(facts.present)
    shown = facts.openable if constrained else facts.present
    if expected and len(shown) > expected:
        return [
            f"the node shows {len(shown)} GPU(s), the plan counts {expected} (gpus_per_node): the others stay unused"
        ]
    return []


def shm_problems(path: str, write_error: str | None, free_bytes: int | None, needed_bytes: int | None) -> list[str]:
    """/dev/shm must be writable and, when the plan says how much the job needs per node, have it free."""
    if write_error is not None:
        return [f"{path} is not writable ({write_error}): the weight store and the node-local directory live there"]
    if needed_bytes and free_bytes is not None and free_bytes < needed_bytes:
        return [
            f"{path} has {human(free_bytes)} free, the plan needs {human(needed_bytes)} per node "
            "(slurm.shm_per_node): free it (stale files of earlier jobs?) or ask for nodes with more "
            "memory for /dev/shm"
        ]
    return []


def container_problems(container: str, shm_shared: bool | None, infiniband: tuple[bool, bool]) -> list[str]:
    """Inside `container` (its description): `shm_shared` whether the job's node-local directory, made on
    the host's /dev/shm, is seen here (None: not needed on this node); `infiniband`: (the node has
    InfiniBand adapters, /dev/infiniband is here)."""
    problems = []
    if shm_shared is False:
        problems.append(
            f"/dev/shm in the {container} is not the node's (the job's node-local directory, made on the node's "
            "/dev/shm, is missing inside): components sharing this node's GPUs run in separate containers and "
            "hand weights over through /dev/shm; bind the node's /dev/shm into the image (no --contain / "
            "private /dev/shm tmpfs; for an OCI bundle a bind mount of /dev/shm in config.json)"
        )
    has_adapters, has_devices = infiniband
    if has_adapters and not has_devices:
        problems.append(
            f"the node has InfiniBand adapters (/sys/class/infiniband) but the {container} has no /dev/infiniband: "
            "NCCL would silently fall back to TCP sockets (several times slower collectives); bind /dev/infiniband "
            "into the image (container.mounts) or drop the runtime flag that hides /dev"
        )
    return problems


def human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{n} B"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def is_python(program: str) -> bool:
    """`python`, `python3`, `python3.11`, `/venv/bin/python3`: a program the preflight can ask to import."""
    name = os.path.basename(program)
    return name.startswith("python") and all(c.isdigit() or c == "." for c in name[6:])


class ProgramCheck(Frozen):
    """One program to start on the node: `what` names it (component, driver, raylet)."""

    what: str
    program: str  # as the plan gives it
    resolved: str | None  # the executable found on PATH, None: not found
    needs_runtime: bool  # a collocated component: its Python must import hpcplace.runtime
    script: str | None = None  # the file a Python program runs (`python train.py`), as the command gives it
    needs: str | None = None  # a module its Python must import, else the program fails (the Ray driver: ray)


def python_script(command: Sequence[str]) -> str | None:
    """The script file `python [options] SCRIPT ...` runs; None for `-c`, `-m`, stdin or no Python."""
    if not command or not is_python(str(command[0])):
        return None
    args = [str(a) for a in command[1:]]
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-c", "-m", "-") or (arg.startswith(("-c", "-m")) and not arg.startswith("--")):
            return None
        if arg in ("-W", "-X"):
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        return arg
    return None


def resolve_program(program: str, path: str) -> str | None:
    """The executable `program` names (PATH search like the shim's exec), None when there is none."""
    candidates = [program] if "/" in program else [os.path.join(d or ".", program) for d in path.split(os.pathsep)]
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def program_problem(check: ProgramCheck, cwd: str) -> str | None:
    """Why the node cannot start `check` (run from the working directory `cwd`), or None."""
    shared = "install it where every node sees it (a shared filesystem, not a node-local or private path such as /tmp)"
    if check.resolved is None:
        program = check.program
        if "/" not in program:
            return f"{check.what}: {program!r} is not on PATH on this node: {shared}"
        path = os.path.join(cwd, program)
        if not os.path.exists(path):
            return f"{check.what}: {program!r} does not exist on this node: {shared}"
        if os.path.isdir(path):
            return f"{check.what}: {program!r} is a directory, not a program"
        import shlex

        return (
            f"{check.what}: {program!r} is not executable (chmod +x {shlex.quote(program)}, or start it with "
            "its interpreter, e.g. bash script.sh)"
        )
    interpreter = shebang_interpreter(check.resolved)
    if interpreter is not None and not os.access(interpreter, os.X_OK):
        return (
            f"{check.what}: {check.program!r} starts with #!{interpreter}, which does not exist on this node "
            "(or is not executable): fix its #! line, or install that interpreter where every node sees it"
        )
    if check.script is not None and os.path.isdir(cwd):
        path = os.path.join(cwd, check.script)
        runnable = os.path.isfile(path) or os.path.isfile(os.path.join(path, "__main__.py"))  # `python3 app/`
        if not runnable:
            what = "is a directory without __main__.py" if os.path.isdir(path) else "does not exist on this node"
            return (
                f"{check.what}: the script {check.script!r} ({path}) {what}: the program runs in {cwd}; "
                f"give the script's path from there, or an absolute path on a filesystem every node sees"
            )
    return None


def shebang_interpreter(path: str) -> str | None:
    """The absolute interpreter a script's `#!` line names (`#!/usr/bin/env X` is env itself), or None."""
    words = shebang_words(path)
    return words[0] if words and words[0].startswith("/") else None


def import_check(module: str) -> str:
    """`python -c` code that imports `module` and fails unless it is the package itself: run from the programs'
    working directory, where a folder of that name (the run directory's ray/, written at render) imports as an
    empty namespace package."""
    return (
        f"import {module} as m\n"
        f"m.__file__ or exit('{module} here is the folder ' + ', '.join(m.__path__) + ', not the package: it is "
        f"not installed in this Python')"
    )


# What `ray start --include-dashboard=true` checks first (Ray's own function; absent in another Ray: no check).
DASHBOARD_CHECK = (
    "import sys, ray._private.utils as u\n"
    "e = getattr(u, 'get_dashboard_dependency_error', lambda: None)()\n"
    'sys.exit(f\'missing packages ({e}): pip install "ray[default]" into this Python, or drop '
    "launch.dashboard' if e else 0)"
)


def child_problem(what: str, result: tuple[int | None, str], *, timeout: float) -> str | None:
    """A child interpreter's (exit code or None for a timeout, output) -> a problem line or None."""
    rc, out = result
    if rc is None:
        return f"{what}: did not finish within {timeout:g} s ({TIMEOUT_VARIABLE} sets the limit)"
    if rc != 0:
        lines = [line for line in out.strip().splitlines() if line.strip()]
        return f"{what}: failed (exit {rc}): {lines[-1].strip() if lines else 'no output'}"
    return None


# ----------------------------------------------------------------------------------------------
# gathering facts (I/O)
# ----------------------------------------------------------------------------------------------


def gpu_facts(node: str, environ: Mapping[str, str]) -> GpuFacts:
    """The node's nvidia<N> device files and which of them this task may open: a device file opens
    (or fails with ENXIO/ENODEV: no driver behind it) when the job's device cgroup allows it, and fails
    with EPERM when it does not (ConstrainDevices=yes)."""
    import errno

    device_dir = environ.get(DEVICE_DIR_VARIABLE, "/dev").replace("{node}", node)
    try:
        names = os.listdir(device_dir)
    except OSError:
        names = []
    present = sorted(int(n[6:]) for n in names if n.startswith("nvidia") and n[6:].isdigit())
    openable = []
    for minor in present:
        try:
            os.close(os.open(os.path.join(device_dir, f"nvidia{minor}"), os.O_RDWR | os.O_CLOEXEC))
            openable.append(minor)
        except OSError as exc:
            if exc.errno in (errno.ENXIO, errno.ENODEV):
                openable.append(minor)
    return GpuFacts(
        device_dir=device_dir,
        present=tuple(present),
        openable=tuple(openable),
        step_gpus=environ.get("SLURM_STEP_GPUS"),
        slurm_visible=environ.get("CUDA_VISIBLE_DEVICES"),
    )


def shm_facts(path: str = SHM) -> tuple[str | None, int | None]:
    """(why a file cannot be created in `path` or None, free bytes or None)."""
    import tempfile

    try:
        fd, name = tempfile.mkstemp(prefix=".hpcplace-preflight-", dir=path)
        os.close(fd)
        os.unlink(name)
        error = None
    except OSError as exc:
        error = exc.strerror or str(exc)
    try:
        st = os.statvfs(path)
        free = st.f_bavail * st.f_frsize
    except OSError:
        free = None
    return error, free


def shm_shared_fact(job_id: str, node: str, wait_s: float = 15.0) -> bool:
    """Whether this node's directory of the job (made by the guard task on the host's /dev/shm, started
    just before the preflight) shows up in this /dev/shm within `wait_s`."""
    import time

    from hpcplace.runtime.shm_dir import job_dir_path, node_dir_path

    path = node_dir_path(job_dir_path(job_id), node)
    deadline = time.monotonic() + wait_s
    while not os.path.isdir(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def infiniband_fact(sys_dir: str = "/sys/class/infiniband", dev_dir: str = "/dev/infiniband") -> tuple[bool, bool]:
    try:
        adapters = bool(os.listdir(sys_dir))
    except OSError:
        adapters = False
    return adapters, os.path.isdir(dev_dir)


def run_child(
    argv: Sequence[str], env: Mapping[str, str], timeout: float, cwd: str | None = None
) -> tuple[int | None, str]:
    """(exit code, output) of a child; (None, output) when it ran past `timeout` (then killed)."""
    import subprocess

    try:
        res = subprocess.run(
            list(argv),
            env=dict(env),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, ""
    except OSError as exc:
        return 127, f"cannot start {argv[0]}: {exc.strerror}"
    return res.returncode, res.stdout + res.stderr


_GPU_CHECKS = (
    "from hpcplace.runtime.gpu_checks import cuda_driver_problem, memory_saver_hook_problem\n"
    "import sys\n"
    "p = cuda_driver_problem() if sys.argv[1] == 'driver' else memory_saver_hook_problem()\n"
    "print(p or '')\n"
    "sys.exit(1 if p else 0)\n"
)


def gpu_runtime_problems(python: str, env: Mapping[str, str], offload: bool, timeout: float) -> list[str]:
    """The GPU checks of runtime/gpu_checks.py (helper `gpu`'s module), each in a child of `python`:
    the NVIDIA driver supports torch's CUDA build; where a component offloads, torch_memory_saver's
    preload hook really loads (with the environment the shim would give the process)."""
    problems = []
    # From /: `python -c` puts its working directory first on sys.path, and the programs' directory may hold
    # an `hpcplace` folder (a checkout) that is not the hpcplace.runtime this check imports.
    out = run_child([python, "-c", _GPU_CHECKS, "driver"], env, timeout, cwd="/")
    problem = child_problem("the NVIDIA driver and torch's CUDA", out, timeout=timeout)
    if problem:
        problems.append(problem)
    from hpcplace.runtime.devices import preload_wanted
    from hpcplace.runtime.preload import preload_env

    if offload and preload_wanted(env):
        # the hook and libcudart of the program's own Python, as the shim chooses them (not this process's)
        changes, why = preload_env(env, command=(python,))
        if not changes:
            problems.append(f"an offloading component runs here, but torch_memory_saver cannot be preloaded: {why}")
        else:
            out = run_child([python, "-c", _GPU_CHECKS, "hook"], {**env, **changes}, timeout, cwd="/")
            problem = child_problem("torch_memory_saver's hook", out, timeout=timeout)
            if problem:
                problems.append(problem)
    return problems


# ----------------------------------------------------------------------------------------------
# the task
# ----------------------------------------------------------------------------------------------


class NodePlan(Frozen):
    """What the plan puts on this node."""

    where: str  # "a800-1 (node group a800, het group 0 node 0)"
    expected_gpus: int
    used_gpus: tuple[int, ...]
    programs: tuple[ProgramCheck, ...]
    offload: bool  # an offloading component has GPU processes here
    ray_python: str | None  # Ray mode: the raylet's interpreter
    shm_needed: int | None  # bytes
    ray_dashboard: bool = False  # the head runs Ray's dashboard (launch.dashboard): ray[default]'s packages
    container: str | None = None  # "apptainer image /x.sif": this node group runs in it (so does this check)
    shares_devices: bool = False  # components of a collocation group share devices on this node
    network: dict[str, Any] | None = None  # the node group's `network:` record (runtime/network.py)
    relative_gpus: bool = False  # plan.json "gpu_ids": "job-relative" (slurm.exclusive: false)
    is_head: bool = False  # cluster node rank 0
    head_network: bool = False  # the head's node group has a network: nodes on one check they reach it
    network_peers: int = 0  # nodes other than the head whose node group has a network
    run_dir: str = ""


def node_plan(index: PlanIndex, g: int, j: int, node: str, environ: Mapping[str, str]) -> NodePlan:
    """This node's share of the plan, read through the plan index (no full parse)."""
    header = index.plan
    group = header["node_groups"][g]
    expected = int(group["gpus_per_node"][j]) if group.get("gpus_per_node") else 0
    used: set[int] = set()
    programs: list[ProgramCheck] = []
    offload = False
    path = environ.get("PATH") or os.defpath
    launch = header.get("launch") or {}
    ray = launch.get("mode") == "ray"
    for ci, comp in enumerate(index.components):
        n = index.processes_on(ci, g, j) if g in index.het_groups(ci) else 0
        gpus: set[int] = set()
        for k in range(n):
            proc = index.process_at(ci, g, j, k) or {}
            gpus.update(int(v) for v in proc.get("visible_accelerators") or () if str(v).isdigit())
        used |= gpus
        offload = offload or bool(n and gpus and comp.get("offload"))
        command = comp.get("command") or ()
        if n and command and not ray:
            program = str(command[0])
            programs.append(
                ProgramCheck(
                    what=f"component {comp['name']!r}",
                    program=program,
                    resolved=resolve_program(program, path),
                    needs_runtime=bool(comp.get("collocation_group")),
                    script=python_script(command),
                )
            )
    ray_python = None
    dashboard = False
    if ray:
        from hpcplace.runtime.ray_node import node_facts

        facts = node_facts(header, g, j)
        ray_python = facts.get("python") or sys.executable
        if ray_python != sys.executable:
            programs.append(
                ProgramCheck(
                    what="the raylet's interpreter (python_interpreter_path)",
                    program=ray_python,
                    resolved=resolve_program(ray_python, path),
                    needs_runtime=False,
                )
            )
        driver = launch.get("driver") or ()
        dashboard = facts["rank"] == 0 and bool(launch.get("dashboard"))
        if facts["rank"] == 0 and driver:
            program = str(driver[0])
            programs.append(
                ProgramCheck(
                    what="the Ray driver",
                    program=program,
                    resolved=resolve_program(program, path),
                    needs_runtime=False,
                    script=python_script(driver),
                    needs="ray",
                )
            )
    mb = (header.get("slurm") or {}).get("shm_per_node")
    shm = int(str(mb)) * 1024 * 1024 if str(mb or "").isdigit() else None
    where = f"{node} (node group {group['label']}, het group {g} node {j})"
    container = group.get("container")
    from hpcplace.runtime.ray_node import group_node_ranks

    rank = group_node_ranks(group)[j]
    from hpcplace.runtime.network import group_network

    groups = header["node_groups"]
    head_g = next((k for k, other in enumerate(groups) if 0 in group_node_ranks(other)), g)
    peers = sum(int(other["num_nodes"]) for k, other in enumerate(groups) if group_network(header, k) is not None)
    shares = any(d.get("node") == rank for c in header.get("collocation_groups") or () for d in c.get("devices") or ())
    return NodePlan(
        where=where,
        expected_gpus=expected,
        used_gpus=tuple(sorted(used)),
        programs=tuple(programs),
        offload=offload,
        ray_python=ray_python,
        shm_needed=shm,
        ray_dashboard=dashboard,
        container=f"{container['runtime']} image {container['image']}" if container else None,
        shares_devices=shares,
        network=group_network(header, g),
        relative_gpus=header.get("gpu_ids") == "job-relative",
        is_head=rank == 0,
        head_network=group_network(header, head_g) is not None,
        network_peers=max(peers - 1, 0),
        run_dir=os.path.dirname(os.path.abspath(index.plan_path)),
    )


def network_checks(
    plan: NodePlan, job_id: str, restart: str, wait_s: float
) -> tuple[list[str], list[str], Callable[[], list[str]] | None]:
    """`network:`: the interface exists here with an IPv4 address, and (when the head's node group has
    one) this node reaches the head's address on it: the head listens and publishes `ADDRESS PORT` in
    the run directory, every other node with a network connects from its own address there.
    (problems, notes, what the head calls at the end to learn how many nodes reached it)."""
    from hpcplace.runtime import network as net

    problems: list[str] = []
    notes: list[str] = []
    found: tuple[str, str] | None = None
    if plan.network is not None:
        chosen = net.choose(plan.network, net.local_interfaces())
        if isinstance(chosen, str):
            problems.append(f"network {net.describe(plan.network)}: {chosen}")
        else:
            found = chosen
            notes.append(f"network {found[0]} {found[1]}")
    if not plan.head_network:
        return problems, notes, None
    path = net.head_file(plan.run_dir, job_id, restart)
    if plan.is_head:
        if found is None:
            net.publish_address(path, net.HEAD_FAILED)
            return problems, notes, None
        try:
            finish = net.listen_for_peers(path, found[1], plan.network_peers, wait_s)
        except OSError as exc:
            net.publish_address(path, net.HEAD_FAILED)
            return problems + [f"cannot listen on {found[1]} ({found[0]}): {exc.strerror}"], notes, None

        def reached() -> list[str]:
            return [f"{finish()}/{plan.network_peers} node(s) reached the head on {found[0]}"]

        return problems, notes, reached
    if found is not None:
        problem, head = net.reach_head(path, found[1], wait_s)
        problems += [f"network {found[0]}: {problem}"] if problem else []
        notes += [] if problem else [f"head {head} answers"]
    elif plan.network is not None:  # this node already failed; connect anyway so the head stops waiting for it
        net.reach_head(path, "", wait_s, connect_s=1.0)
    return problems, notes, None


def check_node(
    plan: NodePlan, node: str, environ: Mapping[str, str], timeout: float, job_id: str | None = None
) -> tuple[list[str], list[str]]:
    """(problems, notes) for this node: the pure checks on gathered facts, plus the child checks (run
    from the programs' working directory). `job_id`: the job's (its het leader's) id."""
    import threading

    problems: list[str] = []
    notes: list[str] = []
    finish_network = None
    if plan.network is not None or plan.head_network:
        problems, notes, finish_network = network_checks(
            plan, job_id or "", environ.get("SLURM_RESTART_COUNT", ""), min(timeout, 30.0)
        )
    if plan.container:
        shared = shm_shared_fact(job_id, node) if plan.shares_devices and job_id else None
        problems += container_problems(plan.container, shared, infiniband_fact())
        notes.append(f"in {plan.container} (Python {sys.version.split()[0]})")
    gpu = gpu_facts(node, environ)
    problems += gpu_problems(gpu, plan.expected_gpus, plan.used_gpus, plan.where, plan.relative_gpus)
    if plan.expected_gpus and plan.relative_gpus:  # `status` reads this note (slurm/run_report.py)
        notes.append(job_gpus_note(job_gpu_ids(gpu), plan.used_gpus))
    elif plan.expected_gpus:
        notes.append(f"{len(gpu.openable)} GPU(s)")
        notes += [f"warning: {w}" for w in gpu_warnings(gpu, plan.expected_gpus)]
    write_error, free = shm_facts()
    problems += shm_problems(SHM, write_error, free, plan.shm_needed)
    if free is not None:
        notes.append(f"{SHM} {human(free)} free")
    # Child interpreters run in parallel: a cold `import ray` on a shared filesystem is the slow one.
    jobs: list[tuple[str, list[str], dict[str, str], bool]] = []  # (what, argv, env, fatal)
    pythons = []
    for check in plan.programs:
        problem = program_problem(check, os.getcwd())
        if problem:
            problems.append(problem)
        elif (
            check.needs
            and is_python(check.program)
            and check.resolved
            and (plan.ray_python is None or os.path.realpath(check.resolved) != os.path.realpath(plan.ray_python))
        ):
            jobs.append(
                (
                    f"{check.what}: {check.program} -c 'import {check.needs}'",
                    [check.resolved, "-c", import_check(check.needs)],
                    dict(environ),
                    True,
                )
            )
        elif (
            is_python(check.program)
            and check.resolved
            and os.path.realpath(check.resolved) != os.path.realpath(sys.executable)
            and check.resolved not in pythons
        ):
            pythons.append(check.resolved)
            jobs.append(
                (
                    f"{check.what}: {check.program} -c 'import hpcplace.runtime'",
                    [check.resolved, "-c", import_check("hpcplace.runtime")],
                    dict(environ),
                    check.needs_runtime,
                )
            )
    if plan.ray_python is not None:
        jobs.append(
            (
                f"Ray: {plan.ray_python} -c 'import ray' (the raylet's `ray start`)",
                [plan.ray_python, "-c", import_check("ray")],
                dict(environ),
                True,
            )
        )
    if plan.ray_python is not None and plan.ray_dashboard:  # `ray start --include-dashboard=true` refuses it
        jobs.append(
            (
                f"Ray's dashboard (launch.dashboard) in {plan.ray_python}",
                [plan.ray_python, "-c", DASHBOARD_CHECK],
                dict(environ),
                True,
            )
        )
    results: list[tuple[int | None, str] | None] = [None] * len(jobs)

    def run(i: int) -> None:
        results[i] = run_child(jobs[i][1], jobs[i][2], timeout)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(jobs))]
    gpu_runtime: list[str] = []
    if plan.expected_gpus:

        def gpu_checks() -> None:
            gpu_runtime.extend(gpu_runtime_problems(sys.executable, environ, plan.offload, timeout))

        threads.append(threading.Thread(target=gpu_checks, daemon=True))
    for t in threads:
        t.start()
    for t in threads:
        t.join(2 * timeout + 5)
    for (what, _argv, _env, fatal), result in zip(jobs, results):
        problem = child_problem(what, result or (None, ""), timeout=timeout)
        if problem and fatal:
            problems.append(problem)
        elif problem:
            notes.append(f"warning: {problem} (fine unless the program imports hpcplace.runtime)")
    problems += gpu_runtime
    if finish_network is not None:
        notes += finish_network()
    return problems, notes


def _say(text: str) -> None:
    sys.stdout.write(f"{PROG}: {text}\n")
    sys.stdout.flush()


def _write_node_log(pattern: str | None, node: str) -> None:
    """This node's output from here on in logs/preflight.<node>.out, named by SLURMD_NODENAME (the name
    logs/nodes.txt holds) and written by the preflight itself: srun's `%N` is the hostname before
    Slurm 25.11 and the NodeName after (runtime/task_log.py)."""
    if not pattern:
        return
    from hpcplace.runtime.task_log import fill, redirect_output

    path = fill(pattern, "node", node)
    why = redirect_output(path) if path else f"{LOG_VARIABLE}={pattern!r}: no file for node {node!r}"
    if why:
        sys.stderr.write(f"{PROG}: {node}: warning: {why}\n")


def parse_args(argv: Sequence[str]) -> tuple[str | None, str | None]:
    """(plan path, working directory) from `--plan PATH` and the launcher's `--chdir DIR` (the preflight
    runs with the job script's launcher words; other options are ignored)."""
    values: dict[str, str] = {}
    args = list(argv)
    for i, arg in enumerate(args):
        if arg == "--":
            break
        name, eq, value = arg.partition("=")
        if name in ("--plan", "--chdir"):
            if eq:
                values[name] = value
            elif i + 1 < len(args):
                values[name] = args[i + 1]
    return values.get("--plan"), values.get("--chdir")


def chdir_problem(path: str | None) -> str | None:
    if path and not os.path.isdir(path):
        return (
            f"the working directory {path!r} (where the programs run) does not exist on this node: it must be "
            "on a filesystem every node sees (or pass --workdir)"
        )
    return None


def main(argv: Sequence[str]) -> int:
    from hpcplace.runtime.plan_index import PlanIndex
    from hpcplace.runtime.slurm_env import locate_node, read_snapshot

    plan_path, chdir = parse_args(argv)
    node = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    _write_node_log(os.environ.get(LOG_VARIABLE), node)
    if not plan_path:
        _say(f"{node}: FAILED: usage: hpcplace-run --preflight --plan PLAN.json")
        return 2
    try:
        timeout = float(os.environ.get(TIMEOUT_VARIABLE) or DEFAULT_TIMEOUT_S)
    except ValueError:
        timeout = DEFAULT_TIMEOUT_S
    try:
        snapshot = read_snapshot(os.environ)
        node = snapshot.node_name
        plan_path = os.path.abspath(plan_path)
        workdir_problem = chdir_problem(chdir)
        if chdir and not workdir_problem:
            os.chdir(chdir)  # where the programs run: relative programs and scripts are found from there
        with PlanIndex(plan_path) as index:
            g, j = locate_node(snapshot, range(len(index.plan["node_groups"])))
            plan = node_plan(index, g, j, node, os.environ)
        problems, notes = check_node(plan, node, os.environ, timeout, snapshot.job_id)
        problems += [p for p in [workdir_problem] if p]
    except ShimError as exc:
        problems, notes = [exc.message + (f" ({exc.hint})" if exc.hint else "")], []
    for problem in problems:
        _say(f"{node}: FAILED: {problem}")
    if not problems:
        _say(f"{node}: ok: {', '.join(n for n in notes if not n.startswith('warning: ')) or 'nothing to check'}")
    for note in notes:
        if note.startswith("warning: "):
            _say(f"{node}: {note}")
    return 1 if problems else 0
