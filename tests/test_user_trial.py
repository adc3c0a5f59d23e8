"""What a new user's trial found (tracebacks on bad paths, a hang on part of a collocation group, unbounded
config reads, relative programs run from another folder, loose option checks): each through the CLI, each
one error line (`hpcplace: error: ...` + HINT), exit code 2, never a traceback."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import pytest

from hpcplace.cli import main
from hpcplace.config import limits
from hpcplace.local.local_backend import LOCAL_RECORD, partial_collocation_problem
from hpcplace.plan.plan import plan_to_json
from hpcplace.plan.planner import plan_from_file

REPO = Path(__file__).resolve().parents[1]
HETERO = str(REPO / "configs" / "hetero-partitions.yaml")
PROFILE = str(REPO / "configs" / "profiles" / "hetero-partitions.yaml")
DEMO = str(REPO / "configs" / "collocated-demo.yaml")
PY = json.dumps(sys.executable)


def error_of(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run the CLI expecting a usage error: exit code 2, one `hpcplace: error:` line (+ its HINT)."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("hpcplace: error: ") and "Traceback" not in err, err
    assert [line for line in err.splitlines() if not line.startswith("  HINT: ")][1:] == [], err
    return err


# ------------------------------------------------------------------------------------------------
# 1. tracebacks on user-given paths


@pytest.mark.parametrize(
    "where, words",
    [
        ("dir", "is a directory"),
        ("missing/best.yaml", "does not exist"),
    ],
)
def test_tune_output_path_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str, words: str) -> None:
    out = tmp_path / where if where != "dir" else tmp_path
    err = error_of(capsys, ["tune", HETERO, "--profile", PROFILE, "-o", str(out)])
    assert f"-o {out}" in err and words in err


def test_tune_output_unwritable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    best = tmp_path / "best.yaml"
    real = Path.write_text

    def refuse(self: Path, *args: object, **kwargs: object) -> int:
        if self == best:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "write_text", refuse)
    err = error_of(capsys, ["tune", HETERO, "--profile", PROFILE, "-o", str(best)])
    assert "cannot write it (Permission denied)" in err


def local_run_dir(tmp_path: Path, plan_text: str) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / LOCAL_RECORD).write_text(json.dumps({"run_id": "t-local-1"}))
    (run / "plan.json").write_text(plan_text)
    return run


@pytest.mark.parametrize(
    "damage, words",
    [
        (lambda text: text[:100], "JSONDecodeError"),
        (
            lambda text: json.dumps({k: v for k, v in json.loads(text).items() if k != "components"}),
            "missing key 'components'",
        ),
        (lambda text: "[]", "not an hpcplace plan"),
    ],
)
def test_exec_into_a_damaged_local_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], damage, words) -> None:  # type: ignore[no-untyped-def]
    run = local_run_dir(tmp_path, damage(plan_to_json(plan_from_file(DEMO))))
    err = error_of(capsys, ["exec", str(run), "--component", "actor", "--rank", "0", "--", "true"])
    assert f"{run / 'plan.json'}" in err and "damaged" in err and words in err


def test_exec_into_a_damaged_local_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = local_run_dir(tmp_path, plan_to_json(plan_from_file(DEMO)))
    (run / LOCAL_RECORD).write_text("[")
    err = error_of(capsys, ["exec", str(run), "--component", "actor", "--rank", "0", "--", "true"])
    assert f"{run / LOCAL_RECORD} is damaged" in err


def test_exec_into_a_healthy_local_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = local_run_dir(tmp_path, plan_to_json(plan_from_file(DEMO)))
    assert main(["exec", str(run), "--component", "actor", "--rank", "0", "--", "true"]) == 0


@pytest.mark.parametrize("command", ["exec", "release", "attach"])
def test_submitted_run_with_a_damaged_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"job_id": "1"}))
    (run / "plan.json").write_text("{")
    extra = {
        "exec": ["--component", "actor", "--rank", "0", "--", "true"],
        "release": [],
        "attach": ["--driver", "--", "true"],
    }[command]
    err = error_of(capsys, [command, str(run), *extra])
    assert f"{run / 'plan.json'} is damaged" in err


def test_compare_refuses_a_folder_that_is_not_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = error_of(capsys, ["compare", str(tmp_path)])
    assert f"{tmp_path} is not a run directory" in err and "nan" not in err
    (tmp_path / "tune.json").mkdir()  # a damaged one
    err = error_of(capsys, ["compare", str(tmp_path)])
    assert "tune.json is unreadable" in err


# ------------------------------------------------------------------------------------------------
# 2. part of a collocation group would wait forever


def test_part_of_a_collocation_group_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    err = error_of(capsys, ["run", DEMO, "--local", "--component", "rollout"])
    assert "collocation group 'colloc-0' (members: actor, rollout)" in err
    assert "HINT: add --component actor too, or drop --component" in err


def test_a_whole_collocation_group_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    plan = plan_from_file(DEMO)
    assert partial_collocation_problem(plan, ()) is None
    assert partial_collocation_problem(plan, ("rollout", "actor")) is None
    assert partial_collocation_problem(plan, ("actor",)) is not None
    assert (
        main(
            [
                "run",
                DEMO,
                "--local",
                "--workdir",
                str(REPO),
                "--component",
                "rollout",
                "--component",
                "actor",
                "--dry-run",
            ]
        )
        == 0
    )
    out = capsys.readouterr()
    assert "[actor 0]" in out.out and "[rollout 1]" in out.out and "warning" not in out.err


# ------------------------------------------------------------------------------------------------
# 3. at most the size cap is read, whatever the input is


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_endless_device_is_refused_at_the_cap(capsys: pytest.CaptureFixture[str], device: str) -> None:
    err = error_of(capsys, ["plan", device])
    assert f"has more than {limits.MAX_CONFIG_BYTES} bytes" in err


def _feed_fifo(path: Path, data: bytes) -> threading.Thread:
    def write() -> None:
        try:
            with open(path, "wb") as fh:
                fh.write(data)
        except BrokenPipeError:  # the reader stopped at the cap
            pass

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def test_a_pipe_is_read_up_to_the_cap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    writer = _feed_fifo(fifo, b"# filler\n" * (limits.MAX_CONFIG_BYTES // 9 + 10))
    err = error_of(capsys, ["plan", str(fifo)])
    writer.join(timeout=10)
    assert f"has more than {limits.MAX_CONFIG_BYTES} bytes" in err and not writer.is_alive()
    writer = _feed_fifo(fifo, Path(DEMO).read_bytes())  # a config that fits still plans from a pipe
    assert main(["plan", str(fifo)]) == 0
    writer.join(timeout=10)
    assert "plan 'collocated-demo'" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------
# 4. relative programs and scripts: from the working directory, checked before anything starts


def test_run_from_another_folder_is_refused_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    err = error_of(capsys, ["run", DEMO, "--local", "-o", "run"])
    assert "component actor" in err and "'examples/collocated_demo.py'" in err
    assert f"runs in {tmp_path}" in err and "--workdir DIR" in err
    assert not (tmp_path / "run").exists()


def workdir_config(tmp_path: Path, command: str) -> Path:
    config = tmp_path / "cfg" / "wd.yaml"
    config.parent.mkdir()
    config.write_text(f"""
name: wd
cluster:
  node_groups:
    - {{label: cpu, partition: cpu, nodes: 1}}
  component_placement:
    job: {{node_group: cpu, placement: "0:0"}}
components:
  job: {{command: {command}}}
""")
    return config


def test_workdir_runs_the_commands_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code = tmp_path / "checkout"
    (code / "tools").mkdir(parents=True)
    (code / "tools" / "where.py").write_text("import os\nopen('where.txt', 'w').write(os.getcwd())\n")
    config = workdir_config(tmp_path, f"[{PY}, tools/where.py]")
    monkeypatch.chdir(tmp_path)
    err = error_of(capsys, ["run", str(config), "--local", "-o", str(tmp_path / "r1")])
    assert "'tools/where.py'" in err and "component job" in err
    assert main(["run", str(config), "--local", "-o", str(tmp_path / "r2"), "--workdir", str(code)]) == 0
    assert (code / "where.txt").read_text() == str(code)


def test_missing_program_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = workdir_config(tmp_path, "[./bin/tool, --go]")
    err = error_of(capsys, ["run", str(config), "--local", "-o", str(tmp_path / "r"), "--workdir", str(tmp_path)])
    assert "component job: './bin/tool' does not exist" in err and f"working directory {tmp_path}" in err
    err = error_of(capsys, ["run", str(config), "--local", "--workdir", str(tmp_path / "nowhere")])
    assert "--workdir" in err and "is not a directory" in err


def test_ray_driver_is_checked_from_the_working_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = error_of(
        capsys,
        [
            "run",
            DEMO,
            "--local",
            "-o",
            str(tmp_path / "r"),
            "--workdir",
            str(tmp_path),
            "--driver",
            "--",
            sys.executable,
            "main.py",
        ],
    )
    assert "the Ray driver: the script 'main.py'" in err and f"runs in {tmp_path}" in err
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------------------------------------
# 5. option checks


@pytest.mark.parametrize("value", ["-5", "0"])
def test_plan_max_nodes_must_be_positive(capsys: pytest.CaptureFixture[str], value: str) -> None:
    err = error_of(capsys, ["plan", DEMO, "--max-nodes", value])
    assert f"--max-nodes {value}" in err


def test_run_grace_must_not_be_negative(capsys: pytest.CaptureFixture[str]) -> None:
    err = error_of(capsys, ["run", DEMO, "--local", "--grace", "-1"])
    assert "--grace -1" in err


def test_svg_dash_is_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["plan", DEMO, "--svg", "-"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("<svg") and out.rstrip().endswith("</svg>")
    assert not (tmp_path / "-").exists()
    err = error_of(capsys, ["plan", DEMO, "--svg", "-", "--json"])
    assert "stdout" in err


@pytest.mark.parametrize(
    "given, said",
    [
        (["--dry-run"], "--dry-run does not apply"),
        (["--component", "actor"], "--component does not apply"),
        (["--dry-run", "--component", "actor"], "--component and --dry-run do not apply"),
    ],
)
def test_ray_mode_names_only_the_option_given(capsys: pytest.CaptureFixture[str], given: list[str], said: str) -> None:
    err = error_of(capsys, ["run", DEMO, "--local", *given, "--driver", "--", "python", "main.py"])
    assert said in err


@pytest.mark.parametrize("tail", ["0", "-3"])
def test_logs_tail_takes_a_positive_number(capsys: pytest.CaptureFixture[str], tmp_path: Path, tail: str) -> None:
    err = error_of(capsys, ["logs", str(tmp_path), "--tail", tail])
    assert f"--tail {tail}: give a positive number of lines" in err


@pytest.mark.parametrize(
    "extra, words",
    [
        (
            "cpus_per_process: 4",
            "node 0 runs processes asking for 32 CPUs (actor 8 x 4), but the group's nodes have 16",
        ),
        (
            "mem_per_process: 16G",
            "node 0 runs processes asking for 131072 MB memory (actor 8 x 16384), but the group's nodes have 64000 MB",
        ),
    ],
)
def test_a_node_asked_for_more_than_its_group_declares_is_refused_at_plan(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, extra: str, words: str
) -> None:
    """Slurm would refuse the step only after the queue wait (More processors requested than permitted)."""
    config = tmp_path / "ov.yaml"
    config.write_text(
        "name: ov\ncluster:\n  node_groups:\n    - {label: a800, partition: a800, nodes: 1, "
        "gpus_per_node: 8, cpus_per_node: 16, mem_per_node: 64000}\n  component_placement:\n"
        f"    actor: '0-7'\ncomponents:\n  actor: {{command: ['true'], {extra}}}\n"
    )
    err = error_of(capsys, ["plan", str(config)])
    assert f"{config}:4:7: node group 'a800': {words}" in err, err


def test_launch_keys_not_indented_under_launch_are_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "rf.yaml"
    config.write_text(
        "cluster:\n  num_nodes: 1\n  component_placement: {actor: all}\nslurm: {partition: a800, "
        "gpus_per_node: 8}\nlaunch:\nmode: ray\ndriver: [python, main.py]\n"
    )
    err = error_of(capsys, ["plan", str(config)])
    assert f"{config}:5:8: `launch`: the block is empty, and its keys driver, mode stand at the top level" in err
    assert "indent them two spaces under `launch:`" in err


@pytest.mark.parametrize(
    "override, hint",
    [
        ("cluster.node_groups.0.nodes=two", "HINT: write a whole number without quotes, e.g. `nodes: 1`"),
        ("cluster.node_groups.0.nodes=0", "HINT: e.g. `nodes: 1`"),
        ("components.actor.offload=maybe", "HINT: write `offload: true` or `offload: false`"),
    ],
)
def test_a_wrong_type_or_range_comes_with_a_hint(capsys: pytest.CaptureFixture[str], override: str, hint: str) -> None:
    assert hint in error_of(capsys, ["plan", DEMO, override])


def test_a_job_name_is_checked_like_the_experiments_name(capsys: pytest.CaptureFixture[str]) -> None:
    """Never silently changed (the script would have run under a slug of it)."""
    err = error_of(capsys, ["plan", DEMO, "--set", "slurm.job_name=$(touch x)"])
    assert "slurm.job_name '$(touch x)' is not a job name" in err and "names use letters" in err


@pytest.mark.parametrize(
    "group, words",
    [
        (
            "{label: r, partition: robot, nodes: 1, hardware: {type: robot, count: 0}}",
            "the hardware count is 0 on every node",
        ),
        ("{label: r, partition: a800, nodes: 1, gpu_type: a800}", "gpu_type 'a800' names GPUs, but the group has none"),
    ],
)
def test_a_group_that_would_hold_nothing_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, group: str, words: str
) -> None:
    config = tmp_path / "g.yaml"
    config.write_text(
        f"name: g\ncluster:\n  node_groups:\n    - {group}\n  component_placement:\n"
        "    a: {node_group: r, placement: '0'}\ncomponents:\n  a: {command: ['true']}\n"
    )
    assert words in error_of(capsys, ["plan", str(config)])
