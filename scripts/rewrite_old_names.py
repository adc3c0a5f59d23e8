#!/usr/bin/env python3
"""Rewrite hpcplace's module names from before the stage packages into the new ones, in place.

For code written against the old flat names (a branch that started before the move): `hpcplace.submit` ->
`hpcplace.slurm.submit`, `from hpcplace import submit` -> `from hpcplace.slurm import submit`,
`hpcplace/submit.py` -> `hpcplace/slurm/submit.py`; `hpcplace.plan` / `hpcplace.tune` (the old modules, now
packages) -> `hpcplace.plan.plan` / `hpcplace.tune.tune`. New names are left alone, so running it twice
changes nothing. Meant for code and tests (prose that names the old modules on purpose, such as
hpcplace/_moved.py, would be rewritten too). The map is hpcplace/_moved.py's; tests/test_architecture.py fails
on old names left in the repository's imports.

    python scripts/rewrite_old_names.py FILE...
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hpcplace._moved import MOVED  # noqa: E402

# old short name -> new dotted name under hpcplace; the old modules that became packages hand out their module
OLD = {old.split(".", 1)[1]: new.split(".", 1)[1] for old, new in MOVED.items()} | {"plan": "plan.plan",
                                                                                    "tune": "tune.tune"}
PACKAGES = {name: {p.stem for p in (REPO / "hpcplace" / name).glob("*.py")} for name in ("plan", "tune")}
NAMES = "|".join(sorted(OLD, key=len, reverse=True))
DOTTED = re.compile(rf"(?<![\w.])hpcplace\.({NAMES})(?![\w/-])")
PATH = re.compile(rf"(?<![\w./])hpcplace/({NAMES})(?=\.py\b)")
FROM_PACKAGE = re.compile(r"^(\s*)from hpcplace import ([^()#\n]+?)(\s*#.*)?$", re.M)


def _dotted(match: re.Match[str]) -> str:
    old, rest = match.group(1), match.string[match.end():]
    inside = re.match(r"\.(\w+)", rest)
    if old in PACKAGES and inside and inside.group(1) in PACKAGES[old]:
        return match.group(0)  # already a new name: hpcplace.plan.planner
    return f"hpcplace.{OLD[old]}"


def _from_package(match: re.Match[str]) -> str:
    indent, names, comment = match.group(1), match.group(2), match.group(3) or ""
    groups: dict[str, list[str]] = {}
    for item in (n.strip() for n in names.split(",")):
        base = item.split(" as ")[0].strip()
        package = "hpcplace." + OLD[base].rsplit(".", 1)[0] if base in OLD and base not in PACKAGES else "hpcplace"
        groups.setdefault(package, []).append(item)
    lines = [f"{indent}from {package} import {', '.join(items)}" for package, items in groups.items()]
    return "\n".join(lines) + comment


def rewrite(text: str, python: bool) -> str:
    if python:
        text = FROM_PACKAGE.sub(_from_package, text)
    text = DOTTED.sub(_dotted, text)
    return PATH.sub(lambda m: "hpcplace/" + OLD[m.group(1)].replace(".", "/"), text)


def main(argv: list[str]) -> int:
    for name in argv:
        path = Path(name)
        text = path.read_text(encoding="utf-8")
        new = rewrite(text, path.suffix == ".py")
        if new != text:
            path.write_text(new, encoding="utf-8")
            print(f"rewrote {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
