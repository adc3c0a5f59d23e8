"""One Ray node of the Ray launch mode, run by srun on every node of the job (stdlib only).

Finds its node in plan.json like the shim does (its host name in the per-component node lists),
then runs `ray start --block` with the plan's facts: RLINF_NODE_RANK (set before Ray starts, so
every Ray worker inherits it), CUDA_VISIBLE_DEVICES and --num-gpus, --num-cpus, the resources
`ng_<label>` and `hpcplace_node_<rank>` (node_resources) and hpcplace.* labels, the node group's env
and launch.env, and the steering hook first on PYTHONPATH when the plan has steer rules
(runtime/steer_hook.py). The head (cluster node rank 0) publishes `host:port` in
<run dir>/ray/head.json; workers wait for that file (bounded by launch.join_timeout), then join.

Every port a node's Ray opens (GCS, node manager, object manager, dashboard and its agent, metrics,
runtime-env agent, client server, workers) lies in one block of RAY_BLOCK ports, below the node's
ephemeral range, chosen per node: the job id picks the first block tried, and a block where anything
listens on one of its fixed ports (another job's Ray) is skipped. Each node records its ports and dirs
in <run dir>/ray/nodes/n<rank>.json (`hpcplace status` shows them). The submitting shell's RAY_ADDRESS
never reaches `ray start`, and RAY_TMPDIR points at the job's temp dir (anything that falls back to
Ray's default temp dir stays in the job's).

Ray's temp/session dir lives in the job's node-local directory (/dev/shm/hpcplace-<job>, which the
job's guard removes even after a SIGKILL; short whatever the run directory: Ray's sockets go there, and
an AF_UNIX path holds 107 bytes), its spill dir in ${TMPDIR:-/tmp}/hpcplace-ray-<job>-n<rank>.
On SIGTERM/SIGUSR1/SIGINT/SIGHUP (job end, cancel, time limit) it stops every Ray process it
started (SIGTERM, then SIGKILL to what is left of its process tree), removes both dirs and exits 0;
if Ray stops on its own it names this node and its group, and exits 1 (the job fails).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time

from hpcplace.runtime.devices import JOB_RELATIVE, choose_devices
from hpcplace.runtime.errors import ShimError
from hpcplace.runtime.ip_order import ORDER_DIR, exchange, in_ip_order, ordered_by_ip, own_address, write_overlay
from hpcplace.runtime.master_port import EPHEMERAL_FILE, ephemeral_range
from hpcplace.runtime.network import environment as network_environment
from hpcplace.runtime.network import group_network
from hpcplace.runtime.network import resolve as resolve_network
from hpcplace.runtime.plan_index import PlanIndex
from hpcplace.runtime.shm_dir import job_stopping
from hpcplace.runtime.slurm_env import expand_hostlist, fabric_unit, locate_node, read_snapshot
from hpcplace.runtime.steer_hook import ENV as STEER_ENV
from hpcplace.runtime.steer_hook import NODE_RESOURCE

STEER_DIR = os.path.join("ray", "steer")  # in the run directory: the hook as sitecustomize.py, the table, the log
STEER_TABLE = "steer.json"
AUTH_TOKEN = os.path.join("ray", "auth_token")  # in the run directory: the job's own Ray token (render writes it)
# Ray's token authentication (Ray 2.52+): how each of its processes decides whether to send and ask for a token
AUTH_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any, TypeVar

    from hpcplace.runtime.slurm_env import SlurmSnapshot

    _T = TypeVar("_T")

PROG = "hpcplace-ray"
LEAKED = ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "SLURM_JOB_GPUS")
# A node's Ray ports: one block of RAY_BLOCK ports from RAY_PORT_BASE up to the node's ephemeral range
# (32768 by default; any outgoing connection may take a port there between our check and Ray's bind),
# above Ray's default worker ports (10002..19999). Fixed ports first, then the worker ports.
RAY_PORT_BASE, RAY_BLOCK, RAY_WORKER_OFFSET = 20000, 256, 16
RAY_FIXED = {  # name -> offset in the block
    "gcs": 0,
    "node_manager": 1,
    "object_manager": 2,
    "dashboard": 3,
    "dashboard_agent_grpc": 4,
    "dashboard_agent_http": 5,
    "metrics_export": 6,
    "runtime_env_agent": 7,
    "client_server": 8,
}
HEAD_ONLY = ("gcs", "dashboard", "client_server")
# Ray's longest socket path under its temp dir: the session dir (date and pid) and sockets/plasma_store.
SOCKET_TAIL = "/session_2025-01-01_00-00-00_000000_4194304/sockets/plasma_store.99"
AF_UNIX_MAX = 107
STOP_GRACE_S = 2.0  # Slurm's KillWait may be short: the SIGKILL comes that long after SIGTERM
_LABEL_OK = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def say(text: str) -> None:
    sys.stderr.write(f"{PROG}: {text}\n")
    sys.stderr.flush()


# ------------------------------------------------------------------------------------------------
# pure parts


def port_blocks(job_id: str, below: int = 32768) -> list[int]:
    """The first port of each block of RAY_BLOCK ports under `below` (the ephemeral range's first port),
    starting with the job's own (so two jobs rarely try the same block); [] when none fits."""
    base = RAY_PORT_BASE if below - RAY_PORT_BASE >= 4 * RAY_BLOCK else 1024  # a low ephemeral range
    count = max((below - base) // RAY_BLOCK, 0)
    jid = int(job_id) if job_id.isdigit() else sum(job_id.encode())
    return [base + ((jid + k) % count) * RAY_BLOCK for k in range(count)]


def port_candidates(job_id: str) -> list[int]:
    """GCS port candidates for a job (the first port of each of its blocks)."""
    return port_blocks(job_id)


def block_ports(start: int, *, head: bool, client: bool) -> dict[str, int]:
    """The ports one node's Ray uses in the block at `start`: its fixed ports (the GCS, dashboard and
    client server on the head only: Ray's dashboard process starts even with --include-dashboard=false,
    on 8265 unless told) and its worker range."""
    wanted = {"gcs": head, "dashboard": head, "client_server": head and client}
    ports = {name: start + off for name, off in RAY_FIXED.items() if wanted.get(name, True)}
    ports["min_worker"] = start + RAY_WORKER_OFFSET
    ports["max_worker"] = start + RAY_BLOCK - 1
    return ports


def choose_ports(
    job_id: str, below: int, is_free: Callable[[int], bool], *, head: bool, client: bool
) -> dict[str, int]:
    """This node's Ray ports: the first of the job's blocks whose fixed ports are all free here (a
    block where another job's Ray runs has its node manager's port taken). Worker ports are not checked:
    Ray's raylet skips a worker port that is in use."""
    blocks = port_blocks(job_id, below)
    for start in blocks:
        ports = block_ports(start, head=head, client=client)
        if all(is_free(p) for name, p in ports.items() if name in RAY_FIXED):
            return ports
    if not blocks:
        raise ShimError(
            f"no room for the job's Ray ports below this node's ephemeral port range (it starts at {below})",
            hint=f"raise the range's first port in {EPHEMERAL_FILE} (sysctl net.ipv4.ip_local_port_range)",
        )
    raise ShimError(
        f"every block of {RAY_BLOCK} ports for Ray below {below} has a port in use on this node "
        f"({len(blocks)} blocks from {blocks[0]})",
        hint="other jobs' Ray clusters hold them; run with `slurm: {exclusive: true}`",
    )


def ray_temp_dir(job_id: str, rank: int) -> str:
    """Ray's temp dir on this node: in the job's node-local dir, and short enough that Ray's longest
    socket path fits AF_UNIX (107 bytes) whatever the run directory (verl #1120)."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in job_id)
    path = f"/dev/shm/hpcplace-{safe}/ray-n{rank}"
    if len((path + SOCKET_TAIL).encode()) > AF_UNIX_MAX:
        raise ShimError(
            f"Ray's socket paths under {path} would pass the {AF_UNIX_MAX}-byte AF_UNIX limit",
            hint="the job id is unusually long; report it",
        )
    return path


def label_ok(value: str) -> bool:
    return 0 < len(value) <= 63 and value[0].isalnum() and value[-1].isalnum() and set(value) <= _LABEL_OK


def group_node_ranks(group: Mapping[str, Any]) -> list[int]:
    """The cluster node rank of each node of a plan.json node group, in het-component order: its
    `node_ranks` when listed (RLinf node_ranks that are not one block, e.g. `2,0`), else
    first_node_rank, first_node_rank + 1, ..."""
    listed = group.get("node_ranks")
    if listed:
        return [int(r) for r in listed]
    return [int(group["first_node_rank"]) + j for j in range(int(group["num_nodes"]))]


def node_facts(
    header: dict[str, Any], g: int, j: int, cpus_needed: int = 0, services: tuple[frozenset[str], int] | None = None
) -> dict[str, Any]:
    """This node's facts from plan.json's header: rank, group, GPUs, CPUs (the group's cpus_per_node,
    else what the plan's processes on the node need: hpcplace.ray.ray_cluster.ray_nodes), env. `services`:
    the GPUs and CPUs the job's services hold on this node (service_share), which the raylet leaves them."""
    groups = header["node_groups"]
    group = groups[g]
    rank = group_node_ranks(group)[j]
    gpus = int(group["gpus_per_node"][j]) if group["gpus_per_node"] else 0
    cpus = group.get("cpus_per_node") or cpus_needed
    taken_gpus, taken_cpus = services or (frozenset(), 0)
    return {
        "rank": rank,
        "het_group": g,
        "index": j,
        "label": group["label"],
        "partition": group["partition"],
        "gpu_type": group.get("gpu_type") if gpus else None,
        "gpus": tuple(str(i) for i in range(gpus) if str(i) not in taken_gpus),
        "num_cpus": max(int(cpus) - taken_cpus, 0) if taken_cpus else max(int(cpus), 1),
        "env": {
            **(group.get("env") or {}),
            **((group.get("container") or {}).get("env") or {}),
            **_at(group.get("node_env"), j, {}),
            **framework_node_env((header.get("source") or {}).get("format"), rank),
        },
        "python": _at(group.get("python_interpreter"), j, None),
        "framework": (header.get("source") or {}).get("format"),
    }


def service_share(index: PlanIndex, g: int, j: int) -> tuple[frozenset[str], int]:
    """The GPUs and CPUs the job's services (their own steps: runtime/services.py) hold on node j of het
    group g: the raylet there leaves them out of what it advertises, so Ray never places work on them."""
    gpus: set[str] = set()
    cpus = 0
    for ci, comp in enumerate(index.components):
        if not comp.get("service") or g not in index.het_groups(ci):
            continue
        per_node = index.processes_per_node(ci, g)
        for local in range(per_node[j] if j < len(per_node) else 0):
            process = index.process_at(ci, g, j, local)
            if process is not None:
                gpus.update(str(v) for v in process["visible_accelerators"])
                cpus += int(comp.get("cpus_per_process") or 1)
    return frozenset(gpus), cpus


def group_cpus_needed(index: PlanIndex, g: int) -> int:
    """The CPUs the plan's processes (not the services': their own steps) need on the busiest node of het
    group g: every raylet of a group advertises the same CPUs (hpcplace.ray.ray_cluster.ray_nodes says why)."""
    need = [0] * len(group_node_ranks(index.plan["node_groups"][g]))
    for ci, comp in enumerate(index.components):  # one read of each component's node table
        if comp.get("service"):
            continue
        cpus = int(comp.get("cpus_per_process") or 1)
        for j, count in enumerate(index.processes_per_node(ci, g) if g in index.het_groups(ci) else ()):
            need[j] += cpus * count
    return max(need, default=0)


def framework_node_env(source_format: str | None, rank: int) -> dict[str, Any]:
    """What a framework reads from its raylets' environment besides RLINF_NODE_RANK: ROLL's
    ResourceManager numbers its nodes by NODE_RANK (GPU g of device_mapping is on node g // gpus per
    node; unset everywhere, it falls back to Ray's node order), so a ROLL plan sets it to the node's
    cluster node rank. The same function serves hpcplace.ray.ray_cluster (the script's summary)."""
    return {"NODE_RANK": str(rank)} if source_format == "roll" else {}


def node_resources(node: Mapping[str, Any]) -> dict[str, int]:
    """The custom resources a raylet advertises: its node group's `ng_<label>`, its own node's
    `hpcplace_node_<rank>` (what the steering hook pins a framework's requests to: runtime/steer_hook.py;
    a user's own Ray code may ask for it too), and NeMo-RL's `topo_rank` = rank + 1 (NeMo-RL orders the
    bundles of its unified placement groups by it, else by Ray's random node ids: virtual_cluster.py). A node
    of a group with a topology has `topo_rank` too (its rank follows the fabric: hp_fabric), and of a block
    topology `nvlink_domain_<block>` (NeMo-RL's key, as its ray.sub registers it: virtual_cluster.py keeps a
    segment inside one domain)."""
    rank = int(node["rank"])
    out = {f"ng_{node['label']}": 1, f"{NODE_RESOURCE}{rank}": 1}
    kind, unit = node.get("fabric") or (None, None)
    if node.get("framework") == "nemo_rl" or kind:
        out["topo_rank"] = rank + 1
    if kind == "block" and unit:
        out[f"nvlink_domain_{unit}"] = 1
    return out


def steer_environment(env: Mapping[str, str], run_dir: str) -> dict[str, str]:
    """PYTHONPATH and HPCPLACE_STEER for the steering hook (its sitecustomize first on the path), when the
    run directory has one (a plan with steer rules: hpcplace.slurm.render writes it); else {}."""
    folder = os.path.join(run_dir, STEER_DIR)
    table = os.path.join(folder, STEER_TABLE)
    if not os.path.exists(table):
        return {}
    rest = [p for p in (env.get("PYTHONPATH") or "").split(os.pathsep) if p and p != folder]
    return {"PYTHONPATH": os.pathsep.join([folder, *rest]), STEER_ENV: table}


def auth_environment(launch_env: Mapping[str, str], run_dir: str) -> dict[str, str]:
    """One Ray authentication for every Ray process of the job (raylets, driver): `ray start --head` turns
    token authentication on by itself when it finds ~/.ray/auth_token (which any local `ray.init()` of Ray
    2.60 writes), while workers and drivers given an address never do, so left to Ray a job whose user ever
    ran Ray locally cannot join its own head. launch.env decides when it sets RAY_AUTH_MODE ({}: its own
    values apply); else the job's own token (RUN/ray/auth_token, readable by its user only), or Ray's
    default of no token for a run directory rendered without one. The submitting shell's RAY_AUTH_* never
    apply (raylet_env and driver_env drop them)."""
    if "RAY_AUTH_MODE" in launch_env:
        return {}
    token = os.path.join(run_dir, AUTH_TOKEN)
    if not os.path.isfile(token):
        return {"RAY_AUTH_MODE": "disabled"}
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": token}


def _at(per_node: object, j: int, default: Any) -> Any:
    """Entry j of a per-node list from plan.json (absent or short: the default)."""
    return per_node[j] if isinstance(per_node, list) and 0 <= j < len(per_node) and per_node[j] else default


def ray_start_argv(
    python: str,
    node: dict[str, Any],
    *,
    head: bool,
    port: int,
    address: str | None,
    temp_dir: str,
    spill_dir: str,
    extra: Sequence[str] = (),
    dashboard_port: int | None = None,
    ports: Mapping[str, int] | None = None,
) -> list[str]:
    """`python -m ray.scripts.scripts start --block ...` for one node (Ray's CLI from the job's Python).
    `ports` (block_ports) pins every other port Ray opens; without it the OS picks them."""
    labels = {
        "hpcplace.group": node["label"],
        "hpcplace.partition": node["partition"] or "",  # None: the default
        "hpcplace.gpu_type": node["gpu_type"] or "",
        "hpcplace.node_rank": str(node["rank"]),
    }
    argv = [
        python,
        "-m",
        "ray.scripts.scripts",
        "start",
        "--block",
        "--disable-usage-stats",
        f"--num-cpus={node['num_cpus']}",
        f"--num-gpus={len(node['gpus'])}",
        "--resources=" + json.dumps(node_resources(node), separators=(",", ":")),
        "--labels=" + ",".join(f"{k}={v}" for k, v in labels.items() if label_ok(v)),
        f"--temp-dir={temp_dir}",
        f"--object-spilling-directory={spill_dir}",
    ]
    if ports is None:
        argv += ["--dashboard-agent-listen-port=0", "--min-worker-port=0", "--max-worker-port=0"]
    else:
        argv += [f"--{flag}={ports[name]}" for name, flag in _PORT_FLAGS.items() if name in ports]
    if head:
        # The Ray client server starts only where ray[client] is installed (block_ports' client).
        argv += ["--head", f"--port={port}"]
        if dashboard_port is None:
            argv.append("--include-dashboard=false")
        else:  # launch.dashboard: on every interface of the head, reached through an ssh port-forward
            argv += ["--include-dashboard=true", "--dashboard-host=0.0.0.0"]
        if dashboard_port is not None and (ports is None or "dashboard" not in ports):
            argv.append(f"--dashboard-port={dashboard_port}")
    else:
        argv += [f"--address={address}"]
    return argv + list(extra)


_PORT_FLAGS = {  # block_ports' name -> `ray start` option (the GCS: ray_start_argv's own)
    "dashboard": "dashboard-port",
    "node_manager": "node-manager-port",
    "object_manager": "object-manager-port",
    "dashboard_agent_grpc": "dashboard-agent-grpc-port",
    "dashboard_agent_http": "dashboard-agent-listen-port",
    "metrics_export": "metrics-export-port",
    "runtime_env_agent": "runtime-env-agent-port",
    "client_server": "ray-client-server-port",
    "min_worker": "min-worker-port",
    "max_worker": "max-worker-port",
}


def raylet_env(
    environ: Mapping[str, str],
    node: dict[str, Any],
    launch_env: Mapping[str, str],
    visible: str,
    temp_dir: str = "",
    run_dir: str = "",
) -> dict[str, Any]:
    """The raylet's environment: the task's, leaked GPU variables replaced, the node's facts set; no
    RAY_ADDRESS or RAY_AUTH_* from the submitting shell (the job's own authentication: auth_environment),
    and RAY_TMPDIR the job's temp dir (given one)."""
    env = {k: v for k, v in environ.items() if k not in LEAKED and k != "RAY_ADDRESS" and k not in AUTH_VARIABLES}
    env.update(node["env"])
    env.update(auth_environment(launch_env, run_dir))
    env.update(launch_env)
    env["RLINF_NODE_RANK"] = str(node["rank"])
    env["CUDA_VISIBLE_DEVICES"] = visible
    if visible:
        env["GPU_DEVICE_ORDINAL"] = visible
        # verl's Worker refuses ROCR_VISIBLE_DEVICES beside the CUDA_VISIBLE_DEVICES Ray gives each actor
        # ("Please don't set ROCR_VISIBLE_DEVICES when HIP/CUDA_VISIBLE_DEVICES is set", worker.py)
        if node.get("framework") != "verl":
            env["ROCR_VISIBLE_DEVICES"] = visible
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    # `ray start --block` drains a node for 30 s on SIGTERM (for Ray Serve); the job is ending.
    env.setdefault("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", "0")
    env["HPCPLACE_RAY_NODE_RANK"] = str(node["rank"])
    if temp_dir:
        env["RAY_TMPDIR"] = temp_dir
    return env


# ------------------------------------------------------------------------------------------------
# I/O


def has_ray_client(python: str) -> bool:
    """Whether `ray start --head` starts the Ray client server in this Python: it does where grpc
    imports (ray[client]), on port 10001 unless told, and refuses a port where it does not."""
    if python == sys.executable:
        import importlib.util

        return importlib.util.find_spec("grpc") is not None
    try:
        done = subprocess.run([python, "-c", "import grpc"], capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def wait_for(what: str, check: Callable[[], _T | None], timeout: float, interval: float = 0.1) -> _T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise ShimError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def read_head(path: str, job_id: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("job_id") == job_id else None


def write_text(path: str, text: str) -> None:
    """Write a file whole (a reader never sees half of it)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def write_json(path: str, data: dict[str, Any]) -> None:
    write_text(path, json.dumps(data))


def record_error(run_dir: str, text: str) -> None:
    """Append a line to <run dir>/logs/ray-errors.txt (the batch script prints it at the end)."""
    try:
        with open(os.path.join(run_dir, "logs", "ray-errors.txt"), "a", encoding="utf-8") as f:
            f.write(text.replace("\n", " ") + "\n")
    except OSError:
        pass


def exited_processes(temp_dir: str) -> list[str]:
    """Which of Ray's own processes died, as `ray start --block` records it in its session's
    logs/ray_process_exit.log (`raylet [exit code=-9 (signal 9)]`); [] where it wrote none (older Ray).
    Read before the node-local session dir is removed."""
    path = os.path.join(temp_dir, "session_latest", "logs", "ray_process_exit.log")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(65536)
    except OSError:
        return []
    return [line.strip() for line in text.splitlines() if line[:1] in (" ", "\t") and line.strip()]


def stopped_on_its_own(where: str, rc: int, dead: Sequence[str], host: str) -> str:
    """The error line of a node whose `ray start --block` ended by itself: which Ray process died, and
    where Ray printed the tail of its log."""
    if not dead:
        return f"{where}: Ray stopped on its own (ray start exited with code {rc}); see logs/ray.{host}.out"
    return (
        f"{where}: Ray's {'; '.join(dead)} died, so ray start stopped (exit code {rc}); the end of its "
        f"log is in logs/ray.{host}.out"
    )


def descendants(root: int) -> list[int]:
    """Every live process under `root` (from /proc), deepest last."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, ()):
            out.append(child)
            todo.append(child)
    return out


def stop_tree(proc: subprocess.Popen[bytes], grace: float = STOP_GRACE_S) -> None:
    """SIGTERM to `ray start --block` (it stops the Ray processes it started), then SIGKILL to every
    process left under it or in its session (Ray workers)."""
    tree = descendants(proc.pid)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    left = [p for p in tree + descendants(proc.pid) if pid_alive(p)]
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def pid_alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def stop_driver(pid: int, grace: float = 10.0) -> None:
    """SIGTERM to the driver, SIGKILL once `grace` seconds pass (the framework watchers' stop)."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 0.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and pid_alive(pid):
            time.sleep(0.2)


def ip_position(
    header: dict[str, Any],
    g: int,
    j: int,
    snapshot: SlurmSnapshot,
    run_dir: str,
    address: str | None,
    launch: Mapping[str, Any],
) -> tuple[int, str | None]:
    """This node's index in its group and the address its Ray must take: for a verl or slime group of
    interchangeable nodes, its place in the framework's IP order among the group's nodes (runtime/ip_order.py),
    and its address (`address` on a `network:`, else the one routing to the job's first node); else (j, None)."""
    key = ordered_by_ip(header, g)
    if key is None:
        return j, None
    ip = address or own_address([h for group in snapshot.groups for h in expand_hostlist(group.nodelist)])
    if ip is None:
        raise ShimError(
            f"{snapshot.node_name}: no route to another node of the job gives this node's address, which "
            f"{(header.get('source') or {}).get('format')} orders its ranks by",
            hint="give the node group a `network:` (the interface the nodes reach each other on)",
        )
    count = int(header["node_groups"][g]["num_nodes"])
    attempt = f"{snapshot.job_id}.{os.environ.get('SLURM_RESTART_COUNT') or 0}"
    timeout = float(launch.get("join_timeout") or 300)
    records = exchange(run_dir, attempt, g, j, count, {"address": ip, "host": snapshot.node_name}, timeout)
    if records is None:
        raise ShimError(
            f"the nodes of het group {g} did not all publish their addresses within {timeout:g} s "
            f"({os.path.join(run_dir, ORDER_DIR)})",
            hint="see logs/ray.<host>.out of the group's other nodes",
        )
    order = in_ip_order([r["address"] for r in records], key)
    write_overlay(os.path.join(run_dir, "logs"), g, [records[k]["host"] for k in order])
    new = order.index(j)
    if new != j:
        say(f"{snapshot.node_name}: node {new} of het group {g} in IP order ({ip}; Slurm's order: node {j})")
    return new, ip


class _Stop(Exception):
    pass


def _on_signal(signum: int, frame: object) -> None:
    raise _Stop(signal.Signals(signum).name)


def parse_args(argv: Sequence[str]) -> tuple[str, str | None] | None:
    """`--plan P [--chdir D]` (the shim's own flags are accepted and ignored) -> (P, D); None: said why."""
    plan_path = chdir = None
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--plan" and args:
            plan_path = args.pop(0)
        elif a == "--chdir" and args:
            chdir = args.pop(0)
        elif a in ("--verbose", "--no-verify"):
            pass
        else:
            say(f"error: unexpected argument {a!r}")
            return None
    if plan_path is None:
        say("error: missing --plan")
        return None
    return plan_path, chdir


def _write_node_log(run_dir: str, node: str) -> None:
    """This node's output from here on in logs/ray.<node>.out, named by SLURMD_NODENAME (the name
    logs/nodes.txt holds) and written by this process itself: srun's `%N` is the hostname before
    Slurm 25.11 and the NodeName after (runtime/task_log.py). What came before is in logs/ray.srun.out."""
    from hpcplace.runtime.task_log import fill, redirect_output

    path = fill(os.path.join(run_dir, "logs", "ray.{node}.out"), "node", node)
    why = redirect_output(path) if path else f"no log file for node {node!r}"
    if why:
        sys.stderr.write(f"hpcplace-ray: {node}: warning: {why}\n")


def main(argv: Sequence[str]) -> int:
    parsed = parse_args(argv)
    if parsed is None:
        return 2
    plan_path, chdir = parsed
    run_dir = os.path.dirname(os.path.abspath(plan_path))
    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    where = "this node"
    proc = None
    dirs: list[str] = []
    try:
        snapshot = read_snapshot(os.environ)
        with PlanIndex(plan_path) as index:
            header = index.plan
            g, j = locate_node(snapshot, range(len(header["node_groups"])))
            needed = group_cpus_needed(index, g)
            held = service_share(index, g, j)  # by Slurm's node j: the services' steps are placed by it
        launch = header.get("launch") or {}
        host = snapshot.node_name
        _write_node_log(run_dir, host)
        job_id = snapshot.job_id
        # `network:`: the raylet binds, and the head advertises, this node's address on that interface
        # (runtime/network.py); its workers and the driver get the interface variables NCCL/Gloo read.
        network = group_network(header, g)
        ifname, address = resolve_network(network) if network is not None else (None, host)
        net_args = [f"--node-ip-address={address}"] if ifname else []
        # verl's and slime's ranks follow their nodes' IP order: this node's index is its place in it
        j, ip = ip_position(header, g, j, snapshot, run_dir, address if ifname else None, launch)
        if ip is not None and not ifname:
            net_args = [f"--node-ip-address={ip}"]
        node = node_facts(header, g, j, needed, held)
        node["fabric"] = (
            (header["node_groups"][g].get("topology") or {}).get("kind"),
            fabric_unit(os.environ, g, host),
        )
        where = f"Ray node rank {node['rank']} on {host} (node group {node['label']}, het group {g} node {j})"
        head = node["rank"] == 0
        choice = choose_devices(
            node["gpus"],
            os.environ.get("CUDA_VISIBLE_DEVICES"),
            relative=header.get("gpu_ids") == JOB_RELATIVE,
            step_gpus=os.environ.get("SLURM_STEP_GPUS"),
        )
        temp_dir = ray_temp_dir(job_id, node["rank"])
        spill_dir = os.path.join(os.environ.get("TMPDIR") or "/tmp", f"hpcplace-ray-{job_id}-n{node['rank']}")
        job_dir = os.path.dirname(temp_dir)
        for d in (job_dir, temp_dir, spill_dir):
            try:
                os.mkdir(d, 0o700)  # the job's dir may already exist (the job's guard, another node)
            except FileExistsError:
                pass
            except OSError as exc:
                if job_stopping(run_dir, job_id, os.environ):  # the job's guard removed the job's dir meanwhile
                    raise _Stop("the job's stop (sent before this task started)") from None
                raise ShimError(f"cannot create {d}: {exc.strerror}") from None
            if d != job_dir:
                dirs.append(d)  # removed at the end, whatever fails next
        if job_stopping(run_dir, job_id, os.environ):  # its stop signal came before it ran: start nothing
            raise _Stop("the job's stop (sent before this task started)")
        head_file = os.path.join(run_dir, "ray", "head.json")
        timeout = float(launch.get("join_timeout") or 300)
        extra = shlex.split(os.environ.get("HPCPLACE_RAY_ARGS", ""))
        # The job's Python (the launcher's), where Ray is installed; a node with RLinf's
        # python_interpreter_path runs `ray start` with that one, so its default workers use it.
        python = node.get("python") or sys.executable
        ephemeral = ephemeral_range()
        client = head and has_ray_client(python)
        ports = choose_ports(job_id, ephemeral[0], port_free, head=head, client=client)
        if head:
            port = ports["gcs"]
            dash = ports["dashboard"] if launch.get("dashboard") else None
            argv_ = ray_start_argv(
                python,
                node,
                head=True,
                port=port,
                address=None,
                temp_dir=temp_dir,
                spill_dir=spill_dir,
                extra=net_args + extra,
                dashboard_port=dash,
                ports=ports,
            )
        else:
            info = wait_for(f"the Ray head's address ({head_file})", lambda: read_head(head_file, job_id), timeout)
            port = int(info["port"])
            argv_ = ray_start_argv(
                python,
                node,
                head=False,
                port=port,
                address=f"{info['host']}:{port}",
                temp_dir=temp_dir,
                spill_dir=spill_dir,
                extra=net_args + extra,
                ports=ports,
            )
        env = raylet_env(os.environ, node, launch.get("env") or {}, choice.value, temp_dir, run_dir)
        env.update(steer_environment(env, run_dir))
        if ifname:
            env.update(network_environment(ifname, address))
        record = {
            "job_id": job_id,
            "rank": node["rank"],
            "host": host,
            "ports": ports,
            "ephemeral": list(ephemeral),
            "temp_dir": temp_dir,
            "spill_dir": spill_dir,
            # job-relative GPU ids (slurm.exclusive: false): the node's GPUs this raylet got (`status`)
            **({"gpus": list(choice.physical)} if choice.physical is not None else {}),
        }
        write_json(os.path.join(run_dir, "ray", "nodes", f"n{node['rank']}.json"), record)
        say(
            f"{where}: RLINF_NODE_RANK={node['rank']} CUDA_VISIBLE_DEVICES={choice.value!r} "
            f"({choice.note}); {' '.join(shlex.quote(a) for a in argv_)}"
        )
        if chdir:
            os.chdir(chdir)
        started = time.monotonic()
        proc = subprocess.Popen(argv_, env=env, start_new_session=True)
        if head:

            def gcs_up() -> bool:
                if proc.poll() is not None:
                    raise ShimError(
                        f"ray start exited with code {proc.returncode} before the head was up"
                        + (
                            "; launch.dashboard needs the dashboard's packages (ray[default]) in the "
                            "job's Python: see this node's logs/ray.<host>.out"
                            if dash
                            else ""
                        )
                    )
                with socket.socket() as s:
                    s.settimeout(0.5)
                    return s.connect_ex((address, port)) == 0

            wait_for(f"the Ray head's GCS on {address}:{port}", gcs_up, timeout, 0.05)
            write_json(
                head_file,
                {
                    "job_id": job_id,
                    "host": address,  # the node name, or its address on `network:`
                    "port": port,
                    **({"interface": ifname} if ifname else {}),
                    "ready_s": round(time.monotonic() - started, 3),
                    "time": time.time(),
                    **({"dashboard_port": dash} if dash is not None else {}),
                    "ports": ports,  # every port of the head's Ray (ray/nodes/n<rank>.json: each node's)
                    "temp_dir": temp_dir,
                },
            )
            say(f"head ready at {address}:{port} after {time.monotonic() - started:.2f} s")
        rc = proc.wait()
        text = stopped_on_its_own(where, rc, exited_processes(temp_dir), host)
        say(f"error: {text}")
        record_error(run_dir, text)
        return 1
    except _Stop as stop:
        say(f"{where}: {stop} received: stopping this node's Ray processes")
        return 0
    except ShimError as exc:
        say(f"error: {where}: {exc}")
        record_error(run_dir, f"{where}: {exc}")
        return exc.exit_code or 1
    finally:
        for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        # Remove the dirs first (open files stay usable until closed), in case the SIGKILL comes early.
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
        if proc is not None:
            stop_tree(proc)
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
        if dirs:  # the last one out removes the job's node-local dir (the job's guard does the same)
            try:
                os.rmdir(os.path.dirname(dirs[0]))
            except OSError:
                pass
