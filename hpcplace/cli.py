"""`hpcplace` command line. Each command module registers its subcommand; errors are caught once
here and mapped to exit codes (never a traceback for a user error)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from hpcplace.errors import HpcplaceError

# Modules that define `register(subparsers)`; each sets `func(args) -> int` on its parser.
COMMAND_MODULES = (
    "hpcplace.commands.plan_cmd",
    "hpcplace.commands.run_cmd",
    "hpcplace.commands.slurm_cmds",
    "hpcplace.commands.tune_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hpcplace",
        description="Exact process placement for RL post-training on heterogeneous Slurm clusters.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


# Commands that take `--driver -- CMD...` (the ray launch mode's driver; see hpcplace.launch).
DRIVER_COMMANDS = ("submit", "render", "run", "validate")


def main(argv: Sequence[str] | None = None) -> int:
    from hpcplace.launch import split_driver_argv

    parser = build_parser()
    try:
        rest, driver = split_driver_argv(sys.argv[1:] if argv is None else argv)
    except HpcplaceError as exc:
        print(f"hpcplace: error: {exc}", file=sys.stderr)
        return exc.exit_code
    args = parser.parse_args(rest)
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
