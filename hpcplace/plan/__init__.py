"""Stage 2, plan: ExperimentSpec -> Plan, every process with its node, devices and ranks (pure).

Resource spaces and placements, the compact process table, the strategies, the planner, the Plan and its
plan.json, the readable summary and device map. Imports config and errors only (docs/architecture.md)."""
