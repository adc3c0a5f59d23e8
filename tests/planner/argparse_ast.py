"""Read a framework's argparse flags from its source without running it (its CLI module imports Ray, vLLM,
DeepSpeed): every `parser.add_argument("--x", ...)` with literal arguments, as hpcplace's flag tables
record them. Used by the tests that check those tables against the installed or checked-out framework."""

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


def argparse_flags(source: str, function: str | None = None) -> dict[str, dict[str, object]]:
    """Each option string of every add_argument call (in `function` only, when given) -> its literal
    keywords (action, type as a name, default, nargs, choices) and the option strings of the same call."""
    tree = ast.parse(source)
    roots: list[ast.AST] = [tree]
    if function is not None:
        roots = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function]
    out: dict[str, dict[str, object]] = {}
    for root in roots:
        for node in ast.walk(root):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr != "add_argument":
                continue
            names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if not names or not names[0].startswith("-"):
                continue
            info: dict[str, object] = {"names": tuple(names)}
            for kw in node.keywords:
                if kw.arg in ("action", "default", "nargs", "choices", "const"):
                    info[kw.arg] = _literal(kw.value)
                elif kw.arg == "type":
                    info["type"] = kw.value.id if isinstance(kw.value, ast.Name) else ast.unparse(kw.value)
                elif kw.arg == "dest":
                    info["dest"] = _literal(kw.value)
            for name in names:
                out[name] = info
    return out


def file_flags(path: Path, function: str | None = None) -> dict[str, dict[str, object]]:
    return argparse_flags(path.read_text(encoding="utf-8"), function)
