"""Render a SlurmJob into the reviewable batch script, and a run directory (job.sbatch, plan.json,
its index, logs/). Output is byte-for-byte deterministic: no clock, no environment, no host facts.

Every interpolated value goes through a filter (`q`, `sbatch`, `comment`, `words`, `var_ref`);
`finalize` refuses a bare value, so a template (ours or a site's) cannot splice unquoted text.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import jinja2

from hpcplace.config.rank_syntax import compress_ranks
from hpcplace.config.safe_words import check_srun_argv
from hpcplace.errors import SlurmError, SpecError
from hpcplace.plan.gpumap import composed_lines, spanning_lines
from hpcplace.plan.plan import (
    JOB_RELATIVE_GPU_IDS,
    Plan,
    ProcessSpans,
    component_header,
    gpu_id_kind,
    plan_header,
    write_plan_json,
)
from hpcplace.plan.process_table import node_processes
from hpcplace.slurm import chain
from hpcplace.slurm.chain import chain_plan
from hpcplace.slurm.container_launch import (
    CARRY_DIR,
    CARRY_ENTRY,
    ENTER_SCRIPT,
    JOB_ID,
    GroupLaunch,
    group_launches,
    pyxis_problem,
    uses_containers,
)
from hpcplace.slurm.slurm_job import (
    FABRIC_NODES,
    LEAKED_GPU_VARIABLES,
    PREFLIGHT_LOG_PATTERN,
    PREFLIGHT_LOG_VARIABLE,
    RANK_LOG_VARIABLE,
    STEP_REQUEST_VARIABLES,
    Segment,
    SlurmJob,
    Step,
    all_nodes_srun_args,
    driver_step_args,
    lower,
    preflight_srun_args,
    rank_log_pattern,
    ray_step_segments,
    segment_srun_args,
)

TEMPLATE = "job.sbatch.j2"
LIBRARY_TEMPLATE = "hpcplace-lib.sh.j2"  # the bash functions job.sbatch sources (the same for every job)
LIBRARY_NAME = "hpcplace-lib.sh"
ENTER_TEMPLATE = "enter-container.sh.j2"  # RUN/hpcplace-runtime/enter-container.sh (Apptainer images)
RAY_TEMPLATE = "ray_job.sbatch.j2"  # the Ray launch mode (extends job.sbatch.j2)
BUILTIN_PREFIX = "hpcplace"  # a site template extends "hpcplace/job.sbatch.j2"
SCRIPT_NAME = "job.sbatch"
PLAN_NAME = "plan.json"
DEFAULT_LAUNCHER = ("hpcplace-run",)


class _Rendered(str):
    """Text a filter produced; the only kind of value `finalize` lets into the script."""


def quote_word(text: str) -> str:
    """shlex.quote, except that text holding control or other non-printable characters (newline,
    ESC, bidi overrides) is written as bash's $'...' with those characters escaped, so no raw
    control character reaches job.sbatch (a terminal would act on it when a reviewer `cat`s it)."""
    if text.isprintable():
        return shlex.quote(text)
    out = []
    for c in text:
        if c == "\\" or c == "'":
            out.append("\\" + c)
        elif c.isprintable():
            out.append(c)
        elif ord(c) < 0x100:
            out.append(f"\\x{ord(c):02x}")
        elif ord(c) < 0x10000:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(f"\\U{ord(c):08x}")
    return "$'" + "".join(out) + "'"


def shell_quote(value: object) -> _Rendered:
    """One shell word (`q`)."""
    return _Rendered(quote_word(str(value)))


def shell_words(values: Iterable[object]) -> _Rendered:
    """Several shell words (`words`)."""
    return _Rendered(" ".join(quote_word(str(v)) for v in values))


def sbatch_word(value: object) -> _Rendered:
    """One word of an `#SBATCH` line (`sbatch`). sbatch reads these lines with its own parser: it
    honours '...' and "..." quoting but drops every backslash and stops at a newline, so values
    holding either cannot be written there."""
    text = str(value)
    if not text.replace("\t", " ").isprintable() or "\\" in text:
        raise SlurmError(
            f"{text!r} cannot be written in an #SBATCH line (control character or backslash)",
            hint="rename the value (a partition, account, path, ...) without \\ or line breaks",
        )
    return _Rendered(shlex.quote(text))


def comment_text(value: object) -> _Rendered:
    """Text inside a `#` comment (`comment`): control characters are shown escaped."""
    text = str(value)
    return _Rendered("".join(c if c.isprintable() else repr(c)[1:-1] for c in text))


def var_ref(name: object) -> _Rendered:
    """`${NAME}` for a shell variable name (`var_ref`)."""
    text = str(name)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text):
        raise SlurmError(f"{text!r} is not a shell variable name")
    return _Rendered("${" + text + "}")


def var_name(name: object) -> _Rendered:
    """A shell variable name as written on the left of `=` (`name`)."""
    text = str(name)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text):
        raise SlurmError(f"{text!r} is not a shell variable name")
    return _Rendered(text)


def job_words(values: Iterable[object]) -> _Rendered:
    """`words`, except that container_launch.JOB_ID inside a word becomes the job's id when the script
    runs (`job_words`): pyxis's container names carry it."""
    out = []
    for value in values:
        parts = str(value).split(JOB_ID)
        out.append('"${SLURM_JOB_ID}"'.join(quote_word(p) if p else "" for p in parts))
    return _Rendered(" ".join(out))


def srun_words(values: Iterable[object]) -> _Rendered:
    """`words`, except that a segment's node list of a fabric-ordered component (slurm_job.FABRIC_NODES: a
    function call with digits only) is written as a command substitution, evaluated when the step starts
    (`srun_words`)."""
    out = []
    for value in values:
        parts = re.split(f"({FABRIC_NODES.pattern})", str(value))  # literal, call, literal, ...
        out.append("".join(f'"{p}"' if i % 2 else quote_word(p) if p else "" for i, p in enumerate(parts)) or "''")
    return _Rendered(" ".join(out))


def _finalize(value: object) -> object:
    if isinstance(value, _Rendered):
        return value
    raise SlurmError(
        f"template interpolates {value!r} without a quoting filter",
        hint="write {{ value|q }} (shell word), |sbatch, |comment or |words in the template",
    )


class _PackageLoader(jinja2.BaseLoader):
    """The templates shipped in the package `hpcplace.templates` (importlib.resources)."""

    def get_source(self, environment: jinja2.Environment, template: str) -> tuple[str, str | None, None]:
        res = resources.files("hpcplace.templates").joinpath(template)
        if not res.is_file():
            raise jinja2.TemplateNotFound(template)
        return res.read_text(encoding="utf-8"), None, None


def template_environment(template_dir: str | os.PathLike[str] | None = None) -> jinja2.Environment:
    """Jinja environment: a site's template dir first (if given), then the package templates
    (also reachable as `hpcplace/<name>` so a site template can extend the built-in one).
    One per template dir, kept: compiling the template costs far more than rendering it."""
    if template_dir is not None and not Path(template_dir).is_dir():
        raise SpecError(f"template directory {os.fspath(template_dir)!r} does not exist")
    return _environment(None if template_dir is None else os.fspath(template_dir))


@functools.lru_cache(maxsize=8)
def _environment(template_dir: str | None) -> jinja2.Environment:
    package = _PackageLoader()
    loaders: list[jinja2.BaseLoader] = []
    if template_dir is not None:
        loaders.append(jinja2.FileSystemLoader(template_dir))
    loaders += [jinja2.PrefixLoader({BUILTIN_PREFIX: package}), package]
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
        finalize=_finalize,
    )
    env.filters.update(
        q=shell_quote,
        words=shell_words,
        sbatch=sbatch_word,
        comment=comment_text,
        var_ref=var_ref,
        name=var_name,
        job_words=job_words,
        srun_words=srun_words,
    )
    return env


# ------------------------------------------------------------------------------------------------
# what the template sees (pure)


def _gpu_text(gpus: Sequence[str]) -> str:
    return compress_ranks(int(g) for g in gpus) if gpus else "-"


def segment_summary(plan: Plan, seg: Segment) -> str:
    """`a800 nodes 0-1: 2 tasks/node, GPUs 0-3 | 4-7, ranks 0-3` (node = index in the het component)."""
    group = plan.cluster.node_groups[seg.het_group]
    last = seg.relative + seg.num_nodes - 1
    nodes = f"node {seg.relative}" if last == seg.relative else f"nodes {seg.relative}-{last}"
    if seg.gpu_bind:
        gpus = "GPUs " + " | ".join(_gpu_text(g) for g in seg.task_gpus)
    elif seg.gpus_per_node:
        gpus = f"all {seg.gpus_per_node} GPUs of the node"
    else:
        gpus = "no GPUs"
    return (
        f"{group.label} (het {seg.het_group}) {nodes}: {seg.tasks_per_node} task(s)/node, {gpus}; "
        f"ranks {compress_ranks(seg.ranks)}"
    )


def placement_summary(plan: Plan, job: SlurmJob) -> list[str]:
    """The header: node groups -> partitions, components -> nodes/GPUs/ranks."""
    lines = [
        f"plan {plan.name!r} from {plan.source} ({plan.source_format}); schema hpcplace.plan/1",
        f"{plan.num_processes} processes, {len(plan.components)} components, "
        f"{len(plan.cluster.nodes)} nodes in {len(job.components)} het component(s)",
    ]
    lines += [line.strip() for line in composed_lines(plan.composed)]
    if gpu_id_kind(plan.slurm) == JOB_RELATIVE_GPU_IDS and any(g.gpus_per_node for g in plan.cluster.node_groups):
        lines += [
            "GPU ids: job-relative (slurm.exclusive: false): GPU k on a node is the k-th (ascending) of the GPUs",
            "  Slurm gives this job there; no --gpu-bind, each task's shim keeps its own (physical ids: status)",
        ]
    lines += ["", "het component <- node group: partition, nodes, GRES"]
    for hc in job.components:
        ranks = compress_ranks(hc.node_ranks or range(hc.first_node_rank, hc.first_node_rank + hc.num_nodes))
        lines.append(
            f"  {hc.het_group}: {hc.label} -> partition {hc.partition or '(none given: Slurm default)'}, "
            f"{hc.num_nodes} node(s) (cluster node ranks {ranks}), GRES {hc.gres or 'none'}"
        )
        if hc.charge is not None and (hc.charge.account or hc.charge.qos):
            lines.append(f"     charged to {hc.charge.describe(hc.label)}")
    lines += ["", "component: ranks -> nodes (index within the het component) and GPUs per local task"]
    steps_of: dict[str, list[Step]] = {}
    for step in job.steps:
        steps_of.setdefault(step.component, []).append(step)
    for comp in plan.components:
        extra = f", collocated in {comp.collocation_group}" if comp.collocation_group else ""
        lines.append(
            f"  {comp.name}: {comp.world_size} ranks, {comp.cpus_per_process} CPU(s)"
            f"{', ' + str(comp.mem_per_process_mb) + ' MB' if comp.mem_per_process_mb else ''}"
            f" per process{extra}"
        )
        for step in steps_of.get(comp.name, []):
            for seg in step.segments:
                lines.append("    " + segment_summary(plan, seg))
        if comp.spanning is not None:
            lines += ["    " + line for line in spanning_lines(comp.spanning, comp.processes)]
    if plan.warnings:
        lines += ["", "warnings:"] + [f"  {w}" for w in plan.warnings]
    return lines


@dataclass(frozen=True)
class SrunPart:
    """One colon-separated part of an srun that starts the shim: its options, and how its het group enters
    the shim (`"${hp_launcher[@]}"`, or the group's container options and launcher)."""

    args: tuple[str, ...]
    enter: _Rendered


def enter_words(launches: Sequence[GroupLaunch], het_group: int) -> _Rendered:
    """How a task of `het_group` starts the shim (a het component beyond the node groups has no container)."""
    if het_group >= len(launches) or launches[het_group].container is None:
        return _Rendered('"${hp_launcher[@]}"')
    return _Rendered(f'"${{hp_container_{het_group}[@]}}" "${{hp_launcher_{het_group}[@]}}"')


def container_views(plan: Plan, launches: Sequence[GroupLaunch]) -> list[dict[str, object]]:
    """The per-group arrays the script defines for groups that run in a container."""
    return [
        {
            "label": plan.cluster.node_groups[gl.het_group].label,
            "describe": gl.container.describe(),
            "srun_var": f"hp_container_{gl.het_group}",
            "srun": gl.srun_args,
            "launcher_var": f"hp_launcher_{gl.het_group}",
            "launcher": gl.launcher,
        }
        for gl in launches
        if gl.container is not None
    ]


@dataclass(frozen=True)
class StepView:
    """One step as the template needs it."""

    component: str
    title: str
    comments: tuple[str, ...]
    description: str
    ranks: str
    segment_ranks: str  # `G:RANKS ...`: each het group's ranks in its task order (srun names tasks per group)
    num_tasks: int  # exported as HPCPLACE_STEP_TASKS: a component may need several steps
    err_file: str
    segments: tuple[SrunPart, ...]
    command: tuple[str, ...]
    rank_log: str  # where each rank's shim writes its output (relative to the run dir, `{rank}` filled in)
    service: str = ""  # a service's step: "required" (its end fails the job) or "optional"; "" otherwise
    het_group: int = 0  # a service's het group: `scancel` names its step by that component's job id


def segment_ranks(job: SlurmJob, seg: Segment) -> str:
    """`G:RANKS` (hp_rank_of): srun numbers a het group's tasks over its nodes in Slurm's order, node-major.
    A component ordered by its fabric names its nodes in the plan's order instead, so the host's place in the
    plan (logs/nodes.txt) finds the rank: `G:RANKS:FIRST_NODE:TASKS_PER_NODE`."""
    text = f"{seg.het_group}:{compress_ranks(seg.ranks)}"
    if seg.het_group < len(job.components) and job.components[seg.het_group].fabric is not None:
        text += f":{seg.relative}:{seg.tasks_per_node}"
    return text


def step_views(plan: Plan, job: SlurmJob, launches: Sequence[GroupLaunch]) -> list[StepView]:
    out = []
    counts: dict[str, int] = {}
    services = {c.name: c.service for c in plan.components if c.service is not None}
    for step in job.steps:
        counts[step.component] = counts.get(step.component, 0) + 1
    for step in job.steps:
        several = counts[step.component] > 1
        desc = (
            f"step {step.index + 1}/{counts[step.component]}, " if several else ""
        ) + f"{step.num_tasks} task{'s' if step.num_tasks != 1 else ''}"
        title = f"component {step.component!r}, {desc}"
        if several:
            title += " (one srun cannot hold two layouts of one het component)"
        if step.collocation_group:
            title += f"; shares devices ({step.collocation_group}): --overlap, explicit --mem"
        err = f"logs/{step.name}.srun{step.index}.err" if several else f"logs/{step.name}.srun.err"
        out.append(
            StepView(
                component=step.component,
                title=title,
                comments=tuple(segment_summary(plan, s) for s in step.segments),
                description=desc,
                ranks=compress_ranks(step.ranks),
                segment_ranks=" ".join(segment_ranks(job, s) for s in step.segments),
                num_tasks=step.num_tasks,
                err_file=err,
                segments=tuple(
                    SrunPart(segment_srun_args(job, step, s), enter_words(launches, s.het_group)) for s in step.segments
                ),
                command=step.command,
                rank_log=rank_log_pattern(step.name),
                service=""
                if step.component not in services
                else "optional"
                if services[step.component].optional
                else "required",
                het_group=step.segments[0].het_group,
            )
        )
    return out


def render_library(template_dir: str | os.PathLike[str] | None = None) -> str:
    """hpcplace-lib.sh: the bash functions every job script sources (no job values: one text, one
    sha256 per hpcplace version and site template dir)."""
    try:
        return template_environment(template_dir).get_template(LIBRARY_TEMPLATE).render()
    except jinja2.TemplateError as exc:
        raise SpecError(f"template error: {exc}", hint="check the site template directory") from None


def render_script(
    plan: Plan,
    run_dir: str,
    *,
    job: SlurmJob | None = None,
    launcher: Sequence[str] = DEFAULT_LAUNCHER,
    template_dir: str | os.PathLike[str] | None = None,
    library: str | None = None,
) -> str:
    """The batch script text for `plan`, to live in (and run from) the absolute `run_dir`, beside
    the library `render_library` gives (or `library`, its text already rendered): the script names
    and checks its sha256."""
    if not os.path.isabs(run_dir):
        raise SpecError(f"run directory {run_dir!r} must be an absolute path")
    if not launcher:
        raise SpecError("the launcher command is empty", hint="default: hpcplace-run")
    check_srun_argv(tuple(launcher), "the launcher command")
    job = job or lower(chain_plan(plan, run_dir))  # a chain's links: under the chain's own job name
    env = template_environment(template_dir)
    problem = pyxis_problem(plan)
    if problem:
        raise SpecError(
            problem,
            hint="give every node group the same pyxis image, or run per-group images with runtime apptainer (or oci)",
        )
    launches = group_launches(plan, launcher, run_dir)
    common = dict(
        job=job,
        plan=plan,
        run_dir=run_dir,
        plan_file=PLAN_NAME,
        launcher=tuple(launcher),
        every_node=all_nodes_srun_args(job, "hpcplace-shm"),
        clean_nodes=all_nodes_srun_args(job, "hpcplace-clean"),
        preflight_nodes=[SrunPart(args, enter_words(launches, g)) for g, args in enumerate(preflight_srun_args(job))],
        containers=container_views(plan, launches),
        images=[gl.container.describe() if gl.container else "" for gl in launches],
        library_name=LIBRARY_NAME,
        library_sha256=sha256_text(library if library is not None else render_library(template_dir)),
        clear_leaked=tuple(a for v in LEAKED_GPU_VARIABLES for a in ("-u", v)),
        step_requests=STEP_REQUEST_VARIABLES,
        rank_log_variable=RANK_LOG_VARIABLE,
        preflight_log_variable=PREFLIGHT_LOG_VARIABLE,
        preflight_log=PREFLIGHT_LOG_PATTERN,
        chain_name=job.job_name,
        chain_state=chain.STATE_DIR,
        chain_file=chain.CHAIN_FILE,
    )
    started = ["", f"launcher (starts hpcplace's shim in every task): {shlex.join(launcher)}"]
    for gl in launches:
        if gl.container is not None:
            started.append(
                f"node group {plan.cluster.node_groups[gl.het_group].label}: in {gl.container.describe()}, "
                f"the shim run by the image's {gl.container.python} from the run directory: {shlex.join(gl.launcher)}"
            )
    try:
        if plan.launch.is_ray:
            from hpcplace.ray import ray_cluster
            from hpcplace.runtime.ip_order import group_key

            head = ray_cluster.head_node(plan)
            group = plan.cluster.node_groups[head.het_group]
            facts = {
                "num_nodes": group.num_nodes,
                "gpus_per_node": group.gpus_per_node,
                "node_env": group.node_env,
                "python_interpreter": group.python_interpreter,
            }
            # the head's group numbered in verl's/slime's IP order at job start: the driver follows its node 0
            follow = (
                {"group": head.het_group, "index": head.index, "wait_tenths": int(plan.launch.join_timeout * 10)}
                if group_key(plan.source_format, bool(plan.steer), facts) is not None
                else None
            )

            return env.get_template(RAY_TEMPLATE).render(
                **common,
                summary=placement_summary(plan, job) + started + ["", *ray_cluster.ray_summary(plan)],
                steps=("ray", "driver"),
                ray_lines=ray_cluster.ray_summary(plan),
                ray_segments=[
                    SrunPart(args, enter_words(launches, g)) for g, args in enumerate(ray_step_segments(job, plan))
                ],
                driver=SrunPart(
                    driver_step_args(job, plan, relative=follow is None),
                    enter_words(launches, ray_cluster.head_node(plan).het_group),
                ),
                driver_follow=follow,
                node_ranks=ray_cluster.node_ranks_text(plan),
                node_segments=" ".join(
                    f"{g}:{compress_ranks(plan.cluster.node_ranks(g))}" for g in range(len(plan.cluster.node_groups))
                ),
                driver_group=str(ray_cluster.head_node(plan).het_group) if job.is_het else "",
                service_steps=[v for v in step_views(plan, job, launches) if v.service],
            )
        return env.get_template(TEMPLATE).render(
            **common, summary=placement_summary(plan, job) + started, steps=step_views(plan, job, launches)
        )
    except jinja2.TemplateError as exc:
        raise SpecError(f"template error: {exc}", hint="check the site template directory") from None


# ------------------------------------------------------------------------------------------------
# writing a run directory (the only I/O here)


def check_renders(plan: Plan) -> None:
    """What `hpcplace plan` (and tune) check: the plan lowers and renders, in memory (no files)."""
    render_script(plan, "/nonexistent/hpcplace-plan-check")


@dataclass(frozen=True)
class RenderedRun:
    run_dir: Path
    script: Path
    plan_json: Path
    script_sha256: str
    library: Path


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def render_run(
    plan: Plan,
    run_dir: str | os.PathLike[str],
    *,
    launcher: Sequence[str] = DEFAULT_LAUNCHER,
    template_dir: str | os.PathLike[str] | None = None,
) -> RenderedRun:
    """Write run_dir/job.sbatch, run_dir/hpcplace-lib.sh (the functions it sources), run_dir/plan.json
    (+ plan.json.idx for the shim) and run_dir/logs/."""
    root = Path(os.path.abspath(run_dir))
    library = render_library(template_dir)
    script = render_script(plan, str(root), launcher=launcher, template_dir=template_dir, library=library)
    make_run_dir(root)
    make_run_dir(root / "logs")
    try:
        if uses_containers(plan):
            write_carried_runtime(root / CARRY_DIR, template_dir)
        write_plan_files(plan, root / PLAN_NAME)
        if plan.steer:
            write_steer_files(plan, root)
        if plan.launch.is_ray:
            write_ray_token(root)
        _write(root / LIBRARY_NAME, library)
        _write(root / SCRIPT_NAME, script, mode=0o755)
    except OSError as exc:
        raise OutputPathError(
            f"cannot write into the run directory {root}: {exc.strerror or exc}",
            hint="choose another directory with -o DIR",
        ) from None
    return RenderedRun(root, root / SCRIPT_NAME, root / PLAN_NAME, sha256_text(script), root / LIBRARY_NAME)


class OutputPathError(SpecError):
    """The run directory cannot be created or written (a file in the way, no permission)."""


def make_run_dir(path: str | os.PathLike[str]) -> Path:
    """mkdir -p that names the path and the reason instead of a traceback, and checks it is writable."""
    root = Path(os.path.abspath(path))
    try:
        root.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputPathError(
            f"cannot create the run directory {root}: a file is in the way", hint="choose another directory with -o DIR"
        ) from None
    except OSError as exc:
        raise OutputPathError(
            f"cannot create the run directory {root}: {exc.strerror or exc}",
            hint="choose another directory with -o DIR (one you can write)",
        ) from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise OutputPathError(
            f"the run directory {root} is not writable", hint="choose another directory with -o DIR (one you can write)"
        )
    return root


# The entry of the carried runtime. Written for any python3 an image may have: it says which Python it
# needs before importing code that an older one cannot read.
CARRIED_ENTRY = """\
# hpcplace-run inside a container image: hpcplace's shim, carried in the run directory (the image need
# not have hpcplace). Its directory goes first on PYTHONPATH, so the programs it starts (and the
# preflight's checks) import this same hpcplace.runtime.
import os
import sys

if sys.version_info < (3, 10):
    sys.stderr.write("hpcplace-run: FAILED: this image's Python is %d.%d (%s); hpcplace's shim needs Python 3.10 "
                     "or newer: set container.python to a newer one in the image\\n"
                     % (sys.version_info[0], sys.version_info[1], sys.executable))
    sys.exit(1)
here = os.path.dirname(os.path.abspath(__file__))
os.environ["PYTHONPATH"] = os.pathsep.join([here] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
from hpcplace.runtime.shim import main  # noqa: E402

sys.exit(main())
"""
CARRIED_PACKAGE = '"""hpcplace as carried into a container image: its in-job runtime only (hpcplace.runtime)."""\n'


def write_carried_runtime(target: Path, template_dir: str | os.PathLike[str] | None = None) -> None:
    """RUN/hpcplace-runtime: hpcplace/runtime/*.py (stdlib-only), the entry a container's Python runs, and
    the host-side enter script of Apptainer images."""
    runtime = resources.files("hpcplace.runtime")
    package = target / "hpcplace"
    make_run_dir(package / "runtime")
    _write(package / "__init__.py", CARRIED_PACKAGE)
    for item in sorted(runtime.iterdir(), key=lambda r: r.name):
        if item.name.endswith(".py") and item.is_file():
            _write(package / "runtime" / item.name, item.read_text(encoding="utf-8"))
    _write(target / CARRY_ENTRY, CARRIED_ENTRY)
    try:
        enter = template_environment(template_dir).get_template(ENTER_TEMPLATE).render()
    except jinja2.TemplateError as exc:
        raise SpecError(f"template error: {exc}", hint="check the site template directory") from None
    _write(target / ENTER_SCRIPT, enter, mode=0o755)


def write_steer_files(plan: Plan, root: Path) -> None:
    """RUN/ray/steer: the steering hook as sitecustomize.py (hpcplace/runtime/steer_hook.py, stdlib-only: every
    Python of the job runs it, hpcplace installed there or not) and its table, steer.json (the plan's rules)."""
    from hpcplace.runtime.ray_node import STEER_DIR, STEER_TABLE  # the runtime's own names

    folder = make_run_dir(root / STEER_DIR)
    hook = resources.files("hpcplace.runtime").joinpath("steer_hook.py").read_text(encoding="utf-8")
    _write(folder / "sitecustomize.py", hook)
    _write(folder / STEER_TABLE, json.dumps({"rules": [r.to_json() for r in plan.steer]}, indent=1) + "\n")


def write_ray_token(root: Path) -> None:
    """RUN/ray/auth_token: a new random token for the job's Ray cluster (every raylet and the driver present it:
    runtime/ray_node.py, auth_environment), so no one else on the nodes joins it or runs code in it; created
    readable by its owner only, as Ray's own ~/.ray/auth_token."""
    import secrets

    from hpcplace.runtime.ray_node import AUTH_TOKEN  # the runtime's own name

    path = root / AUTH_TOKEN
    make_run_dir(path.parent)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(secrets.token_hex(32))
    os.replace(tmp, path)


def write_plan_files(plan: Plan, path: Path) -> None:
    """plan.json, streamed (never one string), then its index from the spans the writer recorded."""
    from hpcplace.runtime.plan_index import write_index_from_parts  # lazily: the runtime's own module

    spans: list[ProcessSpans] = []
    header = plan_header(plan)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as out:
        size = write_plan_json(plan, out, spans, header=header)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    nodes = [{(v.het_group, v.group_node_index): v.ranks for v in node_processes(c.processes)} for c in plan.components]
    # JSON-ready values (tuples are written as lists), the same the plan.json text holds
    components = [component_header(c) for c in plan.components]
    write_index_from_parts(
        path,
        plan_size=size,
        plan=header,
        components=components,
        spans=[(s.offsets, s.lengths) for s in spans],
        nodes=nodes,
    )


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.chmod(tmp, mode)
    os.replace(tmp, path)
