"""RLinf's placement string (`resource_ranks[:process_ranks], ...`): every rule and every error message."""

from __future__ import annotations

import pytest

from hpcplace.config.rank_syntax import (
    RankMapPart,
    RankSyntaxError,
    expand_rank_map,
    parse_range,
    parse_rank_map,
)
from hpcplace.errors import PlanError


def expand(text: str, total: int = 16) -> list[list[int]]:
    return expand_rank_map(parse_rank_map(text, total))


def syntax_error(text: str, total: int = 16, **kw) -> RankSyntaxError:
    with pytest.raises(RankSyntaxError) as info:
        parse_rank_map(text, total, **kw)
    return info.value


# --- accepted forms -------------------------------------------------------------------------------


def test_single_rank() -> None:
    assert parse_rank_map("5", 8) == (RankMapPart(5, 5, 0, 0),)
    assert expand("5", 8) == [[5]]


def test_range_one_process_per_resource() -> None:
    assert parse_rank_map("2-5", 8) == (RankMapPart(2, 5, 0, 3),)
    assert expand("2-5", 8) == [[2], [3], [4], [5]]


def test_single_element_range() -> None:
    assert expand("3-3", 8) == [[3]]


@pytest.mark.parametrize("word", ["all", "ALL", "All", "aLl", "  all  "])
def test_all_is_case_insensitive(word: str) -> None:
    assert parse_rank_map(word, 6) == (RankMapPart(0, 5, 0, 5),)
    assert expand(word, 6) == [[0], [1], [2], [3], [4], [5]]


def test_all_with_process_ranks() -> None:
    assert expand("ALL:0-15", 8) == [[r // 2] for r in range(16)]


def test_whitespace_around_numbers_is_ignored() -> None:
    assert expand(" 0 - 1 : 0 - 3 , 2 ", 8) == [[0], [0], [1], [1], [2]]


def test_empty_parts_are_skipped() -> None:
    assert expand(",0-1,,  ,2-3,", 8) == [[0], [1], [2], [3]]
    assert parse_rank_map(",0-1,,  ,2-3,", 8) == (RankMapPart(0, 1, 0, 1), RankMapPart(2, 3, 2, 3))


def test_rlinf_mixed_syntax_example() -> None:
    """RLinf's docs example: 15 processes; resources 2 and 6 are left unused."""
    parts = parse_rank_map("0-1:0-3,3-5,7-10:7-14", 11)
    assert parts == (RankMapPart(0, 1, 0, 3), RankMapPart(3, 5, 4, 6), RankMapPart(7, 10, 7, 14))
    lists = expand_rank_map(parts)
    assert lists == [[0], [0], [1], [1], [3], [4], [5], [7], [7], [8], [8], [9], [9], [10], [10]]
    assert len(lists) == 15
    used = {r for lst in lists for r in lst}
    assert used == {0, 1, 3, 4, 5, 7, 8, 9, 10}
    assert {2, 6}.isdisjoint(used)


def test_more_resources_than_processes_gives_contiguous_slices() -> None:
    assert expand("0-7:0-1") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert expand("4-11:0-3") == [[4, 5], [6, 7], [8, 9], [10, 11]]
    assert expand("0-3:0") == [[0, 1, 2, 3]]


def test_more_processes_than_resources_shares_each_resource() -> None:
    assert expand("0-1:0-5") == [[0], [0], [0], [1], [1], [1]]
    assert expand("3:0-3") == [[3], [3], [3], [3]]


def test_spreading_across_parts_in_both_directions() -> None:
    assert expand("0-3:0-1,4:2-3,5-6") == [[0, 1], [2, 3], [4], [4], [5], [6]]


def test_process_ranks_continue_across_parts() -> None:
    parts = parse_rank_map("0-1,2-3:2-5,6:6", 8)
    assert [(p.process_start, p.process_end) for p in parts] == [(0, 1), (2, 5), (6, 6)]


def test_gaps_between_resource_parts_are_allowed() -> None:
    assert expand("0,4,9-10") == [[0], [4], [9], [10]]


def test_leading_zeros_are_plain_decimal() -> None:
    assert expand("010", 16) == [[10]]


def test_parse_range_directly() -> None:
    assert parse_range("all", total=4, offset=0, what="x") == (0, 3)
    assert parse_range(" 2-3", total=4, offset=0, what="x") == (2, 3)
    assert parse_range("7", total=None, offset=0, what="x") == (7, 7)


def test_rank_syntax_error_is_a_plan_error() -> None:
    err = syntax_error("nope")
    assert isinstance(err, PlanError)
    assert err.hint


# --- rejected forms: message, hint and offset of the offending part ------------------------------


def test_process_ranks_cannot_be_all() -> None:
    err = syntax_error("0-3:all")
    assert err.message == "process ranks cannot be 'all'"
    assert err.offset == 4
    assert "process ranks must be explicit" in (err.hint or "")


@pytest.mark.parametrize("word", ["ALL", "All"])
def test_process_ranks_cannot_be_all_any_case(word: str) -> None:
    assert syntax_error(f"0-3:{word}").message == "process ranks cannot be 'all'"


def test_all_with_no_resources() -> None:
    err = syntax_error("all", 0)
    assert err.message == "resource ranks 'all' selects nothing: there are no resources here"
    assert err.offset == 0


@pytest.mark.parametrize(
    "text, offset, token",
    [
        ("x", 0, "x"),
        ("0-3,a-b", 4, "a-b"),
        ("1-", 0, "1-"),
        ("-1", 0, "-1"),
        ("1--2", 0, "1--2"),
        ("1-2-3", 0, "1-2-3"),
        ("1 2", 0, "1 2"),
        ("0-3,  7.5", 6, "7.5"),
        (":0-3", 0, ""),
        ("al", 0, "al"),
    ],
)
def test_invalid_resource_ranks(text: str, offset: int, token: str) -> None:
    err = syntax_error(text)
    assert err.message == f"invalid resource ranks {token!r}"
    assert err.offset == offset
    assert err.hint and "`a`, `a-b` or `all`" in err.hint


def test_invalid_process_ranks() -> None:
    err = syntax_error("0-3,4-5:x")
    assert err.message == "invalid process ranks 'x'"
    assert err.offset == 8
    err = syntax_error("0-3:")
    assert err.message == "invalid process ranks ''"
    assert err.offset == 4


def test_resource_name_appears_in_messages() -> None:
    err = syntax_error("0-99", 16, resource_name="GPU")
    assert err.message.startswith("GPU ranks '0-99' is out of range")


def test_more_than_one_colon() -> None:
    err = syntax_error("0-3,0:1:2")
    assert err.message == "invalid placement part '0:1:2': more than one ':'"
    assert err.offset == 4


def test_start_greater_than_end_resources() -> None:
    err = syntax_error("0-1,5-4")
    assert err.message == "resource ranks '5-4': start 5 is greater than end 4"
    assert err.hint == "write it ascending: `4-5`"
    assert err.offset == 4


def test_start_greater_than_end_processes() -> None:
    err = syntax_error("0-3:3-0")
    assert err.message == "process ranks '3-0': start 3 is greater than end 0"
    assert err.offset == 4


@pytest.mark.parametrize("text, offset, token", [("0-16", 0, "0-16"), ("0-3, 20", 5, "20"), ("16", 0, "16")])
def test_out_of_range(text: str, offset: int, token: str) -> None:
    err = syntax_error(text, 16)
    assert err.message == f"resource ranks {token!r} is out of range: only 16 resources (0-15) here"
    assert err.offset == offset
    assert err.hint == "count resources from 0 within the selected node group(s)"


def test_last_rank_in_range_is_accepted() -> None:
    assert expand("15", 16) == [[15]]


@pytest.mark.parametrize(
    "text, offset, token, prev_end",
    [
        ("0-3,3-5", 4, "3-5", 3),  # overlap
        ("0-3,2", 4, "2", 3),  # inside the previous part
        ("4-7,0-3", 4, "0-3", 7),  # descending
        ("0,1,1", 4, "1", 1),  # repeated
    ],
)
def test_resource_parts_must_ascend_without_overlap(text: str, offset: int, token: str, prev_end: int) -> None:
    err = syntax_error(text)
    assert err.message == (f"resource ranks {token!r} overlap or precede the previous part (which ends at {prev_end})")
    assert err.offset == offset
    assert err.hint == "resource parts must not overlap and must ascend, e.g. `0-3,4-7`"


def test_process_ranks_must_start_at_zero() -> None:
    """RLinf does not require it although its docs say so; hpcplace does."""
    err = syntax_error("0-3:1-4")
    assert err.message == (
        "process ranks '1-4' must start at 0: process ranks are continuous and ascending from 0 across parts"
    )
    assert err.offset == 4
    assert err.hint == "write `0-3:0-3`"


@pytest.mark.parametrize(
    "text, offset, token, expected, hint",
    [
        ("0-1,2-3:3-4", 8, "3-4", 2, "write `2-3:2-3`"),  # gap
        ("0-1:0-3,2-3:2-5", 12, "2-5", 4, "write `2-3:4-7`"),  # overlap
        ("0-1:0-3,2-3:0-3", 12, "0-3", 4, "write `2-3:4-7`"),  # restart
    ],
)
def test_process_ranks_must_be_continuous(text: str, offset: int, token: str, expected: int, hint: str) -> None:
    err = syntax_error(text)
    assert err.message.startswith(f"process ranks {token!r} must start at {expected}:")
    assert err.offset == offset
    assert err.hint == hint


@pytest.mark.parametrize(
    "text, offset, part, procs, res",
    [
        ("0-2:0-1", 0, "0-2:0-1", 2, 3),
        ("0-1:0-2", 0, "0-1:0-2", 3, 2),
        ("0-3,4-9:4-7", 4, "4-9:4-7", 4, 6),
    ],
)
def test_counts_must_divide(text: str, offset: int, part: str, procs: int, res: int) -> None:
    err = syntax_error(text, 16, resource_name="GPU")
    assert err.message == f"part {part!r}: {procs} processes on {res} GPUs; one count must divide the other"
    assert err.offset == offset
    assert err.hint == "e.g. 4 resources for 2 processes (2 each) or 8 processes (2 per resource)"


@pytest.mark.parametrize("text", ["", " ", ",", " , ,"])
def test_empty_placement(text: str) -> None:
    err = syntax_error(text)
    assert err.message == "empty placement: no resource ranks given"
    assert err.offset == 0


# --- regressions: non-ASCII digits, messages with no resources ---------------------------------


def test_superscript_digit_is_a_syntax_error_not_a_crash() -> None:
    with pytest.raises(RankSyntaxError):
        parse_rank_map("²", 8)


def test_non_ascii_digits_are_rejected() -> None:
    with pytest.raises(RankSyntaxError):
        parse_rank_map("٣", 8)


def test_out_of_range_message_with_no_resources() -> None:
    err = syntax_error("0", 0)
    assert "0--1" not in err.message
