"""OpenRLHF's reward model server (hpcplace/config/formats/openrlhf_serve_rm.py): `python -m openrlhf.cli.serve_rm`
is one plain Python process that loads its model with device_map="auto" (every GPU it sees), planned as one
process with all GPUs of one node in the steps launch mode; its flags read with the serve_rm parser of the
release that runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpcplace.cli import main
from hpcplace.config.formats import load_spec
from hpcplace.errors import SpecError
from hpcplace.plan.plan import Plan
from hpcplace.plan.planner import plan_from_spec
from hpcplace.plan.runnable import nothing_to_run

ENTRY = ["python", "-m", "openrlhf.cli.serve_rm"]
# OpenRLHF v0.11.0 (3c3be623), examples/scripts/serve_remote_rm.sh
SHIPPED = [*ENTRY, "--reward.model_name_or_path", "OpenRLHF/Llama-3-8b-rm-700k", "--port", "5000"]
SHIPPED += ["--ds.param_dtype", "bf16", "--ds.attn_implementation", "flash_attention_2", "--reward.normalize_enable"]
SHIPPED += ["--data.max_len", "8192", "--batch_size", "16"]


def plan(tmp_path: Path, words: list[str], text: str = "slurm: {partition: a800, gpus_per_node: 4}\n") -> Plan:
    site = tmp_path / "site.yaml"
    site.write_text(text, encoding="utf-8")
    return plan_from_spec(load_spec(str(site), driver=words))


def refused(tmp_path: Path, words: list[str], text: str = "slurm: {gpus_per_node: 8}\n") -> SpecError:
    with pytest.raises(SpecError) as err:
        plan(tmp_path, words, text)
    return err.value


def test_serve_rm_is_one_process_with_every_gpu_of_its_node_in_the_steps_mode(tmp_path: Path) -> None:
    p = plan(tmp_path, SHIPPED)
    assert p.source_format == "openrlhf_serve_rm" and not p.launch.is_ray
    assert len(p.cluster.nodes) == 1
    (comp,) = p.components
    assert comp.name == "reward_server" and comp.command == tuple(SHIPPED)
    assert [(x.cluster_node_rank, x.visible_accelerators) for x in comp.processes] == [(0, ("0", "1", "2", "3"))]
    assert nothing_to_run(p) is None  # the steps mode starts it with its own command
    assert any("http://<its node>:5000/get_reward" in w for w in p.warnings)


def test_its_flags_are_the_running_releases(tmp_path: Path) -> None:
    old = [*ENTRY, "--reward_pretrain", "m", "--bf16", "--port", "6000"]  # 0.9.0's serve_remote_rm.sh flags
    p = plan(tmp_path, old, 'slurm: {gpus_per_node: 8}\nhpcplace: {framework_version: "0.9.0"}\n')
    assert p.framework_version is not None and p.framework_version.version == "0.9.0"
    assert any(":6000/get_reward" in w for w in p.warnings)
    err = refused(tmp_path, old)  # the installed 0.11.2
    assert "OpenRLHF 0.11.2 serve_rm's parser has no flag --reward_pretrain" in err.message
    assert "OpenRLHF 0.9.0 to 0.10.1.post2 have it" in err.message
    err = refused(tmp_path, old, 'slurm: {gpus_per_node: 8}\nhpcplace: {framework_version: "0.9.2"}\n')
    assert "OpenRLHF 0.9.2 serve_rm's parser has no flag --bf16" in err.message  # 0.9.2: --param_dtype
    assert "OpenRLHF 0.9.0 to 0.9.1.post1 have it" in err.message


@pytest.mark.parametrize(
    ("words", "index", "message"),
    [
        ([*ENTRY, "--port", "5000"], 2, "loads its reward model from --reward.model_name_or_path, which is not given"),
        ([*ENTRY, "--reward.model_name_or_path", "m", "--port", "x"], 6, "invalid int value: 'x'"),
        (["accelerate", "launch", "-m", "openrlhf.cli.serve_rm", "--reward.model_name_or_path", "m"], 3, "plainly"),
    ],
)
def test_what_serve_rm_refuses_is_refused_at_the_word(
    tmp_path: Path, words: list[str], index: int, message: str
) -> None:
    err = refused(tmp_path, words)
    assert message in err.message
    assert err.location is not None and err.location.column == 1 + sum(len(w) + 1 for w in words[:index])


def test_the_ray_launch_mode_is_refused(tmp_path: Path) -> None:
    err = refused(tmp_path, SHIPPED, "slurm: {gpus_per_node: 8}\nlaunch: {mode: ray}\n")
    assert "runs in the steps launch mode only" in err.message


def test_unknown_gpus_per_node_says_why_it_matters(tmp_path: Path) -> None:
    err = refused(tmp_path, SHIPPED, "slurm: {partition: a800}\n")
    assert err.hint is not None and 'device_map="auto" takes every GPU of its node' in err.hint


def test_rendered_as_a_steps_job_that_runs_the_command_not_a_ray_driver(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text("slurm: {partition: a800, gpus_per_node: 8}\n", encoding="utf-8")
    run = tmp_path / "run"
    assert main(["render", str(site), "-o", str(run), "--driver", "--", *SHIPPED]) == 0
    data = json.loads((run / "plan.json").read_text(encoding="utf-8"))
    assert "launch" not in data and data["source"]["format"] == "openrlhf_serve_rm"  # the steps mode
    sbatch = (run / "job.sbatch").read_text(encoding="utf-8")
    assert "hp_start 0 reward_server '1 task'" in sbatch and "--gres=gpu:8" in sbatch
