"""Will the compute nodes see this path? The launcher, the driver's interpreter, the working directory
and the run directory must lie on a filesystem every node mounts; one under /tmp or on a tmpfs of the
login node makes every task fail on the node ("No such file or directory") after the job queued.

`not_shared_reason` is pure (it takes the mount table and the site's `slurm.shared_paths`);
`read_mounts` is the one I/O edge. The answer is a warning, never an error: a site may share /tmp.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

NODE_LOCAL_PREFIXES = ("/tmp", "/var/tmp", "/dev/shm")
MEMORY_FSTYPES = ("tmpfs", "ramfs")
MOUNTS_FILE = "/proc/self/mounts"


@dataclass(frozen=True)
class Mount:
    point: str
    fstype: str


@dataclass(frozen=True)
class CheckedPath:
    """A path the job needs on every node: what it is, where, and how to move it."""

    what: str
    path: str  # as the job names it
    fix: str

    @classmethod
    def of(cls, what: str, path: str, fix: str) -> CheckedPath:
        return cls(what, os.path.abspath(path), fix)


def parse_mounts(text: str) -> tuple[Mount, ...]:
    """/proc/self/mounts text -> mounts in order (the kernel writes a space in a path as \\040)."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1])
            out.append(Mount(point, fields[2]))
    return tuple(out)


def read_mounts(path: str = MOUNTS_FILE) -> tuple[Mount, ...]:
    """This host's mount table; empty when it cannot be read (then only the path rules apply)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return parse_mounts(f.read())
    except OSError:
        return ()


def is_under(path: str, prefix: str) -> bool:
    prefix = prefix.rstrip("/") or "/"
    return prefix == "/" or path == prefix or path.startswith(prefix + "/")


def mount_of(path: str, mounts: Sequence[Mount]) -> Mount | None:
    """The mount holding `path`: the longest mount point above it (the later of two equal ones: it hides
    the earlier)."""
    best: Mount | None = None
    for mount in mounts:
        if is_under(path, mount.point) and (
            best is None or len(mount.point.rstrip("/")) >= len(best.point.rstrip("/"))
        ):
            best = mount
    return best


def not_shared_reason(path: str, mounts: Sequence[Mount], shared_prefixes: Sequence[str] = ()) -> str | None:
    """Why the compute nodes would not see the absolute `path` (None: nothing says they would not).
    With the site's `slurm.shared_paths`, those prefixes are the whole answer; without, /tmp, /var/tmp,
    /dev/shm and any tmpfs are this host's alone."""
    path = os.path.normpath(path)
    if shared_prefixes:
        if any(is_under(path, p) for p in shared_prefixes):
            return None
        return f"outside slurm.shared_paths ({', '.join(shared_prefixes)})"
    for prefix in NODE_LOCAL_PREFIXES:
        if is_under(path, prefix):
            return f"under {prefix}, which each node has for itself"
    mount = mount_of(path, mounts)
    if mount is not None and mount.fstype in MEMORY_FSTYPES:
        return f"on a {mount.fstype} ({mount.point}: this host's memory, not shared with the nodes)"
    return None


def path_warnings(
    paths: Sequence[CheckedPath], mounts: Sequence[Mount], shared_prefixes: Sequence[str] = ()
) -> list[str]:
    """One line per path the nodes would not see, with the fix."""
    out = []
    for item in paths:
        reason = not_shared_reason(item.path, mounts, shared_prefixes)
        if reason is not None:
            out.append(f"{item.what} {item.path} is {reason}: the compute nodes will not find it; {item.fix}")
            continue
        target = os.path.realpath(item.path)  # a link (a venv's python): the nodes need what it points to too
        reason = not_shared_reason(target, mounts, shared_prefixes) if target != item.path else None
        if reason is not None:
            out.append(
                f"{item.what} {item.path} links to {target}, which is {reason}: the compute nodes will not "
                f"find it; {item.fix}"
            )
    return out
