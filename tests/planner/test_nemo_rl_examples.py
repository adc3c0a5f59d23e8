"""Every example config of a NeMo-RL checkout (`examples/configs/**/*.yaml`), planned unchanged with only a
`slurm:` block beside it, through the entry point its name says (grpo*/...grpo... -> run_grpo.py, sft ->
run_sft.py, dpo -> run_dpo.py, rm -> run_rm.py, distillation/eval/ppo -> their scripts). Each is planned or
refused with a located reason; nothing raises anything else. Needs HPCPLACE_NEMO_RL_SRC (NeMo-RL is not on
PyPI and CI fetches nothing): skipped in CI."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from hpcplace.config.formats import load_spec
from hpcplace.errors import HpcplaceError
from hpcplace.plan.planner import plan_from_spec

SRC = os.environ.get("HPCPLACE_NEMO_RL_SRC")
pytestmark = pytest.mark.skipif(
    not SRC, reason="HPCPLACE_NEMO_RL_SRC is not set: a NeMo-RL checkout is needed (NeMo-RL is not on PyPI)"
)


def script_for(config: Path) -> str:
    """The entry point a config is written for, from its name (NeMo-RL's recipes name the algorithm first)."""
    name = config.stem.lower()
    if "evals" in config.parts:
        return "run_eval.py"
    for prefix, script in (
        ("xtoken", "run_xtoken_off_policy_distillation.py"),
        ("distillation", "run_distillation.py"),
        ("ppo", "run_ppo.py"),
        ("dpo", "run_dpo.py"),
        ("sft", "run_sft.py"),
        ("rm", "run_rm.py"),
    ):
        if name.startswith(prefix) or f"-{prefix}" in name.split("grpo")[0]:
            return script
    if "vlm" in name and "sft" in name:
        return "run_vlm_sft.py"
    return "run_grpo.py"


def sweep(src: Path) -> tuple[Counter[str], list[str], list[str]]:
    counts: Counter[str] = Counter()
    refusals: list[str] = []
    planned: list[str] = []
    site = src / ".hpcplace-sweep-site.yaml"
    site.write_text("slurm: {partition: gpu, time: '01:00:00'}\n")
    old = os.getcwd()
    os.chdir(src)
    try:
        for config in sorted((src / "examples" / "configs").rglob("*.yaml")):
            rel = str(config.relative_to(src))
            script = script_for(config.relative_to(src))
            try:
                plan = plan_from_spec(load_spec(site, driver=["uv", "run", f"examples/{script}", "--config", rel]))
            except HpcplaceError as exc:
                assert exc.location is not None, f"{rel}: refused without a location: {exc}"
                counts["refused"] += 1
                refusals.append(f"{rel} ({script}): {exc.location}: {exc.message}")
                continue
            counts["planned"] += 1
            planned.append(f"{rel}: " + ", ".join(f"{c.name}={c.world_size}" for c in plan.components))
    finally:
        os.chdir(old)
        site.unlink()
    return counts, planned, refusals


def test_every_example_config_is_planned_or_refused_with_a_location() -> None:
    assert SRC is not None
    counts, planned, refusals = sweep(Path(SRC))
    print(f"\nNeMo-RL example sweep: {dict(counts)}")
    for line in refusals:
        print("  refused:", line)
    assert len(planned) == counts["planned"] > 0
    assert sum(counts.values()) == len(list((Path(SRC) / "examples" / "configs").rglob("*.yaml")))
