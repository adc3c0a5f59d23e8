"""Lowering: Plan -> SlurmJob, the heterogeneous job as data (no I/O, no environment, no clock).

Each node group is one het-job component that takes its nodes whole (`--exclusive`, every GPU of
the node as GRES) so the plan's physical GPU indices are the ones the job holds. Each RL component
becomes one `srun` step made of colon-separated segments (`srun A : B`), one per het group it uses;
a segment is a run of consecutive nodes (`--relative`, `--nodes`) with the same per-node layout:
the same task count and, per local task id, the same GPUs (`--gpu-bind=map_gpu|mask_gpu`). Slurm
cannot put two segments of one het group in one srun ("Duplicate het groups in single srun not
supported"), so a component whose nodes differ in layout inside one group gets one more step per
extra layout. Every step is `--overlap` with explicit `--mem`, so collocated components (and
components sharing a node) run concurrently. See docs/slurm-job.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import chain
from typing import TypeVar

from hpcplace.config.cluster import Charge, NodeGroup, charges
from hpcplace.config.slurm_options import (
    DEFAULT_LIMIT_SIGNAL,
    SLURM_JOB_OPTIONS,
    extra_args,
    flag,
    kill_wait,
    limit_signal,
    sbatch_time_ok,
    time_limit_seconds,
)
from hpcplace.config.topology import BLOCK, TREE
from hpcplace.errors import SlurmError, SpecError
from hpcplace.plan.plan import JOB_RELATIVE_GPU_IDS, PHYSICAL_GPU_IDS, ComponentPlan, Plan, gpu_id_kind
from hpcplace.plan.process_table import LocalRankError, NodeProcesses, Slot, node_processes
from hpcplace.plan.runnable import commandless_components
from hpcplace.ray.ray_cluster import DRIVER_STEP, RAY_STEP, head_node

# Variables the batch step leaks into every step; `srun --export` cannot clear them (lab facts).
LEAKED_GPU_VARIABLES = ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "SLURM_JOB_GPUS")

# Requests srun reads from its environment, each also as <NAME>_HET_GROUP_<K> (and _PACK_GROUP_<K>) for
# `srun --het-group=K`: in the batch script they hold the leader component's (or group K's) allocation
# request, not a step's. Which of them srun reads, and how they mix with options, differs by version:
# SRUN_CPUS_PER_TASK (22.05 only) and SLURM_CPUS_PER_TASK (23.11+) set -c, which implies --exact;
# SLURM_TRES_PER_TASK (23.11+, cpu=N of the leader from 25.05) stops srun ("cpus_per_task set by two
# different environment variables") beside a disagreeing per-group SLURM_CPUS_PER_TASK_HET_GROUP_K;
# SLURM_CPUS_PER_GPU implies --exact and excludes -c; the GPU ones add GPUs or a binding the plan did not
# ask for (SLURM_NTASKS_PER_GPU even refuses --ntasks-per-node); SLURM_EXACT refuses --whole; SLURM_STEP_GRES
# is read when --gres is not given. The job script unsets them once (`hp_clear_requests`), and attached
# steps drop them, so every srun gets exactly the CPUs, memory and GRES its own options name (memory:
# `--mem` given on the command line already overrides SLURM_MEM_PER_* on every version).
STEP_REQUEST_VARIABLES = (
    "SLURM_CPUS_PER_TASK",
    "SRUN_CPUS_PER_TASK",
    "SLURM_TRES_PER_TASK",
    "SLURM_CPUS_PER_GPU",
    "SLURM_GPUS",
    "SLURM_GPUS_PER_NODE",
    "SLURM_GPUS_PER_SOCKET",
    "SLURM_GPUS_PER_TASK",
    "SLURM_NTASKS_PER_GPU",
    "SLURM_NTASKS_PER_TRES",
    "SLURM_GPU_BIND",
    "SLURM_TRES_BIND",
    "SLURM_STEP_GRES",
    "SLURM_EXACT",
)

NO_GRES = "--gres=none"  # a step without devices says so: by default a step gets every GRES of the job
WHOLE_NODE_CPUS = "--whole"  # every CPU the job holds on the node (-c would imply --exact: only those)
RANK_LOG_VARIABLE = "HPCPLACE_RANK_LOG"  # the shim writes its rank's output to this path ({rank} filled in)
PREFLIGHT_LOG_VARIABLE = "HPCPLACE_PREFLIGHT_LOG"  # the preflight writes its node's output here ({node})
PREFLIGHT_LOG_PATTERN = "logs/preflight.{node}.out"  # relative to the run dir; {node}: SLURMD_NODENAME


@dataclass(frozen=True)
class HetComponent:
    """One het-job component: a node group and the `#SBATCH` options that allocate it."""

    het_group: int
    label: str
    partition: str | None
    num_nodes: int
    first_node_rank: int
    gres: str | None
    sbatch_args: tuple[str, ...]
    charge: Charge | None = None  # the account/QOS it is charged to (written on its own lines)
    node_ranks: tuple[int, ...] = ()  # the cluster node rank of each of its nodes, in order
    hardware_gres: str | None = None  # the non-GPU part of `gres` (robots: `robot:4`), given to its steps too
    # "block" / "tree": the job orders the component's nodes by block or leaf switch at start (hp_fabric), so
    # its steps name their nodes (`--nodelist`, hp_nodes) instead of counting from Slurm's first (`--relative`)
    fabric: str | None = None
    fabric_unit: int = 0  # the plan's consecutive nodes per block, segment or switch (hpcplace.plan.topology)

    @property
    def gres_arg(self) -> str:
        """srun's GRES option for a step holding every device the component has on a node."""
        return f"--gres={self.gres}" if self.gres else NO_GRES


@dataclass(frozen=True)
class Segment:
    """One colon-separated part of a step: `num_nodes` consecutive nodes of one het group, from
    node index `relative`, each running `tasks_per_node` tasks bound alike."""

    het_group: int
    relative: int
    num_nodes: int
    tasks_per_node: int
    cpus_per_task: int
    mem_mb: int  # per node; 0 = all of the job's memory on the node
    gpus_per_node: int
    gpu_type: str | None
    gpu_bind: str | None
    task_gpus: tuple[tuple[str, ...], ...]  # per local task id: physical GPUs (for the comment)
    ranks: range | tuple[int, ...]  # in task order: node-major, then local rank (`joined_ranks`)

    @property
    def num_tasks(self) -> int:
        return self.num_nodes * self.tasks_per_node


@dataclass(frozen=True)
class Step:
    """One `srun` of a component; `index` counts the steps of that component (usually only 0)."""

    component: str
    index: int
    name: str  # step name and log-file stem: a slug of the component name
    segments: tuple[Segment, ...]
    command: tuple[str, ...]
    collocation_group: str | None

    @cached_property
    def ranks(self) -> range | tuple[int, ...]:
        """Component ranks in srun task order (SLURM_PROCID): segments in order, node-major
        (`joined_ranks`; computed once per step)."""
        return joined_ranks(seg.ranks for seg in self.segments)

    @property
    def num_tasks(self) -> int:
        return sum(seg.num_tasks for seg in self.segments)


@dataclass(frozen=True)
class SlurmJob:
    """The whole job: components to allocate, steps to run, and batch-only options."""

    name: str
    job_name: str
    components: tuple[HetComponent, ...]
    steps: tuple[Step, ...]
    batch_args: tuple[str, ...]  # options of the batch (first) component only
    num_processes: int
    kill_wait_s: int | None = None  # SIGTERM -> SIGKILL grace for steps; None = Slurm's KillWait
    requeue: bool = False
    limit_signal: str | None = None  # `SIG@SECONDS` of --signal (the time-limit warning), None = off
    preflight: bool = True  # slurm.preflight: one check task per node before any program (runtime/preflight.py)

    @property
    def is_het(self) -> bool:
        return len(self.components) > 1


# ------------------------------------------------------------------------------------------------
# small arithmetic, tested on its own


def slug(text: str, fallback: str = "job") -> str:
    """A name safe for Slurm names and file names: letters, digits, `.`, `_`, `-`."""
    out = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._-")[:64]
    return out or fallback


def unique_slugs(names: Sequence[str]) -> tuple[str, ...]:
    """`slug` of each name, made unique by appending `-<index>` where two would collide."""
    slugs = [slug(n, "component") for n in names]
    seen: dict[str, int] = {}
    for s in slugs:
        seen[s.lower()] = seen.get(s.lower(), 0) + 1
    return tuple(s if seen[s.lower()] == 1 else f"{s}-{i}" for i, s in enumerate(slugs))


def gpu_mask(gpus: Iterable[str]) -> str:
    """Physical GPU indices -> Slurm's hex mask (`["0", "1"]` -> `0x3`)."""
    mask = 0
    for g in gpus:
        mask |= 1 << int(g)
    return f"0x{mask:x}"


def gpu_bind(task_gpus: Sequence[Sequence[str]]) -> str:
    """`--gpu-bind` value binding local task k to exactly task_gpus[k]: `map_gpu` when every task
    holds one GPU (easier to read), else `mask_gpu`."""
    if all(len(g) == 1 for g in task_gpus):
        return "map_gpu:" + ",".join(g[0] for g in task_gpus)
    return "mask_gpu:" + ",".join(gpu_mask(g) for g in task_gpus)


def joined_ranks(parts: Iterable[Sequence[int]]) -> range | tuple[int, ...]:
    """The ranks of `parts` one after the other: a `range` when they make one consecutive run (the
    usual case, and then nothing is copied: a step of a 16,384-node plan holds up to 1.3 million
    ranks), else a tuple. Always the same form for the same ranks, so segments and steps compare
    equal whatever sequences they were built from."""
    parts = list(parts)
    start: int | None = None
    stop = 0
    for part in parts:
        if not part:
            continue
        first = part[0]
        if start is None:
            start = stop = first
        run = range(first, first + len(part))
        if first != stop or not (part == run if isinstance(part, range) else tuple(part) == tuple(run)):
            return tuple(chain.from_iterable(parts))
        stop = run.stop
    return () if start is None else range(start, stop)


_K = TypeVar("_K")
# A node's layout, the key its segment is grouped by: (tasks, GPUs, the GPU binding, each task's GPUs)
_Layout = tuple[int, int, str | None, tuple[tuple[str, ...], ...]]


def consecutive_runs(items: Sequence[tuple[int, _K]]) -> list[tuple[int, int, _K]]:
    """[(index, key), ...] sorted by index -> [(first index, count, key)] for runs of consecutive
    indices with equal keys."""
    runs: list[tuple[int, int, _K]] = []
    for index, key in items:
        if runs:
            first, count, last_key = runs[-1]
            if index == first + count and key == last_key:
                runs[-1] = (first, count + 1, key)
                continue
        runs.append((index, 1, key))
    return runs


# ------------------------------------------------------------------------------------------------
# lowering


def lower(plan: Plan) -> SlurmJob:
    """Plan -> SlurmJob. Raises SlurmError for what one het component cannot express."""
    options = dict(plan.slurm)
    unknown = sorted(set(options) - SLURM_JOB_OPTIONS)
    if unknown:
        raise SpecError(f"unknown slurm option(s) {unknown}", hint=f"known: {', '.join(sorted(SLURM_JOB_OPTIONS))}")
    job_name = slug(options.get("job_name") or plan.name, "hpcplace")
    exclusive = gpu_id_kind(plan.slurm) == PHYSICAL_GPU_IDS
    extra = extra_args(options.get("extra_sbatch_args", ""))
    time_args: tuple[str, ...] = ()
    if options.get("time"):
        if not sbatch_time_ok(options["time"]):
            raise SpecError(
                f"slurm.time {options['time']!r} is not a Slurm time limit", hint="write e.g. 30, 4:00:00 or 2-00:00:00"
            )
        time_args = (f"--time={options['time']}",)
    warning = limit_signal(options.get("signal_before_limit", DEFAULT_LIMIT_SIGNAL))
    limit_s = time_limit_seconds(options.get("time", ""))
    if warning and limit_s is not None and "signal_before_limit" not in options:
        # the default warns a tenth of a short job's time before its limit, not 2 minutes of a 3-minute job
        sig, seconds = warning.split("@")
        warning = f"{sig}@{min(int(seconds), max(1, limit_s // 10))}"
    if warning and limit_s is not None and int(warning.split("@")[1]) >= limit_s:
        # Slurm would signal every task as soon as it starts
        raise SpecError(
            f"slurm.signal_before_limit {options['signal_before_limit']!r} is not shorter than "
            f"slurm.time {options['time']!r}",
            hint="warn fewer seconds before the limit, or turn the warning off with false",
        )
    requeue = flag(options, "requeue", False)
    # The warning goes to the batch script only (`B:`, component 0 runs it), which passes the user's
    # signal on (hpcplace-lib.sh, hp_deliver_warning): to every step (steps mode), or to the Ray driver's
    # step alone (Slurm would signal every raylet and Ray worker, stopping the cluster); and only once they
    # run, at the seconds asked for: Slurm may send it up to a minute early, before the programs started.
    lead_args: tuple[str, ...] = ()
    if warning:
        lead_args = (f"--signal=B:{BATCH_WARNING_SIGNAL}@{warning.split('@')[1]}",)
    if requeue:
        time_args += ("--requeue",)
    check_spanning_workers(plan)
    check_roll_cpu_nodes(plan)
    cluster = plan.cluster
    node_needs = _node_needs(plan)
    if not plan.launch.is_ray and not commandless_components(plan):  # what the steps will ask of the nodes
        check_node_capacity(plan, node_needs)  # (the Ray mode's one task per node asks for none per process)
    components = tuple(
        _het_component(
            plan,
            gi,
            group,
            chain_component_name(job_name, gi) if plan.launch.chain else job_name,
            (*time_args, *(lead_args if gi == 0 else ()), *extra),
            exclusive,
            node_needs,
            charge,
        )
        for gi, (group, charge) in enumerate(zip(cluster.node_groups, charges(cluster.node_groups)))
    )
    batch_args = []
    if options.get("mail_user"):
        batch_args.append(f"--mail-user={options['mail_user']}")
    if options.get("mail_type"):
        batch_args.append(f"--mail-type={options['mail_type']}")
    if requeue:  # every attempt's batch log in one file (Slurm truncates it on requeue otherwise)
        batch_args.append("--open-mode=append")
    names = unique_slugs([c.name for c in plan.components])
    steps: list[Step] = []
    for comp, name in zip(plan.components, names):
        steps.extend(_component_steps(plan, comp, name))
    return SlurmJob(
        plan.name,
        job_name,
        components,
        tuple(steps),
        tuple(batch_args),
        plan.num_processes,
        kill_wait(options.get("kill_wait")),
        requeue,
        warning,
        flag(options, "preflight", True),
    )


def check_node_capacity(plan: Plan, needs: dict[int, tuple[int, int]]) -> None:
    """A node group's declared CPUs or memory per node must hold what its busiest node's processes ask for
    (`cpus_per_process`, `mem_per_process` summed): Slurm refuses such a step only after the queue wait
    (`More processors requested than permitted`)."""
    for gi, group in enumerate(plan.cluster.node_groups):
        for j, rank in enumerate(plan.cluster.node_ranks(gi)):
            cpus, mb = needs.get(rank, (0, 0))
            for what, declared, need, unit, key in (
                ("CPUs", group.cpus_per_node, cpus, "", "cpus_per_process"),
                ("memory", group.mem_per_node_mb, mb, " MB", "mem_per_process"),
            ):
                if declared and need > declared:
                    asks = ", ".join(
                        f"{comp.name} {n} x {comp.cpus_per_process if what == 'CPUs' else comp.mem_per_process_mb}"
                        for comp in plan.components
                        if (n := sum(1 for p in comp.processes if p.cluster_node_rank == rank))
                    )
                    raise SpecError(
                        f"node group {group.label!r}: node {j} runs processes asking for {need}{unit} "
                        f"{what} ({asks}), but the group's nodes have {declared}{unit}",
                        location=group.location,
                        hint=f"lower {key}, place fewer processes on the node, or correct the group's "
                        f"{'cpus_per_node' if what == 'CPUs' else 'mem_per_node'}",
                    )


def check_spanning_workers(plan: Plan) -> None:
    """Workers wider than a node run only in the Ray launch mode: the framework spreads one worker over
    its nodes through Ray, whereas a job step would start each of its per-node processes on its own."""
    if plan.launch.is_ray:
        return
    for comp in plan.components:
        span = comp.spanning
        if span is None:
            continue
        wide = next(w for w in span.workers if len(w) > 1)
        nodes = [comp.processes[r].cluster_node_rank for r in wide]
        raise SpecError(
            f"worker {comp.name!r} needs {span.gpus_per_worker} GPUs per worker; worker "
            f"{span.workers.index(wide)} spans nodes {nodes}: {span.framework} runs such a worker across nodes "
            "through Ray, while the steps launch mode runs each process of a job step on one node",
            location=span.location,
            hint="use the Ray launch mode: `launch: {mode: ray, driver: [python, examples/start_rlvr_pipeline.py, "
            "...]}` in the config, or `--driver -- CMD...` on the command line; or keep "
            "tensor_parallel_size*pipeline_parallel_size within one node's GPUs",
        )


def check_roll_cpu_nodes(plan: Plan) -> None:
    """ROLL's ResourceManager makes placement groups only on nodes with GPUs and puts CPU-only worker r on
    GPU node r % nodes: under its driver, `slurm.cpu_partition`'s nodes would idle while the plan
    says the CPU workers run there."""
    if not plan.launch.is_ray or plan.source_format != "roll":
        return
    for group in plan.cluster.node_groups:
        if not any(group.gpus_per_node):
            raise SpecError(
                f"slurm.cpu_partition {group.partition!r}: ROLL's driver runs CPU-only workers on its GPU nodes "
                "(worker r on GPU node r % nodes, in its placement groups), never on nodes without GPUs",
                location=group.location,
                hint="leave slurm.cpu_partition/cpu_nodes out in the Ray launch mode (the plan then puts the CPU "
                "workers where ROLL does); a CPU partition serves only components with their own commands",
            )


# what Slurm sends the batch script as the time-limit warning; the script sends the user's signal on
BATCH_WARNING_SIGNAL = "USR2"


def _uniform(group: NodeGroup, values: Sequence[int], what: str) -> int:
    if len(set(values)) > 1:
        raise SlurmError(
            f"node group {group.label!r} (partition {group.partition or 'default'}) has different {what} per node "
            f"{list(values)}; a het-job component asks every node for the same GRES",
            hint="split the node group into groups whose nodes have equal counts",
            location=group.location,
        )
    return values[0] if values else 0


def hardware_gres_count(group: NodeGroup) -> int:
    """The per-node GRES count asked for a group's robots (or other non-GPU hardware): the fewest any
    node of the group has. A het component asks every node for the same GRES, but robots, unlike GPUs,
    need none of Slurm's per-task binding: which hardware rank lives on which node is the plan's (RLinf:
    a node's robots are the hardware configs naming its node rank), so nodes with more robots than the
    fewest are fine; 0 asks for none (a node of the group has no such hardware)."""
    assert group.hardware is not None
    return min(group.hardware.per_node, default=0)


def _node_needs(plan: Plan) -> dict[int, tuple[int, int]]:
    """Per cluster node rank: (CPUs, memory MB) the plan's processes ask for, all components summed."""
    needs: dict[int, tuple[int, int]] = {}
    for comp in plan.components:
        mem = comp.mem_per_process_mb or 0
        for view in _node_views(comp):
            n = len(view.ranks)
            cpus, mb = needs.get(view.cluster_node_rank, (0, 0))
            needs[view.cluster_node_rank] = (cpus + comp.cpus_per_process * n, mb + mem * n)
    return needs


def _node_views(comp: ComponentPlan) -> list[NodeProcesses]:
    try:
        return node_processes(comp.processes)
    except LocalRankError as exc:
        raise SlurmError(
            f"component {comp.name!r}: {exc}", hint="the plan is inconsistent; re-run the planner"
        ) from None


def chain_component_name(job_name: str, het_group: int) -> str:
    """A chain link's het component `het_group`'s job name: the leader's is the chain's, the others' carry
    their index. Slurm's `--dependency=singleton` holds a job while an earlier job of its name has not ended;
    with one name on every component, a het job's later component waits for its own earlier-numbered leader,
    which cannot start without it: the link pends forever (measured, Slurm 22.05). With a name each, a link's
    component k waits only for the earlier links' component k."""
    return job_name if het_group == 0 else f"{job_name}.{het_group}"


def _het_component(
    plan: Plan,
    gi: int,
    group: NodeGroup,
    job_name: str,
    tail: Sequence[str],
    exclusive: bool,
    needs: dict[int, tuple[int, int]],
    charge: Charge,
) -> HetComponent:
    """The #SBATCH options of one node group: whole nodes (`--exclusive`) with every GPU of the node
    as GRES, so the plan's physical GPU indices are the job's; `tail` = time limit and extra args."""
    ranks = plan.cluster.node_ranks(gi)
    gres_parts = []
    gpus = _uniform(group, group.gpus_per_node, "GPU counts")
    if gpus:
        gres_parts.append(f"gpu:{group.gpu_type}:{gpus}" if group.gpu_type else f"gpu:{gpus}")
    hardware_gres = None
    if group.hardware is not None:
        count = hardware_gres_count(group)
        if count:
            hardware_gres = f"{group.hardware.gres_name}:{count}"
            gres_parts.append(hardware_gres)
    gres = ",".join(gres_parts) or None
    args = (
        [f"--job-name={job_name}"]
        + ([f"--partition={group.partition}"] if group.partition else [])
        + [f"--nodes={group.num_nodes}"]
    )
    if exclusive:
        args.append("--exclusive")
    else:
        # Whole-node CPUs are not taken: ask for what the busiest node of the group needs.
        cpus = group.cpus_per_node or max([needs.get(r, (1, 0))[0] for r in ranks] + [1])
        args += ["--ntasks-per-node=1", f"--cpus-per-task={cpus}"]
    if gres:
        args.append(f"--gres={gres}")
    if group.mem_per_node_mb:
        args.append(f"--mem={group.mem_per_node_mb}M")
    elif exclusive:
        args.append("--mem=0")
    else:
        mem = max([needs.get(r, (0, 0))[1] for r in ranks] + [0])
        args.append(f"--mem={mem}M" if mem else "--mem=0")
    if group.constraint:
        args.append(f"--constraint={group.constraint}")
    args += topology_args(group)
    # Written on every component they apply to, inherited ones too: sbatch carries them over from
    # an earlier component anyway, and the script should say so (see cluster.charges).
    if charge.account:
        args.append(f"--account={charge.account}")
    if charge.qos:
        args.append(f"--qos={charge.qos}")
    args += tail
    return HetComponent(
        gi,
        group.label,
        group.partition,
        group.num_nodes,
        ranks[0],
        gres,
        tuple(args),
        charge,
        node_ranks=ranks,
        hardware_gres=hardware_gres,
        fabric=group.topology.kind if group.topology is not None else None,
        fabric_unit=group.topology.unit_nodes(group.num_nodes) if group.topology is not None else 0,
    )


def topology_args(group: NodeGroup) -> list[str]:
    """What the planner chose for the group's fabric (hpcplace.plan.topology): whole segments of a block
    topology, at most so many leaf switches of a tree."""
    topology = group.topology
    if topology is None:
        return []
    if topology.kind == BLOCK and topology.segment is not None and group.num_nodes > topology.segment:
        return [f"--segment={topology.segment}"]
    if topology.kind == TREE and topology.switches is not None:
        return [f"--switches={topology.switches}"]
    return []


def _node_layout(
    slots: Sequence[Slot], node_gpus: int, relative: bool = False
) -> tuple[tuple[tuple[str, ...], ...], str | None]:
    """Per-node key: GPUs per local task, and the bind (None: every task sees all step GPUs). Job-relative
    GPU ids (a job sharing its nodes) bind nothing: Slurm's --gpu-bind names the node's GPUs, the job holds
    whichever were free; each task sees all of the job's there and the shim keeps its own (runtime/devices.py)."""
    task_gpus = tuple(s.visible_accelerators for s in slots)
    if not node_gpus or not slots[0].isolate_accelerator or relative:
        return task_gpus, None
    return task_gpus, gpu_bind(task_gpus)


def _component_steps(plan: Plan, comp: ComponentPlan, name: str) -> list[Step]:
    """Group the component's processes per node, then into segments, then into steps."""
    if comp.cpus_per_process < 1:
        raise SpecError(f"component {comp.name!r}: cpus_per_process must be >= 1")
    cluster = plan.cluster
    views = sorted(_node_views(comp), key=lambda v: (v.het_group, v.group_node_index))
    keys: dict[tuple[int, int], _Layout] = {}  # (id of a slots tuple, GPUs of the node) -> layout key
    relative = gpu_id_kind(plan.slurm) == JOB_RELATIVE_GPU_IDS
    per_group: dict[int, list[tuple[int, tuple[_Layout, Sequence[int]]]]] = {}
    for view in views:
        g, j = view.het_group, view.group_node_index
        node_gpus = cluster.node_groups[g].gpus_per_node[j]
        key = keys.get((id(view.slots), node_gpus))
        if key is None:
            task_gpus, bind = _node_layout(view.slots, node_gpus, relative)
            key = keys[(id(view.slots), node_gpus)] = (len(view.slots), node_gpus, bind, task_gpus)
        per_group.setdefault(g, []).append((j, (key, view.ranks)))
    mem_per_task = comp.mem_per_process_mb or 0
    segments_by_group: dict[int, list[Segment]] = {}
    for g, items in sorted(per_group.items()):
        group = cluster.node_groups[g]
        keyed = [(j, key) for j, (key, _ranks) in items]
        ranks_of = {j: ranks for j, (_key, ranks) in items}
        for first, count, key in consecutive_runs(keyed):
            ntasks, node_gpus, bind, task_gpus = key
            ranks = joined_ranks(ranks_of[j] for j in range(first, first + count))
            segments_by_group.setdefault(g, []).append(
                Segment(
                    het_group=g,
                    relative=first,
                    num_nodes=count,
                    tasks_per_node=ntasks,
                    cpus_per_task=comp.cpus_per_process,
                    mem_mb=mem_per_task * ntasks,
                    gpus_per_node=node_gpus,
                    gpu_type=group.gpu_type if node_gpus else None,
                    gpu_bind=bind,
                    task_gpus=task_gpus,
                    ranks=ranks,
                )
            )
    num_steps = max((len(s) for s in segments_by_group.values()), default=0)
    steps = []
    for k in range(num_steps):
        segs = tuple(s[k] for _g, s in sorted(segments_by_group.items()) if k < len(s))
        steps.append(Step(comp.name, k, name, segs, comp.command, comp.collocation_group))
    return steps


# ------------------------------------------------------------------------------------------------
# srun arguments


# The nodes of a segment of a component the job ordered by its fabric (hp_fabric): hp_nodes prints them when
# the step starts. Only digits vary, so render.srun_words may write it unquoted.
FABRIC_NODES = re.compile(r"\$\(hp_nodes [0-9]+ [0-9]+ [0-9]+\)")


def fabric_nodes(het_group: int, first: int, count: int) -> str:
    return f"$(hp_nodes {het_group} {first} {count})"


def segment_srun_args(job: SlurmJob, step: Step, seg: Segment) -> tuple[str, ...]:
    """The srun options of one segment (every segment carries its own full set): CPUs, memory and GRES
    always explicit, nothing left to what srun would read from the batch environment. No `--output`:
    each task's shim writes its rank's log (`rank_log_path`), so no file name depends on srun's %t
    (numbered per het group from Slurm 25.11) or %N (the hostname before 25.11, the NodeName after);
    what a task prints before its shim knows its rank reaches srun's stderr (the step's .srun.err)."""
    args: list[str] = []
    if job.is_het:
        args.append(f"--het-group={seg.het_group}")
    fabric = seg.het_group < len(job.components) and job.components[seg.het_group].fabric is not None
    args += [
        f"--nodes={seg.num_nodes}",
        f"--nodelist={fabric_nodes(seg.het_group, seg.relative, seg.num_nodes)}"
        if fabric
        else f"--relative={seg.relative}",
        f"--ntasks={seg.num_tasks}",
        f"--ntasks-per-node={seg.tasks_per_node}",
        "--distribution=block",
        f"--cpus-per-task={seg.cpus_per_task}",
        f"--mem={seg.mem_mb}M" if seg.mem_mb else "--mem=0",
    ]
    gres = []
    if seg.gpus_per_node:
        gres.append(f"gpu:{seg.gpu_type}:{seg.gpus_per_node}" if seg.gpu_type else f"gpu:{seg.gpus_per_node}")
    hardware = job.components[seg.het_group].hardware_gres if seg.het_group < len(job.components) else None
    if hardware:
        gres.append(hardware)
    args.append(f"--gres={','.join(gres)}" if gres else NO_GRES)
    if seg.gpus_per_node and seg.gpu_bind:
        args.append(f"--gpu-bind={seg.gpu_bind}")
    args += ["--overlap", "--kill-on-bad-exit=1", f"--job-name={step.name}"]
    return tuple(args)


def all_nodes_srun_args(job: SlurmJob, name: str) -> tuple[tuple[str, ...], ...]:
    """Per het component, srun options for one task on every node (the /dev/shm setup/cleanup): one CPU,
    no devices."""
    out = []
    for comp in job.components:
        args = [f"--het-group={comp.het_group}"] if job.is_het else []
        args += [
            f"--nodes={comp.num_nodes}",
            f"--ntasks={comp.num_nodes}",
            "--ntasks-per-node=1",
            "--cpus-per-task=1",
            "--mem=0",
            NO_GRES,
            "--overlap",
            f"--job-name={name}",
        ]
        out.append(tuple(args))
    return tuple(out)


def preflight_srun_args(job: SlurmJob) -> tuple[tuple[str, ...], ...]:
    """Per het component, srun options for the preflight: one task on every node holding the node's
    GRES (so it sees the GPUs the job's steps get). No `--output` (its %N is the hostname or the
    NodeName, by version): the preflight writes logs/preflight.<node>.out itself (SLURMD_NODENAME, the
    name logs/nodes.txt holds), and what slurmstepd or srun say when it cannot start there (`execve():
    ...`, a device constraint that failed) reaches srun's stderr, logs/preflight.srun.err."""
    out = []
    for comp, args in zip(job.components, all_nodes_srun_args(job, "hpcplace-preflight")):
        out.append(tuple(comp.gres_arg if a == NO_GRES else a for a in args))
    return tuple(out)


def rank_log_name(step_name: str, rank: int | str) -> str:
    """Per-rank log file (relative to the run dir), written by the rank's shim: named by component
    (its step's name) and plan rank only, never by host or srun task number."""
    return f"logs/{step_name}.rank{rank}.out"


def rank_log_pattern(step_name: str) -> str:
    """`rank_log_name` with `{rank}` for the shim to fill in (the job script passes it as HPCPLACE_RANK_LOG)."""
    return rank_log_name(step_name, "{rank}")


# ------------------------------------------------------------------------------------------------
# the Ray launch mode's two steps (the cluster's shape: hpcplace.ray.ray_cluster)


def ray_step_segments(job: SlurmJob, plan: Plan) -> tuple[tuple[str, ...], ...]:
    """srun options of the raylet step, one segment per het component: one task per node, all the
    node's CPUs (`--whole`: Ray's workers run in the raylet's cgroup), GPUs (so the raylet sees exactly
    the node's planned GPUs), other devices and memory, --overlap."""
    out = []
    for comp in job.components[: len(plan.cluster.node_groups)]:
        args = [f"--het-group={comp.het_group}"] if job.is_het else []
        args += [
            f"--nodes={comp.num_nodes}",
            f"--ntasks={comp.num_nodes}",
            "--ntasks-per-node=1",
            WHOLE_NODE_CPUS,
            "--mem=0",
            comp.gres_arg,
        ]
        args += ["--overlap", "--kill-on-bad-exit=1", f"--job-name={RAY_STEP}", f"--output=logs/{RAY_STEP}.srun.out"]
        out.append(tuple(args))
    return tuple(out)


def driver_step_args(job: SlurmJob, plan: Plan, *, relative: bool = True) -> tuple[str, ...]:
    """srun options of the driver: one task on the head (the node of cluster node rank 0), holding the
    head's CPUs, memory and devices as a step given no options would (said explicitly). Without `relative`
    the script adds the head's node itself (a head group numbered in IP order when the job starts)."""
    head = head_node(plan)
    args = [f"--het-group={head.het_group}"] if job.is_het else []
    comp = job.components[head.het_group] if head.het_group < len(job.components) else None
    place = [f"--relative={head.index}"] if relative else []
    if relative and comp is not None and comp.fabric is not None:  # the head's host in the fabric order
        place = [f"--nodelist={fabric_nodes(head.het_group, head.index, 1)}"]
    args += [
        "--nodes=1",
        *place,
        "--ntasks=1",
        WHOLE_NODE_CPUS,
        "--mem=0",
        comp.gres_arg if comp is not None else NO_GRES,
        "--overlap",
        f"--job-name={DRIVER_STEP}",
        f"--output=logs/{DRIVER_STEP}.out",
    ]
    return tuple(args)
