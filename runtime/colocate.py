"""GPU ownership hand-off between the collocated components of one node (a turn-taking baton).

Components that the plan places on the same devices form a collocation group whose `phases` are a
sequence of sets of components: the components of one phase use disjoint devices and run together
(RLinf's hybrid mode: env on GPUs 0-3 with rollout on 4-7, then actor on 0-7). Exactly one phase is
current at a time. Usage, once per process:

    cycle = Cycle.from_env()                 # plan.json + HPCPLACE_* variables from the shim
    with cycle.turn("actor", memory=backend):   # wait for the phase, onload ... offload, pass on
        train_step()
        cycle.request_next("rollout")        # optional: choose the next phase instead of the order
    cycle.close()                            # leave; True for the node's last rank (may clean up)

HPCPLACE_COLLOCATE_EVENTS=<file> makes every rank append onload/offload events (CLOCK_MONOTONIC
ns, node, component, rank, devices, generation) to one log, for checking the invariants below.

Scope: the protocol is PER NODE. Devices are node-local and so is /dev/shm, so each node runs its
own baton among the ranks of the group that the plan puts on that node; phases with no rank on a
node are skipped there. Ordering across nodes (e.g. a trainer's collectives) is the program's.

On-disk protocol, in <HPCPLACE_SHM_DIR>/colocate-<group>/, where HPCPLACE_SHM_DIR is this node's
directory /dev/shm/hpcplace-<jobid>/node-<node>/ (mode 0700, no symlinks followed; <node> is
SLURMD_NODENAME on a cluster, the plan's node on the local backend), so two nodes never share a
baton even where they share one /dev/shm:

- `rank.<component>.<rank>` - each process holds an exclusive flock on its own file from open to
  close (content: pid, process start time, pid namespace); it is created locked under a temporary
  name and renamed into place. A file that exists but whose lock is free (or whose pid is gone,
  same pid namespace: covers a forked child inheriting the lock) belongs to a dead process.
- `bell.<component>.<rank>` - a FIFO per process, opened read-write by its owner: whoever changes
  the state writes a byte into every member's bell, so waiters sleep in select() instead of
  polling; they still wake every `liveness_interval` (0.1 s) to check owners.
- `lock` - flock'ed around every read-modify-write of `state`.
- `state` - small JSON in a preallocated two-record file rewritten in place (shm_dir.RecordFile: no
  new space needed on a full /dev/shm, a reader never sees a torn record): generation, current phase index,
  `done` (ranks of the current generation that have offloaded), `left` (ranks closed or declared
  dead: skipped from then on), `requested` (next phase asked for by an owner), `failed` (a message
  every waiter raises), `onloading` (ranks inside memory.resume(), with their generation: a rank that dies
  there - torch_memory_saver exit(1)s on a failed resume - is reported as "failed to onload"). Readers read
  it without the lock.

A turn: wait until the current phase contains our component and we are not yet `done` in this
generation -> onload (memory.resume, then the onload callback) -> body -> offload (callback, then
memory.pause) -> under the lock add us to `done`; when every live rank of the phase is done, move
to the requested phase or the next in order, bump the generation, clear `done`, ring the bells.
Invariants: the state moves to the next phase only after every rank of the outgoing phase recorded
`done` AFTER its offload finished, and nobody onloads before reading the new phase - so no device
ever has two owners, and all offloads precede all onloads of the next phase. If the body raises,
the turn is still offloaded and passed on (the error propagates); if offloading itself fails the
group is marked failed (the memory may still be held, so nobody may take the devices).

A dead owner (SIGKILL) is noticed by any waiter within ~liveness_interval; policy `error` (default):
the group is marked failed and every waiter raises CollocationError naming the dead rank;
`takeover`: the dead rank is marked `left` (the driver freed its GPU memory with the process) and
the turn passes on as if it had offloaded.
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import json
import os
import re
import select
import stat
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from hpcplace.runtime import shm_dir

PROTOCOL = 2  # 2: `state` is a preallocated two-record file (shm_dir.RecordFile)
STATE_CAPACITY = 32 * 1024  # bytes of JSON per state record
POLICIES = ("error", "takeover")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.,@+-]{1,100}$")


class CollocationError(Exception):
    """The collocation group cannot proceed (dead owner, bad plan, misuse) - message + hint."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message if hint is None else f"{message}\n  HINT: {hint}")
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class GroupSchedule:
    """What one node's baton needs from the plan: the group's phases, which ranks of each
    component are on this node, and (for validation and the event log) their devices."""

    name: str
    phases: tuple[tuple[str, ...], ...]
    members: Mapping[str, tuple[int, ...]]
    devices: Mapping[str, tuple[str, ...]]

    def validate(self) -> None:
        components = [c for phase in self.phases for c in phase]
        if not self.phases or any(not p for p in self.phases):
            raise CollocationError(f"collocation group {self.name!r} has an empty phase list or phase")
        if len(set(components)) != len(components):
            raise CollocationError(
                f"collocation group {self.name!r}: a component appears in two phases {[list(p) for p in self.phases]}"
            )
        unknown = set(self.members) - set(components)
        if unknown:
            raise CollocationError(f"collocation group {self.name!r}: {sorted(unknown)} are in no phase")
        for phase in self.phases:
            for i, a in enumerate(phase):
                for b in phase[i + 1 :]:
                    shared = set(self.devices.get(a, ())) & set(self.devices.get(b, ()))
                    if shared:
                        raise CollocationError(
                            f"collocation group {self.name!r}: {a} and {b} run in the same phase but share "
                            f"devices {sorted(shared)} on this node",
                            hint="components of one phase must use disjoint devices; put them in separate phases",
                        )


def _key(component: str, rank: int) -> str:
    return f"{component}:{rank}"


def _file_part(name: str) -> str:
    return name if _SAFE_NAME.match(name) else "x" + name.encode().hex()


def _proc_start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    return data[data.rindex(b")") + 2 :].split()[19].decode()


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


class Cycle:
    """This process's handle on its node's baton for one collocation group (one per process)."""

    def __init__(
        self,
        job_dir: str,
        schedule: GroupSchedule,
        *,
        component: str,
        rank: int,
        start: str | None = None,
        on_owner_death: str = "error",
        event_log: str | None = None,
        liveness_interval: float = 0.1,
    ) -> None:
        schedule.validate()
        if on_owner_death not in POLICIES:
            raise CollocationError(f"unknown owner-death policy {on_owner_death!r}", hint=f"one of {POLICIES}")
        if rank not in schedule.members.get(component, ()):
            raise CollocationError(
                f"{component} rank {rank} is not a member of collocation group "
                f"{schedule.name!r} on this node (members: {dict(schedule.members)})"
            )
        self.schedule = schedule
        self.component = component
        self.rank = rank
        self.key = _key(component, rank)
        self.on_owner_death = on_owner_death
        self.liveness_interval = liveness_interval
        self._event_log = event_log
        base = os.path.basename(os.path.normpath(job_dir))
        self._node = base[len("node-") :] if base.startswith("node-") else ""  # for the event log
        self._turn_generation: int | None = None
        self._phase_of = {c: i for i, phase in enumerate(schedule.phases) for c in phase}
        if start is not None and start not in self._phase_of:
            raise CollocationError(f"start component {start!r} is not in collocation group {schedule.name!r}")
        self._closed = True
        self._job_fd = shm_dir.open_private_dir(job_dir)
        try:
            self._fd = shm_dir.open_private_subdir(
                self._job_fd, f"colocate-{_file_part(schedule.name)}", label=f"{job_dir}/colocate-{schedule.name}"
            )
        except BaseException:
            os.close(self._job_fd)
            raise
        self._lock_fd = self._rank_fd = self._bell_fd = -1
        self._state_file: shm_dir.RecordFile | None = None
        try:
            self._lock_fd = shm_dir.open_file(self._fd, "lock", os.O_RDWR | os.O_CREAT)
            self._rank_fd = self._claim_rank_file()
            self._bell_fd = self._open_bell()
            with self._locked():
                try:  # preallocated: later hand-offs need no new space on a full /dev/shm
                    self._state_file = shm_dir.RecordFile(
                        self._fd, "state", STATE_CAPACITY, what=f"collocation group {schedule.name!r} state"
                    )
                except shm_dir.ShmDirError as exc:
                    raise CollocationError(exc.message, hint=exc.hint) from None
                state = self._read_state()
                if state is None:
                    self._write_state(self._initial_state(start))
                else:
                    self._check_same_schedule(state, start)
                    if self.key in state["left"]:
                        raise CollocationError(
                            f"{self.key} already left collocation group {schedule.name!r} "
                            "(closed or declared dead); a rank cannot rejoin"
                        )
        except BaseException:
            self._close_fds()
            raise
        self._closed = False
        atexit.register(self.close)

    # ------------------------------------------------------------------ construction from the plan
    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        start: str | None = None,
        on_owner_death: str = "error",
        event_log: str | None = None,
    ) -> Cycle:
        """The Cycle of the process the shim started: reads HPCPLACE_PLAN, HPCPLACE_COMPONENT,
        HPCPLACE_RANK, HPCPLACE_SHM_DIR (or HPCPLACE_JOB_ID), HPCPLACE_COLLOCATION_GROUP,
        HPCPLACE_NODE_RANK, and the group from plan.json. HPCPLACE_COLLOCATE_EVENTS (optional)
        names a file to append onload/offload events to."""
        env = os.environ if environ is None else environ
        missing = [v for v in ("HPCPLACE_PLAN", "HPCPLACE_COMPONENT", "HPCPLACE_RANK") if not env.get(v)]
        if missing:
            raise CollocationError(
                f"{', '.join(missing)} not set: this process was not started by hpcplace-run",
                hint="run through the shim (hpcplace run ...), or build Cycle(...) explicitly",
            )
        component, rank = env["HPCPLACE_COMPONENT"], int(env["HPCPLACE_RANK"])
        group = env.get("HPCPLACE_COLLOCATION_GROUP")
        if not group:
            raise CollocationError(
                f"component {component!r} is in no collocation group",
                hint="only components that share devices take turns; check the placement",
            )
        job_dir = shm_dir.node_dir_from_env(env)
        if job_dir is None:
            raise CollocationError("neither HPCPLACE_SHM_DIR nor HPCPLACE_JOB_ID is set")
        try:
            shm_dir.make_node_dir(job_dir)  # the shim made it; checked again (and made without the shim)
        except shm_dir.ShmDirError as exc:
            raise CollocationError(exc.message, hint=exc.hint) from None
        node = int(env["HPCPLACE_NODE_RANK"]) if env.get("HPCPLACE_NODE_RANK") else None
        schedule = schedule_from_plan(env["HPCPLACE_PLAN"], group, component=component, rank=rank, node=node)
        return cls(
            job_dir,
            schedule,
            component=component,
            rank=rank,
            start=start,
            on_owner_death=on_owner_death,
            event_log=event_log or env.get("HPCPLACE_COLLOCATE_EVENTS"),
        )

    # ------------------------------------------------------------------ files
    def _claim_rank_file(self) -> int:
        """Create our rank file already locked (under a temporary name, then renamed into place),
        so a prober never sees it unlocked while we are alive."""
        name = f"rank.{_file_part(self.component)}.{self.rank}"
        running = CollocationError(
            f"{self.key} of collocation group {self.schedule.name!r} is already running "
            "on this node (its rank file is locked by a live process)"
        )
        try:
            old = shm_dir.open_file(self._fd, name, os.O_RDONLY)
        except FileNotFoundError:
            pass
        else:
            try:
                fcntl.flock(old, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                raise running from None
            finally:
                os.close(old)
        tmp = f".{name}.{os.getpid()}"
        fd = shm_dir.open_file(self._fd, tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                os.pwrite(fd, f"{os.getpid()} {_proc_start_time(os.getpid())} {_pid_namespace()}\n".encode(), 0)
            except OSError as exc:
                os.unlink(tmp, dir_fd=self._fd)
                if exc.errno == errno.ENOSPC:
                    raise CollocationError(
                        f"no space left on /dev/shm for {self.key}'s rank file in collocation "
                        f"group {self.schedule.name!r}",
                        hint="/dev/shm is full (another job or tenant?); free it",
                    ) from None
                raise
            os.replace(tmp, name, src_dir_fd=self._fd, dst_dir_fd=self._fd)
            if os.stat(name, dir_fd=self._fd, follow_symlinks=False).st_ino != os.fstat(fd).st_ino:
                raise running  # another process claimed the same rank at the same moment
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open_bell(self) -> int:
        name = f"bell.{_file_part(self.component)}.{self.rank}"
        try:
            os.mkfifo(name, 0o600, dir_fd=self._fd)
        except FileExistsError:
            pass
        fd = shm_dir.open_file(self._fd, name, os.O_RDWR | os.O_NONBLOCK)
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.close(fd)
            raise CollocationError(f"{name} in the collocation directory is not a FIFO")
        return fd

    def _ring_all(self) -> None:
        for component, ranks in self.schedule.members.items():
            for rank in ranks:
                if component == self.component and rank == self.rank:
                    continue
                try:
                    fd = shm_dir.open_file(
                        self._fd, f"bell.{_file_part(component)}.{rank}", os.O_WRONLY | os.O_NONBLOCK
                    )
                except OSError:
                    continue  # not started yet (no FIFO) or nobody reading (ENXIO): nothing to wake
                try:
                    os.write(fd, b"!")
                except OSError:
                    pass  # full: a wake-up is already pending
                finally:
                    os.close(fd)

    def _sleep_on_bell(self, timeout: float) -> None:
        ready, _, _ = select.select([self._bell_fd], [], [], timeout)
        if ready:
            try:
                while os.read(self._bell_fd, 4096):
                    pass
            except BlockingIOError:
                pass

    def _records(self) -> shm_dir.RecordFile:
        if self._state_file is None:
            raise CollocationError(f"{self.key}: the collocation cycle is used after close()")
        return self._state_file

    @contextmanager
    def _locked(self) -> Iterator[None]:
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _read_state(self) -> dict[str, Any] | None:
        data = self._records().read()
        return None if data is None else json.loads(data)

    def _write_state(self, state: dict[str, Any]) -> None:
        state["seq"] = state.get("seq", 0) + 1
        try:
            self._records().write(json.dumps(state, sort_keys=True).encode())
        except shm_dir.ShmDirError as exc:
            raise CollocationError(
                exc.message, hint="too many ranks or dead-rank records for one group's state record"
            ) from None

    # ------------------------------------------------------------------ the schedule
    def _schedule_json(self) -> dict[str, Any]:
        return {
            "phases": [list(p) for p in self.schedule.phases],
            "members": {c: list(r) for c, r in sorted(self.schedule.members.items())},
        }

    def _live_keys(self, phase: int, left: Sequence[str]) -> list[str]:
        return [
            _key(c, r)
            for c in self.schedule.phases[phase]
            for r in self.schedule.members.get(c, ())
            if _key(c, r) not in left
        ]

    def _next_phase(self, after: int | None, left: Sequence[str]) -> int | None:
        """The first phase from `after` on (cyclically, `after` itself last) with a live rank here."""
        n = len(self.schedule.phases)
        first = 0 if after is None else after + 1
        for i in range(n):
            p = (first + i) % n
            if self._live_keys(p, left):
                return p
        return None

    def _initial_state(self, start: str | None) -> dict[str, Any]:
        first = self._phase_of[start] if start is not None else 0
        phase = self._next_phase(first - 1 if first else None, [])
        return {
            "protocol": PROTOCOL,
            "group": self.schedule.name,
            **self._schedule_json(),
            "start": start,
            "generation": 0,
            "phase": phase,
            "done": [],
            "left": [],
            "dead": [],
            "requested": None,
            "failed": None,
            "onloading": {},
        }

    def _check_same_schedule(self, state: dict[str, Any], start: str | None) -> None:
        if state.get("protocol") != PROTOCOL:
            raise CollocationError(f"collocation state has protocol {state.get('protocol')}, expected {PROTOCOL}")
        mine = self._schedule_json()
        theirs = {"phases": state["phases"], "members": state["members"]}
        if mine != theirs or state.get("start") != start:
            raise CollocationError(
                f"ranks of collocation group {self.schedule.name!r} disagree on the schedule: "
                f"{self.key} has {mine} start={start!r}, the group has {theirs} start={state.get('start')!r}",
                hint="every rank must read the same plan.json and pass the same start",
            )

    def _advance_if_complete(self, state: dict[str, Any]) -> bool:
        phase = state["phase"]
        if phase is None:
            return False
        if any(k not in state["done"] for k in self._live_keys(phase, state["left"])):
            return False
        requested = state["requested"]
        if requested is not None and self._live_keys(requested, state["left"]):
            state["phase"] = requested
        else:
            state["phase"] = self._next_phase(phase, state["left"])
        state["generation"] += 1
        state["done"] = []
        state["requested"] = None
        return True

    # ------------------------------------------------------------------ liveness
    def _is_dead(self, key: str) -> str | None:
        """A reason if the process of `key` has died, None if alive or not started yet."""
        component, rank = key.rsplit(":", 1)
        try:
            fd = shm_dir.open_file(self._fd, f"rank.{_file_part(component)}.{rank}", os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                pass
            else:
                fcntl.flock(fd, fcntl.LOCK_UN)
                return "its lock was released without leaving the group (process died)"
            fields = os.pread(fd, 4096, 0).decode(errors="replace").split()
        finally:
            os.close(fd)
        if len(fields) == 3 and fields[2] == _pid_namespace():
            pid = int(fields[0])
            if _proc_start_time(pid) != fields[1]:
                return f"its process {pid} is gone (the lock is held by a forked child)"
        return None

    def _check_owners(self) -> None:
        """Under the lock: apply the death policy to dead ranks the current phase waits for."""
        with self._locked():
            state = self._read_state()
            if state is None or state["failed"] or state["phase"] is None:
                return
            pending = [k for k in self._live_keys(state["phase"], state["left"]) if k not in state["done"]]
            dead = [(k, why) for k in pending if k != self.key for why in [self._is_dead(k)] if why]
            if not dead:
                return
            phase = list(self.schedule.phases[state["phase"]])
            onloading = state.get("onloading", {})
            dead = [
                (
                    k,
                    f"failed to onload in generation {onloading[k]}: it died inside memory resume "
                    f"(torch_memory_saver exits the process when a resume fails, e.g. out of device memory); "
                    f"{why}"
                    if k in onloading
                    else why,
                )
                for k, why in dead
            ]
            text = "; ".join(f"{k} ({why})" for k, why in dead)
            if self.on_owner_death == "error":
                state["failed"] = (
                    f"collocation group {self.schedule.name!r}: owner(s) of phase {phase} died "
                    f"during generation {state['generation']}: {text}"
                )
            else:
                for k, why in dead:
                    state["left"].append(k)
                    state["dead"].append(
                        {"rank": k, "why": why, "generation": state["generation"], "noticed_by": self.key}
                    )
                self._advance_if_complete(state)
            self._write_state(state)
        self._ring_all()

    # ------------------------------------------------------------------ turns
    def _event(self, event: str, generation: int) -> None:
        if not self._event_log:
            return
        line = json.dumps(
            {
                "t": time.monotonic_ns(),
                "event": event,
                "node": self._node,
                "component": self.component,
                "rank": self.rank,
                "pid": os.getpid(),
                "generation": generation,
                "devices": list(self.schedule.devices.get(self.component, ())),
            }
        )
        fd = os.open(self._event_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)

    def wait_for_turn(self, timeout: float | None = None) -> int:
        """Block until this rank's phase is current and it has not taken this generation's turn;
        returns the generation. Raises CollocationError if the group failed."""
        if self._closed:
            raise CollocationError(f"{self.key}: the collocation cycle is closed")
        deadline = None if timeout is None else time.monotonic() + timeout
        next_check = time.monotonic() + self.liveness_interval
        while True:
            state = self._read_state()
            assert state is not None
            if state["failed"]:
                raise CollocationError(state["failed"], hint="see the dead rank's log; restart the job")
            phase = state["phase"]
            if phase is None:
                raise CollocationError(f"collocation group {self.schedule.name!r} has finished: every rank left")
            if self.component in self.schedule.phases[phase] and self.key not in state["done"]:
                return int(state["generation"])
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise CollocationError(
                    f"{self.key}: no turn within {timeout} s "
                    f"(phase {list(self.schedule.phases[phase])} owns the devices)"
                )
            if now >= next_check:
                self._check_owners()
                next_check = time.monotonic() + self.liveness_interval
                continue
            wait = next_check - now if deadline is None else min(next_check, deadline) - now
            self._sleep_on_bell(max(wait, 0.0))

    @contextmanager
    def turn(
        self,
        component: str | None = None,
        *,
        memory: Any = None,
        onload: Callable[[], None] | None = None,
        offload: Callable[[], None] | None = None,
        timeout: float | None = None,
    ) -> Iterator[int]:
        """Own the devices for one turn: wait, onload (memory.resume() of paused tags, then `onload`),
        run the body, offload (`offload`, then memory.pause() of resident tags), pass the turn on.
        Yields the generation number."""
        if component is not None and component != self.component:
            raise CollocationError(f"this process is {self.key}; it cannot take a turn as {component!r}")
        generation = self.wait_for_turn(timeout)
        self._turn_generation = generation
        self._event("onload_begin", generation)
        try:
            paused = [] if memory is None else [t for t in memory.tags if memory.state(t) == "paused"]
            if paused:
                # A failed resume is exit(1) inside torch_memory_saver: say so first, for the others.
                self._set_onloading(generation)
                try:
                    for tag in paused:
                        memory.resume(tag)
                finally:
                    self._set_onloading(None)
            if onload is not None:
                onload()
            self._event("onload_end", generation)
            yield generation
        finally:
            self._turn_generation = None
            self._offload_and_pass(generation, memory, offload)

    def _set_onloading(self, generation: int | None) -> None:
        """Record (or clear) in the group state that this rank is inside memory.resume(), so that if it
        dies there the others report "failed to onload" instead of a bare death."""
        with self._locked():
            state = self._read_state()
            assert state is not None
            onloading = state.setdefault("onloading", {})
            if generation is None:
                onloading.pop(self.key, None)
            else:
                onloading[self.key] = generation
            self._write_state(state)

    def _offload_and_pass(self, generation: int, memory: Any, offload: Callable[[], None] | None) -> None:
        self._event("offload_begin", generation)
        try:
            if offload is not None:
                offload()
            if memory is not None:
                for tag in [t for t in memory.tags if memory.state(t) == "resident"]:
                    memory.pause(tag)
        except BaseException as exc:
            with self._locked():
                state = self._read_state()
                assert state is not None
                state["failed"] = (
                    f"{self.key} failed to offload in generation {generation}: {type(exc).__name__}: {exc}"
                )
                self._write_state(state)
            self._ring_all()
            raise
        self._event("offload_end", generation)
        with self._locked():
            state = self._read_state()
            assert state is not None
            if state["generation"] != generation:
                raise CollocationError(
                    f"{self.key}: generation moved from {generation} to "
                    f"{state['generation']} during its turn (declared dead?)"
                )
            state["done"].append(self.key)
            self._advance_if_complete(state)
            self._write_state(state)
        self._ring_all()

    def request_next(self, target: str | int | Sequence[str]) -> None:
        """During a turn: make `target` (a component, a phase index, or a phase's components) the
        next phase instead of the configured order. All requesting ranks must agree."""
        if self._turn_generation is None:
            raise CollocationError(f"{self.key}: request_next() is only allowed during a turn")
        if isinstance(target, int):
            index = target
        elif isinstance(target, str):
            if target not in self._phase_of:
                raise CollocationError(f"{target!r} is not in collocation group {self.schedule.name!r}")
            index = self._phase_of[target]
        else:
            wanted = tuple(target)
            matches = [i for i, p in enumerate(self.schedule.phases) if set(p) == set(wanted)]
            if not matches:
                raise CollocationError(f"no phase {list(wanted)} in {[list(p) for p in self.schedule.phases]}")
            index = matches[0]
        if not 0 <= index < len(self.schedule.phases):
            raise CollocationError(f"phase index {index} out of range")
        with self._locked():
            state = self._read_state()
            assert state is not None
            if state["requested"] not in (None, index):
                raise CollocationError(
                    f"{self.key} requests phase {list(self.schedule.phases[index])} but another owner already "
                    f"requested {list(self.schedule.phases[state['requested']])}"
                )
            state["requested"] = index
            self._write_state(state)

    def state(self) -> dict[str, Any]:
        """A snapshot of the shared state (for logs and tests)."""
        state = self._read_state()
        assert state is not None
        return state

    # ------------------------------------------------------------------ closing
    def close(self) -> bool:
        """Leave the group: later phases skip this rank. Idempotent; also runs at exit. Returns True
        when this was the last rank of the group on this node to leave (it may clean up)."""
        if self._closed:
            return False
        self._closed = True
        atexit.unregister(self.close)
        last = False
        try:
            with self._locked():
                state = self._read_state()
                if state is not None and self.key not in state["left"]:
                    state["left"].append(self.key)
                    self._advance_if_complete(state)
                    self._write_state(state)
                    everyone = {_key(c, r) for c, ranks in self.schedule.members.items() for r in ranks}
                    last = everyone <= set(state["left"])
            self._ring_all()
        finally:
            self._close_fds()
        return last

    def _close_fds(self) -> None:
        if self._state_file is not None:
            self._state_file.close()
            self._state_file = None
        for fd in (self._bell_fd, self._rank_fd, self._lock_fd, self._fd, self._job_fd):
            if fd >= 0:
                os.close(fd)
        self._bell_fd = self._rank_fd = self._lock_fd = self._fd = self._job_fd = -1

    def __enter__(self) -> Cycle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------- plan.json
def _load_plan(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            plan: dict[str, Any] = json.load(fh)
            return plan
    except OSError as exc:
        raise CollocationError(f"cannot read plan {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise CollocationError(f"plan {path} is not valid JSON: {exc}") from None


def schedule_from_plan(
    plan_path: str, group: str, *, component: str, rank: int, node: int | None = None
) -> GroupSchedule:
    """This node's view of collocation group `group`: phases from the plan header, and the ranks
    and devices of each member component whose processes sit on this node (the node of
    `component` rank `rank` unless `node` is given). Uses plan.json's byte-offset index when it
    exists (reads only this node's process lines), else parses plan.json."""
    from hpcplace.runtime.plan_index import PlanIndex, index_path

    if not os.path.exists(index_path(plan_path)):
        return _schedule_from_json(plan_path, group, component=component, rank=rank, node=node)
    from hpcplace.runtime.errors import ShimError

    try:
        with PlanIndex(plan_path) as index:
            header = _group_header(index.plan, group, plan_path)
            if node is None:
                node = int(index.process(index.component_index(component), rank)["cluster_node_rank"])
            node_groups = {int(g["het_group"]): g for g in index.plan["node_groups"]}
            procs_of: dict[str, list[dict[str, Any]]] = {}
            for name in header["components"]:
                ci = index.component_index(name)
                procs_of[name] = []
                for g in index.het_groups(ci):
                    listed = node_groups[g].get("node_ranks")  # only when not one contiguous block
                    j = (
                        (listed.index(node) if node in listed else -1)
                        if listed
                        else node - int(node_groups[g]["first_node_rank"])
                    )
                    if 0 <= j < int(node_groups[g]["num_nodes"]):
                        procs_of[name] += [
                            p
                            for k in range(index.processes_on(ci, g, j))
                            for p in [index.process_at(ci, g, j, k)]
                            if p is not None
                        ]
    except ShimError as exc:
        raise CollocationError(exc.message, hint=exc.hint) from None
    return _schedule(group, header, procs_of)


def _group_header(plan: Mapping[str, Any], group: str, plan_path: str) -> dict[str, Any]:
    groups = {g["name"]: g for g in plan.get("collocation_groups", [])}
    if group not in groups:
        raise CollocationError(
            f"collocation group {group!r} is not in plan {plan_path}", hint=f"groups in the plan: {sorted(groups)}"
        )
    header: dict[str, Any] = groups[group]
    return header


def _schedule_from_json(plan_path: str, group: str, *, component: str, rank: int, node: int | None) -> GroupSchedule:
    plan = _load_plan(plan_path)
    header = _group_header(plan, group, plan_path)
    components = {c["name"]: c for c in plan.get("components", [])}
    if node is None:
        mine = [p for p in components.get(component, {}).get("processes", []) if p["rank"] == rank]
        if not mine:
            raise CollocationError(f"{component} rank {rank} is not in plan {plan_path}")
        node = int(mine[0]["cluster_node_rank"])
    procs_of = {
        name: [p for p in components.get(name, {}).get("processes", []) if p["cluster_node_rank"] == node]
        for name in header["components"]
    }
    return _schedule(group, header, procs_of)


def _schedule(group: str, header: Mapping[str, Any], procs_of: Mapping[str, list[dict[str, Any]]]) -> GroupSchedule:
    members = {name: tuple(sorted(p["rank"] for p in procs)) for name, procs in procs_of.items() if procs}
    devices = {
        name: tuple(sorted({d for p in procs for d in p["visible_accelerators"]}, key=_device_order))
        for name, procs in procs_of.items()
        if procs
    }
    phases = tuple(tuple(p) for p in header.get("phases") or [[c] for c in header["components"]])
    return GroupSchedule(name=group, phases=phases, members=members, devices=devices)


def _device_order(d: str) -> tuple[int, str]:
    return (int(d), d) if d.isdigit() else (1 << 30, d)
