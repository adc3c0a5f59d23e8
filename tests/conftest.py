"""Suite-wide test settings.

pytest's temporary directories (tmp_path) live under /var/tmp, not /tmp: the Slurm test cluster
gives every node its own /tmp (as a real cluster does), so a job's run directory must be on a path
that every node and the test process share. One root per checkout (concurrent checkouts on one
machine stay apart); pytest's numbered, lock-protected pytest-N directories below it keep
concurrent sessions of one checkout apart. PYTEST_DEBUG_TEMPROOT or --basetemp override it.

The suite leaves the checkout as it found it: a session that adds untracked files (not ignored) to
it fails, naming them (a test writing relative to the working directory, e.g. a driver's output/).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_TEMP_PARENT = Path("/var/tmp")


def pytest_configure(config: pytest.Config) -> None:
    if config.option.basetemp is not None or os.environ.get("PYTEST_DEBUG_TEMPROOT"):
        return
    if not SHARED_TEMP_PARENT.is_dir():
        return
    tag = hashlib.sha256(str(REPO).encode()).hexdigest()[:10]
    root = SHARED_TEMP_PARENT / f"hpcplace-pytest-{tag}"
    try:
        root.mkdir(mode=0o755, exist_ok=True)
    except OSError:
        return
    os.environ["PYTEST_DEBUG_TEMPROOT"] = str(root)


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


def pytest_sessionstart(session: pytest.Session) -> None:
    global _UNTRACKED_AT_START
    _UNTRACKED_AT_START = _untracked()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
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
