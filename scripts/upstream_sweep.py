#!/usr/bin/env python3
"""Plan every YAML of framework checkouts (RLinf, ROLL, AReaL) with the `hpcplace` CLI, as a user would:
from the file's folder, with nothing exported. Prints how many planned, how many were refused and why
(the error's first line, paths and numbers folded), and any traceback (there must be none). The frameworks whose
placement is in their command (verl, NeMo-RL, OpenRLHF, slime) are swept by scripts/command_sweep.py.

    python scripts/upstream_sweep.py [--installed] CHECKOUT... [-- PLAN_ARGS...]

e.g. `git -C "$mirror" archive HEAD | tar -x -C /tmp/RLinf`, then
`python scripts/upstream_sweep.py /tmp/RLinf -- slurm.partition=a800` with SLURM_CONF naming the test
cluster (GPUs per node are then read from it). Exit status 1 when any file produced a traceback.

Each checkout is planned as its own framework version: the version its pyproject.toml or setup.py
declares is given as `hpcplace.framework_version=V` (docs/formats/versions.md), so an older checkout is
planned by that release's rules. `--installed` leaves it out: the version installed where hpcplace
runs decides (or today's rules when none is).
"""

from __future__ import annotations

import collections
import re
import shutil
import subprocess
import sys
from pathlib import Path

VERSION_LINE = re.compile(r"""^\s*version\s*=\s*["']([^"']+)["']""", re.M)


def checkout_version(checkout: Path) -> str | None:
    """The version a checkout declares (`version = "1.0.2"` in pyproject.toml, `version="0.3.0"` in
    setup.py) in its folder or the nearest one above that has either file (a checkout's `examples/`
    may be given), or None."""
    for folder in (checkout.resolve(), *checkout.resolve().parents):
        files = [folder / name for name in ("pyproject.toml", "setup.py") if (folder / name).is_file()]
        for path in files:
            found = VERSION_LINE.search(path.read_text(encoding="utf-8"))
            if found:
                return found.group(1)
        if files:
            return None
    return None


def main(argv: list[str]) -> int:
    installed = argv[:1] == ["--installed"]
    argv = argv[1:] if installed else argv
    checkouts, plan_args = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    hpcplace = shutil.which("hpcplace") or str(Path(sys.executable).with_name("hpcplace"))
    outcomes: collections.Counter[tuple[str, str]] = collections.Counter()
    tracebacks = []
    for checkout in map(Path, checkouts):
        version = None if installed else checkout_version(checkout)
        stated = [f"hpcplace.framework_version={version}"] if version else []
        print(f"{checkout}: planned as version {version or '(installed, or today)'}", file=sys.stderr)
        for path in sorted(p for p in checkout.rglob("*.y*ml") if ".github" not in p.parts):
            done = subprocess.run(
                [hpcplace, "plan", str(path.resolve()), *stated, *plan_args],
                cwd=path.parent,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            if "Traceback" in done.stderr:
                tracebacks.append(path)
            why = (
                "planned"
                if done.returncode == 0
                else next(
                    (line for line in done.stderr.splitlines() if line.startswith("hpcplace: error")), "no error line"
                )
            )
            why = re.sub(r"\S*/\S+|\d+", "#", why.split(": ", 3)[-1])[:110]
            outcomes[(checkout.name, why)] += 1
    for (checkout, why), count in sorted(outcomes.items(), key=lambda item: (item[0][0], -item[1])):
        print(f"{count:5d}  {checkout}  {why}")
    for path in tracebacks:
        print(f"TRACEBACK: {path}")
    return 1 if tracebacks else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
