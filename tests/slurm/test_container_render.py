"""Containers lowered into the job (pure, no cluster): per het group arrays in job.sbatch, pyxis's srun
flags as pyxis documents them, the job id in pyxis container names filled in when the script runs,
every srun that starts the shim entering its group's container (steps, preflight, Ray nodes and driver)
and the host-only steps never, the carried runtime (written only for plans with a container, readable by
the oldest Python hpcplace states), the Apptainer enter script run for real, `exec`/`attach` entering
the container of their target's group, Slurm versions for runtime oci, and an AReaL config whose
scheduling_spec names its image."""

from __future__ import annotations

import ast
import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hpcplace.config.container import Container, Mount
from hpcplace.config.formats.areal import AREAL_ARGS, AREAL_RUNTIME
from hpcplace.errors import SlurmError, SpecError
from hpcplace.plan.plan import Plan
from hpcplace.plan.planner import plan_from_file
from hpcplace.slurm import attach
from hpcplace.slurm.container_launch import (
    CARRY_DIR,
    CARRY_ENTRY,
    ENTER_SCRIPT,
    OCI_OLDEST,
    container_name,
    group_launch,
    refuse_unsupported,
    version_problems,
)
from hpcplace.slurm.render import CARRIED_ENTRY, LIBRARY_NAME, render_run, render_script
from hpcplace.slurm.submit import load_plan
from tests.planner.test_container_config import COUNTDOWN, COUNTDOWN_CONTAINER, COUNTDOWN_ENV

REPO = Path(__file__).resolve().parents[2]
HETERO = REPO / "configs" / "hetero-partitions.yaml"  # node groups a800, rtx4090, cpu, robot (het 0-3)
RUN = "/srv/runs/c1"
LAUNCHER = ("/venv/bin/hpcplace-run", "--chdir", "/home/u/proj")
# a800 and rtx4090 in two Apptainer images, cpu bare, robot in an OCI bundle
BLOCK = """
container:
  runtime: apptainer
  image: /shared/images/verl.sif
  mounts: [/data:/data:ro]
  env: {NCCL_DEBUG: INFO}
  args: [--writable-tmpfs]
  node_groups:
    rtx4090:
      image: /shared/images/sglang.sif
      mounts: [/models:/models:ro, /scratch]
      args: [--cleanenv]
    cpu: {runtime: none}
    robot: {runtime: oci, image: /shared/bundles/robot, mounts: [], args: []}
"""
# every node group in one pyxis image (pyxis keeps one set of options per srun: container_launch.pyxis_problem)
PYXIS_BLOCK = """
container:
  runtime: pyxis
  image: nvcr.io#nvidia/pytorch:25.01-py3
  mounts: [/models:/models:ro, /scratch]
  args: [--container-writable, --no-container-mount-home]
"""
PYXIS_SRUN = [
    "--container-image=nvcr.io#nvidia/pytorch:25.01-py3",
    f"--container-mounts={RUN}:{RUN},/home/u/proj:/home/u/proj,/models:/models:ro,/scratch:/scratch",
    "--container-workdir=/home/u/proj",
    "--container-name=hpcplace-${SLURM_JOB_ID}",
    "--container-writable",
    "--no-container-mount-home",
]

# pyxis's srun options as its README documents them ("Usage": `srun --help`), NVIDIA/pyxis at
# 107519944221822ea1dace4db8e7234b2eaa4cd5 (README.md; the same list as args.c's spank_opts):
PYXIS_README_USAGE = """
      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH
      --container-mounts=SRC:DST[:FLAGS][,SRC:DST...]
      --container-workdir=PATH
      --container-name=NAME   [pyxis] name to use for saving and loading the
      --container-save=PATH   [pyxis] Save the container state to a squashfs
      --container-mount-home  [pyxis] bind mount the user's home directory.
      --no-container-mount-home
      --container-remap-root  [pyxis] ask to be remapped to root inside the
      --no-container-remap-root
      --container-entrypoint  [pyxis] execute the entrypoint from the container
      --no-container-entrypoint
      --container-entrypoint-log
      --container-writable    [pyxis] make the container filesystem writable
      --container-readonly    [pyxis] make the container filesystem read-only
      --container-env=NAME[,NAME...]
      --container-unshare=NS[,NS...]
"""
PYXIS_OPTIONS = {
    m.group(1): m.group(2) is not None for m in re.finditer(r"^\s+(--[a-z-]+)(=)?", PYXIS_README_USAGE, re.M)
}  # option -> takes a value


def container_config(tmp_path: Path, base: Path = HETERO, block: str = BLOCK, tail: str = "") -> Path:
    path = tmp_path / base.name
    path.write_text(base.read_text(encoding="utf-8") + block + tail, encoding="utf-8")
    return path


@pytest.fixture
def plan(tmp_path: Path) -> Plan:
    return plan_from_file(container_config(tmp_path))


@pytest.fixture
def pyxis_plan(tmp_path: Path) -> Plan:
    return plan_from_file(container_config(tmp_path, block=PYXIS_BLOCK))


def assignments(text: str) -> dict[str, list[str]]:
    """The launcher arrays of a script (`hp_launcher=(WORDS)`, `hp_container_G=(...)`, `hp_launcher_G=(...)`),
    each as bash splits its words (shlex: no expansion happens in them but the job id, kept as written)."""
    found = re.finditer(r"^(hp_(?:container|launcher)(?:_\d+)?)=\((.*)\)$", text, re.M)
    return {m.group(1): shlex.split(m.group(2)) for m in found}


def srun_segments(text: str) -> list[str]:
    """Every colon-separated part of every srun in the script, continuation lines joined."""
    joined = text.replace("\\\n", " ")
    parts = []
    for line in joined.splitlines():
        if line.lstrip().startswith("#") or " srun --" not in f" {line.strip()}":
            continue
        parts += f" {line.strip()}".split(" srun ", 1)[1].split(" : ")
    return parts


def het_group(segment: str) -> int:
    m = re.search(r"--het-group=(\d+)", segment)
    return int(m.group(1)) if m else 0


def job_name(segment: str) -> str:
    m = re.search(r"--job-name=(\S+)", segment)
    assert m, segment
    return m.group(1)


def check_entries(text: str, in_container: set[int]) -> set[str]:
    """Every shim-starting segment enters its group's container (or the job's launcher); host-only steps
    (the /dev/shm guard, the clean-up) run neither. Returns the job names seen."""
    seen = set()
    for seg in srun_segments(text):
        name, g = job_name(seg), het_group(seg)
        seen.add(name)
        if name in ("hpcplace-shm", "hpcplace-clean"):
            assert "hp_container" not in seg and "hp_launcher" not in seg, seg
            continue
        if g in in_container:
            assert f'"${{hp_container_{g}[@]}}" "${{hp_launcher_{g}[@]}}" --' in seg, seg
            assert '"${hp_launcher[@]}"' not in seg, seg
        else:
            assert '"${hp_launcher[@]}" --' in seg and "hp_container" not in seg, seg
    return seen


# ================================================================================================
# job.sbatch


def test_per_group_arrays(plan: Plan) -> None:
    text = render_script(plan, RUN, launcher=LAUNCHER)
    arrays = assignments(text)
    # one pair per group in a container; none for cpu (het 2), which runs bare
    assert set(arrays) == {"hp_launcher"} | {f"hp_{kind}_{g}" for g in (0, 1, 3) for kind in ("container", "launcher")}
    assert arrays["hp_launcher"] == list(LAUNCHER)
    shim = ["python3", f"{RUN}/{CARRY_DIR}/{CARRY_ENTRY}", "--chdir", "/home/u/proj"]
    # apptainer: behind the host-side check, the run and submit directories bound before the user's mounts
    assert arrays["hp_container_0"] == []
    assert arrays["hp_launcher_0"] == [
        "/bin/bash",
        f"{RUN}/{CARRY_DIR}/{ENTER_SCRIPT}",
        "path",
        "/shared/images/verl.sif",
        "apptainer",
        "exec",
        "--nv",
        "--bind",
        f"{RUN}:{RUN},/home/u/proj:/home/u/proj,/data:/data:ro",
        "--writable-tmpfs",
        "/shared/images/verl.sif",
        *shim,
    ]
    # the group's own image, mounts and args (not the job's --writable-tmpfs)
    assert arrays["hp_container_1"] == []
    assert arrays["hp_launcher_1"][arrays["hp_launcher_1"].index("--bind") :] == [
        "--bind",
        f"{RUN}:{RUN},/home/u/proj:/home/u/proj,/models:/models:ro,/scratch:/scratch",
        "--cleanenv",
        "/shared/images/sglang.sif",
        *shim,
    ]
    # Slurm's OCI runtime: the bundle, nothing else
    assert arrays["hp_container_3"] == ["--container=/shared/bundles/robot"]
    assert arrays["hp_launcher_3"] == shim
    # the header says which group runs in what
    assert "# node group a800: in apptainer image /shared/images/verl.sif, the shim run by the image's python3" in text
    assert "# node group cpu: in" not in text
    assert subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True).returncode == 0


def test_pyxis_flags_are_the_ones_pyxis_documents(pyxis_plan: Plan) -> None:
    assert len(PYXIS_OPTIONS) == 16 and PYXIS_OPTIONS["--container-image"] and not PYXIS_OPTIONS["--container-writable"]
    launch = group_launch(1, pyxis_plan.cluster.node_groups[1].container, LAUNCHER, RUN)
    assert launch.srun_args  # the pyxis group's flags, as rendered
    for arg in launch.srun_args:
        name, eq, value = arg.partition("=")
        assert name in PYXIS_OPTIONS, f"{name} is no pyxis option"
        assert bool(eq) == PYXIS_OPTIONS[name], f"{arg}: pyxis documents {name} {'with' if eq else 'without'} a value"
        if name == "--container-mounts":  # SRC:DST[:FLAGS][,SRC:DST...]
            assert all(re.fullmatch(r"/[^:,]*:/[^:,]*(:ro)?", m) for m in value.split(",")), value
        if name == "--container-name":  # NAME[:FLAGS]: hpcplace gives no flags (pyxis's default, auto)
            assert ":" not in value
    assert [a.partition("=")[0] for a in launch.srun_args[:4]] == [
        "--container-image",
        "--container-mounts",
        "--container-workdir",
        "--container-name",
    ]


def test_pyxis_gives_every_group_the_jobs_one_container(pyxis_plan: Plan) -> None:
    """pyxis: srun options (the job id stays a shell expansion until the script runs), the same for every group."""
    arrays = assignments(render_script(pyxis_plan, RUN, launcher=LAUNCHER))
    shim = ["python3", f"{RUN}/{CARRY_DIR}/{CARRY_ENTRY}", "--chdir", "/home/u/proj"]
    for g in range(4):
        assert arrays[f"hp_container_{g}"] == PYXIS_SRUN and arrays[f"hp_launcher_{g}"] == shim


def test_pyxis_beside_another_container_is_refused(tmp_path: Path) -> None:
    """pyxis keeps one set of options per srun (a second --container-image of another value: "specified multiple
    times"), and the preflight is one srun over every group: pyxis in one group and another image (or none) in
    another cannot start."""
    block = PYXIS_BLOCK + "  node_groups:\n    cpu: {runtime: none}\n"
    plan = plan_from_file(container_config(tmp_path, block=block))
    with pytest.raises(SpecError, match=r"pyxis keeps one set of options per srun") as err:
        render_script(plan, RUN, launcher=LAUNCHER)
    assert "cpu: no container" in err.value.message and "runtime apptainer" in (err.value.hint or "")


def test_pyxis_settings_written_again_for_a_group_are_the_same_container(tmp_path: Path) -> None:
    block = PYXIS_BLOCK + "  node_groups:\n    cpu: {runtime: pyxis, image: 'nvcr.io#nvidia/pytorch:25.01-py3'}\n"
    plan = plan_from_file(container_config(tmp_path, block=block))
    assert "hp_container_2=(" in render_script(plan, RUN, launcher=LAUNCHER)


def test_the_job_id_fills_the_container_name_when_the_script_runs(pyxis_plan: Plan) -> None:
    text = render_script(pyxis_plan, RUN, launcher=LAUNCHER)
    line = next(line for line in text.splitlines() if line.startswith("hp_container_1=("))
    assert '--container-name=hpcplace-"${SLURM_JOB_ID}"' in line
    show = line + '\nprintf "%s\\n" "${hp_container_1[@]}"\n'
    env = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": "4242"}
    words = subprocess.run(["bash", "-c", show], env=env, text=True, capture_output=True, check=True).stdout
    assert words.splitlines() == [
        "--container-image=nvcr.io#nvidia/pytorch:25.01-py3",
        f"--container-mounts={RUN}:{RUN},/home/u/proj:/home/u/proj,/models:/models:ro,/scratch:/scratch",
        "--container-workdir=/home/u/proj",
        f"--container-name={container_name('4242')}",
        "--container-writable",
        "--no-container-mount-home",
    ]
    assert container_name("4242") == "hpcplace-4242"
    # a hostile job id stays one word (the name is quoted, the id is data)
    env["SLURM_JOB_ID"] = "1; touch /tmp/x $(id)"
    words = subprocess.run(["bash", "-c", show], env=env, text=True, capture_output=True, check=True).stdout
    assert "--container-name=hpcplace-1; touch /tmp/x $(id)" in words.splitlines()


def test_steps_and_preflight_enter_their_groups_container(plan: Plan) -> None:
    text = render_script(plan, RUN, launcher=LAUNCHER)
    names = check_entries(text, in_container={0, 1, 3})
    # the requeue clean-up (hpcplace-clean) and the /dev/shm guard run on the host
    assert names == {
        "actor",
        "rollout",
        "inference",
        "env",
        "agent",
        "hpcplace-preflight",
        "hpcplace-shm",
        "hpcplace-clean",
    }
    assert len(srun_segments(text)) == 5 + 3 * 4  # five one-group steps; guard, clean-up, preflight on 4 groups
    # the steps keep their own srun options in front of the container's
    seg = next(s for s in srun_segments(text) if job_name(s) == "inference")
    assert seg.index("--gpu-bind=") < seg.index('"${hp_container_1[@]}"')


def test_ray_mode_nodes_and_driver_enter_their_groups_container(tmp_path: Path) -> None:
    launch = "launch:\n  mode: ray\n  driver: [python, main.py]\n"
    plan = plan_from_file(container_config(tmp_path, tail=launch))
    text = render_script(plan, RUN, launcher=LAUNCHER)
    names = check_entries(text, in_container={0, 1, 3})
    assert names == {"ray", "driver", "hpcplace-preflight", "hpcplace-shm", "hpcplace-clean"}
    ray = [s for s in srun_segments(text) if "--ray-node" in s]
    assert len(ray) == 4 and sum('"${hp_launcher[@]}" --ray-node' in s for s in ray) == 1
    driver = [s for s in srun_segments(text) if "--ray-driver" in s]
    assert len(driver) == 1 and '"${hp_container_0[@]}" "${hp_launcher_0[@]}" --ray-driver' in driver[0]
    assert subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True).returncode == 0
    # the head in a bare group: the driver runs the job's launcher
    bare_head = BLOCK.replace("  node_groups:\n", "  node_groups:\n    a800: {runtime: none}\n")
    text = render_script(plan_from_file(container_config(tmp_path, block=bare_head, tail=launch)), RUN)
    driver = [s for s in srun_segments(text) if "--ray-driver" in s]
    assert '"${hp_launcher[@]}" --ray-driver' in driver[0]
    check_entries(text, in_container={1, 3})


def test_a_plan_without_containers_renders_as_before(tmp_path: Path) -> None:
    text = render_script(plan_from_file(HETERO), RUN, launcher=LAUNCHER)
    assert "hp_container" not in text and "hp_launcher_" not in text
    check_entries(text, in_container=set())


def test_a_run_directory_a_bind_list_cannot_carry(plan: Plan) -> None:
    for bad in ("/srv/runs/a,b", "/srv/runs/a:b"):
        with pytest.raises(SlurmError, match="holds a ',' or ':'"):
            render_script(plan, bad, launcher=LAUNCHER)
    bare = plan_from_file(HETERO)
    assert "\nhp_run_dir=/srv/runs/a,b\n" in render_script(bare, "/srv/runs/a,b")  # no container: no bind list


# ================================================================================================
# the carried runtime


def test_carried_runtime_written_only_with_a_container(plan: Plan, tmp_path: Path) -> None:
    run = render_run(plan, tmp_path / "with", launcher=LAUNCHER)
    carry = run.run_dir / CARRY_DIR
    assert (carry / "hpcplace" / "runtime" / "shim.py").is_file()
    assert (carry / "hpcplace" / "__init__.py").is_file()
    assert (carry / CARRY_ENTRY).read_text(encoding="utf-8") == CARRIED_ENTRY
    enter = carry / ENTER_SCRIPT
    assert enter.stat().st_mode & stat.S_IXUSR and enter.read_text().startswith("#!/bin/bash\n")
    runtime = REPO / "runtime"
    assert sorted(p.name for p in (carry / "hpcplace" / "runtime").iterdir()) == sorted(
        p.name for p in runtime.glob("*.py")
    )
    for py in runtime.glob("*.py"):
        assert (carry / "hpcplace" / "runtime" / py.name).read_bytes() == py.read_bytes()
    bare = render_run(plan_from_file(HETERO), tmp_path / "without")
    assert not (bare.run_dir / CARRY_DIR).exists()
    assert sorted(p.name for p in bare.run_dir.iterdir()) == [
        LIBRARY_NAME,
        "job.sbatch",
        "logs",
        "plan.json",
        "plan.json.idx",
    ]


def test_carried_python_is_readable_by_the_oldest_python_hpcplace_states(plan: Plan, tmp_path: Path) -> None:
    run = render_run(plan, tmp_path / "run", launcher=LAUNCHER)
    files = sorted((run.run_dir / CARRY_DIR).rglob("*.py"))
    assert len(files) > 10
    for path in files:
        ast.parse(path.read_text(encoding="utf-8"), str(path), feature_version=(3, 10))
    # the entry itself is read by any python3 an image may have, so that it can say what it needs
    ast.parse(CARRIED_ENTRY, CARRY_ENTRY, feature_version=(3, 6))


def test_carried_entry_refuses_an_old_python(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(sys, "version_info", (3, 9, 18, "final", 0))
    monkeypatch.setattr(sys, "executable", "/usr/bin/python3.9")
    before = dict(os.environ)
    with pytest.raises(SystemExit) as exit_info:
        exec(compile(CARRIED_ENTRY, CARRY_ENTRY, "exec"), {"__file__": str(tmp_path / CARRY_ENTRY)})
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("hpcplace-run: FAILED: this image's Python is 3.9 (/usr/bin/python3.9); hpcplace's shim")
    assert "needs Python 3.10 or newer: set container.python" in err
    assert dict(os.environ) == before  # it stopped before touching anything


def test_carried_entry_runs_the_shim_from_the_run_directory(plan: Plan, tmp_path: Path) -> None:
    """With a Python that is new enough, the entry imports the carried shim, not an installed hpcplace:
    run by a bare interpreter (-S -E: no site-packages, no PYTHONPATH) it still finds hpcplace.runtime."""
    run = render_run(plan, tmp_path / "run", launcher=LAUNCHER)
    entry = run.run_dir / CARRY_DIR / CARRY_ENTRY
    res = subprocess.run(
        [sys.executable, "-S", "-E", str(entry), "--preflight"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert "No module named" not in res.stderr, res.stderr
    assert "usage: hpcplace-run --preflight --plan PLAN.json" in res.stdout + res.stderr


# ================================================================================================
# the Apptainer enter script, run


def enter_script(plan: Plan, tmp_path: Path) -> Path:
    return render_run(plan, tmp_path / "run", launcher=LAUNCHER).run_dir / CARRY_DIR / ENTER_SCRIPT


def test_enter_script_checks_the_runtime_and_the_image_then_execs(plan: Plan, tmp_path: Path) -> None:
    script = enter_script(plan, tmp_path)
    image = tmp_path / "img.sif"
    env = {"PATH": "/usr/bin:/bin", "SLURMD_NODENAME": "gpu07"}

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["/bin/bash", str(script), *args], env={**env, **extra}, capture_output=True, text=True, timeout=30
        )

    res = run("path", str(image), "echo", "exec", str(image))
    assert res.returncode == 1
    assert res.stderr == (
        f"hpcplace-preflight: gpu07: FAILED: image {image} does not exist on this node: keep it on storage every "
        "node of the group mounts\n"
    )
    image.write_bytes(b"sif")
    res = run("path", str(image), "no-such-apptainer", "exec", str(image))
    assert res.returncode == 1 and "the container runtime no-such-apptainer is not installed on this node" in res.stderr
    log = tmp_path / "preflight.{node}.out"
    res = run("path", str(image), "echo", "exec", "--nv", str(image), "python3", HPCPLACE_PREFLIGHT_LOG=str(log))
    assert res.returncode == 0 and res.stdout == f"exec --nv {image} python3\n"
    assert not (tmp_path / "preflight.gpu07.out").exists()
    # a reference is pulled by the runtime: no file to check
    assert run("ref", "docker://x/y:1", "echo", "ok").stdout == "ok\n"
    # the preflight's log of this node gets the failure too
    res = run("path", "/nonexistent.sif", "echo", HPCPLACE_PREFLIGHT_LOG=str(log))
    assert res.returncode == 1
    assert (tmp_path / "preflight.gpu07.out").read_text() == res.stderr


# ================================================================================================
# exec / attach


def live(plan: Plan, tmp_path: Path) -> attach.LiveRun:
    return attach.LiveRun(tmp_path / "run", "4711", plan, LAUNCHER)


def test_exec_enters_the_named_pyxis_container_of_the_real_job(pyxis_plan: Plan, tmp_path: Path) -> None:
    run = live(pyxis_plan, tmp_path)
    target = attach.rank_target(run.plan, "inference", 2)  # rtx4090 (het 1)
    argv = attach.exec_argv(run, target, tmp_path / "c.json", component="inference", rank=2)
    assert "--het-group=1" in argv
    assert "--container-name=hpcplace-4711" in argv and not any("SLURM_JOB_ID" in a for a in argv)
    assert "--container-image=nvcr.io#nvidia/pytorch:25.01-py3" in argv
    i = argv.index("python3")
    assert argv[i : i + 4] == ["python3", f"{run.run_dir}/{CARRY_DIR}/{CARRY_ENTRY}", "--chdir", "/home/u/proj"]
    assert argv.index("--container-name=hpcplace-4711") < i  # an srun option, before the program
    assert LAUNCHER[0] not in argv


def test_exec_and_driver_enter_apptainer_through_the_enter_script(plan: Plan, tmp_path: Path) -> None:
    run = live(plan, tmp_path)
    argv = attach.exec_argv(
        run, attach.rank_target(run.plan, "actor", 0), tmp_path / "c.json", component="actor", rank=0
    )
    i = argv.index("/bin/bash")
    assert argv[i + 1 : i + 5] == [
        f"{run.run_dir}/{CARRY_DIR}/{ENTER_SCRIPT}",
        "path",
        "/shared/images/verl.sif",
        "apptainer",
    ]
    assert not any(a.startswith("--container") for a in argv)
    driver = attach.driver_argv(run, tmp_path / "d.json")
    i = driver.index("/bin/bash")
    assert driver[i + 1] == f"{run.run_dir}/{CARRY_DIR}/{ENTER_SCRIPT}" and "--het-group=0" in driver
    assert driver[-5:] == ["--ray-driver", "--plan", str(run.plan_path), "--argv", str(tmp_path / "d.json")]
    # a bare group's node: the job's launcher
    argv = attach.exec_argv(run, attach.node_target(run.plan, 3), tmp_path / "c.json", component=None, rank=None)  # cpu
    assert argv[argv.index(LAUNCHER[0]) : argv.index(LAUNCHER[0]) + 3] == list(LAUNCHER)
    assert "/bin/bash" not in argv and not any(a.startswith("--container") for a in argv)


def test_exec_from_plan_json_read_back(pyxis_plan: Plan, tmp_path: Path) -> None:
    """`hpcplace exec` reads plan.json: what it enters is what the job's steps entered."""
    rendered = render_run(pyxis_plan, tmp_path / "run", launcher=LAUNCHER)
    back = attach.LiveRun(rendered.run_dir, "77", load_plan(rendered.plan_json), LAUNCHER)
    argv = attach.exec_argv(
        back, attach.node_target(back.plan, 2), tmp_path / "c.json", component=None, rank=None
    )  # rtx4090
    assert "--container-name=hpcplace-77" in argv
    script = rendered.script.read_text()
    line = next(x for x in script.splitlines() if x.startswith("hp_container_1=("))
    words = shlex.split(line[len("hp_container_1=(") : -1].replace('"${SLURM_JOB_ID}"', "77"))
    assert all(w in argv for w in words)


# ================================================================================================
# Slurm versions


def test_oci_needs_slurm_23_02(plan: Plan) -> None:
    assert OCI_OLDEST == (23, 2)
    problems = version_problems(plan, (22, 5))
    assert len(problems) == 1 and problems[0].startswith("node group 'robot': Slurm 22.05's --container")
    assert "hpcplace needs Slurm 23.02 or newer" in problems[0]
    assert version_problems(plan, (23, 2)) == [] and version_problems(plan, (26, 5)) == []
    with pytest.raises(SlurmError, match="this site's Slurm cannot run the plan"):
        refuse_unsupported(plan, (22, 5))
    refuse_unsupported(plan, (24, 11))
    # apptainer and pyxis run on any supported Slurm
    no_oci = [g.label for g in plan.cluster.node_groups if g.container and g.container.runtime != "oci"]
    assert no_oci == ["a800", "rtx4090"]


# ================================================================================================
# AReaL: the image its scheduling_spec names


def test_areal_scheduling_spec_planned_and_rendered(tmp_path: Path) -> None:
    config = tmp_path / "countdown.yaml"
    config.write_text(COUNTDOWN.lstrip("\n"), encoding="utf-8")
    plan = plan_from_file(config)
    assert [g.container for g in plan.cluster.node_groups] == [COUNTDOWN_CONTAINER]
    assert (
        Container(
            "singularity",
            "/shared/images/areal-v1.0.sif",
            (Mount("/shared/models", "/models"), Mount("/scratch", "/scratch", True)),
            args=("--no-home", "--writable-tmpfs"),
        )
        == COUNTDOWN_CONTAINER
    )
    rendered = render_run(plan, tmp_path / "run", launcher=LAUNCHER)
    back = load_plan(rendered.plan_json)
    assert [g.container for g in back.cluster.node_groups] == [COUNTDOWN_CONTAINER]
    assert {c.name: dict(c.env) for c in back.components} == {"rollout": COUNTDOWN_ENV, "actor": COUNTDOWN_ENV}
    text = rendered.script.read_text()
    arrays = assignments(text)
    run_dir = str(rendered.run_dir)
    # as AReaL's launcher: singularity exec --no-home --writable-tmpfs --nv --bind MOUNT ... IMAGE CMD
    assert arrays["hp_launcher_0"] == [
        "/bin/bash",
        f"{run_dir}/{CARRY_DIR}/{ENTER_SCRIPT}",
        "path",
        "/shared/images/areal-v1.0.sif",
        AREAL_RUNTIME,
        "exec",
        "--nv",
        "--bind",
        f"{run_dir}:{run_dir},/home/u/proj:/home/u/proj,/shared/models:/models,/scratch:/scratch:ro",
        *AREAL_ARGS,
        "/shared/images/areal-v1.0.sif",
        "python3",
        f"{run_dir}/{CARRY_DIR}/{CARRY_ENTRY}",
        "--chdir",
        "/home/u/proj",
    ]
    assert arrays["hp_container_0"] == []
    names = check_entries(text, in_container={0})
    assert {"rollout", "actor", "hpcplace-preflight", "hpcplace-shm"} <= names
    assert (rendered.run_dir / CARRY_DIR / ENTER_SCRIPT).is_file()
    assert subprocess.run(["bash", "-n", str(rendered.script)], capture_output=True).returncode == 0
