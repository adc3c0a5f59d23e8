"""Services of a job at run time: each replica's port and address, readiness, and the addresses handed to
everyone else. Stdlib only (the shim and the batch script's waiter run it).

A replica's shim chooses its port (the service's fixed one, or one derived from the job id that nothing on
the node listens on), writes RUN/services/<name>/<replica>.json {"host", "port", "node", "pid"} atomically
and execs the service with `{port}` in its command replaced and HPCPLACE_SERVICE_PORT/_DIR set. The waiter
(`python -m hpcplace.runtime.services wait PLAN NAME...`, in the batch script before the components that
use them) polls every replica's file, then its readiness (a TCP connect, an HTTP GET returning 2xx, or a
file in the replica's directory), each bounded by the service's timeout; a replica whose step died stops
the wait at once. Then `{NAME.addr}`-style references in commands are replaced from the same files.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hpcplace.runtime.master_port import port_is_free

# `{name.field}` or `{name.N.field}`; never `${...}` (Hydra's and the shell's interpolation)
REFERENCE_RE = re.compile(r"(?<!\$)\{([A-Za-z][A-Za-z0-9_-]*)\.(?:(\d+)\.)?([a-z]+)\}")
FIELDS = ("addr", "host", "port", "url")
OWN_PORT = "{port}"
DIR_NAME = "services"
PORT_BASE, PORT_SPAN = 20000, 8192  # derived ports: below the usual ephemeral range (32768-)
POLL_S = 0.05
START_MARGIN_S = 120.0  # a waiter's own bound beyond a service's timeout: its replica may start that late


def env_prefix(name: str) -> str:
    """HPCPLACE_SERVICE_<NAME>_: the service's variables (letters upper-cased, '-' as '_')."""
    return "HPCPLACE_SERVICE_" + name.upper().replace("-", "_") + "_"


@dataclass(frozen=True)
class Reference:
    """`{name.field}` or `{name.N.field}` in a command or an env value."""

    text: str
    service: str
    replica: int | None
    field: str


def references(text: str) -> list[Reference]:
    return [
        Reference(m.group(0), m.group(1), int(m.group(2)) if m.group(2) is not None else None, m.group(3))
        for m in REFERENCE_RE.finditer(text)
    ]


def reference_problem(ref: Reference, replicas: Mapping[str, int]) -> str | None:
    """Why `ref` cannot be resolved (None: it can). `{x.y}` naming no service is someone else's braces
    unless `y` is one of the fields."""
    count = replicas.get(ref.service)
    if count is None:
        if ref.field not in FIELDS:
            return None
        return f"{ref.text} names no service (services of this job: {', '.join(sorted(replicas)) or 'none'})"
    if ref.field not in FIELDS:
        return f"{ref.text}: unknown field {ref.field!r} (one of: {', '.join(FIELDS)})"
    if ref.replica is not None and ref.replica >= count:
        return f"{ref.text}: service {ref.service!r} has {count} replica(s), numbered from 0"
    return None


Addresses = Mapping[str, Sequence[tuple[str, int]]]


def substitute(text: str, addresses: Addresses) -> str:
    """Every reference to a service in `addresses` replaced by its replicas' (host, port)."""

    def one(m: re.Match[str]) -> str:
        replicas = addresses.get(m.group(1))
        if replicas is None or m.group(3) not in FIELDS:
            return m.group(0)
        chosen = replicas if m.group(2) is None else [replicas[int(m.group(2))]]
        return ",".join(_field(host, port, m.group(3)) for host, port in chosen)

    return REFERENCE_RE.sub(one, text)


def _field(host: str, port: int, name: str) -> str:
    return {"addr": f"{host}:{port}", "host": host, "port": str(port), "url": f"http://{host}:{port}"}[name]


def service_environment(addresses: Addresses) -> dict[str, str]:
    """HPCPLACE_SERVICE_<NAME>_ADDRS (every replica, comma-separated) and _<N>_ADDR for every service."""
    env: dict[str, str] = {}
    for name, replicas in addresses.items():
        prefix = env_prefix(name)
        env[prefix + "ADDRS"] = ",".join(f"{h}:{p}" for h, p in replicas)
        for i, (h, p) in enumerate(replicas):
            env[f"{prefix}{i}_ADDR"] = f"{h}:{p}"
    return env


# ------------------------------------------------------------------------------------ the replica's side


def replica_dir(run_dir: str, name: str, replica: int) -> str:
    return os.path.join(run_dir, DIR_NAME, name, str(replica))


def address_file(run_dir: str, name: str, replica: int) -> str:
    return os.path.join(run_dir, DIR_NAME, name, f"{replica}.json")


def derived_port(job_id: str, service_index: int, replica: int) -> int:
    """The first candidate of an `auto` port: spread by job id, service and replica (two replicas of one
    service on one node, or two jobs on one node, start apart; the free-port check settles the rest)."""
    digits = int("".join(c for c in job_id if c.isdigit()) or "0")
    return PORT_BASE + (digits * 97 + service_index * 31 + replica * 7) % PORT_SPAN


def choose_port(
    fixed: int | None, job_id: str, service_index: int, replica: int, is_free: Callable[[int], bool]
) -> int:
    """The replica's port: the fixed one as given (the service fails to bind if it is taken), else the first
    derived candidate nothing on this node listens on."""
    if fixed is not None:
        return fixed
    start = derived_port(job_id, service_index, replica)
    for k in range(256):
        port = PORT_BASE + (start - PORT_BASE + k * 13) % PORT_SPAN
        if is_free(port):
            return port
    raise OSError(f"no free port among 256 candidates from {start} on this node")


def publish(run_dir: str, name: str, replica: int, host: str, port: int) -> str:
    """Make the replica's directory and write its address file atomically; returns the file's path."""
    os.makedirs(replica_dir(run_dir, name, replica), exist_ok=True)
    path = address_file(run_dir, name, replica)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        # the step's id: the batch script stops the service through it (scancel --signal=TERM JOB.STEP)
        json.dump({"host": host, "port": port, "pid": os.getpid(), "step": os.environ.get("SLURM_STEP_ID", "")}, f)
    os.replace(tmp, path)
    return path


def read_address(run_dir: str, name: str, replica: int) -> tuple[str, int] | None:
    try:
        with open(address_file(run_dir, name, replica), encoding="utf-8") as f:
            data = json.load(f)
        return str(data["host"]), int(data["port"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def read_addresses(run_dir: str, services: Mapping[str, int]) -> dict[str, list[tuple[str, int]]]:
    """Every published address of the services {name: replicas}; a service with a replica not published
    yet is left out."""
    out: dict[str, list[tuple[str, int]]] = {}
    for name, count in services.items():
        found = [read_address(run_dir, name, i) for i in range(count)]
        if all(a is not None for a in found):
            out[name] = [a for a in found if a is not None]
    return out


# ------------------------------------------------------------------------------------------- readiness


def ready_file(run_dir: str, name: str, replica: int) -> str:
    return os.path.join(run_dir, DIR_NAME, name, f"{replica}.ready")


def failed_file(run_dir: str, name: str, replica: int) -> str:
    return os.path.join(run_dir, DIR_NAME, name, f"{replica}.failed")


def probe(kind: str, path: str | None, host: str, port: int, directory: str, timeout: float = 2.0) -> str | None:
    """None when the replica is ready, else what was seen."""
    if kind == "file":
        target = os.path.join(directory, path or "")
        return None if os.path.exists(target) else f"no file {target} yet"
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            if kind == "tcp":
                return None
            sock.settimeout(timeout)
            sock.sendall(f"GET {path} HTTP/1.0\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
            status = sock.recv(64).split(b"\r\n", 1)[0].decode("latin-1", "replace")
    except OSError as exc:
        return f"{host}:{port}: {exc.strerror or exc}"
    parts = status.split()
    if len(parts) >= 2 and parts[1].isdigit() and 200 <= int(parts[1]) < 300:
        return None
    return f"GET {path} on {host}:{port} answered {status!r}"


def what_is_awaited(kind: str, path: str | None) -> str:
    return {"tcp": "its port to accept connections", "http": f"GET {path} to return 2xx"}.get(kind, f"the file {path}")


def probe_until(
    run_dir: str,
    name: str,
    replica: int,
    record: Mapping[str, Any],
    host: str,
    port: int,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    alive: Callable[[], bool] = lambda: True,
) -> bool:
    """Probe one replica until it is ready (writes <replica>.ready) or its timeout passes or it ends (writes
    <replica>.failed with why, naming service, replica, host and what was awaited). True when ready."""
    ready = record["ready"]
    kind, path, timeout = ready["kind"], ready.get("path"), float(record["timeout"])
    start = clock()
    seen = ""
    while True:
        seen = probe(kind, path, host, port, replica_dir(run_dir, name, replica)) or ""
        if not seen:
            _write(ready_file(run_dir, name, replica), f"{clock() - start:.3f}\n")
            return True
        waited = what_is_awaited(kind, path)
        if not alive():
            why = f"service {name!r} replica {replica} on {host} ended before it was ready (waited for {waited})"
        elif clock() - start > timeout:
            why = (
                f"service {name!r} replica {replica} on {host} was not ready within its timeout of {timeout:g} s "
                f"(waited for {waited}; last: {seen})"
            )
        else:
            sleep(POLL_S * 4)
            continue
        _write(failed_file(run_dir, name, replica), why + "\n")
        return False


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def services_state(run_dir: str, services: Mapping[str, tuple[int, float]], waited_s: float) -> tuple[bool, str | None]:
    """(every replica of `services` {name: (replicas, timeout)} is ready (its .ready file), why they never
    will be: a replica's .failed (its probe's reason), or nothing within its timeout plus a margin after
    `waited_s` of waiting (its step never started it); None while that is not known yet)."""
    ready = True
    for name, (count, timeout) in services.items():
        for i in range(count):
            if os.path.exists(ready_file(run_dir, name, i)):
                continue
            ready = False
            try:
                with open(failed_file(run_dir, name, i), encoding="utf-8") as f:
                    return False, f.read().strip()
            except FileNotFoundError:
                pass
            if waited_s > timeout + START_MARGIN_S:
                started = read_address(run_dir, name, i) is not None
                return False, (
                    f"service {name!r} replica {i} was not ready within {timeout + START_MARGIN_S:g} s: "
                    + ("its probe gave no answer" if started else "it never started (no address published)")
                )
    return ready, None


def wait_services(
    run_dir: str,
    services: Mapping[str, tuple[int, float]],
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str | None:
    """Wait until every replica of `services` is ready: None then, else why not (services_state)."""
    start = clock()
    while True:
        ready, why = services_state(run_dir, services, clock() - start)
        if ready or why is not None:
            return why
        sleep(POLL_S)


# ------------------------------------------------------------------------------------------ a task's start


class ServiceError(Exception):
    """A task cannot start for a reason of the job's services (message + hint)."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class TaskServices:
    """What a task of a job with services does before its program starts (runtime/shim.py)."""

    waits_for: dict[str, tuple[int, float]]  # services to be ready first: {name: (replicas, timeout)}
    counts: dict[str, int]  # every service's replicas (for the addresses)
    # a replica: what it publishes, and its probe's record
    replica: tuple[str, int, int] | None = None  # (service, replica, port)
    record: Mapping[str, Any] | None = None


def task_services(
    components: Sequence[Mapping[str, Any]],
    component: Mapping[str, Any],
    rank: int,
    command: Sequence[str],
    changes: Mapping[str, str | None],
    *,
    run_dir: str,
    job_id: str,
    waits_for_all: bool = False,
    attached: bool = False,
    is_free: Callable[[int], bool] = port_is_free,
) -> tuple[tuple[str, ...], dict[str, str | None], TaskServices | None]:
    """(command, environment changes, what to do before the start) of a task in a job with services; the
    command and changes unchanged and None in a job without. A service's replica gets its port (`{port}`,
    HPCPLACE_SERVICE_PORT), name, replica and directory; a task waits for the services its command or env
    names (a service also for its `after`; the Ray driver, `waits_for_all`, for every one). `attached`: a
    command run into a running replica (`hpcplace exec`) gets the port that replica published."""
    records = {str(c["name"]): c for c in components if c.get("service")}
    if not records:
        return tuple(command), dict(changes), None
    counts = {n: int(c["world_size"]) for n, c in records.items()}
    out = dict(changes)
    words = list(command)
    record = component.get("service")
    replica = None
    named: set[str] = set()
    if isinstance(record, Mapping):
        name = str(component["name"])
        fixed = record.get("port")
        published = read_address(run_dir, name, rank) if attached else None
        try:
            port = (
                published[1]
                if published is not None
                else choose_port(
                    fixed if isinstance(fixed, int) else None, job_id, list(records).index(name), rank, is_free
                )
            )
        except OSError as exc:
            raise ServiceError(
                f"service {name!r} replica {rank}: {exc}", hint="run with slurm: {exclusive: true}"
            ) from None
        replica = (name, rank, port)
        out.update(
            HPCPLACE_SERVICE_NAME=name,
            HPCPLACE_SERVICE_REPLICA=str(rank),
            HPCPLACE_SERVICE_PORT=str(port),
            HPCPLACE_SERVICE_DIR=replica_dir(run_dir, name, rank),
        )
        words = [w.replace(OWN_PORT, str(port)) for w in words]
        named |= set(record.get("after") or ())
    named |= {r.service for w in [*words, *(v for v in out.values() if v)] for r in references(w)}
    if waits_for_all:
        named |= set(records)
    waits = {n: (counts[n], float(records[n]["service"]["timeout"])) for n in sorted(named & set(records))}
    return tuple(words), out, TaskServices(waits, counts, replica, record if isinstance(record, Mapping) else None)


def with_addresses(
    run_dir: str, counts: Mapping[str, int], command: Sequence[str], changes: Mapping[str, str | None]
) -> tuple[tuple[str, ...], dict[str, str | None]]:
    """The command and changes with `{NAME.field}` replaced and HPCPLACE_SERVICE_* added, from the
    addresses published so far (a task waited for the ones it names)."""
    addresses = read_addresses(run_dir, counts)
    out = {k: (substitute(v, addresses) if v else v) for k, v in changes.items()}
    out.update(service_environment(addresses))
    return tuple(substitute(w, addresses) for w in command), out


def start_probe(run_dir: str, name: str, replica: int, record: Mapping[str, Any], host: str, port: int) -> None:
    """Fork a detached prober for this replica (the shim then execs the service): it writes the replica's
    .ready or .failed file and exits; it ends with the step at the latest."""
    parent = os.getpid()
    if os.fork() != 0:
        return
    try:
        os.setsid()
        if os.fork() != 0:
            os._exit(0)

        def alive() -> bool:
            try:
                os.kill(parent, 0)  # the shim's pid is the service's after exec
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
            return True

        probe_until(run_dir, name, replica, record, host, port, alive=alive)
    finally:
        os._exit(0)
