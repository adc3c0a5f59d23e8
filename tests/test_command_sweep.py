"""scripts/command_sweep.py: a script's commands recorded as bash expands them, without running the framework,
in a sandbox where the script cannot write outside its scratch folder (tests/fixtures/command_sweep)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]


def _sweep() -> ModuleType:
    spec = importlib.util.spec_from_file_location("command_sweep_under_test", REPO / "scripts" / "command_sweep.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


sweep = _sweep()
SANDBOX = [pytest.param(True, id="sandbox"), pytest.param(False, id="plain")]


def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "work" / "checkout"
    shutil.copytree(REPO / "tests" / "fixtures" / "command_sweep", root)
    return root


@pytest.mark.parametrize("sandbox", SANDBOX)
def test_a_scripts_commands_are_recorded_as_bash_expands_them(tmp_path: Path, sandbox: bool) -> None:
    if sandbox and not sweep.sandbox_available():
        pytest.skip("unshare -rnm is not available on this machine")
    root = checkout(tmp_path)
    run = sweep.run_script(root / "examples" / "run.sh", root, tmp_path / "work" / "s0", timeout=30, sandbox=sandbox)
    assert run.ended == "ok"
    framework = [(c.argv, c.cwd) for c in run.commands if sweep.is_framework_command(c.argv)]
    assert framework == [
        (
            ("torchrun", "--nnodes=1", "--nproc_per_node=8", "-m", "verl.trainer.sft_trainer",
             "data.train_files=a b.parquet"),
            root / "examples",
        ),
        (
            ("ray", "job", "submit", "--address=http://127.0.0.1:8265", "--", "python3", "train.py",
             "--actor-num-nodes", "2", "--colocate"),
            root / "examples",
        ),
        (("uv", "run", "--extra", "vllm", "python", f"{root.resolve()}/examples/train.py"), root / "examples"),
    ]  # fmt: skip
    assert [c.argv[:2] for c in run.commands if not sweep.is_framework_command(c.argv)] == [
        ("python3", "-c"),
        ("uv", "run"),
        ("ray", "stop"),
    ]
    if sandbox:  # the script's writes stay in its scratch folder: the checkout and the folders above it unchanged
        assert not (root / "examples" / "logs").exists() and not (tmp_path / "work" / "outside.txt").exists()
        assert (tmp_path / "work" / "s0" / "upper" / "examples" / "logs" / "out.txt").read_text() == "written\n"


@pytest.mark.parametrize("sandbox", SANDBOX)
def test_a_script_that_never_ends_is_killed_at_its_timeout(tmp_path: Path, sandbox: bool) -> None:
    if sandbox and not sweep.sandbox_available():
        pytest.skip("unshare -rnm is not available on this machine")
    root = checkout(tmp_path)
    run = sweep.run_script(root / "examples" / "forever.sh", root, tmp_path / "work" / "s1", timeout=2, sandbox=sandbox)
    assert run.ended == "timeout" and [c.argv for c in run.commands] == [("python3", "before.py")]


def test_what_counts_as_a_framework_command() -> None:
    assert sweep.is_framework_command(["uv", "run", "examples/run_grpo.py", "--config", "x.yaml"])
    assert sweep.is_framework_command(["python3", "-u", "-m", "verl.trainer.main_ppo"])
    assert sweep.is_framework_command(["deepspeed", "--module", "openrlhf.cli.train_sft"])
    assert sweep.is_framework_command(["uv", "run", "--extra", "vllm", "coverage", "run", "examples/run_grpo.py"])
    assert not sweep.is_framework_command(["uv", "run", "--no-sync", "--extra", "vllm", "bash", "./tests/x.sh"])
    assert not sweep.is_framework_command(["uv", "run", "python", "-c", "import torch"])
    assert not sweep.is_framework_command(["uv", "run", "ray", "status"])
    for argv in (["uv", "sync"], ["python", "-m", "pip", "install", "x"], ["ray", "start", "--head"], ["python3", "-"]):
        assert not sweep.is_framework_command(argv)


def test_a_verl_checkout_is_planned_with_its_own_config(tmp_path: Path) -> None:
    (tmp_path / "verl" / "trainer" / "config").mkdir(parents=True)
    assert sweep.checkout_env(tmp_path) == {"HPCPLACE_VERL_SRC": str(tmp_path.resolve())}
    assert sweep.checkout_env(tmp_path / "verl") == {}


def test_each_checkout_is_planned_as_the_release_it_declares(tmp_path: Path) -> None:
    """A checkout's commands are read by its own release's rules: the version each framework's checkout
    declares where its build reads it (OpenRLHF's version.txt, verl's verl/version/version, NeMo-RL's
    package_info.py parts, slime's setup.py), None where it declares none."""
    openrlhf, verl, nemo_rl, slime, other = (tmp_path / n for n in ("openrlhf", "verl", "nemo", "slime", "other"))
    openrlhf.mkdir()
    (openrlhf / "version.txt").write_text("0.11.0\n")
    (verl / "verl" / "version").mkdir(parents=True)
    (verl / "verl" / "version" / "version").write_text("0.10.0.dev\n")
    (nemo_rl / "nemo_rl").mkdir(parents=True)
    (nemo_rl / "nemo_rl" / "package_info.py").write_text('MAJOR = 0\nMINOR = 6\nPATCH = 0\nPRE_RELEASE = "rc1"\n')
    slime.mkdir()
    (slime / "setup.py").write_text('setup(\n    name="slime",\n    version="0.3.1",\n)\n')
    other.mkdir()
    got = [sweep.declared_version(c) for c in (openrlhf, verl, nemo_rl, slime, other)]
    assert got == ["0.11.0", "0.10.0.dev", "0.6.0rc1", "0.3.1", None]
