"""The package's shape (docs/architecture.md): no import cycle among hpcplace's modules, imports only go
down the stages, the in-job runtime imports nothing of the login-node side, and the repository uses the new
module names (the old ones stay importable for users).

Every import counts, at module level or inside a function; only imports under `if TYPE_CHECKING:` (type
hints, never executed) are left out."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from hpcplace._moved import MOVED, new_name

REPO = Path(__file__).resolve().parents[1]
# The stages, bottom to top: a module may import its own stage and those below it.
STAGE_ORDER = ("errors", "config", "plan", "ray", "slurm", "local", "tune", "top")
TOP = ("hpcplace", "hpcplace._moved", "hpcplace.cli", "hpcplace.functions", "hpcplace.commands")


def module_files() -> dict[str, Path]:
    out = {}
    for base, package in ((REPO / "hpcplace", "hpcplace"), (REPO / "runtime", "hpcplace.runtime")):
        for path in base.rglob("*.py"):
            parts = path.relative_to(base).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            out[".".join((package, *parts))] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported(path: Path, module: str, is_package: bool) -> set[str]:
    """Every module name `path` imports (run-time imports: TYPE_CHECKING blocks left out)."""
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return names


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    graph = {}
    for module, path in files.items():
        targets = imported(path, module, path.name == "__init__.py")
        graph[module] = {t for t in targets if t in files and t != module}
    return graph


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def stage(module: str) -> str | None:
    """The stage of a login-node module; None for the runtime (its own side)."""
    if module.startswith("hpcplace.runtime"):
        return None
    if module == "hpcplace.errors":
        return "errors"
    if any(module == t or module.startswith(t + ".") for t in TOP):
        return "top"
    return module.split(".")[1]


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set(), "c": {"b"}}) == []


def test_the_graph_sees_function_level_imports_and_skips_type_checking(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import hpcplace.x\n"
                    "def f():\n    from hpcplace.config import spec\n    import hpcplace.y as z\n")
    assert imported(path, "hpcplace.m", False) >= {"hpcplace.config", "hpcplace.config.spec", "hpcplace.y"}
    assert "hpcplace.x" not in imported(path, "hpcplace.m", False)


def test_no_import_cycle() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles among hpcplace's modules:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_every_module_is_in_a_stage() -> None:
    for module in import_graph():
        assert stage(module) in (None, *STAGE_ORDER), f"{module} is in no stage ({STAGE_ORDER})"


def test_imports_only_go_down_the_stages() -> None:
    rank = {name: i for i, name in enumerate(STAGE_ORDER)}
    upward = []
    for module, targets in import_graph().items():
        here = stage(module)
        for target in targets:
            there = stage(target)
            if here is None:
                continue  # the runtime: next test
            if there is not None and rank[there] > rank[here]:
                upward.append(f"{module} ({here}) imports {target} ({there})")
    assert not upward, "imports going up the stages:\n" + "\n".join(sorted(upward))


def test_the_runtime_imports_nothing_of_the_login_node_side() -> None:
    for module, targets in import_graph().items():
        if module.startswith("hpcplace.runtime"):
            assert all(t.startswith("hpcplace.runtime") for t in targets), (module, targets)


def test_the_repository_uses_the_new_names() -> None:
    old = []
    for base in ("hpcplace", "runtime", "tests", "bench", "scripts", "docs", "examples"):
        for path in (REPO / base).rglob("*.py"):
            for name in imported(path, "x", False):
                if new_name(name):
                    old.append(f"{path.relative_to(REPO)}: {name} -> {new_name(name)}")
    assert not old, "imports of the old module names:\n" + "\n".join(sorted(old))


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_names_stay_importable_as_the_same_module(old: str) -> None:
    assert importlib.import_module(old) is importlib.import_module(MOVED[old])
    assert importlib.import_module(old).__spec__.name == MOVED[old]


def test_old_submodule_and_plan_names() -> None:
    from hpcplace.plan import Plan, write_plan_json
    from hpcplace.plan.plan import Plan as NewPlan

    old_rlinf = importlib.import_module("hpcplace.formats.rlinf")  # the old name, on purpose
    assert old_rlinf is importlib.import_module("hpcplace.config.formats.rlinf")
    assert Plan is NewPlan and callable(write_plan_json)
    from hpcplace.tune import search
    from hpcplace.tune.tune import search as new_search

    assert search is new_search
