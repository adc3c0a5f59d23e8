"""Checks of the collocation invariants over an onload/offload event log (shared by the tests)."""

from __future__ import annotations

import json
from collections import defaultdict
from itertools import pairwise


def read_events(path: str) -> list[dict]:
    with open(path) as fh:
        return [json.loads(line) for line in fh]


def check_invariants(events: list[dict], phases: list[list[str]]) -> dict[int, set[str]]:
    """No device has two owning components at once; every offload of a generation ends before any
    onload of the next one starts; each generation is exactly one phase. Returns gen -> components."""
    turns: dict[tuple[str, int, int], dict[str, int]] = defaultdict(dict)
    for e in events:
        turns[(e["component"], e["rank"], e["generation"])][e["event"]] = e["t"]
        turns[(e["component"], e["rank"], e["generation"])]["devices"] = tuple(e["devices"])  # type: ignore[assignment]
    for key, t in turns.items():
        assert set(t) >= {"onload_begin", "onload_end", "offload_begin", "offload_end"}, key
    by_device: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    for (component, _, _), t in turns.items():
        for device in t["devices"]:
            by_device[device].append((t["onload_begin"], t["offload_end"], component))
    for device, spans in by_device.items():
        spans.sort()
        for (_, e1, c1), (s2, _, c2) in pairwise(spans):
            if c1 != c2:
                assert e1 < s2, f"device {device}: {c1} owned until {e1}, {c2} onloaded at {s2}"
    gens: dict[int, set[str]] = defaultdict(set)
    for component, _, g in turns:
        gens[g].add(component)
    for g, components in gens.items():
        assert any(components <= set(p) for p in phases), f"generation {g} mixes phases: {components}"
    ordered = sorted(gens)
    for g, nxt in pairwise(ordered):
        last_off = max(t["offload_end"] for (c, r, gg), t in turns.items() if gg == g)
        first_on = min(t["onload_begin"] for (c, r, gg), t in turns.items() if gg == nxt)
        assert last_off < first_on, f"generation {nxt} onloaded before generation {g} finished offloading"
    return gens
