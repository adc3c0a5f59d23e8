"""The command formats' input (hpcplace/config/formats/command.py): the framework's launch command as
`launch.driver` in a YAML of hpcplace's blocks, or `--driver -- CMD...`; which framework it is; where each
word was written. The readers of each framework are tested in their own files."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcplace.config.formats import load_spec
from hpcplace.config.formats.command import command_from_driver, command_from_view, detect_command_format
from hpcplace.config.yaml_source import load_yaml_text
from hpcplace.errors import SpecError


def driver_view(text: str):  # type: ignore[no-untyped-def]  # a View; the tests only pass it on
    return load_yaml_text(text, "site.yaml").root().require("launch").require("driver")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["python3", "-m", "verl.trainer.main_ppo", "trainer.nnodes=2"], "verl"),
        (["python", "/opt/verl/verl/trainer/main_ppo.py"], "verl"),
        (["uv", "run", "examples/run_grpo.py", "--config", "examples/configs/grpo_math_1B.yaml"], "nemo_rl"),
        (["python3", "-m", "openrlhf.cli.train_ppo_ray", "--actor.num_nodes", "2"], "openrlhf"),
        (["python3", "train.py", "--actor-num-nodes", "1", "--colocate"], "slime"),
        (["python3", "train_async.py", "--rollout-num-gpus=4"], "slime"),
        (["python3", "train.py", "--epochs", "3"], None),  # a generic script name needs one of slime's flags
        (["uv", "run", "examples/run_grpo.py"], "nemo_rl"),  # NeMo-RL's scripts have a default config
        (["uv", "run", "examples/nemo_gym/run_grpo_nemo_gym.py"], "nemo_rl"),
        (["python", "examples/run_foo.py", "--config", "x.yaml"], None),  # not one of NeMo-RL's scripts
        (["python", "main.py", "--config-name", "x"], None),
    ],
)
def test_the_framework_is_told_by_its_entry_point(argv: list[str], expected: str | None) -> None:
    assert detect_command_format(argv) == expected


def test_a_driver_string_is_split_like_a_shell_and_each_word_located() -> None:
    command = command_from_view(
        driver_view("launch:\n  driver: \"python3 -m verl.trainer.main_ppo 'data.path=/a b' trainer.nnodes=2\"\n")
    )
    assert command.argv == ("python3", "-m", "verl.trainer.main_ppo", "data.path=/a b", "trainer.nnodes=2")
    # columns of each word inside the quoted scalar (the scalar's quote is column 11)
    assert [(loc.line, loc.column) for loc in command.locations] == [(2, 12), (2, 20), (2, 23), (2, 45), (2, 62)]


def test_a_driver_list_keeps_each_words_own_location() -> None:
    command = command_from_view(
        driver_view(
            "launch:\n  driver:\n    - python3\n    - -m\n    - openrlhf.cli.train_ppo_ray\n    - --actor.num_nodes\n    - 2\n"
        )
    )
    assert command.argv == ("python3", "-m", "openrlhf.cli.train_ppo_ray", "--actor.num_nodes", "2")
    assert [loc.line for loc in command.locations] == [3, 4, 5, 6, 7]
    assert str(command.error(4, "too many nodes").location) == "site.yaml:7:7"


def test_backslash_newline_joins_lines_as_in_the_scripts_commands_are_kept_in() -> None:
    command = command_from_view(
        driver_view("launch:\n  driver: |\n    python3 train.py \\\n      --actor-num-nodes 2\n")
    )
    assert command.argv == ("python3", "train.py", "--actor-num-nodes", "2")


def test_driver_words_are_located_by_their_column_as_typed() -> None:
    command = command_from_driver(["python3", "-m", "openrlhf.cli.train_ppo_ray", "--actor.num_nodes", "2"])
    assert [str(loc) for loc in command.locations] == [
        "<--driver>:1:1",
        "<--driver>:1:9",
        "<--driver>:1:12",
        "<--driver>:1:39",
        "<--driver>:1:57",
    ]


def test_an_unsplittable_driver_string_is_a_located_error() -> None:
    with pytest.raises(SpecError) as err:
        command_from_view(driver_view('launch:\n  driver: "python3 train.py \'unclosed"\n'))
    assert "cannot split launch.driver" in err.value.message and str(err.value.location) == "site.yaml:2:11"


def test_a_command_format_without_its_command_says_where_to_put_it(tmp_path: Path) -> None:
    config = tmp_path / "site.yaml"
    config.write_text("format: openrlhf\nslurm: {partition: a800}\n")
    with pytest.raises(SpecError) as err:
        load_spec(config)
    assert "format openrlhf: the placement is read from the framework's own command" in err.value.message
    assert err.value.hint is not None and "--driver -- python3" in err.value.hint


def test_the_file_beside_the_command_holds_only_hpcplaces_blocks(tmp_path: Path) -> None:
    config = tmp_path / "site.yaml"
    config.write_text("slurm: {partition: a800}\ntrainer: {nnodes: 2}\n")
    with pytest.raises(SpecError) as err:
        load_spec(config, driver=["python3", "-m", "verl.trainer.main_ppo"])
    assert "trainer" in err.value.message and err.value.location is not None
    assert err.value.location.line == 2


def test_a_command_format_runs_in_the_ray_mode_only(tmp_path: Path) -> None:
    config = tmp_path / "site.yaml"
    config.write_text("launch: {mode: steps}\nslurm: {partition: a800, gpus_per_node: 4}\n")
    with pytest.raises(SpecError) as err:
        load_spec(config, driver=["python3", "train.py", "--actor-num-nodes", "1", "--colocate"])
    assert "the slime format runs in the Ray launch mode only" in err.value.message
    assert err.value.location is not None and err.value.location.line == 1
