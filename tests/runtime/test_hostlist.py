"""Slurm hostlist parsing and expansion: hand cases from real clusters, errors, and a round trip."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcplace.runtime.errors import ShimError
from hpcplace.runtime.slurm_env import expand_hostlist, hostlist_nth, hostlist_position, hostlist_size


@pytest.mark.parametrize(
    "expr, names",
    [
        ("a800-[1-2],cpu-1", ["a800-1", "a800-2", "cpu-1"]),
        ("n[001-003,7]", ["n001", "n002", "n003", "n7"]),
        ("n[08-11]", ["n08", "n09", "n10", "n11"]),
        ("n[8-11]", ["n8", "n9", "n10", "n11"]),
        ("n[098-101]", ["n098", "n099", "n100", "n101"]),
        ("r[1-2]n[01-02]", ["r1n01", "r1n02", "r2n01", "r2n02"]),
        ("gpu[1-2]-ib", ["gpu1-ib", "gpu2-ib"]),
        ("a800-[1-2],cpu-1,rtx4090-1", ["a800-1", "a800-2", "cpu-1", "rtx4090-1"]),
        ("node7", ["node7"]),
        ("host.example.org", ["host.example.org"]),
        ("n[5,1-2]", ["n5", "n1", "n2"]),
        ("[1-2]", ["1", "2"]),
        (" n[1-2] ", ["n1", "n2"]),
    ],
)
def test_expand_real_lists(expr: str, names: list[str]) -> None:
    assert expand_hostlist(expr) == names
    assert hostlist_size(expr) == len(names)
    for i, name in enumerate(names):
        assert hostlist_nth(expr, i) == name
        assert hostlist_position(expr, name) == names.index(name)


def test_position_respects_zero_padding() -> None:
    assert hostlist_position("n[001-003,7]", "n7") == 3
    assert hostlist_position("n[001-003,7]", "n007") is None
    assert hostlist_position("n[001-003]", "n1") is None
    assert hostlist_position("n[001-003]", "n004") is None
    assert hostlist_position("n[001-003]", "m001") is None
    assert hostlist_position("a800-[1-2]", "a800-") is None


def test_nth_out_of_range() -> None:
    with pytest.raises(IndexError):
        hostlist_nth("n[1-2]", 2)
    with pytest.raises(IndexError):
        hostlist_nth("n[1-2]", -1)


def test_large_lists_need_no_expansion() -> None:
    expr = "gpu[00001-65536],cpu[1-3]"
    assert hostlist_size(expr) == 65539
    assert hostlist_position(expr, "gpu65536") == 65535
    assert hostlist_nth(expr, 65536) == "cpu1"
    with pytest.raises(ShimError, match="limit"):
        expand_hostlist("n[0-99999999]")


@pytest.mark.parametrize(
    "expr, why",
    [
        ("", "empty node list"),
        ("n[1-2", "unclosed"),
        ("n1-2]", "unmatched"),
        ("n[[1-2]]", "nested"),
        ("n[]", "empty brackets"),
        ("n[2-1]", "backwards"),
        ("n[a-b]", "bad range"),
        ("n[1-]", "bad range"),
        ("n[1,,2]", "bad range"),
        ("a,,b", "empty host name"),
        ("a,", "empty host name"),
        ("a b", "whitespace"),
        ("n[1-2-3]", "bad range"),
    ],
)
def test_malformed_lists_are_errors(expr: str, why: str) -> None:
    with pytest.raises(ShimError, match=why) as info:
        expand_hostlist(expr)
    assert "node list" in str(info.value)


# ---- round trip against a small independent compressor ------------------------------------------


def compress(names: list[str]) -> str:
    """Sorted names -> hostlist: `prefix` + zero-padded number, consecutive runs as ranges."""
    groups: dict[tuple[str, int], list[int]] = {}
    for name in names:
        prefix = name.rstrip("0123456789")
        digits = name[len(prefix) :]
        groups.setdefault((prefix, len(digits)), []).append(int(digits))
    items = []
    for (prefix, width), numbers in sorted(groups.items()):
        numbers.sort()
        runs: list[list[int]] = []
        for n in numbers:
            if runs and n == runs[-1][1] + 1:
                runs[-1][1] = n
            else:
                runs.append([n, n])
        body = ",".join(f"{a:0{width}d}" if a == b else f"{a:0{width}d}-{b:0{width}d}" for a, b in runs)
        items.append(f"{prefix}[{body}]")
    return ",".join(items)


hosts = st.builds(
    lambda prefix, width, number: f"{prefix}{number:0{width}d}",
    st.sampled_from(["n", "a800-", "gpu-node", "r1n"]),
    st.integers(1, 4),
    st.integers(0, 999),
)


@settings(max_examples=150, deadline=None)
@given(st.sets(hosts, min_size=1, max_size=40))
def test_compress_expand_round_trip(names: set[str]) -> None:
    ordered = sorted(names)
    expr = compress(ordered)
    expanded = expand_hostlist(expr)
    assert sorted(expanded) == ordered
    assert len(expanded) == len(ordered)
    for i, name in enumerate(expanded):
        assert hostlist_position(expr, name) == i
        assert hostlist_nth(expr, i) == name
