"""Shared helpers for the planner tests: YAML configs in tmp files, clusters and specs built in code."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest

from hpcplace.config.cluster import Cluster, Hardware, NodeGroup
from hpcplace.config.formats import load_spec
from hpcplace.config.spec import ComponentSpec, ExperimentSpec, PlacementEntry
from hpcplace.errors import HpcplaceError
from hpcplace.plan.plan import Plan
from hpcplace.plan.planner import plan_from_spec


def group(
    label: str,
    gpus: int | Sequence[int] = 8,
    *,
    nodes: int | None = None,
    gpu_type: str | None = None,
    partition: str | None = None,
    hardware: tuple[str, int | Sequence[int]] | None = None,
    ignore_hardware: bool = False,
) -> NodeGroup:
    """A node group; `gpus` is one count for every node or a list with one count per node."""
    per_node = tuple(gpus) if not isinstance(gpus, int) else (gpus,) * (nodes or 1)
    n = len(per_node)
    hw = None
    if hardware is not None:
        hw_type, count = hardware
        hw = Hardware(hw_type, tuple(count) if not isinstance(count, int) else (count,) * n)
    return NodeGroup(
        label=label,
        partition=partition or f"p-{label}",
        num_nodes=n,
        gpus_per_node=per_node,
        gpu_type=gpu_type,
        hardware=hw,
        ignore_hardware=ignore_hardware,
    )


def cluster(*groups: NodeGroup) -> Cluster:
    return Cluster(tuple(groups))


def plan_of(
    clu: Cluster,
    placements: dict[str, str | tuple[str | Sequence[str] | None, str]],
    settings: dict[str, dict] | None = None,
    *,
    model_parallel: bool | None = None,
) -> Plan:
    """Plan a spec built in code: placements map `"actor,rollout"` to a rank string or (node_group, string)."""
    entries = []
    for key, value in placements.items():
        names = tuple(n.strip() for n in key.split(","))
        if isinstance(value, tuple):
            ng, text = value
            labels = (
                None
                if ng is None
                else (tuple(label.strip() for label in ng.split(",")) if isinstance(ng, str) else tuple(ng))
            )
        else:
            labels, text = None, value
        entries.append(PlacementEntry(names, labels, text))
    comps = {name: ComponentSpec(name, **kw) for name, kw in (settings or {}).items()}
    mp = (
        model_parallel
        if model_parallel is not None
        else any("tensor_parallel_size" in kw or "pipeline_parallel_size" in kw for kw in (settings or {}).values())
    )
    return plan_from_spec(ExperimentSpec("t", clu, tuple(entries), comps, model_parallel=mp))


def gpus_of(plan: Plan, component: str) -> list[list[tuple[int, int]]]:
    """Per process: [(cluster node rank, local GPU/hardware index), ...]."""
    return [[(p.cluster_node_rank, h) for h in p.local_hardware_ranks] for p in plan.component(component).processes]


class Yaml:
    """Writes dedented YAML into tmp files and reports positions of text in it."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.count = 0

    def write(self, text: str, name: str | None = None) -> Path:
        self.count += 1
        path = self.tmp_path / (name or f"cfg{self.count}.yaml")
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path

    @staticmethod
    def where(path: Path, needle: str, nth: int = 1, line_hint: str | None = None) -> str:
        """`path:line:col` of the nth occurrence of `needle` (on the first line containing `line_hint`)."""
        lines = path.read_text(encoding="utf-8").splitlines()
        seen = 0
        for i, line in enumerate(lines, 1):
            if line_hint is not None and line_hint not in line:
                continue
            start = 0
            while (col := line.find(needle, start)) >= 0:
                seen += 1
                if seen == nth:
                    return f"{path}:{i}:{col + 1}"
                start = col + 1
        raise AssertionError(f"{needle!r} not in {path}")

    def error(self, path: Path, **kw) -> HpcplaceError:
        with pytest.raises(HpcplaceError) as info:
            plan_from_spec(load_spec(path, **kw))
        return info.value


@pytest.fixture
def yml(tmp_path: Path) -> Yaml:
    return Yaml(tmp_path)
