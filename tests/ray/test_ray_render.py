"""The Ray launch mode without a cluster: the `launch:` block in every format, `--driver -- CMD`,
the Plan -> Ray nodes lowering, golden scripts, and hostile drivers kept out of the script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from hpcplace.cli import main as cli_main
from hpcplace.config.launch import LaunchSpec, split_driver_argv
from hpcplace.errors import SpecError
from hpcplace.plan.plan import plan_to_json
from hpcplace.plan.planner import plan_from_file
from hpcplace.ray.ray_cluster import ray_nodes
from hpcplace.slurm.render import render_run, render_script
from hpcplace.slurm.slurm_job import lower, ray_step_segments
from hpcplace.slurm.submit import load_plan
from tests.golden import check_golden
from tests.slurm.conftest import hostile_values

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted((REPO / "configs").glob("*.yaml"))
GOLDEN = REPO / "tests" / "golden" / "sbatch-ray"
DRIVER = ["python", "examples/math/main_grpo.py", "--config-path", "conf", "--config-name", "X"]


def with_launch(tmp_path: Path, config: Path, block: str) -> Path:
    path = tmp_path / config.name
    path.write_text(config.read_text() + "\n" + block, encoding="utf-8")
    return path


FILE_FORMAT_CONFIGS = [c for c in CONFIGS if "\nlaunch:" not in "\n" + c.read_text()]  # the command formats' have one


@pytest.mark.parametrize("config", FILE_FORMAT_CONFIGS, ids=[c.stem for c in FILE_FORMAT_CONFIGS])
def test_launch_block_in_every_format(config: Path, tmp_path: Path) -> None:
    path = with_launch(
        tmp_path,
        config,
        "launch:\n  mode: ray\n  driver: python main.py --x 'a b'\n"
        "  env: {PYTHONPATH: /opt/site}\n  join_timeout: 30\n",
    )
    plan = plan_from_file(path)
    assert plan.launch == LaunchSpec("ray", ("python", "main.py", "--x", "a b"), {"PYTHONPATH": "/opt/site"}, 30.0)
    assert plan_from_file(config).launch == LaunchSpec()  # default: steps mode, as before
    record = json.loads(plan_to_json(plan))["launch"]
    assert record == {
        "mode": "ray",
        "driver": ["python", "main.py", "--x", "a b"],
        "env": {"PYTHONPATH": "/opt/site"},
        "join_timeout": 30.0,
    }
    assert "launch" not in json.loads(plan_to_json(plan_from_file(config)))
    from hpcplace.ray.ray_cluster import ray_summary

    assert "driver (on the head, argv from plan.json launch.driver): python main.py --x 'a b'" in ray_summary(plan)


@pytest.mark.parametrize(
    "block, message",
    [
        ("launch: {mode: slurm}", "unknown launch mode 'slurm'"),
        ("launch: {mode: steps, driver: [x]}", "launch.driver is only used in ray mode"),
        ("launch: {mode: ray, driver: []}", "launch.driver is empty"),
        ("launch: {mode: ray, driver: [x], env: {'A B': x}}", "'A B'"),
        ("launch: {mode: ray, driver: [x], join_timeout: 0}", "join_timeout must be a number of seconds"),
        ("launch: {mode: ray, driver: [x], drvier: [y]}", "unknown key 'drvier'"),
        ("launch: [ray]", "launch must be a mapping"),
        ("launch: {mode: ray, driver: [x], env: {HPCPLACE_X: 1}}", "`launch.env`: environment variable 'HPCPLACE_X'"),
        ("launch: {mode: ray, driver: [x], steer: maybe}", "launch.steer must be true or false"),
    ],
)
def test_launch_block_errors(tmp_path: Path, block: str, message: str) -> None:
    path = with_launch(tmp_path, REPO / "configs" / "hetero-partitions.yaml", block + "\n")
    with pytest.raises(SpecError) as err:
        plan_from_file(path)
    assert message in str(err.value) and "`launch.env`: `launch.env`" not in str(err.value)
    assert str(err.value).startswith(str(path) + ":")  # file:line:col


def test_ray_block_without_driver_takes_the_command_lines_driver_or_hold(tmp_path: Path, capsys) -> None:
    """`launch: {mode: ray}` alone is completed by `--driver -- CMD` or `--hold`, as the error hints; with
    neither, render refuses it (nothing to run) and plan warns."""
    from hpcplace.cli import main

    path = with_launch(tmp_path, REPO / "configs" / "hetero-partitions.yaml", "launch: {mode: ray}\n")
    assert main(["render", str(path), "-o", str(tmp_path / "d"), "--driver", "--", "python3", "m.py"]) == 0
    assert "m.py" in (tmp_path / "d" / "job.sbatch").read_text()
    assert main(["render", str(path), "-o", str(tmp_path / "h"), "--hold"]) == 0
    assert json.loads((tmp_path / "h" / "plan.json").read_text())["launch"]["hold"] is True
    capsys.readouterr()
    assert main(["render", str(path), "-o", str(tmp_path / "n")]) == 2
    err = capsys.readouterr().err
    assert "the Ray launch mode has no driver to run" in err and "hold the cluster without one (--hold" in err
    assert main(["plan", str(path)]) == 0
    assert "no driver" in capsys.readouterr().err
    # a framework config whose components only its driver starts: held as a Ray cluster, to attach drivers to
    assert main(["render", str(REPO / "configs" / "areal-colocated.yaml"), "-o", str(tmp_path / "a"), "--hold"]) == 0
    assert json.loads((tmp_path / "a" / "plan.json").read_text())["launch"]["mode"] == "ray"
    assert main(["render", str(REPO / "configs" / "collocated-demo.yaml"), "-o", str(tmp_path / "c"), "--hold"]) == 0
    assert (
        "launch" not in json.loads((tmp_path / "c" / "plan.json").read_text())
        or json.loads((tmp_path / "c" / "plan.json").read_text())["launch"]["mode"] == "steps"
    )


def test_driver_argv_is_cut_before_argparse() -> None:
    rest, driver = split_driver_argv(["submit", "c.yaml", "--driver", "--", "python", "m.py", "--set", "x", ":"])
    assert rest == ["submit", "c.yaml"] and driver == ["python", "m.py", "--set", "x", ":"]
    assert split_driver_argv(["render", "c.yaml", "-o", "d"]) == (["render", "c.yaml", "-o", "d"], None)
    with pytest.raises(SpecError):
        split_driver_argv(["submit", "c.yaml", "--driver", "--"])
    # hpcplace's own options after --driver would silently become the driver: refused, naming them
    with pytest.raises(SpecError) as info:
        split_driver_argv(["render", "c.yaml", "--driver", "-o", "d", "--", "python", "m.py"])
    assert "'-o d' looks like hpcplace's own option" in info.value.message
    assert (
        info.value.hint
        == "put hpcplace's options before it: hpcplace render CONFIG -o d --driver -- python main.py ..."
    )
    assert split_driver_argv(["run", "c.yaml", "--driver", "--", "-m", "x"])[1] == ["-m", "x"]


def test_cli_render_with_driver(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    rc = cli_main(
        ["render", str(REPO / "configs" / "rlinf-heterogeneous.yaml"), "-o", str(out), "--driver", "--", *DRIVER]
    )
    assert rc == 0, capsys.readouterr().err
    plan = load_plan(out / "plan.json")
    # a bare `python` becomes the submitting environment's interpreter (the one running hpcplace)
    python = os.path.abspath(sys.executable)
    assert plan.launch.is_ray and plan.launch.driver == (python, *DRIVER[1:])
    script = (out / "job.sbatch").read_text()
    assert "--ray-node --plan" in script and "--ray-driver --plan" in script
    assert f"# driver interpreter: {python} (a bare `python` driver is rendered" in script
    assert subprocess.run(["bash", "-n", str(out / "job.sbatch")]).returncode == 0
    # `plan` takes --driver too: the Ray mode has something to run, so no "nothing to run" warning
    assert cli_main(["plan", str(REPO / "configs" / "rlinf-heterogeneous.yaml"), "--driver", "--", "x"]) == 0
    err = capsys.readouterr().err  # (render warned that the driver's script is not in this working directory)
    assert "nothing to run" not in err and err.count("hpcplace: warning:") == 1 and "main_grpo.py" in err
    with pytest.raises(SystemExit) as exit_:
        cli_main(["status", "1", "--driver", "--", "x"])
    assert exit_.value.code == 2 and "--driver is an option of: plan, submit, render, run" in capsys.readouterr().err


def test_ray_nodes_follow_the_plan() -> None:
    plan = plan_from_file(REPO / "configs" / "hetero-partitions.yaml")
    plan = replace(plan, launch=LaunchSpec("ray", ("x",)))
    nodes = ray_nodes(plan)
    assert [n.rank for n in nodes] == list(range(len(plan.cluster.nodes)))
    for n in nodes:
        group = plan.cluster.node_groups[n.het_group]
        assert n.rank == plan.cluster.first_node_rank(n.het_group) + n.index
        assert n.gpus == tuple(str(i) for i in range(group.gpus_per_node[n.index]))
        assert n.resources == {f"ng_{group.label}": 1}
        assert n.labels["hpcplace.node_rank"] == str(n.rank) and n.labels["hpcplace.group"] == group.label
        ranks = set(plan.cluster.node_ranks(n.het_group))
        needed = max(
            sum(c.cpus_per_process for c in plan.components for p in c.processes if p.cluster_node_rank == r)
            for r in ranks
        )
        assert n.num_cpus == max(group.cpus_per_node or needed, 1)
    segments = ray_step_segments(lower(plan), plan)
    assert len(segments) == len(plan.cluster.node_groups)  # one raylet step over every het component
    default = replace(nodes[0], partition=None)  # no partition named: Slurm's default, no label
    assert "hpcplace.partition" not in default.labels and default.labels["hpcplace.group"] == nodes[0].label
    for seg, group in zip(segments, plan.cluster.node_groups):
        assert f"--nodes={group.num_nodes}" in seg and "--ntasks-per-node=1" in seg


def test_interleaved_node_ranks_in_the_ray_lowering_and_header() -> None:
    """RLinf node_ranks a800 "2,0", 4090 1, cpu 3: the a800 component's second host is node rank 2
    (its raylet's RLINF_NODE_RANK and label), the header lists hosts by node rank, the driver runs on
    rank 0; a Cluster whose rank 0 is not het component 0's first node moves the driver step there."""
    from hpcplace.config.cluster import Cluster
    from hpcplace.ray.ray_cluster import head_node
    from hpcplace.slurm.slurm_job import driver_step_args

    plan = plan_from_file(REPO / "tests" / "fixtures" / "rlinf-ray-interleaved.yaml")
    plan = replace(plan, launch=LaunchSpec("ray", ("x",)))
    nodes = ray_nodes(plan)
    assert [(n.rank, n.het_group, n.index, n.label, len(n.gpus)) for n in nodes] == [
        (0, 0, 0, "a800", 2),
        (1, 1, 0, "4090", 2),
        (2, 0, 1, "a800", 2),
        (3, 2, 0, "cpu", 0),
    ]
    assert nodes[2].labels["hpcplace.node_rank"] == "2"
    text = render_script(plan, "/shared/runs/demo")
    header = [line for line in text.splitlines() if line.startswith("#   node rank ")]
    assert header[:4] == header[4:]  # the summary at the top and the bring-up comment above step 0
    assert [line.split(":")[0] for line in header[:4]] == [
        "#   node rank 0 (head)",
        "#   node rank 1 (worker)",
        "#   node rank 2 (worker)",
        "#   node rank 3 (worker)",
    ]
    assert "het 0 node 1 (a800, partition a800): RLINF_NODE_RANK=2," in header[2]
    job = lower(plan)
    assert driver_step_args(job, plan)[:3] == ("--het-group=0", "--nodes=1", "--relative=0")
    a800, rtx, cpu = plan.cluster.node_groups
    moved = replace(
        plan,
        cluster=Cluster(
            (replace(a800, node_ranks=(1, 2)), replace(rtx, node_ranks=(0,)), replace(cpu, node_ranks=(3,)))
        ),
    )
    assert (head_node(moved).het_group, head_node(moved).index, head_node(moved).label) == (1, 0, "4090")
    assert driver_step_args(job, moved)[:3] == ("--het-group=1", "--nodes=1", "--relative=0")


@pytest.mark.parametrize("name", ["rlinf-heterogeneous", "hetero-partitions", "roll-example"])
def test_golden_ray_sbatch(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # plan.source stays repo-relative in the goldens
    plan = plan_from_file(Path("configs") / f"{name}.yaml")
    plan = replace(plan, launch=LaunchSpec("ray", tuple(DRIVER), {"PYTHONPATH": "/opt/site"}, 120))
    text = render_script(plan, "/shared/runs/demo")
    assert render_script(plan, "/shared/runs/demo") == text  # deterministic
    check_golden(GOLDEN / f"{name}.sbatch", text)


def test_hostile_driver_never_in_a_command_line(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    values = hostile_values(canary) + [":", " : ", "a : --het-group=1"]
    plan = plan_from_file(REPO / "configs" / "hetero-partitions.yaml")
    plan = replace(plan, launch=LaunchSpec("ray", ("python", *values), {"X": values[3]}))
    run = render_run(plan, tmp_path / "run")
    script = run.script.read_text()
    assert subprocess.run(["bash", "-n", str(run.script)]).returncode == 0
    code = [line for line in script.splitlines() if not line.lstrip().startswith("#")]
    body = "\n".join(code)
    for v in values:
        if len(v.strip()) > 2:
            assert v not in body, v  # only in comments (|comment), never in a command
    srun_lines = [line for line in code if line.strip().startswith(":")]
    assert all(line.strip().startswith(": --het-group=") for line in srun_lines)  # only our het separators
    assert load_plan(run.plan_json).launch.driver == ("python", *values)
    assert not canary.exists()


def test_local_mode_facts_and_warning() -> None:
    from hpcplace.local.local_ray import local_raylet_facts, local_warning

    plan = plan_from_file(REPO / "configs" / "hetero-partitions.yaml")
    plan = replace(plan, launch=LaunchSpec("ray", ("x",)))
    facts = local_raylet_facts(plan)
    nodes = ray_nodes(plan)
    assert facts["num_gpus"] == sum(len(n.gpus) for n in nodes)
    assert sum(facts["resources"].values()) == len(nodes)
    assert facts["labels"]["hpcplace.node_rank"] == "0"
    assert (local_warning(plan) is None) == (len(nodes) == 1)


@pytest.mark.skipif(not os.environ.get("PATH"), reason="needs PATH")
@pytest.mark.parametrize("shell", ["auth disabled", "Ray used before"])
def test_local_mode_runs_a_real_ray_driver(tmp_path: Path, shell: str) -> None:
    """`hpcplace run --local --driver -- ...`: a real one-machine Ray cluster; the driver sees the
    contract's variables, a task sees RLINF_NODE_RANK=0 and launch.env; exit code passed through;
    no Ray process or temp dir left. The head and the driver authenticate with the run's own token, whatever
    the shell says and whether or not ~/.ray/auth_token exists (a local ray.init() of Ray 2.60 writes one, and
    `ray start --head` then asks for it while a driver given an address does not present it)."""
    pytest.importorskip("ray")
    out = tmp_path / "out.json"
    code = (
        "import json,os,sys,ray; ray.init(); r=ray.cluster_resources(); "
        "f=ray.remote(lambda: (os.environ.get('RLINF_NODE_RANK'), os.environ.get('HP_V'))); "
        "json.dump({'task': ray.get(f.remote()), 'res': r, "
        "'env': {k: os.environ.get(k) for k in "
        "('RANK','WORLD_SIZE','MASTER_PORT','RAY_ADDRESS','RAY_AUTH_MODE','RAY_AUTH_TOKEN_PATH')}}, "
        "open(sys.argv[1],'w')); sys.exit(3)"
    )
    env = {**os.environ, "HPCPLACE_RAY_ARGS": "--object-store-memory=80000000", "RAY_AUTH_MODE": "disabled"}
    if shell == "Ray used before":
        home = tmp_path / "home"
        (home / ".ray").mkdir(parents=True)
        (home / ".ray" / "auth_token").write_text("a-token-of-an-earlier-local-ray")
        env["HOME"] = str(home)
        del env["RAY_AUTH_MODE"]
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "hpcplace.cli",
            "run",
            str(REPO / "configs" / "hetero-partitions.yaml"),
            "--local",
            "--run-dir",
            str(tmp_path / "run"),
            "--set",
            "launch.env.HP_V=a b",
            "--driver",
            "--",
            sys.executable,
            "-c",
            code,
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 3, res.stderr
    data = json.loads(out.read_text())
    assert data["task"] == ["0", "a b"]
    assert data["env"]["RANK"] == "0" and data["env"]["WORLD_SIZE"] == "1"
    assert data["env"]["RAY_ADDRESS"] == f"127.0.0.1:{data['env']['MASTER_PORT']}"
    token = tmp_path / "run" / "ray" / "auth_token"
    assert (data["env"]["RAY_AUTH_MODE"], data["env"]["RAY_AUTH_TOKEN_PATH"]) == ("token", str(token))
    plan = plan_from_file(REPO / "configs" / "hetero-partitions.yaml")
    assert data["res"]["GPU"] == sum(sum(g.gpus_per_node) for g in plan.cluster.node_groups)
    assert ("warning: the plan has" in res.stderr) == (len(plan.cluster.nodes) > 1)
    leftover = subprocess.run(["pgrep", "-f", f"hpcplace-ray-.*{tmp_path.name}"], capture_output=True)
    assert leftover.returncode == 1


def test_local_head_that_exits_stops_the_driver(tmp_path: Path) -> None:
    """A local Ray head that dies while the driver runs ends the run at once, naming its log (the
    driver would otherwise wait on a cluster that is gone, forever)."""
    import time

    from hpcplace.local.local_ray import LocalRayError, _wait_driver

    driver = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    head = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    started = time.monotonic()
    try:
        with pytest.raises(LocalRayError) as info:
            _wait_driver(driver, head, tmp_path / "ray-head.log")
    finally:
        driver.kill()
        driver.wait()
    assert time.monotonic() - started < 60  # not the driver's 120 s
    assert info.value.message == "the local Ray head exited with code 3 while the driver ran: stopping the driver"
    assert info.value.hint == f"see {tmp_path / 'ray-head.log'}"
    done = subprocess.Popen([sys.executable, "-c", "raise SystemExit(5)"])
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert _wait_driver(done, alive, tmp_path / "ray-head.log") == 5
    finally:
        alive.kill()
        alive.wait()


def test_every_raylet_of_a_group_advertises_the_same_cpus(tmp_path: Path) -> None:
    """ROLL's per-node placement groups (half a node's CPUs, not pinned to a node) fit any node of the group
    only if every raylet of it has the same CPUs: the most any of its nodes needs."""
    plan = replace(plan_from_file(REPO / "configs" / "roll-example.yaml"), launch=LaunchSpec("ray", ("x",)))
    per_node = {
        r: sum(c.cpus_per_process for c in plan.components for p in c.processes if p.cluster_node_rank == r)
        for r in (0, 1)
    }
    assert per_node[0] != per_node[1]  # the plan's own needs differ ...
    cpus = {
        n.rank: n.num_cpus
        for n in ray_nodes(
            replace(
                plan,
                cluster=replace(
                    plan.cluster, node_groups=tuple(replace(g, cpus_per_node=None) for g in plan.cluster.node_groups)
                ),
            )
        )
    }
    assert cpus == {0: max(per_node.values()), 1: max(per_node.values())}  # ... the raylets' CPUs do not


def test_roll_cpu_partition_is_refused_under_the_ray_launch_mode(tmp_path: Path) -> None:
    """ROLL's driver never puts a worker on a node without GPUs: a CPU partition would idle there."""
    config = tmp_path / "roll.yaml"
    config.write_text(
        (REPO / "configs" / "roll-example.yaml").read_text() + "  cpu_partition: cpu\n  cpu_nodes: 1\n",
        encoding="utf-8",
    )
    assert plan_from_file(config).cluster.node_groups[1].partition == "cpu"  # the steps mode runs it there
    with pytest.raises(SpecError) as info:
        lower(replace(plan_from_file(config), launch=LaunchSpec("ray", ("x",))))
    assert (
        str(info.value).startswith(f"{config}:")
        and "ROLL's driver runs CPU-only workers on its GPU nodes" in info.value.message
    )
