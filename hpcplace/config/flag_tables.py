"""What the flag-table generators share (scripts/gen_openrlhf_flags.py, scripts/gen_slime_flags.py): a parser's
flags as rows, tables stored once, and the compact JSON they write. Generation time only; nothing here runs when
hpcplace plans."""

from __future__ import annotations

import json

from hpcplace.config.argparse_ast import argparse_flags

# a word of the table: [kind, nargs, choices] (hpcplace.config.formats.argv.Flag)
Row = list[object]


def table(source: str) -> dict[str, Row]:
    """Every flag of the parser: [kind, nargs, choices], as hpcplace.config.formats.argv.Flag holds them."""
    rows: dict[str, Row] = {}
    for name, info in argparse_flags(source).items():
        action = info.get("action")
        kind = action if action in ("store_true", "store_false") else info.get("type", "str")
        choices = info.get("choices")
        rows[name] = [kind, info.get("nargs"), list(choices) if isinstance(choices, (list, tuple)) else None]
    return dict(sorted(rows.items()))


def literal_default(name: str, info: dict[str, object]) -> object:
    """The flag's default as argparse gives it; one that is not a literal stops the script (hpcplace would have
    to run code to know it)."""
    implicit = {"store_true": False, "store_false": True}.get(str(info.get("action")))  # argparse's own
    value = info.get("default", implicit)
    if isinstance(value, str) and value.startswith("<"):
        raise SystemExit(f"{name}'s default is not a literal ({value}): placement cannot read it as data")
    return value


def share(store: dict[str, dict[str, object]], name: str, version: str, value: dict[str, object]) -> str:
    """The id of `value` in `store`: an identical one already stored, else `name@version` (its first release)."""
    for key, stored in store.items():
        if key.startswith(f"{name}@") and stored == value:
            return key
    key = f"{name}@{version}"
    store[key] = value
    return key


def render(data: dict[str, dict[str, dict[str, object]]], about: str) -> str:
    """Compact JSON with one flag (or release) per line, so a regeneration's diff shows what changed."""
    lines = ["{", f'"about": {json.dumps(about)},']
    sections = list(data.items())
    for s, (section, entries) in enumerate(sections):
        lines.append(f'"{section}": {{')
        items = list(entries.items())
        for e, (key, value) in enumerate(items):
            inner = [f"  {json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}" for k, v in value.items()]
            comma = "," if e < len(items) - 1 else ""
            lines.append(f" {json.dumps(key)}: {{\n" + ",\n".join(inner) + f"\n }}{comma}")
        lines.append("}" + ("," if s < len(sections) - 1 else ""))
    lines.append("}")
    return "\n".join(lines) + "\n"
