"""Shared pieces of the Slurm tests: plans from native YAML, hostile strings, the real test cluster, and
the `hpcplace` command line as a user types it (every real-cluster submission goes through it)."""

from __future__ import annotations

import fcntl
import functools
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
import yaml

from hpcplace.plan.plan import Plan
from hpcplace.plan.planner import plan_from_file

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SCRIPTS = REPO / "scripts" / "slurm-cluster"
# Several test clusters may run at once (scripts/slurm-cluster/_common.sh): HPCPLACE_SLURM_INSTANCE=N boots
# and uses cluster N, with a state dir and a lock of its own (scripts/test-all.sh runs one per release).
CLUSTER_INSTANCE = os.environ.get("HPCPLACE_SLURM_INSTANCE", "0")
_INSTANCE_SUFFIX = "" if CLUSTER_INSTANCE == "0" else f"-{CLUSTER_INSTANCE}"
CLUSTER_DIR = Path(os.environ.get("HPCPLACE_SLURM_DIR", f"/tmp/hpcplace-slurm{_INSTANCE_SUFFIX}"))
# Which Debian release's Slurm the tier runs on (scripts/slurm-cluster/up.sh --slurm): bookworm (22.05,
# this machine's own packages), trixie (24.11) or sid (26.05) in their own root filesystems.
SLURM_RELEASE = os.environ.get("HPCPLACE_SLURM", "bookworm")
REPORTER = Path(__file__).with_name("reporter.py")
# One session per test cluster: test sessions from several checkouts take turns through this lock,
# and a cluster booted by another checkout's scripts is rebooted with this checkout's.
CLUSTER_LOCK = Path(os.environ.get("HPCPLACE_CLUSTER_LOCK", f"/tmp/hpcplace-cluster{_INSTANCE_SUFFIX}.lock"))
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


def config_yaml(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    """Write a config (dedented YAML) to a file, as a user has one."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def plan_yaml(tmp_path: Path, text: str, name: str = "config.yaml") -> Plan:
    """Plan a config with the real planner."""
    return plan_from_file(config_yaml(tmp_path, text, name))


def with_command(config: Path, out_dir: Path, command: Sequence[str]) -> Path:
    """A copy of `config` (same file name, in `out_dir`) whose every component runs `command`: a
    native config's `components.<name>.command`, a foreign one's `hpcplace.components.<name>.command`
    (the block RLinf/ROLL/AReaL configs carry for hpcplace), everything else as it was."""
    plan = plan_from_file(config)
    doc = yaml.safe_load(config.read_text(encoding="utf-8"))
    holder = doc if plan.source_format == "native" else doc.setdefault("hpcplace", {})
    components = holder.get("components") or {}
    for comp in plan.components:
        components[comp.name] = {**(components.get(comp.name) or {}), "command": list(command)}
    holder["components"] = components
    out = out_dir / config.name
    out.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return out


# ------------------------------------------------------------------------------------------------
# the command line, as a user types it

# The console script of the venv the tests run in (what `pip install` put on the user's PATH).
HPCPLACE = Path(sys.executable).parent / "hpcplace"
_JOB_LINE = re.compile(r"^job (\d+) \((.*)\)$", re.M)


def cli(
    *args: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`hpcplace ARGS...`: the real console script in a subprocess (argv list, no shell)."""
    return subprocess.run(
        [str(HPCPLACE), *map(str, args)], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


def submit_cli(
    config: Path | str,
    run_dir: Path,
    *extra: str,
    overrides: Sequence[str] = (),
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> str:
    """`hpcplace submit CONFIG [OVERRIDES...] -o RUN_DIR EXTRA...` (validation on; EXTRA may end in
    `--driver -- CMD...`); the job id from its `job N (dir)` line."""
    res = cli("submit", config, *overrides, "-o", run_dir, *extra, env=env, cwd=cwd)
    assert res.returncode == 0, f"hpcplace submit {config} exited {res.returncode}:\n{res.stdout}{res.stderr}"
    match = _JOB_LINE.search(res.stdout)
    assert match is not None, f"no `job N (dir)` line in hpcplace submit's output:\n{res.stdout}{res.stderr}"
    return match.group(1)


@dataclass(frozen=True)
class RunStatus:
    """`hpcplace status RUN` as printed: the job's state, one line per het component."""

    text: str
    code: int  # the command's exit code (0 COMPLETED or still running; 10 FAILED, 11 CANCELLED, 12 TIMEOUT, 13)

    @property
    def state(self) -> str:
        """The whole job's state: the first line is `job N: STATE (from SOURCE)`."""
        first = self.text.splitlines()[0] if self.text else ""
        return first.split(": ", 1)[1].rsplit(" (from ", 1)[0] if ": " in first else "UNKNOWN"

    @property
    def components(self) -> list[str]:
        return [line for line in self.text.splitlines() if line.startswith("  het ")]

    @property
    def exit_codes(self) -> list[str]:
        """Each het component's exit code (`exit=7:0`), in component order."""
        return [m.group(1) for line in self.components if (m := re.search(r" exit=(\S+)", line))]

    @property
    def done(self) -> bool:
        return self.code != 0 or self.state == "COMPLETED"


def run_status(target: Path | str) -> RunStatus:
    res = cli("status", target)
    if res.returncode not in (0, 10, 11, 12, 13):
        raise AssertionError(f"hpcplace status {target} exited {res.returncode}:\n{res.stdout}{res.stderr}")
    return RunStatus(res.stdout, res.returncode)


T = TypeVar("T")


def wait_for(what: str, check: Callable[[], T], timeout: float = 120) -> T:
    """Poll `check` until it gives a true value, and return that; fail naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def wait_done(target: Path | str, timeout: float = 240) -> RunStatus:
    """`hpcplace status RUN` until the job has ended (as a user would look); its final status."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = run_status(target)
        if status.done:
            return status
        time.sleep(0.5)
    raise AssertionError(f"job {target} not done after {timeout} s:\n{run_status(target).text}")


# ------------------------------------------------------------------------------------------------
# the real test cluster


def cluster_nodes() -> list[str]:
    """The node names of the test cluster (from its slurm.conf)."""
    conf = CLUSTER_DIR / "etc" / "slurm.conf"
    if not conf.exists():
        return []
    return [line.split()[0].split("=", 1)[1] for line in conf.read_text().splitlines() if line.startswith("NodeName=")]


def slurmd_pid(node: str) -> int | None:
    """NODE's slurmd, from its pid file; None when there is none (the process itself may be gone)."""
    try:
        return int((CLUSTER_DIR / "run" / f"slurmd-{node}.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def node_root(node: str) -> Path | None:
    """The root directory as NODE's processes see it (each node has its own /dev/shm and /tmp in
    its own mount namespace): /proc/<its slurmd>/root. None when its slurmd is not running."""
    pid = slurmd_pid(node)
    if pid is None:
        return None
    root = Path(f"/proc/{pid}/root")
    return root if root.exists() else None


def slurmd_crashes() -> tuple[int, list[str]]:
    """The test cluster's slurmd crashes since it booted, one line each (scripts/slurm-cluster/slurmd-keeper
    restarts a crashed slurmd and logs it), with the log's inode: a new boot starts a new log. Nothing in a
    session that has not used the cluster."""
    log = CLUSTER_DIR / "log" / "slurmd-crashes.log"
    if not _USED_CLUSTER:
        return 0, []
    try:
        with log.open(encoding="utf-8") as f:
            return os.fstat(f.fileno()).st_ino, f.read().splitlines()
    except FileNotFoundError:
        return 0, []


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

    def left_after(self, within: float = 15) -> list[str]:
        """What is left once the job's cleanup has had `within` seconds (polls; [] when gone)."""
        deadline = time.monotonic() + within
        while self.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        return self.left()


@dataclass
class LiveCluster:
    env: dict[str, str]
    mode: str  # ConstrainDevices: "yes" | "no"
    version: tuple[int, int, int]  # the Slurm it booted, e.g. (26, 5, 5)

    def run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout, check=False)


def _required() -> bool:
    return os.environ.get("CI") == "true" or os.environ.get("HPCPLACE_REQUIRE_SLURM") == "true"


def _status() -> dict[str, str]:
    """What status.sh says of the running cluster (`constrain_devices`, `slurm`, `version`); {} when down."""
    res = subprocess.run([str(CLUSTER_SCRIPTS / "status.sh")], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        return {}
    return dict(word.split("=", 1) for word in res.stdout.split() if "=" in word)


def booted_version() -> tuple[int, int, int]:
    """The Slurm version the running test cluster booted (up.sh records it): version-specific tests
    read it, so a newer release is tested for what it really prints."""
    text = (CLUSTER_DIR / "version").read_text(encoding="utf-8").strip()
    major, minor, micro = (int(part) for part in re.findall(r"\d+", text)[:3])
    return major, minor, micro


def shared_paths() -> list[str]:
    """What every node must see as this process does (a real site shares /home): this checkout, the
    venv the tests run in, and $HPCPLACE_SLURM_SHARED (scripts/test-all.sh puts its venv there)."""
    extra = [p for p in os.environ.get("HPCPLACE_SLURM_SHARED", "").split(":") if p]
    return sorted({os.path.realpath(p) for p in [str(REPO), sys.prefix, sys.base_prefix, *extra]})


def _unshared(wanted: list[str]) -> list[str]:
    """The wanted paths the running cluster's nodes cannot see: those under /tmp (each node has its
    own) that no path up.sh bound into the nodes (its $DIR/shared) holds."""
    try:
        bound = (CLUSTER_DIR / "shared").read_text(encoding="utf-8").splitlines()
    except OSError:
        bound = []
    return [
        w
        for w in wanted
        if (w + "/").startswith("/tmp/") and not any((w + "/").startswith(b.rstrip("/") + "/") for b in bound)
    ]


def _boot(mode: str) -> None:
    env = {**os.environ, "HPCPLACE_SLURM_SHARED": ":".join(shared_paths())}
    res = subprocess.run(
        [str(CLUSTER_SCRIPTS / "up.sh"), "--slurm", SLURM_RELEASE, "--constrain-devices", mode],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env=env,
    )
    if res.returncode == 77:
        _unavailable(f"the Slurm test cluster needs root: {res.stderr.strip()}")
    if res.returncode != 0:
        why = [line for line in res.stderr.splitlines() if "boot FAILED" in line]
        pytest.fail(
            f"scripts/slurm-cluster/up.sh --slurm {SLURM_RELEASE} failed (rc {res.returncode}): "
            f"{' '.join(why) or '(no reason printed)'}\n{res.stderr[-4000:]}"
        )


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


@functools.cache
def _install() -> None:
    """install.sh for the release, once per test process (it is idempotent, but a subprocess and a dpkg
    query per package each time)."""
    install = subprocess.run(
        [str(CLUSTER_SCRIPTS / "install.sh"), "--slurm", SLURM_RELEASE], capture_output=True, text=True, check=False
    )
    if install.returncode != 0:
        _unavailable(f"cannot install Slurm ({SLURM_RELEASE}): {install.stderr.strip()[-500:]}")


_USED_CLUSTER = False  # this session asked for the cluster: its jobs and nodes are checked at the end


def harness_tmp_names() -> list[str]:
    """Names in this host's /tmp that the test clusters' harness keeps across sessions (each instance's
    state directory, lock and owner file): not left by a test."""
    named = [p.name for p in (CLUSTER_DIR, CLUSTER_LOCK, CLUSTER_OWNER) if p.parent == Path("/tmp")]
    suffixes = [""] + [f"-{n}" for n in range(1, 10)]
    return named + [
        name
        for suffix in suffixes
        for name in (f"hpcplace-slurm{suffix}", f"hpcplace-cluster{suffix}.lock", f"hpcplace-cluster{suffix}.owner")
    ]


def cluster_leftovers() -> list[str]:
    """What this session left in the test cluster: jobs still queued, files in a node's own /dev/shm, and in
    its own /tmp beyond the paths up.sh binds there (the state directory, the shared checkouts)."""
    if not _USED_CLUSTER:
        return []
    res = subprocess.run(["squeue", "-h", "-o", "%i %j %T"], capture_output=True, text=True, check=False, timeout=60)
    left = [f"Slurm job {line.strip()}" for line in res.stdout.splitlines() if line.strip()]
    try:
        bound = (CLUSTER_DIR / "shared").read_text(encoding="utf-8").splitlines()
    except OSError:
        bound = []
    kept = {Path(p).relative_to("/tmp").parts[0] for p in [str(CLUSTER_DIR), *bound] if p.startswith("/tmp/")}
    for node in cluster_nodes():
        root = node_root(node)
        if root is None:
            continue
        left += [f"{node}: /dev/shm/{name}" for name in sorted(os.listdir(root / "dev" / "shm"))]
        left += [f"{node}: /tmp/{name}" for name in sorted(set(os.listdir(root / "tmp")) - kept)]
    return left


def ensure_cluster(mode: str) -> LiveCluster:
    """The cluster up in ConstrainDevices=`mode` (boots or re-boots it as needed)."""
    global _USED_CLUSTER
    _USED_CLUSTER = True
    if os.geteuid() != 0:
        _unavailable("the Slurm test cluster needs root (scripts/slurm-cluster/up.sh)")
    if not (CLUSTER_SCRIPTS / "up.sh").exists():
        _unavailable("scripts/slurm-cluster/up.sh is missing")
    _install()
    _hold_cluster_lock()
    owner = CLUSTER_OWNER.read_text() if CLUSTER_OWNER.exists() else ""
    status = _status()
    if (
        status.get("constrain_devices") != mode
        or status.get("slurm") != SLURM_RELEASE
        or owner != str(REPO)
        or _unshared(shared_paths())
        or not (CLUSTER_DIR / "networks").is_file()  # booted before up.sh made the second network (fab0)
    ):
        _boot(mode)
        CLUSTER_OWNER.write_text(str(REPO))
    # A newer release's client tools (up.sh writes them to $DIR/bin) come first, for the tests and for
    # every `hpcplace` they run, as a site's Slurm module puts its own on PATH.
    tools = str(CLUSTER_DIR / "bin")
    path = [p for p in os.environ.get("PATH", os.defpath).split(os.pathsep) if p != tools]
    os.environ["PATH"] = os.pathsep.join(([tools] if (CLUSTER_DIR / "bin").is_dir() else []) + path)
    env = dict(os.environ)
    env["SLURM_CONF"] = str(CLUSTER_DIR / "etc" / "slurm.conf")
    os.environ["SLURM_CONF"] = env["SLURM_CONF"]
    # The jobs' preflight finds each node's fake GPUs here (runtime/preflight.py; sbatch passes it on).
    env["HPCPLACE_GPU_DEVICE_DIR"] = os.environ["HPCPLACE_GPU_DEVICE_DIR"] = str(CLUSTER_DIR / "dev" / "{node}")
    return LiveCluster(env, mode, booted_version())


@pytest.fixture(scope="session")
def slurm_cluster() -> LiveCluster:
    """The cluster as it is (booting it with ConstrainDevices=no when down)."""
    mode = _status().get("constrain_devices", "no")
    return ensure_cluster(mode if mode in ("yes", "no") else "no")
