#!/usr/bin/env bash
# Lint, format and type checks (pyproject.toml configures all three); exits non-zero on any finding.
#   ruff check            the lint rules, over every Python file of the repository
#   ruff format --check   the formatting, without rewriting anything (`ruff format` rewrites)
#   mypy --strict         hpcplace/ and runtime/ (as hpcplace.runtime), through scripts/typecheck.py
# Uses the venv's tools (HPCPLACE_VENV, default .venv; the `test` extra installs them).
set -uo pipefail
cd "$(dirname "$0")/.."
venv="${HPCPLACE_VENV:-.venv}"
status=0
echo "+ ruff check ."
"$venv/bin/ruff" check . || status=1
echo "+ ruff format --check ."
"$venv/bin/ruff" format --check . || status=1
echo "+ python scripts/typecheck.py"
"$venv/bin/python" scripts/typecheck.py || status=1
exit "$status"
