"""RLinf `env_configs`: each entry's env_vars and python_interpreter_path reach exactly its own nodes,
in plan.json, in the steps-mode shim env, and in the Ray lowering (raylet env and `ray start` Python)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpcplace.errors import SpecError
from hpcplace.local.local_ray import local_raylet_facts
from hpcplace.plan.plan import plan_to_json
from hpcplace.plan.planner import plan_from_file
from hpcplace.ray.ray_cluster import ray_nodes, ray_summary
from hpcplace.runtime.ranks import plan_environment
from hpcplace.runtime.ray_node import node_facts, ray_start_argv, raylet_env
from hpcplace.slurm.submit import load_plan
from tests.planner.conftest import Yaml

CONFIG = """\
cluster:
  num_nodes: 4
  component_placement:
    actor: {node_group: a800, placement: 0-3}
    env: {node_group: cpu, placement: 0-1}
  node_groups:
    - label: a800
      node_ranks: 0-1
      env_configs:
        - node_ranks: 1
          python_interpreter_path: /opt/venv/openpi/bin/python3
          env_vars:
            - ONLY_ON_1: "yes"
            - NUM: 7
    - label: cpu
      node_ranks: 2-3
      env_configs:
{ENTRIES}
slurm:
  node_groups:
    a800: {partition: a800, gpus_per_node: 2}
    cpu: {partition: cpu, gpus_per_node: 0}
hpcplace:
  components:
    env: {env: {COMP: c}}
"""
CPU_ENTRIES = """\
        - node_ranks: 3
          env_vars: [{ONLY_ON_3: x}]
          python_interpreter_path: null
"""
RAY = "launch: {mode: ray, driver: [python, main.py]}\n"


def config(entries: str = CPU_ENTRIES, tail: str = "") -> str:
    return CONFIG.replace("{ENTRIES}\n", entries) + tail


def test_each_entry_reaches_only_its_nodes(yml: Yaml) -> None:
    plan = plan_from_file(yml.write(config()))
    a800, cpu = plan.cluster.node_groups
    assert a800.env == {} and a800.node_env == ({}, {"ONLY_ON_1": "yes", "NUM": "7"})
    assert a800.python_interpreter == (None, "/opt/venv/openpi/bin/python3")
    assert cpu.node_env == ({}, {"ONLY_ON_3": "x"}) and cpu.python_interpreter == ()  # null = unset
    groups = json.loads(plan_to_json(plan))["node_groups"]
    assert groups[0]["node_env"] == [{}, {"NUM": "7", "ONLY_ON_1": "yes"}]
    assert groups[0]["python_interpreter"] == [None, "/opt/venv/openpi/bin/python3"]
    assert groups[1]["node_env"] == [{}, {"ONLY_ON_3": "x"}] and "python_interpreter" not in groups[1]
    assert groups[0]["env"] == {} and groups[1]["env"] == {}


@pytest.mark.parametrize("ranks", ["2-3", "all", "3,2", '"2,3"'])
def test_entry_node_ranks_spellings(yml: Yaml, ranks: str) -> None:
    entries = f"        - node_ranks: {ranks}\n          env_vars: [{{V: v}}]\n"
    cpu = plan_from_file(yml.write(config(entries))).cluster.node_groups[1]
    assert cpu.node_env == ({"V": "v"}, {"V": "v"})


def test_no_env_configs_adds_no_plan_keys(yml: Yaml) -> None:
    text = config("        - node_ranks: 2\n          python_interpreter_path: null\n")
    groups = json.loads(plan_to_json(plan_from_file(yml.write(text))))["node_groups"]
    assert "node_env" not in groups[1] and "python_interpreter" not in groups[1]


@pytest.mark.parametrize(
    ("entries", "line", "col", "message"),
    [
        (
            "        - node_ranks: 1\n          env_vars: [{V: v}]\n",
            1,
            23,
            "node rank 1 is not a node of group 'cpu' (nodes [2, 3])",
        ),
        (
            "        - node_ranks: 2-3\n        - node_ranks: 3\n",
            2,
            23,
            "node rank 3 is in env_configs entries 0 and 1 of group 'cpu'",
        ),
        (
            "        - node_ranks: 2\n          env_vars: [{V: a}]\n        - node_ranks: 3\n          env_vars: [{V: b}]\n",
            4,
            22,
            "environment variable 'V' is set twice in env_configs of group 'cpu'",
        ),
        (
            "        - node_ranks: 2\n          env_vars: [{V: a}, {V: b}]\n",
            2,
            30,
            "environment variable 'V' is set twice",
        ),
        ("        - node_ranks: 2\n          env_vars: {V: a}\n", 2, 21, "env_vars must be a list of one-key mappings"),
        ("        - node_ranks: 2\n          env_vars: [{A: a, B: b}]\n", 2, 22, "exactly one variable"),
        ("        - node_ranks: 2\n          env_vars: [{A: null}]\n", 2, 22, "env_vars: A has no value"),
        ("        - node_ranks: 2\n          env_vars: [{RANK: '0'}]\n", 2, 23, "'RANK' is set by hpcplace"),
        ("        - node_ranks: 2\n          env_vars: [{'A B': x}]\n", 2, 23, "invalid environment variable name"),
        ("        - node_ranks: 2\n          pyhton_interpreter_path: /x\n", 2, 11, "pyhton_interpreter_path"),
        ("        - env_vars: [{V: v}]\n", 1, 11, "node_ranks"),
        ("        - 3\n", 1, 11, "an env_configs entry must be a mapping"),
        ("        - node_ranks: 2\n          python_interpreter_path: ''\n", 2, 36, "expected a non-empty string"),
    ],
)
def test_rlinf_checks_with_locations(yml: Yaml, entries: str, line: int, col: int, message: str) -> None:
    path = yml.write(config(entries))
    with pytest.raises(SpecError) as info:
        plan_from_file(path)
    assert message in str(info.value), str(info.value)
    first = CONFIG.splitlines().index("{ENTRIES}")  # 0-based: entries start on line first + 1
    assert str(info.value).startswith(f"{path}:{first + line}:{col}:"), str(info.value)


def test_env_configs_not_a_list(yml: Yaml) -> None:
    path = yml.write(config("        node_ranks: 3\n"))  # a mapping, not a list (no '-')
    with pytest.raises(SpecError, match="env_configs must be a list of entries"):
        plan_from_file(path)


def test_plan_json_round_trip(yml: Yaml, tmp_path: Path) -> None:
    plan = plan_from_file(yml.write(config()))
    (tmp_path / "plan.json").write_text(plan_to_json(plan), encoding="utf-8")
    again = load_plan(tmp_path / "plan.json")

    def per_node(groups):  # type: ignore[no-untyped-def]
        return [(g.label, g.env, g.node_env, g.python_interpreter) for g in groups]

    assert per_node(again.cluster.node_groups) == per_node(plan.cluster.node_groups)
    assert per_node(plan.cluster.node_groups)[0][2] == ({}, {"ONLY_ON_1": "yes", "NUM": "7"})


def test_steps_mode_env_per_node(yml: Yaml) -> None:
    """The shim's user env: group env, then the node's env_configs, then the component's."""
    data = json.loads(plan_to_json(plan_from_file(yml.write(config()))))
    env_comp = next(c for c in data["components"] if c["name"] == "env")
    actor = next(c for c in data["components"] if c["name"] == "actor")
    by_node = {}
    for comp in (actor, env_comp):
        for p in comp["processes"]:
            by_node.setdefault(p["cluster_node_rank"], []).append(plan_environment(data, comp, p))
    assert by_node[0] == [{}, {}]
    assert by_node[1] == [{"NUM": "7", "ONLY_ON_1": "yes"}] * 2
    assert by_node[2] == [{"COMP": "c"}]
    assert by_node[3] == [{"ONLY_ON_3": "x", "COMP": "c"}]
    data["node_groups"][1]["env"] = {"ONLY_ON_3": "group", "G": "g"}
    env_comp["env"] = {"ONLY_ON_3": "component"}
    p3 = next(p for p in env_comp["processes"] if p["cluster_node_rank"] == 3)
    assert plan_environment(data, env_comp, p3) == {"ONLY_ON_3": "component", "G": "g"}  # component wins
    env_comp["env"] = {}
    assert plan_environment(data, env_comp, p3) == {"ONLY_ON_3": "x", "G": "g"}  # node beats group


def test_ray_lowering_per_node(yml: Yaml) -> None:
    plan = plan_from_file(yml.write(config(tail=RAY)))
    nodes = ray_nodes(plan)
    assert [n.env for n in nodes] == [{}, {"ONLY_ON_1": "yes", "NUM": "7"}, {}, {"ONLY_ON_3": "x"}]
    assert [n.python for n in nodes] == [None, "/opt/venv/openpi/bin/python3", None, None]
    summary = "\n".join(ray_summary(plan))
    assert "node rank 1 (worker)" in summary and "env NUM, ONLY_ON_1, python /opt/venv/openpi/bin/python3" in summary
    assert "node rank 3 (worker)" in summary and "env ONLY_ON_3" in summary
    assert "ONLY_ON_3" not in next(line for line in summary.splitlines() if "node rank 2 (" in line)
    # in-job half: the raylet of node 1 gets its env and runs `ray start` with its interpreter
    header = json.loads(plan_to_json(plan))
    n1, n0, n3 = node_facts(header, 0, 1), node_facts(header, 0, 0), node_facts(header, 1, 1)
    assert n1["python"] == "/opt/venv/openpi/bin/python3" and n0["python"] is None and n3["python"] is None
    argv = ray_start_argv(
        n1["python"] or "/job/python", n1, head=False, port=1, address="h:1", temp_dir="/t", spill_dir="/s"
    )
    assert argv[:4] == ["/opt/venv/openpi/bin/python3", "-m", "ray.scripts.scripts", "start"]
    assert raylet_env({}, n1, {}, "")["ONLY_ON_1"] == "yes" and "ONLY_ON_1" not in raylet_env({}, n0, {}, "")
    assert raylet_env({}, n3, {}, "")["ONLY_ON_3"] == "x" and "ONLY_ON_3" not in raylet_env({}, n1, {}, "")


def test_local_ray_takes_node_rank_0_only(yml: Yaml) -> None:
    plan = plan_from_file(yml.write(config(tail=RAY)))
    facts = local_raylet_facts(plan)
    assert facts["env"] == {} and facts["python"] is None  # nodes 1 and 3's entries are not node 0's
    swapped = config(tail=RAY).replace("        - node_ranks: 1\n", "        - node_ranks: 0\n")
    facts = local_raylet_facts(plan_from_file(yml.write(swapped)))
    assert facts["env"] == {"ONLY_ON_1": "yes", "NUM": "7"} and facts["python"] == "/opt/venv/openpi/bin/python3"
