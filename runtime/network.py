"""A node group's network for collectives and Ray (`network:`), resolved on the node.

NCCL, Gloo and Ray each pick an interface on their own; on a node with a management Ethernet, a
fast fabric and IPoIB the wrong pick is a hang or slow collectives. The plan names the interface
(one name, names to try in order, or an IPv4 subnet); here the node finds which of its interfaces
that is and its IPv4 address there, and the shim exports it under every name the frameworks read.

Pure parts (checking a value, choosing among the node's interfaces) are shared with the login-node
side so both agree; reading the node's interfaces (`socket.if_nameindex` + the SIOCGIFADDR ioctl)
is the only I/O. Stdlib only, imported only when a plan has a network.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

MAX_NAME = 15  # IFNAMSIZ - 1
SIOCGIFADDR = 0x8915

# Everything the frameworks read to pick their interface: NCCL, Gloo, TensorPipe (torch RPC), NVSHMEM's
# bootstrap, RLinf (RLINF_COMM_NET_DEVICES) and verl (RAY_NETWORK_INTERFACE). All set to the one name.
INTERFACE_VARIABLES = (
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "TP_SOCKET_IFNAME",
    "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME",
    "RLINF_COMM_NET_DEVICES",
    "RAY_NETWORK_INTERFACE",
)
ADDRESS_VARIABLE = "HPCPLACE_NETWORK_ADDR"  # this node's own IPv4 address on the interface
NETWORK_VARIABLES = (*INTERFACE_VARIABLES, ADDRESS_VARIABLE)


def interface_name_problem(name: str) -> str | None:
    """Why `name` cannot be a Linux interface name (None: it can)."""
    if not name:
        return "an interface name cannot be empty"
    if len(name) > MAX_NAME:
        return f"interface names are at most {MAX_NAME} characters (this one has {len(name)})"
    if name in (".", ".."):
        return "'.' and '..' are not interface names"
    bad = sorted({c for c in name if c in "/:" or c.isspace() or not c.isprintable()})
    if bad:
        return f"an interface name cannot contain {', '.join(repr(c) for c in bad)}"
    return None


def _ipv4(text: str) -> int | None:
    """a.b.c.d (four decimal parts 0-255, no leading zeros) as an int; None if it is not one."""
    parts = text.split(".")
    if len(parts) != 4 or not all(p.isascii() and p.isdigit() and (p == "0" or p[0] != "0") for p in parts):
        return None
    values = [int(p) for p in parts]
    if any(v > 255 for v in values):
        return None
    return (values[0] << 24) | (values[1] << 16) | (values[2] << 8) | values[3]


def _dotted(value: int) -> str:
    return ".".join(str((value >> shift) & 255) for shift in (24, 16, 8, 0))


def parse_subnet(text: str) -> tuple[int, int] | str:
    """`10.99.0.0/16` -> (network as int, prefix length), or why it is not an IPv4 CIDR subnet."""
    address, slash, prefix = text.partition("/")
    if not slash:
        return f"{text!r} has no '/PREFIX' (a subnet is written like 10.99.0.0/16)"
    if ":" in address:
        return f"{text!r} is IPv6: only IPv4 subnets can be resolved (the address NCCL and Ray bind)"
    base = _ipv4(address)
    if base is None:
        return f"{address!r} is not an IPv4 address (four numbers 0-255, like 10.99.0.0)"
    if (
        not (prefix.isascii() and prefix.isdigit())
        or not 0 <= int(prefix) <= 32
        or (prefix != "0" and prefix[0] == "0")
    ):
        return f"the prefix length {prefix!r} is not a number from 0 to 32"
    bits = int(prefix)
    mask = (0xFFFFFFFF << (32 - bits)) & 0xFFFFFFFF
    if base & ~mask & 0xFFFFFFFF:
        return f"{text!r} has host bits set: the subnet is {_dotted(base & mask)}/{bits}"
    return base, bits


def in_subnet(address: str, subnet: tuple[int, int]) -> bool:
    value = _ipv4(address)
    base, bits = subnet
    mask = (0xFFFFFFFF << (32 - bits)) & 0xFFFFFFFF
    return value is not None and value & mask == base


def describe(network: Mapping[str, Any]) -> str:
    """The plan's network record in the config's words: `fab0`, `ib0, fab0` or `subnet 10.99.0.0/16`."""
    if network.get("subnet"):
        return f"subnet {network['subnet']}"
    return ", ".join(str(n) for n in network.get("interfaces") or ())


def choose(network: Mapping[str, Any], interfaces: Mapping[str, str | None]) -> tuple[str, str] | str:
    """(interface, its IPv4 address) the plan's `network` names among this node's `interfaces`
    (name -> IPv4 address or None), or why none fits: the first listed name that exists and has an
    address, or the first interface (in the node's order) whose address is in the subnet."""
    subnet_text = network.get("subnet")
    if subnet_text:
        subnet = parse_subnet(str(subnet_text))
        if isinstance(subnet, str):
            return subnet
        for name, address in interfaces.items():
            if address is not None and in_subnet(address, subnet):
                return name, address
        return f"no interface has an address in {subnet_text} on this node (it has {have(interfaces)})"
    wanted = [str(n) for n in network.get("interfaces") or ()]
    for name in wanted:
        address = interfaces.get(name)
        if address is not None:
            return name, address
    without = [n for n in wanted if n in interfaces]
    if len(wanted) == 1:
        problem = "has no IPv4 address" if without else "does not exist"
        return f"interface {wanted[0]} {problem} on this node (it has {have(interfaces)})"
    none = f"; {', '.join(without)} without one" if without else ""
    return (
        f"none of the interfaces {', '.join(wanted)} has an IPv4 address on this node{none} (it has {have(interfaces)})"
    )


def have(interfaces: Mapping[str, str | None]) -> str:
    """`eth0 10.77.0.11, fab0 10.99.0.11, ib0 (no IPv4)` (loopback left out)."""
    parts = [f"{n} {a}" if a else f"{n} (no IPv4)" for n, a in interfaces.items() if n != "lo"]
    return ", ".join(parts) or "no interface but lo"


def environment(name: str, address: str) -> dict[str, str]:
    """What the shim exports for the chosen interface."""
    return {**dict.fromkeys(INTERFACE_VARIABLES, name), ADDRESS_VARIABLE: address}


def group_network(plan: Mapping[str, Any], het_group: object) -> dict[str, Any] | None:
    """The `network` record of node group (het group) `het_group`, or None when it has none."""
    groups = plan.get("node_groups") or []
    if isinstance(het_group, int) and isinstance(groups, list) and 0 <= het_group < len(groups):
        network = groups[het_group].get("network")
        return network if isinstance(network, dict) else None
    return None


# ----------------------------------------------------------------------------------------------
# the node's interfaces (the only I/O)
# ----------------------------------------------------------------------------------------------


def interface_address(name: str) -> str | None:
    """The IPv4 address of interface `name` (SIOCGIFADDR), or None (none, down without one, gone)."""
    import fcntl
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = name.encode()[:MAX_NAME].ljust(40, b"\0")
        try:
            reply = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, request)
        except OSError:
            return None
    return socket.inet_ntoa(reply[20:24])  # struct ifreq: name[16], sockaddr_in{family, port, addr}


def local_interfaces() -> dict[str, str | None]:
    """Every interface of this node (its network namespace), in index order -> its IPv4 address."""
    import socket

    return {name: interface_address(name) for _index, name in sorted(socket.if_nameindex())}


def resolve(network: Mapping[str, Any], interfaces: Mapping[str, str | None] | None = None) -> tuple[str, str]:
    """(interface, address) on this node, or a ShimError naming what was wanted and what there is."""
    from hpcplace.runtime.errors import ShimError

    found = choose(network, local_interfaces() if interfaces is None else interfaces)
    if isinstance(found, str):
        raise ShimError(
            f"network {describe(network)}: {found}",
            hint="name the interface this node group's nodes have (node groups' `network:`), "
            "or list several to try in order, or give its subnet (10.99.0.0/16)",
        )
    return found


def names(values: Sequence[str]) -> list[str]:
    """The names of a `network:` list that cannot be interface names, with why (empty: all fine)."""
    return [f"{v!r}: {p}" for v in values if (p := interface_name_problem(v))]


# ----------------------------------------------------------------------------------------------
# MASTER_ADDR: rank 0 publishes its address on the interface through the run directory
# ----------------------------------------------------------------------------------------------


def address_file(port_file: str) -> str:
    """Beside the component's MASTER_PORT file (runtime/master_port.py): `<that>.addr`."""
    return f"{port_file}.addr"


def publish_address(path: str, address: str) -> None:
    """Rank 0: its address on the interface, written atomically (every node sees the run dir)."""
    import os

    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(address)
    os.replace(tmp, path)


def read_address(path: str) -> str | None:
    """The published address, or None when there is none (yet)."""
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
    except (OSError, ValueError):
        return None
    return text if _ipv4(text) is not None else None


def wait_address(path: str, timeout_s: float, poll_s: float = 0.02) -> str:
    """Other ranks: rank 0's address (waits for it, bounded)."""
    import time

    from hpcplace.runtime.errors import ShimError

    deadline = time.monotonic() + timeout_s
    while (address := read_address(path)) is None:
        if time.monotonic() > deadline:
            raise ShimError(
                f"rank 0 did not publish its network address (MASTER_ADDR) in {path} within {timeout_s:.0f} s",
                hint="rank 0 of this component failed to start (see its log), or the run directory is not "
                "shared between the nodes",
            )
        time.sleep(poll_s)
    return address


# ----------------------------------------------------------------------------------------------
# the preflight's reachability check: every node connects to the head's address on the interface
# ----------------------------------------------------------------------------------------------

HEAD_FAILED = "FAILED"


def head_file(run_dir: str, job_id: str, restart: str) -> str:
    """Where the head's preflight publishes `ADDRESS PORT` it listens on (or FAILED: it has none)."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in f"{job_id}.{restart or 0}")
    return f"{run_dir}/.hpcplace-ports/network-head.{safe}"


def listen_for_peers(path: str, address: str, peers: int, wait_s: float) -> Callable[[], int]:
    """Head: listen on `address` (an ephemeral port), publish it, accept up to `peers` connections in a
    thread until `wait_s` has passed; returns a function that waits for that and says how many came."""
    import socket
    import threading
    import time

    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind((address, 0))
    server.listen(max(peers, 1))
    publish_address(path, f"{address} {server.getsockname()[1]}")
    came = [0]
    deadline = time.monotonic() + wait_s

    def accept() -> None:
        try:
            while came[0] < peers and (left := deadline - time.monotonic()) > 0:
                server.settimeout(left)
                try:
                    conn, _ = server.accept()
                except OSError:
                    break
                conn.close()
                came[0] += 1
        finally:
            server.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()

    def finish() -> int:
        thread.join(wait_s + 1)
        return came[0]

    return finish


def reach_head(path: str, own_address: str, wait_s: float, connect_s: float = 5.0) -> tuple[str | None, str]:
    """Other nodes: (problem or None, the head's address) after a TCP connect from this node's address
    on the interface to the one the head's preflight listens on."""
    import socket
    import time

    deadline = time.monotonic() + wait_s
    text = ""
    while True:
        try:
            with open(path, encoding="ascii") as f:
                text = f.read().strip()
        except OSError:
            text = ""
        if text or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if not text:
        return f"the head (cluster node rank 0) published no address on its network within {wait_s:.0f} s", "?"
    if text.startswith(HEAD_FAILED):
        return "the head (cluster node rank 0) has no address on its network: see its FAILED line", "?"
    head, _, port = text.partition(" ")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(connect_s)
        try:
            sock.bind((own_address, 0))
            sock.connect((head, int(port)))
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
            return f"the head's address {head} (cluster node rank 0) does not answer from {own_address}: {why}", head
    return None, head
