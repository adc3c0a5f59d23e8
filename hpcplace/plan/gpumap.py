"""Human views of a Plan: a text summary with a per-node device map, and the same map as SVG."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from html import escape

from hpcplace.config.cluster import Node
from hpcplace.config.rank_syntax import compress_ranks as compress
from hpcplace.config.rank_syntax import plural
from hpcplace.config.services import ServiceSpec
from hpcplace.config.spec import SpanningWorkers
from hpcplace.config.topology import BLOCK, TREE, topology_request
from hpcplace.plan.placement import Placement
from hpcplace.plan.plan import Plan
from hpcplace.plan.process_table import node_processes

PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")


def spanning_lines(spanning: SpanningWorkers, processes: Sequence[Placement], limit: int = 8) -> list[str]:
    """Readable lines: how the processes form a framework's spanning workers, and the nodes each worker spans."""
    lines = [
        f"{len(processes)} processes form {len(spanning.workers)} {spanning.framework} worker(s) of "
        f"{spanning.gpus_per_worker} GPUs (one process per node a worker spans; Ray launch mode only)"
    ]
    for w, ranks in enumerate(spanning.workers[:limit]):
        nodes = ", ".join(
            f"node {processes[r].cluster_node_rank} GPUs {','.join(processes[r].visible_accelerators)}" for r in ranks
        )
        lines.append(f"worker {w} = ranks {','.join(map(str, ranks))}: {nodes}")
    if len(spanning.workers) > limit:
        lines.append(f"... {len(spanning.workers) - limit} more")
    return lines


def device_map(plan: Plan, nodes: Collection[int] | None = None) -> dict[int, dict[str, dict[str, list[int]]]]:
    """node rank -> device label ("GPU3", "franka1", "node") -> component -> ranks (of `nodes` only, if given:
    a summary shows a few nodes of a cluster that may have thousands)."""
    out: dict[int, dict[str, dict[str, list[int]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for comp in plan.components:
        procs = comp.processes
        if nodes is None:
            chosen: Iterable[Placement] = procs
        else:
            chosen = (procs[r] for v in node_processes(procs) if v.cluster_node_rank in nodes for r in v.ranks)
        for p in chosen:
            cell = out[p.cluster_node_rank]
            if p.resource_type == "node":
                cell["node"][comp.name].append(p.rank)
            elif p.isolate_accelerator:
                for g in p.local_hardware_ranks:
                    cell[f"GPU{g}"][comp.name].append(p.rank)
            else:
                for h in p.local_hardware_ranks:
                    cell[f"{p.resource_type}{h}"][comp.name].append(p.rank)
    return out


def _device_order(label: str) -> tuple[int, str, int]:
    if label == "node":
        return (2, "", 0)
    digits = len(label) - len(label.rstrip("0123456789"))
    return (
        0 if label.startswith("GPU") else 1,
        label[:-digits] if digits else label,
        int(label[-digits:]) if digits else 0,
    )


def idle_gpus(node: Node, cells: Mapping[str, object]) -> list[str]:
    """The GPU labels of a node no process holds: the job has them anyway (whole nodes, every GPU as
    GRES), so the map shows them."""
    return [f"GPU{g}" for g in range(node.gpus) if f"GPU{g}" not in cells]


COMPOSED_SHOWN = 8  # more composed files than this (verl's config is ~20) are counted, not listed


def composed_lines(composed: Sequence[str]) -> list[str]:
    """What Hydra composed, in order: each file and override; a long list of files (a framework's own
    defaults tree) is one line with their count and folder, the overrides still each on their own."""
    files = [c for c in composed if not c.startswith("override ")]
    if len(files) <= COMPOSED_SHOWN:
        return [f"  composed: {item}" for item in composed]
    paths = [f.split(" @", 1)[0] for f in files]
    folder = os.path.commonpath([os.path.dirname(p) for p in paths]) if all(os.path.isabs(p) for p in paths) else ""
    where = f" under {folder}" if folder else ""
    return [f"  composed: {len(files)} files{where}, the last {files[-1]} (plan.json lists each)"] + [
        f"  composed: {c}" for c in composed if c.startswith("override ")
    ]


def summary(plan: Plan, *, max_nodes: int = 64) -> str:
    cluster = plan.cluster
    lines = [
        f"plan {plan.name!r} from {plan.source} ({plan.source_format}): {plural(len(plan.components), 'component')}"
        f", {plural(plan.num_processes, 'process', 'processes')}, {plural(len(cluster.nodes), 'node')}"
    ]
    lines += composed_lines(plan.composed)
    time = plan.slurm.get("time")
    lines.append(
        f"  time limit: {time}"
        if time
        else "  time limit: none given (slurm.time): the partitions' default time limits apply"
    )
    label_w = max([12] + [len(g.label) for g in cluster.node_groups])
    part_w = max([10] + [len(g.partition or "(default)") for g in cluster.node_groups])
    lines += ["", "node groups (het-job components):"]
    for i, g in enumerate(cluster.node_groups):
        gpus = ",".join(str(x) for x in sorted(set(g.gpus_per_node)))
        hw = (
            f" {g.hardware.type}/node={','.join(str(x) for x in sorted(set(g.hardware.per_node)))}"
            if g.hardware
            else ""
        )
        lines.append(
            f"  [{i}] {g.label:<{label_w}} partition={g.partition or '(default)':<{part_w}} "
            f"nodes={g.num_nodes:<4} gpus/node={gpus}{' ' + g.gpu_type if g.gpu_type else ''}{hw}  "
            f"node ranks {compress(cluster.node_ranks(i))}" + (f"  in {g.container.describe()}" if g.container else "")
        )
        if g.topology is not None:
            lines.append(f"      fabric: {g.topology.describe()}{topology_request(g.topology)}")
    lines += ["", "components:"]
    name_w = max([14] + [len(c.name) for c in plan.components])
    for comp in plan.components:
        extra = []
        if comp.tensor_parallel_size > 1 or comp.pipeline_parallel_size > 1:
            extra.append(f"tp={comp.tensor_parallel_size} pp={comp.pipeline_parallel_size}")
        if comp.expert_parallel_size > 1:
            etp = comp.expert_tensor_parallel_size
            extra.append(f"ep={comp.expert_parallel_size}" + (f" etp={etp}" if etp is not None else ""))
        if comp.gpus_per_engine is not None:
            extra.append(f"{comp.gpus_per_engine} GPUs per engine")
        if comp.collocation_group:
            extra.append(f"collocated in {comp.collocation_group}")
        if comp.offload:
            extra.append("offload")
        if comp.service is not None:
            extra.append(service_text(comp.service))
        nodes = sorted(v.cluster_node_rank for v in node_processes(comp.processes))
        lines.append(
            f"  {comp.name:<{name_w}} world_size={comp.world_size:<6} {','.join(comp.node_groups)} "
            f"({comp.resource_type}) on {'node' if len(nodes) == 1 else 'nodes'} {compress(nodes)}"
            + (f"  [{'; '.join(extra)}]" if extra else "")
        )
        if comp.spanning is not None:
            lines += ["      " + line for line in spanning_lines(comp.spanning, comp.processes)]
    for cg in plan.collocation_groups:
        lines.append(
            f"  {cg.name}: {' + '.join(cg.components)} share {cg.resource_type}; turns: "
            + " -> ".join("[" + ", ".join(p) + "]" for p in cg.phases)
        )
    if plan.weight_sync:
        ws = plan.weight_sync
        lines.append(
            f"  model-parallel: {ws.mode}; actor tp={ws.actor_tp} pp={ws.actor_pp}, rollout tp={ws.rollout_tp}"
            f", rollout stride={ws.rollout_stride}"
        )
    for w in plan.warnings:
        lines.append(f"  warning: {w}")
    lines += ["", "device map (node: device -> component ranks):"]
    dmap = device_map(plan, {n.rank for n in cluster.nodes[:max_nodes]})
    for shown, node in enumerate(cluster.nodes):
        if shown >= max_nodes:
            lines.append(f"  ... {plural(len(cluster.nodes) - max_nodes, 'more node')} (use --max-nodes)")
            break
        cells = dmap.get(node.rank, {})
        head = f"  node {node.rank} ({node.group_label}#{node.index_in_group}, {node.partition or 'default partition'})"
        if not cells:
            lines.append(head + ": idle" + (f" ({plural(node.gpus, 'GPU')})" if node.gpus else ""))
            continue
        lines.append(head + ":")
        labels = cells.keys() | set(idle_gpus(node, cells))
        for label in sorted(labels, key=_device_order):
            comps = "  ".join(f"{c} {compress(r)}" for c, r in cells[label].items()) if label in cells else "idle"
            lines.append(f"      {label:<8} {comps}")
    return "\n".join(lines) + "\n"


IDLE_FILL, IDLE_STROKE = "#ffffff", "#999999"


def svg(plan: Plan, *, max_nodes: int = 64) -> str:
    """One row per node, one cell per device: the device name on top, then one stripe per component
    using it, labelled with its ranks (hover for the full list); GPUs no process holds are drawn
    dashed and labelled idle (the job holds them all the same)."""
    colors = {c.name: PALETTE[i % len(PALETTE)] for i, c in enumerate(plan.components)}
    nodes = plan.cluster.nodes[:max_nodes]
    dmap = device_map(plan, {n.rank for n in nodes})
    labels = {
        n.rank: sorted(dmap.get(n.rank, {}).keys() | set(idle_gpus(n, dmap.get(n.rank, {}))), key=_device_order)
        for n in nodes
    }
    any_idle = any(label not in dmap.get(n.rank, {}) for n in nodes for label in labels[n.rank])
    stripes = max([len(comps) for n in nodes for comps in dmap.get(n.rank, {}).values()] + [1])
    widths = [max(len(labels[n.rank]), 1) for n in nodes]
    legend = len(colors) + (1 if any_idle else 0)
    cell, head, stripe_h, gap, left, top = 96, 14, 14, 6, 170, 40
    row_h = head + stripes * stripe_h
    units = fabric_units(plan, nodes)
    width = left + max(widths) * (cell + gap) + (110 if units else 20)
    height = top + len(nodes) * (row_h + gap) + 30 + 18 * ((legend + 3) // 4)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="monospace" '
        'font-size="11">',
        f'<text x="10" y="20" font-size="14">{escape(plan.name)}: device map</text>',
    ]
    for row, node in enumerate(nodes):
        y = top + row * (row_h + gap)
        out.append(
            f'<text x="10" y="{y + row_h / 2 + 4:.0f}">node {node.rank} {escape(node.group_label)}'
            f"#{node.index_in_group}</text>"
        )
        cells = dmap.get(node.rank, {})
        for col, label in enumerate(labels[node.rank]):
            x = left + col * (cell + gap)
            if label not in cells:
                out.append(
                    f'<rect class="idle" x="{x}" y="{y}" width="{cell}" height="{row_h}" fill="{IDLE_FILL}" '
                    f'stroke="{IDLE_STROKE}" stroke-dasharray="4 3"><title>{escape(label)}: idle (allocated, '
                    f'no process)</title></rect><text x="{x + 3}" y="{y + 11}">{escape(label)}</text>'
                    f'<text x="{x + 3}" y="{y + head + 11}" fill="{IDLE_STROKE}">idle</text>'
                )
                continue
            out.append(
                f'<rect x="{x}" y="{y}" width="{cell}" height="{row_h}" fill="#eeeeee"/>'
                f'<text x="{x + 3}" y="{y + 11}">{escape(label)}</text>'
            )
            for k, (comp, ranks) in enumerate(cells[label].items()):
                sy = y + head + k * stripe_h
                text = f"{comp} {compress(ranks)}"
                shown = text if len(text) <= 15 else text[:14] + "…"
                out.append(
                    f'<rect x="{x}" y="{sy}" width="{cell}" height="{stripe_h}" fill="{colors[comp]}">'
                    f"<title>{escape(label)}: {escape(comp)} ranks {escape(compress(ranks))}</title></rect>"
                    f'<text x="{x + 3}" y="{sy + 11}" fill="white" font-size="10">{escape(shown)}</text>'
                )
    for word, first, count in units:  # each block (leaf switch) of a group with a topology: one outline
        y0 = top + first * (row_h + gap) - 3
        out.append(
            f'<rect class="fabric" x="4" y="{y0}" width="{width - 10}" height="{count * (row_h + gap) - gap + 6}" '
            f'fill="none" stroke="#555555" stroke-dasharray="6 3"/><text x="{width - 100}" y="{y0 + 14}">'
            f"{escape(word)}</text>"
        )
    y = top + len(nodes) * (row_h + gap) + 10
    for i, (comp, color) in enumerate(colors.items()):
        x, yy = 10 + (i % 4) * 170, y + (i // 4) * 18
        out.append(
            f'<rect x="{x}" y="{yy}" width="12" height="12" fill="{color}"/>'
            f'<text x="{x + 16}" y="{yy + 10}">{escape(comp)}</text>'
        )
    if any_idle:
        i = len(colors)
        x, yy = 10 + (i % 4) * 170, y + (i // 4) * 18
        out.append(
            f'<rect class="idle" x="{x}" y="{yy}" width="12" height="12" fill="{IDLE_FILL}" '
            f'stroke="{IDLE_STROKE}" stroke-dasharray="3 2"/><text x="{x + 16}" y="{yy + 10}">idle GPU '
            "(allocated)</text>"
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def fabric_units(plan: Plan, nodes: Sequence[Node]) -> list[tuple[str, int, int]]:
    """(label, first row, rows) of each block or leaf switch the plan's consecutive nodes form (the units
    hpcplace.plan.topology checks groups against), for the rows shown."""
    out: list[tuple[str, int, int]] = []
    key_of_last = None
    for row, node in enumerate(nodes):
        topology = plan.cluster.node_groups[node.group_index].topology
        if topology is None or topology.kind not in (BLOCK, TREE):
            key_of_last = None
            continue
        index = node.index_in_group // topology.unit_nodes(plan.cluster.node_groups[node.group_index].num_nodes)
        key = (node.group_index, index)
        if key == key_of_last:
            word, first, count = out[-1]
            out[-1] = (word, first, count + 1)
        else:
            out.append((f"{topology.unit_word} {index}", row, 1))
        key_of_last = key
    return out


def service_text(service: ServiceSpec) -> str:
    """`service, port auto, ready: GET /health within 600 s, after judge`."""
    port = "port auto" if service.port is None else f"port {service.port}"
    ready = {"tcp": "port open", "http": f"GET {service.ready.path} 2xx"}.get(
        service.ready.kind, f"file {service.ready.path}"
    )
    parts = [f"service, {port}, ready: {ready} within {service.timeout_s:g} s"]
    if service.after:
        parts.append(f"after {', '.join(service.after)}")
    if service.optional:
        parts.append("optional")
    return ", ".join(parts)
