"""The local backend: run every process of a plan on this machine, without Slurm.

Every planned node is this host. Each process gets exactly the environment the in-job shim would
compute: the same runtime functions run on a synthetic Slurm snapshot (het group, node and local
rank given by the plan; node names = 127.0.0.1, so MASTER_ADDR is loopback). GPUs come from the
shell's CUDA_VISIBLE_DEVICES if set, else NVML; planned GPU i of any node maps to local GPU
i mod n (oversubscribed when the plan needs more); with no GPU the planned ids are exported as
virtual devices. Output lines are prefixed `[component rank]`. The first failure (or Ctrl-C /
SIGTERM) stops everything: SIGTERM to every process group, SIGKILL after a grace period; a second
Ctrl-C sends SIGKILL at once. The exit code is the first failing process's (128+N for a signal N;
130 for Ctrl-C). Whatever kills the backend, even SIGKILL, its processes die with it: each child
gets SIGTERM from the kernel (PR_SET_PDEATHSIG), and a watchdog process outside the terminal's
process group, holding the read end of a pipe from the backend, sees the pipe close and sends
SIGTERM, then SIGKILL after the grace, to every process group (the children's children too), and
then removes the run's /dev/shm/hpcplace-<run> directory, as the backend does on every other stop.
"""

from __future__ import annotations

import ctypes
import json
import os
import selectors
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO

from hpcplace.errors import HpcplaceError
from hpcplace.plan.plan import Plan, plan_to_json
from hpcplace.runtime import services
from hpcplace.runtime import shm_dir as shm_dir_module
from hpcplace.runtime.devices import LOCAL_MAP, parse_device_list, query_nvml
from hpcplace.runtime.errors import ShimError
from hpcplace.runtime.plan_index import write_index
from hpcplace.runtime.ranks import compute_process_env, environment_changes, merge_environment, plan_environment
from hpcplace.runtime.services import TaskServices
from hpcplace.runtime.shm_dir import ShmDirError, make_node_dir, remove_job_dir
from hpcplace.runtime.slurm_env import node_name_at, synthetic_snapshot

LOCAL_ADDR = "127.0.0.1"
DEFAULT_GRACE_S = 5.0
_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None

# The watchdog (stdlib only, run with `python -c`): reads process-group ids, one a line, until its
# stdin closes. `done` = the backend stopped everything itself; end of file without it = the
# backend died: SIGTERM every group, SIGKILL after the grace (argv[1] seconds). Either way it then
# removes the run's /dev/shm job directory (argv[2], may be empty) with remove_job_dir of the
# stdlib-only module at argv[3] (runtime/shm_dir.py, loaded by path: no package import needed), so
# even a kill -9 of the backend leaves no shared memory (a real run's weights) behind.
_WATCHDOG = """
import importlib.util, os, signal, sys, time
groups, done = set(), False
for line in sys.stdin:
    line = line.strip()
    if line == "done":
        done = True
    elif line.isdigit():
        groups.add(int(line))
def send(sig):
    alive = False
    for g in groups:
        try:
            os.killpg(g, sig)
            alive = True
        except (ProcessLookupError, PermissionError):
            pass
    return alive
if not done and groups:
    print("hpcplace: the local backend died; stopping its processes", file=sys.stderr, flush=True)
    deadline = time.monotonic() + float(sys.argv[1])
    alive = send(signal.SIGTERM)
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = send(0)
    if alive:
        send(signal.SIGKILL)
        deadline = time.monotonic() + 2.0
        while send(0) and time.monotonic() < deadline:
            time.sleep(0.05)
if sys.argv[2]:
    spec = importlib.util.spec_from_file_location("hpcplace_watchdog_shm_dir", sys.argv[3])
    shm_dir = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shm_dir)
    try:
        shm_dir.remove_job_dir(sys.argv[2])
    except Exception as exc:
        print(f"hpcplace: could not remove {sys.argv[2]}: {exc}", file=sys.stderr, flush=True)
"""


class LocalRunError(HpcplaceError):
    """The plan cannot be run on this machine as asked."""

    exit_code = 2


@dataclass(frozen=True)
class LocalProcess:
    """One process to start: its command, full environment, and what hpcplace set (for --dry-run)."""

    component: str
    rank: int
    command: tuple[str, ...]
    env: dict[str, str] = field(repr=False)
    changes: dict[str, str | None]
    device_note: str
    services: TaskServices | None = None  # a job with services: what to wait for, a replica's port

    @property
    def label(self) -> str:
        return f"{self.component} {self.rank}"

    @property
    def is_service(self) -> bool:
        return self.services is not None and self.services.replica is not None


def local_gpus(environ: Mapping[str, str]) -> tuple[str, ...]:
    """This machine's GPUs: the shell's CUDA_VISIBLE_DEVICES when set, else NVML, else none."""
    given = parse_device_list(environ.get("CUDA_VISIBLE_DEVICES"))
    if given is not None:
        return given
    devices, _ = query_nvml()
    return tuple(str(i) for i in range(len(devices))) if devices else ()


def memory_saver_env(env: Mapping[str, str], command: tuple[str, ...]) -> dict[str, str]:
    """torch_memory_saver's preload for a process of an offloading collocation group, only where NVML sees
    a GPU and torch_memory_saver is installed for the program's Python (never on a machine without GPU:
    its LD_PRELOAD would stop every process there)."""
    from hpcplace.runtime.devices import preload_wanted
    from hpcplace.runtime.preload import preload_env

    if not preload_wanted(env) or not query_nvml()[0]:
        return {}
    return preload_env(env, command=command)[0]


def new_run_id(name: str, now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return f"{name}-local-{stamp}-{os.getpid()}"


def prepare(
    plan_text: str,
    plan_path: str,
    run_id: str,
    *,
    environ: Mapping[str, str],
    gpus: tuple[str, ...],
    components: Sequence[str] = (),
    attached: bool = False,
) -> list[LocalProcess]:
    """Compute every process's environment from plan.json text, as the shim would (no side effects);
    `attached`: for a command run into the live run (exec), a service replica's published port."""
    doc = json.loads(plan_text)
    header = {k: v for k, v in doc.items() if k != "components"}
    names = [c["name"] for c in doc["components"]]
    unknown = sorted(set(components) - set(names))
    if unknown:
        raise LocalRunError(f"unknown component(s) {', '.join(unknown)}", hint=f"components: {', '.join(names)}")
    nodes_per_group = [g["num_nodes"] for g in header["node_groups"]]
    out = []
    for ci, comp in enumerate(doc["components"]):
        if components and comp["name"] not in components:
            continue
        comp_header = {k: v for k, v in comp.items() if k != "processes"}
        rank0 = comp["processes"][0]
        for process in comp["processes"]:
            snapshot = synthetic_snapshot(
                job_id=run_id,
                nodes_per_group=nodes_per_group,
                het_group=process["het_group"],
                group_node_index=process["group_node_index"],
                local_id=process["local_rank"],
                procid=process["rank"],
                node_name=LOCAL_ADDR,
                cuda_visible_devices=environ.get("CUDA_VISIBLE_DEVICES"),
            )
            try:
                master_addr = node_name_at(snapshot, rank0["het_group"], rank0["group_node_index"])
                info, choice = compute_process_env(
                    plan=header,
                    component=comp_header,
                    component_index=ci,
                    process=process,
                    snapshot=snapshot,
                    plan_path=plan_path,
                    master_addr=master_addr,
                    local_gpus=gpus,
                )
                changes = environment_changes(info, plan_environment(header, comp_header, process))
                env = merge_environment(environ, changes)
            except ShimError as exc:
                raise LocalRunError(exc.message, hint=exc.hint) from None
            if comp.get("offload") and choice.mode == LOCAL_MAP:
                extra = memory_saver_env(env, tuple(comp["command"]))  # as the shim does on a cluster
                changes.update(extra)
                env.update(extra)
            try:
                command, changes, task = services.task_services(
                    doc["components"],
                    comp,
                    process["rank"],
                    tuple(comp["command"]),
                    changes,
                    run_dir=os.path.dirname(plan_path),
                    job_id=run_id,
                    attached=attached,
                )
            except services.ServiceError as exc:
                raise LocalRunError(exc.message, hint=exc.hint) from None
            env = merge_environment(environ, changes)
            out.append(LocalProcess(comp["name"], process["rank"], command, env, changes, choice.note, task))
    return out


LOCAL_RECORD = "local.json"  # a `run --local` run directory: its run id (the "job id" of its ranks' env)


def exec_locally(
    run_dir: str | os.PathLike[str],
    component: str,
    rank: int,
    command: Sequence[str],
    environ: Mapping[str, str] | None = None,
) -> int:
    """`hpcplace exec RUN_DIR --component C --rank R -- CMD` for a `run --local` run directory: CMD runs
    here, in the foreground, with exactly the environment that rank got (or gets) in that local run
    (the same computation, the run's own id: its HPCPLACE_SHM_DIR, MASTER_ADDR/PORT), in the run's working
    directory. Its exit code."""
    directory = Path(run_dir).resolve()
    hint = "give the directory `run --local -o DIR` wrote (it holds local.json and plan.json)"
    try:
        record = json.loads((directory / LOCAL_RECORD).read_text(encoding="utf-8"))
        run_id = str(record["run_id"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LocalRunError(
            f"{directory / LOCAL_RECORD} is damaged: {directory} is not a usable `hpcplace run "
            f"--local` run directory ({type(exc).__name__}: {exc})",
            hint=hint,
        ) from None
    plan_file = directory / "plan.json"
    try:
        text = plan_file.read_text(encoding="utf-8")
    except (OSError, ValueError) as exc:
        raise LocalRunError(
            f"cannot read {plan_file}: {directory} is not a usable `hpcplace run --local` run directory ({exc})",
            hint=hint,
        ) from None
    environ = dict(os.environ if environ is None else environ)
    try:
        procs = [
            p
            for p in prepare(
                text,
                str(plan_file),
                run_id,
                environ=environ,
                gpus=local_gpus(environ),
                components=(component,),
                attached=True,
            )
            if p.rank == rank
        ]
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:  # JSONDecodeError is a ValueError
        what = f"missing key {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
        raise LocalRunError(
            f"{plan_file} is damaged or not an hpcplace plan ({what}): the run directory {directory} cannot be used",
            hint=hint + "; or start a new run",
        ) from None
    if not procs:
        raise LocalRunError(f"component {component!r} has no rank {rank} in {directory}/plan.json")
    workdir = record.get("workdir")  # where the run's processes started (its --workdir); older records: here
    if workdir is not None and not (isinstance(workdir, str) and os.path.isdir(workdir)):
        raise LocalRunError(
            f"the run's working directory {workdir!r} (recorded in {directory / LOCAL_RECORD}) "
            "is no longer a directory",
            hint="start a new run",
        )
    try:
        return subprocess.run(list(command), env=procs[0].env, cwd=workdir, check=False).returncode
    except FileNotFoundError:
        raise LocalRunError(f"command not found: {command[0]!r}") from None
    except KeyboardInterrupt:
        return 130


def partial_collocation_problem(plan: Plan, components: Sequence[str]) -> LocalRunError | None:
    """Chosen components (--component) that would start only part of a collocation group: its members take
    turns on shared devices (the baton), so a member started alone waits forever for the others' turn."""
    chosen = set(components)
    if not chosen:
        return None
    for group in plan.collocation_groups:
        started = [c for c in group.components if c in chosen]
        missing = [c for c in group.components if c not in chosen]
        if started and missing:
            return LocalRunError(
                f"--component {' --component '.join(started)} starts only part of collocation group {group.name!r} "
                f"(members: {', '.join(group.components)}): its members take turns on shared devices, so "
                f"{', '.join(started)} would wait forever for {', '.join(missing)}",
                hint=f"add {' '.join('--component ' + c for c in missing)} too, or drop --component to run "
                "the whole plan",
            )
    return None


def startable_problem(what: str, command: Sequence[str], cwd: str, path: str) -> str | None:
    """Why `command` cannot start in the working directory `cwd` with PATH `path` (its program is not
    found or not executable; a Python's script is missing), or None. Relative programs, scripts and PATH
    entries are taken from `cwd`, where the process runs (as a Slurm step runs in its --chdir)."""
    from hpcplace.runtime.preflight import ProgramCheck, program_problem, python_script, resolve_program

    if not command:
        return None
    program = str(command[0])
    search = os.pathsep.join(d if os.path.isabs(d) else os.path.join(cwd, d or ".") for d in path.split(os.pathsep))
    candidate = os.path.join(cwd, program) if "/" in program else program
    check = ProgramCheck(
        what=what,
        program=program,
        resolved=resolve_program(candidate, search),
        needs_runtime=False,
        script=python_script(command),
    )
    problem = program_problem(check, cwd)
    if problem is not None and cwd not in problem:
        problem += f" (working directory {cwd})"
    return problem


def start_problems(processes: Sequence[LocalProcess], cwd: str) -> list[str]:
    """startable_problem for each chosen component (its processes share one command), in plan order."""
    problems: list[str] = []
    seen: set[str] = set()
    for proc in processes:
        if proc.component in seen:
            continue
        seen.add(proc.component)
        problem = startable_problem(f"component {proc.component}", proc.command, cwd, proc.env.get("PATH", os.defpath))
        if problem is not None:
            problems.append(problem)
    return problems


WORKDIR_HINT = (
    "pass --workdir DIR, the directory the commands' relative paths start from (e.g. the config's "
    "folder or the checkout), or run hpcplace from there"
)


def resolve_workdir(workdir: str | os.PathLike[str] | None) -> str:
    """--workdir DIR as an absolute directory (default: the current directory)."""
    where = os.path.abspath(workdir if workdir is not None else os.getcwd())
    if not os.path.isdir(where):
        raise LocalRunError(
            f"--workdir {os.fspath(workdir) if workdir is not None else where!r} is not a directory",
            hint="give the directory the components' commands run in",
        )
    return where


def dry_run_text(processes: Sequence[LocalProcess]) -> str:
    lines = []
    for proc in processes:
        lines.append(f"[{proc.label}] {shlex.join(proc.command)}")
        shown = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(proc.changes.items()) if v is not None)
        unset = [k for k, v in sorted(proc.changes.items()) if v is None]
        lines.append(f"    env: {shown}")
        if unset:
            lines.append(f"    unset: {' '.join(unset)}")
        lines.append(f"    devices: {proc.device_note}")
    return "\n".join(lines) + "\n"


def run_plan_locally(
    plan: Plan,
    *,
    run_dir: str | os.PathLike[str] | None = None,
    components: Sequence[str] = (),
    dry_run: bool = False,
    grace_s: float = DEFAULT_GRACE_S,
    environ: Mapping[str, str] | None = None,
    workdir: str | os.PathLike[str] | None = None,
) -> int:
    """Render plan.json (+ index) into the run dir, start every process in `workdir` (default: the current
    directory), return the exit code. Refused before anything starts: part of a collocation group, and a
    process whose program or Python script is not there (relative paths are taken from `workdir`)."""
    from hpcplace.plan.runnable import check_runnable
    from hpcplace.slurm.render import make_run_dir
    from hpcplace.slurm.slurm_job import check_spanning_workers

    check_spanning_workers(plan)  # a worker wider than a node is one Ray worker, not separate processes
    check_runnable(plan, components)  # a component without a command (and no Ray driver): nothing to start
    partial = partial_collocation_problem(plan, components)
    if partial is not None and not dry_run:
        raise partial
    cwd = resolve_workdir(workdir)
    environ = dict(os.environ if environ is None else environ)
    run_id = new_run_id(plan.name)
    directory = Path(run_dir) if run_dir is not None else Path("runs") / run_id
    plan_path = directory.resolve() / "plan.json"
    text = plan_to_json(plan)
    processes = prepare(text, str(plan_path), run_id, environ=environ, gpus=local_gpus(environ), components=components)
    problems = start_problems(processes, cwd)
    needed = {n for p in processes if p.services is not None for n in p.services.waits_for}
    unstarted = sorted(needed - {p.component for p in processes})
    if unstarted and not dry_run:  # chosen components (--component) that would wait for a service never started
        raise LocalRunError(
            f"the chosen components wait for service(s) {', '.join(unstarted)}, which would not start",
            hint=" ".join(f"--component {n}" for n in unstarted) + " starts them too",
        )
    if dry_run:  # shows what would run; what would stop it is a warning here
        for warning in ([partial.message] if partial is not None else []) + problems:
            print(f"hpcplace: warning: {warning}", file=sys.stderr)
        sys.stdout.write(dry_run_text(processes))
        return 0
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise LocalRunError(problems[0] + more, hint=WORKDIR_HINT)
    make_run_dir(directory)
    plan_path.write_text(text, encoding="utf-8")
    (directory / LOCAL_RECORD).write_text(json.dumps({"run_id": run_id, "workdir": cwd}) + "\n", encoding="utf-8")
    try:
        write_index(plan_path)
    except ShimError as exc:
        raise LocalRunError(exc.message, hint=exc.hint) from None
    # One directory per planned node (every planned node is this host, sharing its /dev/shm).
    node_dirs = sorted({proc.env["HPCPLACE_SHM_DIR"] for proc in processes})
    job_dir = os.path.dirname(node_dirs[0]) if node_dirs else None
    try:
        for node_dir in node_dirs:
            make_node_dir(node_dir)  # mode 0700, ours, not a symlink (both levels)
    except ShmDirError as exc:
        try:
            if job_dir is not None:
                remove_job_dir(job_dir)  # what we made; refuses a directory that is not ours
        except ShmDirError:
            pass
        raise LocalRunError(exc.message, hint=exc.hint) from None
    try:
        print(f"hpcplace: running {len(processes)} process(es) locally; run dir {directory}", file=sys.stderr)
        return supervise(processes, grace_s=grace_s, shm_job_dir=job_dir, workdir=cwd, run_dir=str(directory.resolve()))
    finally:
        if job_dir is not None:
            try:
                remove_job_dir(job_dir)
            except ShmDirError:
                pass


# ----------------------------------------------------------------------------------------------
# Supervision: start, prefix output, stop everything on the first failure or a signal
# ----------------------------------------------------------------------------------------------


class _Stream:
    """One child pipe: complete lines go to `sink` with the process's prefix."""

    def __init__(self, prefix: bytes, sink: BinaryIO, pgid: int) -> None:
        self.prefix = prefix
        self.sink = sink
        self.pgid = pgid
        self.partial = b""

    def feed(self, data: bytes) -> None:
        if not data:  # EOF: a last line without newline still gets printed
            if self.partial:
                self.sink.write(self.prefix + self.partial + b"\n")
                self.sink.flush()
                self.partial = b""
            return
        *lines, self.partial = (self.partial + data).split(b"\n")
        if lines:
            self.sink.write(b"".join(self.prefix + line + b"\n" for line in lines))
            self.sink.flush()


def shell_exit_code(returncode: int) -> int:
    """A child's return code as a shell reports it: 128 + N for a child killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


class _Supervisor:
    """Start processes in their own process groups, relay output, stop all of them together."""

    def __init__(
        self,
        grace_s: float,
        out: BinaryIO,
        err: BinaryIO,
        shm_job_dir: str | None = None,
        workdir: str | None = None,
        run_dir: str = "",
    ) -> None:
        self.grace_s = grace_s
        self.workdir = workdir
        self.parent = os.getpid()
        self.watchdog = _start_watchdog(grace_s, shm_job_dir)
        self.out = out
        self.err = err
        self.selector = selectors.DefaultSelector()
        self.running: dict[int, tuple[LocalProcess, subprocess.Popen[bytes]]] = {}
        self.first_failure: int | None = None
        self.deadline: float | None = None  # set once stopping began
        self.killed = False
        self.run_dir = run_dir  # where the services publish their addresses and readiness

    def say(self, text: str) -> None:
        self.err.write(f"hpcplace: {text}\n".encode())
        self.err.flush()

    def start(self, proc: LocalProcess) -> bool:
        try:
            popen = subprocess.Popen(
                list(proc.command),
                env=proc.env,
                stdin=subprocess.DEVNULL,
                cwd=self.workdir,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                preexec_fn=self._die_with_parent if _LIBC is not None else None,
            )
        except OSError as exc:
            self.say(f"[{proc.label}] cannot start {proc.command[0]!r}: {exc.strerror}")
            self.first_failure = 127 if isinstance(exc, FileNotFoundError) else 126
            return False
        self.running[popen.pid] = (proc, popen)
        self.tell_watchdog(f"{popen.pid}\n")
        if proc.is_service:
            self.publish_replica(proc, popen)
        prefix = f"[{proc.label}] ".encode()
        for pipe, sink in ((popen.stdout, self.out), (popen.stderr, self.err)):
            assert pipe is not None
            os.set_blocking(pipe.fileno(), False)
            self.selector.register(pipe, selectors.EVENT_READ, _Stream(prefix, sink, popen.pid))
        return True

    def _die_with_parent(self) -> None:
        """In the child, before exec: SIGTERM from the kernel when the backend dies."""
        assert _LIBC is not None
        _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != self.parent:  # the backend died before prctl took effect
            os._exit(143)

    def tell_watchdog(self, text: str) -> None:
        if self.watchdog is not None and self.watchdog.stdin is not None:
            try:
                self.watchdog.stdin.write(text.encode())
                self.watchdog.stdin.flush()
            except OSError:  # it died: the kernel's PR_SET_PDEATHSIG still covers the children
                self.watchdog = None

    def live_groups(self) -> set[int]:
        """Process groups that may still have members: running leaders, and owners of open pipes."""
        return set(self.running) | {key.data.pgid for key in self.selector.get_map().values()}

    def signal_all(self, sig: int) -> None:
        for pgid in self.live_groups():
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def begin_stop(self) -> None:
        if self.deadline is None:
            self.signal_all(signal.SIGTERM)
            self.deadline = time.monotonic() + self.grace_s

    def relay(self) -> None:
        for key, _ in self.selector.select(timeout=0.05):
            try:
                data = os.read(key.fd, 65536)
            except BlockingIOError:
                continue
            key.data.feed(data)
            if not data:
                self.close(key)

    def close(self, key: selectors.SelectorKey) -> None:
        self.selector.unregister(key.fileobj)
        key.data.feed(b"")
        key.fileobj.close()  # type: ignore[union-attr]  # registered: the children's pipes, file objects

    def reap(self) -> None:
        for pid, (proc, popen) in list(self.running.items()):
            code = popen.poll()
            if code is None:
                continue
            del self.running[pid]
            service = proc.services.record if proc.is_service and proc.services is not None else None
            if service is not None and self.deadline is None and self.first_failure is None:
                if service.get("optional"):
                    self.say(f"[{proc.label}] optional service ended (exit {shell_exit_code(code)}); the run goes on")
                    continue
                self.first_failure = shell_exit_code(code) or 1
                self.say(
                    f"[{proc.label}] service ended (exit {shell_exit_code(code)}) while the run needed it; stopping every process"
                )
                self.begin_stop()
                continue
            if code != 0 and self.first_failure is None and self.deadline is None:
                self.first_failure = shell_exit_code(code)
                self.say(f"[{proc.label}] exited with {self.first_failure}; stopping every process")
                self.begin_stop()

    def start_when_ready(self, waiting: list[LocalProcess], began: float) -> None:
        """Start the processes whose services are ready (their addresses filled in); a service that never
        will be fails the run, naming it."""
        for proc in list(waiting):
            task = proc.services
            assert task is not None
            ready, why = services.services_state(self.run_dir, task.waits_for, time.monotonic() - began)
            if why is not None:
                waiting.clear()
                # A replica that ended is named with its own exit status first: its probe (a thread) may have
                # seen the end, and written why, before this loop reaped it.
                self.reap()
                if self.first_failure is None and self.deadline is None:
                    self.first_failure = 1
                    self.say(f"FAILED: [{proc.label}] cannot start: {why}; stopping every process")
                    self.begin_stop()
                return
            if not ready:
                continue
            waiting.remove(proc)
            command, changes = services.with_addresses(self.run_dir, task.counts, proc.command, proc.changes)
            proc = replace(proc, command=command, changes=changes, env=merge_environment(proc.env, changes))
            if not self.start(proc):
                self.begin_stop()
                return

    def publish_replica(self, proc: LocalProcess, popen: subprocess.Popen[bytes]) -> None:
        """A service's replica started: its address, and a thread that probes it until it is ready."""
        task = proc.services
        assert task is not None and task.replica is not None and task.record is not None
        name, replica, port = task.replica
        services.publish(self.run_dir, name, replica, LOCAL_ADDR, port)
        threading.Thread(
            target=services.probe_until,
            args=(self.run_dir, name, replica, task.record, LOCAL_ADDR, port),
            kwargs={"alive": lambda: popen.poll() is None},
            daemon=True,
        ).start()

    def only_services_left(self, waiting: Sequence[LocalProcess]) -> bool:
        return bool(self.running) and not waiting and all(p.is_service for p, _ in self.running.values())

    def run(self, processes: Sequence[LocalProcess], requested: list[int]) -> int:
        began = time.monotonic()
        waiting = [p for p in processes if p.services is not None and p.services.waits_for]
        for proc in processes:
            if proc in waiting:
                continue
            if not self.start(proc):
                self.begin_stop()
                break
        while self.running or self.selector.get_map() or (waiting and self.deadline is None):
            if waiting and self.deadline is None:
                self.start_when_ready(waiting, began)
            if self.deadline is None and self.only_services_left(waiting):
                self.say("the work is done: stopping the service(s) with SIGTERM")
                self.begin_stop()
            self.relay()
            self.reap()
            if requested and self.deadline is None:
                self.say(
                    f"{signal.Signals(requested[0]).name}: stopping every process "
                    f"(SIGKILL after {self.grace_s:g} s; Ctrl-C again to kill now)"
                )
                self.begin_stop()
            if len(requested) > 1 and not self.killed:
                self.say(f"second {signal.Signals(requested[1]).name}: SIGKILL to every process")
                self.signal_all(signal.SIGKILL)
                self.killed = True
                self.deadline = time.monotonic() + 1.0
            if not self.running and self.deadline is None and self.selector.get_map():
                self.begin_stop()  # all processes exited; leftover children still hold their pipes
            now = time.monotonic()
            if self.deadline is not None and now >= self.deadline:
                if not self.killed:
                    self.signal_all(signal.SIGKILL)
                    self.killed = True
                    self.deadline = now + 1.0
                else:  # something outside the groups still holds a pipe: stop listening
                    for key in list(self.selector.get_map().values()):
                        self.close(key)
        if self.first_failure is not None:
            return self.first_failure
        return 128 + requested[0] if requested else 0

    def cleanup(self) -> None:
        if self.running:
            self.signal_all(signal.SIGKILL)
            for _, popen in self.running.values():
                popen.wait()
        for key in list(self.selector.get_map().values()):
            self.close(key)
        self.selector.close()
        if self.watchdog is not None:
            self.tell_watchdog("done\n")
            if self.watchdog.stdin is not None:
                self.watchdog.stdin.close()
            self.watchdog.wait()


def _start_watchdog(grace_s: float, shm_job_dir: str | None) -> subprocess.Popen[bytes] | None:
    """The process that stops the children and removes the run's /dev/shm directory when the backend
    is killed (see the module doc): its own session, so a terminal's Ctrl-C or a kill of the
    backend's process group spares it."""
    argv = [sys.executable, "-c", _WATCHDOG, str(grace_s), shm_job_dir or "", str(shm_dir_module.__file__)]
    try:
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return None


def supervise(
    processes: Sequence[LocalProcess],
    *,
    grace_s: float = DEFAULT_GRACE_S,
    shm_job_dir: str | None = None,
    stdout: BinaryIO | None = None,
    stderr: BinaryIO | None = None,
    workdir: str | None = None,
    run_dir: str = "",
) -> int:
    """Run all processes to completion (in `workdir`, default the current directory); the first failure or
    SIGINT/SIGTERM stops the rest. The watchdog removes `shm_job_dir` once they are stopped, even when the
    backend itself is killed."""
    requested: list[int] = []
    previous = {
        sig: signal.signal(sig, lambda signum, _frame: requested.append(signum))
        for sig in (signal.SIGINT, signal.SIGTERM)
    }
    supervisor = _Supervisor(
        grace_s, stdout or sys.stdout.buffer, stderr or sys.stderr.buffer, shm_job_dir, workdir, run_dir
    )
    try:
        return supervisor.run(processes, requested)
    finally:
        supervisor.cleanup()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
