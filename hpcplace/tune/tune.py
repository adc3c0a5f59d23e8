"""Placement search over heterogeneous node groups from measured costs (pure: no I/O, no clock).

The model (README "Tuning placements"): the workflow is a chain of components; a placement cuts it
into consecutive *stages*. A stage's members are collocated on the same `count` resources of one
node group and take turns (time division); different stages run on disjoint resources and pipeline
the iteration's micro-batches (space division), as RLinf's auto placement models one cluster.

    stage seconds   S = sum of members' seconds(group, count) [+ sum of their switch_seconds if > 1 member]
    transfer        X = transfer_gb of the stage's last member / (intra or inter GB/s), between stages
    iteration       T = (sum(S) + sum(X) + (B - 1) * max(S, X)) / B          B = batches
    GPU-hours       T * GPUs of the stages on GPU groups / 3600

The search enumerates every cut of the chain and every group per stage, prunes what the planner would
refuse (missing cost data, memory, node shape, RLinf's model-parallel rules), and finds each
structure's best counts by branch and bound (exact: the bound never overestimates).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from hpcplace.tune import OBJECTIVES
from hpcplace.tune.tune_profile import ComponentProfile


@dataclass(frozen=True)
class Group:
    """A node group as the search sees it."""

    label: str
    kind: str  # "gpu" | "hardware" | "node"
    keys: tuple[str, ...]  # profile lookup keys, most specific first: label, resource type
    capacity: int  # resources: GPUs, hardware units, or nodes
    per_node: int | None  # resources per node when every node has the same; None when uneven
    memory_gb: float | None  # memory of one GPU (None: not checked)
    fabric_unit: int | None = None  # resources per block or leaf switch (the group's topology); None: flat


@dataclass(frozen=True)
class Component:
    name: str
    unit: int  # counts are multiples of this (tp*pp, or the config's resources per process)
    profile: ComponentProfile
    # resources of one process (None: the whole unit). A model-parallel group of one-GPU processes may span
    # whole nodes (tensor parallel 8 on 4-GPU nodes); a process never spans two.
    per_process: int | None = None


@dataclass(frozen=True)
class Rules:
    """What the planner refuses, in terms of stages (from the config's placement class)."""

    same_group: tuple[tuple[str, ...], ...] = ()  # these components share one node group
    all_or_apart: tuple[str, ...] = ()  # these: all in one stage, or each in its own stage


@dataclass(frozen=True)
class Problem:
    groups: tuple[Group, ...]
    chain: tuple[Component, ...]
    batches: int
    intra_gbps: float
    inter_gbps: float
    rules: Rules = Rules()
    objective: str = "time"


@dataclass(frozen=True)
class Stage:
    members: tuple[str, ...]
    group: str
    count: int
    start: int = 0  # first resource rank in the group
    seconds: float = 0.0


@dataclass(frozen=True)
class Candidate:
    stages: tuple[Stage, ...]
    transfers: tuple[float, ...]  # seconds between stage i and i+1
    time_s: float
    gpus: int
    warnings: tuple[str, ...] = ()

    @property
    def gpu_hours(self) -> float:
        return self.time_s * self.gpus / 3600.0

    def score(self, objective: str) -> float:
        return self.gpu_hours if objective == "gpu-hours" else self.time_s

    def describe(self) -> str:
        return " | ".join(f"{','.join(s.members)}@{s.group}:{s.count}" for s in self.stages)


# --------------------------------------------------------------------------------------------
# the cost model


def _group(problem: Problem, label: str) -> Group:
    return next(g for g in problem.groups if g.label == label)


def _allowed(members: Sequence[Component], group: Group, n: int) -> bool:
    """Counts the planner can place: multiples of the members' unit (which must divide a node's
    resources when nodes are alike), in their `counts` lists."""
    if n < 1 or n > group.capacity:
        return False
    unit = math.lcm(*(m.unit for m in members))
    if n % unit:
        return False
    if any(m.profile.counts is not None and n not in m.profile.counts for m in members):
        return False
    r = group.per_node
    if r is not None and group.kind != "node":
        process = math.lcm(*(m.per_process or m.unit for m in members))
        if r % process or (unit > r and unit % r):
            return False  # a process never spans two nodes; a group wider than a node takes whole nodes
    return not any(crosses(m, group) for m in members)


def crosses(member: Component, group: Group) -> bool:
    """A stage starts at a multiple of its unit (_layout), so its model-parallel groups (one unit each) stay
    inside the group's blocks exactly when the unit divides a block's resources."""
    block = group.fabric_unit
    return block is not None and (member.unit > block or block % member.unit != 0)


def stage_seconds(members: Sequence[Component], group: Group, n: int) -> float | None:
    """S of a stage, or None when it cannot run there (no cost data, memory, count)."""
    if not _allowed(members, group, n):
        return None
    total = 0.0
    for m in members:
        curve = m.profile.curve(group.keys)
        if curve is None:
            return None
        mem = m.profile.memory_gb
        if mem is not None and group.kind == "gpu" and group.memory_gb is not None and mem > group.memory_gb:
            return None  # collocated members take turns: each alone must fit
        total += curve.seconds(n)
    if len(members) > 1:
        total += sum(m.profile.switch(group.keys) for m in members)
    return total


def _transfer(problem: Problem, last: Component, a: str, b: str) -> float:
    gb = last.profile.transfer_gb
    return gb / (problem.intra_gbps if a == b else problem.inter_gbps) if gb else 0.0


def iteration_seconds(stage_s: Sequence[float], transfer_s: Sequence[float], batches: int) -> float:
    parts = [*stage_s, *(x for x in transfer_s if x > 0)]
    return (sum(parts) + (batches - 1) * max(parts)) / batches


def _layout(problem: Problem, stages: Sequence[tuple[tuple[str, ...], str, int]]) -> list[int] | None:
    """First resource rank of each stage: per group the stages with the largest unit first (then the
    largest count), so every stage starts aligned to its unit: no process spans two nodes, and a group wider
    than a node starts on a node."""
    units = {c.name: c.unit for c in problem.chain}
    starts = [0] * len(stages)
    for group in problem.groups:
        unit_of = {i: math.lcm(*(units[m] for m in s[0])) for i, s in enumerate(stages) if s[1] == group.label}
        offset = 0
        for i in sorted(unit_of, key=lambda i: (-unit_of[i], -stages[i][2], i)):
            if offset % unit_of[i]:
                return None
            starts[i] = offset
            offset += stages[i][2]
        if offset > group.capacity:
            return None
    return starts


def _rules_ok(problem: Problem, stages: Sequence[tuple[tuple[str, ...], str]]) -> bool:
    where = {m: (i, g) for i, (members, g) in enumerate(stages) for m in members}
    for names in problem.rules.same_group:
        present = [n for n in names if n in where]
        if len({where[n][1] for n in present}) > 1:
            return False
    present = [n for n in problem.rules.all_or_apart if n in where]
    idx = {where[n][0] for n in present}
    return len(idx) in (1, len(present)) or len(present) <= 1


def evaluate(problem: Problem, stages: Sequence[tuple[tuple[str, ...], str, int]]) -> Candidate | None:
    """The prediction for one placement (stages in workflow order), or None if it is not allowed."""
    by_name = {c.name: c for c in problem.chain}
    flat = [m for s in stages for m in s[0]]
    if flat != [c.name for c in problem.chain] or any(not s[0] for s in stages):
        return None
    if not _rules_ok(problem, [(s[0], s[1]) for s in stages]):
        return None
    secs = []
    for members, label, n in stages:
        s = stage_seconds([by_name[m] for m in members], _group(problem, label), n)
        if s is None:
            return None
        secs.append(s)
    starts = _layout(problem, stages)
    if starts is None:
        return None
    transfers = tuple(_transfer(problem, by_name[a[0][-1]], a[1], b[1]) for a, b in itertools.pairwise(stages))
    gpus = sum(n for _, label, n in stages if _group(problem, label).kind == "gpu")
    warnings = []
    for members, label, n in stages:
        for m in members:
            curve = by_name[m].profile.curve(_group(problem, label).keys)
            if curve is not None and curve.extrapolated_far(n):
                warnings.append(
                    f"{m} on {label}: {n} is more than 2x its largest measured count "
                    f"{curve.points[-1][0]}: extrapolated"
                )
    return Candidate(
        tuple(Stage(s[0], s[1], s[2], st, sec) for s, st, sec in zip(stages, starts, secs)),
        transfers,
        iteration_seconds(secs, transfers, problem.batches),
        gpus,
        tuple(warnings),
    )


# --------------------------------------------------------------------------------------------
# the search


def structures(problem: Problem) -> list[tuple[tuple[tuple[str, ...], str], ...]]:
    """Every cut of the chain into stages, with a node group per stage, that the rules allow."""
    names = [c.name for c in problem.chain]
    by_name = {c.name: c for c in problem.chain}
    out = []
    for cuts in itertools.product((False, True), repeat=max(0, len(names) - 1)):
        parts: list[list[str]] = [[names[0]]]
        for name, cut in zip(names[1:], cuts):
            if cut:
                parts.append([name])
            else:
                parts[-1].append(name)
        options = []
        for part in parts:
            ok = [g.label for g in problem.groups if all(by_name[m].profile.curve(g.keys) is not None for m in part)]
            options.append(ok)
        for labels in itertools.product(*options):
            shape = tuple((tuple(p), g) for p, g in zip(parts, labels))
            if _rules_ok(problem, shape):
                out.append(shape)
    return out


def _pareto(members: Sequence[Component], group: Group) -> tuple[list[int], list[float]]:
    """Counts worth trying, ascending, each strictly faster than every smaller one."""
    ns: list[int] = []
    ss: list[float] = []
    for n in range(1, group.capacity + 1):
        s = stage_seconds(members, group, n)
        if s is not None and (not ss or s < ss[-1]):
            ns.append(n)
            ss.append(s)
    return ns, ss


# (stage members, group label) -> their Pareto front: counts and seconds (_pareto), shared by every structure
ParetoCache = dict[tuple[tuple[str, ...], str], tuple[list[int], list[float]]]


def best_counts(
    problem: Problem,
    shape: Sequence[tuple[tuple[str, ...], str]],
    bound: float = math.inf,
    cache: ParetoCache | None = None,
) -> Candidate | None:
    """The best counts for one structure (exact branch and bound), or None if none beats `bound`."""
    by_name = {c.name: c for c in problem.chain}
    groups = {g.label: g for g in problem.groups}
    cache = {} if cache is None else cache
    options = []
    for members, label in shape:
        key = (members, label)
        if key not in cache:
            cache[key] = _pareto([by_name[m] for m in members], groups[label])
        options.append(cache[key])
    if any(not ns for ns, _ in options):
        return None
    transfers = [_transfer(problem, by_name[a[0][-1]], a[1], b[1]) for a, b in itertools.pairwise(shape)]
    fixed = [x for x in transfers if x > 0]
    fixed_sum, fixed_max = sum(fixed), max(fixed, default=0.0)
    B = problem.batches
    gpu_hours = problem.objective == "gpu-hours"
    is_gpu = [groups[label].kind == "gpu" for _, label in shape]
    labels = [label for _, label in shape]
    k = len(shape)
    best: list[tuple[float, tuple[int, ...]]] = []
    limit = [bound]
    counts = [0] * k

    later = [sorted({labels[j] for j in range(i, k)}) for i in range(k + 1)]
    ahead = {(i, g): [j for j in range(i, k) if labels[j] == g] for i in range(k) for g in later[i]}
    last_in_group = [all(labels[j] != labels[i] for j in range(i + 1, k)) for i in range(k)]
    negs = [[-x for x in ss] for _, ss in options]
    levels = {key: sorted({x for j in js for x in options[j][1]}) for key, js in ahead.items()}
    memo: dict[tuple[int, str, int], float] = {}
    at_most: list[list[int]] = []  # stage -> capacity left -> position of the largest count that fits (-1: none)
    for ns, _ in options:
        row, pos = [], -1
        for cap in range(groups[labels[len(at_most)]].capacity + 1):
            while pos + 1 < len(ns) and ns[pos + 1] <= cap:
                pos += 1
            row.append(pos)
        at_most.append(row)
    first_gpus = [options[j][0][0] if is_gpu[j] else 0 for j in range(k)]

    def fewest_at(j: int, tau: float) -> int | None:
        """The fewest resources stage j needs to take at most tau seconds."""
        pos = bisect.bisect_left(negs[j], -tau)
        return options[j][0][pos] if pos < len(negs[j]) else None

    def needed(i: int, g: str, cap: int) -> float:
        """The smallest max-seconds the stages from i on in group g can reach within cap (a bound)."""
        key = (i, g, cap)
        if key not in memo:
            js, taus = ahead[(i, g)], levels[(i, g)]
            lo, hi = 0, len(taus)
            while lo < hi:
                mid = (lo + hi) // 2
                need = [fewest_at(j, taus[mid]) for j in js]
                if all(n is not None for n in need) and sum(need) <= cap:  # type: ignore[arg-type]  # all() above: no None
                    hi = mid
                else:
                    lo = mid + 1
            memo[key] = taus[lo] if lo < len(taus) else math.inf
        return memo[key]

    def lower_bound(i: int, left: dict[str, int], s_sum: float, s_max: float, gpus: int) -> float:
        """A lower bound of the score of any completion of counts[:i] (exact when i == k)."""
        total, top, fewest = 0.0, s_max, gpus
        for j in range(i, k):
            pos = at_most[j][left[labels[j]]]
            if pos < 0:
                return math.inf
            total += options[j][1][pos]
            fewest += first_gpus[j]
        for g in later[i]:
            top = max(top, needed(i, g, left[g]))
        t = (s_sum + total + fixed_sum + (B - 1) * max(top, fixed_max)) / B
        return t * fewest / 3600.0 if gpu_hours else t

    def dfs(i: int, left: dict[str, int], s_sum: float, s_max: float, gpus: int) -> None:
        if i == k:
            if _layout(problem, [(shape[j][0], labels[j], counts[j]) for j in range(k)]) is None:
                return
            score = lower_bound(k, left, s_sum, s_max, gpus)
            if score < limit[0]:
                limit[0] = score
                best.append((score, tuple(counts)))
            return
        ns, ss = options[i]
        label = labels[i]
        hi, lo = at_most[i][left[label]], 0
        if B > 1 and limit[0] < math.inf:
            # every stage's seconds must stay below the max that could still beat the limit
            fewest = gpus + sum(first_gpus[i:])
            t_limit = limit[0] * 3600.0 / fewest if gpu_hours and fewest else limit[0]
            m_limit = (t_limit * B - s_sum - fixed_sum) / (B - 1) if not (gpu_hours and not fewest) else math.inf
            for _ in range(2 if gpu_hours and fewest else 0):  # fewer GPUs than the max allows: tighter
                more = [fewest_at(j, m_limit) if is_gpu[j] else 0 for j in range(i, k)]
                if any(n is None for n in more):
                    return
                fewest = max(fewest, gpus + sum(more))  # type: ignore[arg-type]  # any() above: no None
                m_limit = (limit[0] * 3600.0 / fewest * B - s_sum - fixed_sum) / (B - 1)
            lo = bisect.bisect_left(negs[i], -m_limit)
            rest = 0
            for j in ahead[(i, label)][1:]:
                need = fewest_at(j, m_limit)
                if need is None:
                    return
                rest += need
            hi = at_most[i][left[label] - rest] if left[label] >= rest else -1
        # time: the most resources first (the fastest completions set a tight limit early); GPU-hours: the
        # fewest first (per-GPU efficiency falls with scale, so small counts are where the optimum lies)
        for pos in range(lo, hi + 1) if gpu_hours else range(hi, lo - 1, -1):
            counts[i] = ns[pos]
            left[label] -= ns[pos]
            args = (s_sum + ss[pos], max(s_max, ss[pos]), gpus + (ns[pos] if is_gpu[i] else 0))
            lb = lower_bound(i + 1, left, *args)
            if lb < limit[0]:
                dfs(i + 1, left, *args)
            left[label] += ns[pos]
            if lb >= limit[0] and last_in_group[i] and not gpu_hours:
                break  # fewer resources here only make this stage slower: no better completion below

    dfs(0, {g.label: g.capacity for g in problem.groups}, 0.0, 0.0, 0)
    if not best:
        return None
    _, chosen = min(best)
    return evaluate(problem, [(shape[j][0], labels[j], chosen[j]) for j in range(k)])


def _last_at_most(ns: list[int], cap: int) -> int:
    lo, hi = 0, len(ns)
    while lo < hi:
        mid = (lo + hi) // 2
        if ns[mid] <= cap:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


CROSSING = (
    "no placement keeps every model-parallel group inside one block or leaf switch of its node group's "
    "topology: these cross the fabric (the plan says which groups)"
)


def search(
    problem: Problem, top: int = 5, progress: Callable[[int, int], None] | None = None, *, strict_fabric: bool = False
) -> list[Candidate]:
    """The best placement of each of the `top` best structures, best first. Where node groups have a topology,
    only placements whose model-parallel groups stay inside blocks compete; the others only when none does
    (never with `strict_fabric`: `tune --strict-topology`)."""
    found = _search(problem, top, progress)
    if found or strict_fabric or not any(g.fabric_unit for g in problem.groups):
        return found
    flat = replace(problem, groups=tuple(replace(g, fabric_unit=None) for g in problem.groups))
    return [replace(c, warnings=(*c.warnings, CROSSING)) for c in _search(flat, top, progress)]


def _search(problem: Problem, top: int, progress: Callable[[int, int], None] | None) -> list[Candidate]:
    if problem.objective not in OBJECTIVES:
        raise ValueError(problem.objective)
    shapes = structures(problem)
    cache: ParetoCache = {}
    heap: list[tuple[float, int, Candidate]] = []  # max-heap by -score of the best `top`
    for n, shape in enumerate(shapes):
        bound = -heap[0][0] if len(heap) >= top else math.inf
        found = best_counts(problem, shape, bound, cache)
        if found is not None:
            entry = (-found.score(problem.objective), n, found)
            if len(heap) < top:
                heapq.heappush(heap, entry)
            else:
                heapq.heappushpop(heap, entry)
        if progress is not None:
            progress(n + 1, len(shapes))
    return [c for _, _, c in sorted(heap, key=lambda e: (-e[0], e[1]))]


@dataclass(frozen=True)
class Baseline:
    name: str
    candidate: Candidate | None


def baselines(problem: Problem) -> list[Baseline]:
    """The obvious placements: everything collocated on the fastest GPU group (components that cannot
    run there each on their fastest group), and each component in its own stage on its fastest group;
    counts optimised the same way."""
    by_name = {c.name: c for c in problem.chain}

    def fastest(names: Sequence[str], kinds: tuple[str, ...] = ("gpu", "hardware", "node")) -> str | None:
        scored = []
        for g in problem.groups:
            if g.kind in kinds:
                s = stage_seconds([by_name[n] for n in names], g, g.capacity)
                if s is None:
                    _, ss = _pareto([by_name[n] for n in names], g)
                    s = ss[-1] if ss else None
                if s is not None:
                    scored.append((s, g.label))
        return min(scored)[1] if scored else None

    out = []
    gpu_groups = [g for g in problem.groups if g.kind == "gpu"]
    best_all = None
    for g in gpu_groups:
        shape: list[tuple[tuple[str, ...], str]] = []
        for c in problem.chain:
            here = c.profile.curve(g.keys) is not None
            label = g.label if here else fastest([c.name])
            if label is None:
                shape = []
                break
            if shape and shape[-1][1] == label == g.label:
                shape[-1] = (shape[-1][0] + (c.name,), label)
            else:
                shape.append(((c.name,), label))
        found = best_counts(problem, shape) if shape and _rules_ok(problem, shape) else None
        if found is not None and (best_all is None or found.time_s < best_all.time_s):
            best_all = found
    out.append(Baseline("everything collocated on the fastest GPU group", best_all))
    shape = []
    for c in problem.chain:
        label = fastest([c.name])
        if label is None:
            shape = []
            break
        shape.append(((c.name,), label))
    found = best_counts(problem, shape) if shape and _rules_ok(problem, shape) else None
    out.append(Baseline("each component in its own stage on its fastest group", found))
    return out


def explain(problem: Problem, cand: Candidate, bases: Sequence[Baseline]) -> str:
    """Why this placement wins: its shape, its bottleneck, and its margin over the obvious ones."""
    parts = [*(s.seconds for s in cand.stages), *(x for x in cand.transfers if x > 0)]
    neck = max(range(len(cand.stages)), key=lambda i: cand.stages[i].seconds)
    stage = cand.stages[neck]
    if len(cand.stages) == 1:
        shape = f"all collocated (turns) on {stage.count} of {stage.group}"
    else:
        shape = f"{len(cand.stages)} stages pipelined over {problem.batches} batch(es)"
    text = f"{shape}; bottleneck {','.join(stage.members)} on {stage.group} x{stage.count}: {stage.seconds:.3g} s/iter"
    if max(parts) > stage.seconds:
        text += f" (a transfer: {max(parts):.3g} s)"
    for base in bases:
        if base.candidate is not None:
            ratio = base.candidate.score(problem.objective) / cand.score(problem.objective)
            text += f"; {ratio:.2f}x vs {base.name}"
    return text
