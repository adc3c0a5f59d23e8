"""`network:` of a node group in every input format: parsed, recorded in plan.json only when set, read
back by `submit._plan_of`; bad values are located errors (file:line:col, the value, what is allowed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpcplace.config.network import Network
from hpcplace.errors import HpcplaceError
from hpcplace.plan.plan import plan_to_json
from hpcplace.plan.planner import plan_from_file
from hpcplace.slurm.submit import load_plan
from tests.planner.conftest import Yaml

NATIVE = """
name: t
cluster:
  node_groups:
    - {{label: a800, partition: a800, nodes: 2, gpus_per_node: 8, network: {a800}}}
    - {{label: cpu, partition: cpu, nodes: 1{cpu}}}
  component_placement:
    actor: {{node_group: a800, placement: "0-15"}}
    agent: {{node_group: cpu, placement: "0"}}
components:
  actor: {{command: [python3, x.py]}}
  agent: {{command: [python3, y.py]}}
"""


def networks(path: object) -> dict[str, Network | None]:
    plan = plan_from_file(path)  # type: ignore[arg-type]
    return {g.label: g.network for g in plan.cluster.node_groups}


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("fab0", Network(interfaces=("fab0",))),
        ("[ib0, fab0]", Network(interfaces=("ib0", "fab0"))),
        ("10.99.0.0/16", Network(subnet="10.99.0.0/16")),
        ('"eth0.100"', Network(interfaces=("eth0.100",))),  # a VLAN interface: '.' is allowed
    ],
)
def test_native_network_forms(yml: Yaml, written: str, expected: Network) -> None:
    path = yml.write(NATIVE.format(a800=written, cpu=""))
    assert networks(path) == {"a800": expected, "cpu": None}


def test_plan_json_records_it_only_when_set_and_submit_reads_it_back(yml: Yaml, tmp_path: Path) -> None:
    path = yml.write(NATIVE.format(a800="[ib0, fab0]", cpu=", network: 10.99.0.0/24"))
    plan = plan_from_file(path)
    written = tmp_path / "plan.json"
    written.write_text(plan_to_json(plan), encoding="utf-8")
    groups = {g["label"]: g for g in json.loads(written.read_text())["node_groups"]}
    assert groups["a800"]["network"] == {"interfaces": ["ib0", "fab0"]}
    assert groups["cpu"]["network"] == {"subnet": "10.99.0.0/24"}
    back = load_plan(written)
    assert [g.network for g in back.cluster.node_groups] == [
        Network(interfaces=("ib0", "fab0")),
        Network(subnet="10.99.0.0/24"),
    ]
    plain = plan_from_file(yml.write(NATIVE.format(a800="fab0", cpu="").replace(", network: fab0", "")))
    written.write_text(plan_to_json(plain), encoding="utf-8")
    assert all("network" not in g for g in json.loads(written.read_text())["node_groups"])


@pytest.mark.parametrize(
    ("written", "needle", "message"),
    [
        ("10.99.0.1/16", "10.99.0.1/16", "'10.99.0.1/16' has host bits set: the subnet is 10.99.0.0/16"),
        ("10.99.0.0/40", "10.99.0.0/40", "the prefix length '40' is not a number from 0 to 32"),
        ("10.299.0.0/16", "10.299.0.0/16", "'10.299.0.0' is not an IPv4 address"),
        ("fd00::/8", "fd00::/8", "is IPv6: only IPv4 subnets"),
        ('"fab 0"', '"fab 0"', "'fab 0': an interface name cannot contain ' '"),
        ('"eth0:1"', '"eth0:1"', "'eth0:1': an interface name cannot contain ':'"),
        ("averyveryverylongname", "averyveryverylongname", "at most 15 characters (this one has 21)"),
        ("7", "7", "expected an interface name or a subnet, got 7"),
        ("[]", "[]", "the list is empty"),
    ],
)
def test_bad_values_are_located_errors(yml: Yaml, written: str, needle: str, message: str) -> None:
    path = yml.write(NATIVE.format(a800=written, cpu=""))
    with pytest.raises(HpcplaceError) as info:
        plan_from_file(path)
    text = str(info.value)
    assert text.startswith(yml.where(path, needle, line_hint="label: a800") + ": "), text
    assert message in text.splitlines()[0], text
    assert info.value.hint is not None and "network: [ib0, fab0]" in info.value.hint


def test_list_items_are_located(yml: Yaml) -> None:
    path = yml.write(NATIVE.format(a800="[ib0, 10.0.0.0/8]", cpu=""))
    with pytest.raises(HpcplaceError) as info:
        plan_from_file(path)
    assert str(info.value).startswith(yml.where(path, "10.0.0.0/8") + ": ")
    assert "'10.0.0.0/8' is a subnet inside a list; a list holds interface names" in str(info.value)
    path = yml.write(NATIVE.format(a800="[fab0, fab0]", cpu=""))
    with pytest.raises(HpcplaceError, match="'fab0' is listed twice"):
        plan_from_file(path)


def test_env_that_sets_the_interface_variables_conflicts(yml: Yaml) -> None:
    path = yml.write(
        NATIVE.format(a800="fab0", cpu="").replace("network: fab0", "network: fab0, env: {NCCL_SOCKET_IFNAME: eth0}")
    )
    with pytest.raises(HpcplaceError, match="env sets NCCL_SOCKET_IFNAME, which `network: fab0` computes"):
        plan_from_file(path)


RLINF = """
cluster:
  num_nodes: 3
  component_placement:
    actor: {node_group: a800, placement: 0-15}
    env: {node_group: cpu, placement: "0"}
  node_groups:
    - {label: a800, node_ranks: 0-1}
    - {label: cpu, node_ranks: 2}
slurm:
  gpus_per_node: 0
  network: fab0
  node_groups:
    a800: {partition: a800, gpus_per_node: 8, network: [ib0, fab0]}
    cpu: {partition: cpu}
"""


def test_rlinf_slurm_block_and_node_groups(yml: Yaml) -> None:
    assert networks(yml.write(RLINF)) == {
        "a800": Network(interfaces=("ib0", "fab0")),
        "cpu": Network(interfaces=("fab0",)),
    }
    path = yml.write(RLINF.replace("network: [ib0, fab0]", "network: 10.1.2.3/8"))
    with pytest.raises(HpcplaceError) as info:
        plan_from_file(path)
    assert str(info.value).startswith(yml.where(path, "10.1.2.3/8") + ": ")


def test_roll_and_areal_slurm_block(yml: Yaml) -> None:
    roll = yml.write(
        """
        num_gpus_per_node: 8
        actor_train:
          device_mapping: list(range(0,8))
        slurm: {partition: a800, network: 10.99.0.0/16}
        """
    )
    assert set(networks(roll).values()) == {Network(subnet="10.99.0.0/16")}
    areal = yml.write(
        """
        allocation_mode: sglang[rollout]:d4p1t1+fsdp[actor]:d4p1t1
        cluster: {n_nodes: 1, n_gpus_per_node: 8}
        slurm: {partition: a800, network: [ib0, fab0]}
        """
    )
    assert set(networks(areal).values()) == {Network(interfaces=("ib0", "fab0"))}
