"""A byte-offset index beside plan.json, so the shim reads one process line, never the whole plan.

File `<plan.json>.idx` (all integers little-endian):

    offset 0   8 bytes   magic b"HPIDX\\x001\\n"
    offset 8   u32       H = length of the header JSON
    offset 12  u32       0 (reserved)
    offset 16  H bytes   header JSON (UTF-8), see below
    then       zero padding to a multiple of 8: that position is T, the start of the tables

    header = {"schema": "hpcplace.plan-index/1", "plan_size": bytes of plan.json,
              "plan": plan.json without "components",
              "components": [each component without "processes"],
              "tables": [per component {"ranks": R, "slots": S, "nodes": {"<het_group>": [N, num_nodes]}}]}

    at T+R: world_size records "<QI" (12 bytes): byte offset and length of rank r's JSON object
            (the `{...}` on its line, without indentation or trailing comma)
    at T+N: num_nodes records "<II" (8 bytes) for het group g: (first slot, count) of node j
    at T+S: world_size "<I" ranks ordered by (het_group, group_node_index, local_rank): slot
            first+k of node j holds the rank with local_rank k there

So (component, rank) costs one 12-byte read plus the line; (component, het_group,
group_node_index, local_rank) two more small reads. `write_index` checks that plan.json has the
one-process-per-line layout, that every line is the same record the full parse gives, and that
local ranks are dense per node. Readers check plan.json's size and each line's rank (stale index).

Process lines and the header are parsed with the C scanner of the `json` package (`_json`):
`import json` imports `re`, ~8 ms in a clean interpreter, half the budget of the shim.
"""

from __future__ import annotations

import os
import struct
import sys

from hpcplace.runtime.errors import ShimError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path
    from typing import Any

MAGIC = b"HPIDX\x001\n"
INDEX_SCHEMA = "hpcplace.plan-index/1"
PLAN_SCHEMA = "hpcplace.plan/1"
INDEX_SUFFIX = ".idx"
_PREFIX = struct.Struct("<8sII")
_RANK = struct.Struct("<QI")
_NODE = struct.Struct("<II")
_SLOT = struct.Struct("<I")


def index_path(plan_path: str | os.PathLike[str]) -> str:
    return os.fspath(plan_path) + INDEX_SUFFIX


# ----------------------------------------------------------------------------------------------
# Parsing JSON without importing `json` (and `re`)
# ----------------------------------------------------------------------------------------------


class _ScannerContext:
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    @staticmethod
    def parse_constant(name: str) -> object:
        raise ValueError(f"{name} is not allowed in plan.json")


_scan = None


def loads(text: str, what: str) -> object:
    """json.loads for our own files; `what` names the text in the error."""
    global _scan
    if _scan is None:
        try:
            from _json import make_scanner

            _scan = make_scanner(_ScannerContext)  # type: ignore[arg-type]  # a duck-typed context; typeshed asks for a scanner
        except ImportError:  # an interpreter without the C accelerator: the pure-Python path
            import json

            _scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # set in __init__; typeshed omits it
    try:
        value, end = _scan(text, 0)
    except (StopIteration, ValueError, RecursionError) as exc:
        raise ShimError(
            f"cannot parse {what}: {exc!r}", hint="re-render the plan (`hpcplace plan --json`/`hpcplace submit`)"
        ) from None
    if text[end:].strip():
        raise ShimError(f"cannot parse {what}: extra data at character {end}", hint="re-render the plan")
    return value


# ----------------------------------------------------------------------------------------------
# Writer
# ----------------------------------------------------------------------------------------------


def write_index(plan_json_path: str | os.PathLike[str]) -> Path:
    """Write `<plan.json>.idx` (atomically) and return its path. Raises ShimError on a bad layout."""
    from pathlib import Path

    path = Path(plan_json_path)
    data = path.read_bytes()
    doc, spans = _parse_plan(path, data)
    groups = doc.get("node_groups") or []
    tables_blob = bytearray()
    tables = [
        _component_tables(path, comp, comp_spans, groups, tables_blob)
        for comp, comp_spans in zip(doc["components"], spans, strict=True)
    ]
    return _write(
        path,
        len(data),
        {k: v for k, v in doc.items() if k != "components"},
        [{k: v for k, v in c.items() if k != "processes"} for c in doc["components"]],
        tables,
        tables_blob,
    )


def write_index_from_parts(
    plan_json_path: str | os.PathLike[str],
    *,
    plan_size: int,
    plan: dict[str, Any],
    components: list[dict[str, Any]],
    spans: list[tuple[Sequence[int], Sequence[int]]],
    nodes: list[dict[tuple[int, int], Sequence[int]]],
) -> Path:
    """The same index as `write_index`, from what the writer of plan.json already knows, so a
    million-process plan is never read back and parsed: `plan` and `components` are the header
    parts of plan.json (components without "processes"), `spans` per component the (offsets,
    lengths) of the rank-ordered records, `nodes` per component (het group, group node index) ->
    ranks in local-rank order. The caller vouches for the text; the size is still checked."""
    from pathlib import Path

    path = Path(plan_json_path)
    if os.stat(path).st_size != plan_size:
        raise ShimError(f"{path}: {os.stat(path).st_size} bytes, the writer wrote {plan_size}")
    groups = plan.get("node_groups") or []
    blob = bytearray()
    tables = []
    for comp, (offsets, lengths), by_node in zip(components, spans, nodes, strict=True):
        if not len(offsets) == len(lengths) == comp["world_size"]:
            raise ShimError(
                f"{path}: component {comp['name']!r}: {len(offsets)} records for world size {comp['world_size']}"
            )
        node_slots: dict[int, list[tuple[int, int]]] = {}
        slots: list[Sequence[int]] = []
        first = 0
        for (g, j), ranks in sorted(by_node.items()):
            table = node_slots.get(g)
            if table is None:
                table = node_slots[g] = [(0, 0)] * groups[g]["num_nodes"]
            table[j] = (first, len(ranks))
            slots.append(ranks)
            first += len(ranks)
        tables.append(_pack_tables(offsets, lengths, node_slots, slots, blob))
    return _write(path, plan_size, plan, components, tables, blob)


def _write(
    path: Path,
    plan_size: int,
    plan: dict[str, Any],
    components: list[dict[str, Any]],
    tables: list[dict[str, Any]],
    tables_blob: bytearray,
) -> Path:
    from pathlib import Path

    header = {"schema": INDEX_SCHEMA, "plan_size": plan_size, "plan": plan, "components": components, "tables": tables}
    import json

    head = json.dumps(header, separators=(",", ":")).encode()
    tables_start = _align8(_PREFIX.size + len(head))
    target = Path(index_path(path))
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    with open(tmp, "wb") as out:
        out.write(_PREFIX.pack(MAGIC, len(head), 0))
        out.write(head)
        out.write(b"\0" * (tables_start - _PREFIX.size - len(head)))
        out.write(tables_blob)
    os.replace(tmp, target)
    return target


_CHUNK = 4096
_RANKS_CHUNK = struct.Struct("<" + "QI" * _CHUNK)
_SLOTS_CHUNK = struct.Struct("<" + "I" * _CHUNK)


def _pack_tables(
    offsets: Sequence[int],
    lengths: Sequence[int],
    node_slots: dict[int, list[tuple[int, int]]],
    slots: list[Sequence[int]],
    blob: bytearray,
) -> dict[str, object]:
    """Append one component's rank, node and slot tables to `blob`; their positions, for the header."""
    from array import array  # the writer's side only (render): the shim reads the tables with struct

    if len(offsets) != len(lengths):
        raise ValueError(f"{len(offsets)} offsets, {len(lengths)} lengths")
    # a million processes: the tables laid out by C copies of arrays, not struct.pack of every number
    native = sys.byteorder == "little" and array("I").itemsize == 4  # `<I` is then a C unsigned int
    ranks_at = len(blob)
    if native:  # `<QI` records: three 32-bit words each (offset low, offset high, length)
        records = bytearray(12 * len(offsets))
        words, wide = memoryview(records).cast("I"), memoryview(array("Q", offsets)).cast("B").cast("I")
        words[0::3], words[1::3], words[2::3] = wide[0::2], wide[1::2], memoryview(array("I", lengths))
        blob += records
    else:
        for i in range(0, len(offsets), _CHUNK):
            o, n = offsets[i : i + _CHUNK], lengths[i : i + _CHUNK]
            flat: list[int] = [0] * (2 * len(o))
            flat[0::2], flat[1::2] = o, n
            blob += (_RANKS_CHUNK if len(o) == _CHUNK else struct.Struct("<" + "QI" * len(o))).pack(*flat)
    nodes: dict[str, list[int]] = {}
    for g, table in sorted(node_slots.items()):
        nodes[str(g)] = [len(blob), len(table)]
        pairs = [x for pair in table for x in pair]
        blob += struct.pack(f"<{len(pairs)}I", *pairs)
    slots_at = len(blob)
    if native:
        slot_ranks = array("I")
        for ranks in slots:
            slot_ranks.extend(ranks)
        blob += slot_ranks.tobytes()
    else:
        pending: list[int] = []
        for ranks in slots:
            pending.extend(ranks)
            if len(pending) >= _CHUNK:
                blob += struct.pack(f"<{len(pending)}I", *pending)
                pending = []
        if pending:
            blob += struct.pack(f"<{len(pending)}I", *pending)
    blob += b"\0" * (_align8(len(blob)) - len(blob))
    return {"ranks": ranks_at, "slots": slots_at, "nodes": nodes}


def _align8(n: int) -> int:
    return (n + 7) // 8 * 8


def _parse_plan(path: Path, data: bytes) -> tuple[dict[str, Any], list[list[tuple[int, int]]]]:
    """The parsed plan and the (offset, length) of every process object, per component.

    Checks the one-process-per-line layout: inside each `"processes": [` list, line i must be the
    object of rank i (`{"rank":i,...}`, with at most a trailing comma), as many lines as processes.
    A line holding two objects or an object spanning lines breaks the count or the rank prefix
    (readers also check that a line parses to exactly one object with the right rank)."""
    import json

    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise ShimError(
            f"{path}: not valid JSON: {exc}", hint="write plan.json with hpcplace.plan.plan.plan_to_json"
        ) from None
    if not isinstance(doc, dict) or doc.get("schema") != PLAN_SCHEMA:
        raise ShimError(f"{path}: not an hpcplace plan (schema {PLAN_SCHEMA!r} expected)")
    components = doc.get("components")
    if not isinstance(components, list) or not all(isinstance(c, dict) for c in components):
        raise ShimError(f"{path}: no components list")
    spans: list[list[tuple[int, int]]] = []
    inside = False
    offset = 0
    for lineno, line in enumerate(data.split(b"\n"), 1):
        start = offset
        offset += len(line) + 1
        stripped = line.strip()
        if inside and stripped[:1] == b"{":
            body = stripped[:-1] if stripped[-1:] == b"," else stripped
            rank = len(spans[-1])
            if body[-1:] != b"}" or not body[:32].replace(b" ", b"").startswith(b'{"rank":%d,' % rank):
                raise _layout(path, lineno, f"expected the object of process {rank} alone on this line")
            spans[-1].append((start + line.index(b"{"), len(body)))
            continue
        compact = stripped.replace(b" ", b"")
        if inside:
            if compact not in (b"]", b"],"):
                raise _layout(path, lineno, "expected one process object per line")
            inside = False
        elif compact.startswith(b'"processes":'):
            if compact not in (b'"processes":[', b'"processes":[]', b'"processes":[],'):
                raise _layout(path, lineno, "process list is not one process per line")
            spans.append([])
            inside = compact == b'"processes":['
    if len(spans) != len(components):
        raise ShimError(
            f"{path}: found {len(spans)} process lists for {len(components)} components",
            hint="write plan.json with hpcplace.plan.plan.plan_to_json (one process per line)",
        )
    for comp, comp_spans in zip(components, spans, strict=True):
        processes = comp.get("processes")
        if not isinstance(processes, list) or len(processes) != len(comp_spans):
            raise ShimError(
                f"{path}: component {comp.get('name')!r}: {len(comp_spans)} process lines for "
                f"{len(processes) if isinstance(processes, list) else 0} processes",
                hint="plan.json must keep one process per line; write it with hpcplace.plan.plan.plan_to_json",
            )
        if comp.get("world_size") != len(processes):
            raise ShimError(
                f"{path}: component {comp.get('name')!r} has world_size {comp.get('world_size')} "
                f"but {len(processes)} processes"
            )
    return doc, spans


def _layout(path: Path, lineno: int, why: str) -> ShimError:
    return ShimError(
        f"{path}:{lineno}: {why}",
        hint="plan.json must keep one process per line; write it with hpcplace.plan.plan.plan_to_json",
    )


def _component_tables(
    path: Path, comp: dict[str, Any], spans: list[tuple[int, int]], groups: list[Any], blob: bytearray
) -> dict[str, object]:
    name = comp.get("name")
    processes = comp["processes"]
    by_node: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    for proc in processes:
        key = (proc["het_group"], proc["group_node_index"])
        by_node.setdefault(key, []).append((proc["local_rank"], proc["rank"], proc["local_world_size"]))
    used = 0
    node_slots: dict[int, list[tuple[int, int]]] = {}
    for (g, j), entries in sorted(by_node.items()):
        if not 0 <= g < len(groups):
            raise ShimError(f"{path}: component {name!r} uses het group {g}, but the plan has {len(groups)}")
        num_nodes = groups[g]["num_nodes"]
        if not 0 <= j < num_nodes:
            raise ShimError(f"{path}: component {name!r} uses node {j} of het group {g}, which has {num_nodes}")
        entries.sort()
        if [e[0] for e in entries] != list(range(len(entries))) or any(e[2] != len(entries) for e in entries):
            raise ShimError(
                f"{path}: component {name!r}: local ranks on node {j} of het group {g} are not "
                f"0..{len(entries) - 1} with local_world_size {len(entries)}"
            )
        table = node_slots.setdefault(g, [(0, 0)] * num_nodes)
        table[j] = (used, len(entries))
        used += len(entries)
    return _pack_tables(
        [o for o, _ in spans],
        [n for _, n in spans],
        node_slots,
        [[r for _lr, r, _lws in by_node[(g, j)]] for (g, j) in sorted(by_node)],
        blob,
    )


# ----------------------------------------------------------------------------------------------
# Reader
# ----------------------------------------------------------------------------------------------


class PlanIndex:
    """Open plan.json and its index; O(1) lookups by rank or by (het group, node, local rank)."""

    def __init__(self, plan_path: str | os.PathLike[str]) -> None:
        self.plan_path = os.path.abspath(os.fspath(plan_path))
        idx = index_path(self.plan_path)
        try:
            self._plan_fd = os.open(self.plan_path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise ShimError(
                f"cannot open plan {self.plan_path}: {exc.strerror}",
                hint="pass the plan.json written with the job (--plan)",
            ) from None
        try:
            self._idx_fd = os.open(idx, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            os.close(self._plan_fd)
            raise ShimError(
                f"cannot open the plan index {idx}: {exc.strerror}",
                hint="it is written beside plan.json by the renderer; rebuild it with "
                "`python -c 'from hpcplace.runtime.plan_index import write_index; "
                'write_index("plan.json")\'`',
            ) from None
        prefix = os.pread(self._idx_fd, _PREFIX.size, 0)
        if len(prefix) != _PREFIX.size or prefix[:8] != MAGIC:
            self.close()
            raise ShimError(f"{idx} is not an hpcplace plan index", hint="rebuild it with write_index(plan.json)")
        _, head_len, _ = _PREFIX.unpack(prefix)
        head = os.pread(self._idx_fd, head_len, _PREFIX.size).decode()
        header = loads(head, f"the header of {idx}")
        if not isinstance(header, dict) or header.get("schema") != INDEX_SCHEMA:
            self.close()
            raise ShimError(f"{idx}: unsupported index schema", hint="rebuild it with this hpcplace's write_index")
        if os.fstat(self._plan_fd).st_size != header["plan_size"]:
            self.close()
            raise ShimError(
                f"{self.plan_path} changed after its index was written",
                hint="rebuild the index with write_index(plan.json), or restore the plan",
            )
        self._tables_start = _align8(_PREFIX.size + head_len)
        self.plan: dict[str, Any] = header["plan"]
        self.components: list[dict[str, Any]] = header["components"]
        self._tables: list[dict[str, Any]] = header["tables"]

    def close(self) -> None:
        for fd in (getattr(self, "_plan_fd", -1), getattr(self, "_idx_fd", -1)):
            if fd >= 0:
                os.close(fd)
        self._plan_fd = self._idx_fd = -1

    def __enter__(self) -> PlanIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def component_index(self, name: str) -> int:
        for i, comp in enumerate(self.components):
            if comp["name"] == name:
                return i
        known = ", ".join(c["name"] for c in self.components)
        raise ShimError(f"component {name!r} is not in the plan", hint=f"components: {known}")

    def het_groups(self, component: int) -> list[int]:
        """The het groups (node groups) this component has processes in."""
        return sorted(int(g) for g in self._tables[component]["nodes"])

    def _read(self, fd: int, offset: int, size: int) -> bytes:
        data = os.pread(fd, size, offset)
        if len(data) != size:
            raise ShimError(
                "the plan index points past the end of its file", hint="rebuild the index with write_index(plan.json)"
            )
        return data

    def process(self, component: int, rank: int) -> dict[str, Any]:
        """The process record of `rank` (a dict with plan.json's process fields)."""
        comp = self.components[component]
        if not 0 <= rank < comp["world_size"]:
            raise ShimError(f"component {comp['name']!r} has no rank {rank} (world size {comp['world_size']})")
        at = self._tables_start + self._tables[component]["ranks"] + rank * _RANK.size
        offset, length = _RANK.unpack(self._read(self._idx_fd, at, _RANK.size))
        line = self._read(self._plan_fd, offset, length).decode()
        record = loads(line, f"process {rank} of {comp['name']!r} in {self.plan_path}")
        if not isinstance(record, dict) or record.get("rank") != rank:
            raise ShimError(
                f"{self.plan_path}: the index is stale (rank {rank} of {comp['name']!r} not found at its offset)",
                hint="rebuild the index with write_index(plan.json)",
            )
        return record

    def process_at(
        self, component: int, het_group: int, group_node_index: int, local_rank: int
    ) -> dict[str, Any] | None:
        """The process on node j of het group g with this local rank; None if the plan has none there."""
        node = self._tables[component]["nodes"].get(str(het_group))
        if node is None or not 0 <= group_node_index < node[1] or local_rank < 0:
            return None
        at = self._tables_start + node[0] + group_node_index * _NODE.size
        first, count = _NODE.unpack(self._read(self._idx_fd, at, _NODE.size))
        if local_rank >= count:
            return None
        at = self._tables_start + self._tables[component]["slots"] + (first + local_rank) * _SLOT.size
        (rank,) = _SLOT.unpack(self._read(self._idx_fd, at, _SLOT.size))
        return self.process(component, rank)

    def processes_per_node(self, component: int, het_group: int) -> list[int]:
        """How many processes of the component each node of the het group runs, in one read ([]: none there)."""
        node = self._tables[component]["nodes"].get(str(het_group))
        if node is None or node[1] == 0:
            return []
        data = self._read(self._idx_fd, self._tables_start + node[0], node[1] * _NODE.size)
        return [count for _first, count in _NODE.iter_unpack(data)]

    def processes_on(self, component: int, het_group: int, group_node_index: int) -> int:
        """How many processes of the component the plan puts on that node."""
        node = self._tables[component]["nodes"].get(str(het_group))
        if node is None or not 0 <= group_node_index < node[1]:
            return 0
        at = self._tables_start + node[0] + group_node_index * _NODE.size
        count: int = _NODE.unpack(self._read(self._idx_fd, at, _NODE.size))[1]
        return count
