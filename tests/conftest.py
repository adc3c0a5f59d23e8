"""Suite-wide test settings.

pytest's temporary directories (tmp_path) live under /var/tmp, not /tmp: the Slurm test cluster
gives every node its own /tmp (as a real cluster does), so a job's run directory must be on a path
that every node and the test process share. One root per checkout (concurrent checkouts on one
machine stay apart); pytest's numbered, lock-protected pytest-N directories below it keep
concurrent sessions of one checkout apart. PYTEST_DEBUG_TEMPROOT or --basetemp override it.

The suite leaves the checkout as it found it: a session that adds untracked files (not ignored) to
it fails, naming them (a test writing relative to the working directory, e.g. a driver's output/). It leaves
the machine as it found it too (tests/leftovers.py): new entries in /dev/shm or /tmp (this host's and the test
cluster's nodes'), processes the session started, Slurm jobs still queued fail the session, each named.
HPCPLACE_TEST_LEFTOVERS=off skips that check (two test sessions at once on one machine would blame each other
for their files); =cluster checks the test cluster only (scripts/test-all.sh runs sessions side by side and
checks the host once, after all of them: `python -m tests.leftovers`).

Signals are as a terminal's foreground job has them: a shell without job control starts background
commands with SIGINT and SIGQUIT ignored, and every process the tests start (hpcplace, srun, slurmd, the
jobs' tasks) would inherit that, so a test's Ctrl-C would test nothing a user does.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Generator
from pathlib import Path

import pytest

from tests import leftovers

REPO = Path(__file__).resolve().parents[1]
SHARED_TEMP_PARENT = Path("/var/tmp")


def _terminal_signals() -> None:
    """SIGINT and SIGQUIT as a terminal's foreground job has them (a handled signal is default again in
    every program started from here)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGQUIT) == signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)


# Libraries the tests import that keep caches in /tmp unless told otherwise: kept in the suite's own folder.
CACHE_VARIABLES = {"AREAL_CACHE_DIR": "areal", "TORCHINDUCTOR_CACHE_DIR": "torchinductor"}


# Where the Ray clusters the tests start on this host keep their session folders (Ray's default, /tmp/ray, is
# never cleaned): one per test session, removed at its end; short, as Ray's socket paths must fit 107 bytes.
RAY_TEMP = Path(f"/var/tmp/hpray-{os.getpid()}")


def pytest_configure(config: pytest.Config) -> None:
    _terminal_signals()
    # The Ray clusters and drivers the tests start themselves (fake-GPU harnesses, framework drivers) run
    # without token authentication: a local ray.init() of Ray 2.60 would otherwise write ~/.ray/auth_token on
    # this machine, and `ray start --head` turn token authentication on when it finds one. hpcplace's own
    # jobs never take this from the shell (runtime/ray_node.py auth_environment: the job's own token).
    os.environ["RAY_AUTH_MODE"] = "disabled"
    os.environ.setdefault(leftovers.SESSION_VARIABLE, f"{os.getpid()}-{os.urandom(4).hex()}")
    if "RAY_TMPDIR" not in os.environ:
        os.environ["RAY_TMPDIR"] = str(RAY_TEMP)
    if not SHARED_TEMP_PARENT.is_dir():
        return
    tag = hashlib.sha256(str(REPO).encode()).hexdigest()[:10]
    root = SHARED_TEMP_PARENT / f"hpcplace-pytest-{tag}"
    try:
        root.mkdir(mode=0o755, exist_ok=True)
    except OSError:
        return
    for variable, folder in CACHE_VARIABLES.items():
        os.environ.setdefault(variable, str(root / "caches" / folder))
    if config.option.basetemp is None and not os.environ.get("PYTEST_DEBUG_TEMPROOT"):
        os.environ["PYTEST_DEBUG_TEMPROOT"] = str(root)


def lab_modes() -> list[str]:
    """The ConstrainDevices modes the `lab` tests run in: both, unless HPCPLACE_LAB_MODES names one
    (scripts/test-all.sh: both on the first Slurm release, `yes` on the later ones)."""
    modes = [m.strip() for m in os.environ.get("HPCPLACE_LAB_MODES", "no,yes").split(",") if m.strip()]
    if not modes or set(modes) - {"no", "yes"}:
        raise pytest.UsageError(f"HPCPLACE_LAB_MODES={os.environ['HPCPLACE_LAB_MODES']!r}: write no, yes or no,yes")
    return modes


@pytest.fixture(scope="session", params=lab_modes(), ids=lambda mode: f"ConstrainDevices={mode}")
def lab(request: pytest.FixtureRequest) -> object:
    """The real test cluster in each ConstrainDevices mode (tests/slurm/conftest.py: `ensure_cluster`). Session
    scope: pytest runs every test of one mode, across modules, before the other's, so the cluster boots once a
    mode instead of twice a module."""
    from tests.slurm.conftest import ensure_cluster

    return ensure_cluster(request.param)


def _untracked() -> set[str] | None:
    """The checkout's untracked, not ignored files; None when git cannot tell (no git, no repository)."""
    try:
        res = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=all"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if res.returncode != 0:
        return None
    return {line[3:] for line in res.stdout.splitlines() if line.startswith("?? ")}


_UNTRACKED_AT_START: set[str] | None = None
_MACHINE_AT_START: leftovers.Snapshot | None = None


def pytest_sessionstart(session: pytest.Session) -> None:
    global _UNTRACKED_AT_START, _MACHINE_AT_START
    _UNTRACKED_AT_START = _untracked()
    if os.environ.get("HPCPLACE_TEST_LEFTOVERS") != "off":
        _MACHINE_AT_START = leftovers.take()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _check_machine(session)
    if os.environ.get("RAY_TMPDIR") == str(RAY_TEMP):
        shutil.rmtree(RAY_TEMP, ignore_errors=True)
    if _UNTRACKED_AT_START is None:
        return
    now = _untracked()
    new = sorted((now or set()) - _UNTRACKED_AT_START)
    if new:
        shown = "\n  ".join(new[:20])
        print(
            f"\nthe test session left {len(new)} new untracked file(s) in the checkout {REPO} "
            f"(tests must write under tmp_path):\n  {shown}"
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# A slurmd of the test cluster that crashes is restarted (scripts/slurm-cluster/slurmd-keeper); the crash is Slurm's,
# but a test running at that moment may fail for it: each crash is reported with the test it happened in
# (a section of its report, shown where it failed) and all of the session's at its end.
_CRASHES_AT_SETUP = pytest.StashKey[tuple[int, int]]()


def _slurmd_crashes() -> tuple[int, list[str]]:
    cluster = sys.modules.get("tests.slurm.conftest")
    return cluster.slurmd_crashes() if cluster is not None else (0, [])


def pytest_runtest_setup(item: pytest.Item) -> None:
    log, crashes = _slurmd_crashes()
    item.stash[_CRASHES_AT_SETUP] = (log, len(crashes))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.when == "call" or (call.when == "setup" and report.failed):
        log, crashes = _slurmd_crashes()
        log_at_setup, seen = item.stash.get(_CRASHES_AT_SETUP, (0, 0))
        new = crashes[seen:] if log == log_at_setup else crashes
        if new:
            report.sections.append(("slurmd crashed during this test", "\n".join(new)))
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    _, crashes = _slurmd_crashes()
    if crashes:
        terminalreporter.write_sep("=", "the test cluster's slurmd crash log (scripts/slurm-cluster/slurmd-keeper)")
        for line in crashes:
            terminalreporter.write_line(line)


def _check_machine(session: pytest.Session) -> None:
    """Fail the session naming what it left on the machine (tests/leftovers.py)."""
    if _MACHINE_AT_START is None:
        return
    before = _MACHINE_AT_START
    cluster = sys.modules.get("tests.slurm.conftest")
    kept = cluster.harness_tmp_names() if cluster is not None else []  # the test cluster's state and lock
    host = os.environ.get("HPCPLACE_TEST_LEFTOVERS") != "cluster"  # scripts/test-all.sh checks the host itself

    def left() -> list[str]:
        token = os.environ[leftovers.SESSION_VARIABLE]
        found = leftovers.host_leftovers(before, token, kept) if host else []
        if cluster is not None:
            found += cluster.cluster_leftovers()
        return found

    remaining = leftovers.settled(left, within=30)
    if remaining:
        shown = "\n  ".join(remaining[:40])
        print(f"\nthe test session left {len(remaining)} thing(s) on this machine (tests must clean up):\n  {shown}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
