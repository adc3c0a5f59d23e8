"""Suite-wide test settings.

pytest's temporary directories (tmp_path) live under /var/tmp, not /tmp: the Slurm test cluster
gives every node its own /tmp (as a real cluster does), so a job's run directory must be on a path
that every node and the test process share. One root per checkout (concurrent checkouts on one
machine stay apart); pytest's numbered, lock-protected pytest-N directories below it keep
concurrent sessions of one checkout apart. PYTEST_DEBUG_TEMPROOT or --basetemp override it.
"""

from __future__ import annotations

import hashlib
import os
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
