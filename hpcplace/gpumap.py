"""Human views of a Plan: a text summary with a per-node device map, and the same map as SVG."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable
from html import escape

from hpcplace.placement import Placement
from hpcplace.plan import Plan
from hpcplace.process_table import node_processes
from hpcplace.rank_syntax import compress_ranks as compress

PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac")


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
    return (0 if label.startswith("GPU") else 1, label[:-digits] if digits else label,
            int(label[-digits:]) if digits else 0)


def summary(plan: Plan, *, max_nodes: int = 64) -> str:
    cluster = plan.cluster
    lines = [f"plan {plan.name!r} from {plan.source} ({plan.source_format}): {len(plan.components)} components, "
             f"{plan.num_processes} processes, {len(cluster.nodes)} nodes"]
    lines += [f"  composed: {item}" for item in plan.composed]
    lines += ["", "node groups (het-job components):"]
    for i, g in enumerate(cluster.node_groups):
        gpus = ",".join(str(x) for x in sorted(set(g.gpus_per_node)))
        hw = f" {g.hardware.type}/node={','.join(str(x) for x in sorted(set(g.hardware.per_node)))}" if g.hardware else ""
        lines.append(f"  [{i}] {g.label:<12} partition={g.partition or '(default)':<10} nodes={g.num_nodes:<4} "
                     f"gpus/node={gpus}{' ' + g.gpu_type if g.gpu_type else ''}{hw}  "
                     f"node ranks {_ranks_text(cluster.node_ranks(i))}")
    lines += ["", "components:"]
    for comp in plan.components:
        extra = []
        if comp.tensor_parallel_size > 1 or comp.pipeline_parallel_size > 1:
            extra.append(f"tp={comp.tensor_parallel_size} pp={comp.pipeline_parallel_size}")
        if comp.collocation_group:
            extra.append(f"collocated in {comp.collocation_group}")
        if comp.offload:
            extra.append("offload")
        nodes = sorted(v.cluster_node_rank for v in node_processes(comp.processes))
        lines.append(f"  {comp.name:<14} world_size={comp.world_size:<6} {','.join(comp.node_groups)} "
                     f"({comp.resource_type}) on nodes {compress(nodes)}" + (f"  [{'; '.join(extra)}]" if extra else ""))
        if comp.spanning is not None:
            lines += ["      " + line for line in comp.spanning.describe(comp.processes)]
    for g in plan.collocation_groups:
        lines.append(f"  {g.name}: {' + '.join(g.components)} share {g.resource_type}; turns: "
                     + " -> ".join("[" + ", ".join(p) + "]" for p in g.phases))
    if plan.weight_sync:
        ws = plan.weight_sync
        lines.append(f"  model-parallel: {ws.mode}; actor tp={ws.actor_tp} pp={ws.actor_pp}, rollout tp={ws.rollout_tp}"
                     f", rollout stride={ws.rollout_stride}")
    for w in plan.warnings:
        lines.append(f"  warning: {w}")
    lines += ["", "device map (node: device -> component ranks):"]
    dmap = device_map(plan, {n.rank for n in cluster.nodes[:max_nodes]})
    for shown, node in enumerate(cluster.nodes):
        if shown >= max_nodes:
            lines.append(f"  ... {len(cluster.nodes) - max_nodes} more nodes (use --max-nodes)")
            break
        cells = dmap.get(node.rank, {})
        head = f"  node {node.rank} ({node.group_label}#{node.index_in_group}, {node.partition or 'default partition'})"
        if not cells:
            lines.append(head + ": idle")
            continue
        lines.append(head + ":")
        for label in sorted(cells, key=_device_order):
            comps = "  ".join(f"{c} {compress(r)}" for c, r in cells[label].items())
            lines.append(f"      {label:<8} {comps}")
    return "\n".join(lines) + "\n"


def svg(plan: Plan, *, max_nodes: int = 64) -> str:
    """One row per node, one cell per device: the device name on top, then one stripe per component
    using it, labelled with its ranks (hover for the full list)."""
    colors = {c.name: PALETTE[i % len(PALETTE)] for i, c in enumerate(plan.components)}
    nodes = plan.cluster.nodes[:max_nodes]
    dmap = device_map(plan, {n.rank for n in nodes})
    stripes = max([len(comps) for n in nodes for comps in dmap.get(n.rank, {}).values()] + [1])
    widths = [max(len(dmap.get(n.rank, {})), 1) for n in nodes]
    cell, head, stripe_h, gap, left, top = 96, 14, 14, 6, 170, 40
    row_h = head + stripes * stripe_h
    width = left + max(widths) * (cell + gap) + 20
    height = top + len(nodes) * (row_h + gap) + 30 + 18 * ((len(colors) + 3) // 4)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="monospace" '
           'font-size="11">', f'<text x="10" y="20" font-size="14">{escape(plan.name)}: device map</text>']
    for row, node in enumerate(nodes):
        y = top + row * (row_h + gap)
        out.append(f'<text x="10" y="{y + row_h / 2 + 4:.0f}">node {node.rank} {escape(node.group_label)}'
                   f'#{node.index_in_group}</text>')
        cells = dmap.get(node.rank, {})
        for col, label in enumerate(sorted(cells, key=_device_order)):
            x = left + col * (cell + gap)
            out.append(f'<rect x="{x}" y="{y}" width="{cell}" height="{row_h}" fill="#eeeeee"/>'
                       f'<text x="{x + 3}" y="{y + 11}">{escape(label)}</text>')
            for k, (comp, ranks) in enumerate(cells[label].items()):
                sy = y + head + k * stripe_h
                text = f"{comp} {compress(ranks)}"
                shown = text if len(text) <= 15 else text[:14] + "…"
                out.append(f'<rect x="{x}" y="{sy}" width="{cell}" height="{stripe_h}" fill="{colors[comp]}">'
                           f'<title>{escape(label)}: {escape(comp)} ranks {escape(compress(ranks))}</title></rect>'
                           f'<text x="{x + 3}" y="{sy + 11}" fill="white" font-size="10">{escape(shown)}</text>')
    y = top + len(nodes) * (row_h + gap) + 10
    for i, (comp, color) in enumerate(colors.items()):
        x, yy = 10 + (i % 4) * 170, y + (i // 4) * 18
        out.append(f'<rect x="{x}" y="{yy}" width="12" height="12" fill="{color}"/>'
                   f'<text x="{x + 16}" y="{yy + 10}">{escape(comp)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _ranks_text(ranks: tuple[int, ...]) -> str:
    """`first-last` for a contiguous group (as always), the compressed list otherwise (`0,2`)."""
    if ranks == tuple(range(ranks[0], ranks[0] + len(ranks))):
        return f"{ranks[0]}-{ranks[-1]}"
    return compress(ranks)
