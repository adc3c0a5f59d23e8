"""Working inside a running (held) job: `hpcplace attach | exec | shell | release` (issue 18).

Each command is one more srun step of the job, started from the login node with `--jobid` and
`--overlap` on the node the plan names: `attach --driver` runs a driver on the Ray head (the same
wrapper as the job's own driver step, runtime/ray_driver.py), `exec`/`shell` run a command as one
rank of a component (the shim with `--rank`, runtime/attached.py: the environment that rank's own
task got) or on a node (`--node`). The command never appears on srun's command line: it is written
as a JSON list into the run directory and the step reads it from there.

Only the job's owner (and root) can start steps in a job: Slurm refuses `srun --jobid` to anyone
else, so nothing here needs its own access check.

The pure half (argv of the steps) is tested without Slurm; the rest is the I/O at the edge.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from hpcplace.errors import SlurmError, SpecError
from hpcplace.plan.plan import Plan
from hpcplace.slurm import slurm_cli
from hpcplace.slurm.slurm_job import (
    LEAKED_GPU_VARIABLES,
    NO_GRES,
    STEP_REQUEST_VARIABLES,
    WHOLE_NODE_CPUS,
    SlurmJob,
    lower,
)

ATTACH_STEP = "attach"  # the job name of attached drivers' steps (squeue --steps shows it)
EXEC_STEP = "exec"
RELEASE_PREFIX = ".release-"  # + job id: the marker a held job's batch script waits for
HOLD_FILE = "hold.json"  # written by a held job once it holds (templates/hold.sh.j2)
COMMANDS_DIR = "attach"  # the command files of attached steps, in the run directory


if TYPE_CHECKING:
    from hpcplace.slurm.submit import JobStatus


class NotRunningError(SpecError):
    """The job is not (or no longer) running: nothing to attach to (a usage error, exit 2, not Slurm's)."""


@dataclass(frozen=True)
class LiveRun:
    """A submitted run directory, what a step into its job needs."""

    run_dir: Path
    job_id: str
    plan: Plan
    launcher: tuple[str, ...]

    @property
    def plan_path(self) -> Path:
        return self.run_dir / "plan.json"


def open_run(target: str | os.PathLike[str]) -> LiveRun:
    """A run directory written by `hpcplace submit` (run.json with the job id, plan.json)."""
    from hpcplace.slurm import submit

    run_dir = Path(target).absolute()
    if not run_dir.is_dir():
        raise submit.UnknownJobError(
            f"no run directory {str(target)!r}",
            hint="give the run directory `hpcplace submit` printed after the job id",
        )
    if not (run_dir / "plan.json").exists():
        raise submit.UnknownJobError(
            f"{run_dir} is not a run directory (no plan.json)",
            hint="give the run directory `hpcplace submit` printed after the job id",
        )
    job_id = submit.recorded_job(run_dir)
    plan = submit.load_plan(run_dir / "plan.json")
    return LiveRun(run_dir, job_id, plan, recorded_launcher(run_dir))


def recorded_launcher(run_dir: Path) -> tuple[str, ...]:
    """The launcher (with its --chdir) the job's steps start: run.json's, else job.sbatch's hp_launcher=(...)."""
    from hpcplace.slurm import submit

    record = submit.read_record(run_dir) or {}
    launcher = record.get("launcher")
    if isinstance(launcher, list) and launcher and all(isinstance(a, str) for a in launcher):
        return tuple(launcher)
    script = run_dir / "job.sbatch"
    try:
        for line in script.read_text(encoding="utf-8").splitlines():
            m = re.fullmatch(r"hp_launcher=\((.*)\)", line)
            if m:
                return tuple(shlex.split(m.group(1)))
    except (OSError, ValueError):
        pass
    raise SlurmError(
        f"cannot tell which launcher the job in {run_dir} runs (no launcher in run.json or job.sbatch)",
        hint="resubmit with this hpcplace version",
    )


def owned_status(job_id: str, run_dir: Path, *, timeout: float = slurm_cli.DEFAULT_TIMEOUT_S) -> JobStatus:
    """The job's status, refused when the id recorded in `run_dir` now names another run's job (ids restart
    when a cluster's state is reset): attach, exec and release never reach into someone else's job."""
    from hpcplace.slurm import run_report, submit

    status = submit.known_status(job_id, timeout=timeout)
    problem = run_report.ownership_problem(run_dir, submit.read_record(run_dir), status)
    if problem is not None:
        raise submit.UnknownJobError(
            problem,
            hint=f"this run's own job is no longer known to Slurm; its files are "
            f"still in {run_dir} (`hpcplace logs {shlex.quote(str(run_dir))}`)",
        )
    return status


def check_running(job_id: str, run_dir: Path, *, timeout: float = slurm_cli.DEFAULT_TIMEOUT_S) -> None:
    """Refuse a job that is not this run's, or not RUNNING (pending: not started yet; ended: nothing to
    attach to)."""
    status = owned_status(job_id, run_dir, timeout=timeout)
    if status.state != "RUNNING":
        why = "it has not started yet" if status.state == "PENDING" else "it is not running"
        raise NotRunningError(
            f"job {job_id} is {status.state}: {why}",
            hint=f"`hpcplace status {job_id}` says where it is; only a running job can be attached to",
        )


# ------------------------------------------------------------------------------------------------
# where a rank / node lives, and the srun options of a step into the job (pure)


@dataclass(frozen=True)
class Target:
    """Where a step goes: het component g, node index j in it; what runs there."""

    het_group: int
    index: int
    node_rank: int
    gpus: int
    gpu_type: str | None
    what: str  # "rank 3 of 'actor'", "node rank 2"


def rank_target(plan: Plan, component: str, rank: int) -> Target:
    comps = {c.name: c for c in plan.components}
    if component not in comps:
        raise SpecError(f"no component {component!r} in the plan", hint="components: " + ", ".join(comps))
    comp = comps[component]
    if not 0 <= rank < comp.world_size:
        raise SpecError(f"component {component!r} has no rank {rank}", hint=f"ranks 0-{comp.world_size - 1}")
    p = comp.processes[rank]
    return _target(plan, p.het_group, p.group_node_index, f"rank {rank} of {component!r}")


def node_target(plan: Plan, node_rank: int) -> Target:
    for g in range(len(plan.cluster.node_groups)):
        for j, r in enumerate(plan.cluster.node_ranks(g)):
            if r == node_rank:
                return _target(plan, g, j, f"node rank {node_rank}")
    raise SpecError(f"the plan has no node rank {node_rank}", hint=f"node ranks 0-{len(plan.cluster.nodes) - 1}")


def _target(plan: Plan, g: int, j: int, what: str) -> Target:
    group = plan.cluster.node_groups[g]
    gpus = group.gpus_per_node[j] if j < len(group.gpus_per_node) else 0
    return Target(g, j, plan.cluster.node_ranks(g)[j], gpus, group.gpu_type, what)


def head_target(plan: Plan) -> Target:
    """The Ray head (cluster node rank 0), where drivers run."""
    return node_target(plan, 0)


def step_args(job: SlurmJob, run: LiveRun, target: Target, name: str, *, gpus: bool, pty: bool = False) -> list[str]:
    """srun options of one task on the target node, overlapping the job's running steps, with its CPUs
    (all the job holds on the node), memory and GRES said explicitly. With `gpus`, the step holds all of
    the node's GPUs (as the Ray raylet step does): the shim narrows them to the rank's; else none. The node
    is the plan's, wherever the job placed it (a group numbered in verl's/slime's IP order at its start)."""
    from hpcplace.runtime.ip_order import slurm_index

    args = [f"--jobid={run.job_id}"]
    if job.is_het:
        args.append(f"--het-group={target.het_group}")
    args += [
        "--nodes=1",
        f"--relative={slurm_index(str(run.run_dir / 'logs'), target.het_group, target.index)}",
        "--ntasks=1",
        WHOLE_NODE_CPUS,
        "--mem=0",
        "--overlap",
        f"--job-name={name}",
    ]
    if gpus and target.gpus:
        args.append(f"--gres=gpu:{target.gpu_type}:{target.gpus}" if target.gpu_type else f"--gres=gpu:{target.gpus}")
    else:
        args.append(NO_GRES)
    args.append("--pty" if pty else "--disable-status")  # one Ctrl-C: SIGINT to the tasks (run_step)
    return args


def entry(run: LiveRun, het_group: int) -> tuple[list[str], list[str]]:
    """(srun options, launcher) that start the shim on a node of `het_group` the way the job's own steps do:
    in the group's container when it has one (pyxis: the job's named container of that group)."""
    from hpcplace.slurm.container_launch import JOB_ID, group_launch

    groups = run.plan.cluster.node_groups
    container = groups[het_group].container if het_group < len(groups) else None
    launch = group_launch(het_group, container, run.launcher, str(run.run_dir))
    return [a.replace(JOB_ID, run.job_id) for a in launch.srun_args], list(launch.launcher)


def driver_argv(run: LiveRun, command_file: Path) -> list[str]:
    """`srun ... LAUNCHER --ray-driver --plan P --argv FILE`: an attached driver on the head."""
    job = lower(run.plan)
    target = head_target(run.plan)
    container_args, launcher = entry(run, target.het_group)
    return [
        "srun",
        *step_args(job, run, target, ATTACH_STEP, gpus=False),
        "--unbuffered",
        *container_args,
        *launcher,
        "--ray-driver",
        "--plan",
        str(run.plan_path),
        "--argv",
        str(command_file),
    ]


def exec_argv(
    run: LiveRun, target: Target, command_file: Path, *, component: str | None, rank: int | None, pty: bool = False
) -> list[str]:
    """`srun ... LAUNCHER --plan P --component C --rank R --argv FILE` (or `--on-node N`)."""
    job = lower(run.plan)
    container_args, launcher = entry(run, target.het_group)
    head = ["srun", *step_args(job, run, target, EXEC_STEP, gpus=True, pty=pty), *container_args, *launcher]
    if component is None:
        return [*head, "--on-node", str(target.node_rank), "--plan", str(run.plan_path), "--argv", str(command_file)]
    return [
        *head,
        "--plan",
        str(run.plan_path),
        "--component",
        component,
        "--rank",
        str(rank),
        "--argv",
        str(command_file),
    ]


def step_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """srun's environment: the caller's, without GPU variables and Slurm job variables that leak in
    from an enclosing allocation (the step gets its own); SLURM_CONF and the like stay."""
    drop = set(LEAKED_GPU_VARIABLES)
    requests = re.compile("(" + "|".join(STEP_REQUEST_VARIABLES) + r")(_(HET|PACK)_GROUP_\d+)?")
    return {
        k: v
        for k, v in environ.items()
        if k not in drop
        and not requests.fullmatch(k)
        and not re.match(
            r"SLURM_(JOB|STEP|HET|PACK|NODELIST|NNODES|NTASKS|NPROCS|TASKS|"
            r"CPUS|MEM|GPUS|DISTRIBUTION|SRUN|LOCALID|PROCID|NODEID|JOBID)",
            k,
        )
    }


# ------------------------------------------------------------------------------------------------
# I/O: command files, running steps


def write_command(run_dir: Path, kind: str, argv: Sequence[str]) -> Path:
    """The step's command as a JSON list in <run dir>/attach/<kind>-<n>.json (a new n each time;
    `kind` may already end in its number, e.g. driver-3)."""
    from hpcplace.config.launch import check_driver

    words = check_driver(argv, f"the {kind} command")
    folder = run_dir / COMMANDS_DIR
    folder.mkdir(exist_ok=True)
    for n in range(1, 100000):
        path = folder / (f"{kind}.json" if n == 1 and kind[-1].isdigit() else f"{kind}-{n}.json")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(list(words), f)
        return path
    raise SlurmError(f"too many command files in {folder}")


def claim_driver_log(run_dir: Path) -> tuple[int, Path]:
    """The next logs/driver-N.out (created, so two attaches never share one)."""
    logs = run_dir / "logs"
    logs.mkdir(exist_ok=True)
    for n in range(1, 100000):
        path = logs / f"driver-{n}.out"
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            continue
        return n, path
    raise SlurmError(f"too many driver logs in {logs}")


def running_steps(job_id: str, name: str, *, timeout: float = slurm_cli.DEFAULT_TIMEOUT_S) -> list[str]:
    """Ids of the job's running steps called `name` (squeue --steps)."""
    result = slurm_cli.run(["squeue", "-h", "--steps", "-j", job_id, "-o", "%i %j"], timeout=timeout)
    if result.returncode != 0:
        raise SlurmError(f"squeue --steps -j {job_id} failed: {result.message}")
    return [parts[0] for line in result.stdout.splitlines() if len(parts := line.split()) == 2 and parts[1] == name]


def release(run: LiveRun) -> Path:
    """Write the release marker the held job waits for; it then ends as after its last step."""
    path = run.run_dir / f"{RELEASE_PREFIX}{run.job_id}"
    path.write_text(f"released at {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n", encoding="utf-8")
    return path


def _copy(src: io.BufferedReader, sinks: Sequence[BinaryIO], lock: threading.Lock) -> None:  # a PIPE: read1
    # SIGINT goes to the main thread only: delivered here, it would not wake the main thread's wait for srun.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    for chunk in iter(lambda: src.read1(65536), b""):
        with lock:
            for sink in sinks:
                sink.write(chunk)
                sink.flush()


# srun takes a second SIGINT within this many seconds of the first as "abort": SIGKILL to the step's tasks.
SRUN_ABORT_WINDOW_S = 1.0


def run_step(argv: Sequence[str], *, log: Path | None = None, grace_s: float = 10.0) -> int:
    """Run one srun step in the foreground; its exit code. With `log`, its stdout and stderr go to the
    terminal AND the log. Ctrl-C (SIGINT here, or to the terminal's process group) ends this step only,
    gracefully: the step's tasks get SIGINT, and are killed if still running `grace_s` later (`_interrupt`); 130."""
    env = step_environment(os.environ)
    with _interruptible():
        try:
            if log is None:
                proc = subprocess.Popen(list(argv), env=env)
            else:
                proc = subprocess.Popen(list(argv), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as exc:
            raise SlurmError(
                f"cannot run `{argv[0]}`: {exc.strerror}", hint="run hpcplace on a Slurm login node (srun on PATH)"
            ) from None
        threads: list[threading.Thread] = []
        out = None
        try:
            if log is not None:
                out = open(log, "ab")  # noqa: SIM115 (closed below, after the copying threads)
                lock = threading.Lock()
                for src, sink in ((proc.stdout, sys.stdout.buffer), (proc.stderr, sys.stderr.buffer)):
                    t = threading.Thread(target=_copy, args=(src, (sink, out), lock), daemon=True)
                    t.start()
                    threads.append(t)
            try:
                rc = proc.wait()
            except KeyboardInterrupt:
                _interrupt(proc, grace_s)
                rc = 130
        finally:
            for t in threads:
                t.join(timeout=5)
            if out is not None:
                out.close()
    return rc


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt here while a step runs, even where this process inherited it ignored
    (started in the background by a shell without job control): srun itself acts on SIGINT whatever it
    inherited, so hpcplace must too, or a Ctrl-C would end the step and hpcplace would report srun's 137."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupt(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """Stop the step gracefully, whether the SIGINT reached srun too (a terminal's Ctrl-C: its process group)
    or hpcplace alone (`kill -INT`). srun runs with --disable-status: one SIGINT makes it pass SIGINT to the
    step's tasks, which end as they handle it; a second one within SRUN_ABORT_WINDOW_S would SIGKILL them. So
    first wait past that window (srun may have its own SIGINT), then pass one SIGINT on, then after `grace_s`
    SIGTERM (srun kills the tasks: "forcing job termination"), and SIGKILL srun itself if it hangs on."""
    print("hpcplace: interrupted: stopping this step only (the job stays up)", file=sys.stderr, flush=True)
    schedule: tuple[tuple[signal.Signals | None, float | None], ...] = (
        (None, SRUN_ABORT_WINDOW_S + 0.5),
        (signal.SIGINT, grace_s),
        (signal.SIGTERM, 5.0),
        (signal.SIGKILL, None),
    )
    for sig, wait_s in schedule:
        if sig is not None:
            try:
                proc.send_signal(sig)
            except ProcessLookupError:
                return
        if _ended_within(proc, wait_s):
            return


def _ended_within(proc: subprocess.Popen[bytes], wait_s: float | None) -> bool:
    """Whether `proc` ends within `wait_s` seconds (None: however long); a further Ctrl-C does not cut the
    wait short (one reaching srun too is srun's own abort)."""
    deadline = None if wait_s is None else time.monotonic() + wait_s
    while True:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            proc.wait(timeout=left)
            return True
        except subprocess.TimeoutExpired:
            return False
        except KeyboardInterrupt:
            continue


# ------------------------------------------------------------------------------------------------
# what `hpcplace status` says about a held job and the Ray dashboard


def hold_lines(run_dir: Path, plan: Plan, state: str, head: Mapping[str, object] | None, login_host: str) -> list[str]:
    """How to use a held job (empty when it does not hold or no longer runs), and the dashboard's address."""
    lines: list[str] = []
    if head and head.get("dashboard_port") and state == "RUNNING":  # an ended job's dashboard is gone
        host, port = head.get("host"), head["dashboard_port"]
        lines.append(
            f"Ray dashboard: http://{host}:{port} (on the head; from your machine: "
            f"ssh -N -L {port}:{host}:{port} {login_host}, then open http://localhost:{port})"
        )
    if not plan.launch.hold or state != "RUNNING":
        return lines
    held = (run_dir / HOLD_FILE).exists()
    if held:
        lines.append("held: the job stays up until `hpcplace release RUN`, `hpcplace cancel RUN` or its time limit")
    else:
        what = "the driver" if plan.launch.is_ray else "its components"
        lines.append(f"holds: after {what} it stays up until `hpcplace release RUN`, cancel or its time limit")
    first = shlex.quote(plan.components[0].name) if plan.components else "COMPONENT"
    run = shlex.quote(os.path.normpath(run_dir))  # commands to paste: a path with a space stays one word
    if plan.launch.is_ray:
        lines.append(f"  attach a driver:  hpcplace attach {run} --driver -- python main.py ...")
    lines.append(f"  exec into a rank: hpcplace exec {run} --component {first} --rank 0 -- CMD ...")
    lines.append(f"  shell on a rank:  hpcplace shell {run} --component {first} --rank 0")
    lines.append(f"  end it:           hpcplace release {run}")
    return lines
