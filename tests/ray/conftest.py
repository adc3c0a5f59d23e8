"""The Ray tests share the Slurm tier's fixtures (the real test cluster).

The steering proofs (tests/ray/test_{verl,nemo_rl,openrlhf,slime}_slurm.py) start their heterogeneous job once in
the suite, on the cluster as it is. For the repeated proof (docs/testing.md): HPCPLACE_STEER_REPEAT=10 starts each
that many times, and HPCPLACE_STEER_MODES=no,yes runs them in each ConstrainDevices mode (booting it)."""

from __future__ import annotations

import os

import pytest

from tests.slurm.conftest import LiveCluster, ensure_cluster, slurm_cluster  # noqa: F401

STEER_REPEAT = int(os.environ.get("HPCPLACE_STEER_REPEAT") or 1)
STEER_MODES = [m.strip() for m in (os.environ.get("HPCPLACE_STEER_MODES") or "").split(",") if m.strip()]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "start" in metafunc.fixturenames:
        metafunc.parametrize("start", range(STEER_REPEAT), ids=[f"start{i + 1}" for i in range(STEER_REPEAT)])


@pytest.fixture(scope="session", params=STEER_MODES or ["as-is"], ids=lambda m: f"ConstrainDevices={m}")
def steer_cluster(request: pytest.FixtureRequest) -> LiveCluster:
    """The cluster a steering proof runs on: as it is, or each mode of HPCPLACE_STEER_MODES."""
    if request.param == "as-is":
        cluster: LiveCluster = request.getfixturevalue("slurm_cluster")
        return cluster
    return ensure_cluster(request.param)
