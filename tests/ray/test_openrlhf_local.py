"""OpenRLHF's own placement agrees with hpcplace's plan: tests/ray/drivers/openrlhf_driver.py runs openrlhf
0.11.2's train_ppo_ray (its parser, its checks, train() with its PACK placement groups, create_vllm_engines,
get_bundle_indices, RayActorGroup; probes where models would load) on a local multi-node Ray cluster with
fake GPUs (ray.cluster_utils, the plan's nodes and GPU counts), and every rank's node and GPUs are compared
with the plan. Ray picks among equally loaded nodes (OpenRLHF's groups name none), so nodes are compared
through one consistent map from Ray's nodes to the plan's (the same for every role); GPU ids exactly."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hpcplace.config.formats import load_spec, openrlhf
from hpcplace.config.formats.command import command_from_driver
from hpcplace.plan.plan import Plan
from hpcplace.plan.planner import plan_from_spec

HERE = Path(__file__).parent
DRIVER = HERE / "drivers" / "openrlhf_driver.py"
TIMEOUT_S = 300
MODELS = ["--actor.model_name_or_path", "m", "--reward.model_name_or_path", "r"]

CASES = {
    # hybrid engine: actor, ref, reward and 4 vLLM engines of TP 2 on the same 8 GPUs
    "colocate_all_tp2": (
        8,
        [
            "--actor.num_nodes",
            "1",
            "--actor.num_gpus_per_node",
            "8",
            "--ref.num_gpus_per_node",
            "8",
            "--reward.num_gpus_per_node",
            "8",
            "--vllm.num_engines",
            "4",
            "--vllm.tensor_parallel_size",
            "2",
            "--train.colocate_all",
            "--algo.advantage.estimator",
            "reinforce_baseline",
            "--rollout.n_samples_per_prompt",
            "4",
            *MODELS,
        ],
    ),
    # every role in its own group (gae: a critic from the reward model), engines of TP 2, 4-GPU nodes
    "separate_groups": (
        4,
        [
            "--actor.num_nodes",
            "1",
            "--actor.num_gpus_per_node",
            "4",
            "--ref.num_gpus_per_node",
            "2",
            "--critic.num_gpus_per_node",
            "2",
            "--reward.num_gpus_per_node",
            "2",
            "--vllm.num_engines",
            "3",
            "--vllm.tensor_parallel_size",
            "2",
            *MODELS,
        ],
    ),
    # actor+ref over two nodes, critic+reward colocated, 1-GPU engines; the actor's 8 bundles span 2 nodes
    "colocated_pairs_spanning": (
        4,
        [
            "--actor.num_nodes",
            "2",
            "--actor.num_gpus_per_node",
            "4",
            "--ref.num_nodes",
            "2",
            "--ref.num_gpus_per_node",
            "4",
            "--train.colocate_actor_ref",
            "--critic.num_gpus_per_node",
            "2",
            "--reward.num_gpus_per_node",
            "2",
            "--train.colocate_critic_reward",
            "--vllm.num_engines",
            "2",
            *MODELS,
        ],
    ),
}


def plan_of(tmp_path: Path, gpn: int, argv: list[str]) -> Plan:
    site = tmp_path / "site.yaml"
    site.write_text(f"slurm: {{gpus_per_node: {gpn}}}\n", encoding="utf-8")
    driver = ["python3", "-m", "openrlhf.cli.train_ppo_ray", *argv]
    return plan_from_spec(load_spec(str(site), driver=driver))


def run_openrlhf(tmp_path: Path, plan: Plan, argv: list[str]) -> dict[str, Any]:
    nodes = ",".join(str(n) for g in plan.cluster.node_groups for n in g.gpus_per_node)
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, str(DRIVER), "--report", str(report), "--nodes", nodes, "--", *argv],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        cwd=tmp_path,
        env={**os.environ, "OPENRLHF_PROBE_PARENT": str(tmp_path)},  # its probe records: not in /tmp
    )
    assert report.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    data: dict[str, Any] = json.loads(report.read_text())
    assert data["error"] is None, data.get("traceback") or data["error"]
    return data


def observed(report: dict[str, Any]) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """(role, rank) -> its (Ray node index, GPU id) per GPU, as OpenRLHF placed it (a vLLM engine of TP > 1:
    its vLLM workers, in bundle order)."""
    index = {n["node_id"]: i for i, n in enumerate(report["nodes"])}
    out: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for r in report["records"]:
        if "role" in r:
            out[(r["role"], r["rank"])] = [(index[r["node_id"]], g) for g in r["gpus"]]
            continue
        workers = r.get("workers") or [{"node_id": r["node_id"], "gpus": r["gpus"]}]
        out[("vllm", r["engine"])] = [(index[w["node_id"]], g) for w in workers for g in w["gpus"]]
    return out


def model(argv: list[str], nodes: int, gpn: int, choose: Any = None) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """hpcplace's model of OpenRLHF's placement (hpcplace.config.formats.openrlhf), `choose` deciding ties."""
    command = command_from_driver(["python3", "-m", "openrlhf.cli.train_ppo_ray", *argv])
    entry = openrlhf.entry_index(command)
    args = openrlhf.parse_args(command, entry, None, [])
    groups, sizes = openrlhf.groups_of(command, entry, args, [])
    placed = openrlhf.layout(groups, nodes, gpn, *([choose] if choose else []))
    assert placed is not None
    out = {}
    for g in groups:
        for role in g.roles:
            for rank, bundles in enumerate(openrlhf.role_lists(role, g, placed[g.name], args, sizes)):
                out[(role, rank)] = bundles
    return out


def ray_sequence(argv: list[str], seen: dict[tuple[str, int], list[tuple[int, int]]]) -> list[int]:
    """The Ray node of every bundle OpenRLHF's groups took, in the order the model places them."""
    command = command_from_driver(["python3", "-m", "openrlhf.cli.train_ppo_ray", *argv])
    entry = openrlhf.entry_index(command)
    args = openrlhf.parse_args(command, entry, None, [])
    groups, sizes = openrlhf.groups_of(command, entry, args, [])
    sequence = []
    for g in groups:
        role = "actor" if "actor" in g.roles else g.roles[0]
        count = sizes[role] // (args.int("--vllm.tensor_parallel_size") if role == "vllm" else 1)
        sequence += [node for rank in range(count) for node, _ in seen[(role, rank)]]
    return sequence


def mismatches(argv: list[str], report: dict[str, Any], gpn: int) -> list[str]:
    """OpenRLHF's placement replayed through hpcplace's model, Ray's choice among equally loaded nodes taken
    where the model allows one: every difference (a choice the model does not allow, a rank elsewhere)."""
    seen = observed(report)
    sequence = ray_sequence(argv, seen)
    problems: list[str] = []
    position = [0]

    def choose(candidates: list[int], take: int) -> int:
        if position[0] >= len(sequence):
            problems.append("the model places more bundles than OpenRLHF made")
            return candidates[0]
        node = sequence[position[0]]
        position[0] += take
        if node not in candidates:
            problems.append(f"Ray chose node {node}, the model allows {candidates} (bundle {position[0]})")
            return candidates[0]
        return node

    want = model(argv, len(report["nodes"]), gpn, choose)
    problems += [f"{k}: planned, not started by OpenRLHF" for k in sorted(set(want) - set(seen))]
    problems += [f"{k}: started by OpenRLHF, not planned" for k in sorted(set(seen) - set(want))]
    problems += [
        f"{k}: OpenRLHF {seen[k]}, model {want[k]}" for k in sorted(set(seen) & set(want)) if seen[k] != want[k]
    ]
    return problems


def plan_processes(plan: Plan) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """plan.json's processes as (node rank, GPU id) per GPU of each rank (an engine: all its nodes)."""
    out: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for comp in plan.components:
        spanning = comp.spanning.workers if comp.spanning else tuple((p.rank,) for p in comp.processes)
        for worker, ranks in enumerate(spanning):
            out[(comp.name, worker)] = [
                (comp.processes[r].cluster_node_rank, int(g))
                for r in ranks
                for g in comp.processes[r].visible_accelerators
            ]
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_openrlhf_placement_agrees(tmp_path: Path, case: str) -> None:
    pytest.importorskip("ray")
    if importlib.util.find_spec("openrlhf") is None:  # its modules import vllm: the driver loads them
        pytest.skip("openrlhf is not installed (tests/requirements-frameworks.txt, --no-deps)")
    gpn, argv = CASES[case]
    plan = plan_of(tmp_path, gpn, argv)
    nodes = sum(g.num_nodes for g in plan.cluster.node_groups)
    assert plan_processes(plan) == model(argv, nodes, gpn)  # the plan is the model, ties to the lowest rank
    report = run_openrlhf(tmp_path, plan, argv)
    assert mismatches(argv, report, gpn) == []
