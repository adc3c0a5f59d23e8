"""ROLL workers wider than one node (issue 10): a vLLM worker with tp*pp GPUs over several nodes is
planned as one process per node it spans, grouped into one worker; only the Ray launch mode runs it.

ROLL's rules (read from alibaba/ROLL, not installable here): ResourceManager maps device_mapping GPU g
to node g // num_gpus_per_node (one placement group per node, nodes numbered by the raylets' NODE_RANK);
Cluster._create_workers starts the worker actor on the node of its first GPU with CUDA_VISIBLE_DEVICES =
its GPUs on that node, sorted; vLLM's Ray executor starts one Ray worker per GPU on that GPU's node;
SGLang runs a multi-node worker w on ROLL nodes w*n..w*n+n-1 (whole nodes)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from hpcplace.cli import main
from hpcplace.config.formats import load_spec
from hpcplace.config.launch import LaunchSpec
from hpcplace.errors import SpecError
from hpcplace.plan.plan import plan_to_json
from hpcplace.plan.planner import plan_from_file, plan_from_spec
from hpcplace.ray.ray_cluster import ray_nodes, ray_summary
from hpcplace.runtime.ray_node import node_facts
from hpcplace.slurm.render import render_run
from hpcplace.slurm.slurm_job import lower
from hpcplace.slurm.submit import load_plan
from tests.planner.conftest import Yaml

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "roll_vllm_span.yaml"


def nodes_and_gpus(plan, name: str) -> list[tuple[int, tuple[str, ...]]]:  # type: ignore[no-untyped-def]
    return [(p.cluster_node_rank, p.visible_accelerators) for p in plan.component(name).processes]


ALL8 = tuple(str(i) for i in range(8))


def test_tp16_workers_are_one_process_per_node_grouped_by_worker() -> None:
    plan = plan_from_file(FIXTURE)
    assert plan.launch.is_ray
    infer = plan.component("actor_infer")
    # ROLL: world_size = 32 GPUs // 16 = 2 workers; worker w holds GPUs 16+16w .. 31+16w = nodes 2+2w, 3+2w
    assert nodes_and_gpus(plan, "actor_infer") == [(2, ALL8), (3, ALL8), (4, ALL8), (5, ALL8)]
    assert infer.spanning is not None and infer.spanning.workers == ((0, 1), (2, 3))
    assert infer.spanning.gpus_per_worker == 16
    assert infer.spanning.location is not None and infer.spanning.location.line == 16
    assert plan.component("actor_train").spanning is None  # one GPU per training worker: no grouping
    assert len(plan.cluster.nodes) == 6  # ROLL's num_nodes = ceil((max GPU id + 1) / 8)
    lower(plan)  # the Ray launch mode lowers it (the het component holds all six nodes)


def test_plan_json_names_the_workers_and_round_trips(tmp_path: Path) -> None:
    plan = plan_from_file(FIXTURE)
    data = json.loads(plan_to_json(plan))
    infer = next(c for c in data["components"] if c["name"] == "actor_infer")
    assert infer["workers"] == {"framework": "ROLL", "gpus_per_worker": 16, "processes": [[0, 1], [2, 3]]}
    assert all("workers" not in c for c in data["components"] if c["name"] != "actor_infer")
    run = render_run(plan, tmp_path / "run")
    back = load_plan(run.plan_json)
    assert back.component("actor_infer").spanning == plan.component("actor_infer").spanning
    text = run.script.read_text()
    assert "4 processes form 2 ROLL worker(s) of 16 GPUs" in text
    assert "worker 1 = ranks 2,3: node 4 GPUs 0,1,2,3,4,5,6,7, node 5 GPUs 0,1,2,3,4,5,6,7" in text


def test_ray_cluster_gives_each_spanned_node_its_gpus_and_roll_node_rank(tmp_path: Path) -> None:
    """ROLL finds the node of GPU g as the placement group whose raylet has NODE_RANK == g // 8: every
    raylet of a ROLL plan gets NODE_RANK = its cluster node rank (and all its planned GPUs)."""
    plan = plan_from_file(FIXTURE)
    nodes = ray_nodes(plan)
    assert [(n.rank, n.gpus, n.env.get("NODE_RANK")) for n in nodes] == [(r, ALL8, str(r)) for r in range(6)]
    header = json.loads(plan_to_json(plan))
    for n in nodes:  # the in-job side reads the same from plan.json
        facts = node_facts(header, n.het_group, n.index)
        assert facts["env"]["NODE_RANK"] == str(n.rank) and facts["gpus"] == n.gpus
    assert any("NODE_RANK=5 (roll)" in line for line in ray_summary(plan))


def test_other_formats_get_no_node_rank() -> None:
    plan = plan_from_file(Path(__file__).resolve().parents[1] / "fixtures" / "rlinf-ray-hetero.yaml")
    plan = replace(plan, launch=LaunchSpec("ray", ("python", "x.py")))
    assert all("NODE_RANK" not in n.env for n in ray_nodes(plan))


def test_steps_mode_refuses_with_the_way_out(yml: Yaml, capsys: pytest.CaptureFixture[str]) -> None:
    text = FIXTURE.read_text().replace("launch:\n  mode: ray\n", "launch_unused:\n  mode: ray\n")
    text = text.replace(
        "launch_unused:\n  mode: ray\n  driver: [python, examples/start_rlvr_pipeline.py, "
        "--config_path, conf, --config_name, span]\n",
        "",
    )
    path = yml.write(text, "steps.yaml")
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{yml.where(path, 'list(range(16,48))')}: worker 'actor_infer' needs 16 GPUs per worker" in err
    assert "HINT: use the Ray launch mode" in err
    # the same config with --driver on the command line is the Ray mode: it renders
    assert main(["render", str(path), "-o", str(yml.tmp_path / "out"), "--driver", "--", "python", "main.py"]) == 0
    assert "NODE_RANK=3 (roll)" in (yml.tmp_path / "out" / "job.sbatch").read_text()
    # and `run --local` in the steps mode refuses too (it would start each piece as its own process)
    assert main(["run", str(path), "--local", "--run-dir", str(yml.tmp_path / "local")]) == 2
    assert "spans nodes" in capsys.readouterr().err


def test_misaligned_vllm_worker_is_split_at_the_node_boundary(yml: Yaml) -> None:
    """tp4 on GPUs 2-9: worker 1 (GPUs 6-9) runs its actor on node 0 (GPUs 6,7) and two of vLLM's
    Ray workers on node 1 (GPUs 0,1); before, this was refused as a process spanning nodes."""
    path = yml.write(
        "slurm: {gpus_per_node: 8}\nlaunch: {mode: ray, driver: [python, x.py]}\n"
        "actor_infer:\n  device_mapping: list(range(2,10))\n"
        "  strategy_args: {strategy_name: vllm, strategy_config: {tensor_parallel_size: 4}}\n"
    )
    plan = plan_from_spec(load_spec(path))
    assert nodes_and_gpus(plan, "actor_infer") == [(0, ("2", "3", "4", "5")), (0, ("6", "7")), (1, ("0", "1"))]
    assert plan.component("actor_infer").spanning.workers == ((0,), (1, 2))  # type: ignore[union-attr]


def test_worker_order_follows_its_first_gpu(yml: Yaml) -> None:
    """A worker's first GPU picks the node hosting the worker actor: [8..15, 0..7] puts it on node 1."""
    path = yml.write(
        "slurm: {gpus_per_node: 8}\nlaunch: {mode: ray, driver: [python, x.py]}\n"
        "actor_infer:\n  device_mapping: list(range(8,16))+list(range(0,8))\n"
        "  strategy_args: {strategy_name: vllm, strategy_config: {tensor_parallel_size: 16}}\n"
    )
    plan = plan_from_spec(load_spec(path))
    assert [n for n, _ in nodes_and_gpus(plan, "actor_infer")] == [1, 0]


@pytest.mark.parametrize(
    "strategy, extra", [("hf_infer", "  num_gpus_per_worker: 16\n"), (None, "  num_gpus_per_worker: 16\n")]
)
def test_single_process_strategies_cannot_span(yml: Yaml, strategy: str | None, extra: str) -> None:
    args = f"  strategy_args: {{strategy_name: {strategy}}}\n" if strategy else ""
    path = yml.write("slurm: {gpus_per_node: 8}\nactor_infer:\n  device_mapping: list(range(0,16))\n" + extra + args)
    with pytest.raises(SpecError) as info:
        plan_from_spec(load_spec(path))
    assert "runs a worker as one process on one node" in info.value.message
    assert str(info.value).startswith(f"{yml.where(path, 'list(range(0,16))')}:")


def test_sglang_spans_whole_nodes_only(yml: Yaml) -> None:
    base = (
        "slurm: {gpus_per_node: 8}\nlaunch: {mode: ray, driver: [python, x.py]}\nactor_infer:\n"
        "  device_mapping: MAPPING\n  num_gpus_per_worker: 16\n"
        "  strategy_args: {strategy_name: sglang, strategy_config: {tensor_parallel_size: 16}}\n"
    )
    plan = plan_from_spec(load_spec(yml.write(base.replace("MAPPING", "list(range(0,32))"))))
    assert plan.component("actor_infer").spanning.workers == ((0, 1), (2, 3))  # type: ignore[union-attr]
    path = yml.write(base.replace("MAPPING", "list(range(8,24))"))
    with pytest.raises(SpecError) as info:
        plan_from_spec(load_spec(path))
    assert "worker w on ROLL nodes w*n..w*n+n-1" in info.value.message
