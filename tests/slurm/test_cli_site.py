"""What a real site meets on day one, through `hpcplace.cli.main` with fake Slurm executables on PATH:
no driver, no job; the launcher and the driver's interpreter as absolute paths; warnings for paths the
compute nodes do not share; -o the same on render/submit/run; bad input is exit 2; no controller is one
line with what to check; a failed submit leaves nothing behind; logs of a run that never ran."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from hpcplace.cli import build_parser, main
from hpcplace.commands.slurm_cmds import default_launcher
from hpcplace.config import launch
from hpcplace.errors import SpecError
from hpcplace.plan import runnable
from hpcplace.plan.planner import plan_from_file
from hpcplace.slurm import shared_fs, slurm_cli, validate
from hpcplace.slurm.shared_fs import CheckedPath, Mount
from tests.slurm.conftest import REPO
from tests.slurm.test_submit_fake import _calls, fake_slurm  # noqa: F401  (the fixture)

HETERO = REPO / "configs" / "hetero-partitions.yaml"
RLINF = REPO / "configs" / "rlinf-collocated.yaml"  # an unchanged RLinf config: no command, no driver
HALF = """\
name: half
cluster:
  node_groups: [{label: cpu, partition: cpu, nodes: 1}]
  component_placement: {a: "0:0", b: "0:0"}
components:
  a: {command: ["true"]}
"""


def _write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ---- no driver, no job ---------------------------------------------------------------------------


def test_framework_config_without_driver_warns_on_plan_and_is_refused_by_render_submit_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_slurm: Path
) -> None:
    code, out, err = _cli(capsys, "plan", str(RLINF))
    assert code == 0 and out.startswith("plan '")
    assert err.count("\n") == 1 and err.startswith("hpcplace: warning: nothing to run: no component of ")
    for argv in (
        ["render", str(RLINF), "-o", str(tmp_path / "r")],
        ["submit", str(RLINF), "-o", str(tmp_path / "s")],
        ["submit", str(RLINF), "--dry-run"],
        ["run", str(RLINF), "--local", "-o", str(tmp_path / "l")],
    ):
        code, out, err = _cli(capsys, *argv)
        assert code == 2, (argv, err)
        assert "nothing to run: no component of" in err and "('actor', 'rollout')" in err and "(rlinf)" in err
        assert "launch: {mode: ray, driver: [python, main.py, ...]}" in err and "--driver -- python main.py" in err
        assert "Traceback" not in err and out == ""
    assert not any((tmp_path / d).exists() for d in "rsl") and _calls(fake_slurm) == []
    # with its driver it renders (the 32-task steps job it used to render would fail on the nodes)
    assert main(["render", str(RLINF), "-o", str(tmp_path / "r"), "--driver", "--", "python", "main.py"]) == 0
    assert main(["plan", str(RLINF), "--driver", "--", "python", "main.py"]) == 0
    # (render warns that main.py is not in the working directory: the job's preflight would stop on it)
    assert capsys.readouterr().err.splitlines() == [
        f"hpcplace: warning: the Ray driver: its script 'main.py' is not in the working directory {os.getcwd()}: the "
        "job would fail at its start (pass --workdir DIR, or give the path from there)"
    ]


def test_native_config_names_the_commandless_component_and_components_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, HALF)
    code, _, err = _cli(capsys, "render", str(path), "-o", str(tmp_path / "run"))
    assert code == 2 and "nothing to run: component(s) 'b' of" in err and "(native)" in err
    assert "components.<name>.command" in err
    # `run --local --component a` starts only `a`, which has a command: the check follows the choice
    plan = plan_from_file(path)
    assert runnable.nothing_to_run(plan, ["a"]) is None and runnable.nothing_to_run(plan, ["b"]) is not None


def test_ray_mode_needs_a_driver_and_no_component_commands() -> None:
    plan = plan_from_file(RLINF)
    ray = replace(plan, launch=launch.with_driver(plan.launch, ["python", "main.py"]))
    assert runnable.commandless_components(ray) == () and runnable.nothing_to_run(ray) is None
    empty = replace(plan, launch=launch.LaunchSpec("ray", ()))
    with pytest.raises(runnable.NothingToRunError, match="the Ray launch mode has no driver"):
        runnable.check_runnable(empty)
    facts = validate.ClusterFacts({}, ())
    assert "the Ray launch mode has no driver to run" in validate.check(empty, facts).problems
    assert not any("no command" in p for p in validate.check(ray, facts).problems)
    assert [p for p in validate.check(plan, facts).problems if "no command" in p] == [
        "component 'actor' has no command to run",
        "component 'rollout' has no command to run",
    ]


# ---- the launcher and the driver's interpreter -----------------------------------------------------


def test_default_launcher_is_the_environments_own(tmp_path: Path) -> None:
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    python = bin_dir / "python"
    python.symlink_to(sys.executable)  # a venv's python is a link: its path, not its target, is the venv
    assert default_launcher(str(python)) == (str(python), "-m", "hpcplace.runtime")
    shim = bin_dir / "hpcplace-run"
    shim.write_text("#!/bin/sh\n")
    shim.chmod(0o755)
    assert default_launcher(str(python)) == (str(shim),)


def test_rendered_launcher_is_absolute_and_in_the_header(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["render", str(HETERO), "-o", str(tmp_path / "a")]) == 0
    text = (tmp_path / "a" / "job.sbatch").read_text()
    words = default_launcher()
    assert os.path.isabs(words[0])
    assert f"# launcher (starts hpcplace's shim in every task): {' '.join(words)} --chdir " in text
    # a bare --launcher program is looked up on PATH at submit time
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "site-shim").write_text("#!/bin/sh\n")
    (bin_dir / "site-shim").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    assert main(["render", str(HETERO), "-o", str(tmp_path / "b"), "--launcher", "site-shim --verbose"]) == 0
    assert f"hp_launcher=({bin_dir}/site-shim --verbose --chdir " in (tmp_path / "b" / "job.sbatch").read_text()
    capsys.readouterr()
    code, _, err = _cli(capsys, "render", str(HETERO), "-o", str(tmp_path / "c"), "--launcher", "no-such-shim")
    assert code == 2 and "--launcher program 'no-such-shim' was not found on PATH" in err
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize(
    "program, found, rendered",
    [
        # python/python3/python3.11 are the submitting interpreter (it runs the raylets too), whatever PATH holds:
        # a venv's hpcplace run without the venv activated finds another environment's `python` there
        ("python", "/root/.pyenv/shims/python", "/usr/local/bin/python3.11"),
        ("python3", None, "/usr/local/bin/python3.11"),
        ("python3.11", "/opt/env/bin/python3.11", "/usr/local/bin/python3.11"),
        ("python3.12", "/opt/env/bin/python3.12", "/opt/env/bin/python3.12"),  # another version: asked for by name
        ("torchrun", "/opt/env/bin/torchrun", "torchrun"),  # any other bare program stays as given
        ("pythonic", "/x/pythonic", "pythonic"),
        ("./main.py", None, "./main.py"),
    ],
)
def test_bare_python_driver_gets_the_submitting_interpreter(program: str, found: str | None, rendered: str) -> None:
    spec = launch.LaunchSpec("ray", (program, "main.py"))
    out = launch.resolve_driver_interpreter(spec, lambda _name: found, "/usr/local/bin/python3.11", (3, 11))
    assert out.driver == (rendered, "main.py")
    steps = launch.LaunchSpec()
    assert launch.resolve_driver_interpreter(steps, lambda _name: found, "/p") is steps


# ---- paths the compute nodes do not see ------------------------------------------------------------

MOUNTS = shared_fs.parse_mounts(
    "/dev/vda / ext4 rw 0 0\n"
    "tmpfs /dev/shm tmpfs rw 0 0\n"
    "nfs:/home /home nfs4 rw 0 0\n"
    "tmpfs /scratch\\040space tmpfs rw 0 0\n"
    "tmpfs /run/user/0 tmpfs rw 0 0\n"
    "/dev/vdb /run/user/0/data ext4 rw 0 0\n"
)


def test_mount_table_and_longest_prefix() -> None:
    assert Mount("/scratch space", "tmpfs") in MOUNTS
    assert shared_fs.mount_of("/home/u/x", MOUNTS) == Mount("/home", "nfs4")
    assert shared_fs.mount_of("/homeland/x", MOUNTS) == Mount("/", "ext4")
    assert shared_fs.mount_of("/run/user/0/data/venv", MOUNTS) == Mount("/run/user/0/data", "ext4")
    assert shared_fs.mount_of("/run/user/0/venv", MOUNTS) == Mount("/run/user/0", "tmpfs")


@pytest.mark.parametrize(
    "path, shared, reason",
    [
        ("/home/u/venv/bin/python", (), None),
        ("/work/x", (), None),
        ("/tmp/venv/bin/hpcplace-run", (), "under /tmp, which each node has for itself"),
        ("/var/tmp/run", (), "under /var/tmp"),
        ("/dev/shm/x", (), "under /dev/shm"),
        ("/tmpfoo/x", (), None),
        ("/scratch space/env", (), "on a tmpfs (/scratch space: this host's memory"),
        ("/run/user/0/venv", (), "on a tmpfs (/run/user/0:"),
        ("/run/user/0/data/venv", (), None),
        ("/home/u/run", ("/home", "/gpfs"), None),
        ("/gpfs/", ("/home", "/gpfs/"), None),
        ("/work/x", ("/home", "/gpfs"), "outside slurm.shared_paths (/home, /gpfs)"),
        ("/homeland/x", ("/home",), "outside slurm.shared_paths (/home)"),
        ("/tmp/x", ("/",), None),  # the site's list is the whole answer
    ],
)
def test_not_shared_reason(path: str, shared: tuple[str, ...], reason: str | None) -> None:
    got = shared_fs.not_shared_reason(path, MOUNTS, shared)
    assert (got is None) if reason is None else (got is not None and got.startswith(reason)), got


def test_path_warnings_name_the_path_and_the_fix() -> None:
    lines = shared_fs.path_warnings(
        [
            CheckedPath("the launcher", "/tmp/v/bin/hpcplace-run", "install it elsewhere"),
            CheckedPath("the run directory", "/home/u/r", "use -o"),
        ],
        MOUNTS,
    )
    assert lines == [
        "the launcher /tmp/v/bin/hpcplace-run is under /tmp, which each node has for itself: the "
        "compute nodes will not find it; install it elsewhere"
    ]


def test_shared_paths_key(tmp_path: Path) -> None:
    plan = plan_from_file(
        _write(
            tmp_path,
            HALF.replace('a: {command: ["true"]}', 'a: {command: ["true"]}\n  b: {command: ["true"]}')
            + "slurm: {shared_paths: [/home, /g p]}\n",
        )
    )
    from hpcplace.config.spec import shared_paths

    assert shared_paths(plan.slurm) == ("/home", "/g p")
    for bad, words in (
        ("/home", "must be a list of absolute paths, got '/home'"),
        ("[home]", "'home' is not an absolute"),
        ("[]", "must be a list"),
        ("[1]", "1 is not an absolute"),
    ):
        with pytest.raises(SpecError, match=r"slurm\.shared_paths") as info:
            plan_from_file(_write(tmp_path, HALF + f"slurm: {{shared_paths: {bad}}}\n"))
        assert words in info.value.message and info.value.location is not None and info.value.location.line == 7


def test_submit_and_validate_warn_about_unshared_paths_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_slurm: Path
) -> None:
    text = HETERO.read_text() + "\n  shared_paths: [/nowhere-shared]\n"
    assert "\nslurm:" in HETERO.read_text()
    path = _write(tmp_path, text)
    code, out, err = _cli(capsys, "submit", str(path), "-o", str(tmp_path / "run"), "--workdir", str(tmp_path))
    assert code == 0 and out.startswith("job 4242 ")
    warned = [line for line in err.splitlines() if "outside slurm.shared_paths (/nowhere-shared)" in line]
    assert [w.split(" ")[2:4] for w in warned] == [["the", "launcher"], ["the", "working"], ["the", "run"]]
    assert all(w.startswith("hpcplace: warning: ") and "; " in w for w in warned)
    code, out, err = _cli(capsys, "validate", str(path))
    assert code == 0 and "the cluster can run this job" in out and "outside slurm.shared_paths" not in out
    assert "hpcplace: warning: the run directory" in err


# ---- -o, defaults, --version, help ------------------------------------------------------------------


def test_o_is_the_run_dir_everywhere_and_render_has_submits_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_slurm: Path
) -> None:
    for cmd in ("render", "submit"):
        for flag in ("-o", "--run-dir"):
            run_dir = tmp_path / f"{cmd}{flag}"
            assert main([cmd, str(HETERO), flag, str(run_dir)]) == 0
            assert (run_dir / "job.sbatch").exists() and (run_dir / "plan.json").exists()
    capsys.readouterr()
    assert main(["run", str(HETERO), "--local", "--dry-run", "-o", str(tmp_path / "local")]) == 0
    assert f"{tmp_path / 'local' / 'plan.json'}" in capsys.readouterr().out  # the processes' HPCPLACE_PLAN
    path = _write(tmp_path, HETERO.read_text() + f"\n  output_dir: {tmp_path / 'out'}\n")
    assert main(["render", str(path)]) == 0
    made = list((tmp_path / "out").iterdir())
    assert len(made) == 1 and made[0].name.startswith("hetero-partitions-") and (made[0] / "job.sbatch").exists()
    capsys.readouterr()


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out == f"hpcplace {version('hpcplace')}\n"


def test_every_subcommand_help_has_defaults_and_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    subcommands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert {"plan", "run", "render", "submit", "validate", "status", "cancel", "logs"} <= set(subcommands)
    for name, sub in subcommands.items():
        with pytest.raises(SystemExit):
            main([name, "--help"])
        out = capsys.readouterr().out
        assert "examples:\n  hpcplace " + name in out, name
        if any(a.option_strings and a.default not in (None, False, [], argparse.SUPPRESS) for a in sub._actions):
            assert "default" in out, name  # every option that has a default shows it
    main_help = build_parser().format_help()
    assert "--version" in main_help
    with pytest.raises(SystemExit):
        main(["status", "--help"])
    out = capsys.readouterr().out
    assert "a run directory written by `hpcplace submit`" in out and "Slurm job id" in out
    assert "(default: 1.0)" in out  # --interval


# ---- bad input is exit 2, never a traceback ---------------------------------------------------------


def test_run_without_local_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _cli(capsys, "run", str(HETERO))
    assert code == 2 and "needs --local" in err


def test_missing_run_dir_or_job_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_slurm: Path
) -> None:
    missing = str(tmp_path / "no-such-run")
    (fake_slurm / "sacct.out").write_text("")  # neither the controller nor accounting knows job 999
    for argv in (["status", missing], ["cancel", missing], ["logs", missing], ["status", "999"], ["cancel", "999"]):
        code, _, err = _cli(capsys, *argv)
        assert code == 2, (argv, err)
        assert "no such run directory" in err or "no run directory" in err or "Slurm knows no job 999" in err, err
        assert "Traceback" not in err


@pytest.mark.parametrize("command", ["render", "run"])
def test_output_path_errors_are_clear(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    (tmp_path / "file").write_text("x")
    extra = ["--local"] if command == "run" else []
    for target, words in (
        (tmp_path / "file", "a file is in the way"),
        (tmp_path / "file" / "run", "Not a directory"),
        (Path("/sys/hpcplace-not-writable/run"), "cannot create the run directory"),
    ):
        code, _, err = _cli(capsys, command, str(HETERO), *extra, "-o", str(target))
        assert code == 2 and words in err and str(target) in err and "Traceback" not in err, err


# ---- no Slurm controller ---------------------------------------------------------------------------

NO_CONTROLLER = """#!/bin/bash
echo "$*" >>"$FAKE_DIR/calls"
echo "$(basename "$0"): error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host" >&2
echo "$(basename "$0"): error: fetch_config: DNS SRV lookup failed" >&2
echo "$(basename "$0"): error: _establish_config_source: failed to fetch config" >&2
echo "$(basename "$0"): fatal: Could not establish a configuration source" >&2
exit 1
"""


@pytest.fixture
def no_controller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "nobin"
    bin_dir.mkdir()
    for name in ("sbatch", "scontrol", "sacct", "squeue", "scancel"):
        (bin_dir / name).write_text(NO_CONTROLLER)
        (bin_dir / name).chmod(0o755 | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_DIR", str(tmp_path))
    return tmp_path


def test_no_controller_is_one_line_with_what_to_check(no_controller: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = no_controller / "runs" / "r1"
    for argv in (
        ["submit", str(HETERO), "-o", str(run_dir)],
        ["submit", str(HETERO), "-o", str(run_dir), "--no-validate"],
        ["validate", str(HETERO)],
        ["status", "12"],
        ["cancel", "12"],
    ):
        code, _, err = _cli(capsys, *argv)
        assert code == 3, (argv, err)
        first = next(line for line in err.splitlines() if line.startswith("hpcplace: error:"))
        assert first.startswith("hpcplace: error: no Slurm controller answers from this host (`"), first
        assert err.count("resolve_ctls_from_dns_srv") == 1 and "\n    " in err  # Slurm's text once, indented
        assert "SLURM_CONF" in err and "`scontrol ping`" in err and "login node" in err
    # the site's Slurm version is read first (Slurm 22.05's `scontrol --version` needs the configuration too)
    assert (no_controller / "calls").read_text().splitlines().count("--version") == 3  # submit x2, validate
    assert not (no_controller / "runs").exists()  # and the failed submit left nothing behind


def test_a_slurm_conf_that_is_not_a_file_is_named_at_once(
    no_controller: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slurm's tools retry a missing SLURM_CONF for 60 s before failing: hpcplace says so before calling them."""
    monkeypatch.setenv("SLURM_CONF", str(no_controller / "nope.conf"))
    t0 = time.monotonic()
    code, _, err = _cli(capsys, "status", "12")
    assert code == 3 and time.monotonic() - t0 < 5
    assert f"SLURM_CONF names {no_controller / 'nope.conf'}, which is not a file" in err and "HINT: point" in err
    assert not (no_controller / "calls").exists()  # no Slurm command was run


def test_no_controller_detection_is_one_pure_check() -> None:
    ok = slurm_cli.CommandResult(("sinfo",), 0, "resolve_ctls_from_dns_srv", "")
    assert slurm_cli.no_controller(ok) is None
    down = slurm_cli.CommandResult(
        ("sbatch", "--parsable", "x"),
        1,
        "",
        "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)\n",
    )
    error = slurm_cli.no_controller(down)
    assert error is not None and error.exit_code == 3
    refusal = slurm_cli.CommandResult(("sbatch",), 1, "", "sbatch: error: invalid partition specified: a800")
    assert slurm_cli.no_controller(refusal) is None


# ---- a failed submit leaves nothing behind ------------------------------------------------------------


def test_refused_submit_removes_the_run_dir_it_created_only(
    tmp_path: Path, fake_slurm: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FAKE_SBATCH", "partition")
    new = tmp_path / "new" / "deeper" / "run"
    assert main(["submit", str(HETERO), "-o", str(new)]) == 3
    assert not (tmp_path / "new").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert main(["submit", str(HETERO), "-o", str(mine)]) == 3
    assert (mine / "notes.txt").read_text() == "keep me"  # a directory that existed is never removed
    assert "Slurm rejected the job" in capsys.readouterr().err
    monkeypatch.setenv("FAKE_SBATCH", "ok")
    assert main(["submit", str(HETERO), "-o", str(new)]) == 0 and (new / "run.json").exists()


# ---- logs of a run that never ran -------------------------------------------------------------------


def test_logs_of_a_run_that_never_reached_slurm_or_has_not_started(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    assert main(["render", str(HETERO), "-o", str(run_dir)]) == 0
    capsys.readouterr()
    code, out, err = _cli(capsys, "logs", str(run_dir))
    assert code == 2 and out == "" and err.count("\n") == 2  # one line and its hint
    assert "was never submitted to Slurm: no job id in run.json" in err
    (run_dir / "run.json").write_text(json.dumps({"job_id": "77"}))
    for extra in ([], ["--list"], ["--component", "actor"]):
        code, out, err = _cli(capsys, "logs", str(run_dir), *extra)
        assert code == 0 and err == ""
        assert out.splitlines() == [
            f"job 77 has no task logs (no logs/nodes.txt): it has not started its tasks "
            f"yet, or it ended before they started; `hpcplace status {run_dir}` says which, "
            "and why"
        ]
    shutil.rmtree(run_dir)


def test_submit_warns_about_scripts_and_programs_missing_from_the_working_directory(tmp_path: Path) -> None:
    """Seen here, before the queue wait: the job's preflight would fail on them at its start."""
    from hpcplace.commands.slurm_cmds import missing_files
    from hpcplace.plan.planner import plan_from_file

    plan = plan_from_file(HETERO)
    plan = replace(
        plan,
        components=tuple(
            replace(c, command=("python3", "-u", "train.py"))
            if i == 0
            else replace(c, command=("./bin/tool", "x"))
            if i == 1
            else c
            for i, c in enumerate(plan.components)
        ),
    )
    first, second = plan.components[0].name, plan.components[1].name
    assert missing_files(plan, str(tmp_path)) == [
        f"component {first!r}: its script 'train.py' is not in the working directory {tmp_path}: the job would fail "
        "at its start (pass --workdir DIR, or give the path from there)",
        f"component {second!r}: its program './bin/tool' is not in the working directory {tmp_path}: the job would "
        "fail at its start (pass --workdir DIR, or give the path from there)",
    ]
    (tmp_path / "train.py").write_text("")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "tool").write_text("")
    assert missing_files(plan, str(tmp_path)) == []
    ray = replace(plan, launch=launch.LaunchSpec("ray", ("/usr/bin/python3", "driver.py")))
    assert [line.split(":")[0] for line in missing_files(ray, str(tmp_path))] == ["the Ray driver"]
    absolute = replace(plan, launch=launch.LaunchSpec("ray", ("/usr/bin/python3", str(tmp_path / "nope.py"))))
    assert missing_files(absolute, "/") == [
        f"the Ray driver: its script {tmp_path / 'nope.py'} does not exist: the job would fail at its start"
    ]  # not "not in the working directory"


def test_a_shared_link_to_a_path_the_nodes_lack_is_named(tmp_path: Path) -> None:
    """A venv's python on shared storage that links to an interpreter outside it: the nodes need both."""
    (tmp_path / "shared").mkdir()
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "python3.11").write_text("")
    link = tmp_path / "shared" / "python3"
    link.symlink_to(tmp_path / "local" / "python3.11")
    lines = shared_fs.path_warnings(
        [CheckedPath.of("the Ray driver's program", str(link), "fix it")], MOUNTS, (str(tmp_path / "shared"),)
    )
    assert lines == [
        f"the Ray driver's program {link} links to {tmp_path / 'local' / 'python3.11'}, which is outside "
        f"slurm.shared_paths ({tmp_path / 'shared'}): the compute nodes will not find it; fix it"
    ]
    assert shared_fs.path_warnings([CheckedPath.of("x", str(link), "y")], MOUNTS, (str(tmp_path),)) == []


def test_a_ray_job_from_an_environment_without_ray_is_warned_about(monkeypatch: pytest.MonkeyPatch) -> None:
    """The raylets run this environment's Python: without Ray in it the job's preflight would stop it."""
    import importlib.util

    from hpcplace.commands.slurm_cmds import _ray_missing, default_launcher
    from hpcplace.plan.planner import plan_from_file

    plan = replace(plan_from_file(HETERO), launch=launch.LaunchSpec("ray", ("python3", "main.py")))
    launcher = (*default_launcher(), "--chdir", "/")
    assert _ray_missing(plan, launcher) is None  # this environment has Ray
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    assert "cannot import ray: the job would stop at its preflight; pip install 'hpcplace[ray]'" in (
        _ray_missing(plan, launcher) or ""
    )
    assert _ray_missing(plan_from_file(HETERO), launcher) is None  # the steps mode needs no Ray
    assert _ray_missing(plan, ("/opt/other/bin/hpcplace-run", "--chdir", "/")) is None  # another environment's
