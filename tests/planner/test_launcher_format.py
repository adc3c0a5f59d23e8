"""`torchrun`/`deepspeed` commands (hpcplace/config/formats/launcher.py) planned as steps-mode ranks, and the
message for a command whose entry point no format knows (formats/entry_point.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcplace.config.formats import load_spec
from hpcplace.config.formats.entry_point import entry_point_index
from hpcplace.errors import SpecError
from hpcplace.plan.plan import Plan
from hpcplace.plan.planner import plan_from_spec

SITE = "slurm: {partition: a800, gpus_per_node: 8}\n"


def plan(tmp_path: Path, command: str, site: str = SITE) -> Plan:
    path = tmp_path / "site.yaml"
    path.write_text(site, encoding="utf-8")
    return plan_from_spec(load_spec(str(path), driver=command.split()))


def refused(tmp_path: Path, command: str, site: str = SITE) -> SpecError:
    with pytest.raises(SpecError) as err:
        plan(tmp_path, command, site)
    return err.value


def column(err: SpecError) -> int:
    assert err.location is not None and err.location.path == "<--driver>"
    return err.location.column


def ranks(p: Plan) -> list[tuple[int, int, int, int]]:
    """(rank, node, local rank, visible GPUs) of each process."""
    (comp,) = p.components
    return [(x.rank, x.cluster_node_rank, x.local_rank, len(x.visible_accelerators)) for x in comp.processes]


def test_verl_sft_under_torchrun_is_one_rank_per_process_in_the_steps_mode(tmp_path: Path) -> None:
    p = plan(
        tmp_path,
        "torchrun --standalone --nnodes=1 --nproc_per_node=8 -m verl.trainer.sft_trainer data.train_files=a.parquet",
    )
    assert p.source_format == "torchrun" and not p.launch.is_ray and p.launch.driver == ()
    (comp,) = p.components
    assert comp.command == ("python", "-u", "-m", "verl.trainer.sft_trainer", "data.train_files=a.parquet")
    assert ranks(p) == [(r, 0, r, 8) for r in range(8)]  # each rank sees its node's GPUs, as under torchrun


def test_torchrun_on_two_nodes_counts_ranks_node_by_node(tmp_path: Path) -> None:
    p = plan(tmp_path, "torchrun --nnodes 2 --nproc-per-node 4 --node_rank=0 train.py --lr 1")
    assert [g.num_nodes for g in p.cluster.node_groups] == [2]
    assert ranks(p) == [(r, r // 4, r % 4, 8) for r in range(8)]
    (comp,) = p.components
    assert comp.command == ("python", "-u", "train.py", "--lr", "1")
    assert any("--node-rank is not used" in w for w in p.warnings)


def test_torchrun_gpu_per_node_counts_the_site_gpus_and_no_python_runs_the_script(tmp_path: Path) -> None:
    p = plan(tmp_path, "torchrun --nproc-per-node=gpu --no-python ./run.sh x", "slurm: {gpus_per_node: 4}\n")
    assert ranks(p) == [(r, 0, r, 4) for r in range(4)]
    assert p.components[0].command == ("./run.sh", "x")


@pytest.mark.parametrize(
    ("command", "word", "says"),
    [
        ("torchrun --nnodes=1:4 --nproc_per_node=8 t.py", 2, "an elastic range"),
        ("torchrun --standalone --nnodes=2 t.py", 2, "never meet"),
        ("torchrun --nproc_per_node=16 t.py", 2, "a node has 8 GPUs"),
        ("torchrun --nproc_per_node=cpu t.py", 2, "one process per CPU core"),
        ("torchrun --nprocs=2 t.py", 2, "unrecognized argument --nprocs"),
        ("torchrun --nproc_per_node=2", 2, "required: training_script"),
        ("deepspeed --hostfile hosts --module openrlhf.cli.train_sft", 2, "read from that file at run time"),
        ("deepspeed --num_nodes 2 --module openrlhf.cli.train_sft", 2, "Num nodes is >1"),
        ("deepspeed --num_gpus 2 --include localhost:0,1 t.py", 4, "Cannot specify num_nodes/gpus"),
        ("deepspeed --include localhost:2,3 t.py", 2, "GPUs 2,3"),
        ("deepspeed --include worker-1:0 t.py", 2, "Hostname 'worker-1' not found"),
    ],
)
def test_what_the_launchers_refuse_is_refused_at_its_word(tmp_path: Path, command: str, word: int, says: str) -> None:
    err = refused(tmp_path, command)
    words = command.split()
    assert says in err.message
    assert column(err) == len(" ".join(words[: word - 1])) + 2


def test_a_launcher_under_uv_run_runs_each_rank_under_it_too(tmp_path: Path) -> None:
    """`uv run [OPTIONS] torchrun ...` (NeMo-RL's and verl's docs start SFT so): the launcher is the program
    after uv's options, and each rank runs `uv run [OPTIONS] python -u ...` (uv's environment, as torchrun's
    own Python under uv would be)."""
    p = plan(tmp_path, "uv run --extra fsdp torchrun --nnodes=2 --nproc_per_node=4 -m verl.trainer.sft_trainer x=1")
    assert p.source_format == "torchrun" and ranks(p) == [(r, r // 4, r % 4, 8) for r in range(8)]
    (comp,) = p.components
    assert comp.command == ("uv", "run", "--extra", "fsdp", "python", "-u", "-m", "verl.trainer.sft_trainer", "x=1")
    assert any("`uv run --extra fsdp` runs torchrun" in w for w in p.warnings)
    p = plan(tmp_path, "uv run deepspeed --num_gpus 2 --no_python ./train.sh")
    (comp,) = p.components
    assert p.source_format == "deepspeed" and comp.command[:3] == ("uv", "run", "./train.sh")
    err = refused(tmp_path, "uv run torchrun --nnodes=2 --bogus=1 train.py")
    assert column(err) == len("uv run torchrun --nnodes=2 ") + 1 and "unrecognized argument --bogus" in err.message


def test_openrlhf_sft_under_deepspeed_takes_the_node_gpus_or_num_gpus(tmp_path: Path) -> None:
    p = plan(tmp_path, "deepspeed --module openrlhf.cli.train_sft --ds.zero_stage 2")
    assert p.source_format == "deepspeed" and ranks(p) == [(r, 0, r, 8) for r in range(8)]
    assert p.components[0].command == ("python", "-u", "-m", "openrlhf.cli.train_sft", "--ds.zero_stage", "2")
    assert len(ranks(plan(tmp_path, "deepspeed --num_gpu 2 --module openrlhf.cli.train_dpo"))) == 2  # a prefix
    assert len(ranks(plan(tmp_path, "deepspeed --exclude localhost:7 t.py"))) == 7


def test_a_launcher_command_runs_in_the_steps_mode_only(tmp_path: Path) -> None:
    err = refused(tmp_path, "torchrun t.py", "launch: {mode: ray}\nslurm: {gpus_per_node: 8}\n")
    assert "runs in the steps launch mode only" in err.message


def test_a_launcher_format_stated_for_another_command_is_refused_at_its_first_word(tmp_path: Path) -> None:
    path = tmp_path / "site.yaml"
    path.write_text("format: torchrun\n" + SITE, encoding="utf-8")
    with pytest.raises(SpecError) as err:
        load_spec(str(path), driver=["python", "-m", "x.y"])
    assert "starts with 'python'" in err.value.message and column(err.value) == 1


def test_an_unknown_entry_point_is_named_with_what_each_format_knows(tmp_path: Path) -> None:
    err = refused(tmp_path, "python3 -u -m mylab.train --nodes 2")
    assert "entry point 'mylab.train'" in err.message and column(err) == len("python3 -u -m ") + 1
    assert (
        "verl: verl.trainer.main_*, verl.trainer.sft_trainer_ray, verl.experimental.fully_async_policy.fully_async_main"
        in err.message
        and "openrlhf: openrlhf.cli.train_*[.py]" in err.message
    )
    assert err.hint is not None and "format: <name>" in err.hint and "--format" in err.hint


def test_an_unknown_entry_point_in_launch_driver_points_at_its_word(tmp_path: Path) -> None:
    path = tmp_path / "site.yaml"
    path.write_text("slurm: {gpus_per_node: 8}\nlaunch:\n  driver: [ray, job, submit, --, python3, my_main.py]\n")
    with pytest.raises(SpecError) as err:
        load_spec(str(path))
    assert "entry point 'my_main.py'" in err.value.message
    assert err.value.location is not None and (err.value.location.line, err.value.location.column) == (3, 43)


@pytest.mark.parametrize(
    ("argv", "index"),
    [
        (["python3", "-m", "verl.trainer.main_ppo", "x=1"], 2),
        (["python", "examples/run_grpo.py", "--config", "a.yaml"], 1),
        (["torchrun", "--nproc_per_node=8", "-m", "mod"], 3),
        (["ray", "job", "submit", "--address", "x", "--", "python3", "train.py"], 7),
        (["deepspeed", "--num_gpus", "2", "script.py"], 3),
        (["bash", "run.sh"], 0),
        (["uv", "run", "--extra", "vllm", "--no-sync", "pytest", "-x"], 5),
        (["uv", "run", "examples/run_grpo.py", "--config", "a.yaml"], 2),
    ],
)
def test_the_entry_point_word(argv: list[str], index: int) -> None:
    assert entry_point_index(argv) == index
