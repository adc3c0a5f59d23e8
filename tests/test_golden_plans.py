"""Golden plans: every example config's plan.json, in plain text under tests/golden/plans/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpcplace.plan.plan import SCHEMA, plan_to_json
from hpcplace.plan.planner import plan_from_file
from tests.golden import check_golden

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_golden_plan(config: Path) -> None:
    plan = plan_from_file(config)
    text = plan_to_json(plan).replace(str(ROOT) + "/", "")
    data = json.loads(text)
    assert data["schema"] == SCHEMA
    assert [c["world_size"] for c in data["components"]] == [len(c["processes"]) for c in data["components"]]
    check_golden(ROOT / "tests" / "golden" / "plans" / f"{config.stem}.json", text)


def test_plan_is_deterministic() -> None:
    config = ROOT / "configs" / "hetero-partitions.yaml"
    assert plan_to_json(plan_from_file(config)) == plan_to_json(plan_from_file(config))
