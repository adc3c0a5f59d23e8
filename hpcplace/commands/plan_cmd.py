"""`hpcplace plan CONFIG`: the readable summary, `--json` for the versioned plan, `--svg FILE`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from hpcplace.config.formats import FORMATS
from hpcplace.config.formats.common import SiteGpuCount, SiteGpus

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hpcplace.errors import SlurmError
    from hpcplace.plan.plan import Plan
    from hpcplace.slurm.validate import ClusterFacts


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments every command that reads a config shares."""
    parser.add_argument(
        "config",
        help="experiment YAML (native, RLinf, ROLL or AReaL), or for verl, NeMo-RL, OpenRLHF and slime the YAML "
        "with hpcplace's blocks beside the framework's command (launch.driver or --driver -- CMD...)",
    )
    parser.add_argument("--format", choices=FORMATS, help="input format (default: detected)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set slurm.gpus_per_node=8 (repeatable)",
    )
    parser.add_argument(
        "hydra_overrides",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="Hydra-style overrides after the config, as the frameworks take them: "
        "cluster.num_nodes=2, model=other, +new.key=1, ~key (applied after --set)",
    )
    parser.add_argument(
        "--strict-topology",
        action="store_true",
        help="refuse a plan whose tensor-parallel groups or engines cross a block or leaf switch of a node "
        "group's topology (default: a warning)",
    )


def config_overrides(args: argparse.Namespace) -> list[str]:
    """--set values, then the Hydra-style overrides written after the config."""
    from hpcplace.config.hydra_config import HYDRA_OVERRIDE
    from hpcplace.errors import SpecError

    extra = list(getattr(args, "hydra_overrides", []) or [])
    for text in extra:
        if "=" in args.config and text.endswith((".yaml", ".yml")):  # `plan k=v X.yaml`: the config goes first
            raise SpecError(
                f"the config comes first: {args.config!r} looks like an override and {text!r} like the config",
                hint=f"hpcplace {args.command} {text} {args.config}",
            )
        if not HYDRA_OVERRIDE.match(text) or ("=" not in text and not text.startswith("~")):
            raise SpecError(
                f"unexpected argument {text!r} after the config",
                hint="overrides after the config look like KEY=VALUE (cluster.num_nodes=2), +KEY=VALUE or ~KEY",
            )
    return list(args.overrides) + extra


def add_driver_argument(parser: argparse.ArgumentParser) -> None:
    """`--driver -- CMD...`: cut off by hpcplace.cli before argparse (so the driver's own options are
    never read as ours); declared here for --help only."""
    parser.add_argument(
        "--driver",
        nargs=argparse.REMAINDER,
        metavar="-- CMD",
        help="run in the Ray launch mode with this driver on the head (everything after it); "
        "overrides launch.driver of the config",
    )


class LiveCluster:
    """The live cluster as `scontrol show partition|node` reports it: asked at most once per command, and
    only when needed (GPU counts a config leaves to run time, then `validate`)."""

    def __init__(self) -> None:
        self._asked: ClusterFacts | SlurmError | None = None

    def facts(self) -> ClusterFacts:
        """The facts; SlurmError when no controller answers."""
        from hpcplace.errors import SlurmError
        from hpcplace.slurm.validate import read_cluster_facts

        if self._asked is None:
            try:
                self._asked = read_cluster_facts()
            except SlurmError as exc:
                self._asked = exc
        if isinstance(self._asked, SlurmError):
            raise self._asked
        return self._asked

    def site_gpus(self, partition: str | None, gpu_type: str | None) -> SiteGpuCount:
        """A SiteGpus: a site without Slurm answers with the reason, and the config's own error stands."""
        from hpcplace.errors import SlurmError
        from hpcplace.slurm.validate import site_gpu_count

        try:
            facts = self.facts()
        except SlurmError as exc:
            return SiteGpuCount(None, "the live cluster could not be asked: " + exc.message.splitlines()[0])
        return site_gpu_count(facts, partition, gpu_type)


def local_site_gpus() -> SiteGpus:
    """For `run --local` this machine is the node: a count left to run time is its GPUs (the shell's
    CUDA_VISIBLE_DEVICES, else NVML), as RLinf and ROLL count them."""
    import os

    def lookup(partition: str | None, gpu_type: str | None) -> SiteGpuCount:
        from hpcplace.local.local_backend import local_gpus

        gpus = local_gpus(os.environ)
        if not gpus:
            return SiteGpuCount(
                None, "this machine has no GPU visible to `run --local` (CUDA_VISIBLE_DEVICES, else NVML)"
            )
        return SiteGpuCount(len(gpus), "this machine's visible GPUs (`run --local`)")

    return lookup


def plan_with_launch(args: argparse.Namespace, cluster: LiveCluster | None = None) -> Plan:
    """Plan the config, with `--driver -- CMD...` (if given) applied to its launch block. GPU counts the
    config leaves to run time come from the live cluster (`cluster`, to share its facts with the
    command's validation), or for a run on this machine (--local) from this machine."""
    from dataclasses import replace

    from hpcplace.config.formats.command import COMMAND_FORMATS
    from hpcplace.config.launch import with_driver, with_hold
    from hpcplace.plan.driver_config import driver_config_problem
    from hpcplace.plan.planner import plan_from_file
    from hpcplace.plan.runnable import driven_by_framework

    site = local_site_gpus() if getattr(args, "local", False) else (cluster or LiveCluster()).site_gpus
    driver = getattr(args, "driver", None)
    plan = plan_from_file(
        args.config, format=args.format, overrides=config_overrides(args), site_gpus=site, driver=driver
    )
    if plan.source_format in COMMAND_FORMATS and COMMAND_FORMATS[plan.source_format].mode == "steps":
        driver = None  # the launcher's command was the input: hpcplace starts its processes, no Ray driver
    launch = with_hold(with_driver(plan.launch, driver), getattr(args, "hold", False), driven_by_framework(plan))
    plan = plan if launch == plan.launch else replace(plan, launch=launch)
    if any(g.topology is not None and g.topology.kind == "site" for g in plan.cluster.node_groups):
        from hpcplace.slurm.validate import with_site_topology

        plan = with_site_topology(plan, (cluster or LiveCluster()).facts())
    if getattr(args, "strict_topology", False):
        from hpcplace.plan.topology import refuse_crossings

        refuse_crossings(plan.cluster, plan.topology_crossings)
    problem = driver_config_problem(
        plan,
        lambda overrides: plan_from_file(args.config, format=args.format, overrides=overrides, site_gpus=site),
        os.path.abspath(getattr(args, "workdir", None) or "."),
        args.command,
    )
    if problem is None:
        return plan
    if args.command != "plan":  # a job would run another config than the planned one
        raise problem
    return replace(plan, warnings=plan.warnings + (str(problem).replace("\n  HINT:", "; HINT:"),))


def check_output(option: str, path: Path, *, example: str) -> None:
    """A file the user named on the command line (`--svg FILE`, `tune -o FILE`) can be written there: not
    a folder, its folder exists; else a usage error naming the option (check it before costly work)."""
    from hpcplace.errors import SpecError

    if path.is_dir():
        raise SpecError(f"{option} {path}: is a directory", hint=f"give a file name, e.g. {option} {example}")
    if not path.parent.is_dir():
        raise SpecError(
            f"{option} {path}: the folder {path.parent} does not exist",
            hint=f"create it first (mkdir -p {path.parent}) or write the file elsewhere",
        )


def write_output(option: str, path: Path, text: str, *, example: str) -> None:
    """Write a file the user named on the command line: check_output, and an unwritable path is a usage
    error too, never a traceback."""
    from hpcplace.errors import SpecError

    check_output(option, path, example=example)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise SpecError(
            f"{option} {path}: cannot write it ({exc.strerror or exc})", hint="give a writable file path"
        ) from None


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("plan", help="expand a config into the exact per-process plan")
    add_config_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the versioned plan JSON")
    parser.add_argument(
        "--svg",
        metavar="FILE",
        help="also write the device map as SVG; `--svg -` prints the SVG on stdout instead of the summary",
    )
    parser.add_argument(
        "--max-nodes",
        type=int,
        default=64,
        metavar="N",
        help="nodes shown in the summary and the map, a positive number (default 64)",
    )
    add_driver_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hpcplace.errors import SpecError
    from hpcplace.plan.gpumap import summary, svg
    from hpcplace.plan.plan import write_plan_json
    from hpcplace.plan.runnable import nothing_to_run
    from hpcplace.slurm.render import check_renders

    if args.max_nodes < 1:
        raise SpecError(
            f"--max-nodes {args.max_nodes}: give a positive number of nodes to show",
            hint="e.g. --max-nodes 64 (the default)",
        )
    if args.svg == "-" and args.json:
        raise SpecError(
            "--svg - and --json both print on stdout: give one of them",
            hint="write the map to a file (--svg map.svg) next to --json",
        )
    plan = plan_with_launch(args)
    check_renders(plan)
    nothing = nothing_to_run(plan)
    if nothing is not None:  # render and submit refuse it; the plan itself is still worth seeing
        print(
            f"hpcplace: warning: {nothing.message}: render and submit refuse this plan; HINT: {nothing.hint}",
            file=sys.stderr,
        )
    if args.svg == "-":  # the SVG is the output
        sys.stdout.write(svg(plan, max_nodes=args.max_nodes))
        return 0
    if args.svg:
        write_output("--svg", Path(args.svg), svg(plan, max_nodes=args.max_nodes), example="plan.svg")
        total = len(plan.cluster.nodes)
        shown = min(total, args.max_nodes)
        print(
            f"hpcplace: wrote the device map to {args.svg} ({shown} of {total} nodes"
            + (", --max-nodes for more)" if shown < total else ")"),
            file=sys.stderr,
        )
    if args.json:
        out = getattr(sys.stdout, "buffer", None)  # bytes: no text-layer encoding of ~0.5 GB at scale
        sys.stdout.flush()
        write_plan_json(plan, out if out is not None else sys.stdout)  # streamed, never one string
    else:
        sys.stdout.write(summary(plan, max_nodes=args.max_nodes))
    return 0
