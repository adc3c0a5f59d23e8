"""The preflight's checks as pure functions of facts, its fact gathering on this machine, and the
whole task against a rendered plan with a synthetic Slurm environment."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from hpcplace.runtime import preflight as pf
from hpcplace.runtime.preflight import GpuFacts, ProgramCheck

WHERE = "a800-1 (node group a800, het group 0 node 0)"


def facts(present: range | list[int], openable: range | list[int] | None = None, slurm: str | None = None) -> GpuFacts:
    present = list(present)
    return GpuFacts(
        device_dir="/dev",
        present=tuple(present),
        openable=tuple(present if openable is None else openable),
        slurm_visible=slurm,
    )


def test_gpus_equal_to_the_plan_pass_in_both_constrain_modes() -> None:
    assert pf.gpu_problems(facts(range(8), slurm="0,1,2,3,4,5,6,7"), 8, range(8), WHERE) == []
    # ConstrainDevices=yes on a node the job holds half of: the job's 4 open, the other 4 give EPERM
    assert pf.gpu_problems(facts(range(8), [0, 1, 2, 3], slurm="0,1,2,3"), 4, [0, 1, 2, 3], WHERE) == []
    assert pf.gpu_problems(facts([]), 0, [], WHERE) == []


def test_fewer_gpus_than_planned() -> None:
    (problem,) = pf.gpu_problems(facts(range(7)), 8, range(8), WHERE)
    assert problem.startswith(
        "the node shows 7 GPU(s) (/dev/nvidia{0,1,2,3,4,5,6}), but the plan expects 8 on " + WHERE
    )
    assert "gpus_per_node" in problem
    (problem,) = pf.gpu_problems(facts([]), 4, [0], WHERE)
    assert "the node shows 0 GPU(s) (/dev/nvidia{none})" in problem
    assert "HPCPLACE_GPU_DEVICE_DIR names where they are when not in /dev" in problem


def test_more_gpus_than_planned_is_only_a_warning() -> None:
    """The collocated demo plans 2 GPUs on the test cluster's 8-GPU nodes: the job uses the planned ones."""
    assert pf.gpu_problems(facts(range(8), slurm="0,1"), 2, [0, 1], WHERE) == []
    assert pf.gpu_warnings(facts(range(8)), 2) == [
        "the node shows 8 GPU(s), the plan counts 2 (gpus_per_node): the others stay unused"
    ]
    assert pf.gpu_warnings(facts(range(8), [0, 1]), 2) == []  # ConstrainDevices=yes: the job sees its 2


def test_constrained_job_that_cannot_open_its_planned_gpus() -> None:
    # ConstrainDevices=yes: the job got GPUs 4-7, the plan uses 0-1
    (problem,) = pf.gpu_problems(facts(range(8), [4, 5, 6, 7]), 4, [0, 1], WHERE)
    assert problem.startswith("the plan uses GPU(s) 0,1 on " + WHERE + ", but this job cannot open /dev/nvidia{0,1}")
    (problem,) = pf.gpu_problems(facts(range(8), [4, 5]), 4, [0], WHERE)
    assert problem.startswith(
        "this job can open 2 of its 8 GPU device(s) (4,5; ConstrainDevices=yes), but the plan expects 4"
    )


def test_slurm_visible_count_must_match() -> None:
    (problem,) = pf.gpu_problems(facts(range(8), slurm="0,1"), 8, range(8), WHERE)
    assert "CUDA_VISIBLE_DEVICES='0,1' (2 GPU(s)), but the plan expects 8" in problem


def test_shm_problems() -> None:
    gib = 1024**3
    assert pf.shm_problems("/dev/shm", None, 2 * gib, 1 * gib) == []
    assert pf.shm_problems("/dev/shm", None, 2 * gib, None) == []
    (problem,) = pf.shm_problems("/dev/shm", None, 2 * gib, 3 * gib)
    assert problem.startswith("/dev/shm has 2.0 GiB free, the plan needs 3.0 GiB per node (slurm.shm_per_node)")
    (problem,) = pf.shm_problems("/dev/shm", "Read-only file system", 2 * gib, None)
    assert problem.startswith("/dev/shm is not writable (Read-only file system)")


def test_programs() -> None:
    assert pf.is_python("python") and pf.is_python("/v/bin/python3.11") and not pf.is_python("pythonic")
    assert pf.resolve_program("sh", "/nonexistent:/bin:/usr/bin") in ("/bin/sh", "/usr/bin/sh")
    assert pf.resolve_program("no-such-program-hp", "/bin") is None
    missing = ProgramCheck(what="component 'actor'", program="/tmp/venv/bin/python", resolved=None, needs_runtime=False)
    assert pf.program_problem(missing, "/") == (
        "component 'actor': '/tmp/venv/bin/python' does not exist on this node: "
        "install it where every node sees it (a shared filesystem, not a node-local "
        "or private path such as /tmp)"
    )
    assert "is not on PATH" in (pf.program_problem(missing.replace(program="python9"), "/") or "")
    assert pf.child_problem("x", (0, "fine"), timeout=5) is None
    assert (
        pf.child_problem("x", (None, ""), timeout=5)
        == "x: did not finish within 5 s (HPCPLACE_PREFLIGHT_TIMEOUT sets the limit)"
    )
    assert (
        pf.child_problem("x", (1, "Traceback\n  ...\nModuleNotFoundError: No module named 'ray'\n"), timeout=5)
        == "x: failed (exit 1): ModuleNotFoundError: No module named 'ray'"
    )


@pytest.mark.parametrize(
    "command, script",
    [
        (["python", "train.py", "--lr", "1"], "train.py"),
        (["/v/bin/python3.11", "-u", "-W", "ignore", "-X", "dev", "sub dir/t.py"], "sub dir/t.py"),
        (["python", "-m", "areal.launcher"], None),
        (["python", "-mareal.launcher"], None),
        (["python3", "-c", "print(1)"], None),
        (["python", "-"], None),
        (["python"], None),
        (["torchrun", "train.py"], None),  # not a Python: its own arguments
    ],
)
def test_python_script_of_a_command(command: list[str], script: str | None) -> None:
    assert pf.python_script(command) == script


def test_programs_that_exist_but_cannot_start(tmp_path: Path) -> None:
    """Not executable, a #! interpreter the node lacks, a script that is not there: each says what it is
    (the exec would fail with 'Permission denied' / 'No such file' of another file / Python's 'can't open')."""
    plain = tmp_path / "plain.sh"
    plain.write_text("echo hi\n")
    plain.chmod(0o644)
    bad_bang = tmp_path / "bad.sh"
    bad_bang.write_text("#!/nonexistent/interp\necho hi\n")
    bad_bang.chmod(0o755)
    (tmp_path / "train.py").write_text("")

    def problem(program: str) -> str:
        resolved = pf.resolve_program(str(tmp_path / program), "/bin")
        check = ProgramCheck(what="component 'w'", program=program, resolved=resolved, needs_runtime=False)
        return pf.program_problem(check, str(tmp_path)) or ""

    assert "'./plain.sh' is not executable (chmod +x ./plain.sh, or start it with its interpreter" in problem(
        "./plain.sh"
    )
    assert "'./bad.sh' starts with #!/nonexistent/interp, which does not exist on this node" in problem("./bad.sh")
    assert "'./nothere.sh' does not exist on this node" in problem("./nothere.sh")
    assert "is a directory, not a program" in problem("./")
    python = ProgramCheck(
        what="the Ray driver", program=sys.executable, resolved=sys.executable, needs_runtime=False, script="train.py"
    )
    assert pf.program_problem(python, str(tmp_path)) is None
    missing = pf.program_problem(python.replace(script="driver.py"), str(tmp_path)) or ""
    assert missing == (
        f"the Ray driver: the script 'driver.py' ({tmp_path}/driver.py) does not exist on this node: the "
        f"program runs in {tmp_path}; give the script's path from there, or an absolute path on a "
        "filesystem every node sees"
    )
    (tmp_path / "app").mkdir()  # `python3 app`: a directory runs when it has __main__.py
    assert "is a directory without __main__.py" in (
        pf.program_problem(python.replace(script="app"), str(tmp_path)) or ""
    )
    (tmp_path / "app" / "__main__.py").write_text("")
    assert pf.program_problem(python.replace(script="app"), str(tmp_path)) is None


def test_arguments_and_working_directory(tmp_path: Path) -> None:
    assert pf.parse_args(["--chdir", "/w", "--plan", "/r/plan.json"]) == ("/r/plan.json", "/w")
    assert pf.parse_args(["--plan=/p", "--chdir=/w x"]) == ("/p", "/w x")
    assert pf.parse_args(["--chdir", "/w"]) == (None, "/w")
    assert pf.chdir_problem(str(tmp_path)) is None and pf.chdir_problem(None) is None
    assert "'/nonexistent/w' (where the programs run) does not exist on this node" in (
        pf.chdir_problem("/nonexistent/w") or ""
    )


def test_child_timeout_is_enforced() -> None:
    rc, _ = pf.run_child([sys.executable, "-c", "import time; time.sleep(30)"], os.environ, timeout=0.5)
    assert rc is None
    assert pf.run_child(["/nonexistent/python"], os.environ, timeout=5)[0] == 127


def test_gpu_facts_reads_device_files(tmp_path: Path) -> None:
    """Regular files stand in for device files here: they open, so they count as the job's."""
    node = tmp_path / "a800-1"
    node.mkdir()
    for k in (0, 1, 3):
        (node / f"nvidia{k}").write_text("")
    (node / "nvidiactl").write_text("")
    (node / "nvidia2").mkdir()  # cannot be opened read-write (EISDIR): not this job's
    got = pf.gpu_facts("a800-1", {"HPCPLACE_GPU_DEVICE_DIR": str(tmp_path / "{node}"), "CUDA_VISIBLE_DEVICES": "0,1"})
    assert got.present == (0, 1, 2, 3) and got.openable == (0, 1, 3) and got.slurm_visible == "0,1"
    assert pf.gpu_facts("x", {"HPCPLACE_GPU_DEVICE_DIR": str(tmp_path / "none")}).present == ()


def test_shm_facts(tmp_path: Path) -> None:
    error, free = pf.shm_facts(str(tmp_path))
    assert error is None and free and free > 0
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    if os.geteuid() != 0:  # root writes anyway
        assert pf.shm_facts(str(ro))[0] == "Permission denied"
    assert pf.shm_facts(str(tmp_path / "missing"))[0] == "No such file or directory"


# ---- the whole task, on a rendered plan --------------------------------------------------------

CONFIG = """
name: pf
cluster:
  node_groups:
    - {label: a800, partition: a800, nodes: 1, gpus_per_node: 4, gpu_type: a800}
    - {label: cpu, partition: cpu, nodes: 1}
  component_placement:
    actor: {node_group: a800, placement: "0-3"}
    agent: {node_group: cpu, placement: "0:0-1"}
components:
  actor: {command: [%(python)s, -c, pass]}
  agent: {command: [/nonexistent/venv/bin/python, -c, pass]}
slurm: {shm_per_node: 1M}
"""


def slurm_env(node: str, devices: Path, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", ""),
        "SLURM_JOB_ID": "42",
        "SLURM_HET_SIZE": "2",
        "SLURM_JOB_NODELIST_HET_GROUP_0": "a800-1",
        "SLURM_JOB_NODELIST_HET_GROUP_1": "cpu-1",
        "SLURM_JOB_ID_HET_GROUP_0": "42",
        "SLURM_JOB_ID_HET_GROUP_1": "43",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURMD_NODENAME": node,
        "HPCPLACE_GPU_DEVICE_DIR": str(devices / "{node}"),
        **extra,
    }


def run_task(tmp_path: Path, env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    from hpcplace.runtime.shim import main

    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        rc = main(["--chdir", str(tmp_path), "--preflight", "--plan", str(tmp_path / "run" / "plan.json")])
    finally:
        os.environ.clear()
        os.environ.update(old)
    return rc, capsys.readouterr().out


@pytest.fixture
def rendered(tmp_path: Path) -> Path:
    from hpcplace.slurm.render import render_run
    from tests.slurm.conftest import plan_yaml

    plan = plan_yaml(tmp_path, CONFIG % {"python": sys.executable})
    render_run(plan, tmp_path / "run")
    devices = tmp_path / "dev" / "a800-1"
    devices.mkdir(parents=True)
    for k in range(4):
        (devices / f"nvidia{k}").write_text("")
    return tmp_path / "dev"


def test_task_passes_on_a_good_node(tmp_path: Path, rendered: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = run_task(tmp_path, slurm_env("a800-1", rendered, CUDA_VISIBLE_DEVICES="0,1,2,3"), capsys)
    assert rc == 0, out
    assert out.startswith("hpcplace-preflight: a800-1: ok: 4 GPU(s), /dev/shm ") and out.count("\n") == 1
    (rendered / "a800-1" / "nvidia4").write_text("")
    rc, out = run_task(tmp_path, slurm_env("a800-1", rendered, CUDA_VISIBLE_DEVICES="0,1,2,3"), capsys)
    assert rc == 0 and out.endswith(
        "hpcplace-preflight: a800-1: warning: the node shows 5 GPU(s), the plan counts 4 "
        "(gpus_per_node): the others stay unused\n"
    ), out


def test_task_names_every_problem_of_its_node(
    tmp_path: Path, rendered: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (rendered / "a800-1" / "nvidia3").unlink()
    rc, out = run_task(tmp_path, slurm_env("a800-1", rendered), capsys)
    assert rc == 1
    assert "hpcplace-preflight: a800-1: FAILED: the node shows 3 GPU(s)" in out, out
    rc, out = run_task(tmp_path, slurm_env("cpu-1", rendered), capsys)
    assert rc == 1
    assert out == (
        "hpcplace-preflight: cpu-1: FAILED: component 'agent': '/nonexistent/venv/bin/python' does not "
        "exist on this node: install it where every node sees it (a shared filesystem, not a node-local or "
        "private path such as /tmp)\n"
    )


def test_task_outside_the_plan_fails_clearly(
    tmp_path: Path, rendered: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out = run_task(tmp_path, slurm_env("elsewhere", rendered), capsys)
    assert rc == 1 and out.startswith(
        "hpcplace-preflight: elsewhere: FAILED: node 'elsewhere' is not in the node lists"
    )


def test_a_ray_dashboard_without_its_packages_fails_the_head_at_once(
    tmp_path: Path, rendered: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """launch.dashboard needs ray[default]: `ray start` on the head would refuse it after the queue wait.
    Checked with the job's real Python and Ray's own check (here: plain `ray`, no dashboard packages)."""
    import importlib.util
    import shutil

    from hpcplace.slurm.render import render_run
    from tests.slurm.conftest import plan_yaml

    pytest.importorskip("ray")
    plan = plan_yaml(
        tmp_path, CONFIG % {"python": sys.executable} + "launch: {mode: ray, hold: true, dashboard: true}\n"
    )
    shutil.rmtree(tmp_path / "run")  # the fixture's steps-mode render
    render_run(plan, tmp_path / "run")
    has_dashboard = importlib.util.find_spec("aiohttp_cors") is not None
    rc, out = run_task(tmp_path, slurm_env("a800-1", rendered, CUDA_VISIBLE_DEVICES="0,1,2,3"), capsys)
    if has_dashboard:
        assert rc == 0, out
    else:
        assert rc == 1 and "Ray's dashboard (launch.dashboard)" in out and 'pip install "ray[default]"' in out, out
    rc, out = run_task(tmp_path, slurm_env("cpu-1", rendered), capsys)  # only the head runs the dashboard
    assert "dashboard" not in out, out


def test_job_relative_gpus_map_onto_the_jobs_allocation_in_both_constrain_modes() -> None:
    """A job sharing its nodes (plan ids job-relative) got GPUs 4,5 of an 8-GPU node: plan ids 0,1 are
    4,5 whether Slurm says so in SLURM_STEP_GPUS, through the devices it may open (ConstrainDevices=yes),
    or in CUDA_VISIBLE_DEVICES (=no); a plan id beyond the job's GPUs, or a count that differs, fails."""
    no = GpuFacts(device_dir="/dev", present=tuple(range(8)), openable=tuple(range(8)), slurm_visible="4,5")
    yes = GpuFacts(device_dir="/dev", present=tuple(range(8)), openable=(4, 5), slurm_visible="0,1")
    stated = GpuFacts(device_dir="/dev", present=tuple(range(8)), openable=(4, 5), slurm_visible="0,1", step_gpus="5,4")
    for f in (no, yes, stated):
        assert pf.job_gpu_ids(f) == (4, 5), f
        assert pf.gpu_problems(f, 2, [0, 1], WHERE, relative=True) == [], f
        assert pf.gpu_problems(f, 2, [1], WHERE, relative=True) == [], f
    # the same facts read as physical ids: the plan's GPU 0 is not the job's
    assert pf.gpu_problems(yes, 2, [0, 1], WHERE) != []
    (problem,) = pf.gpu_problems(no, 2, [0, 2], WHERE, relative=True)
    assert problem == f"the plan uses job-relative GPU(s) 2 on {WHERE}, beyond the job's 2"
    (problem,) = pf.gpu_problems(no, 4, [0], WHERE, relative=True)
    assert problem.startswith(f"Slurm gave the job 2 GPU(s) on {WHERE} (4,5), but the plan expects 4")
    closed = GpuFacts(device_dir="/dev", present=tuple(range(8)), openable=(4,), slurm_visible="0,1", step_gpus="4,5")
    (problem,) = pf.gpu_problems(closed, 2, [0, 1], WHERE, relative=True)
    assert problem.startswith(f"the job's GPU(s) 5 on {WHERE} cannot be opened (/dev/nvidia{{5}}; can open: 4)")


IMAGE = "apptainer image /images/sid-python"


def test_container_with_the_nodes_shm_and_infiniband_passes() -> None:
    assert pf.container_problems(IMAGE, True, (True, True)) == []
    assert pf.container_problems(IMAGE, None, (False, False)) == []  # no collocation here, no adapters


def test_container_with_a_private_shm_where_components_share_the_node() -> None:
    (problem,) = pf.container_problems(IMAGE, False, (False, False))
    assert problem.startswith(f"/dev/shm in the {IMAGE} is not the node's"), problem
    assert "no --contain" in problem


def test_container_without_infiniband_devices_on_a_node_with_adapters() -> None:
    """AReaL #639: NCCL falls back to sockets without a word when /dev/infiniband is not in the container."""
    (problem,) = pf.container_problems(IMAGE, None, (True, False))
    assert "InfiniBand adapters (/sys/class/infiniband)" in problem and f"the {IMAGE} has no /dev/infiniband" in problem
    both = pf.container_problems(IMAGE, False, (True, False))
    assert len(both) == 2 and both[0].startswith("/dev/shm") and "InfiniBand" in both[1]


def test_infiniband_fact_reads_the_adapters_and_the_device_dir(tmp_path: Path) -> None:
    sys_dir, dev_dir = tmp_path / "sys", tmp_path / "dev"
    assert pf.infiniband_fact(str(sys_dir), str(dev_dir)) == (False, False)  # neither exists
    sys_dir.mkdir()
    assert pf.infiniband_fact(str(sys_dir), str(dev_dir)) == (False, False)  # no adapter listed
    (sys_dir / "mlx5_0").mkdir()
    assert pf.infiniband_fact(str(sys_dir), str(dev_dir)) == (True, False)
    dev_dir.mkdir()
    assert pf.infiniband_fact(str(sys_dir), str(dev_dir)) == (True, True)


def test_an_import_check_is_not_fooled_by_a_folder_of_that_name(tmp_path: Path) -> None:
    """The children check `import ray` from the programs' working directory, the run directory, whose ray/ folder
    (the job's token, the steering hook) imports as an empty namespace package: the check must still fail where
    the package is not installed, naming the folder, and pass where it is."""
    import subprocess

    (tmp_path / "hpcplace_probe_missing").mkdir()
    missing = subprocess.run(
        [sys.executable, "-c", pf.import_check("hpcplace_probe_missing")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode == 1, missing
    assert f"the folder {tmp_path / 'hpcplace_probe_missing'}, not the package" in missing.stderr
    (tmp_path / "json").mkdir()  # a folder cannot hide the real package
    installed = subprocess.run([sys.executable, "-c", pf.import_check("json")], cwd=tmp_path, check=False)
    assert installed.returncode == 0
