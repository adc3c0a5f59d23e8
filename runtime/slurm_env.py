"""The one module that reads SLURM_* variables: a frozen snapshot, plus Slurm's hostlist syntax.

Everything else in the runtime gets Slurm facts from `SlurmSnapshot`, never from os.environ.
`read_snapshot` takes any mapping (tests pass dicts recorded on a real cluster).

Slurm 22.05 facts this encodes (measured on the test cluster, scripts/slurm-cluster/):
- Het jobs set SLURM_HET_SIZE and per-component SLURM_*_HET_GROUP_<g> (older alias *_PACK_GROUP_<g>);
  there is NO SLURM_HET_JOB_ID / SLURM_HET_JOB_COMPONENT. A component's SLURM_JOB_ID is leader+g, so
  the job id every process shares is SLURM_JOB_ID_HET_GROUP_0 (the leader's).
- In a step spanning components (`--het-group=0,1`) SLURM_PROCID is global, SLURM_NODEID follows
  component order while SLURM_STEP_NODELIST is sorted by name, and SLURM_JOB_PARTITION may name
  another component's partition: identity therefore comes from the node name looked up in the
  per-component node lists, plus SLURM_LOCALID; partitions from *_HET_GROUP_<g>.
- GPU variables of the batch step leak into other components' steps (CUDA_VISIBLE_DEVICES,
  SLURM_JOB_GPUS): they are recorded as seen; SLURM_JOB_GPUS is never used for decisions.
"""

from __future__ import annotations

import os

from hpcplace.runtime.errors import ShimError
from hpcplace.runtime.frozen import Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any, TypeAlias

MAX_EXPANDED_HOSTS = 1_000_000

# A parsed hostlist item: literal text and bracket ranges alternate, always starting and ending with
# text (possibly ""): ("n", ((1, 3, 3), (7, 7, 1)), "") is `n[001-003,7]`. A range is (lo, hi, width).
# (Type aliases for annotations only: the shim imports no typing.)
if TYPE_CHECKING:
    Ranges: TypeAlias = tuple[tuple[int, int, int], ...]
    HostItem: TypeAlias = tuple[Any, ...]  # str, Ranges, str, ...: no tuple type says "alternating"


# ----------------------------------------------------------------------------------------------
# Hostlists: `a800-[1-2],cpu-1`, `n[001-003,7]`, `r[1-2]n[01-02]`
# ----------------------------------------------------------------------------------------------


def parse_hostlist(expr: str) -> tuple[HostItem, ...]:
    """Parse a Slurm hostlist expression; raises ShimError naming the problem."""
    text = expr.strip()
    if not text:
        raise ShimError("empty node list", hint="Slurm node lists look like `a800-[1-2],cpu-1`")
    items: list[HostItem] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch == "[":
            if depth:
                raise _bad(expr, f"nested '[' at position {i}")
            depth = 1
        elif ch == "]":
            if not depth:
                raise _bad(expr, f"unmatched ']' at position {i}")
            depth = 0
        elif ch == "," and not depth:
            items.append(_parse_item(text[start:i], expr))
            start = i + 1
        elif ch.isspace():
            raise _bad(expr, f"whitespace at position {i}")
    if depth:
        raise _bad(expr, "unclosed '['")
    items.append(_parse_item(text[start:], expr))
    return tuple(items)


def _bad(expr: str, why: str) -> ShimError:
    return ShimError(
        f"invalid Slurm node list {expr!r}: {why}", hint="node lists look like `a800-[1-2],cpu-1` or `n[001-003,7]`"
    )


def _parse_item(item: str, expr: str) -> HostItem:
    if not item:
        raise _bad(expr, "empty host name (two commas in a row, or a leading/trailing comma)")
    parts: list[object] = []
    pos = 0
    while True:
        open_at = item.find("[", pos)
        if open_at < 0:
            parts.append(item[pos:])
            break
        close_at = item.index("]", open_at)
        parts.append(item[pos:open_at])
        parts.append(_parse_ranges(item[open_at + 1 : close_at], expr))
        pos = close_at + 1
    return tuple(parts)


def _parse_ranges(body: str, expr: str) -> Ranges:
    if not body:
        raise _bad(expr, "empty brackets '[]'")
    ranges = []
    for piece in body.split(","):
        lo_text, dash, hi_text = piece.partition("-")
        if not dash:
            hi_text = lo_text
        for number in (lo_text, hi_text):
            if not (number.isascii() and number.isdigit()):
                raise _bad(expr, f"bad range {piece!r} (expected N or N-M with digits)")
        lo, hi = int(lo_text), int(hi_text)
        if lo > hi:
            raise _bad(expr, f"range {piece!r} runs backwards")
        ranges.append((lo, hi, len(lo_text)))
    return tuple(ranges)


def _range_size(ranges: Ranges) -> int:
    return sum(hi - lo + 1 for lo, hi, _ in ranges)


def _item_size(item: HostItem) -> int:
    size = 1
    for part in item[1::2]:
        size *= _range_size(part)
    return size


def _expand_item(item: HostItem) -> list[str]:
    names = [item[0]]
    for k in range(1, len(item), 2):
        numbers = [str(v).zfill(width) for lo, hi, width in item[k] for v in range(lo, hi + 1)]
        suffix = item[k + 1]
        names = [name + number + suffix for name in names for number in numbers]
    return names


def expand_hostlist(expr: str) -> list[str]:
    """All host names, in Slurm's order (first bracket outermost): `r[1-2]n[1-2]` -> r1n1 r1n2 r2n1 r2n2."""
    items = parse_hostlist(expr)
    total = sum(_item_size(item) for item in items)
    if total > MAX_EXPANDED_HOSTS:
        raise _bad(expr, f"expands to {total} names (limit {MAX_EXPANDED_HOSTS})")
    names: list[str] = []
    for item in items:
        names.extend(_expand_item(item))
    return names


def hostlist_size(expr: str) -> int:
    return sum(_item_size(item) for item in parse_hostlist(expr))


def hostlist_position(expr: str, name: str) -> int | None:
    """Index of `name` in the expanded list (first occurrence), without expanding single-bracket items."""
    offset = 0
    for item in parse_hostlist(expr):
        if len(item) == 1:
            if item[0] == name:
                return offset
        elif len(item) == 3:
            found = _position_in_range(item, name)
            if found is not None:
                return offset + found
        else:
            expanded = _expand_item(item)
            if name in expanded:
                return offset + expanded.index(name)
        offset += _item_size(item)
    return None


def _position_in_range(item: HostItem, name: str) -> int | None:
    prefix: str
    ranges: Ranges
    suffix: str
    prefix, ranges, suffix = item
    if len(name) <= len(prefix) + len(suffix) or not name.startswith(prefix) or not name.endswith(suffix):
        return None
    digits = name[len(prefix) : len(name) - len(suffix)]
    if not (digits.isascii() and digits.isdigit()):
        return None
    value = int(digits)
    offset = 0
    for lo, hi, width in ranges:
        if lo <= value <= hi and str(value).zfill(width) == digits:
            return offset + value - lo
        offset += hi - lo + 1
    return None


def hostlist_nth(expr: str, index: int) -> str:
    """The index-th name of the expanded list (IndexError when out of range)."""
    if index < 0:
        raise IndexError(index)
    for item in parse_hostlist(expr):
        size = _item_size(item)
        if index >= size:
            index -= size
            continue
        if len(item) == 3:
            prefix: str = item[0]
            suffix: str = item[2]
            for lo, hi, width in item[1]:
                count = hi - lo + 1
                if index < count:
                    return prefix + str(lo + index).zfill(width) + suffix
                index -= count
        return _expand_item(item)[index]
    raise IndexError(f"node list {expr!r} has no entry {index}")


# ----------------------------------------------------------------------------------------------
# The snapshot
# ----------------------------------------------------------------------------------------------


class HetGroup(Frozen):
    """One het-job component as Slurm describes it (index 0 for a job that is not heterogeneous)."""

    index: int
    job_id: str | None
    nodelist: str  # raw hostlist, Slurm's (sorted) order: group_node_index j = the j-th name
    partition: str | None
    num_tasks: int | None
    tasks_per_node: str | None


class SlurmSnapshot(Frozen):
    """What Slurm told this task, read once. `synthetic` marks the local backend's stand-in."""

    job_id: str  # shared by every component: the het leader's id
    het_size: int  # 1 when the job is not heterogeneous
    groups: tuple[HetGroup, ...]  # one per component
    step_id: str | None
    step_nodelist: str | None  # sorted by name, even across components
    step_num_tasks: int | None
    procid: int  # global across components in a multi-group step
    localid: int  # task index among this step's tasks on this node
    nodeid: int | None  # follows component order in multi-group steps: not a node-list index
    node_name: str
    step_gpus: str | None
    job_gpus: str | None  # recorded only: it leaks from the batch step and is never trusted
    cuda_visible_devices: str | None  # as seen, possibly leaked from the batch step
    gpu_device_ordinal: str | None
    rocr_visible_devices: str | None
    job_partition: str | None  # unreliable in multi-group steps: use groups[g].partition
    synthetic: bool


def _get(env: Mapping[str, str], name: str) -> str | None:
    """A SLURM_* value, accepting the older *_PACK_GROUP_* / SLURM_PACK_* spellings."""
    value = env.get(name)
    if value is None and "HET_" in name:
        value = env.get(name.replace("HET_GROUP", "PACK_GROUP").replace("SLURM_HET_SIZE", "SLURM_PACK_SIZE"))
    return value


def read_snapshot(env: Mapping[str, str], *, hostname: str | None = None) -> SlurmSnapshot:
    """Read the task's Slurm environment. Missing or malformed variables -> one ShimError naming all."""
    missing: list[str] = []
    invalid: list[str] = []

    def integer(name: str, required: bool, *, informational: bool = False) -> int | None:
        value = _get(env, name)
        if value is None or value == "":
            if required:
                missing.append(name)
            return None
        value = value.strip()
        if not (value.isascii() and value.isdigit()):
            if not informational:  # recorded for diagnostics only: never a reason to stop
                invalid.append(f"{name}={value!r} (expected a non-negative integer)")
            return None
        return int(value)

    het_size = integer("SLURM_HET_SIZE", False)
    if het_size is None and not invalid:
        count = 0
        while _get(env, f"SLURM_JOB_NODELIST_HET_GROUP_{count}") is not None:
            count += 1
        het_size = count or None
    groups: list[HetGroup] = []
    if het_size:
        for g in range(het_size):
            nodelist = _get(env, f"SLURM_JOB_NODELIST_HET_GROUP_{g}")
            if not nodelist:
                missing.append(f"SLURM_JOB_NODELIST_HET_GROUP_{g}")
            groups.append(
                HetGroup(
                    index=g,
                    job_id=_get(env, f"SLURM_JOB_ID_HET_GROUP_{g}"),
                    nodelist=nodelist or "",
                    partition=_get(env, f"SLURM_JOB_PARTITION_HET_GROUP_{g}"),
                    num_tasks=integer(f"SLURM_NTASKS_HET_GROUP_{g}", False, informational=True),
                    tasks_per_node=_get(env, f"SLURM_TASKS_PER_NODE_HET_GROUP_{g}"),
                )
            )
        job_id = (groups[0].job_id if groups else None) or env.get("SLURM_JOB_ID")
    else:
        nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        if not nodelist:
            missing.append("SLURM_JOB_NODELIST")
        job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
        groups.append(
            HetGroup(
                index=0,
                job_id=job_id,
                nodelist=nodelist or "",
                partition=env.get("SLURM_JOB_PARTITION"),
                num_tasks=integer("SLURM_NTASKS", False, informational=True),
                tasks_per_node=env.get("SLURM_TASKS_PER_NODE"),
            )
        )
    if not job_id:
        missing.append("SLURM_JOB_ID")
    procid = integer("SLURM_PROCID", True)
    localid = integer("SLURM_LOCALID", True)
    nodeid = integer("SLURM_NODEID", False, informational=True)
    step_num_tasks = integer("SLURM_STEP_NUM_TASKS", False)
    if missing or invalid:
        lines = []
        if missing:
            lines.append("missing Slurm variables: " + ", ".join(missing))
        if invalid:
            lines.append("invalid Slurm variables: " + "; ".join(invalid))
        raise ShimError(
            "; ".join(lines) + " (is this running inside an srun step of an hpcplace job?)",
            hint="start it through the rendered sbatch script (`srun ... hpcplace-run`), or run the "
            "whole plan on this machine with `hpcplace run CONFIG --local`",
        )
    for group in groups:
        parse_hostlist(group.nodelist)  # malformed lists fail here, once, with the list in the message
    groups = [fabric_ordered(env, group) for group in groups]
    node_name = env.get("SLURMD_NODENAME") or hostname or os.uname().nodename
    return SlurmSnapshot(
        job_id=job_id,
        het_size=len(groups),
        groups=tuple(groups),
        step_id=env.get("SLURM_STEP_ID"),
        step_nodelist=env.get("SLURM_STEP_NODELIST"),
        step_num_tasks=step_num_tasks,
        procid=procid,
        localid=localid,
        nodeid=nodeid,
        node_name=node_name,
        step_gpus=env.get("SLURM_STEP_GPUS"),
        job_gpus=env.get("SLURM_JOB_GPUS"),
        cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
        gpu_device_ordinal=env.get("GPU_DEVICE_ORDINAL"),
        rocr_visible_devices=env.get("ROCR_VISIBLE_DEVICES"),
        job_partition=env.get("SLURM_JOB_PARTITION"),
        synthetic=False,
    )


FABRIC_ORDER = "HPCPLACE_NODE_ORDER_{group}"  # the job script's node order of a group (hp_fabric)


def fabric_ordered(env: Mapping[str, str], group: HetGroup) -> HetGroup:
    """The group with its nodes in the order the job numbered them by block or leaf switch (hp_fabric
    exports it; the plan's node j is its j-th host), or as Slurm lists them when the job did not."""
    order = env.get(FABRIC_ORDER.format(group=group.index))
    if not order:
        return group
    if sorted(order.split(",")) != sorted(expand_hostlist(group.nodelist)):
        raise ShimError(
            f"{FABRIC_ORDER.format(group=group.index)}={order!r} is not an order of het group {group.index}'s "
            f"nodes {group.nodelist!r}",
            hint="the job script sets it (hp_fabric) from the job's own nodes: do not set it by hand",
        )
    return group.replace(nodelist=order)


FABRIC_UNITS = "HPCPLACE_NODE_UNITS_{group}"  # each node's block or leaf switch, in that order (hp_fabric)


def fabric_unit(env: Mapping[str, str], group: int, host: str) -> str | None:
    """The block (leaf switch) the job found `host` of het group `group` in; None when it ordered none."""
    hosts = (env.get(FABRIC_ORDER.format(group=group)) or "").split(",")
    units = (env.get(FABRIC_UNITS.format(group=group)) or "").split(",")
    if host not in hosts or len(units) != len(hosts):
        return None
    unit = units[hosts.index(host)]
    return unit if unit and unit != "-" else None


def synthetic_snapshot(
    *,
    job_id: str,
    nodes_per_group: Iterable[int],
    het_group: int,
    group_node_index: int,
    local_id: int,
    procid: int,
    node_name: str = "localhost",
    cuda_visible_devices: str | None = None,
) -> SlurmSnapshot:
    """The local backend's stand-in: every planned node is this host, so node lists repeat its name.

    Identity is given (het_group, group_node_index, local_id), not looked up by name."""
    groups = tuple(
        HetGroup(
            index=g,
            job_id=job_id,
            nodelist=",".join([node_name] * n),
            partition=None,
            num_tasks=None,
            tasks_per_node=None,
        )
        for g, n in enumerate(nodes_per_group)
    )
    return SlurmSnapshot(
        job_id=job_id,
        het_size=len(groups),
        groups=groups,
        step_id=None,
        step_nodelist=node_name,
        step_num_tasks=None,
        procid=procid,
        localid=local_id,
        nodeid=group_node_index,
        node_name=node_name,
        step_gpus=None,
        job_gpus=None,
        cuda_visible_devices=cuda_visible_devices,
        gpu_device_ordinal=None,
        rocr_visible_devices=None,
        job_partition=None,
        synthetic=True,
    )


def locate_node(snapshot: SlurmSnapshot, het_groups: Iterable[int]) -> tuple[int, int]:
    """(het_group, group_node_index) of this task's node among the given components' node lists."""
    candidates = [snapshot.node_name]
    if "." in snapshot.node_name:
        candidates.append(snapshot.node_name.split(".", 1)[0])  # FQDN hostname vs short Slurm names
    found: list[tuple[int, int]] = []
    searched = []
    for g in het_groups:
        if g >= len(snapshot.groups):
            raise ShimError(
                f"the plan uses het group {g} but this job has {len(snapshot.groups)} component(s)",
                hint="the sbatch script must declare one het component per node group (#SBATCH hetjob)",
            )
        nodelist = snapshot.groups[g].nodelist
        searched.append(f"group {g}: {nodelist}")
        for name in candidates:
            position = hostlist_position(nodelist, name)
            if position is not None:
                found.append((g, position))
                break
    if not found:
        raise ShimError(
            f"node {snapshot.node_name!r} is not in the node lists of this component's het groups "
            f"({'; '.join(searched)})",
            hint="the srun step must start this component's tasks only on its planned nodes",
        )
    if len(found) > 1:
        raise ShimError(
            f"node {snapshot.node_name!r} appears in several het groups {[g for g, _ in found]}; "
            "cannot tell which process this task is",
            hint="give each node group its own nodes",
        )
    return found[0]


def node_name_at(snapshot: SlurmSnapshot, het_group: int, group_node_index: int) -> str:
    """The host name of the j-th node of component g (Slurm's sorted order)."""
    try:
        return hostlist_nth(snapshot.groups[het_group].nodelist, group_node_index)
    except IndexError:
        raise ShimError(
            f"het group {het_group} has no node {group_node_index} (node list {snapshot.groups[het_group].nodelist!r})",
            hint="the plan asks for more nodes than Slurm allocated to this component",
        ) from None
