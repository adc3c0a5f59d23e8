"""Rendering: golden scripts for every example, determinism, `bash -n`, #SBATCH read back as sbatch
reads it, the quoting guard, site template overrides, the run directory."""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from hpcplace.config.launch import LaunchSpec
from hpcplace.errors import SlurmError, SpecError
from hpcplace.plan.plan import plan_to_json
from hpcplace.plan.planner import plan_from_file
from hpcplace.slurm.render import LIBRARY_NAME, render_library, render_run, render_script, sha256_text
from hpcplace.slurm.slurm_job import lower
from tests.golden import check_golden
from tests.slurm.conftest import REPO
from tests.slurm.sbatch_readback import read_sbatch_options, sbatch_words

GOLDEN = REPO / "tests" / "golden" / "sbatch"
EXAMPLES = sorted((REPO / "configs").glob("*.yaml"))


def _render(config: Path) -> str:
    plan = plan_from_file(config.relative_to(REPO) if config.is_relative_to(REPO) else config)
    # a framework's installed config files (verl's) are in the venv, which test-all.sh keeps in the checkout
    return render_script(plan, f"/srv/runs/{config.stem}").replace(str(REPO) + "/", "")


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    import os

    cwd = os.getcwd()
    os.chdir(REPO)  # plan.source is recorded as given: keep it repo-relative in the goldens
    try:
        return {c.stem: _render(c) for c in EXAMPLES}
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("config", EXAMPLES, ids=[c.stem for c in EXAMPLES])
def test_golden_sbatch(config: Path, rendered: dict[str, str]) -> None:
    check_golden(GOLDEN / f"{config.stem}.sbatch", rendered[config.stem])


def test_examples_exist() -> None:
    assert len(EXAMPLES) >= 5


def test_golden_library() -> None:
    check_golden(REPO / "tests" / "golden" / "lib" / LIBRARY_NAME, render_library())


def test_bash_accepts_every_example(rendered: dict[str, str], tmp_path: Path) -> None:
    for name, text in {**rendered, "library": render_library()}.items():
        path = tmp_path / f"{name}.sbatch"
        path.write_text(text)
        res = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert res.returncode == 0, f"{name}: {res.stderr}"


@pytest.mark.parametrize("config", EXAMPLES, ids=[c.stem for c in EXAMPLES])
def test_sbatch_reads_back_the_components(config: Path) -> None:
    plan = plan_from_file(config)
    job = lower(plan)
    text = render_script(plan, "/srv/runs/x y", job=job)
    components = read_sbatch_options(text)
    assert len(components) == len(plan.cluster.node_groups)
    for i, (got, comp) in enumerate(zip(components, job.components)):
        want = list(comp.sbatch_args)
        if i == 0:
            want += ["--chdir=/srv/runs/x y", "--output=logs/batch-%j.out", *job.batch_args]
        assert got == want


def test_deterministic_and_run_dir(tmp_path: Path) -> None:
    plan = plan_from_file(REPO / "configs" / "hetero-partitions.yaml")
    first = render_run(plan, tmp_path / "a")
    again = render_run(plan, tmp_path / "a")
    assert first.script.read_bytes() == again.script.read_bytes()
    assert first.script_sha256 == again.script_sha256
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        LIBRARY_NAME,
        "job.sbatch",
        "logs",
        "plan.json",
        "plan.json.idx",
    ]
    assert first.library.read_text() == render_library()
    assert first.plan_json.read_text() == plan_to_json(plan)
    assert first.script.stat().st_mode & 0o111
    text = first.script.read_text()
    assert text.startswith("#!/bin/bash\n")
    assert f"hp_run_dir={tmp_path / 'a'}\n" in text


def test_every_step_clears_leaked_gpu_variables_and_binds_exactly() -> None:
    plan = plan_from_file(REPO / "configs" / "hetero-partitions.yaml")
    text = render_script(plan, "/r")
    starts = [i for i, line in enumerate(text.splitlines()) if line.startswith("hp_start ")]
    lines = text.splitlines()
    assert len(starts) == len(lower(plan).steps)
    for i in starts:
        assert (
            lines[i + 1]
            .strip()
            .startswith(
                "env -u CUDA_VISIBLE_DEVICES -u GPU_DEVICE_ORDINAL -u ROCR_VISIBLE_DEVICES -u SLURM_JOB_GPUS "
                "HPCPLACE_STEP_TASKS="
            )
        )
    # typed --gpus-per-task is never used (it would need --gpu-bind); every GPU segment binds or sees all
    assert "--gpus-per-task" not in text
    assert text.count("--gpu-bind=") == 3  # actor, rollout, inference; env/agent have no GPUs


def test_header_summarises_the_placement() -> None:
    plan = plan_from_file(REPO / "configs" / "hetero-partitions.yaml")
    text = render_script(plan, "/r")
    assert "#   0: a800 -> partition a800, 2 node(s) (cluster node ranks 0-1), GRES gpu:a800:8" in text
    assert "#     rtx4090 (het 1) node 0: 3 task(s)/node, GPUs 0 | 1 | 2-3; ranks 0-2" in text
    assert re.search(r"# step \d+: component 'actor', 4 tasks; shares devices \(colloc-0\)", text)


def test_a_bare_value_in_a_template_is_refused(tmp_path: Path) -> None:
    (tmp_path / "job.sbatch.j2").write_text(
        '{% extends "hpcplace/job.sbatch.j2" %}{% block site_setup %}echo {{ job.name }}\n{% endblock %}'
    )
    plan = plan_from_file(REPO / "configs" / "hetero-partitions.yaml")
    with pytest.raises(SlurmError, match="without a quoting filter"):
        render_script(plan, "/r", template_dir=tmp_path)


def test_site_template_overrides_a_block(tmp_path: Path) -> None:
    (tmp_path / "job.sbatch.j2").write_text(
        '{% extends "hpcplace/job.sbatch.j2" %}\n'
        "{% block site_setup %}\nmodule load cuda/12.4\nexport NCCL_SOCKET_IFNAME={{ job.name|q }}\n{% endblock %}\n"
    )
    plan = plan_from_file(REPO / "configs" / "hetero-partitions.yaml")
    text = render_script(plan, "/r", template_dir=tmp_path)
    assert "\nmodule load cuda/12.4\nexport NCCL_SOCKET_IFNAME=hetero-partitions\n" in text
    assert text == render_script(plan, "/r", template_dir=tmp_path)
    # the Ray launch mode's script is the same job: the site's blocks apply to it too
    ray = render_script(replace(plan, launch=LaunchSpec("ray", ("python3", "main.py"))), "/r", template_dir=tmp_path)
    assert "\nmodule load cuda/12.4\nexport NCCL_SOCKET_IFNAME=hetero-partitions\n" in ray and "--ray-node" in ray
    assert ray.index("module load cuda/12.4") < ray.index("--ray-node")
    with pytest.raises(SpecError, match="does not exist"):
        render_script(plan, "/r", template_dir=tmp_path / "missing")


def test_relative_run_dir_and_unsbatchable_paths_are_refused() -> None:
    plan = plan_from_file(REPO / "configs" / "hetero-partitions.yaml")
    with pytest.raises(SpecError, match="absolute"):
        render_script(plan, "runs/x")
    with pytest.raises(SlurmError, match="cannot be written in an #SBATCH line"):
        render_script(plan, "/runs/back\\slash")
    with pytest.raises(SlurmError, match="cannot be written in an #SBATCH line"):
        render_script(plan, "/runs/new\nline")


def test_sbatch_word_parser_matches_sbatch_quoting() -> None:
    # the behaviour measured with the real sbatch (held job, scontrol show job): see test_cluster.py
    assert sbatch_words(""" --job-name='a'"'"'b c"d$(x)`y`;z#q' """) == ["--job-name=a'b c\"d$(x)`y`;z#q"]
    assert sbatch_words("--a=1 --b=2 # comment --c=3") == ["--a=1", "--b=2"]
    assert sbatch_words("'x\\y'") == ["xy"]  # sbatch drops backslashes: why they are refused


def big_plan(nodes: int):  # type: ignore[no-untyped-def]
    """The planner benchmark's experiment (bench/bench_planner.py) for `nodes` 8-GPU nodes."""
    import sys

    sys.path.insert(0, str(REPO / "bench"))
    from bench_planner import big_spec_yaml, load_spec_text  # type: ignore[import-not-found]

    from hpcplace.plan.planner import plan_from_spec

    return plan_from_spec(load_spec_text(big_spec_yaml(nodes)))


def test_big_plan_renders_compactly() -> None:
    """Regular layouts lower to one segment per het group however many nodes (script size follows
    the number of distinct layouts, not of processes)."""
    plan = big_plan(16)
    job = lower(plan)
    assert len(job.steps) == len(plan.components)
    assert all(len(s.segments) <= 3 for s in job.steps)
    text = render_script(plan, "/r", job=job)
    assert len(text) < 40_000


def test_script_reads_top_down_and_names_its_library() -> None:
    """Header, #SBATCH, then the steps: the functions live in hpcplace-lib.sh, whose sha256 the header
    names and the script checks before sourcing it."""
    plan = plan_from_file(REPO / "configs" / "hetero-partitions.yaml")
    lines = render_script(plan, "/r").splitlines()
    sha = sha256_text(render_library())
    assert f"# library: hpcplace-lib.sh sha256 {sha}" in lines[:30]
    first_step = next(i for i, line in enumerate(lines) if line.lstrip().startswith("srun "))
    assert first_step < 90, lines[first_step]
    assert not any(re.match(r"^hp_[a-z_]+\(\) \{", line) for line in lines)  # no function defined here
    assert f'hp_lib="$hp_run_dir/"hpcplace-lib.sh hp_lib_sha256={sha}' in lines


def _run_library_check(run_dir: Path) -> subprocess.CompletedProcess[str]:
    """The script's lines up to sourcing the library, run in bash (no Slurm needed for them)."""
    text = (run_dir / "job.sbatch").read_text()
    head = text[: text.index('source "$hp_lib"')] + 'source "$hp_lib"\necho sourced\n'
    return subprocess.run(
        ["bash", "-c", head], env={"SLURM_JOB_ID": "1", "PATH": "/usr/bin:/bin"}, capture_output=True, text=True
    )


def test_script_refuses_a_changed_library(tmp_path: Path) -> None:
    plan = plan_from_file(REPO / "configs" / "hetero-partitions.yaml")
    rendered = render_run(plan, tmp_path / "run", launcher=("/x/hpcplace-run",))
    ok = _run_library_check(tmp_path / "run")
    assert ok.stdout == "sourced\n", ok.stderr
    with open(rendered.library, "a") as f:
        f.write("echo injected\n")
    bad = _run_library_check(tmp_path / "run")
    assert bad.returncode == 1 and "sourced" not in bad.stdout
    assert f"{rendered.library} is not the library this script was rendered with" in bad.stderr


def test_preflight_step_and_its_switch() -> None:
    plan = plan_from_file(REPO / "configs" / "hetero-partitions.yaml")
    text = render_script(plan, "/r")
    assert text.count('"${hp_launcher[@]}" --preflight --plan "$hp_plan"') == 4  # one segment per het component
    assert "--gres=gpu:rtx4090:4 --overlap --job-name=hpcplace-preflight" in text
    assert (
        "--output=logs/preflight" not in text
    )  # the preflight names its node's file (slurm_job.PREFLIGHT_LOG_PATTERN)
    assert text.index("--preflight") < text.index("--component actor")
    assert "hp_preflight_report $? || exit 1" in text
    from dataclasses import replace

    off = render_script(replace(plan, slurm={**plan.slurm, "preflight": "false"}), "/r")
    assert "--preflight" not in off and "hp_preflight_report" not in off
