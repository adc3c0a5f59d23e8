"""Golden-file comparison shared by the plan and sbatch golden tests.

Regenerate with `HPCPLACE_REGEN_GOLDEN=1 python -m pytest ...`; a mismatch names the changed lines."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

REGEN = os.environ.get("HPCPLACE_REGEN_GOLDEN") == "1"


def check_golden(path: Path, actual: str) -> None:
    """Compare `actual` with the golden file at `path` (or rewrite it when regenerating)."""
    if REGEN or not path.exists():
        if not REGEN:
            pytest.fail(f"golden file {path} is missing; create it with HPCPLACE_REGEN_GOLDEN=1")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual, encoding="utf-8")
        return
    expected = path.read_text(encoding="utf-8")
    if expected == actual:
        return
    changed = [n + 1 for n, (a, b) in enumerate(zip(expected.splitlines(), actual.splitlines())) if a != b]
    if len(expected.splitlines()) != len(actual.splitlines()):
        changed.append(min(len(expected.splitlines()), len(actual.splitlines())) + 1)
    diff = "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True), str(path), "actual", n=1))
    lines = ", ".join(str(n) for n in changed[:20]) + (" ..." if len(changed) > 20 else "")
    pytest.fail(
        f"{path} differs from the output at lines {lines} "
        f"(regenerate with HPCPLACE_REGEN_GOLDEN=1 if the change is intended):\n{diff[:4000]}"
    )
