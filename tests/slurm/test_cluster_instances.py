"""Test clusters side by side (scripts/slurm-cluster/_common.sh): each instance's names, networks, ports and
job ids are its own, so scripts/test-all.sh can run two Slurm releases at once. The real-Slurm tier runs on
instances 0 and 1 together in scripts/test-all.sh; this checks what each instance is given, without root."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.slurm.conftest import CLUSTER_SCRIPTS, REPO

SETTINGS = [
    "HPCP_DIR",
    "HPCP_NET",
    "HPCP_FAB_NET",
    "HPCP_BRIDGE",
    "HPCP_FAB_BRIDGE",
    "HPCP_CTLD_PORT",
    "HPCP_SLURMD_PORT",
    "HPCP_DBD_PORT",
    "HPCP_FIRST_JOB_ID",
    "HPCP_HOSTS_FILE",
]


def settings(instance: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPCPLACE_SLURM")}
    if instance is not None:
        env["HPCPLACE_SLURM_INSTANCE"] = instance
    show = " ".join(f'"${name}"' for name in SETTINGS)
    names = '"$(hpcp_netns a800-1)" "$(hpcp_veth 3)" "$(hpcp_fab_veth 3)"'
    script = f"source {CLUSTER_SCRIPTS / '_common.sh'} && echo {show} {names}"
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=False, cwd=REPO)


def test_instance_zero_keeps_the_names_it_always_had() -> None:
    res = settings(None)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == [
        "/tmp/hpcplace-slurm", "10.77.0", "10.99.0", "hpcpbr0", "hpcpbr1", "6817", "6818", "6819", "1", "/etc/hosts",
        "hpcp-a800-1", "hpcpv3", "hpcpf3",
    ]  # fmt: skip


def test_another_instance_shares_nothing_with_instance_zero() -> None:
    zero, one, two = (settings(n).stdout.split() for n in ("0", "1", "2"))
    assert one == [
        "/tmp/hpcplace-slurm-1", "10.78.0", "10.98.0", "hpcp1br0", "hpcp1br1", "6827", "6828", "6829", "100001",
        "/tmp/hpcplace-slurm-1/hosts", "hpcp1-a800-1", "hpcp1v3", "hpcp1f3",
    ]  # fmt: skip
    for a, b in ((zero, one), (zero, two), (one, two)):
        assert not set(a) & set(b), (a, b)  # no name, address, port or job id in common


@pytest.mark.parametrize("bad", ["10", "x", "-1", "1 "])
def test_a_bad_instance_is_refused_with_what_is_allowed(bad: str) -> None:
    res = settings(bad)
    assert res.returncode == 2
    assert f"HPCPLACE_SLURM_INSTANCE must be one digit (0-9): {bad}" in res.stderr
