"""Steer rules: which of a framework's own Ray requests goes to which planned node.

verl, NeMo-RL, OpenRLHF and slime leave the node of each placement group (or bare actor) to Ray. Their format
modules know, from the framework's code, how each request is named or ordered and which planned node each of
its bundles is for: they say so as steer rules. The plan carries them to plan.json (`steer`); the job's
hook (hpcplace.runtime.steer_hook, in the driver and every Ray worker) adds the planned node's resource to
each matching request, so Ray can only put it there."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hpcplace.errors import SpecError

PINS = ("group", "bundle", "rank")


@dataclass(frozen=True)
class SteerRule:
    """One kind of request and the cluster node rank of each of its parts.

    `pin` "group": placement groups whose name matches `name` (a regex with an `index` group, and optionally a
    `replica` group: index + stride * replica), every bundle of group i on nodes[i]; "bundle": bundle k of the
    group named `name`, or of the `ordinal`-th unnamed GPU group the driver makes, on nodes[k]; "rank": the actor
    of class `actor_class` whose constructor's `rank_arg`-th argument is r on nodes[r]."""

    what: str
    pin: str
    nodes: tuple[int, ...]
    name: str = ""
    ordinal: int | None = None
    actor_class: str = ""
    rank_arg: int = 1
    stride: int = 0

    def __post_init__(self) -> None:
        if self.pin not in PINS:
            raise ValueError(f"steer rule pin {self.pin!r}: one of {PINS}")
        if sum(bool(x) for x in (self.name, self.ordinal is not None, self.actor_class)) != 1:
            raise ValueError("a steer rule matches by exactly one of name, ordinal, actor_class")
        if self.name:
            re.compile(self.name)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"what": self.what, "pin": self.pin, "nodes": list(self.nodes)}
        if self.name:
            out["name"] = self.name
        if self.ordinal is not None:
            out["ordinal"] = self.ordinal
        if self.actor_class:
            out["actor_class"] = self.actor_class
            out["rank_arg"] = self.rank_arg
        if self.stride:
            out["stride"] = self.stride
        return out

    def describe(self) -> str:
        """One line of the job script's header."""
        if self.name:
            request = f"placement groups named /{self.name}/"
        elif self.ordinal is not None:
            request = f"the driver's unnamed GPU placement group #{self.ordinal} ({len(self.nodes)} bundles)"
        else:
            request = f"{self.actor_class} actors (rank: constructor argument {self.rank_arg})"
        each = {"group": "group i on the i-th", "bundle": "bundle k on the k-th", "rank": "rank r on the r-th"}
        return f"{self.what}: {request} -> node ranks {_ranks(self.nodes)} ({each[self.pin]})"


def _ranks(nodes: Sequence[int]) -> str:
    """`0,0,1,1`; a long list as its runs: `0x8 1x8`."""
    if len(nodes) <= 16:
        return ",".join(str(n) for n in nodes)
    runs: list[tuple[int, int]] = []
    for n in nodes:
        if runs and runs[-1][0] == n:
            runs[-1] = (n, runs[-1][1] + 1)
        else:
            runs.append((n, 1))
    return " ".join(f"{n}x{c}" for n, c in runs)


def steer_from_json(data: object) -> tuple[SteerRule, ...]:
    """plan.json's `steer` list back into rules (a plan written by this hpcplace)."""
    if not isinstance(data, list):
        return ()
    out = []
    for item in data:
        if not isinstance(item, Mapping):
            raise SpecError("plan.json: a steer rule is not a mapping")
        out.append(_rule(item))
    return tuple(out)


def _rule(item: Mapping[str, Any]) -> SteerRule:
    try:
        return SteerRule(
            what=str(item["what"]),
            pin=str(item["pin"]),
            nodes=tuple(int(n) for n in item["nodes"]),
            name=str(item.get("name") or ""),
            ordinal=int(item["ordinal"]) if item.get("ordinal") is not None else None,
            actor_class=str(item.get("actor_class") or ""),
            rank_arg=int(item.get("rank_arg", 1)),
            stride=int(item.get("stride") or 0),
        )
    except (KeyError, TypeError, ValueError, re.error) as exc:
        raise SpecError(f"plan.json: bad steer rule {dict(item)!r}: {exc}") from None
