"""Profile parsing and interpolation, the CLI (tune -o, compare), and the rewrite in the input's format."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from hpcplace.cli import main
from hpcplace.commands.tune_cmd import TUNE_RECORD, read_metrics
from hpcplace.errors import SpecError
from hpcplace.plan.planner import plan_from_file
from hpcplace.tune.tune_profile import Curve, parse_profile

REPO = Path(__file__).resolve().parents[2]


def test_interpolation_rule() -> None:
    c = Curve(((8, 100.0), (16, 60.0)), 0.9)
    assert c.seconds(8) == 100.0 and c.seconds(16) == 60.0
    # between points: speed linear in the count
    assert c.seconds(12) == pytest.approx(1 / ((1 / 100 + 1 / 60) / 2))
    # beyond: the last segment's efficiency, (100/60 - 1) / (16/8 - 1) = 2/3
    assert c.seconds(32) == pytest.approx(60 / (1 + (2 / 3) * (32 / 16 - 1)))
    one = Curve(((4, 40.0),), 0.5)
    assert one.seconds(8) == pytest.approx(40 / 1.5)
    assert one.seconds(2) == pytest.approx(40 / 0.75)
    assert not c.extrapolated_far(32) and c.extrapolated_far(33)
    superlinear = Curve(((1, 100.0), (2, 40.0)), 0.9)  # efficiency clamped to 1 past the points
    assert superlinear.seconds(4) == pytest.approx(20.0)


@pytest.mark.parametrize(
    "text, where, words",
    [
        ("components: {actor: {seconds: {a800: {0: 5}}}}\n", "1:", "count 0"),
        ("components:\n  actor:\n    seconds: {a800: {8: -1}}\n", "3:", "positive"),
        ("components:\n  actor: {seconds: {a800: {8: 5}}, efficiency: 2}\n", "2:", "above 1"),
        ("components:\n  actor: {seconds: {a800: {8: 5}}}\nworkflow: [actor, rollout]\n", "3:", "rollout"),
        ("components:\n  reward: {with: actor}\n", "2:", "no costs"),
        ("components:\n  actor: {seconds: {a800: {8: 5}}, speed: 3}\n", "2:", "speed"),
    ],
)
def test_profile_errors_point_at_the_file(tmp_path: Path, text: str, where: str, words: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        parse_profile(path)
    assert f"{path}:{where}" in str(err.value) and words in str(err.value)


def test_memory_rule_from_model_size(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        "components:\n  actor: {seconds: {a800: {8: 5}}, params_b: 7, bytes_per_param: 16, model_parallel: 2}\n"
    )
    assert parse_profile(path).components["actor"].memory_gb == 7 * 16 / 2


def test_tune_writes_the_winner_in_the_native_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "hetero.yaml"
    shutil.copy(REPO / "configs" / "hetero-partitions.yaml", config)
    best = tmp_path / "best.yaml"
    rc = main(
        [
            "tune",
            str(config),
            "--profile",
            str(REPO / "configs" / "profiles" / "hetero-partitions.yaml"),
            "--top",
            "3",
            "-o",
            str(best),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "#1 " in out and "#3 " in out and "why:" in out and "baseline" in out
    original, written = config.read_text().splitlines(), best.read_text().splitlines()
    assert written[:15] == original[:15]  # comments and node groups as written
    assert written[-8:] == original[-8:]  # components and slurm blocks untouched
    plan = plan_from_file(best)
    assert {c.name for c in plan.components} == {"agent", "env", "rollout", "inference", "actor"}
    first = out.split("#1 ")[1].splitlines()[0]
    for stage in first.split()[-1:]:
        assert "@" in stage


def test_tune_rlinf_stays_rlinf(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "rl.yaml"
    config.write_text(
        textwrap.dedent("""\
        # RLinf: comments stay
        cluster:
          num_nodes: 3
          component_placement:
            actor: {node_group: a800, placement: 0-15}   # trainer
            rollout: {node_group: "4090", placement: 0-3}
          node_groups:
            - {label: a800, node_ranks: 0-1}
            - {label: "4090", node_ranks: 2}
        slurm:
          node_groups:
            a800: {partition: a800, gpus_per_node: 8, gpu_type: a800}
            "4090": {partition: rtx4090, gpus_per_node: 4, gpu_type: rtx4090}
        """)
    )
    profile = tmp_path / "p.yaml"
    profile.write_text(
        textwrap.dedent("""\
        batches: 4
        workflow: [rollout, actor]
        components:
          rollout: {seconds: {rtx4090: {4: 20.0}, a800: {8: 30.0}}}
          actor: {seconds: {a800: {8: 40.0, 16: 22.0}}}
        """)
    )
    best = tmp_path / "best.yaml"
    assert main(["tune", str(config), "--profile", str(profile), "-o", str(best)]) == 0
    out = capsys.readouterr().out
    assert "rollout@4090:4 | actor@a800:16" in out.split("#1 ")[1].splitlines()[0]
    text = best.read_text()
    assert text.startswith("# RLinf: comments stay\ncluster:\n  num_nodes: 3\n")
    assert '    rollout: {node_group: "4090", placement: "0-3"}' in text
    assert "  node_groups:\n    - {label: a800, node_ranks: 0-1}" in text
    assert plan_from_file(best).source_format == "rlinf"


def test_tune_refuses_a_profile_without_a_component(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("components:\n  actor: {seconds: {a800: {8: 5}}}\n")
    rc = main(["tune", str(REPO / "configs" / "hetero-partitions.yaml"), "--profile", str(profile)])
    err = capsys.readouterr().err
    assert rc == 2 and "has no costs in the profile" in err and "HINT" in err


def test_compare_reads_metric_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run-a"
    (run / "logs").mkdir(parents=True)
    (run / TUNE_RECORD).write_text(json.dumps({"variant": "actor@a800:8", "predicted_iteration_s": 2.0}))
    (run / "logs" / "actor.0.out").write_text(
        "start\nhpcplace-metric iteration_s=3.0 step=1\n"
        "[rank 1] hpcplace-metric iteration_s=5.0\nhpcplace-metric bad=1\n"
    )
    (run / "logs" / "actor.1.out").write_text("hpcplace-metric iteration_s=4.0\niteration_s=99\n")
    assert read_metrics(run) == [3.0, 5.0, 4.0]
    assert main(["compare", str(run)]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert line.split()[1:5] == ["2.000", "4.000", "3", "2.00"] and line.endswith("actor@a800:8")


def test_expert_parallel_groups_and_engines_widen_the_unit_the_fabric_check_sees(tmp_path: Path) -> None:
    """tune counts a component in whole expert-parallel groups (ETP x EP x PP GPUs) and whole engines: a unit
    is what must fit a block, so a placement whose MoE all-to-all crosses a rack is never taken for one that fits."""
    from hpcplace.config.formats import load_spec
    from hpcplace.plan.planner import plan_from_spec
    from hpcplace.tune.tune_config import build_setup

    config = tmp_path / "moe.yaml"
    profile = tmp_path / "p.yaml"
    profile.write_text("components:\n  trainer: {seconds: {gb200: {8: 10.0, 16: 6.0}}}\n")
    units = {}
    for settings in ("tp: 2", "tp: 2, ep: 4", "tp: 2, ep: 4, etp: 1", "tp: 2, gpus_per_engine: 6"):
        config.write_text(
            "name: moe\ncluster:\n  node_groups:\n    - {label: gb200, partition: gb200, nodes: 6, gpus_per_node: 4,"
            " gpu_type: gb200, topology: {block: 2}}\n  component_placement:\n    trainer: 0-23\n"
            f"components:\n  trainer: {{command: [python3, x.py], {settings}}}\n"
        )
        spec = load_spec(str(config))
        setup = build_setup(spec, plan_from_spec(spec), parse_profile(profile))
        (group,) = setup.problem.groups
        units[settings] = (setup.problem.chain[0].unit, group.fabric_unit)
    assert units == {
        "tp: 2": (2, 8),
        "tp: 2, ep: 4": (8, 8),  # ETP (= TP) 2 x EP 4: fits a block of 2 nodes x 4 GPUs
        "tp: 2, ep: 4, etp: 1": (4, 8),
        "tp: 2, gpus_per_engine: 6": (6, 8),  # an engine of 6 GPUs never divides a block of 8: it crosses
    }
