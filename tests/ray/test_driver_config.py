"""The plan describes the config the framework's Ray driver runs (hpcplace.plan.driver_config), through the
CLI as a user types it: an override given to hpcplace but not to the driver, or one given to the driver that
moves the placement but not to hpcplace, is refused by the job commands (`plan` warns); an AReaL file that
carries hpcplace's blocks is refused when the driver reads it, as AReaL's own loader refuses it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcplace.cli import main

REPO = Path(__file__).resolve().parents[2]
TOUR = str(REPO / "configs" / "tour" / "rlinf-tour.yaml")
AREAL = REPO / "configs" / "areal-colocated.yaml"
DRIVER = ["--driver", "--", "python", "main.py", "--config-name", "rlinf-tour"]


def render(capsys: pytest.CaptureFixture[str], tmp_path: Path, *argv: str) -> tuple[int, str]:
    code = main(["render", *argv[:1], "-o", str(tmp_path / "run"), *argv[1:]])
    return code, capsys.readouterr().err


def test_an_override_the_driver_is_not_given_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, err = render(capsys, tmp_path, TOUR, "cluster.num_nodes=1", *DRIVER)
    assert code == 2 and "<override cluster.num_nodes=1>:1:1: override 'cluster.num_nodes=1' changes the config" in err
    assert "give it to the driver too (`--driver -- ... cluster.num_nodes=1`)" in err
    assert not (tmp_path / "run").exists()
    assert main(["plan", TOUR, "cluster.num_nodes=1", *DRIVER]) == 0  # `plan` previews it, with a warning
    out = capsys.readouterr()
    assert "warning: <override cluster.num_nodes=1>:1:1: override" in out.out + out.err


def test_an_override_both_are_given_renders(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, err = render(
        capsys, tmp_path, TOUR, "cluster.num_nodes=1", "--set", "slurm.time=10", *DRIVER, "cluster.num_nodes=1"
    )
    assert code == 0, err
    assert "cluster.num_nodes=1" in (tmp_path / "run" / "job.sbatch").read_text()  # the driver's argv, reviewable


def test_hpcplace_own_keys_are_never_asked_of_the_driver(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, err = render(capsys, tmp_path, TOUR, "slurm.partition=a800", "+launch.join_timeout=60", *DRIVER)
    assert code == 0, err


def test_a_driver_override_that_moves_the_placement_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, err = render(capsys, tmp_path, TOUR, *DRIVER, "cluster.num_nodes=1")
    assert code == 2 and "the Ray driver is given cluster.num_nodes=1, which changes the placement" in err
    assert f"hpcplace render {TOUR} cluster.num_nodes=1 --driver -- ..." in err


@pytest.mark.parametrize("argument", ["+runner.seed=3", "algorithm.unknown_key=1", "rollout.tensor_parallel_size=2"])
def test_a_driver_override_that_leaves_the_placement_renders(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argument: str
) -> None:
    """A new key, a key hpcplace cannot apply (the framework's defaults hold it), the planned value itself."""
    code, err = render(capsys, tmp_path, TOUR, *DRIVER, argument)
    assert code == 0, err


def areal_files(tmp_path: Path) -> tuple[Path, Path]:
    """An AReaL config as AReaL reads it, and a file beside it that adds hpcplace's blocks through defaults:."""
    text = AREAL.read_text()
    own = text.index("\nslurm:")
    framework = tmp_path / "grpo.yaml"
    framework.write_text(text[: own + 1], encoding="utf-8")
    job = tmp_path / "job.yaml"
    job.write_text("defaults:\n  - grpo\n  - _self_\n" + text[own + 1 :], encoding="utf-8")
    return framework, job


def test_areal_reading_a_file_with_hpcplace_blocks_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    driver = ["--driver", "--", "python", "rl.py", "--config", str(AREAL)]
    code, err = render(capsys, tmp_path, str(AREAL), *driver)
    assert code == 2 and f"{AREAL}:1:1: the Ray driver reads {AREAL}, whose `slurm:`" in err
    assert "add ~slurm to the driver" in err and "defaults:" in err
    code, err = render(capsys, tmp_path, str(AREAL), *driver, "~slurm")  # the hint: the blocks it has
    assert code == 0, err


def test_areal_beside_a_job_file_renders_and_areal_reads_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    framework, job = areal_files(tmp_path)
    code, err = render(capsys, tmp_path, str(job), "--driver", "--", "python", "rl.py", "--config", str(framework))
    assert code == 0, err
    # AReaL's own loader (its keys merged into its config class) takes the unchanged file, and the hint's form
    cli_args = pytest.importorskip("areal.api.cli_args")
    for argv in (["--config", str(framework)], ["--config", str(AREAL), "~slurm"]):
        cfg, _ = cli_args.parse_cli_args(argv)
        assert cli_args.to_structured_cfg(cfg, cli_args.GRPOConfig).cluster.n_gpus_per_node == 8
    with pytest.raises(Exception, match="Key 'slurm' not in 'GRPOConfig'"):  # what the refusal spares the job
        cfg, _ = cli_args.parse_cli_args(["--config", str(AREAL)])
        cli_args.to_structured_cfg(cfg, cli_args.GRPOConfig)
