"""`hpcplace` command line. Each command module registers its subcommand; errors are caught once
here and mapped to exit codes (never a traceback for a user error)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from hpcplace import __version__
from hpcplace.errors import HpcplaceError

# Modules that define `register(subparsers)`; each sets `func(args) -> int` on its parser.
COMMAND_MODULES = (
    "hpcplace.commands.plan_cmd",
    "hpcplace.commands.run_cmd",
    "hpcplace.commands.slurm_cmds",
    "hpcplace.commands.tune_cmd",
    "hpcplace.commands.attach_cmd",
)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Examples (epilogs) keep their lines; every option with a default shows it, unless its help
    already says what the default is."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or action.default in (None, False, [], argparse.SUPPRESS) or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


# One example block per subcommand (its --help epilog).
EXAMPLES = {
    "plan": """examples:
  hpcplace plan configs/hetero-partitions.yaml                # the readable plan
  hpcplace plan rlinf.yaml cluster.num_nodes=4 --json > plan.json
  hpcplace plan rlinf.yaml --svg map.svg --driver -- python main.py --config-name x
  hpcplace plan configs/hetero-partitions.yaml --svg - > map.svg  # the SVG on stdout""",
    "run": """examples:
  hpcplace run configs/collocated-demo.yaml --local -o runs/try1
  hpcplace run ~/hpcplace/configs/collocated-demo.yaml --local --workdir ~/hpcplace   # from another folder
  hpcplace run rlinf.yaml --local --driver -- python main.py --config-name x   # Ray mode, one machine""",
    "render": """examples:
  hpcplace render configs/hetero-partitions.yaml -o runs/review   # then read runs/review/job.sbatch
  hpcplace render rlinf.yaml --driver -- python main.py --config-name x""",
    "submit": """examples:
  hpcplace submit configs/hetero-partitions.yaml                  # run dir printed after the job id
  hpcplace submit rlinf.yaml -o /shared/runs/r1 --driver -- python main.py --config-name x
  hpcplace submit config.yaml --dry-run                           # the script and sbatch command only""",
    "validate": """examples:
  hpcplace validate configs/hetero-partitions.yaml
  hpcplace validate rlinf.yaml --driver -- python main.py""",
    "status": """examples:
  hpcplace status runs/hetero-20250101-120000       # a run directory written by submit
  hpcplace status 1234 --watch                      # a Slurm job id; exit code = how it ended""",
    "cancel": """examples:
  hpcplace cancel runs/hetero-20250101-120000
  hpcplace cancel 1234""",
    "attach": """examples:
  hpcplace attach runs/r1 --driver -- python main.py --config-name x   # on the held job's Ray head
  hpcplace attach runs/r1 --concurrent --driver -- python probe.py""",
    "exec": """examples:
  hpcplace exec runs/r1 --component actor --rank 3 -- nvidia-smi    # as rank 3 of actor, on its node
  hpcplace exec runs/r1 --node 1 -- df -h /dev/shm                  # on cluster node rank 1
  hpcplace exec runs/local1 --component actor --rank 0 -- env       # a `run --local` run dir: here""",
    "shell": """examples:
  hpcplace shell runs/r1 --component rollout --rank 0""",
    "release": """examples:
  hpcplace release runs/r1 --wait                 # a held job ends (and cleans up) like a finished one""",
    "logs": """examples:
  hpcplace logs runs/hetero-20250101-120000 --component actor --rank 0 --tail 50
  hpcplace logs runs/hetero-20250101-120000 --list""",
    "tune": """examples:
  hpcplace tune configs/hetero-partitions.yaml --profile configs/profiles/hetero-partitions.yaml --top 3
  hpcplace tune rlinf.yaml --profile costs.yaml --objective gpu-hours -o best.yaml   # then: hpcplace plan best.yaml
  hpcplace tune rlinf.yaml --profile costs.yaml --submit-top 2 --driver -- python main.py   # each as `submit` would""",
    "compare": """examples:
  hpcplace compare runs/rlinf-tune1-* runs/rlinf-tune2-*   # measured `hpcplace-metric iteration_s=` vs predicted""",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hpcplace",
        formatter_class=HelpFormatter,
        description="Exact process placement for RL post-training on heterogeneous Slurm clusters.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    for name, sub in subparsers.choices.items():
        sub.formatter_class = HelpFormatter
        sub.epilog = EXAMPLES.get(name, sub.epilog)
    return parser


# Commands that take `--driver -- CMD...` (the ray launch mode's driver; see hpcplace.config.launch).
DRIVER_COMMANDS = ("plan", "submit", "render", "run", "validate", "tune", "attach")


def main(argv: Sequence[str] | None = None) -> int:
    from hpcplace.config.launch import split_driver_argv

    parser = build_parser()
    try:
        rest, driver = split_driver_argv(sys.argv[1:] if argv is None else argv)
    except HpcplaceError as exc:
        print(f"hpcplace: error: {exc}", file=sys.stderr)
        return exc.exit_code
    words = [w for w in rest if not w.startswith("-")]
    command = None
    if words[:1] == ["exec"] and "--" in rest:  # `exec RUN ... -- CMD...`: CMD is never read by argparse
        i = rest.index("--")
        rest, command = rest[:i], rest[i + 1 :]
    args, unknown = parser.parse_known_args(rest)
    if unknown and hasattr(args, "hydra_overrides") and not any(w.startswith("-") for w in unknown):
        args.hydra_overrides = [*args.hydra_overrides, *unknown]  # Hydra-style overrides after options too
    elif unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command == "exec":
        args.argv = command or []
    if driver is not None and args.command not in DRIVER_COMMANDS:
        parser.error(f"--driver is an option of: {', '.join(DRIVER_COMMANDS)}")
    args.driver = driver
    try:
        return int(args.func(args) or 0)
    except HpcplaceError as exc:
        print(f"hpcplace: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("hpcplace: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
