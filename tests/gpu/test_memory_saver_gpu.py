"""GPU tier: torch_memory_saver on a real GPU (marker `gpu`; scripts/gpu-tier.sh runs it).

The checks run in a child process started with torch_memory_saver's LD_PRELOAD, which
`torch_memory_saver_env` only returns where a GPU and libcuda exist; elsewhere this module skips
with the reason (or fails when HPCPLACE_REQUIRE_GPU=1, as the GPU-tier script sets)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcplace.runtime.memory import torch_memory_saver_env, torch_memory_saver_unavailable_reason

GIB = 1 << 30
REASON = torch_memory_saver_unavailable_reason(os.environ)
CHILD = str(Path(__file__).with_name("tms_child.py"))
CHILD_TIMEOUT_S = 150

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def measured() -> dict:
    if REASON is not None:
        if os.environ.get("HPCPLACE_REQUIRE_GPU") == "1":
            pytest.fail(f"GPU tier required but unavailable: {REASON}")
        pytest.skip(f"GPU tier skipped: {REASON}")
    env = {**os.environ, **torch_memory_saver_env(os.environ)}
    assert "torch_memory_saver" in env.get("LD_PRELOAD", "")
    try:  # well inside scripts/gpu-tier.sh's limit for the whole pytest run, so a hang still reports here
        result = subprocess.run(
            [sys.executable, CHILD], env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S
        )
    except subprocess.TimeoutExpired as exc:
        parts = [b.decode(errors="replace") if isinstance(b, bytes) else (b or "") for b in (exc.stdout, exc.stderr)]
        pytest.fail(f"{CHILD} did not finish in {CHILD_TIMEOUT_S} s:\n{parts[0]}{parts[1]}")
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(result.stdout.strip().splitlines()[-1])
    out = os.environ.get("HPCPLACE_GPU_TIER_OUT")
    if out:
        Path(out).write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps(data, indent=1))
    return data


def test_pause_frees_device_memory_per_nvml(measured: dict) -> None:
    assert measured["freed_gib"] > 2.9  # 1 GiB weights + 2 GiB kv cache (+ graph pool)
    assert measured["used_resumed_gib"] - measured["used_paused_gib"] > 2.9


def test_resume_restores_backed_up_contents(measured: dict) -> None:
    assert measured["restored"]


def test_captured_cuda_graph_replays_after_pause_and_resume(measured: dict) -> None:
    assert measured["graph_replays_after_resume"] and measured["graph_tracks_input"]


def test_double_pause_is_refused_before_reaching_torch_memory_saver(measured: dict) -> None:
    assert measured["double_pause_refused"]


def test_paused_region_and_second_backend_are_refused(measured: dict) -> None:
    assert measured["paused_region_refused"] and measured["second_backend_refused"]
