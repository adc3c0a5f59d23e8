"""RLinf's placement string: `resource_ranks[:process_ranks], ...` parsed into exact parts.

Pure parsing and validation against a resource count; errors carry the character offset of the
offending part so the caller can point at file:line:col inside the YAML scalar.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import overload

from hpcplace.config.limits import MAX_PROCESSES  # processes per placement (one cap for all, in hpcplace.config.limits)
from hpcplace.errors import PlanError


@dataclass(frozen=True)
class RankMapPart:
    """One `resource_ranks:process_ranks` part, both as inclusive ranges."""

    resource_start: int
    resource_end: int
    process_start: int
    process_end: int

    @property
    def num_resources(self) -> int:
        return self.resource_end - self.resource_start + 1

    @property
    def num_processes(self) -> int:
        return self.process_end - self.process_start + 1


class RankSyntaxError(PlanError):
    """A placement string error; `offset` is the character position within the string."""

    def __init__(self, message: str, *, offset: int, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.offset = offset


_DIGITS = re.compile(r"^[0-9]+$")
_SYNTAX_HINT = "write `a`, `a-b` or `all` for resources, optionally `:c-d` for processes, e.g. `0-3:0-7,4-7`"


def parse_range(
    text: str, *, total: int | None, offset: int, what: str, noun: str = "resources", scope: str | None = None
) -> tuple[int, int]:
    """Parse `a`, `a-b` or `all` (case-insensitive; `all` needs `total`). `scope` says what `total`
    counts (e.g. "node group 'a800' has 16 GPUs (2 nodes x 8): ranks 0-15"), the hint of an
    out-of-range error."""
    token = text.strip()
    lead = offset + (len(text) - len(text.lstrip()))
    if token.lower() == "all":
        if total is None:
            raise RankSyntaxError(
                f"{what} cannot be 'all'", offset=lead, hint="process ranks must be explicit, e.g. `0-7`; or omit them"
            )
        if total == 0:
            raise RankSyntaxError(f"{what} 'all' selects nothing: there are no resources here", offset=lead)
        return 0, total - 1
    pieces = token.split("-")
    if len(pieces) not in (1, 2) or not all(_DIGITS.match(p.strip()) for p in pieces):
        raise RankSyntaxError(f"invalid {what} {token!r}", offset=lead, hint=_SYNTAX_HINT)
    if any(len(p.strip()) > 9 for p in pieces):
        raise RankSyntaxError(
            f"{what} {token!r}: number too large (at most {MAX_PROCESSES} processes are supported)",
            offset=lead,
            hint=_SYNTAX_HINT,
        )
    start = int(pieces[0])
    end = int(pieces[-1])
    if start > end:
        raise RankSyntaxError(
            f"{what} {token!r}: start {start} is greater than end {end}",
            offset=lead,
            hint=f"write it ascending: `{end}-{start}`",
        )
    if total is not None and end >= total:
        available = f"only {total} {noun} ({compress_ranks(range(total))})" if total else f"no {noun}"
        raise RankSyntaxError(
            f"{what} {token!r} is out of range: {available} here",
            offset=lead,
            hint=scope or "count resources from 0 within the selected node group(s)",
        )
    return start, end


def parse_rank_map(
    text: str,
    total_resources: int,
    *,
    resource_name: str = "resource",
    any_first_process: bool = False,
    scope: str | None = None,
) -> tuple[RankMapPart, ...]:
    """Parse and validate a whole placement string (every RLinf rule, plus process ranks from 0).
    `any_first_process`: as RLinf, the first part's process ranks may start anywhere (`0-1:4-5`);
    only their order matters, so they are renumbered from 0."""
    parts: list[RankMapPart] = []
    offset = 0
    base = 0  # the first process rank as written (RLinf: any), subtracted from every part
    for raw in text.split(","):
        part_offset = offset
        offset += len(raw) + 1
        if not raw.strip():
            continue
        pieces = raw.split(":")
        if len(pieces) > 2:
            raise RankSyntaxError(
                f"invalid placement part {raw.strip()!r}: more than one ':'", offset=part_offset, hint=_SYNTAX_HINT
            )
        res_start, res_end = parse_range(
            pieces[0], total=total_resources, offset=part_offset, what=f"{resource_name} ranks", scope=scope
        )
        if parts and res_start <= parts[-1].resource_end:
            raise RankSyntaxError(
                f"{resource_name} ranks {pieces[0].strip()!r} overlap or precede the previous part "
                f"(which ends at {parts[-1].resource_end})",
                offset=part_offset,
                hint="resource parts must not overlap and must ascend, e.g. `0-3,4-7`",
            )
        next_process = parts[-1].process_end + 1 if parts else 0
        if len(pieces) == 2:
            proc_offset = part_offset + len(pieces[0]) + 1
            proc_start, proc_end = parse_range(pieces[1], total=None, offset=proc_offset, what="process ranks")
            if not parts and any_first_process:
                base = proc_start
            proc_start, proc_end = proc_start - base, proc_end - base
            if proc_start != next_process:
                raise RankSyntaxError(
                    f"process ranks {pieces[1].strip()!r} must start at {next_process + base}: process ranks are "
                    f"continuous and ascending from {base} across parts",
                    offset=proc_offset,
                    hint=f"write `{pieces[0].strip()}:{next_process + base}-{next_process + base + proc_end - proc_start}`",
                )
        else:
            proc_start = next_process
            proc_end = next_process + (res_end - res_start)
        if proc_end >= MAX_PROCESSES:
            raise RankSyntaxError(
                f"placement asks for {proc_end + 1} processes; at most {MAX_PROCESSES} are supported",
                offset=part_offset,
                hint="check the process ranks for a typo",
            )
        part = RankMapPart(res_start, res_end, proc_start, proc_end)
        n_res, n_proc = part.num_resources, part.num_processes
        if n_res % n_proc and n_proc % n_res:
            raise RankSyntaxError(
                f"part {raw.strip()!r}: {n_proc} processes on {n_res} {resource_name}s; one count must "
                "divide the other",
                offset=part_offset,
                hint="e.g. 4 resources for 2 processes (2 each) or 8 processes (2 per resource)",
            )
        parts.append(part)
    if not parts:
        raise RankSyntaxError("empty placement: no resource ranks given", offset=0, hint=_SYNTAX_HINT)
    return tuple(parts)


def expand_rank_map(parts: tuple[RankMapPart, ...]) -> list[list[int]]:
    """Resource ranks of each process, indexed by process rank (RLinf's spreading rules)."""
    out: list[list[int]] = []
    for part in parts:
        n_res, n_proc = part.num_resources, part.num_processes
        if n_res >= n_proc:
            per = n_res // n_proc
            for i in range(n_proc):
                first = part.resource_start + i * per
                out.append(list(range(first, first + per)))
        else:
            share = n_proc // n_res
            for i in range(n_proc):
                out.append([part.resource_start + i // share])
    return out


class SpreadLists(Sequence[list[int]]):
    """`expand_rank_map(parts)` computed on demand (equal to it as a sequence), so a placement of
    a million processes is not a million lists; the planner reads `parts` directly."""

    def __init__(self, parts: tuple[RankMapPart, ...]) -> None:
        self.parts = parts
        self._starts = [p.process_start for p in parts]
        self._len = parts[-1].process_end + 1 if parts else 0

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> list[int]: ...

    @overload
    def __getitem__(self, index: slice) -> list[list[int]]: ...

    def __getitem__(self, index: int | slice) -> list[int] | list[list[int]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._len))]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("process rank out of range")
        part = self.parts[bisect_right(self._starts, index) - 1]
        return _spread(part, index - part.process_start)

    def __iter__(self) -> Iterator[list[int]]:
        for part in self.parts:
            for i in range(part.num_processes):
                yield _spread(part, i)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SpreadLists):
            return self.parts == other.parts
        if isinstance(other, (list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.parts)

    def resource_ranks(self) -> list[int]:
        """Every resource rank some process uses, ascending (every resource of every part)."""
        return [r for p in self.parts for r in range(p.resource_start, p.resource_end + 1)]


def _spread(part: RankMapPart, i: int) -> list[int]:
    n_res, n_proc = part.num_resources, part.num_processes
    if n_res >= n_proc:
        per = n_res // n_proc
        first = part.resource_start + i * per
        return list(range(first, first + per))
    return [part.resource_start + i // (n_proc // n_res)]


def compress_ranks(ranks: Iterable[int]) -> str:
    """`[0,1,2,5,7,8]` -> `"0-2,5,7-8"` (order kept; runs of +1 collapse)."""
    if isinstance(ranks, range) and ranks.step == 1 and len(ranks) > 1:
        return f"{ranks.start}-{ranks.stop - 1}"  # one run, nothing to look at
    if isinstance(ranks, (tuple, list, range)) and len(ranks) > 1:
        first = ranks[0]
        if isinstance(first, int) and tuple(ranks) == tuple(range(first, first + len(ranks))):
            return f"{first}-{first + len(ranks) - 1}"  # one run: compared in C, not looped in Python
    parts: list[str] = []
    start: int | None = None
    prev = 0
    for r in ranks:
        if start is not None and r == prev + 1:
            prev = r
            continue
        if start is not None:
            parts.append(f"{start}-{prev}" if start != prev else str(start))
        start = prev = r
    if start is not None:
        parts.append(f"{start}-{prev}" if start != prev else str(start))
    return ",".join(parts)


def plural(n: int, noun: str, many: str | None = None) -> str:
    """`1 node`, `2 nodes`, `3 processes` (summaries and hints)."""
    return f"{n} {noun}" if n == 1 else f"{n} {many or noun + 's'}"
