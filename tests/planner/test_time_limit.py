"""`slurm.time` reaches `#SBATCH --time=` as written. YAML 1.1 (PyYAML, and OmegaConf, which loads the
frameworks' Hydra configs with it) reads an unquoted `1:00:00` as the number 3600 and `30:00` as 1800,
which sbatch reads as minutes (60 hours, 30 hours); hpcplace keeps such text as written wherever it comes
from: its own loader, `--set`, overrides after the config, Hydra-composed files. So are numbers in a
program's arguments and environment (`010` is not 8 there)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from hpcplace.cli import main
from hpcplace.config.spec import slurm_options
from hpcplace.config.yaml_source import ScalarMark, View, YamlDocument, load_yaml_text, scalar_value
from hpcplace.errors import SpecError
from hpcplace.plan.planner import plan_from_file
from tests.planner.conftest import Yaml

NATIVE = """
    name: t
    cluster:
      node_groups: [{{label: a800, partition: a800, nodes: 1, gpus_per_node: 2}}]
      component_placement: {{actor: all}}
    components: {{actor: {{command: [python, train.py]}}}}
    slurm:
      {option}
"""

RLINF = """
    cluster:
      num_nodes: 1
      component_placement: {actor: all}
    slurm:
      partition: a800
      gpus_per_node: 2
      time: 1:00:00
"""

DEFAULTS = "defaults:\n  - limits\n  - _self_\n"

# what is written -> what sbatch gets (sbatch: minutes, minutes:seconds, hours:minutes:seconds, days-hours...)
TIMES = [
    ("1:00:00", "1:00:00"),
    ("30:00", "30:00"),
    ("00:30:00", "00:30:00"),
    ('"1:00:00"', "1:00:00"),
    ("60", "60"),
    ("2-12:00:00", "2-12:00:00"),
    ("1-0", "1-0"),
    ("010", "010"),
    ("0:30", "0:30"),
    ("190:20:30", "190:20:30"),
]


def plan_time(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """`slurm.time` of `hpcplace plan --json ARGS`."""
    assert main(["plan", "--json", *args]) == 0, capsys.readouterr().err
    return str(json.loads(capsys.readouterr().out)["slurm"]["time"])


def sbatch_time(tmp_path: Path, *args: str) -> list[str]:
    """The `#SBATCH --time=` lines `hpcplace render ARGS` writes."""
    out = tmp_path / "run"
    assert main(["render", *args, "-o", str(out)]) == 0
    return [line for line in (out / "job.sbatch").read_text().splitlines() if line.startswith("#SBATCH --time")]


@pytest.mark.parametrize("written, slurm", TIMES, ids=[t[0] for t in TIMES])
def test_config_time_reaches_sbatch_as_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, yml: Yaml, written: str, slurm: str
) -> None:
    path = yml.write(NATIVE.format(option=f"time: {written}"))
    assert plan_time(capsys, str(path)) == slurm
    assert sbatch_time(tmp_path, str(path)) == [f"#SBATCH --time={slurm}"]


@pytest.mark.parametrize("how", ["--set", "positional"])
@pytest.mark.parametrize("value", ["1:00:00", "30:00", "60"])
def test_override_time_reaches_sbatch_as_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, yml: Yaml, how: str, value: str
) -> None:
    path = yml.write(NATIVE.format(option="time: 10"))
    args = [str(path), "--set", f"slurm.time={value}"] if how == "--set" else [str(path), f"slurm.time={value}"]
    assert plan_time(capsys, *args) == value
    assert sbatch_time(tmp_path, *args) == [f"#SBATCH --time={value}"]


def test_tour_command_of_the_readme_asks_for_one_hour(capsys: pytest.CaptureFixture[str]) -> None:
    """The tour (README, docs/tour.md): `plan rlinf-tour.yaml cluster.num_nodes=4 --set slurm.time=1:00:00`."""
    tour = Path(__file__).resolve().parents[2] / "configs" / "tour" / "rlinf-tour.yaml"
    assert main(["plan", str(tour), "cluster.num_nodes=4", "--set", "slurm.time=1:00:00"]) == 0
    out = capsys.readouterr().out
    assert "  time limit: 1:00:00\n" in out


def test_hydra_composed_time_is_kept_as_written(capsys: pytest.CaptureFixture[str], tmp_path: Path, yml: Yaml) -> None:
    """OmegaConf composes `time: 1:00:00` of a defaults file and of the primary config as 3600."""
    yml.write("slurm:\n  time: 30:00\n  kill_wait: 60\n", name="limits.yaml")
    primary = yml.write(DEFAULTS + textwrap.dedent(RLINF.replace("      time: 1:00:00\n", "")), name="exp.yaml")
    assert plan_time(capsys, str(primary)) == "30:00"
    own = yml.write(DEFAULTS + textwrap.dedent(RLINF), name="own.yaml")
    assert plan_time(capsys, str(own)) == "1:00:00"
    assert plan_time(capsys, str(own), "slurm.time=2:00:00") == "2:00:00"
    assert plan_from_file(own).slurm["kill_wait"] == "60"


def test_rlinf_config_without_composition(capsys: pytest.CaptureFixture[str], yml: Yaml) -> None:
    assert plan_time(capsys, str(yml.write(RLINF))) == "1:00:00"


def test_loader_keeps_base60_text_and_reads_other_numbers() -> None:
    data = load_yaml_text("a: 1:00:00\nb: 30:00\nc: 1:30.5\nd: 60\ne: 1.5\nf: 010\ng: 00:30:00\nh: '1:00'\n").data
    assert data == {
        "a": "1:00:00",
        "b": "30:00",
        "c": "1:30.5",
        "d": 60,
        "e": 1.5,
        "f": 8,
        "g": "00:30:00",
        "h": "1:00",
    }


@pytest.mark.parametrize(
    "text, value",
    [
        ("1:00:00", "1:00:00"),
        (" 30:00", "30:00"),
        ("60", 60),
        ("true", True),
        ("null", None),
        ("a: b", "a: b"),
        ("'[1'", "[1"),
        ("1.5", 1.5),
    ],
)
def test_override_values_read_like_the_loader(text: str, value: object) -> None:
    assert scalar_value(text) == value


def test_an_unclosed_list_override_is_refused_not_split_into_words(
    capsys: pytest.CaptureFixture[str], yml: Yaml
) -> None:
    path = yml.write(NATIVE.format(option="time: 10"))
    assert main(["plan", str(path), "components.actor.command=[python3, x"]) == 2
    err = capsys.readouterr().err
    assert "<override components.actor.command=[python3, x>:1:1: override" in err and "as a list or mapping" in err


@pytest.mark.parametrize(
    "option, message",
    [
        ("kill_wait: 1:30", "slurm.kill_wait '1:30' is not a number of seconds"),
        ("signal_before_limit: 2:00", "'2:00' is not a number of seconds"),
        ("signal_before_limit: USR1@1:00:00", "'1:00:00' is not a number of seconds"),
    ],
)
def test_other_durations_with_colons_are_refused_not_read_as_seconds(
    capsys: pytest.CaptureFixture[str], yml: Yaml, option: str, message: str
) -> None:
    path = yml.write(NATIVE.format(option=option))
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and f"{path}:7:" in err
    written = option.split(": ")[1]
    assert {
        "1:30": "for 1:30 write 90 ",
        "2:00": "for 2:00 write 120 ",
        "USR1@1:00:00": "for 1:00:00 write USR1@3600 ",
    }[written] in err


def located(value: object, raw: str | None) -> View:
    """`slurm:` of a composed document whose `time` is `value`, with `raw` the located text (None: unlocated)."""
    marks = {("slurm",): ScalarMark(1, 1, None)}
    if raw is not None:
        marks[("slurm", "time")] = ScalarMark(2, 9, None, raw, file="limits.yaml")
    doc = YamlDocument("exp.yaml", {"slurm": {"time": value}}, marks)
    return View(doc, ("slurm",), doc.data["slurm"])


def test_number_a_located_text_backs_is_minutes_as_written() -> None:
    assert slurm_options(located(60, "60")) == {"time": "60"}
    assert slurm_options(located(3600, "1:00:00")) == {"time": "1:00:00"}  # as written, not 3600 minutes
    assert slurm_options(located(8, "010")) == {"time": "010"}  # YAML 1.1 octal: sbatch reads 010 as 10
    assert slurm_options(located(45, None)) == {"time": "45"}  # no base-60 number is below 60


@pytest.mark.parametrize("raw", [None, "2:00:00"], ids=["unlocated", "stale-mark"])
def test_number_that_could_be_base60_without_its_text_is_refused(raw: str | None) -> None:
    with pytest.raises(
        SpecError,
        match=r"`slurm.time`: the time limit is the number 3600, from a file hpcplace "
        r"cannot read back",
    ) as info:
        slurm_options(located(3600, raw))
    assert 'time: "1:00:00"' in (info.value.hint or "")


def test_program_arguments_and_environment_values_are_the_text_as_written(yml: Yaml) -> None:
    """YAML 1.1 reads `010` as 8, `0x10` as 16, `1_000` as 1000: a program would get `--seed 8`."""
    config = textwrap.dedent("""
        name: t
        cluster:
          node_groups: [{label: cpu, partition: cpu, nodes: 1}]
          component_placement: {t: {node_group: cpu, placement: "0"}}
        components:
          t:
            command: [prog, 0.10, 1_000, 0x10, 010, .5, 1:30, 5, "007"]
            env: {A: 010, B: 0.10, C: 0x1F, D: 1_000, E: true, F: 1:30}
        """)
    plan = plan_from_file(yml.write(config))
    comp = plan.component("t")
    assert comp.command == ("prog", "0.10", "1_000", "0x10", "010", ".5", "1:30", "5", "007")
    assert comp.env == {"A": "010", "B": "0.10", "C": "0x1F", "D": "1_000", "E": "1", "F": "1:30"}
    overridden = plan_from_file(yml.write(config), overrides=["components.t.env.A=0x20", "components.t.command.1=017"])
    assert overridden.component("t").env["A"] == "0x20" and overridden.component("t").command[1] == "017"
