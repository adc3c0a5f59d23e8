"""Config fuzzing shared by the CI test (hypothesis, seeded) and bench/bench_fuzz.py (>= 100,000 cases).

A case = one of the example configs (native, RLinf, ROLL, AReaL) plus a few mutations: keys deleted,
renamed or added, values swapped for hostile ones (types, huge numbers, control characters), rank
strings, ROLL device_mapping and AReaL allocation-mode strings generated from their grammars with
mistakes, node groups duplicated or rewritten, and text-level damage (truncation, alias bombs,
stray characters). `run_case` plans the result and renders it in memory; the only acceptable
outcomes are a plan or an HpcplaceError carrying a location.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hpcplace.errors import HpcplaceError

REPO = Path(__file__).resolve().parents[2]
SEEDS = {p.stem: p.read_text(encoding="utf-8") for p in sorted((REPO / "configs").glob("*.yaml"))}
SEED_DATA = {name: yaml.safe_load(text) for name, text in SEEDS.items()}


class Chooser:
    """What mutations draw from: `random.Random` in the bench, hypothesis' `data.draw` in CI."""

    def __init__(self, integer: Callable[[int, int], int]) -> None:
        self.integer = integer

    def pick(self, options: list[Any] | tuple[Any, ...]) -> Any:
        return options[self.integer(0, len(options) - 1)]

    def chance(self, percent: int) -> bool:
        return self.integer(0, 99) < percent


NUMBERS = [0, 1, 2, 3, 4, 7, 8, 16, -1, -8, 10**9, 2**31, 2**63, 2**70, 1e9, 0.5, float("inf"), float("nan")]
STRINGS = [
    "",
    " ",
    "all",
    "ALL",
    "node",
    "a800",
    "cpu",
    "x" * 300,
    "a b",
    "A=B",
    "=X",
    "RANK",
    "a\x00b",
    "a\nb",
    "\x1b[2J",
    "\u202eevil",
    ":",
    "::",
    "-",
    "--x",
    "0-",
    "-0",
    "1e9",
    "${PATH}",
    "$(touch /tmp/x)",
    "a\\b",
    "'",
    '"',
    "🙂",
    "0x10",
    "010",
    "1:0",
    "~",
    "null",
    "true",
    "[",
    "{",
    "*x",
    "&x",
    "%",
    "@",
    "`",
]
KEYS = [
    "label",
    "partition",
    "nodes",
    "gpus_per_node",
    "gpu_type",
    "hardware",
    "env",
    "account",
    "qos",
    "node_group",
    "placement",
    "command",
    "num_nodes",
    "node_ranks",
    "component_placement",
    "node_groups",
    "device_mapping",
    "world_size",
    "num_gpus_per_worker",
    "allocation_mode",
    "n_nodes",
    "n_gpus_per_node",
    "scheduling_strategy",
    "time",
    "extra_sbatch_args",
    "format",
    "name",
    "slurm",
    "hpcplace",
    "components",
    "env_configs",
    "count",
    "type",
    "tensor_parallel_size",
    "offload",
    "cpus_per_process",
    "mem_per_process",
    "cluster",
    "actor",
    "rollout",
    "inference",
    "target",
    "cpu_partition",
    "cpu_nodes",
    "<<",
    "RANK",
    "a b",
    "",
]


def rank_string(c: Chooser) -> str:
    parts = []
    for _ in range(c.integer(1, 4)):
        res = c.pick(["all", "ALL", str(c.integer(0, 20)), f"{c.integer(0, 20)}-{c.integer(0, 40)}", "", "x", "-"])
        if c.chance(50):
            res += ":" + c.pick(
                [
                    str(c.integer(0, 40)),
                    f"{c.integer(0, 40)}-{c.integer(0, 99)}",
                    "all",
                    "",
                    f"0-{c.pick([10**6, 10**12, 7])}",
                    "a:b",
                ]
            )
        parts.append(res)
    return c.pick([",", ", ", ",,", ":"]).join(parts)


def device_mapping_string(c: Chooser) -> str:
    terms = []
    for _ in range(c.integer(1, 3)):
        a, b = c.integer(0, 40), c.integer(-5, 64)
        terms.append(
            c.pick(
                [
                    f"list(range({a},{b}))",
                    f"range({a}, {b})",
                    f"list(range({a},{b},{c.integer(-2, 3)}))",
                    f"[{a},{b}]",
                    f"[{a}, {a}]",
                    "[]",
                    f"list(range({a}))",
                    "list(range(0,10**9))",
                    f"[{10**12}]",
                    "range(",
                    f"[{a},",
                    "__import__('os')",
                    f"{a}",
                    "range(0,8)*2",
                ]
            )
        )
    return c.pick([" + ", "+", " - ", ","]).join(terms)


def allocation_mode_string(c: Chooser) -> str:
    members = []
    for _ in range(c.integer(1, 3)):
        dims = "".join(f"{c.pick('dptcexq')}{c.pick([0, 1, 2, 4, 8, 16, 10**9])}" for _ in range(c.integer(1, 4)))
        backend = c.pick(["sglang", "vllm", "fsdp", "megatron", "", "SGLANG", "x y"])
        name = c.pick(["", "[rollout]", "[actor]", "[critic]", "[]", "[a b]"])
        sep = c.pick([":", ".", "", "::"])
        members.append(f"{backend}{name}{sep}{dims}" if backend or name else dims)
    return c.pick(["|", "+", " + ", "||", ","]).join(members)


def hostile_value(c: Chooser, depth: int = 0) -> Any:
    kind = c.integer(0, 9 if depth < 2 else 6)
    if kind <= 1:
        return c.pick(NUMBERS)
    if kind == 2:
        return c.pick(STRINGS)
    if kind == 3:
        return rank_string(c)
    if kind == 4:
        return device_mapping_string(c)
    if kind == 5:
        return allocation_mode_string(c)
    if kind == 6:
        return c.pick([None, True, False])
    if kind in (7, 8):
        return [hostile_value(c, depth + 1) for _ in range(c.integer(0, 3))]
    return {c.pick(KEYS): hostile_value(c, depth + 1) for _ in range(c.integer(0, 3))}


def _paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(data, dict):
        for k, v in data.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += _paths(v, prefix + (i,))
    return out


def _parent(data: Any, path: tuple) -> Any:
    for p in path[:-1]:
        data = data[p]
    return data


def mutate(data: Any, c: Chooser) -> Any:
    """One structural mutation of parsed config data (returns the new root)."""
    paths = _paths(data)
    path = c.pick(paths)
    op = c.integer(0, 9)
    if not path:
        return hostile_value(c) if op == 0 else data
    parent = _parent(data, path)
    key = path[-1]
    if op <= 2:  # replace a value
        parent[key] = hostile_value(c)
    elif op == 3:  # a placement/device/allocation string where one is expected
        parent[key] = c.pick([rank_string, device_mapping_string, allocation_mode_string])(c)
    elif op == 4:  # delete
        del parent[key]
    elif op == 5 and isinstance(parent, dict):  # rename a key
        new = c.pick(KEYS) if c.chance(80) else hostile_value(c)
        parent[new if isinstance(new, (str, int, float, bool)) or new is None else str(new)] = parent.pop(key)
    elif op == 6:  # add a key next to it
        target = parent[key] if isinstance(parent[key], dict) else parent
        if isinstance(target, dict):
            target[c.pick(KEYS)] = hostile_value(c)
        elif isinstance(target, list):
            target.append(hostile_value(c))
    elif op == 7 and isinstance(parent, list):  # duplicate a list item (node groups, ...)
        parent.insert(c.integer(0, len(parent)), copy.deepcopy(parent[key]))
    elif op == 8:  # swap in a whole node group / placement block
        parent[key] = {
            "label": c.pick(["a800", "cpu", "node", "x", "A800"]),
            "partition": c.pick(STRINGS),
            "nodes": c.pick(NUMBERS),
            "gpus_per_node": c.pick(NUMBERS + [[8, 4], []]),
            "node_group": c.pick(["a800", "a800,cpu", ["a800", "cpu"], "node", "nope", ""]),
            "placement": rank_string(c),
        }
    else:  # numbers nudged
        value = parent[key]
        if isinstance(value, int) and not isinstance(value, bool):
            parent[key] = value + c.pick([-value - 1, -1, 1, 10**6, 10**9])
        else:
            parent[key] = c.pick(NUMBERS)
    return data


def text_damage(text: str, c: Chooser) -> str:
    op = c.integer(0, 5)
    if op == 0:
        return text[: c.integer(0, len(text))]
    if op == 1:
        i = c.integer(0, len(text))
        return (
            text[:i]
            + c.pick(
                [
                    "\t",
                    ":",
                    "- ",
                    "&a ",
                    "*a",
                    "{",
                    "]",
                    "\x00",
                    "\x1b",
                    "'",
                    '"',
                    "\n  x: 1\n",
                    "<<: *a\n",
                    "%YAML 1.1\n",
                    "!!python/object:os.system ''\n",
                ]
            )
            + text[i:]
        )
    if op == 2:  # an alias bomb appended
        bomb = 'b0: &b0 ["x","x","x","x","x","x","x","x","x"]\n' + "".join(
            f"b{i}: &b{i} [" + ",".join([f"*b{i - 1}"] * 9) + "]\n" for i in range(1, c.integer(2, 9))
        )
        return text + "\n" + bomb
    if op == 3:
        return text + "\nself: &s [1, *s]\n"
    if op == 4:
        return "x: " + "[" * c.integer(50, 400) + "]" * c.integer(0, 400)
    return text.replace(":", c.pick([": ", " :", "=", ""]), 1)


def make_case(c: Chooser) -> tuple[str, str, list[str]]:
    """(seed name, YAML text, --set overrides) of one case."""
    name = c.pick(sorted(SEEDS))
    overrides: list[str] = []
    if c.chance(10):
        text = text_damage(SEEDS[name], c)
    else:
        data = copy.deepcopy(SEED_DATA[name])
        for _ in range(c.integer(1, 3)):
            data = mutate(data, c)
        try:
            text = yaml.safe_dump(data, allow_unicode=c.chance(50), sort_keys=False)
        except (yaml.YAMLError, ValueError):
            text = SEEDS[name]
    if c.chance(10):
        overrides.append(
            c.pick(
                [
                    "name=x",
                    "slurm.time=1:00",
                    "cluster.num_nodes=2",
                    "a.b.c=1",
                    "=1",
                    "x",
                    "cluster=3",
                    "cluster.node_groups.x=1",
                    f"slurm.partition={c.pick(STRINGS)}",
                ]
            )
        )
    return name, text, overrides


@dataclass
class Outcome:
    kind: str  # "ok" | "error" | "no-location" | "traceback" | "slow"
    detail: str
    seconds: float


def run_case(path: Path, text: str, overrides: list[str], slow_s: float = 5.0) -> Outcome:
    """Plan and render (in memory) one config; classify what happened."""
    from hpcplace.plan.planner import plan_from_file
    from hpcplace.slurm.render import render_script

    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    t0 = time.perf_counter()
    try:
        plan = plan_from_file(path, overrides=overrides)
        render_script(plan, "/fuzz/run")
        kind, detail = "ok", ""
    except HpcplaceError as exc:
        kind, detail = ("error", str(exc)) if exc.location is not None else ("no-location", str(exc))
    except RecursionError as exc:  # noqa: F841  (a traceback too, named apart)
        kind, detail = "traceback", "RecursionError"
    except Exception as exc:  # noqa: BLE001  (the fuzzer's job is to find these)
        import traceback

        kind, detail = "traceback", "".join(traceback.format_exception(exc))[-2000:]
    seconds = time.perf_counter() - t0
    if kind in ("ok", "error") and seconds > slow_s:
        kind = "slow"
    return Outcome(kind, detail, seconds)
