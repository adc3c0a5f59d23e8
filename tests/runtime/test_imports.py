"""The shim's hot path imports the standard library only, and never the login-node side."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.runtime.conftest import LAB_CONFIG, base_env, step_envs, write_plan

PROBE = """
import sys
before = set(sys.modules)
from hpcplace.runtime.shim import Options, resolve
after_import = set(sys.modules)
resolve(Options(plan=sys.argv[1], component="actor", command=("true",), chdir=None, print_env=False, verify=True,
                verbose=False), dict(__import__("os").environ))
after_resolve = set(sys.modules)
print(repr({"import": sorted(after_import - before), "resolve": sorted(after_resolve - after_import)}))
"""

ALLOWED = {"struct", "_struct", "__future__", "hpcplace", "_json", "pynvml"}
FORBIDDEN = {
    "json",
    "re",
    "dataclasses",
    "typing",
    "argparse",
    "pathlib",
    "yaml",
    "jinja2",
    "torch",
    "inspect",
    "hpcplace.plan.plan",
    "hpcplace.errors",
    "hpcplace.cli",
}


def test_shim_imports_stdlib_only(tmp_path: Path) -> None:
    plan = write_plan(tmp_path, LAB_CONFIG)
    env = {**base_env(), **step_envs("0")[0]}
    done = subprocess.run([sys.executable, "-c", PROBE, str(plan)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    new = ast.literal_eval(done.stdout)
    modules = set(new["import"]) | set(new["resolve"])
    ours = {m for m in modules if m.startswith("hpcplace.")}
    assert all(m == "hpcplace.runtime" or m.startswith("hpcplace.runtime.") for m in ours), ours
    assert not modules & FORBIDDEN, modules & FORBIDDEN
    assert modules - ours <= ALLOWED, modules - ours - ALLOWED
