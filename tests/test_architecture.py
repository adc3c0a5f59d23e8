"""The package's shape (docs/architecture.md): no import cycle among hpcplace's modules, imports only go
down the stages, and the in-job runtime imports nothing of the login-node side.

Every import counts: at module level, inside a function, and under `if TYPE_CHECKING:` (an import only a type
checker runs still ties the two modules: one cannot be read, checked or moved without the other)."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The stages, bottom to top: a module may import its own stage and those below it.
STAGE_ORDER = ("errors", "config", "plan", "ray", "slurm", "local", "tune", "top")
TOP = ("hpcplace", "hpcplace.cli", "hpcplace.functions", "hpcplace.commands")


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
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported(path: Path, module: str, is_package: bool) -> dict[str, str]:
    """Every module name `path` imports, and where the (first) import of it is: "module level", "in a function"
    or "under TYPE_CHECKING". Annotations count: an import only a type checker runs still ties the modules."""
    names: dict[str, str] = {}

    def visit(node: ast.AST, where: str) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.body:
                visit(child, "under TYPE_CHECKING")
            for child in node.orelse:
                visit(child, where)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and where == "module level":
            where = "in a function"
        if isinstance(node, ast.Import):
            for alias in node.names:
                names.setdefault(alias.name, where)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            names.setdefault(base, where)
            for alias in node.names:
                names.setdefault(f"{base}.{alias.name}", where)
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), "module level")
    return names


def import_graph() -> dict[str, dict[str, str]]:
    """module -> {each hpcplace module it imports: where the import is}."""
    files = module_files()
    graph = {}
    for module, path in files.items():
        targets = imported(path, module, path.name == "__init__.py")
        graph[module] = {t: where for t, where in targets.items() if t in files and t != module}
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
    if module == "hpcplace" or any(module == t or module.startswith(t + ".") for t in TOP[1:]):
        return "top"
    return module.split(".")[1]


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set(), "c": {"b"}}) == []


def test_the_graph_sees_function_level_and_type_checking_imports(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(
        "from typing import TYPE_CHECKING\nimport typing\nif TYPE_CHECKING:\n    import hpcplace.x\n"
        "if typing.TYPE_CHECKING:\n    from . import w\nelse:\n    import hpcplace.v\n"
        "def f():\n    from hpcplace.config import spec\n    import hpcplace.y as z\n"
        "class C:\n    def g(self):\n        from ..plan import plan\n"
    )
    found = imported(path, "hpcplace.config.m", False)
    assert found["hpcplace.x"] == found["hpcplace.config.w"] == "under TYPE_CHECKING"
    assert found["hpcplace.v"] == "module level"
    assert found["hpcplace.config.spec"] == found["hpcplace.y"] == found["hpcplace.plan.plan"] == "in a function"


def test_a_cycle_through_annotations_is_found(tmp_path: Path) -> None:
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("from hpcplace.b import B\n")
    b.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from hpcplace.a import A\n")
    graph = {"hpcplace.a": set(imported(a, "hpcplace.a", False)), "hpcplace.b": set(imported(b, "hpcplace.b", False))}
    assert cycles({m: {t for t in targets if t in graph} for m, targets in graph.items()}) == [
        ["hpcplace.a", "hpcplace.b"]
    ]


def test_no_import_cycle() -> None:
    graph = import_graph()
    found = cycles(graph)
    lines = []
    for component in found:
        lines.append(" <-> ".join(component))
        lines += [
            f"  {m} imports {t} ({where})" for m in component for t, where in sorted(graph[m].items()) if t in component
        ]
    assert not found, "import cycles among hpcplace's modules (TYPE_CHECKING imports included):\n" + "\n".join(lines)


def test_every_module_is_in_a_stage() -> None:
    for module in import_graph():
        assert stage(module) in (None, *STAGE_ORDER), f"{module} is in no stage ({STAGE_ORDER})"
    # the package's name is not a prefix of the top: a stage's module is in its stage
    assert (
        stage("hpcplace.config.spec"),
        stage("hpcplace.plan.plan"),
        stage("hpcplace.commands.plan_cmd"),
        stage("hpcplace.runtime.shim"),
    ) == ("config", "plan", "top", None)


def test_imports_only_go_down_the_stages() -> None:
    rank = {name: i for i, name in enumerate(STAGE_ORDER)}
    upward = []
    for module, targets in import_graph().items():
        here = stage(module)
        if here is None:
            continue  # the runtime: next test
        for target, where in targets.items():
            there = stage(target)
            if there is not None and rank[there] > rank[here]:
                upward.append(f"{module} ({here}) imports {target} ({there}) {where}")
    assert not upward, "imports going up the stages (TYPE_CHECKING included):\n" + "\n".join(sorted(upward))


def test_the_runtime_imports_nothing_of_the_login_node_side() -> None:
    for module, targets in import_graph().items():
        if module.startswith("hpcplace.runtime"):
            outside = {t: where for t, where in targets.items() if not t.startswith("hpcplace.runtime")}
            assert not outside, (module, outside)
