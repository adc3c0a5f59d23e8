"""runtime/network.py: which interface a node group's `network:` is on this node, what the shim exports
for it, MASTER_ADDR through the run directory, and the preflight's check that nodes reach the head."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from hpcplace.runtime import network as net
from hpcplace.runtime.errors import ShimError
from hpcplace.runtime.preflight import NodePlan, network_checks
from hpcplace.runtime.ranks import shm_dir
from tests.runtime.conftest import LAB_CONFIG, base_env, print_env, shim_command, step_envs, write_plan

NODE = {"lo": "127.0.0.1", "eth0": "10.77.0.11", "ib0": None, "fab0": "10.99.0.11"}


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("fab0", None),
        ("eth0.100", None),
        ("enp65s0f0np0", None),
        ("", "cannot be empty"),
        ("a" * 16, "at most 15 characters (this one has 16)"),
        ("eth0:1", "cannot contain ':'"),
        ("a/b", "cannot contain '/'"),
        ("a b", "cannot contain ' '"),
        ("..", "'.' and '..' are not interface names"),
    ],
)
def test_interface_names(name: str, problem: str | None) -> None:
    found = net.interface_name_problem(name)
    assert found == problem if problem is None else problem in (found or "")


def test_subnets() -> None:
    assert net.parse_subnet("10.99.0.0/16") == ((10 << 24) | (99 << 16), 16)
    assert net.parse_subnet("0.0.0.0/0") == (0, 0)
    assert "host bits set: the subnet is 10.99.0.0/16" in str(net.parse_subnet("10.99.3.4/16"))
    assert "no '/PREFIX'" in str(net.parse_subnet("10.99.0.0"))
    assert "not an IPv4 address" in str(net.parse_subnet("10.099.0.0/16"))  # no leading zeros
    assert net.in_subnet("10.99.255.1", (10 << 24 | 99 << 16, 16))
    assert not net.in_subnet("10.98.0.1", (10 << 24 | 99 << 16, 16))


def test_choose_the_first_listed_interface_with_an_address() -> None:
    assert net.choose({"interfaces": ["fab0"]}, NODE) == ("fab0", "10.99.0.11")
    assert net.choose({"interfaces": ["ib0", "fab0", "eth0"]}, NODE) == ("fab0", "10.99.0.11")  # ib0: no IPv4
    assert net.choose({"subnet": "10.77.0.0/24"}, NODE) == ("eth0", "10.77.0.11")
    missing = net.choose({"interfaces": ["fab7"]}, NODE)
    assert missing == (
        "interface fab7 does not exist on this node (it has eth0 10.77.0.11, ib0 (no IPv4), fab0 10.99.0.11)"
    )
    assert "interface ib0 has no IPv4 address" in str(net.choose({"interfaces": ["ib0"]}, NODE))
    several = str(net.choose({"interfaces": ["ib0", "ib1"]}, NODE))
    assert several.startswith("none of the interfaces ib0, ib1 has an IPv4 address on this node; ib0 without one")
    assert "no interface has an address in 10.5.0.0/16" in str(net.choose({"subnet": "10.5.0.0/16"}, NODE))


def test_environment_names_every_variable_the_frameworks_read() -> None:
    env = net.environment("fab0", "10.99.0.11")
    assert env == {
        "NCCL_SOCKET_IFNAME": "fab0",
        "GLOO_SOCKET_IFNAME": "fab0",
        "TP_SOCKET_IFNAME": "fab0",
        "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": "fab0",
        "RLINF_COMM_NET_DEVICES": "fab0",
        "RAY_NETWORK_INTERFACE": "fab0",
        "HPCPLACE_NETWORK_ADDR": "10.99.0.11",
    }


def test_this_machine_has_loopback() -> None:
    assert net.local_interfaces()["lo"] == "127.0.0.1"
    assert net.resolve({"subnet": "127.0.0.0/8"}) == ("lo", "127.0.0.1")
    with pytest.raises(ShimError, match="network fab7: interface fab7"):
        net.resolve({"interfaces": ["fab7"]})


# ---- the shim ---------------------------------------------------------------------------------


@pytest.fixture
def lo_plan(tmp_path: Path) -> Path:
    """The lab plan with `network: lo` on the a800 group (loopback: every machine has it)."""
    text = LAB_CONFIG.replace("gpu_type: a800}", "gpu_type: a800, network: lo}")
    assert "network: lo" in text
    return write_plan(tmp_path, text)


def test_shim_exports_the_interface_and_rank0s_address(lo_plan: Path) -> None:
    rank0 = print_env(lo_plan, "actor", step_envs("0")[0])["env"]
    assert rank0["NCCL_SOCKET_IFNAME"] == rank0["RAY_NETWORK_INTERFACE"] == "lo"
    assert rank0["HPCPLACE_NETWORK_ADDR"] == rank0["MASTER_ADDR"] == "127.0.0.1"
    # rank 2 (a800-2) before rank 0 published its address: the node name, as without a network
    assert print_env(lo_plan, "actor", step_envs("0")[2])["env"]["MASTER_ADDR"] == "a800-1"
    published = Path(net.address_file(str(lo_plan.parent / ".hpcplace-ports" / "120.0.actor")))
    net.publish_address(str(published), "10.99.0.11")
    assert print_env(lo_plan, "actor", step_envs("0")[2])["env"]["MASTER_ADDR"] == "10.99.0.11"
    # a component on a group without `network:` is unchanged
    agent = print_env(lo_plan, "agent", step_envs("2")[0])["env"]
    assert agent["MASTER_ADDR"] == "cpu-1" and "NCCL_SOCKET_IFNAME" not in agent


def test_in_a_step_rank0_publishes_and_the_others_wait(lo_plan: Path) -> None:
    job_id = str(os.getpid())  # the shim makes the job's /dev/shm folder, as in a job: removed below
    try:
        _rank0_publishes_and_the_others_wait(lo_plan, job_id)
    finally:
        shutil.rmtree(shm_dir(job_id), ignore_errors=True)


def _rank0_publishes_and_the_others_wait(lo_plan: Path, job_id: str) -> None:
    def start(i: int) -> subprocess.Popen[str]:
        env = {**base_env(), **step_envs("0")[i], "HPCPLACE_MASTER_PORT_CHECK": "1", "SLURM_JOB_ID_HET_GROUP_0": job_id}
        argv = shim_command("--plan", str(lo_plan), "--component", "actor", "--no-verify")
        return subprocess.Popen(
            [*argv, "--", "sh", "-c", 'echo "$MASTER_ADDR $MASTER_PORT"'],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    waiting = start(3)  # starts first: waits for rank 0's address
    time.sleep(0.5)
    assert waiting.poll() is None
    first = start(0)
    out0, err0 = first.communicate(timeout=30)
    out3, err3 = waiting.communicate(timeout=30)
    assert first.returncode == 0 and waiting.returncode == 0, err0 + err3
    assert out0 == out3 and out0.startswith("127.0.0.1 "), (out0, out3)


def test_shim_fails_naming_the_interface_and_what_the_node_has(tmp_path: Path) -> None:
    plan = write_plan(tmp_path, LAB_CONFIG.replace("gpu_type: a800}", "gpu_type: a800, network: [fab7, ib9]}"))
    done = subprocess.run(
        shim_command("--plan", str(plan), "--component", "actor", "--print-env"),
        env={**base_env(), **step_envs("0")[0]},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "network fab7, ib9: none of the interfaces fab7, ib9 has an IPv4 address on this node" in done.stderr
    assert "Traceback" not in done.stderr


# ---- the preflight ---------------------------------------------------------------------------


def node(tmp_path: Path, *, head: bool, network: dict[str, object] | None, peers: int = 1) -> NodePlan:
    return NodePlan(
        where="n",
        expected_gpus=0,
        used_gpus=(),
        programs=(),
        offload=False,
        ray_python=None,
        shm_needed=None,
        network=network,
        is_head=head,
        head_network=True,
        network_peers=peers,
        run_dir=str(tmp_path),
    )


def test_preflight_nodes_reach_the_head_on_the_interface(tmp_path: Path) -> None:
    lo = {"interfaces": ["lo"]}
    problems, notes, finish = network_checks(node(tmp_path, head=True, network=lo), "9", "", 10)
    assert problems == [] and notes == ["network lo 127.0.0.1"] and finish is not None
    problems, notes, _ = network_checks(node(tmp_path, head=False, network=lo), "9", "", 10)
    assert problems == [] and notes == ["network lo 127.0.0.1", "head 127.0.0.1 answers"]
    assert finish() == ["1/1 node(s) reached the head on lo"]


def test_preflight_names_a_missing_interface_and_a_failed_head(tmp_path: Path) -> None:
    started = time.monotonic()
    problems, _, finish = network_checks(node(tmp_path, head=True, network={"interfaces": ["fab7"]}), "9", "", 60)
    assert finish is None and problems[0].startswith("network fab7: interface fab7 does not exist on this node (it has")
    problems, _, _ = network_checks(node(tmp_path, head=False, network={"interfaces": ["lo"]}), "9", "", 60)
    assert problems == ["network lo: the head (cluster node rank 0) has no address on its network: see its FAILED line"]
    assert time.monotonic() - started < 30  # the failed head says so at once: nobody waits out the 60 s timeout


def test_preflight_head_that_never_publishes(tmp_path: Path) -> None:
    problems, _, _ = network_checks(node(tmp_path, head=False, network={"interfaces": ["lo"]}), "10", "", 0.3)
    assert problems == ["network lo: the head (cluster node rank 0) published no address on its network within 0 s"]
