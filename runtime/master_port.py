"""MASTER_PORT that no other job on the node holds: rank 0 checks, everyone else learns it.

The derived port (`ranks.master_port`, from the job id) is only a first candidate: two jobs whose
ids map to the same port could share a node (`exclusive: false`), and their processes would then
connect to each other's rendezvous. So the component's rank 0 (on MASTER_ADDR's node) takes the
first candidate nothing listens on, and publishes it in the run directory (which every node sees:
plan.json lives there); the other ranks wait for that file instead of assuming. Every candidate lies
below the node's ephemeral port range (/proc/sys/net/ipv4/ip_local_port_range), where any process's
outgoing connection may take a port between the check and the bind. Stdlib only.
"""

from __future__ import annotations

import os
import time

from hpcplace.runtime.errors import ShimError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

CANDIDATES = 64  # derived port, then every PORT_STRIDE-th port after it (wrapping in the span)
DIR_NAME = ".hpcplace-ports"
WAIT_S = 600.0
EPHEMERAL_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
EPHEMERAL_DEFAULT = (32768, 60999)  # Linux's default, where the file cannot be read


def parse_port_range(text: str) -> tuple[int, int] | None:
    """`32768\t60999` (ip_local_port_range) -> (32768, 60999); None when it is not two ports."""
    parts = text.split()
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    low, high = int(parts[0]), int(parts[1])
    return (low, high) if 0 < low <= high < 65536 else None


def ephemeral_range(path: str = EPHEMERAL_FILE) -> tuple[int, int]:
    """This node's ephemeral port range (the kernel's, per network namespace)."""
    try:
        with open(path, encoding="ascii") as f:
            parsed = parse_port_range(f.read())
    except OSError:
        parsed = None
    return parsed or EPHEMERAL_DEFAULT


def port_file(run_dir: str, job_id: str, component: str, restart: str = "") -> str:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in f"{job_id}.{restart or 0}.{component}")
    return os.path.join(run_dir, DIR_NAME, safe)


def port_is_free(port: int) -> bool:
    """Nothing listens on `port` here (TIME_WAIT leftovers do not count: SO_REUSEADDR)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def candidates(derived: int, base: int, span: int, stride: int, limit: int | None = None) -> list[int]:
    """The derived port, then every stride-th port after it, wrapping in [base, base + span); with
    `limit` (the ephemeral range's first port) the span shrinks to whole strides below it, so each
    candidate keeps its component's offset in the stride."""
    if limit is not None:
        span = min(span, (limit - base) // stride * stride)
        if span <= 0:
            raise ShimError(
                f"no MASTER_PORT below this node's ephemeral port range (it starts at {limit}; the ports start at {base})",
                hint=f"raise the range's first port in {EPHEMERAL_FILE} (sysctl net.ipv4.ip_local_port_range)",
            )
    return [base + (derived - base + k * stride) % span for k in range(CANDIDATES)]


def choose_and_publish(path: str, ports: list[int], is_free: Callable[[int], bool] = port_is_free) -> int:
    """Rank 0: the first free candidate, written atomically to `path`."""
    for port in ports:
        if is_free(port):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="ascii") as f:
                f.write(str(port))
            os.replace(tmp, path)
            return port
    raise ShimError(
        f"no free MASTER_PORT among {len(ports)} candidates ({ports[0]}, ...) on this node",
        hint="other jobs on this node hold them; run with `slurm: {exclusive: true}`",
    )


def wait_published(path: str, timeout_s: float = WAIT_S, poll_s: float = 0.02) -> int:
    """Other ranks: the port rank 0 published (waits for it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with open(path, encoding="ascii") as f:
                text = f.read().strip()
            if text.isdigit():
                return int(text)
        except FileNotFoundError:
            pass
        if time.monotonic() > deadline:
            raise ShimError(
                f"rank 0 did not publish MASTER_PORT in {path} within {timeout_s:.0f} s",
                hint="rank 0 of this component failed to start, or the run directory is not shared between the nodes",
            )
        time.sleep(poll_s)
