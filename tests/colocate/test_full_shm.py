"""A /dev/shm filled by another tenant (a private 4 MiB tmpfs under `unshare -m`): stores and batons
opened before keep publishing and handing over; what needs new space fails with a clear error; no
temporary file is left; a first publish killed mid-way leaves temporary slots the next open removes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("full_shm_worker.py")


def test_full_dev_shm_gives_clean_errors_and_leaves_nothing() -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to mount a private /dev/shm")
    res = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, str(WORKER)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if res.returncode != 0 and "unshare failed" in res.stderr:
        pytest.skip(f"cannot make a mount namespace here: {res.stderr.strip()}")
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["killed_rc"] == -9
    assert out["temps_after_kill"] == [".slot0.safetensors.tmp", ".slot1.safetensors.tmp", "control", "writer.lock"]
    assert out["free_after_fill"] == 0
    assert out["versions"] == [2, 3, 4]
    assert out["generations"] == [0, 1, 2]
    errors = out["errors"]
    assert "not enough space" in errors["new store"] or "no space left" in errors["new store"], errors
    assert "HINT" in errors["new store"]
    assert "no space left on /dev/shm" in errors["new group"] and "HINT" in errors["new group"], errors
    assert out["temps_after_reopen"] == ["control", "writer.lock"]
    assert not [p for p in out["listing"] if ".tmp" in p or p.split("/")[-1].startswith(".")], out["listing"]
    assert out["after_cleanup"] == []
