"""`hpcplace run --local`: torch_memory_saver's preload for offloading groups only where a GPU really is
(fake NVML at the library boundary; this machine has no libcuda, so the preload must never be set)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hpcplace.local import local_backend
from tests.gpu.fake_gpu import fake_gpu_dir, fake_memory_saver


@pytest.mark.parametrize("nvml", [True, False])
def test_no_preload_on_a_machine_without_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nvml: bool) -> None:
    site = fake_memory_saver(fake_gpu_dir(tmp_path, cuda="13.0", nvml=nvml))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    python = tmp_path / "python3"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "0"}
    assert local_backend.memory_saver_env(env, (str(python), "demo.py")) == {}
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
