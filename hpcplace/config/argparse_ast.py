"""Read a framework's argparse flags from its source without running it (its CLI module imports Ray, vLLM,
DeepSpeed): every `parser.add_argument("--x", ...)` with literal arguments, as hpcplace's flag tables
record them. Used by scripts/gen_openrlhf_flags.py (hpcplace's data of each OpenRLHF release) and by the tests
that check the flag tables against the installed or checked-out framework; never at plan time."""

from __future__ import annotations

import ast
from pathlib import Path


def _literal(node: ast.expr) -> object:
    try:
        return ast.literal_eval(node)
    except ValueError:
        if isinstance(node, ast.Name):
            return f"<name {node.id}>"
        if isinstance(node, ast.Attribute):
            return f"<attr {ast.unparse(node)}>"
        return f"<expr {ast.unparse(node)}>"


def _name(node: ast.expr, env: dict[str, str]) -> str | None:
    """A flag name: a string constant, or an f-string over the enclosing `for` loops' variables."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Name) and value.value.id in env:
                parts.append(env[value.value.id])
            else:
                return None
        return "".join(parts)
    return None


def argparse_flags(source: str, function: str | None = None) -> dict[str, dict[str, object]]:
    """Each option string of every add_argument call (in `function` only, when given) -> its literal
    keywords (action, type as a name, default, nargs, choices) and the option strings of the same call.
    A call inside `for prefix in ("actor", "critic"):` with f-string names counts once per value."""
    tree = ast.parse(source)
    roots: list[ast.AST] = [tree]
    if function is not None:
        roots = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function]
    out: dict[str, dict[str, object]] = {}

    def visit(node: ast.AST, env: dict[str, str]) -> None:
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name):
            try:
                values = ast.literal_eval(node.iter)
            except ValueError:
                values = None
            if isinstance(values, (tuple, list)) and all(isinstance(v, str) for v in values):
                for value in values:
                    for statement in node.body:
                        visit(statement, {**env, node.target.id: value})
                return
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            names = [n for a in node.args if (n := _name(a, env)) is not None]
            if names and names[0].startswith("-"):
                info: dict[str, object] = {"names": tuple(names)}
                for kw in node.keywords:
                    if kw.arg in ("action", "default", "nargs", "choices", "const"):
                        info[kw.arg] = _literal(kw.value)
                    elif kw.arg == "type":
                        info["type"] = kw.value.id if isinstance(kw.value, ast.Name) else ast.unparse(kw.value)
                    elif kw.arg == "dest":
                        info["dest"] = _name(kw.value, env) or _literal(kw.value)
                for name in names:
                    out[name] = info
        for child in ast.iter_child_nodes(node):
            visit(child, env)

    for root in roots:
        visit(root, {})
    return out


def file_flags(path: Path, function: str | None = None) -> dict[str, dict[str, object]]:
    return argparse_flags(path.read_text(encoding="utf-8"), function)
