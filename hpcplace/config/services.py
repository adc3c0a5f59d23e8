"""Services in the job: reward servers, judges, sandbox pools started beside the framework, found by name.

The `services:` block, accepted beside every input format (hpcplace's own blocks):

    services:
      rm:
        node_group: rtx4090          # where its replicas run (a node group of the config)
        command: [python, -m, openrlhf.cli.serve_rm, --port, "{port}"]
        replicas: 1                  # default 1
        gpus: 4                      # GPUs per replica (default 0: none; then on a node group without GPUs)
        placement: "0-3:0"           # optional: RLinf's placement syntax instead of replicas x gpus
        port: auto                   # default: a port per job (runtime/services.py); or 1-65535
        ready: {http: /health}       # default tcp (the port accepts connections); or {file: ready}
        timeout: 600                 # seconds to become ready, else the job fails naming the replica
        optional: false              # true: its end does not fail the job
        after: [judge]               # services that must be ready before this one starts
        env: {HF_HOME: /data/hf}
        cpus_per_replica: 4

Every replica is one process of a component named like the service (a steps-mode step of its own): placed,
given GPUs, rank environment and container by the plan like any component. Its address reaches the
driver and the other components as `{rm.0.addr}` (host:port of replica 0), `{rm.addr}` (every replica,
comma-separated), `.host`, `.port` and `.url` (http://host:port) in their commands, and as
HPCPLACE_SERVICE_RM_ADDRS / HPCPLACE_SERVICE_RM_0_ADDR in their environment. `{port}` in a service's own
command is its port.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hpcplace.config import limits
from hpcplace.config.yaml_source import View, yaml_words
from hpcplace.errors import SourceLocation, SpecError
from hpcplace.runtime.services import FIELDS, reference_problem, references

KEYS = frozenset(
    {"node_group", "command", "replicas", "gpus", "placement", "port", "ready", "timeout", "optional", "after"}
    | {"env", "cpus_per_replica"}
)
DEFAULT_TIMEOUT_S = 600.0
MAX_REPLICAS = 4096
NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class ReadyCheck:
    """When a replica is ready: its port accepts a TCP connection, an HTTP GET of `path` on it returns 2xx,
    or the file `path` (relative to the replica's HPCPLACE_SERVICE_DIR) exists."""

    kind: str = "tcp"
    path: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, **({"path": self.path} if self.path is not None else {})}


@dataclass(frozen=True)
class ServiceSpec:
    """One service of the job (its replicas are the processes of the component of the same name)."""

    name: str
    node_group: str
    command: tuple[str, ...]
    replicas: int = 1
    gpus: int = 0
    placement: str | None = None
    port: int | None = None  # None: chosen per job at run time
    ready: ReadyCheck = ReadyCheck()
    timeout_s: float = DEFAULT_TIMEOUT_S
    optional: bool = False
    after: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cpus_per_replica: int = 1
    location: SourceLocation | None = field(default=None, compare=False)

    def rank_map(self, first_gpu: int = 0) -> str:
        """The RLinf placement string of its replicas on its node group, its GPUs from the group's GPU
        `first_gpu` on (the first its node group's other processes leave free)."""
        if self.placement is not None:
            return self.placement
        if self.gpus == 0:
            return f"0:0-{self.replicas - 1}" if self.replicas > 1 else "0"
        last = first_gpu + self.replicas * self.gpus - 1
        gpus = f"{first_gpu}-{last}" if last > first_gpu else str(first_gpu)
        return f"{gpus}:0-{self.replicas - 1}" if self.replicas > 1 else gpus if last == first_gpu else f"{gpus}:0"

    @classmethod
    def from_record(
        cls, name: str, node_group: str, command: tuple[str, ...], record: Mapping[str, Any]
    ) -> ServiceSpec:
        """plan.json's "service" record of a component back into its spec (what the job needs of it)."""
        ready = record["ready"]
        return cls(
            name=name,
            node_group=node_group,
            command=command,
            port=record["port"],
            ready=ReadyCheck(ready["kind"], ready.get("path")),
            timeout_s=float(record["timeout"]),
            optional=bool(record["optional"]),
            after=tuple(record.get("after", ())),
        )

    def to_json(self) -> dict[str, object]:
        return {
            "port": self.port,
            "ready": self.ready.to_json(),
            "timeout": self.timeout_s,
            "optional": self.optional,
            "after": list(self.after),
        }


def parse_services(view: View | None) -> tuple[ServiceSpec, ...]:
    """The `services:` block (absent or null: none)."""
    if view is None or view.value is None:
        return ()
    if not isinstance(view.value, dict):
        raise view.error("services: expected a mapping of service names to their settings")
    services = tuple(_service(child, key, view) for key, child in view.items())
    _check_after(services, view)
    return services


def _service(view: View, name: Any, block: View) -> ServiceSpec:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise view.key_error(
            f"invalid service name {name!r}",
            hint="a service name starts with a letter, then letters, digits, '_' or '-' (it is used as {NAME.addr})",
        )
    if not isinstance(view.value, dict):
        raise view.error(f"service {name!r}: expected a mapping (node_group, command, ...)")
    view.check_keys(KEYS)
    group = view.require("node_group", "the node group its replicas run on").str()
    command = tuple(yaml_words(view.require("command", "the service's command"), "command"))
    if not command:
        raise view.require("command").error(f"service {name!r}: the command is empty")
    replicas = _count(view, "replicas", 1, 1, MAX_REPLICAS)
    gpus = _count(view, "gpus", 0, 0, limits.MAX_GPUS_PER_NODE)
    placement = None
    if (v := view.get("placement")) is not None and v.value is not None:
        placement = str(v.value) if isinstance(v.value, (str, int)) and not isinstance(v.value, bool) else None
        if placement is None or not placement.strip():
            raise v.error(f"service {name!r}: placement must be a placement string", hint='e.g. "0-3:0-1"')
        if view.get("replicas") is not None or view.get("gpus") is not None:
            raise v.error(
                f"service {name!r}: placement gives the replicas and their GPUs; replicas and gpus cannot be "
                "given beside it",
                hint="keep placement alone, or replicas and gpus alone",
            )
    return ServiceSpec(
        name=name,
        node_group=group,
        command=command,
        replicas=replicas,
        gpus=gpus,
        placement=placement,
        port=_port(view.get("port"), name),
        ready=_ready(view.get("ready"), name),
        timeout_s=_timeout(view.get("timeout"), name),
        optional=v.bool() if (v := view.get("optional")) is not None else False,
        after=_after(view.get("after"), name),
        env=v.str_map() if (v := view.get("env")) is not None else {},
        cpus_per_replica=_count(view, "cpus_per_replica", 1, 1, limits.MAX_CPUS_PER_NODE),
        location=view.location(),
    )


def _count(view: View, key: str, default: int, minimum: int, cap: int) -> int:
    child = view.get(key)
    if child is None or child.value is None:
        return default
    return limits.check_cap(child.int(minimum=minimum), cap, key, child.location())


def _port(view: View | None, name: str) -> int | None:
    if view is None or view.value is None or view.value == "auto":
        return None
    value = view.value
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise view.error(
            f"service {name!r}: port {value!r} is not a TCP port",
            hint="give a port from 1 to 65535, or `auto` (a port chosen per job, so jobs sharing a node never collide)",
        )
    return value


def _ready(view: View | None, name: str) -> ReadyCheck:
    if view is None or view.value is None or view.value == "tcp":
        return ReadyCheck()
    if not isinstance(view.value, dict) or len(view.value) != 1:
        raise view.error(
            f"service {name!r}: invalid ready condition {view.value!r}",
            hint="one of: tcp, {http: /path}, {file: name}",
        )
    kind, child = next(iter(view.items()))
    if kind not in ("http", "file"):
        raise child.key_error(f"service {name!r}: unknown ready condition {kind!r}", hint="one of: tcp, http, file")
    path = child.str()
    if kind == "http" and (not path.startswith("/") or any(c.isspace() for c in path) or "://" in path):
        raise child.error(
            f"service {name!r}: ready.http {path!r} is not a URL path",
            hint="give the path on the service's own port, starting with '/', e.g. /health",
        )
    if kind == "file" and (not path or path.startswith("/") or ".." in path.split("/")):
        raise child.error(
            f"service {name!r}: ready.file {path!r} must be a relative path inside the replica's directory",
            hint="e.g. ready.flag: the service writes $HPCPLACE_SERVICE_DIR/ready.flag when it is ready",
        )
    return ReadyCheck(kind, path)


def _timeout(view: View | None, name: str) -> float:
    if view is None or view.value is None:
        return DEFAULT_TIMEOUT_S
    value = view.value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 7 * 86400:
        raise view.error(
            f"service {name!r}: timeout {value!r} is not a number of seconds", hint="e.g. timeout: 600 (up to a week)"
        )
    return float(value)


def _after(view: View | None, name: str) -> tuple[str, ...]:
    if view is None or view.value is None:
        return ()
    values = [view.value] if isinstance(view.value, str) else view.value
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise view.error(f"service {name!r}: after must be a service name or a list of them")
    return tuple(values)


def _check_after(services: tuple[ServiceSpec, ...], block: View) -> None:
    names = {s.name for s in services}
    for s in services:
        for other in s.after:
            if other not in names:
                raise (
                    block.require(s.name)
                    .require("after")
                    .error(
                        f"service {s.name!r} waits for {other!r}, which is no service of this job",
                        hint=f"services: {', '.join(sorted(names))}",
                    )
                )
    waits = {s.name: s.after for s in services}
    _check_cycles(waits, block)


def _check_cycles(waits: Mapping[str, tuple[str, ...]], block: View) -> None:
    """Depth-first: any back edge is a cycle (named in order)."""
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in waits[node]:
            if state.get(nxt) == 1:
                cycle = " -> ".join([*trail[trail.index(nxt) :], nxt])
                raise (
                    block.require(nxt)
                    .require("after")
                    .error(
                        f"services wait on each other in a cycle: {cycle}",
                        hint="one of them must start without waiting for the others",
                    )
                )
            if nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for node in waits:
        if node not in state:
            visit(node, [node])


# ------------------------------------------------------------------------------------------ references


def check_references(words: Iterable[str], services: Mapping[str, ServiceSpec], where: str) -> None:
    """Plan time: every `{NAME.field}` in `words` names a service, a field and a replica it has (else a
    SpecError naming `where`)."""
    replicas = {s.name: s.replicas for s in services.values()}
    for word in words:
        for ref in references(word):
            problem = reference_problem(ref, replicas)
            if problem is not None:
                raise SpecError(
                    f"{where}: {problem}",
                    hint="write {NAME.addr} (every replica), {NAME.0.addr} (replica 0); fields: " + ", ".join(FIELDS),
                )
