"""MkDocs hooks: the parts of the docs that are generated from the code at build time, so they cannot
drift from it.

- `reference/cli.md`: every subcommand's `--help`, from `hpcplace.cli.build_parser()`;
- `device-maps.md` and `maps/<config>.svg`: the device map of every shipped `configs/*.yaml`, drawn by
  hpcplace's own `svg()` (what `hpcplace plan CONFIG --svg FILE` writes);
- `maps/het-job-steps.svg`: the het job's components and job steps, from the Slurm lowering of
  `configs/hetero-partitions.yaml`;
- `<!-- hpcplace:errors -->` in troubleshooting.md: the real error messages of bad inputs, produced by
  running the CLI on them.

A config that stops planning, or a CLI whose help changes, changes the site; a failure here fails the build.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from html import escape
from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
HELP_COLUMNS = "100"  # argparse wraps help to the terminal width: fixed, so the page is the same everywhere


def cli_reference() -> str:
    """One section per subcommand: its one-line help and its full `--help` text."""
    from hpcplace.cli import build_parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        parser = build_parser()
        sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
        helps = {a.dest: a.help or "" for a in sub._choices_actions}
        lines = [
            "# CLI reference",
            "",
            "Generated at build time from `hpcplace.cli.build_parser()` (the parser the `hpcplace` command "
            "uses), so it is the `--help` of the installed version.",
            "",
            "| command | what it does |",
            "|---|---|",
        ]
        lines += [f"| [`hpcplace {name}`](#hpcplace-{name}) | {helps.get(name, '')} |" for name in sub.choices]
        lines += ["", "## hpcplace", "", "```text", parser.format_help().rstrip(), "```", ""]
        for name, command in sub.choices.items():
            lines += [
                f"## hpcplace {name}",
                "",
                helps.get(name, ""),
                "",
                "```text",
                command.format_help().rstrip(),
                "```",
                "",
            ]
        return "\n".join(lines)
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


def shipped_configs() -> list[Path]:
    return sorted(CONFIGS.glob("*.yaml")) + sorted(CONFIGS.glob("tour/*.yaml"))


def config_svg(path: Path) -> str:
    from hpcplace.plan.gpumap import svg
    from hpcplace.plan.planner import plan_from_file

    return svg(plan_from_file(str(path.relative_to(ROOT))))


def device_maps_page(paths: list[Path]) -> str:
    lines = [
        "# Device maps of the shipped configs",
        "",
        "Every config in `configs/`, planned and drawn at build time by hpcplace's own `svg()` — the "
        "picture `hpcplace plan CONFIG --svg map.svg` writes. One row per node, one cell per device; each "
        "stripe is a component and its ranks on that device; dashed cells are GPUs the job holds that no "
        "process uses.",
        "",
    ]
    for path in paths:
        first = [line[2:] for line in path.read_text(encoding="utf-8").splitlines()[:3] if line.startswith("# ")]
        lines += [
            f"## {path.relative_to(CONFIGS)}",
            "",
            " ".join(first),
            "",
            f"![device map of {path.relative_to(ROOT)}](maps/{path.stem}.svg)",
            "",
            '??? note "the config"',
            "",
            "    ```yaml",
        ]
        lines += [f"    {line}" if line else "" for line in path.read_text(encoding="utf-8").splitlines()]
        lines += ["    ```", ""]
    return "\n".join(lines)


def het_job_svg(config: Path) -> str:
    """Columns: the het components (one per node group); rows: the job steps. A step's segments are drawn
    under the het components they run in, with their tasks per node and GPU binding."""
    from hpcplace.plan.planner import plan_from_file
    from hpcplace.slurm.slurm_job import lower

    plan = plan_from_file(str(config.relative_to(ROOT)))
    job = lower(plan)
    col_w, gap, left, top, row_h = 250, 12, 150, 96, 46
    width = left + len(job.components) * (col_w + gap) + 10
    height = top + (len(job.steps) + 1) * (row_h + 8) + 56
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="monospace" '
        'font-size="11">',
        f'<text x="10" y="20" font-size="14">{escape(plan.name)}: one het job, {len(job.components)} het '
        f"components, {len(job.steps)} job steps</text>",
    ]
    for c in job.components:
        x = left + c.het_group * (col_w + gap)
        out.append(
            f'<rect x="{x}" y="32" width="{col_w}" height="52" fill="#dfe7f2" stroke="#4e79a7"/>'
            f'<text x="{x + 6}" y="48">het component {c.het_group}</text>'
            f'<text x="{x + 6}" y="62">{escape(c.label)}: partition {escape(c.partition or "(default)")}</text>'
            f'<text x="{x + 6}" y="76">{c.num_nodes} node(s), {escape(c.gres or "no GRES")}</text>'
        )
    y = top
    out.append(
        f'<text x="10" y="{y + 26}">batch script</text>'
        f'<rect x="{left}" y="{y}" width="{col_w}" height="{row_h}" fill="#f4f4f4" stroke="#999"/>'
        f'<text x="{left + 6}" y="{y + 18}">first node of het 0:</text>'
        f'<text x="{left + 6}" y="{y + 34}">starts the steps, fails fast</text>'
    )
    colors = ("#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f")
    for i, step in enumerate(job.steps):
        y = top + (i + 1) * (row_h + 8)
        out.append(
            f'<text x="10" y="{y + 18}">step {step.index}</text>'
            f'<text x="10" y="{y + 34}">{escape(step.component)}</text>'
        )
        for seg in step.segments:
            x = left + seg.het_group * (col_w + gap)
            bind = (seg.gpu_bind or "no GPUs").split(":")[0]
            out.append(
                f'<rect x="{x}" y="{y}" width="{col_w}" height="{row_h}" fill="{colors[i % len(colors)]}" '
                f'opacity="0.85"/><text x="{x + 6}" y="{y + 18}" fill="white">{seg.num_nodes} node(s) from '
                f"#{seg.relative}, {seg.tasks_per_node} task(s)/node</text>"
                f'<text x="{x + 6}" y="{y + 34}" fill="white">{escape(bind)}, ranks {seg.ranks[0]}-'
                f"{seg.ranks[-1]}</text>"
            )
    y = top + (len(job.steps) + 1) * (row_h + 8) + 20
    out.append(
        f'<text x="10" y="{y}">before the steps: one preflight task per node (hpcplace-run --preflight); '
        "every step: srun --overlap,</text>"
        f'<text x="10" y="{y + 16}">one segment per het component it spans, each task started through the '
        "shim (hpcplace-run)</text>"
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"


# Bad inputs and what hpcplace says about them: (title, file name, file text, argv after `hpcplace`).
ERROR_CASES = (
    (
        "A misspelled key",
        "config.yaml",
        "cluster:\n  num_nodes: 1\n  component_placement:\n    actor: 0-7\nslurm:\n  partiton: a800\n  gpus_per_node: 8\n",
        ["plan", "config.yaml"],
    ),
    (
        "A rank past what the node group has",
        "config.yaml",
        "name: try\ncluster:\n  node_groups:\n    - {label: a800, partition: a800, nodes: 2, gpus_per_node: 8}\n"
        "  component_placement:\n    actor: {node_group: a800, placement: 0-16}\n"
        "components:\n  actor: {command: [python, train.py]}\n",
        ["plan", "config.yaml"],
    ),
    (
        "Resource ranks that overlap or go backwards",
        "config.yaml",
        "name: try\ncluster:\n  node_groups:\n    - {label: a800, partition: a800, nodes: 1, gpus_per_node: 8}\n"
        '  component_placement:\n    actor: {node_group: a800, placement: "0-3,2-5"}\n'
        "components:\n  actor: {command: [python, train.py]}\n",
        ["plan", "config.yaml"],
    ),
    (
        "A framework config with no driver: nothing would run",
        "config.yaml",
        "cluster:\n  num_nodes: 1\n  component_placement:\n    actor,rollout: all\n"
        "slurm: {partition: a800, gpus_per_node: 8}\n",
        ["render", "config.yaml", "-o", "run"],
    ),
    (
        "RLinf node_ranks written as a YAML list",
        "config.yaml",
        "cluster:\n  num_nodes: 3\n  component_placement:\n    actor: {node_group: a800, placement: all}\n"
        "  node_groups:\n    - {label: a800, node_ranks: [0, 2]}\nslurm: {gpus_per_node: 8, partition: a800}\n",
        ["plan", "config.yaml"],
    ),
    (
        "A bad time limit",
        "config.yaml",
        "cluster:\n  num_nodes: 1\n  component_placement:\n    actor: all\n"
        "slurm: {partition: a800, gpus_per_node: 8, time: 2 days}\n",
        ["plan", "config.yaml"],
    ),
    (
        "A ROLL device_mapping outside its grammar",
        "config.yaml",
        "actor_train:\n  device_mapping: list(range(0, 8)) + os.system('x')\n  num_gpus_per_worker: 1\n"
        "slurm: {partition: a800, gpus_per_node: 8}\n",
        ["plan", "config.yaml", "--format", "roll"],
    ),
    (
        "An AReaL allocation that needs more GPUs than the cluster has",
        "config.yaml",
        "allocation_mode: sglang:d8+fsdp:d8\ncluster: {n_nodes: 1, n_gpus_per_node: 8}\nslurm: {partition: a800}\n",
        ["plan", "config.yaml", "--format", "areal"],
    ),
    ("A run directory that does not exist", None, "", ["status", "runs/nope"]),
)


def error_messages() -> str:
    """Run each bad input through the CLI, as a user would, and show the command and what it printed."""
    from hpcplace.cli import main

    parts: list[str] = []
    cwd = os.getcwd()
    for title, name, text, argv in ERROR_CASES:
        with tempfile.TemporaryDirectory() as tmp:
            if name:
                Path(tmp, name).write_text(text, encoding="utf-8")
            err, out = io.StringIO(), io.StringIO()
            os.chdir(tmp)
            try:
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
                    code = main(argv)
            finally:
                os.chdir(cwd)
        message = err.getvalue().rstrip()
        if code == 0 or "hpcplace: error:" not in message:
            raise RuntimeError(
                f"troubleshooting case {title!r} did not fail with an hpcplace error: exit {code}, {message!r}"
            )
        parts += [f"### {title}", ""]
        if name:
            parts += ["```yaml", f"# {name}", text.rstrip(), "```", ""]
        parts += ["```console", f"$ hpcplace {' '.join(argv)}", message, "$ echo $?", str(code), "```", ""]
    return "\n".join(parts)


def on_files(files: Files, config) -> Files:  # type: ignore[no-untyped-def]
    paths = shipped_configs()
    files.append(File.generated(config, "reference/cli.md", content=cli_reference()))
    files.append(File.generated(config, "device-maps.md", content=device_maps_page(paths)))
    for path in paths:
        files.append(File.generated(config, f"maps/{path.stem}.svg", content=config_svg(path)))
    files.append(
        File.generated(config, "maps/het-job-steps.svg", content=het_job_svg(CONFIGS / "hetero-partitions.yaml"))
    )
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:  # type: ignore[no-untyped-def]
    if "<!-- hpcplace:errors -->" in markdown:
        markdown = markdown.replace("<!-- hpcplace:errors -->", error_messages())
    return markdown
