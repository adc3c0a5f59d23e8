"""ROLL configs: per-worker `device_mapping` (parsed by a small strict grammar, never evaluated),
`num_gpus_per_worker`, CPU-only `world_size`, top-level `num_gpus_per_node`.

Unlike ROLL, conflicting values (a world_size that disagrees with the mapping, a vLLM tp*pp that
disagrees with num_gpus_per_worker) are errors, not silent overwrites."""

from __future__ import annotations

import re

from hpcplace import limits
from hpcplace.cluster import NodeGroup
from hpcplace.formats.common import hpcplace_block, slurm_facts, slurm_job_options
from hpcplace.spec import ExperimentSpec, PlacementEntry, build_cluster, check_name
from hpcplace.yaml_source import View, YamlDocument

MAX_GPUS = 1 << 20
_TOKEN = re.compile(r"\s*(list|range|\d+|[()\[\],+])")
_WORKER_KEYS = ("device_mapping", "world_size", "num_gpus_per_worker")


class _Grammar:
    """expr := term ('+' term)* ; term := 'list(range(' a [',' b [',' step]] '))' | 'range(...)' | '[' ints ']'"""

    def __init__(self, text: str, view: View) -> None:
        self.text, self.view, self.pos = text, view, 0
        self.tokens: list[tuple[str, int]] = []
        while self.pos < len(text):
            if text[self.pos:].strip() == "":
                break
            m = _TOKEN.match(text, self.pos)
            if not m:
                start = len(text) - len(text[self.pos:].lstrip())
                raise view.error(f"device_mapping: unexpected text {text[start:][:20]!r}", offset=start, hint=_HINT)
            self.tokens.append((m.group(1), m.start(1)))
            self.pos = m.end()
        self.i = 0

    def fail(self, message: str) -> Exception:
        offset = self.tokens[self.i][1] if self.i < len(self.tokens) else len(self.text)
        return self.view.error(f"device_mapping: {message}", offset=offset, hint=_HINT)

    def take(self, expected: str | None = None) -> str:
        if self.i >= len(self.tokens):
            raise self.fail(f"expected {expected or 'more'} at the end")
        tok = self.tokens[self.i][0]
        if expected is not None and tok != expected and not (expected == "int" and tok.isdigit()):
            raise self.fail(f"expected {expected!r}, found {tok!r}")
        self.i += 1
        return tok

    def peek(self) -> str | None:
        return self.tokens[self.i][0] if self.i < len(self.tokens) else None

    def parse(self) -> list[int]:
        out = self.term()
        while self.peek() == "+":
            self.take("+")
            out += self.term()
        if self.peek() is not None:
            raise self.fail(f"unexpected {self.peek()!r}")
        return out

    def term(self) -> list[int]:
        tok = self.peek()
        if tok == "list":
            self.take("list")
            self.take("(")
            out = self.range_call()
            self.take(")")
            return out
        if tok == "range":
            return self.range_call()
        if tok == "[":
            self.take("[")
            out = []
            while self.peek() != "]":
                out.append(self.device_id())
                if self.peek() == ",":
                    self.take(",")
                elif self.peek() != "]":
                    raise self.fail("expected ',' or ']'")
            self.take("]")
            return out
        raise self.fail("expected list(range(a, b)), range(a, b) or [a, b, ...]")

    def device_id(self) -> int:
        tok = self.take("int")
        if len(tok) > 9 or int(tok) > limits.MAX_DEVICE_ID:
            self.i -= 1
            raise self.fail(f"{tok} is larger than the largest supported GPU id {limits.MAX_DEVICE_ID}")
        return int(tok)

    def range_call(self) -> list[int]:
        self.take("range")
        self.take("(")
        args = [self.device_id()]
        while self.peek() == ",":
            self.take(",")
            args.append(self.device_id())
        self.take(")")
        if len(args) > 3 or (len(args) == 3 and args[2] == 0):
            raise self.fail("range takes 1 to 3 arguments and a non-zero step")
        if len(range(*args)) > MAX_GPUS:
            raise self.fail(f"range of {len(range(*args))} GPUs; at most {MAX_GPUS} are supported")
        return list(range(*args))


_HINT = "write list(range(0,16)), range(0,8), [0,1,2,3], or a sum of those with +"


def parse_device_mapping(view: View) -> list[int]:
    if isinstance(view.value, list):
        ids = [limits.device_id(item.int(minimum=0), item.location(), "GPU id") for item in view.elements()]
    elif isinstance(view.value, str):
        ids = _Grammar(view.value, view).parse()
    else:
        raise view.error(f"device_mapping must be a list or a string, got {view.value!r}", hint=_HINT)
    if not ids:
        raise view.error("device_mapping is empty")
    seen: set[int] = set()
    for g in ids:
        if g in seen:
            raise view.error(f"device_mapping lists GPU {g} twice")
        seen.add(g)
    return ids


def _workers(root: View) -> list[tuple[str, View]]:
    out: list[tuple[str, View]] = []
    for key, child in root.items():
        if key in ("slurm", "hpcplace", "format") or not isinstance(child.value, dict):
            continue
        if any(k in child.value for k in _WORKER_KEYS):
            out.append((str(key), child))
            continue
        for inner_key, inner in child.items():
            if isinstance(inner.value, dict) and any(k in inner.value for k in _WORKER_KEYS):
                out.append((str(inner_key), inner))
    return out


def parse_roll(doc: YamlDocument) -> ExperimentSpec:
    root = doc.root()
    gpn_view = root.require("num_gpus_per_node", "GPUs per node of the GPU partition")
    gpn = limits.gpus_per_node(gpn_view.int(minimum=1), gpn_view.location(), "num_gpus_per_node")
    slurm_view = root.get("slurm")
    facts = slurm_facts(slurm_view)
    if facts.gpus_per_node is not None and facts.gpus_per_node != gpn:
        raise slurm_view.require("gpus_per_node").error(  # type: ignore[union-attr]
            f"slurm.gpus_per_node {facts.gpus_per_node} conflicts with num_gpus_per_node {gpn}")
    gpu_workers: list[tuple[str, View, list[list[int]]]] = []
    cpu_workers: list[tuple[str, View, int]] = []
    names: set[str] = set()
    for name, wv in _workers(root):
        check_name(wv, name, "worker name")
        if name in names:
            raise wv.error(f"two workers are named {name!r}")
        names.add(name)
        dm = wv.get("device_mapping")
        g_view = wv.get("num_gpus_per_worker")
        ws_view = wv.get("world_size")
        if dm is None or dm.value is None:
            if ws_view is None:
                raise wv.error(f"worker {name!r} has neither device_mapping nor world_size")
            if g_view is not None and g_view.value not in (0, None):
                raise g_view.error(f"CPU-only worker {name!r} (no device_mapping) cannot ask for GPUs",
                                   hint="set num_gpus_per_worker: 0 or give a device_mapping")
            cpu_workers.append((name, wv, limits.processes(ws_view.int(minimum=1), ws_view.location(), "world_size")))
            continue
        ids = parse_device_mapping(dm)
        per = g_view.int(minimum=1) if g_view is not None else None
        tp_pp = _vllm_gpus(wv)
        if per is not None and tp_pp is not None and per != tp_pp:
            raise g_view.error(f"num_gpus_per_worker {per} conflicts with tensor_parallel_size*pipeline_parallel_size "  # type: ignore[union-attr]
                               f"= {tp_pp} of the vLLM strategy", hint="give matching values, or omit one")
        per = per or tp_pp or 1
        if len(ids) % per:
            raise dm.error(f"{len(ids)} GPUs are not divisible by num_gpus_per_worker {per}")
        world = len(ids) // per
        if ws_view is not None and ws_view.int(minimum=1) != world:
            raise ws_view.error(f"world_size {ws_view.value} conflicts with len(device_mapping) // "
                                f"num_gpus_per_worker = {len(ids)} // {per} = {world}",
                                hint="omit world_size for GPU workers; ROLL computes it")
        gpu_workers.append((name, dm, [ids[i * per:(i + 1) * per] for i in range(world)]))
    if not gpu_workers and not cpu_workers:
        raise root.error("no ROLL workers found (mappings with device_mapping or world_size)")
    total = max((max(g for lst in lists for g in lst) for _, _, lists in gpu_workers), default=-1) + 1
    num_nodes = max(1, -(-total // gpn))
    if facts.partition is None:
        raise root.error("the Slurm partition is unknown", hint="add `slurm: {partition: NAME}`")
    groups = [NodeGroup(label="gpu", partition=facts.partition, num_nodes=num_nodes, gpus_per_node=(gpn,) * num_nodes,
                        gpu_type=facts.gpu_type, cpus_per_node=facts.cpus_per_node,
                        mem_per_node_mb=facts.mem_per_node_mb, constraint=facts.constraint, account=facts.account,
                        qos=facts.qos, location=gpn_view.location())]
    cpu_partition = slurm_view.get("cpu_partition") if slurm_view is not None else None
    cpu_nodes = 0
    if cpu_workers and cpu_partition is not None:
        cpu_nodes_view = slurm_view.get("cpu_nodes")  # type: ignore[union-attr]
        cpu_nodes = limits.nodes(cpu_nodes_view.int(minimum=1), cpu_nodes_view.location(),
                                 "cpu_nodes") if cpu_nodes_view is not None else 1
        groups.append(NodeGroup(label="cpu", partition=cpu_partition.str(), num_nodes=cpu_nodes,
                                gpus_per_node=(0,) * cpu_nodes, location=cpu_partition.location()))
    cluster = build_cluster(tuple(groups), root)
    entries = [PlacementEntry((name, ), ("gpu",), None, tuple(tuple(x) for x in lists), dm.location())
               for name, dm, lists in gpu_workers]
    for name, wv, world in cpu_workers:
        if cpu_nodes:
            spread = world % cpu_nodes == 0
            text = f"0-{cpu_nodes - 1}:0-{world - 1}" if spread else f"0:0-{world - 1}"
            entries.append(PlacementEntry((name,), ("cpu",), text, None, wv.location()))
        else:
            entries.append(PlacementEntry((name,), ("node",), f"0:0-{world - 1}", None, wv.location()))
    placed = {n for e in entries for n in e.components}
    name, components = hpcplace_block(root, placed, doc.path)
    return ExperimentSpec(name, cluster, tuple(entries), components, doc.path, "roll", slurm_job_options(slurm_view))


def _vllm_gpus(worker: View) -> int | None:
    args = worker.get("strategy_args")
    if args is None or not isinstance(args.value, dict):
        return None
    strategy = args.get("strategy_name")
    config = args.get("strategy_config")
    if strategy is None or str(strategy.value).lower() != "vllm" or config is None:
        return None
    tp = config.get("tensor_parallel_size")
    pp = config.get("pipeline_parallel_size")
    return (tp.int(minimum=1) if tp else 1) * (pp.int(minimum=1) if pp else 1)
