"""`hpcplace attach | exec | shell | release` and launch.hold without a cluster: the launch block,
the rendered hold sections, the steps' srun argv (the command never on it), the `--rank` env
computation (exactly the rank's own task's), the local backend's exec, and the CLI's refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hpcplace.cli import main
from hpcplace.errors import SpecError
from hpcplace.plan.plan import plan_to_json
from hpcplace.plan.planner import plan_from_file
from hpcplace.runtime.errors import ShimError
from hpcplace.runtime.ray_node import RAY_BLOCK, block_ports, ray_start_argv
from hpcplace.runtime.shim import Options, resolve
from hpcplace.slurm import attach
from hpcplace.slurm.render import render_script
from hpcplace.slurm.slurm_job import lower
from tests.runtime.conftest import LAB_CONFIG, step_envs, write_plan

REPO = Path(__file__).resolve().parents[2]
RAY_HOLD = """
name: ray-hold
cluster:
  node_groups:
    - {label: a800, partition: a800, nodes: 2, gpus_per_node: 8, gpu_type: a800}
    - {label: cpu, partition: cpu, nodes: 1}
  component_placement:
    actor: {node_group: a800, placement: "0-15"}
    env: {node_group: cpu, placement: "0"}
launch: {mode: ray, hold: true, dashboard: true}
"""


def config(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# ---- the launch block ------------------------------------------------------------------------


def test_hold_and_dashboard_in_the_launch_block(tmp_path: Path) -> None:
    plan = plan_from_file(config(tmp_path, RAY_HOLD))
    assert plan.launch.hold and plan.launch.dashboard and plan.launch.is_ray and plan.launch.driver == ()
    record = json.loads(plan_to_json(plan))["launch"]
    assert record["hold"] is True and record["dashboard"] is True
    plain = plan_from_file(REPO / "configs" / "hetero-partitions.yaml")
    assert "launch" not in json.loads(plan_to_json(plain))  # nothing new in a plan that does not hold


@pytest.mark.parametrize(
    "block, message",
    [
        ("launch: {hold: yes please}", "launch.hold must be true or false"),
        ("launch: {mode: steps, dashboard: true}", "launch.dashboard is the Ray dashboard: ray mode only"),
    ],
)
def test_launch_block_errors(tmp_path: Path, block: str, message: str) -> None:
    text = (REPO / "configs" / "hetero-partitions.yaml").read_text() + "\n" + block + "\n"
    with pytest.raises(SpecError) as err:
        plan_from_file(config(tmp_path, text))
    assert message in str(err.value) and str(err.value).startswith(str(tmp_path / "c.yaml") + ":")


# ---- rendering -----------------------------------------------------------------------------


def bash_ok(text: str, tmp_path: Path) -> None:
    script = tmp_path / "job.sbatch"
    script.write_text(text, encoding="utf-8")
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True).returncode == 0


def test_ray_hold_without_driver_renders_no_driver_step(tmp_path: Path) -> None:
    text = render_script(plan_from_file(config(tmp_path, RAY_HOLD)), "/shared/run")
    bash_ok(text, tmp_path)
    assert "--ray-driver" not in text and "hp_driver_pid=\n" in text
    assert 'hp_release="$hp_run_dir/.release-$SLURM_JOB_ID"' in text
    assert "while [[ ! -e $hp_release ]]; do" in text and "hp_hold_begin" in text
    assert "a Ray node stopped while the job was held" in text


def test_steps_hold_waits_after_the_steps_and_skips_commandless_components(tmp_path: Path) -> None:
    plain = plan_from_file(REPO / "configs" / "hetero-partitions.yaml")
    from dataclasses import replace

    from hpcplace.config.launch import with_hold

    held = replace(plain, launch=with_hold(plain.launch, True))
    text = render_script(held, "/shared/run")
    bash_ok(text, tmp_path)
    wait = text.index('hp_log "all steps finished"')
    assert text.index("        hp_hold_begin\n", wait) < text.index('exit "$hp_rc"', wait)
    assert (
        "if ((hp_rc == 0)); then\n    if [[ ! -e $hp_release ]]; then\n        hp_hold_begin" in text
    )  # failed: no hold
    assert "while hp_any_running && [[ ! -e $hp_release ]]; do" in text  # a release ends running components too
    assert "hold" not in render_script(plain, "/shared/run").split("#SBATCH")[-1]
    # a held job may hold a component that has no command: it is not started
    text = (REPO / "configs" / "hetero-partitions.yaml").read_text()
    bare = plan_from_file(config(tmp_path, text.split("components:")[0] + "launch: {hold: true}\n"))
    script = render_script(bare, "/shared/run")
    assert "--component" not in script.split("# ---- launch.hold")[0].split("hp_preflight_report")[-1]
    assert "has no command: not started" in script


# ---- steps into the job (pure) --------------------------------------------------------------


def live(tmp_path: Path, text: str) -> attach.LiveRun:
    plan = plan_from_file(config(tmp_path, text))
    return attach.LiveRun(tmp_path / "run", "4711", plan, ("/venv/bin/hpcplace-run", "--chdir", "/work/x"))


def test_exec_argv_targets_the_ranks_node_and_reads_the_command_from_a_file(tmp_path: Path) -> None:
    run = live(tmp_path, RAY_HOLD)
    target = attach.rank_target(run.plan, "actor", 11)  # GPU 11 = node 1 of a800
    argv = attach.exec_argv(run, target, tmp_path / "exec-1.json", component="actor", rank=11)
    assert argv[:2] == ["srun", "--jobid=4711"]
    assert "--het-group=0" in argv and "--relative=1" in argv and "--overlap" in argv and "--ntasks=1" in argv
    assert "--gres=gpu:a800:8" in argv and "--disable-status" in argv and "--quit-on-interrupt" not in argv
    i = argv.index("/venv/bin/hpcplace-run")
    assert argv[i:] == [
        "/venv/bin/hpcplace-run",
        "--chdir",
        "/work/x",
        "--plan",
        str(run.plan_path),
        "--component",
        "actor",
        "--rank",
        "11",
        "--argv",
        str(tmp_path / "exec-1.json"),
    ]
    node = attach.exec_argv(
        run, attach.node_target(run.plan, 2), tmp_path / "e.json", component=None, rank=None, pty=True
    )
    assert "--het-group=1" in node and "--relative=0" in node and "--pty" in node
    assert [a for a in node if a.startswith("--gres")] == ["--gres=none"]  # the cpu node has no GPU: none, said
    assert node[-6:] == ["--on-node", "2", "--plan", str(run.plan_path), "--argv", str(tmp_path / "e.json")]
    driver = attach.driver_argv(run, tmp_path / "d.json")
    assert "--relative=0" in driver and "--het-group=0" in driver and "--job-name=attach" in driver
    assert driver[-5:] == ["--ray-driver", "--plan", str(run.plan_path), "--argv", str(tmp_path / "d.json")]
    assert lower(run.plan).is_het


def test_targets_refuse_what_the_plan_lacks(tmp_path: Path) -> None:
    run = live(tmp_path, RAY_HOLD)
    with pytest.raises(SpecError, match="no rank 16"):
        attach.rank_target(run.plan, "actor", 16)
    with pytest.raises(SpecError, match="no component 'critic'"):
        attach.rank_target(run.plan, "critic", 0)
    with pytest.raises(SpecError, match="no node rank 3"):
        attach.node_target(run.plan, 3)


def test_command_files_and_driver_logs_are_never_shared(tmp_path: Path) -> None:
    first = attach.write_command(tmp_path, "exec", ["python", "-c", "print('a; b')", ":"])
    second = attach.write_command(tmp_path, "exec", ["true"])
    assert first != second and json.loads(first.read_text()) == ["python", "-c", "print('a; b')", ":"]
    assert [attach.claim_driver_log(tmp_path)[0] for _ in range(3)] == [1, 2, 3]
    with pytest.raises(SpecError):
        attach.write_command(tmp_path, "exec", ["a\0b"])


def test_step_environment_drops_leaked_job_variables() -> None:
    env = attach.step_environment(
        {
            "SLURM_JOB_ID": "1",
            "SLURM_STEP_ID": "2",
            "SLURM_CONF": "/etc/slurm.conf",
            "CUDA_VISIBLE_DEVICES": "0",
            "SLURM_JOB_GPUS": "0",
            "PATH": "/bin",
        }
    )
    assert env == {"SLURM_CONF": "/etc/slurm.conf", "PATH": "/bin"}


# ---- the `--rank` computation in the job (shim) -------------------------------------------

NODES_TXT = "0 0 a800-1\n0 1 a800-2\n1 0 rtx4090-1\n2 0 cpu-1\n"


def attached_env(host: str, nodelist: str, cuda: str) -> dict[str, str]:
    """What an `srun --jobid=120 --het-group=G ...` step from outside the job gets (recorded on Slurm
    22.05: only its own component's node list, no *_HET_GROUP_* variable, the leader's job id)."""
    return {
        "SLURM_JOB_ID": "120",
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURMD_NODENAME": host,
        "SLURM_STEP_NUM_TASKS": "1",
        "SLURM_STEP_ID": "9",
        "CUDA_VISIBLE_DEVICES": cuda,
        "GPU_DEVICE_ORDINAL": cuda,
        "SLURM_STEP_GPUS": cuda,
    }


@pytest.fixture()
def lab_run(tmp_path: Path) -> Path:
    plan = write_plan(tmp_path, LAB_CONFIG)
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "nodes.txt").write_text(NODES_TXT)
    return plan


def options(plan: Path, component: str, rank: int | None) -> Options:
    return Options(
        plan=str(plan),
        component=component,
        command=("true",),
        chdir=None,
        print_env=True,
        verify=False,
        verbose=False,
        rank=rank,
    )


@pytest.mark.parametrize(
    "component, rank, host, nodelist, cuda, steps",
    [
        ("actor", 3, "a800-2", "a800-[1-2]", "0,1,2,3,4,5,6,7", "0"),
        ("span01", 4, "rtx4090-1", "rtx4090-1", "0,1,2,3", "0,1"),
    ],
)
def test_exec_rank_env_is_exactly_the_ranks_own(
    lab_run: Path, component: str, rank: int, host: str, nodelist: str, cuda: str, steps: str
) -> None:
    own = resolve(options(lab_run, component, None), step_envs(steps)[rank]).changes
    exec_ = resolve(options(lab_run, component, rank), attached_env(host, nodelist, cuda)).changes
    assert exec_ == own
    assert exec_["RANK"] == str(rank)


def test_exec_rank_uses_the_published_master_port(lab_run: Path) -> None:
    from hpcplace.runtime.master_port import port_file

    path = Path(port_file(str(lab_run.parent), "120", "actor"))
    path.parent.mkdir(parents=True)
    path.write_text("29999")
    got = resolve(options(lab_run, "actor", 2), attached_env("a800-2", "a800-[1-2]", "0,1")).changes
    assert got["MASTER_PORT"] == "29999" and got["MASTER_ADDR"] == "a800-1"


def test_exec_rank_on_the_wrong_node_is_refused(lab_run: Path) -> None:
    with pytest.raises(ShimError, match=r"rank 3 of 'actor' lives on het group 0 node 1 \(a800-2\)"):
        resolve(options(lab_run, "actor", 3), attached_env("a800-1", "a800-[1-2]", "0,1"))
    (lab_run.parent / "logs" / "nodes.txt").unlink()
    with pytest.raises(ShimError, match=r"nodes\.txt"):
        resolve(options(lab_run, "actor", 3), attached_env("a800-2", "a800-[1-2]", "0,1"))


def test_shim_reads_argv_file(lab_run: Path, tmp_path: Path) -> None:
    from hpcplace.runtime.shim import parse_args

    file = tmp_path / "cmd.json"
    file.write_text(json.dumps(["python", "-c", "x; y"]))
    got = parse_args(["--plan", str(lab_run), "--component", "actor", "--rank", "1", "--argv", str(file)])
    assert got is not None and got.command == ("python", "-c", "x; y") and got.rank == 1
    with pytest.raises(ShimError, match="not a rank"):
        parse_args(["--plan", "p", "--component", "a", "--rank", "-1"])
    file.write_text("[]")
    with pytest.raises(ShimError, match="holds no command"):
        parse_args(["--plan", "p", "--component", "a", "--argv", str(file)])


# ---- dashboard ---------------------------------------------------------------------------------


def test_dashboard_port_is_in_the_heads_block() -> None:
    ports = block_ports(30000, head=True, client=False)
    assert ports["gcs"] == 30000 and 30000 < ports["dashboard"] < 30000 + RAY_BLOCK
    assert "dashboard" not in block_ports(30000, head=False, client=False)  # the head's alone
    node = {"label": "a", "partition": "p", "gpu_type": None, "rank": 0, "num_cpus": 1, "gpus": []}
    argv = ray_start_argv(
        "py", node, head=True, port=30000, address=None, temp_dir="t", spill_dir="s", dashboard_port=30002
    )
    assert "--include-dashboard=true" in argv and "--dashboard-port=30002" in argv
    assert "--include-dashboard=false" in ray_start_argv(
        "py", node, head=True, port=1, address=None, temp_dir="t", spill_dir="s"
    )


def test_status_lines_of_a_held_job(tmp_path: Path) -> None:
    plan = plan_from_file(config(tmp_path, RAY_HOLD))
    head = {"host": "a800-1", "port": 30000, "dashboard_port": 30001}
    (tmp_path / "hold.json").write_text("{}")
    lines = attach.hold_lines(tmp_path, plan, "RUNNING", head, "login1")
    text = "\n".join(lines)
    assert "Ray dashboard: http://a800-1:30001" in text and "ssh -N -L 30001:a800-1:30001 login1" in text
    assert "held: the job stays up" in text and f"hpcplace attach {tmp_path} --driver" in text
    assert "held" not in "\n".join(attach.hold_lines(tmp_path, plan, "COMPLETED", None, "login1"))
    assert attach.hold_lines(tmp_path, plan, "FAILED", head, "login1") == []  # no dashboard of an ended job
    (tmp_path / "my runs").mkdir()
    spaced = tmp_path / "my runs" / ".." / "my runs"  # commands to paste: one word, the path normalised
    (spaced / "hold.json").write_text("{}")
    text = "\n".join(attach.hold_lines(spaced, plan, "RUNNING", head, "login1"))
    assert f"hpcplace exec '{tmp_path}/my runs' --component" in text, text


# ---- CLI -------------------------------------------------------------------------------------


def test_cli_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    assert main(["render", str(REPO / "configs" / "hetero-partitions.yaml"), "-o", str(run)]) == 0
    (run / "run.json").write_text(json.dumps({"job_id": "4711"}))
    capsys.readouterr()
    assert main(["attach", str(run), "--driver", "--", "python", "x.py"]) == 2
    assert "steps-mode job" in capsys.readouterr().err
    assert main(["exec", str(run), "--component", "actor", "--", "env"]) == 2
    assert "--component NAME --rank R" in capsys.readouterr().err
    assert main(["exec", str(run), "--component", "actor", "--rank", "0"]) == 2
    assert "exec needs a command" in capsys.readouterr().err
    assert main(["release", str(run)]) == 2
    assert "not submitted to hold" in capsys.readouterr().err
    assert main(["attach", str(tmp_path / "nope"), "--driver", "--", "x"]) == 2


def test_exec_into_a_local_run(tmp_path: Path) -> None:
    cfg = config(
        tmp_path,
        """
name: local-x
cluster:
  node_groups:
    - {label: a800, partition: a800, nodes: 2, gpus_per_node: 8, gpu_type: a800}
  component_placement:
    actor: "0-15"
components:
  actor: {command: ["true"], env: {HP_ACTOR: "x y"}}
""",
    )
    run = tmp_path / "loc"
    hpcplace = str(Path(sys.executable).parent / "hpcplace")
    assert subprocess.run([hpcplace, "run", str(cfg), "--local", "-o", str(run)], capture_output=True).returncode == 0
    res = subprocess.run(
        [
            hpcplace,
            "exec",
            str(run),
            "--component",
            "actor",
            "--rank",
            "11",
            "--",
            sys.executable,
            "-c",
            "import json, os; print(json.dumps(dict(os.environ))); raise SystemExit(3)",
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 3, res.stderr
    env = json.loads(res.stdout)
    run_id = json.loads((run / "local.json").read_text())["run_id"]
    assert (env["RANK"], env["LOCAL_RANK"], env["NODE_RANK"], env["HP_ACTOR"]) == ("11", "3", "1", "x y")
    assert env["HPCPLACE_JOB_ID"] == run_id and env["HPCPLACE_SHM_DIR"].startswith(f"/dev/shm/hpcplace-{run_id}/")
    assert env["HPCPLACE_PLAN"] == str((run / "plan.json").resolve())


def test_exec_into_a_local_run_starts_in_its_workdir(tmp_path: Path) -> None:
    """`exec` runs where the run's processes ran (`run --local --workdir DIR`), not where it is typed."""
    cfg = config(
        tmp_path,
        """
name: local-w
cluster:
  node_groups:
    - {label: c, partition: cpu, nodes: 1}
  component_placement:
    actor: "0"
components:
  actor: {command: ["true"]}
""",
    )
    workdir = tmp_path / "work dir"
    workdir.mkdir()
    run = tmp_path / "loc"
    hpcplace = str(Path(sys.executable).parent / "hpcplace")
    assert (
        subprocess.run(
            [hpcplace, "run", str(cfg), "--local", "-o", str(run), "--workdir", str(workdir)],
            capture_output=True,
            cwd=tmp_path,
        ).returncode
        == 0
    )
    res = subprocess.run(
        [hpcplace, "exec", str(run), "--component", "actor", "--rank", "0", "--", "pwd"],
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert (res.returncode, res.stdout.strip()) == (0, str(workdir)), res.stderr
    workdir.rmdir()
    res = subprocess.run(
        [hpcplace, "exec", str(run), "--component", "actor", "--rank", "0", "--", "pwd"], capture_output=True, text=True
    )
    assert res.returncode == 2 and f"the run's working directory {str(workdir)!r}" in res.stderr
