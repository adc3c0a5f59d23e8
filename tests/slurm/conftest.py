"""Shared pieces of the Slurm tests: plans from native YAML, hostile strings, the real test cluster."""

from __future__ import annotations

import fcntl
import os
import subprocess
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from hpcplace import submit
from hpcplace.plan import Plan
from hpcplace.planner import plan_from_file

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SCRIPTS = REPO / "scripts" / "slurm-cluster"
CLUSTER_DIR = Path(os.environ.get("HPCPLACE_SLURM_DIR", "/tmp/hpcplace-slurm"))
REPORTER = Path(__file__).with_name("reporter.py")
# One test cluster per machine: test sessions from several checkouts take turns through this lock,
# and a cluster booted by another checkout's scripts is rebooted with this checkout's.
CLUSTER_LOCK = Path(os.environ.get("HPCPLACE_CLUSTER_LOCK", "/tmp/hpcplace-cluster.lock"))
CLUSTER_OWNER = CLUSTER_LOCK.with_suffix(".owner")
_cluster_lock_fd: int | None = None

# Values a user may type that a shell would act on (submitit's hostile fixture, and more).
HOSTILE = (
    "a 0",
    'a"=0"',
    "a'; echo foo",
    "a\n0",
    "$(touch {canary})",
    "`touch {canary}`",
    "x; touch {canary} #",
    "back\\slash \\n\\\\",
    "tab\there",
    "--option=--",
    "-",
    "'",
    '"',
    "${PATH}",
    "!x",
    "* ?",
    "&& touch {canary} || true",
    "\x1b]0;title\x07\x1b[2J\x1b[31mlooks fine",  # terminal escapes: never raw in job.sbatch
    "\u202eevil\u202c",  # a bidi override
)


def hostile_values(canary: Path) -> list[str]:
    return [h.replace("{canary}", str(canary)) for h in HOSTILE]


def plan_yaml(tmp_path: Path, text: str, name: str = "config.yaml") -> Plan:
    """Plan a native-format config with the real planner."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return plan_from_file(path)


# ------------------------------------------------------------------------------------------------
# the real test cluster

def cluster_nodes() -> list[str]:
    """The node names of the test cluster (from its slurm.conf)."""
    conf = CLUSTER_DIR / "etc" / "slurm.conf"
    if not conf.exists():
        return []
    return [line.split()[0].split("=", 1)[1] for line in conf.read_text().splitlines()
            if line.startswith("NodeName=")]


def node_root(node: str) -> Path | None:
    """The root directory as NODE's processes see it (each node has its own /dev/shm and /tmp in
    its own mount namespace): /proc/<its slurmd>/root. None when its slurmd is not running."""
    try:
        pid = int((CLUSTER_DIR / "run" / f"slurmd-{node}.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    root = Path(f"/proc/{pid}/root")
    return root if root.exists() else None


@dataclass(frozen=True)
class JobShm:
    """A job's /dev/shm/hpcplace-<jobid> on every node of the cluster (and on this host)."""

    job_id: str

    def paths(self) -> list[Path]:
        name = f"dev/shm/hpcplace-{self.job_id}"
        roots = [Path("/")] + [r for r in map(node_root, cluster_nodes()) if r is not None]
        return [root / name for root in roots]

    def left(self) -> list[str]:
        """What is left of it: each leftover path with its content."""
        out = []
        for path in self.paths():
            if os.path.lexists(path):
                inside = sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.is_dir() else []
                out.append(f"{path}: {inside}")
        return out

    def exists(self) -> bool:
        return bool(self.left())

@dataclass
class LiveCluster:
    env: dict[str, str]
    mode: str  # ConstrainDevices: "yes" | "no"

    def run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout, check=False)


def _required() -> bool:
    return os.environ.get("CI") == "true" or os.environ.get("HPCPLACE_REQUIRE_SLURM") == "true"


def _status() -> str | None:
    res = subprocess.run([str(CLUSTER_SCRIPTS / "status.sh")], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        return None
    for word in res.stdout.split():
        if word.startswith("constrain_devices="):
            return word.split("=", 1)[1]
    return "unknown"


def _boot(mode: str) -> None:
    res = subprocess.run([str(CLUSTER_SCRIPTS / "up.sh"), "--constrain-devices", mode], capture_output=True,
                         text=True, check=False, timeout=300)
    if res.returncode == 77:
        _unavailable(f"the Slurm test cluster needs root: {res.stderr.strip()}")
    if res.returncode != 0:
        pytest.fail(f"scripts/slurm-cluster/up.sh failed (rc {res.returncode}):\n{res.stderr[-4000:]}")


def _unavailable(reason: str) -> None:
    if _required():
        pytest.fail(f"{reason} (CI=true / HPCPLACE_REQUIRE_SLURM=true: the real-Slurm tier must run)")
    pytest.skip(reason)


def _hold_cluster_lock() -> None:
    """Hold the machine's cluster lock until this test process exits (waits for another session)."""
    global _cluster_lock_fd
    if _cluster_lock_fd is None:
        fd = os.open(CLUSTER_LOCK, os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        _cluster_lock_fd = fd


def ensure_cluster(mode: str) -> LiveCluster:
    """The cluster up in ConstrainDevices=`mode` (boots or re-boots it as needed)."""
    if os.geteuid() != 0:
        _unavailable("the Slurm test cluster needs root (scripts/slurm-cluster/up.sh)")
    if not (CLUSTER_SCRIPTS / "up.sh").exists():
        _unavailable("scripts/slurm-cluster/up.sh is missing")
    if subprocess.run(["sh", "-c", "command -v slurmctld sbatch"], capture_output=True, check=False).returncode:
        install = subprocess.run([str(CLUSTER_SCRIPTS / "install.sh")], capture_output=True, text=True, check=False)
        if install.returncode != 0:
            _unavailable(f"cannot install Slurm: {install.stderr.strip()[-500:]}")
    _hold_cluster_lock()
    owner = CLUSTER_OWNER.read_text() if CLUSTER_OWNER.exists() else ""
    if _status() != mode or owner != str(REPO):
        _boot(mode)
        CLUSTER_OWNER.write_text(str(REPO))
    env = dict(os.environ)
    env["SLURM_CONF"] = str(CLUSTER_DIR / "etc" / "slurm.conf")
    os.environ["SLURM_CONF"] = env["SLURM_CONF"]
    # The jobs' preflight finds each node's fake GPUs here (runtime/preflight.py; sbatch passes it on).
    env["HPCPLACE_GPU_DEVICE_DIR"] = os.environ["HPCPLACE_GPU_DEVICE_DIR"] = str(CLUSTER_DIR / "dev" / "{node}")
    return LiveCluster(env, mode)


@pytest.fixture(scope="session")
def slurm_cluster() -> LiveCluster:
    """The cluster as it is (booting it with ConstrainDevices=no when down)."""
    mode = _status()
    return ensure_cluster(mode if mode in ("yes", "no") else "no")


def wait_done(job_id: str, timeout: float = 240) -> submit.JobStatus:
    """Poll the real cluster until the job has ended; its final status."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = submit.job_status(job_id)
        if status.done:
            return status
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} not done after {timeout} s: {submit.format_status(submit.job_status(job_id))}")
