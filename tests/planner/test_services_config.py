"""The `services:` block (hpcplace.config.services): planned as components of their own on their node group,
recorded in plan.json and read back by submit; accepted beside a framework's command; bad input is a located
error naming the value, what is allowed and a hint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpcplace.errors import HpcplaceError
from hpcplace.plan.gpumap import summary
from hpcplace.plan.plan import plan_to_json
from hpcplace.plan.planner import plan_from_file
from hpcplace.slurm.submit import load_plan
from tests.planner.conftest import Yaml

NATIVE = """
name: t
cluster:
  node_groups:
    - {{label: a800, partition: a800, nodes: 2, gpus_per_node: 8}}
    - {{label: rtx, partition: rtx4090, nodes: 1, gpus_per_node: 4}}
    - {{label: cpu, partition: cpu, nodes: 2}}
  component_placement:
    actor: {{node_group: a800, placement: "0-15"}}
components:
  actor: {{command: [python3, train.py, --rm, "{{rm.0.url}}", --pool, "{{sandbox.addr}}"]}}
services:
{services}
"""
RM = """  rm:
    node_group: rtx
    gpus: 2
    replicas: 2
    command: [python3, serve.py, --port, "{port}"]
    ready: {http: /health}
    timeout: 300"""
SANDBOX = """  sandbox:
    node_group: cpu
    replicas: 3
    command: [python3, pool.py, --port, "{port}"]"""


def test_services_are_planned_on_their_node_groups_and_recorded(yml: Yaml, tmp_path: Path) -> None:
    path = yml.write(NATIVE.format(services=RM + "\n" + SANDBOX))
    plan = plan_from_file(path)
    comps = {c.name: c for c in plan.components}
    assert [p.visible_accelerators for p in comps["rm"].processes] == [("0", "1"), ("2", "3")]
    assert comps["sandbox"].world_size == 3 and comps["sandbox"].node_groups == ("cpu",)
    assert {p.cluster_node_rank for p in comps["sandbox"].processes} == {3}  # all on the group's first node
    doc = json.loads(plan_to_json(plan))
    records = {c["name"]: c.get("service") for c in doc["components"]}
    assert records["actor"] is None
    assert records["rm"] == {
        "port": None,
        "ready": {"kind": "http", "path": "/health"},
        "timeout": 300.0,
        "optional": False,
        "after": [],
    }
    assert records["sandbox"]["ready"] == {"kind": "tcp"}
    (tmp_path / "plan.json").write_text(plan_to_json(plan))
    again = {c.name: c for c in load_plan(tmp_path / "plan.json").components}
    assert again["rm"].service is not None and again["rm"].service.ready.path == "/health"
    assert again["rm"].service.timeout_s == 300.0 and again["actor"].service is None
    text = summary(plan)
    assert "[service, port auto, ready: GET /health 2xx within 300 s]" in text


def test_a_placement_string_gives_replicas_spread_over_nodes(yml: Yaml) -> None:
    service = """  sandbox:
    node_group: cpu
    placement: "0-1:0-3"
    command: [python3, pool.py, --port, "{port}"]"""
    plan = plan_from_file(yml.write(NATIVE.format(services=RM + "\n" + service)))
    sandbox = next(c for c in plan.components if c.name == "sandbox")
    assert [p.cluster_node_rank for p in sandbox.processes] == [3, 3, 4, 4]


def test_beside_a_framework_command_the_block_is_hpcplace_s_own(yml: Yaml) -> None:
    path = yml.write(
        """
        slurm:
          partition: a800
          gpus_per_node: 8
          node_groups:
            r4090: {partition: rtx4090, gpus_per_node: 4}
        launch:
          mode: steps
        services:
          rm:
            node_group: r4090
            gpus: 4
            command: [python, -m, openrlhf.cli.serve_rm, --port, "{port}"]
        """
    )
    with pytest.raises(HpcplaceError):  # no framework command: the block alone plans nothing
        plan_from_file(path)


@pytest.mark.parametrize(
    ("services", "needle", "message", "hint"),
    [
        (
            RM.replace("timeout: 300", "port: 70000"),
            "port: 70000",
            "service 'rm': port 70000 is not a TCP port",
            "1 to 65535",
        ),
        (RM.replace("{http: /health}", "{http: health}"), "health}", "ready.http 'health' is not a URL path", "'/'"),
        (RM.replace("{http: /health}", "{grpc: /x}"), "grpc", "unknown ready condition 'grpc'", "tcp, http, file"),
        (RM.replace("{http: /health}", "{file: /abs}"), "/abs", "must be a relative path", "HPCPLACE_SERVICE_DIR"),
        (RM.replace("node_group: rtx", "node_group: h100"), "h100", "unknown node group 'h100'", "a800, rtx, cpu"),
        (
            RM + "\n" + SANDBOX.replace("node_group: cpu", "node_group: rtx"),
            "sandbox:",
            "asks for no GPU, but node group 'rtx' counts its GPUs",
            "gpus: N",
        ),
        (RM.replace("replicas: 2", "replicas: 0"), "replicas: 0", "expected an integer >= 1, got 0", "replicas: 1"),
        (RM + "\n    after: [judge]", "after", "waits for 'judge', which is no service of this job", "services: rm"),
    ],
)
def test_bad_services_are_located_errors(yml: Yaml, services: str, needle: str, message: str, hint: str | None) -> None:
    block = services if "sandbox:" in services else services + "\n" + SANDBOX
    path = yml.write(NATIVE.format(services=block))
    with pytest.raises(HpcplaceError) as info:
        plan_from_file(path)
    text = str(info.value)
    line = int(yml.where(path, needle).split(":")[-2])
    assert text.startswith(f"{path}:"), text
    assert abs(int(text[len(str(path)) + 1 :].split(":")[0]) - line) <= 1, text  # the key or its value
    assert message in text.splitlines()[0], text
    if hint is not None:
        assert info.value.hint is not None and hint in info.value.hint, info.value.hint


def test_a_cycle_of_services_waiting_on_each_other_is_refused(yml: Yaml) -> None:
    services = """  a:
    node_group: cpu
    command: [python3, a.py, --port, "{port}", --b, "{b.0.addr}"]
    after: [b]
  b:
    node_group: cpu
    command: [python3, b.py, --port, "{port}"]
    after: [c]
  c:
    node_group: cpu
    command: [python3, c.py, --port, "{port}"]
    after: a"""
    path = yml.write(NATIVE.format(services=services).replace("{rm.0.url}", "{a.0.url}").replace("{sandbox.addr}", "x"))
    with pytest.raises(HpcplaceError, match=r"services wait on each other in a cycle: a -> b -> c -> a") as info:
        plan_from_file(path)
    assert str(info.value).startswith(f"{path}:")


@pytest.mark.parametrize(
    ("actor_command", "message"),
    [
        ('"{judge.addr}"', "{judge.addr} names no service (services of this job: rm, sandbox)"),
        ('"{rm.2.addr}"', "{rm.2.addr}: service 'rm' has 2 replica(s), numbered from 0"),
        ('"{rm.0.ip}"', "{rm.0.ip}: unknown field 'ip' (one of: addr, host, port, url)"),
        ('"{node.ip}"', None),  # neither a service nor a field: someone else's braces, left alone
        ('"{rm.addrs}"', "{rm.addrs}: unknown field 'addrs' (one of: addr, host, port, url)"),
        ('"${oc.env:HOME}"', None),  # Hydra's interpolation is no reference
    ],
)
def test_references_name_a_service_a_replica_and_a_field(yml: Yaml, actor_command: str, message: str | None) -> None:
    text = NATIVE.format(services=RM + "\n" + SANDBOX).replace('"{rm.0.url}"', actor_command)
    path = yml.write(text)
    if message is None:
        plan_from_file(path)
        return
    with pytest.raises(HpcplaceError) as info:
        plan_from_file(path)
    assert f"component 'actor': command: {message}" in str(info.value)
    assert str(info.value).startswith(f"{path}:")


def test_a_service_using_another_must_wait_for_it(yml: Yaml) -> None:
    judge = """  judge:
    node_group: cpu
    command: [python3, judge.py, --port, "{port}", --rm, "{rm.0.addr}"]"""
    path = yml.write(NATIVE.format(services=RM + "\n" + SANDBOX + "\n" + judge))
    with pytest.raises(
        HpcplaceError, match="service 'judge' uses the address of 'rm' but does not wait for it"
    ) as info:
        plan_from_file(path)
    assert info.value.hint is not None and "after: [rm]" in info.value.hint
    plan_from_file(yml.write(NATIVE.format(services=RM + "\n" + SANDBOX + "\n" + judge + "\n    after: [rm]")))


def test_a_fixed_port_holds_one_replica_per_node_and_services_never_share_gpus(yml: Yaml) -> None:
    fixed = SANDBOX + "\n    port: 5000"
    with pytest.raises(HpcplaceError, match=r"fixed port 5000, but 3 of its replicas run on one node") as info:
        plan_from_file(yml.write(NATIVE.format(services=RM + "\n" + fixed)))
    assert info.value.hint is not None and "port: auto" in info.value.hint
    beside = NATIVE.format(services=RM.replace("replicas: 2", "replicas: 1") + "\n" + SANDBOX).replace(
        'actor: {node_group: a800, placement: "0-15"}', 'actor: {node_group: rtx, placement: "0-1"}'
    )
    plan = plan_from_file(yml.write(beside))  # `gpus: 2` takes the group's first GPUs the actor leaves free
    assert [p.visible_accelerators for p in plan.component("rm").processes] == [("2", "3")]
    full = beside.replace('placement: "0-1"}', 'placement: "0-3"}')
    path = yml.write(full)
    with pytest.raises(HpcplaceError, match=r"other processes hold GPUs 0-3 of its 4: a service keeps") as info:
        plan_from_file(path)
    line = path.read_text().splitlines().index("    gpus: 2") + 1
    assert info.value.location is not None and info.value.location.line == line
    pinned = beside.replace("    gpus: 2\n    replicas: 1\n", '    placement: "1-2:0"\n')  # taken as given
    with pytest.raises(HpcplaceError, match=r"service 'rm' shares GPUs with 'actor'"):
        plan_from_file(yml.write(pinned))


def test_an_automatic_port_the_command_never_hears_of_is_a_warning(yml: Yaml) -> None:
    quiet = SANDBOX.replace('--port, "{port}"', "--quiet")
    plan = plan_from_file(yml.write(NATIVE.format(services=RM + "\n" + quiet)))
    assert any("service 'sandbox' has an automatic port but its command has no {port}" in w for w in plan.warnings)


@pytest.mark.parametrize(
    ("config", "service", "group", "reference"),
    [
        ("openrlhf-serve-rm-service.yaml", "rm", "rtx4090", "--reward.remote_url {rm.0.url}/get_reward"),
        ("verl-sandbox-service.yaml", "sandbox", "cpu", "sandbox_fusion.url={sandbox.0.url}/run_code"),
    ],
)
def test_beside_a_framework_s_command_a_service_gets_its_own_node_group(
    config: str, service: str, group: str, reference: str
) -> None:
    """slurm.node_groups describes the service's group (a framework's pools never use it): it is added, sized
    for the service, and the reference stays in the driver for the job to fill in (a Hydra override's value
    that starts with it is text, not a mapping)."""
    plan = plan_from_file(Path(__file__).resolve().parents[2] / "configs" / config)
    comps = {c.name: c for c in plan.components}
    assert comps[service].service is not None and comps[service].node_groups == (group,)
    labels = [g.label for g in plan.cluster.node_groups]
    assert labels[-1] == group and plan.cluster.node_groups[-1].num_nodes == 1
    assert plan.cluster.node_groups[-1].gpu_type in (None, "rtx4090")
    assert reference in " ".join(plan.launch.driver)
