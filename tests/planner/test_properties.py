"""Property tests (hypothesis): random clusters x random placement strings, checked against an independent
reference written from DESIGN.md §4 (accepted <=> valid, same per-process resources), plus the plan's
invariants: no unrequested sharing, one node and one type per process, consistent local ranks/world sizes."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, replace

from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from hpcplace.config.cluster import Cluster, Hardware, NodeGroup
from hpcplace.config.spec import ExperimentSpec, PlacementEntry
from hpcplace.errors import HpcplaceError
from hpcplace.plan.planner import plan_from_spec
from hpcplace.plan.strategies import Packed

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ALPHABET = "0123456789-:, aAlL"
MAX_PROCESSES = 3000


# ================================================================================================
# the reference: a plain re-statement of the rules, sharing no code with the planner


@dataclass(frozen=True)
class Res:
    node: int  # cluster node rank
    local: int  # local GPU / hardware index on that node (0 for node resources)
    type: str
    kind: str  # "gpu" | "hardware" | "node"


def group_kind(g: NodeGroup) -> str:
    """A group counts its declared hardware, else its GPUs, else (no accelerator or ignore_hardware) its nodes."""
    if g.ignore_hardware:
        return "node"
    if g.hardware is not None:
        return "hardware"
    return "gpu" if sum(g.gpus_per_node) > 0 else "node"


def group_ranks(groups: tuple[NodeGroup, ...]) -> list[list[int]]:
    """Per group, the cluster node rank of each of its nodes: the ranks it names, in ascending order
    (RLinf keeps a group's nodes in node rank order, whatever order they were listed in), else
    consecutive ranks in group order."""
    out, n = [], 0
    for g in groups:
        out.append(sorted(g.node_ranks) if g.node_ranks is not None else list(range(n, n + g.num_nodes)))
        n += g.num_nodes
    return out


def every_node(groups: tuple[NodeGroup, ...]) -> list[tuple[int, int, int]]:
    """(cluster node rank, group index, index in group) of every node, in cluster node rank order
    (RLinf's `cluster` and `node` groups hold every node sorted by node rank)."""
    return sorted((r, i, j) for i, ranks in enumerate(group_ranks(groups)) for j, r in enumerate(ranks))


def ref_resources(groups: tuple[NodeGroup, ...], selection: tuple[str, ...] | None) -> list[Res]:
    """Resource rank -> resource, for a node_group selection (None = whole cluster, ("node",) = node ranks)."""
    ranks = group_ranks(groups)
    index = {g.label.lower(): i for i, g in enumerate(groups)}
    if selection is not None and len(selection) == 1 and selection[0].lower() == "node":
        nodes, as_nodes = every_node(groups), True
    elif selection is None:
        # RLinf's default group: the accelerators of every node if the cluster has any, else the nodes
        nodes = every_node(groups)
        as_nodes = not any(sum(g.gpus_per_node) for g in groups)
        if not as_nodes:
            return [
                Res(r, k, groups[i].gpu_type or "gpu", "gpu")
                for r, i, j in nodes
                for k in range(groups[i].gpus_per_node[j])
            ]
    else:
        chosen = [index[label.lower()] for label in selection]
        nodes = [(r, i, j) for i in chosen for j, r in enumerate(ranks[i])]
        as_nodes = any(group_kind(groups[i]) == "node" for i in chosen)
    out: list[Res] = []
    for node, i, j in nodes:
        g = groups[i]
        if as_nodes:
            out.append(Res(node, 0, "node", "node"))
        elif g.hardware is not None:
            out.extend(Res(node, k, g.hardware.type, "hardware") for k in range(g.hardware.per_node[j]))
        else:
            out.extend(Res(node, k, g.gpu_type or "gpu", "gpu") for k in range(g.gpus_per_node[j]))
    return out


_RANGE = re.compile(r" *(?:(?P<all>all)|(?P<a>[0-9]+)(?: *- *(?P<b>[0-9]+))?) *", re.IGNORECASE)


def ref_parse(text: str, total: int) -> list[tuple[list[int], list[int]]] | None:
    """[(resource ranks, process ranks)] per part, or None when the string is invalid."""
    parts: list[tuple[list[int], list[int]]] = []
    next_process, last_resource = 0, -1
    for raw in text.split(","):
        if not raw.strip():
            continue
        pieces = raw.split(":")
        if len(pieces) > 2:
            return None
        m = _RANGE.fullmatch(pieces[0])
        if m is None:
            return None
        if m["all"]:
            a, b = 0, total - 1
        else:
            a, b = int(m["a"]), int(m["b"] or m["a"])
        if total == 0 or a > b or b >= total or a <= last_resource:
            return None
        if len(pieces) == 2:
            p = _RANGE.fullmatch(pieces[1])
            if p is None or p["all"]:
                return None
            c, d = int(p["a"]), int(p["b"] or p["a"])
            if c > d or c != next_process:
                return None
        else:
            c, d = next_process, next_process + (b - a)
        n_res, n_proc = b - a + 1, d - c + 1
        if n_res % n_proc != 0 and n_proc % n_res != 0:
            return None
        parts.append((list(range(a, b + 1)), list(range(c, d + 1))))
        next_process, last_resource = d + 1, b
    return parts or None


def ref_expand(parts: list[tuple[list[int], list[int]]]) -> list[list[int]]:
    lists: list[list[int]] = []
    for res, procs in parts:
        if len(res) >= len(procs):
            per = len(res) // len(procs)
            lists.extend(res[i * per : (i + 1) * per] for i in range(len(procs)))
        else:
            share = len(procs) // len(res)
            lists.extend([res[i // share]] for i in range(len(procs)))
    return lists


def ref_rows(groups: tuple[NodeGroup, ...], space: list[Res], lists: list[list[int]]) -> list[tuple] | None:
    """Per process: the placement facts the reference can state, or None when a process spans nodes/types."""
    owner = {r: (i, j) for r, i, j in every_node(groups)}
    rows = []
    for ranks in lists:
        res = [space[r] for r in ranks]
        if len({r.node for r in res}) != 1 or len({r.type for r in res}) != 1:
            return None
        node = res[0].node
        gi, j = owner[node]
        g = groups[gi]
        gpus = g.gpus_per_node[j]
        if res[0].kind == "gpu":
            visible, hw, isolated = tuple(str(r.local) for r in res), tuple(r.local for r in res), True
        else:
            visible = tuple(str(k) for k in range(gpus))
            hw = tuple(r.local for r in res) if res[0].kind == "hardware" else ()
            isolated = False
        rows.append(
            (
                node,
                int(visible[0]) if visible else -1,
                (g.gpu_type or "gpu") if gpus else "none",
                visible,
                isolated,
                hw,
                g.label,
                g.partition,
                gi,
                j,
                res[0].type,
            )
        )
    return rows


def planner_rows(procs) -> list[tuple]:
    return [
        (
            p.cluster_node_rank,
            p.local_accelerator_rank,
            p.accelerator_type,
            p.visible_accelerators,
            p.isolate_accelerator,
            p.local_hardware_ranks,
            p.node_group_label,
            p.partition,
            p.het_group,
            p.group_node_index,
            p.resource_type,
        )
        for p in procs
    ]


# ================================================================================================
# generators


@st.composite
def node_groups(draw) -> tuple[NodeGroup, ...]:
    groups = []
    for gi in range(draw(st.integers(1, 4))):
        n = draw(st.integers(1, 4))
        if draw(st.booleans()):
            gpus = (draw(st.integers(0, 8)),) * n
        else:
            gpus = tuple(draw(st.lists(st.integers(0, 8), min_size=n, max_size=n)))
        hardware = None
        if draw(st.integers(0, 3)) == 0:
            hardware = Hardware(
                draw(st.sampled_from(["robot", "cam"])),
                tuple(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))),
            )
        groups.append(
            NodeGroup(
                label=f"g{gi}",
                partition=f"part{gi}",
                num_nodes=n,
                gpus_per_node=gpus,
                gpu_type=draw(st.sampled_from([None, "a800", "h100"])),
                hardware=hardware,
                ignore_hardware=draw(st.integers(0, 9)) == 0,
            )
        )
    if draw(st.booleans()):
        # arbitrary node ranks (RLinf's `node_ranks`: any set per group, e.g. `0,2` / `1,4,7`):
        # deal a random permutation of the cluster's ranks out to the groups
        labels = draw(st.permutations(range(sum(g.num_nodes for g in groups))))
        dealt, at = [], 0
        for g in groups:
            dealt.append(replace(g, node_ranks=tuple(sorted(labels[at : at + g.num_nodes]))))
            at += g.num_nodes
        groups = dealt
    return tuple(groups)


def random_case(draw, text: str) -> str:
    return "".join(c.upper() if draw(st.booleans()) else c for c in text)


@st.composite
def selections(draw, groups: tuple[NodeGroup, ...]) -> tuple[str, ...] | None:
    choice = draw(st.integers(0, 5))
    if choice == 0:
        return (random_case(draw, "node"),)
    if choice == 1:  # the whole cluster (RLinf's default group)
        return None
    labels = draw(st.permutations([g.label for g in groups]))
    count = draw(st.integers(1, len(labels)))
    return tuple(random_case(draw, label) for label in labels[:count])


@st.composite
def valid_looking(draw, total: int) -> str:
    """Mostly valid strings: ascending parts, optional process ranks sized to divide or be divided."""
    parts: list[str] = []
    res, proc = 0, 0
    if draw(st.integers(0, 5)) == 0:
        return random_case(draw, "all") + (
            f":0-{max(total, 1) * draw(st.integers(1, 3)) - 1}" if draw(st.booleans()) else ""
        )
    for i in range(draw(st.integers(1, 4))):
        res += draw(st.integers(0, 2))
        if i and res >= total and draw(st.integers(0, 3)):
            break  # mostly stay in range
        n_res = draw(st.integers(1, max(1, min(4, total - res))))
        a, b = res, res + n_res - 1
        text = f"{a}" if a == b and draw(st.booleans()) else f"{a}-{b}"
        mode = draw(st.integers(0, 3))
        if mode == 0:
            n_proc = n_res
        elif mode == 3:  # any count: often neither divides the other
            n_proc = draw(st.integers(1, 2 * n_res + 1))
            text += f":{proc}-{proc + n_proc - 1}"
        else:
            n_proc = (
                draw(st.sampled_from([d for d in range(1, n_res + 1) if n_res % d == 0]))
                if mode == 1
                else n_res * draw(st.integers(2, 3))
            )
            text += f":{proc}-{proc + n_proc - 1}" if n_proc > 1 or draw(st.booleans()) else f":{proc}"
        parts.append(text)
        res, proc = b + 1, proc + n_proc
    sep = draw(st.sampled_from([",", ", ", " ,", ",,"]))
    return sep.join(parts)


@st.composite
def mutated(draw, text: str) -> str:
    chars = list(text)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.integers(0, 2))
        pos = draw(st.integers(0, len(chars)))
        if op == 0 and pos < len(chars):
            del chars[pos]
        elif op == 1:
            chars.insert(pos, draw(st.sampled_from(ALPHABET)))
        elif pos < len(chars):
            chars[pos] = draw(st.sampled_from(ALPHABET))
    return "".join(chars)


@st.composite
def cases(draw) -> tuple[tuple[NodeGroup, ...], tuple[str, ...] | None, str]:
    groups = draw(node_groups())
    selection = draw(selections(groups))
    total = len(ref_resources(groups, selection))
    kind = draw(st.integers(0, 3))
    if kind == 0:
        text = draw(st.text(alphabet=ALPHABET, max_size=14))
    else:
        text = draw(valid_looking(total))
        if kind == 1:
            text = draw(mutated(text))
    assume(not re.search(r"[0-9]{4}", text))  # keep process counts small
    return groups, selection, text


# ================================================================================================
# properties


@SETTINGS
@given(cases())
def test_planner_accepts_exactly_what_the_reference_accepts(case) -> None:
    groups, selection, text = case
    space = ref_resources(groups, selection)
    parts = ref_parse(text, len(space))
    lists = ref_expand(parts) if parts is not None else None
    assume(lists is None or len(lists) <= MAX_PROCESSES)
    expected = ref_rows(groups, space, lists) if lists is not None else None
    spec = ExperimentSpec("p", Cluster(groups), (PlacementEntry(("c",), selection, text),), {})
    try:
        plan = plan_from_spec(spec)
    except HpcplaceError as exc:
        event("rejected")
        assert expected is None, f"rejected a valid placement {text!r} on {selection}: {exc}"
        return
    event("accepted")
    assert expected is not None, f"accepted an invalid placement {text!r} on {selection}"
    procs = plan.component("c").processes
    assert plan.component("c").world_size == len(procs) == len(expected)
    assert [p.rank for p in procs] == list(range(len(procs)))
    assert planner_rows(procs) == expected

    # no two processes share a device unless their part asked for sharing (more processes than resources)
    assert parts is not None
    sharing = {r for res, ps in parts if len(ps) > len(res) for r in ps}
    users: dict[tuple, list[int]] = defaultdict(list)
    for p in procs:
        devices = [(p.cluster_node_rank, p.resource_type, h) for h in p.local_hardware_ranks] or [
            (p.cluster_node_rank, "node", 0)
        ]
        for d in devices:
            users[d].append(p.rank)
    for ranks in users.values():
        if len(ranks) > 1:
            assert set(ranks) <= sharing, ranks
            part_of = {r: i for i, (_, ps) in enumerate(parts) for r in ps}
            assert len({part_of[r] for r in ranks}) == 1

    # local ranks, local world sizes and placement node ranks
    per_node: dict[int, list[int]] = defaultdict(list)
    order: dict[int, int] = {}
    for p in procs:
        per_node[p.cluster_node_rank].append(p.rank)
        order.setdefault(p.cluster_node_rank, len(order))
    for ranks in per_node.values():
        assert [procs[r].local_rank for r in ranks] == list(range(len(ranks)))
        assert {procs[r].local_world_size for r in ranks} == {len(ranks)}
    assert [p.placement_node_rank for p in procs] == [order[p.cluster_node_rank] for p in procs]


@st.composite
def packed_cases(draw):
    groups = draw(node_groups())
    labels = tuple(g.label for g in groups if group_kind(g) == "gpu")
    assume(labels)
    selection = (draw(st.sampled_from(labels)),)
    start, per, stride = draw(st.integers(0, 10)), draw(st.integers(1, 4)), draw(st.integers(1, 3))
    end = start + draw(st.integers(0, 3)) * per * stride + draw(st.sampled_from([0, 0, 0, 1])) + per * stride - 1
    return groups, selection, start, end, per, stride


@SETTINGS
@given(packed_cases())
def test_packed_never_crosses_a_node_or_leaves_the_group(case) -> None:
    groups, selection, start, end, per, stride = case
    space = ref_resources(groups, selection)
    ranks = list(range(start, end + 1))
    size = per * stride
    lists = None
    if len(ranks) % size == 0:
        lists = [
            block[j::stride]
            for b in range(0, len(ranks), size)
            for block in [ranks[b : b + size]]
            for j in range(stride)
        ]
    valid = lists is not None and end < len(space)
    expected = ref_rows(groups, space, lists) if valid and lists is not None else None
    try:
        placements = Packed(start, end, per, stride, node_group=selection[0]).get_placement(Cluster(groups))
    except HpcplaceError:
        event("rejected")
        assert expected is None
        return
    event("accepted")
    assert expected is not None
    assert planner_rows(placements) == expected
