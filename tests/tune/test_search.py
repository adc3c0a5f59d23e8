"""The search against an exhaustive enumeration of the same model, on small heterogeneous cases."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from hpcplace.tune.tune import Component, Group, Problem, Rules, baselines, evaluate, search
from hpcplace.tune.tune_profile import ComponentProfile, Curve

TYPES = {"a800": ("gpu", 80.0), "rtx4090": ("gpu", 24.0), "cpu": ("node", None), "robot": ("hardware", None)}


def exhaustive(problem: Problem):
    names = [c.name for c in problem.chain]
    best = None
    for cuts in itertools.product((False, True), repeat=len(names) - 1):
        parts = [[names[0]]]
        for name, cut in zip(names[1:], cuts):
            parts.append([name]) if cut else parts[-1].append(name)
        for labels in itertools.product([g.label for g in problem.groups], repeat=len(parts)):
            caps = [next(g.capacity for g in problem.groups if g.label == lab) for lab in labels]
            for counts in itertools.product(*(range(1, c + 1) for c in caps)):
                cand = evaluate(problem, [(tuple(p), lab, n) for p, lab, n in zip(parts, labels, counts)])
                if cand is not None and (best is None or cand.score(problem.objective) < best.score(problem.objective)):
                    best = cand
    return best


@st.composite
def problems(draw):
    groups = [Group("a800", "gpu", ("a800",), draw(st.sampled_from([2, 4, 8])), 4, 80.0)]
    if draw(st.booleans()):
        groups.append(Group("rtx4090", "gpu", ("rtx4090",), draw(st.sampled_from([2, 4])), 2, 24.0))
    groups.append(Group("cpu", "node", ("cpu",), draw(st.integers(1, 2)), 1, None))
    if draw(st.booleans()):
        groups.append(Group("robot", "hardware", ("robot",), 2, 2, None))
    labels = [g.label for g in groups]
    chain = []
    for i in range(draw(st.integers(2, 4))):
        types = draw(st.lists(st.sampled_from(labels), min_size=1, max_size=len(labels), unique=True))
        curves = {}
        for t in types:
            pts = draw(
                st.lists(
                    st.tuples(st.integers(1, 4), st.floats(1, 100)), min_size=1, max_size=3, unique_by=lambda p: p[0]
                )
            )
            curves[t] = Curve(tuple(sorted(pts)), draw(st.floats(0.3, 1.0)))
        prof = ComponentProfile(
            f"c{i}",
            curves,
            memory_gb=draw(st.sampled_from([None, 10.0, 40.0])),
            switch_seconds={"*": draw(st.sampled_from([0.0, 2.0]))},
            transfer_gb=draw(st.sampled_from([0.0, 5.0, 50.0])),
        )
        chain.append(Component(f"c{i}", draw(st.sampled_from([1, 1, 2])), prof))
    rules = Rules(same_group=(("c0", "c1"),)) if draw(st.booleans()) else Rules()
    return Problem(
        tuple(groups),
        tuple(chain),
        draw(st.integers(1, 6)),
        25.0,
        12.5,
        rules,
        draw(st.sampled_from(["time", "gpu-hours"])),
    )


@settings(max_examples=150, deadline=None)
@given(problems())
def test_search_finds_the_exhaustive_optimum(problem: Problem) -> None:
    truth = exhaustive(problem)
    found = search(problem, top=3)
    if truth is None:
        assert found == []
        return
    best = found[0].score(problem.objective)
    assert abs(best - truth.score(problem.objective)) <= 1e-9 * truth.score(problem.objective), (found[0], truth)
    scores = [c.score(problem.objective) for c in found]
    assert scores == sorted(scores)
    for base in baselines(problem):  # the obvious placements are in the search space
        if base.candidate is not None:
            assert best <= base.candidate.score(problem.objective) * (1 + 1e-12)


def _hetero(robots: bool) -> Problem:
    """a800 + rtx4090 + CPU (+ robots): the rollout is fast on 4090s, the trainer needs A800 memory."""

    def comp(name, curves, **kw):
        return Component(name, 1, ComponentProfile(name, {k: Curve(tuple(v), 0.9) for k, v in curves.items()}, **kw))

    chain = [
        comp("env", {"robot": [(2, 40.0), (4, 22.0)]} if robots else {"cpu": [(1, 30.0), (2, 16.0)]}, transfer_gb=0.5),
        comp(
            "rollout",
            {"a800": [(8, 30.0), (16, 16.0)], "rtx4090": [(4, 36.0)]},
            memory_gb=20.0,
            switch_seconds={"*": 3.0},
            transfer_gb=2.0,
        ),
        comp(
            "actor",
            {"a800": [(8, 60.0), (16, 32.0)], "rtx4090": [(4, 150.0)]},
            memory_gb=40.0,
            switch_seconds={"*": 4.0},
        ),
    ]
    groups = [
        Group("a800", "gpu", ("a800",), 16, 8, 80.0),
        Group("rtx4090", "gpu", ("rtx4090",), 4, 4, 24.0),
        Group("cpu", "node", ("cpu",), 2, 1, None),
    ]
    if robots:
        groups.append(Group("robot", "hardware", ("robot",), 4, 4, None))
    return Problem(tuple(groups), tuple(chain), 8, 25.0, 12.5)


def test_heterogeneous_choice_beats_the_obvious_placements() -> None:
    for robots in (False, True):
        problem = _hetero(robots)
        best = search(problem, top=1)[0]
        assert best == exhaustive(problem) or abs(best.time_s - exhaustive(problem).time_s) < 1e-9
        margins = {b.name: b.candidate.time_s / best.time_s for b in baselines(problem)}
        print(
            f"\nrobots={robots}: best {best.time_s:.2f} s/iter ({best.describe()}); margins "
            + ", ".join(f"{m:.2f}x over {n}" for n, m in margins.items())
        )
        assert all(m > 1.05 for m in margins.values()), margins
        assert {s.group for s in best.stages} >= {"a800", "rtx4090"}  # uses both GPU types


def test_memory_and_rules_prune() -> None:
    problem = _hetero(False)
    # actor (40 GB) never on a 24 GB 4090
    assert evaluate(problem, [(("env",), "cpu", 2), (("rollout",), "a800", 8), (("actor",), "rtx4090", 4)]) is None
    # a group's capacity is shared by its stages
    assert evaluate(problem, [(("env",), "cpu", 2), (("rollout",), "a800", 8), (("actor",), "a800", 16)]) is None
    ruled = Problem(problem.groups, problem.chain, 8, 25.0, 12.5, Rules(same_group=(("rollout", "actor"),)))
    assert evaluate(ruled, [(("env",), "cpu", 2), (("rollout",), "rtx4090", 4), (("actor",), "a800", 16)]) is None
    apart = Problem(problem.groups, problem.chain, 8, 25.0, 12.5, Rules(all_or_apart=("env", "rollout", "actor")))
    assert evaluate(apart, [(("env", "rollout"), "a800", 8), (("actor",), "a800", 8)]) is None
    assert evaluate(apart, [(("env",), "cpu", 2), (("rollout",), "a800", 8), (("actor",), "a800", 8)]) is not None


def _fabric_problem(*groups: Group) -> Problem:
    """One component of tensor-parallel size 8 (its unit) in one-GPU processes, fast on gb200, slow on h100."""
    curves = {"gb200": Curve(((8, 10.0), (16, 6.0)), 0.9), "h100": Curve(((8, 30.0), (16, 18.0)), 0.9)}
    chain = (Component("trainer", 8, ComponentProfile("trainer", curves), per_process=1),)
    return Problem(groups, chain, 1, 25.0, 12.5)


def test_a_placement_whose_groups_cross_blocks_never_wins_over_one_that_keeps_them() -> None:
    # gb200: blocks of 3 nodes x 4 GPUs = 12 GPUs, so groups of 8 straddle blocks; h100 is flat, 3x slower
    gb200 = Group("gb200", "gpu", ("gb200",), 16, 4, 80.0, fabric_unit=12)
    h100 = Group("h100", "gpu", ("h100",), 16, 8, 80.0)
    (best, *_) = search(_fabric_problem(gb200, h100), top=3)
    assert best.describe() == "trainer@h100:16" and best.warnings == ()
    # without the fabric the faster gb200 wins; with blocks of 2 nodes (8 GPUs) the groups fit and it wins again
    assert (
        search(_fabric_problem(Group("gb200", "gpu", ("gb200",), 16, 4, 80.0), h100))[0].describe()
        == "trainer@gb200:16"
    )
    fits = Group("gb200", "gpu", ("gb200",), 16, 4, 80.0, fabric_unit=8)
    assert search(_fabric_problem(fits, h100))[0].describe() == "trainer@gb200:16"


def test_when_every_placement_crosses_the_best_is_proposed_with_a_warning() -> None:
    gb200 = Group("gb200", "gpu", ("gb200",), 16, 4, 80.0, fabric_unit=12)
    (best, *_) = search(_fabric_problem(gb200), top=3)
    assert best.describe() == "trainer@gb200:16"
    assert any("no placement keeps every model-parallel group inside one block" in w for w in best.warnings)
    assert search(_fabric_problem(gb200), top=3, strict_fabric=True) == []  # tune --strict-topology
