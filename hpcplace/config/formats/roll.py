"""ROLL configs: per-worker `device_mapping` (parsed by a small strict grammar, never evaluated),
`num_gpus_per_worker`, CPU-only `world_size`, top-level `num_gpus_per_node`.

Unlike ROLL, conflicting values (a world_size that disagrees with the mapping, a vLLM tp*pp that
disagrees with num_gpus_per_worker) are errors, not silent overwrites."""

from __future__ import annotations

import re
from dataclasses import replace

from hpcplace.config import limits
from hpcplace.config.cluster import NodeGroup
from hpcplace.config.formats.common import (
    SiteGpuCount,
    SiteGpus,
    facts_node_group,
    hpcplace_block,
    slurm_facts,
    slurm_job_options,
)
from hpcplace.config.framework_version import PlannedVersion, resolve_version
from hpcplace.config.spec import (
    ComponentSpec,
    ExperimentSpec,
    PlacementEntry,
    SpanningWorkers,
    build_cluster,
    check_name,
)
from hpcplace.config.yaml_source import View, YamlDocument, did_you_mean

MAX_GPUS = 1 << 20
_TOKEN = re.compile(r"\s*(list|range|\d+|[()\[\],+])")
_WORKER_KEYS = ("device_mapping", "world_size", "num_gpus_per_worker")
# Agentic env managers (ROLL's EnvManagerConfig): CPU workers whose world_size ROLL computes.
_ENV_MANAGER_KEYS = ("max_env_num_per_worker", "num_env_groups")


class _Grammar:
    """expr := term ('+' term)* ; term := 'list(range(' a [',' b [',' step]] '))' | 'range(...)' | '[' ints ']'"""

    def __init__(self, text: str, view: View) -> None:
        self.text, self.view, self.pos = text, view, 0
        self.tokens: list[tuple[str, int]] = []
        while self.pos < len(text):
            if text[self.pos :].strip() == "":
                break
            m = _TOKEN.match(text, self.pos)
            if not m:
                start = len(text) - len(text[self.pos :].lstrip())
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
            out = self.term() if self.peek() == "[" else self.range_call()
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
    _check_near_misses(root, ("num_gpus_per_node",), "the top level")
    for key, child in root.items():
        if key in ("slurm", "hpcplace", "format", "launch", "services") or not isinstance(child.value, dict):
            continue
        _check_near_misses(child, _WORKER_KEYS + _ENV_MANAGER_KEYS, f"worker {key!r}")
        if any(k in child.value for k in _WORKER_KEYS) or _is_env_manager(str(key), child):
            out.append((str(key), child))
            continue
        for inner_key, inner in child.items():
            if isinstance(inner.value, dict) and any(k in inner.value for k in _WORKER_KEYS):
                out.append((str(inner_key), inner))
    for name, worker in out:
        _check_near_misses(worker, _WORKER_KEYS + _ENV_MANAGER_KEYS, f"worker {name!r}")
        args = worker.get("strategy_args")
        if args is not None and isinstance(args.value, dict):
            _check_near_misses(args, ("strategy_name", "strategy_config"), f"{name}.strategy_args")
    return out


def _check_near_misses(section: View, keys: tuple[str, ...], where: str) -> None:
    """ROLL sections hold many keys hpcplace does not read, so they are not checked against a list;
    a key that is a near miss of one placement reads (`device_maping`) is refused: ROLL would refuse
    it too, and here it would silently drop the worker's GPUs."""
    for key in section.mapping():
        if str(key) not in keys and (suggestion := did_you_mean(str(key), keys)):
            raise View(section.doc, section.path + (key,), None).key_error(
                f"unknown key {key!r} in {where}{suggestion}", hint="the keys hpcplace reads here: " + ", ".join(keys)
            )


def _is_env_manager(key: str, section: View) -> bool:
    return key.endswith("env_manager") or any(k in section.value for k in _ENV_MANAGER_KEYS)


def env_manager_world_size(section: View) -> int:
    """ROLL's EnvManagerConfig.__post_init__: ceil(num_env_groups * (group_size + redundancy) /
    max_env_num_per_worker); max_env_num_per_worker <= 0 puts every env in one worker."""

    def val(key: str, default: int) -> int:
        v = section.get(key)
        return v.int() if v is not None and v.deref().value is not None else default

    envs = val("num_env_groups", 128) * (val("group_size", 1) + val("group_size_redundancy", 0))
    per = val("max_env_num_per_worker", 0)
    if per <= 0:
        per = envs
    return max(1, (envs + per - 1) // per)


def _gpus_per_node(
    root: View, slurm_view: View | None, gpus_from_slurm: int | None, site: SiteGpuCount | None, notes: list[str]
) -> tuple[int, View]:
    """ROLL overwrites num_gpus_per_node with the GPU count it detects on the node, so on Slurm the
    truth is the node's GPU count (`slurm.gpus_per_node`, else what the live cluster reports); the
    config's value is only a fallback."""
    gpn_view = root.get("num_gpus_per_node")
    if gpus_from_slurm is None and site is not None and site.count is not None:
        stated = gpn_view.value if gpn_view is not None else None
        if stated != site.count:  # the config's own count, confirmed by the cluster, is no news
            notes.append(
                f"{site.count} GPUs per node, {site.source} (ROLL detects them at run time; set "
                "slurm.gpus_per_node to fix the count)"
            )
        gpus_from_slurm = site.count
    if gpus_from_slurm is not None:
        where = (
            slurm_view.require("gpus_per_node") if slurm_view is not None and slurm_view.get("gpus_per_node") else root
        )
        if gpn_view is not None and gpn_view.value is not None and gpn_view.int(minimum=1) != gpus_from_slurm:
            notes.append(
                f"num_gpus_per_node {gpn_view.value} ({gpn_view.location()}) differs from the nodes' "
                f"{gpus_from_slurm} GPUs: ROLL uses the count it detects, so the plan does too"
            )
        return limits.gpus_per_node(gpus_from_slurm, where.location(), "slurm.gpus_per_node"), where
    if gpn_view is None or gpn_view.value is None:
        raise root.error(
            "the GPUs per node are unknown: ROLL detects them at run time"
            + (f" ({site.source})" if site is not None else ""),
            hint=site.fix
            if site is not None and site.fix
            else "add `slurm: {gpus_per_node: 8}` (or --set slurm.gpus_per_node=8, or "
            "num_gpus_per_node: 8 at the top level)",
        )
    return limits.gpus_per_node(gpn_view.int(minimum=1), gpn_view.location(), "num_gpus_per_node"), gpn_view


def parse_roll(doc: YamlDocument, site_gpus: SiteGpus | None = None) -> ExperimentSpec:
    root = doc.root()
    slurm_view = root.get("slurm")
    facts = slurm_facts(slurm_view)
    notes: list[str] = []
    version = resolve_version(
        "roll", root, notes
    )  # a stated version checked; ROLL 0.2.0-0.3.0 read alike (versions.md)
    site = site_gpus(facts.partition, facts.gpu_type) if site_gpus is not None and facts.gpus_per_node is None else None
    gpn, gpn_view = _gpus_per_node(root, slurm_view, facts.gpus_per_node, site, notes)
    gpu_workers: list[tuple[str, View, list[list[int]], SpanningWorkers | None]] = []
    cpu_workers: list[tuple[str, View, int]] = []
    names: set[str] = set()
    megatron: list[tuple[str, View]] = []  # Megatron workers, whose parallel sizes feed the fabric check
    for name, wv in _workers(root):
        check_name(wv, name, "worker name")
        if name in names:
            raise wv.error(f"two workers are named {name!r}")
        names.add(name)
        dm = wv.get("device_mapping")
        g_view = wv.get("num_gpus_per_worker")
        ws_view = wv.get("world_size")
        if (dm is None or dm.value is None) and _is_env_manager(name, wv):
            world = env_manager_world_size(wv)
            if ws_view is not None and ws_view.value is not None and ws_view.value != world:
                notes.append(
                    f"{name}: world_size {ws_view.value} is replaced by ROLL's computed {world} "
                    "(num_env_groups * group_size / max_env_num_per_worker)"
                )
            cpu_workers.append((name, wv, limits.processes(world, wv.location(), "env manager world_size")))
            continue
        if dm is None or dm.value is None:
            if ws_view is None:
                raise wv.error(f"worker {name!r} has neither device_mapping nor world_size")
            if g_view is not None and g_view.value not in (0, None):
                raise g_view.error(
                    f"CPU-only worker {name!r} (no device_mapping) cannot ask for GPUs",
                    hint="set num_gpus_per_worker: 0 or give a device_mapping",
                )
            cpu_workers.append((name, wv, limits.processes(ws_view.int(minimum=1), ws_view.location(), "world_size")))
            continue
        ids = parse_device_mapping(dm)
        if _strategy_name(wv) in _MEGATRON:
            megatron.append((name, wv))
        per = _gpus_per_worker(name, wv, g_view, notes)
        if len(ids) % per:
            raise dm.error(
                f"{len(ids)} GPUs are not divisible by num_gpus_per_worker {per}",
                hint="ROLL asserts len(device_mapping) % num_gpus_per_worker == 0",
            )
        world = len(ids) // per
        if ws_view is not None and ws_view.value is not None and ws_view.int(minimum=1) != world:
            notes.append(
                f"{name}: world_size {ws_view.value} is replaced by ROLL's len(device_mapping) // "
                f"num_gpus_per_worker = {len(ids)} // {per} = {world}"
            )
        workers = [ids[i * per : (i + 1) * per] for i in range(world)]
        spanning = _spanning(name, wv, dm, workers, gpn, per)
        if spanning is None:
            gpu_workers.append((name, dm, workers, None))
        else:
            gpu_workers.append((name, dm, *spanning))
    if not gpu_workers and not cpu_workers:
        raise root.error("no ROLL workers found (mappings with device_mapping or world_size)")
    num_nodes = _gpu_nodes(gpu_workers, gpn, slurm_view, notes)
    groups = [facts_node_group("gpu", facts, num_nodes, gpn, gpn_view)]
    cpu_partition = slurm_view.get("cpu_partition") if slurm_view is not None else None
    cpu_nodes = 0
    if cpu_workers and cpu_partition is not None and slurm_view is not None:
        cpu_nodes_view = slurm_view.get("cpu_nodes")
        cpu_nodes = (
            limits.nodes(cpu_nodes_view.int(minimum=1), cpu_nodes_view.location(), "cpu_nodes")
            if cpu_nodes_view is not None
            else 1
        )
        groups.append(
            NodeGroup(
                label="cpu",
                partition=cpu_partition.str(),
                num_nodes=cpu_nodes,
                gpus_per_node=(0,) * cpu_nodes,
                location=cpu_partition.location(),
            )
        )
    cluster = build_cluster(tuple(groups), root)
    entries = [
        PlacementEntry((name,), ("gpu",), None, tuple(tuple(x) for x in lists), dm.location(), spanning=spanning)
        for name, dm, lists, spanning in gpu_workers
    ]
    for name, wv, world in cpu_workers:
        if cpu_nodes:
            spread = world % cpu_nodes == 0
            text = f"0-{cpu_nodes - 1}:0-{world - 1}" if spread else f"0:0-{world - 1}"
            entries.append(PlacementEntry((name,), ("cpu",), text, None, wv.location()))
        else:  # ROLL's allocate_placement_group: CPU worker rank r on GPU node r % nodes
            entries.append(
                PlacementEntry((name,), ("node",), None, tuple((r % num_nodes,) for r in range(world)), wv.location())
            )
    placed = {n for e in entries for n in e.components}
    name, components = hpcplace_block(root, placed, doc.path)
    for worker, wv in megatron:
        components[worker] = _with_megatron_sizes(worker, wv, components.get(worker) or ComponentSpec(worker))
    return ExperimentSpec(
        name,
        cluster,
        tuple(entries),
        components,
        doc.path,
        "roll",
        slurm_job_options(slurm_view, frozenset({"nodes"})),
        notes=tuple(notes),
        framework_version=PlannedVersion.of(version),
    )


def _gpu_nodes(
    gpu_workers: list[tuple[str, View, list[list[int]], SpanningWorkers | None]],
    gpn: int,
    slurm_view: View | None,
    notes: list[str],
) -> int:
    """The GPU nodes: as ROLL, enough for the highest GPU id of any device_mapping (GPU g is on node
    g // gpus_per_node). `slurm.nodes` pins the count: a mapping that needs more is refused (fewer
    leaves nodes idle, which the plan warns about). Unpinned, a mapping that alone adds nodes is
    reported: a too-wide mapping would otherwise silently grow the job."""
    need = {name: max(g for lst in lists for g in lst) // gpn + 1 for name, _, lists, _ in gpu_workers}
    num_nodes = max(need.values(), default=1)
    pinned = slurm_view.get("nodes") if slurm_view is not None else None
    widest = max(gpu_workers, key=lambda w: need[w[0]], default=None)
    if pinned is not None and pinned.value is not None:
        nodes = limits.nodes(pinned.int(minimum=1), pinned.location(), "slurm.nodes")
        if widest is not None and num_nodes > nodes:
            name, dm, lists, _ = widest
            top = max(g for lst in lists for g in lst)
            raise dm.error(
                f"worker {name!r}: device_mapping reaches GPU {top}, which needs {num_nodes} nodes of "
                f"{gpn} GPUs, but slurm.nodes ({pinned.location()}) pins the job to {nodes}",
                hint=f"with {nodes} nodes the GPU ids are 0-{nodes * gpn - 1}: narrow the mapping "
                f"(e.g. list(range(0,{nodes * gpn}))), or raise slurm.nodes",
            )
        return nodes
    others = [n for w, n in need.items() if widest is None or w != widest[0]]
    if widest is not None and others and num_nodes > max(others):
        name, dm, lists, _ = widest
        top = max(g for lst in lists for g in lst)
        notes.append(
            f"worker {name!r}: device_mapping ({dm.location()}) reaches GPU {top}, so the job takes "
            f"{num_nodes} nodes of {gpn} GPUs where the other workers need {max(others)}; if that is "
            f"wider than intended, fix the mapping, or pin the node count with slurm.nodes: "
            f"{max(others)} (a mapping that needs more is then refused)"
        )
    return num_nodes


def _spanning(
    name: str, worker: View, dm: View, workers: list[list[int]], gpn: int, per: int
) -> tuple[list[list[int]], SpanningWorkers] | None:
    """Workers whose GPUs lie on several nodes, as ROLL places them: ResourceManager maps GPU g to
    node g // gpn (one placement group per node), the worker actor runs on the node of its first GPU
    seeing its GPUs there (sorted), and vLLM starts one Ray worker per GPU on that GPU's node. Here
    each worker becomes one process per node it spans (nodes in the order its GPUs reach them, each
    process with that node's GPUs, sorted); None when every worker fits on one node."""
    if per == 1 or all(min(w) // gpn == max(w) // gpn for w in workers):
        return None
    strategy = _strategy_name(worker)
    if strategy not in ("vllm", "sglang"):
        wide = next(w for w in workers if min(w) // gpn != max(w) // gpn)
        raise dm.error(
            f"worker {name!r} would span nodes {sorted({g // gpn for g in wide})} with GPUs {wide} "
            f"({gpn} per node), but strategy {strategy or '(none given)'} runs a worker as one "
            "process on one node; ROLL spreads only vLLM and SGLang workers over nodes",
            hint=f"align each worker's {per} GPUs to one node (device_mapping starting at a multiple "
            f"of {per}), or use strategy vllm",
        )
    lists: list[list[int]] = []
    spans: list[tuple[int, ...]] = []
    for w, gpus in enumerate(workers):
        if strategy == "sglang" and min(gpus) // gpn != max(gpus) // gpn:
            _check_sglang_nodes(name, dm, w, gpus, gpn, per)
        by_node: dict[int, list[int]] = {}
        for g in gpus:
            by_node.setdefault(g // gpn, []).append(g)
        first = len(lists)
        lists += [sorted(part) for part in by_node.values()]
        spans.append(tuple(range(first, len(lists))))
    return lists, SpanningWorkers(tuple(spans), per, "ROLL", dm.location())


def _check_sglang_nodes(name: str, dm: View, w: int, gpus: list[int], gpn: int, per: int) -> None:
    """ROLL's SGLang strategy runs a worker over n = tp*pp / (GPUs of its first node) whole nodes and
    finds the other nodes as ROLL node ranks w*n .. w*n+n-1 (their GPU 0): a multi-node SGLang
    worker must hold exactly those nodes' GPUs."""
    nodes = per // gpn if per % gpn == 0 else None
    want = list(range(w * per, (w + 1) * per)) if nodes else None
    if want is None or sorted(gpus) != want:
        raise dm.error(
            f"SGLang worker {w} of {name!r} holds GPUs {gpus}: ROLL's SGLang strategy runs a "
            f"multi-node worker on whole nodes, worker w on ROLL nodes w*n..w*n+n-1 "
            f"(n = num_gpus_per_worker / {gpn} GPUs per node)",
            hint=f"make num_gpus_per_worker a multiple of {gpn} and device_mapping "
            f"list(range(0, k*num_gpus_per_worker)), or use strategy vllm",
        )


# ROLL's Megatron strategies (roll/distributed/strategy/megatron_strategy.py): both build mcore_adapter's
# TrainingArguments from strategy_config and initialise Megatron's parallel groups with them.
_MEGATRON = ("megatron_train", "megatron_infer")


def _with_megatron_sizes(name: str, worker: View, spec: ComponentSpec) -> ComponentSpec:
    """A Megatron worker's groups for the fabric check: `strategy_config.tensor_model_parallel_size` (TP),
    `pipeline_model_parallel_size` (PP), `expert_model_parallel_size` (EP) and `expert_tensor_parallel_size`
    (ETP), which mcore_adapter passes to Megatron's initialize_model_parallel (unset: 1; an unset ETP is
    Megatron's default, the TP). ROLL's Megatron workers hold one GPU each, ranked in device_mapping order, so
    a tensor-parallel group is TP consecutive GPUs of the mapping and an expert-parallel group ETP x EP (EP > 1
    only). A value in hpcplace.components that differs from ROLL's is an error at ROLL's key."""
    args = worker.get("strategy_args")
    config = args.deref().get("strategy_config") if args is not None else None
    if config is None or not isinstance(config.deref().value, dict):
        return spec
    config = config.deref()

    def size(key: str) -> int | None:
        view = config.given(key)
        return view.int(minimum=1) if view is not None else None

    tp, ep = size("tensor_model_parallel_size") or 1, size("expert_model_parallel_size") or 1
    roll = {  # what Megatron runs with (its defaults: 1, ETP = TP)
        "tensor_parallel_size": tp,
        "pipeline_parallel_size": size("pipeline_model_parallel_size") or 1,
        "expert_parallel_size": ep,
        "expert_tensor_parallel_size": size("expert_tensor_parallel_size") or tp,
    }
    for label, key in _MEGATRON_SIZES:
        mine = getattr(spec, label)
        if mine is not None and mine != roll[label]:
            where = config.given(key) or config.given("tensor_model_parallel_size") or config
            raise where.error(
                f"{name}: hpcplace.components.{name}.{label} = {mine} conflicts with ROLL's {roll[label]}",
                hint="give the value once (ROLL's strategy_config decides it)",
            )
    return replace(
        spec,
        tensor_parallel_size=tp,
        pipeline_parallel_size=roll["pipeline_parallel_size"],
        expert_parallel_size=ep if ep > 1 else None,
        expert_tensor_parallel_size=roll["expert_tensor_parallel_size"] if ep > 1 else None,
    )


# the ComponentSpec field and ROLL's strategy_config key (mcore_adapter's TrainingArguments)
_MEGATRON_SIZES = (
    ("tensor_parallel_size", "tensor_model_parallel_size"),
    ("pipeline_parallel_size", "pipeline_model_parallel_size"),
    ("expert_parallel_size", "expert_model_parallel_size"),
    ("expert_tensor_parallel_size", "expert_tensor_parallel_size"),
)


def _gpus_per_worker(name: str, worker: View, given_view: View | None, notes: list[str]) -> int:
    """ROLL's WorkerConfig.__post_init__: training strategies get 1 GPU per worker whatever was asked,
    vLLM gets tensor_parallel_size * pipeline_parallel_size; each overwrite is reported."""
    given = given_view.int(minimum=1) if given_view is not None and given_view.deref().value is not None else None
    per = given or 1
    strategy = _strategy_name(worker)
    tp_pp = _vllm_gpus(worker)
    if tp_pp is not None:
        per = tp_pp
    elif strategy is not None and strategy not in ("hf_infer", "vllm", "sglang") and per > 1:
        per = 1
    if given_view is not None and given is not None and given != per:
        notes.append(
            f"{name}: num_gpus_per_worker {given} ({given_view.location()}) is replaced by ROLL's {per} "
            + (
                "(vLLM tensor_parallel_size * pipeline_parallel_size)"
                if tp_pp is not None
                else f"(strategy {strategy} runs one GPU per worker)"
            )
        )
    return per


def _strategy_name(worker: View) -> str | None:
    args = worker.get("strategy_args")
    if args is None or not isinstance(args.deref().value, dict):
        return None
    strategy = args.deref().get("strategy_name")
    return str(strategy.deref().value).lower() if strategy is not None else None


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
