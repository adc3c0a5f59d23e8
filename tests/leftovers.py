"""What a test run left on the machine: files in /dev/shm and /tmp (this host's and the test cluster's
nodes'), in the user's ~/.ray (Ray 2.60's local ray.init() writes ~/.ray/auth_token, after which every
`ray start --head` of the user asks for it), processes it started, Slurm jobs still queued. tests/conftest.py takes a snapshot at the start of
the session and fails the session naming whatever is new at its end: a test must clean up after itself, and
a job or a local run that leaves node-local state behind is a bug in hpcplace.

Processes are recognised by a marker in their environment (SESSION_VARIABLE, set at the start and inherited
by everything the tests start, Slurm jobs included, unless a test hands a process an environment of its own).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

SESSION_VARIABLE = "HPCPLACE_TEST_SESSION"
# The test cluster's own daemons (tests/slurm/conftest.py boots it; scripts/test-all.sh takes it down after
# the run) and each node's slurmd-keeper: they carry the marker and are meant to outlive the session.
CLUSTER_DAEMONS = frozenset(
    {"slurmctld", "slurmd", "slurmd-keeper", "slurmdbd", "slurmstepd", "mariadbd", "mysqld", "munged"}
)


@dataclass(frozen=True)
class Snapshot:
    """What was there when the session started."""

    shm: frozenset[str]
    tmp: frozenset[str]
    ray_home: frozenset[str] = frozenset()  # ~/.ray


def entries(folder: Path) -> frozenset[str]:
    try:
        return frozenset(os.listdir(folder))
    except OSError:
        return frozenset()


def take(root: Path = Path("/"), ray_home: Path | None = None) -> Snapshot:
    ray = ray_home if ray_home is not None else Path.home() / ".ray"
    return Snapshot(entries(root / "dev" / "shm"), entries(root / "tmp"), entries(ray))


def new_files(
    before: Snapshot, ignored: Iterable[str] = (), root: Path = Path("/"), ray_home: Path | None = None
) -> list[str]:
    """Entries of /dev/shm, /tmp and ~/.ray that were not there at the start (`ignored`: names in /tmp the test
    harness itself keeps, such as the test cluster's state directory)."""
    ray = ray_home if ray_home is not None else Path.home() / ".ray"
    now = take(root, ray)
    skip = set(ignored)
    shm = [f"{root / 'dev/shm' / name}" for name in sorted(now.shm - before.shm)]
    tmp = [f"{root / 'tmp' / name}" for name in sorted(now.tmp - before.tmp - skip)]
    return shm + tmp + [f"{ray / name}" for name in sorted(now.ray_home - before.ray_home)]


def marked_processes(token: str) -> list[str]:
    """Live processes (not this one, not the test cluster's daemons) whose environment has the session's marker:
    'pid command line' each."""
    wanted = f"{SESSION_VARIABLE}={token}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = Path(entry.path, "environ").read_bytes()
            if wanted not in environ.split(b"\0"):
                continue
            comm = Path(entry.path, "comm").read_text().strip()
            cmdline = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone meanwhile, or a kernel thread
            continue
        if comm in CLUSTER_DAEMONS:
            continue
        found.append(f"{entry.name} {cmdline[:200]}")
    return found


def settled(check: Callable[[], list[str]], within: float) -> list[str]:
    """`check()` once it is empty, or what it still says after `within` seconds (what a test just stopped may
    take a moment to go)."""
    deadline = time.monotonic() + within
    while True:
        left = check()
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.5)


def host_leftovers(before: Snapshot, token: str, ignored: Iterable[str] = ()) -> list[str]:
    """New files in this host's /dev/shm and /tmp, and live processes with the session's marker."""
    return new_files(before, ignored) + [f"process {p}" for p in marked_processes(token)]


def main(argv: list[str]) -> int:
    """`python -m tests.leftovers snapshot FILE` before a run of several test sessions at once (scripts/test-all.sh),
    `python -m tests.leftovers check FILE [SECONDS]` after them: what they left on this host, over all of them, once
    SECONDS (default 30) have passed without it going."""
    import json
    import sys

    if len(argv) not in (2, 3) or argv[0] not in ("snapshot", "check"):
        print("usage: python -m tests.leftovers snapshot FILE | check FILE [SECONDS]", file=sys.stderr)
        return 2
    what, path = argv[0], Path(argv[1])
    if what == "snapshot":
        now = take()
        saved = {"shm": sorted(now.shm), "tmp": sorted(now.tmp), "ray_home": sorted(now.ray_home)}
        path.write_text(json.dumps(saved), encoding="utf-8")
        return 0
    saved = json.loads(path.read_text(encoding="utf-8"))
    before = Snapshot(frozenset(saved["shm"]), frozenset(saved["tmp"]), frozenset(saved["ray_home"]))
    from tests.slurm.conftest import harness_tmp_names

    within = float(argv[2]) if len(argv) == 3 else 30.0
    left = settled(lambda: host_leftovers(before, os.environ[SESSION_VARIABLE], harness_tmp_names()), within)
    for line in left:
        print(f"left on this machine: {line}", file=sys.stderr)
    return 1 if left else 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
