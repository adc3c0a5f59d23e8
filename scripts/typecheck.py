#!/usr/bin/env python3
"""mypy over hpcplace as it is installed: `runtime/` is checked as `hpcplace.runtime`, `templates/` as
`hpcplace.templates` (pyproject.toml's [tool.setuptools.package-dir]).

mypy names a file's module by the directories it sits in, so `mypy runtime` would check `runtime.shim`, a module
nothing imports, and could not resolve `hpcplace.runtime.shim` at all (the editable install maps it with an
import hook, which mypy does not run). This script hands mypy every file under its installed module name; the
options are pyproject.toml's [tool.mypy] (strict). Arguments after the script's name go to mypy as they are.

    python scripts/typecheck.py [MYPY-OPTION...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from mypy import util
from mypy.fscache import FileSystemCache
from mypy.main import process_options, run_build
from mypy.modulefinder import BuildSource

try:
    import tomllib
except ImportError:  # Python 3.10: mypy itself depends on tomli there
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]


def package_roots() -> dict[Path, str]:
    """Each directory that holds a package's top, and the package's name: hpcplace/ and the package-dir ones."""
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    roots = {REPO / package.replace(".", "/"): package for package in setuptools["packages"] if "." not in package}
    roots.update({REPO / path: package for package, path in setuptools.get("package-dir", {}).items()})
    return roots


def module_name(path: Path, roots: dict[Path, str]) -> str:
    path = path.resolve()
    for root, package in sorted(roots.items(), key=lambda item: len(item[0].parts), reverse=True):
        if path.is_relative_to(root):
            parts = path.relative_to(root).with_suffix("").parts
            return ".".join((package, *(parts[:-1] if parts[-1] == "__init__" else parts)))
    raise SystemExit(f"typecheck: {path} is in no package of pyproject.toml")


def main(argv: list[str]) -> int:
    t0 = time.time()
    roots = package_roots()
    files = sorted(str(path.relative_to(REPO)) for root in roots for path in root.rglob("*.py"))
    fscache = FileSystemCache()
    stdout, stderr = sys.stdout, sys.stderr
    sources, options = process_options([*argv, *files], stdout=stdout, stderr=stderr, fscache=fscache)
    sources = [
        BuildSource(s.path, module_name(Path(s.path), roots) if s.path else s.module, s.text, str(REPO))
        for s in sources
    ]
    _, messages, blockers = run_build(sources, options, fscache, t0, stdout, stderr)
    formatter = util.FancyFormatter(stdout, stderr, options.hide_error_codes)
    n_errors, n_notes, n_files = util.count_stats(messages)
    if n_errors:
        print(formatter.format_error(n_errors, n_files, len(sources), blockers=blockers))
    else:
        print(formatter.format_success(len(sources), False))
    return 2 if blockers else 1 if messages and n_notes < len(messages) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
