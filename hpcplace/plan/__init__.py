"""Stage 2, plan: ExperimentSpec -> Plan, every process with its node, devices and ranks (pure).

Resource spaces and placements, the compact process table, the strategies, the planner, the Plan and its
plan.json, the readable summary and device map. Imports config and errors only (docs/architecture.md).

`hpcplace.plan.Plan`, `hpcplace.plan.write_plan_json`, ... (the names of the module `hpcplace.plan.plan`, which
was `hpcplace.plan` before the stage packages) stay reachable here, loaded on first use."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    from hpcplace.plan import plan as _plan

    try:
        return getattr(_plan, name)
    except AttributeError:
        raise AttributeError(f"module 'hpcplace.plan' has no attribute {name!r}") from None
