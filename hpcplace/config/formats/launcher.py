"""`torchrun ...` and `deepspeed ...` commands (verl's SFT trainer, OpenRLHF's train_sft/dpo/rm/kto/prm), planned
as the launcher starts them: one process per rank, each running the launcher's program, started by hpcplace in the
steps mode with the rank environment the launcher would give it.

torchrun (torch/distributed/run.py, torch 2.13): `--nnodes` nodes (a `MIN:MAX` range only when MIN == MAX) of
`--nproc-per-node` processes each (an int; `gpu`/`auto`: the node's GPUs); each rank runs
`python -u [-m] SCRIPT ARGS` (`--no-python`: `SCRIPT ARGS`) with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT set and every GPU of its node visible (the program picks GPU LOCAL_RANK).

deepspeed (deepspeed/launcher/runner.py and launch.py, deepspeed 0.19.8): without a hostfile (the default
/job/hostfile is a cluster's own file) its pool is the one node it runs on, with all its GPUs; `--num_gpus K` takes
GPUs 0..K-1, `--include`/`--exclude localhost:IDS` a selection; `--num_nodes` > 1 is its own error. Each rank runs
`python -u [-m] SCRIPT --local_rank=R ARGS` with CUDA_VISIBLE_DEVICES = the node's selection and the same rank
variables. hpcplace gives each process its rank variables (LOCAL_RANK is the `--local_rank` value; the programs
here read either), and plans only selections of GPUs 0..K-1 (each rank sees the node's GPUs, uses LOCAL_RANK).

See docs/formats/launchers.md."""

from __future__ import annotations

from dataclasses import dataclass, replace

from hpcplace.config import limits
from hpcplace.config.formats.command import FrameworkCommand, program_index
from hpcplace.config.formats.common import (
    SiteGpus,
    SlurmFacts,
    facts_node_group,
    hpcplace_block,
    slurm_facts,
    slurm_job_options,
    with_block_settings,
)
from hpcplace.config.spec import ComponentSpec, ExperimentSpec, PlacementEntry, build_cluster
from hpcplace.config.yaml_source import View, YamlDocument, closest
from hpcplace.errors import SpecError

COMPONENT = "worker"  # the one component: the launcher's ranks
# option spelling -> (its name, whether it takes a value): the launchers' argparse parsers at the versions above
TORCHRUN_OPTIONS: dict[str, tuple[str, bool]] = {
    **{
        spelling: (name, True)
        for name in (
            "nnodes",
            "nproc_per_node",
            "rdzv_backend",
            "rdzv_endpoint",
            "rdzv_id",
            "rdzv_conf",
            "max_restarts",
            "monitor_interval",
            "start_method",
            "event_log_handler",
            "log_dir",
            "redirects",
            "tee",
            "local_ranks_filter",
            "duplicate_stdout_filters",
            "duplicate_stderr_filters",
            "node_rank",
            "master_addr",
            "master_port",
            "local_addr",
            "logs_specs",
            "numa_binding",
            "signals_to_handle",
            "shutdown_timeout",
        )
        for spelling in (f"--{name}", f"--{name.replace('_', '-')}")
    },
    "--role": ("role", True),
    "-r": ("redirects", True),
    "-t": ("tee", True),
    **{
        spelling: (name, False)
        for name in ("standalone", "module", "no_python", "run_path", "virtual_local_rank")
        for spelling in (f"--{name}", f"--{name.replace('_', '-')}")
    },
    "-m": ("module", False),
}
DEEPSPEED_OPTIONS: dict[str, tuple[str, bool]] = {
    **{
        f"--{name}": (name, True)
        for name in (
            "hostfile",
            "include",
            "exclude",
            "num_nodes",
            "num_gpus",
            "master_port",
            "master_addr",
            "node_rank",
            "launcher",
            "launcher_args",
            "save_pid",
            "autotuning",
            "bind_core_list",
            "ssh_port",
            "venv_script",
            "log_level",
        )
    },
    "--num_accelerators": ("num_gpus", True),
    "-H": ("hostfile", True),
    "-i": ("include", True),
    "-e": ("exclude", True),
    **{
        f"--{name}": (name, False)
        for name in (
            "module",
            "no_python",
            "no_local_rank",
            "no_ssh",
            "no_ssh_check",
            "force_multi",
            "enable_each_rank_log",
            "bind_cores_to_rank",
            "quiet",
        )
    },
    "-q": ("quiet", False),
}
LAUNCHER_OPTIONS = {"torchrun": TORCHRUN_OPTIONS, "deepspeed": DEEPSPEED_OPTIONS}


@dataclass(frozen=True)
class LauncherCommand:
    """A launcher's command read as its parser reads it: each option given (name -> value, or "" for a
    switch, and the index of its word), and the index of the program (script or module)."""

    launcher: str
    options: dict[str, tuple[str, int]]
    script: int
    prefix: tuple[str, ...] = ()  # `uv run [OPTIONS]` before the launcher: each rank runs its program under it too

    def value(self, name: str) -> str | None:
        return self.options[name][0] if name in self.options else None

    def at(self, name: str) -> int:
        return self.options[name][1] if name in self.options else 0


def read_launcher(command: FrameworkCommand) -> LauncherCommand:
    """The launcher's own options (before its program), as argparse reads them: `--opt value`, `--opt=value`,
    a unique prefix of a long option (allow_abbrev), the last of a repeated option winning. The launcher may
    come after `uv run [OPTIONS]`."""
    start = program_index(command.argv)
    launcher = command.argv[start].rsplit("/", 1)[-1] if start < len(command.argv) else ""
    if launcher not in LAUNCHER_OPTIONS:  # `--format torchrun` stated for another command
        raise command.error(
            start if start < len(command.argv) else 0,
            f"the torchrun and deepspeed formats read a launcher's command, and this one starts with {launcher!r}",
            hint="give the command as the launcher takes it (torchrun --nproc-per-node=8 -m MODULE ..., "
            "deepspeed --module MODULE ...), or state the format of the program it runs",
        )
    table = LAUNCHER_OPTIONS[launcher]
    options: dict[str, tuple[str, int]] = {}
    i = start + 1
    argv = command.argv
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "-":
        spelling, eq, attached = argv[i].partition("=")
        name, takes_value = _option(command, i, spelling, table, launcher)
        if not takes_value:
            if eq:
                raise command.error(i, f"{launcher}: argument {spelling}: ignored explicit argument {attached!r}")
            options[name] = ("", i)
        elif eq:
            options[name] = (attached, i)
        elif i + 1 < len(argv):
            options[name] = (argv[i + 1], i)
            i += 1
        else:
            raise command.error(i, f"{launcher}: argument {spelling}: expected one argument")
        i += 1
    if i >= len(argv):
        raise command.error(
            len(argv) - 1,
            f"{launcher}: the following arguments are required: "
            + ("training_script" if launcher == "torchrun" else "user_script"),
            hint=f"{launcher} [OPTIONS] SCRIPT.py ARGS... (or -m/--module MODULE ARGS...)",
        )
    prefix = tuple(argv[:start]) if list(argv[:2]) == ["uv", "run"] else ()
    return LauncherCommand(launcher, options, i, prefix)


def _option(
    command: FrameworkCommand, index: int, spelling: str, table: dict[str, tuple[str, bool]], launcher: str
) -> tuple[str, bool]:
    if spelling in table:
        return table[spelling]
    matches = {table[s] for s in table if spelling.startswith("--") and s.startswith(spelling)}
    if len(matches) == 1:
        return matches.pop()
    if matches:
        raise command.error(
            index,
            f"{launcher}: ambiguous option: {spelling} could match "
            + ", ".join(sorted(s for s in table if s.startswith(spelling))),
        )
    near = closest(spelling, list(table))
    raise command.error(
        index,
        f"{launcher}: unrecognized argument {spelling} before the program ({launcher}'s parser refuses it)",
        hint=f"did you mean {near}?" if near else f"{launcher}'s options come before the program, its own after",
    )


def parse(command: FrameworkCommand, blocks: YamlDocument, site_gpus: SiteGpus | None) -> ExperimentSpec:
    root = blocks.root()
    read = read_launcher(command)
    slurm_view = root.get("slurm")
    options = slurm_job_options(slurm_view)
    facts = slurm_facts(slurm_view)
    where = slurm_view if slurm_view is not None else root
    notes: list[str] = []
    gpn = _gpus_per_node(facts, where, site_gpus, read.launcher, notes)
    if read.launcher == "torchrun":
        nodes, per_node = _torchrun_counts(command, read, gpn, notes)
    else:
        nodes, per_node = 1, _deepspeed_count(command, read, gpn, notes)
    if per_node > gpn:
        raise command.error(
            read.at("nproc_per_node" if read.launcher == "torchrun" else "num_gpus"),
            f"{read.launcher} starts {per_node} processes on each node, and a node has {gpn} GPUs: the ranks with "
            f"LOCAL_RANK {gpn} or more have no GPU of their own",
            hint=f"at most {gpn} processes per node (or a partition with more GPUs per node)",
        )
    nodes = limits.nodes(nodes, command.location(read.at("nnodes")), "nodes")
    program = _program(command, read, notes)
    group = facts_node_group("default", facts, nodes, gpn, where)
    total = nodes * per_node
    entry = PlacementEntry(
        (COMPONENT,), ("node",), f"0-{nodes - 1}:0-{total - 1}", location=command.location(read.script)
    )
    notes.append(
        f"{read.launcher}'s {total} rank(s) ({nodes} node(s) x {per_node}) are started by hpcplace, each running "
        f"{' '.join(program[:4])} ... with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and "
        "MASTER_PORT set and its node's GPUs visible, as the launcher gives them"
    )
    components = {COMPONENT: ComponentSpec(COMPONENT, command=program)}
    name, given = hpcplace_block(root, {COMPONENT}, blocks.path)
    if COMPONENT in given:  # env, CPUs, memory of the ranks; a command of its own replaces the launcher's program
        settings = given[COMPONENT]
        components[COMPONENT] = replace(
            with_block_settings(components[COMPONENT], settings), command=settings.command or program
        )
    return ExperimentSpec(
        name,
        build_cluster((group,), where),
        (entry,),
        components,
        blocks.path,
        read.launcher,
        options,
        notes=tuple(notes),
    )


def _int(command: FrameworkCommand, index: int, text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise command.error(index, f"{what} {text!r} is not a whole number (invalid int value)") from None


def _torchrun_counts(command: FrameworkCommand, read: LauncherCommand, gpn: int, notes: list[str]) -> tuple[int, int]:
    """(nodes, processes per node) as torchrun's parse_min_max_nnodes and determine_local_world_size read them."""
    at = read.at
    nnodes = read.value("nnodes") or "1:1"
    parts = nnodes.split(":")
    if len(parts) > 2:
        raise command.error(at("nnodes"), f'torchrun: nnodes={nnodes} is not in "MIN:MAX" format')
    low, high = (_int(command, at("nnodes"), p, "torchrun --nnodes") for p in (parts[0], parts[-1]))
    if not 0 < low <= high:
        raise command.error(
            at("nnodes"), f"torchrun: min_nodes must be > 0 and <= max_nodes, got min_nodes={low}, max_nodes={high}"
        )
    if low != high:
        raise command.error(
            at("nnodes"),
            f"torchrun --nnodes {nnodes}: an elastic range, whose node count torchrun's rendezvous decides at run "
            "time; a Slurm job has its nodes up front",
            hint=f"give one count, e.g. --nnodes={high}",
        )
    nproc = read.value("nproc_per_node") or "1"
    if nproc in ("gpu", "auto"):
        per_node = gpn
        notes.append(f"torchrun --nproc-per-node {nproc}: one process per GPU of the node ({gpn})")
    elif nproc.lstrip("-").isdigit():
        per_node = int(nproc)
        if per_node < 1:
            raise command.error(at("nproc_per_node"), f"torchrun --nproc-per-node {nproc}: no process per node")
    else:
        raise command.error(
            at("nproc_per_node"),
            f"torchrun --nproc-per-node {nproc!r}: "
            + ("one process per CPU core: no GPU placement" if nproc == "cpu" else "Unsupported nproc_per_node value"),
            hint="a number of processes per node, or gpu/auto for one per GPU",
        )
    if "standalone" in read.options and high > 1:
        raise command.error(
            at("standalone"),
            f"torchrun --standalone makes each node its own rendezvous on localhost, and --nnodes is {high}: the "
            "nodes never meet (torchrun waits for the others until its timeout)",
            hint="drop --standalone for several nodes, or use --nnodes=1",
        )
    if "virtual_local_rank" in read.options:
        raise command.error(
            at("virtual_local_rank"),
            "torchrun --virtual-local-rank gives each worker LOCAL_RANK 0 and one GPU; hpcplace gives each rank its "
            "node's GPUs and its LOCAL_RANK, as torchrun does without it",
            hint="remove --virtual-local-rank",
        )
    for name in ("node_rank", "master_addr", "master_port", "rdzv_endpoint", "rdzv_backend", "rdzv_id"):
        if name in read.options:
            notes.append(
                f"torchrun --{name.replace('_', '-')} is not used: hpcplace starts every node's ranks itself and "
                "gives them MASTER_ADDR/MASTER_PORT (rank 0's node)"
            )
    return high, per_node


def _deepspeed_count(command: FrameworkCommand, read: LauncherCommand, gpn: int, notes: list[str]) -> int:
    """Processes (GPUs) on the one node of a deepspeed command without a hostfile (runner.py's main)."""
    at = read.at
    if read.value("hostfile") is not None:
        raise command.error(
            at("hostfile"),
            f"deepspeed --hostfile {read.value('hostfile')}: the hosts and their slots are read from that file at "
            "run time, and are not the job's nodes",
            hint="remove --hostfile: hpcplace plans the one-node pool deepspeed uses without one (--num_gpus K)",
        )
    nodes = _int(command, at("num_nodes"), read.value("num_nodes") or "-1", "deepspeed --num_nodes")
    gpus = _int(command, at("num_gpus"), read.value("num_gpus") or "-1", "deepspeed --num_gpus")
    include, exclude = read.value("include") or "", read.value("exclude") or ""
    if (nodes >= 0 or gpus >= 0) and (include or exclude):
        raise command.error(
            at("include" if include else "exclude"), "deepspeed: Cannot specify num_nodes/gpus with include/exclude"
        )
    if nodes > 1:
        raise command.error(
            at("num_nodes"),
            "deepspeed: Num nodes is >1 but no extra nodes available via hostfile",
            hint="deepspeed's nodes come from a hostfile hpcplace cannot plan; for several nodes use torchrun, or "
            "plan one node (--num_nodes 1)",
        )
    if include and exclude:
        raise command.error(at("exclude"), "deepspeed: include_str and exclude_str are mutually exclusive")
    slots = list(range(gpn))
    if include:
        slots = _slots(command, at("include"), include, gpn)
    elif exclude:
        dropped = set(_slots(command, at("exclude"), exclude, gpn))
        slots = [s for s in slots if s not in dropped]
    elif gpus > 0:
        slots = list(range(gpus))
    if not slots:
        raise command.error(at("include" if include else "exclude"), "deepspeed: no GPU is left to run on")
    if slots != list(range(len(slots))) and (include or exclude):
        raise command.error(
            at("include" if include else "exclude"),
            f"deepspeed runs on GPUs {','.join(map(str, slots))} of the node: hpcplace plans a node's ranks on its "
            "GPUs from 0 up (each rank sees the node's GPUs and takes GPU LOCAL_RANK)",
            hint=f"use --num_gpus {len(slots)}",
        )
    if "no_local_rank" not in read.options:
        notes.append(
            "deepspeed passes --local_rank=R to each rank; hpcplace gives the same as LOCAL_RANK in its environment "
            "(the command is one for all ranks), which OpenRLHF and DeepSpeed read when --local_rank is not given"
        )
    return len(slots)


def _slots(command: FrameworkCommand, index: int, text: str, gpn: int) -> list[int]:
    """GPU ids of `localhost[:ids]` (deepspeed's NODE_SPEC@NODE_SPEC; without a hostfile only localhost exists)."""
    out: list[int] = []
    for spec in text.split("@"):
        host, colon, ids = spec.partition(":")
        if host != "localhost":
            raise command.error(
                index,
                f"deepspeed: Hostname '{host}' not found in hostfile (without one its only host is localhost)",
                hint="localhost:0,1,... names GPUs of the node it runs on",
            )
        for item in ids.split(",") if colon else [str(g) for g in range(gpn)]:
            slot = _int(command, index, item, "deepspeed slot")
            if not 0 <= slot < gpn:
                raise command.error(index, f"deepspeed: No slot '{slot}' specified on host 'localhost' ({gpn} GPUs)")
            out.append(slot)
    return sorted(set(out))


def _program(command: FrameworkCommand, read: LauncherCommand, notes: list[str]) -> tuple[str, ...]:
    """The command each rank runs, as the launcher builds it (`sys.executable` is `python` on the job's PATH)."""
    module, no_python = "module" in read.options, "no_python" in read.options
    if module and no_python:
        flag = "--no-python" if read.launcher == "torchrun" else "--no_python"
        raise command.error(
            read.at("no_python"), f"{read.launcher}: Don't use both the '{flag}' flag and the '--module' flag"
        )
    script, args = command.argv[read.script], command.argv[read.script + 1 :]
    if read.prefix:
        notes.append(f"`{' '.join(read.prefix)}` runs {read.launcher}: each rank runs its program under it too")
    if no_python:
        return (*read.prefix, script, *args)
    notes.append(f"{read.launcher} runs its program with its own Python: each rank runs `python` from the job's PATH")
    return (*read.prefix, "python", "-u", *(("-m",) if module else ()), script, *args)


def _gpus_per_node(facts: SlurmFacts, view: View, site_gpus: SiteGpus | None, launcher: str, notes: list[str]) -> int:
    if facts.gpus_per_node is not None:
        if facts.gpus_per_node < 1:
            raise view.error(f"gpus_per_node is 0: {launcher}'s ranks each use a GPU")
        return limits.gpus_per_node(facts.gpus_per_node, view.location(), "gpus_per_node")
    site = site_gpus(facts.partition, facts.gpu_type) if site_gpus is not None else None
    if site is None or site.count is None:
        raise SpecError(
            "GPUs per node are unknown" + (f" ({site.source})" if site is not None else ""),
            location=view.location(),
            hint=site.fix
            if site is not None and site.fix
            else f"{launcher} counts the node's GPUs at run time; Slurm needs the count up front: set "
            "slurm.gpus_per_node (e.g. 8)",
        )
    notes.append(f"{site.count} GPUs per node, {site.source}")
    return site.count
