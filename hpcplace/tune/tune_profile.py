"""The measured-cost profile `hpcplace tune` searches with (format: README "Tuning placements").

    batches: 8                      # micro-batches one iteration pipelines (RLinf: rollout_batch_size)
    workflow: [rollout, actor]      # the data-flow chain (default: the order of `components`)
    memory_gb: {a800: 80, rtx4090: 24}
    bandwidth_gbps: {intra: 25, inter: 12.5}
    components:
      actor:
        seconds: {a800: {8: 95.7, 16: 51.0}, rtx4090: {4: 210}}
        memory_gb: 60               # per GPU; or params_b (+ bytes_per_param, default 2)
        switch_seconds: {a800: 6.0} # offload + onload when collocated (a number: every type)
        transfer_gb: 1.5            # sent to the next component of the workflow per iteration
        model_parallel: 2           # counts are multiples of it (default: the config's tp*pp)
        counts: [8, 16]             # allowed counts (default: every multiple)
        efficiency: 0.9             # scaling efficiency when one point is measured
      reward: {with: actor}         # no cost of its own: placed with actor

Interpolation (one rule, written out in README): speed = 1/seconds is linear in the count between
the two nearest measured points; beyond them it follows the nearest segment's measured efficiency
(or `efficiency` with one point), clamped to [0, 1]; past 2x the largest measured count a warning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

from hpcplace.config.spec import check_name
from hpcplace.config.yaml_source import View, load_yaml_file
from hpcplace.errors import SourceLocation, SpecError

DEFAULT_EFFICIENCY = 0.9
DEFAULT_BYTES_PER_PARAM = 2.0
DEFAULT_INTRA_GBPS = 25.0  # GB/s between node ranges of one node group (a 200 Gb/s fabric)
DEFAULT_INTER_GBPS = 12.5  # GB/s between node groups (partitions)
EXTRAPOLATION_WARN = 2.0  # warn past this multiple of the largest measured count


@dataclass(frozen=True)
class Curve:
    """Measured seconds per iteration at counts of one resource type (GPUs, hardware units or nodes)."""

    points: tuple[tuple[int, float], ...]  # ascending counts
    efficiency: float

    def seconds(self, n: int) -> float:
        """Seconds per iteration at `n` (measured, interpolated, or extrapolated: see module doc)."""
        pts = self.points
        for count, secs in pts:
            if count == n:
                return secs
        if len(pts) == 1:
            ((n0, t0),) = pts
            return 1.0 / _extend(1.0 / t0, n0, n, self.efficiency)
        if n < pts[0][0]:
            return 1.0 / _extend(1.0 / pts[0][1], pts[0][0], n, _segment_efficiency(pts[0], pts[1]))
        if n > pts[-1][0]:
            return 1.0 / _extend(1.0 / pts[-1][1], pts[-1][0], n, _segment_efficiency(pts[-2], pts[-1]))
        for (n1, t1), (n2, t2) in pairwise(pts):
            if n1 < n < n2:
                v1, v2 = 1.0 / t1, 1.0 / t2
                return 1.0 / (v1 + (v2 - v1) * (n - n1) / (n2 - n1))
        raise AssertionError("unreachable")

    def extrapolated_far(self, n: int) -> bool:
        return n > EXTRAPOLATION_WARN * self.points[-1][0]


def _segment_efficiency(a: tuple[int, float], b: tuple[int, float]) -> float:
    """Measured scaling efficiency between two points: the speed gained per unit of count added,
    relative to perfect linear speed-up (1 = linear, 0 = no gain); clamped to [0, 1]."""
    (n1, t1), (n2, t2) = a, b
    gain = (t1 / t2 - 1.0) / (n2 / n1 - 1.0)
    return min(1.0, max(0.0, gain))


def _extend(speed0: float, n0: int, n: int, efficiency: float) -> float:
    """Speed at n from the speed at n0 with scaling efficiency e: v0 * (1 + e * (n/n0 - 1)), never
    below a small positive floor (a count far below the measured one)."""
    return max(speed0 * (1.0 + efficiency * (n / n0 - 1.0)), speed0 * 1e-3)


@dataclass(frozen=True)
class ComponentProfile:
    name: str
    curves: dict[str, Curve] = field(default_factory=dict)  # key: node-group label or resource type
    memory_gb: float | None = None  # per GPU (process)
    switch_seconds: dict[str, float] = field(default_factory=dict)  # key as curves; "*" = every type
    transfer_gb: float = 0.0
    model_parallel: int | None = None
    counts: tuple[int, ...] | None = None
    with_component: str | None = None  # placed with this component, no cost of its own
    location: SourceLocation | None = None

    def switch(self, keys: tuple[str, ...]) -> float:
        for key in keys:
            if key in self.switch_seconds:
                return self.switch_seconds[key]
        return self.switch_seconds.get("*", 0.0)

    def curve(self, keys: tuple[str, ...]) -> Curve | None:
        for key in keys:
            if key in self.curves:
                return self.curves[key]
        return None


@dataclass(frozen=True)
class Profile:
    path: str
    batches: int
    workflow: tuple[str, ...]
    components: dict[str, ComponentProfile]
    memory_gb: dict[str, float]
    intra_gbps: float
    inter_gbps: float


def _positive(view: View, what: str) -> float:
    value = view.value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise view.error(f"{what} must be a positive number, got {value!r}")
    return float(value)


def _nonnegative(view: View, what: str) -> float:
    value = view.value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise view.error(f"{what} must be a number >= 0, got {value!r}")
    return float(value)


def _curve(view: View, where: str, efficiency: float) -> Curve:
    if not isinstance(view.value, dict) or not view.value:
        raise view.error(f"{where}: expected a mapping of counts to seconds, e.g. {{8: 95.7, 16: 51.0}}")
    points = []
    for count, child in view.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise child.key_error(
                f"{where}: count {count!r} is not a positive integer",
                hint="keys are GPU counts (hardware units for robots, nodes for CPU groups)",
            )
        points.append((count, _positive(child, f"{where}: seconds at {count}")))
    return Curve(tuple(sorted(points)), efficiency)


def _component(name: str, view: View) -> ComponentProfile:
    if not isinstance(view.value, dict):
        raise view.error(f"component {name!r}: expected a mapping with `seconds` (or `with`)")
    view.check_keys(
        {
            "seconds",
            "memory_gb",
            "params_b",
            "bytes_per_param",
            "switch_seconds",
            "transfer_gb",
            "model_parallel",
            "counts",
            "efficiency",
            "with",
        }
    )
    if view.get("with") is not None:
        extra = sorted(set(view.value) - {"with"})
        if extra:
            raise view.require(extra[0]).key_error(
                f"component {name!r} is placed `with` another: {extra[0]!r} does not apply",
                hint="a `with` component has no costs of its own; remove the other keys",
            )
        target = view.require("with")
        return ComponentProfile(
            name, with_component=check_name(target, target.str(), "component name"), location=view.location()
        )
    eff_view = view.get("efficiency")
    efficiency = DEFAULT_EFFICIENCY
    if eff_view is not None:
        efficiency = _positive(eff_view, "efficiency")
        if efficiency > 1:
            raise eff_view.error(f"efficiency {efficiency} is above 1", hint="1 = linear speed-up")
    seconds = view.require("seconds", "measured seconds per iteration per resource type")
    if not isinstance(seconds.value, dict) or not seconds.value:
        raise seconds.error(
            f"component {name!r}: seconds must map a type to {{count: seconds}}",
            hint="e.g. seconds: {a800: {8: 95.7, 16: 51.0}}",
        )
    curves = {str(key): _curve(child, f"{name}.seconds.{key}", efficiency) for key, child in seconds.items()}
    memory = None
    if view.get("memory_gb") is not None and view.get("params_b") is not None:
        raise view.require("params_b").key_error("give memory_gb or params_b, not both")
    if view.get("memory_gb") is not None:
        memory = _positive(view.require("memory_gb"), "memory_gb")
    mp = view.require("model_parallel").int(minimum=1) if view.get("model_parallel") is not None else None
    if view.get("params_b") is not None:
        params = _positive(view.require("params_b"), "params_b")
        per_param = (
            _positive(view.require("bytes_per_param"), "bytes_per_param")
            if view.get("bytes_per_param") is not None
            else DEFAULT_BYTES_PER_PARAM
        )
        memory = params * per_param / (mp or 1)  # the memory rule: weights (+ state) split over tp*pp
    elif view.get("bytes_per_param") is not None:
        raise view.require("bytes_per_param").key_error("bytes_per_param needs params_b")
    switch: dict[str, float] = {}
    sv = view.get("switch_seconds")
    if sv is not None:
        if isinstance(sv.value, dict):
            switch = {str(k): _nonnegative(c, f"switch_seconds.{k}") for k, c in sv.items()}
        else:
            switch = {"*": _nonnegative(sv, "switch_seconds")}
    transfer = _nonnegative(view.require("transfer_gb"), "transfer_gb") if view.get("transfer_gb") is not None else 0.0
    counts = None
    cv = view.get("counts")
    if cv is not None:
        if not isinstance(cv.value, list) or not cv.value:
            raise cv.error("counts must be a non-empty list of positive integers, e.g. [8, 16, 32]")
        counts = tuple(sorted({item.int(minimum=1) for item in cv.elements()}))
    return ComponentProfile(name, curves, memory, switch, transfer, mp, counts, None, view.location())


def parse_profile(path: str | Path) -> Profile:
    """Read and check a profile file; every error names file:line:col."""
    doc = load_yaml_file(path)
    root = doc.root()
    if not isinstance(root.value, dict):
        raise SpecError(
            "the profile must be a YAML mapping with `components:`",
            location=doc.location(()),
            hint='see README, "Tuning placements"',
        )
    root.check_keys({"batches", "workflow", "components", "memory_gb", "bandwidth_gbps"})
    batches = root.require("batches").int(minimum=1) if root.get("batches") is not None else 1
    comps_view = root.require("components", "per component: measured seconds per iteration")
    if not isinstance(comps_view.value, dict) or not comps_view.value:
        raise comps_view.error("components must be a non-empty mapping")
    components = {
        check_name(child, str(key), "component name"): _component(str(key), child) for key, child in comps_view.items()
    }
    for comp in components.values():
        if comp.with_component is not None:
            target = components.get(comp.with_component)
            if target is None or target.with_component is not None:
                raise SpecError(
                    f"component {comp.name!r} is placed with {comp.with_component!r}, which has no "
                    "costs in this profile",
                    location=comp.location,
                    hint="`with` names a component that has `seconds`",
                )
    costed = [n for n, c in components.items() if c.with_component is None]
    wv = root.get("workflow")
    if wv is not None:
        if not isinstance(wv.value, list) or not wv.value:
            raise wv.error("workflow must be a list of component names in data-flow order")
        workflow = tuple(item.str() for item in wv.elements())
        for item, name in zip(wv.elements(), workflow):
            if name not in components or components[name].with_component is not None:
                raise item.error(
                    f"workflow names {name!r}, which has no costs in this profile",
                    hint="costed components: " + ", ".join(costed),
                )
        if len(set(workflow)) != len(workflow) or set(workflow) != set(costed):
            raise wv.error(
                f"workflow {list(workflow)} must name every costed component once",
                hint="costed components: " + ", ".join(costed),
            )
    else:
        workflow = tuple(costed)
    memory: dict[str, float] = {}
    mv = root.get("memory_gb")
    if mv is not None:
        if not isinstance(mv.value, dict):
            raise mv.error("memory_gb must map a GPU type (or node-group label) to GB, e.g. {a800: 80}")
        memory = {str(k): _positive(c, f"memory_gb.{k}") for k, c in mv.items()}
    intra, inter = DEFAULT_INTRA_GBPS, DEFAULT_INTER_GBPS
    bv = root.get("bandwidth_gbps")
    if bv is not None:
        bv.check_keys({"intra", "inter"})
        intra = _positive(bv.require("intra"), "bandwidth_gbps.intra") if bv.get("intra") is not None else intra
        inter = _positive(bv.require("inter"), "bandwidth_gbps.inter") if bv.get("inter") is not None else inter
    return Profile(str(path), batches, workflow, components, memory, intra, inter)
