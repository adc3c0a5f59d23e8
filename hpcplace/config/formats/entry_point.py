"""The entry point of a framework command (the word that says which program runs), and the error for a
command whose entry point no command format knows.

The entry point is the module after `python -m`, else the first word ending in `.py` after the interpreter
(and its options), looked for in the part after `ray job submit ... --` and after a launcher's own options
(`torchrun`, `deepspeed`) and `uv run`'s; any other command's entry point is its first word."""

from __future__ import annotations

import re
from collections.abc import Sequence

from hpcplace.config.formats.command import (
    COMMAND_FORMATS,
    CommandFormatEntry,
    FrameworkCommand,
    command_from_driver,
    command_from_view,
    program_index,
)
from hpcplace.config.yaml_source import YamlDocument
from hpcplace.errors import SpecError

PYTHON_WORD = re.compile(r"(^|.*/)python(\d+(\.\d+)*)?$")
_SCRIPT = re.compile(r"\.py$")
LAUNCHERS = ("torchrun", "deepspeed")


def entry_point_index(argv: Sequence[str]) -> int:
    """The index of the command's entry point word (0 when there is no better one)."""
    start = program_index(argv)
    for i in range(start, len(argv)):
        word = argv[i]
        if word in ("-m", "--module") and i + 1 < len(argv):
            return i + 1
        if _SCRIPT.search(word) and not word.startswith("-"):
            return i
    for i in range(start, len(argv)):  # no module or script: the first word that is not a python or launcher
        name = argv[i].rsplit("/", 1)[-1]
        if not argv[i].startswith("-") and not PYTHON_WORD.match(argv[i]) and name not in LAUNCHERS:
            return i
    return start if start < len(argv) else 0


def describe_entry(entry: CommandFormatEntry) -> str:
    """A format's entry points in words: its `shown`, else from its pattern (`openrlhf.cli.train_*[.py]`)."""
    text = entry.shown or entry.entry_point.pattern.removeprefix("(^|.*/)").removeprefix("^").removesuffix("$")
    text = text.replace("[./]", ".").replace("\\w+", "*").replace("\\.", ".")
    text = re.sub(r"\(([^()|]*)\)\?", r"[\1]", text)
    where = " (the command's first word)" if entry.first_word else ""
    needs = f" with one of {', '.join(entry.flags)}" if entry.flags else ""
    return text + where + needs


def unknown_entry_point(command: FrameworkCommand, source: str) -> SpecError:
    """A command no command format recognises: its entry point, and what each format knows."""
    index = entry_point_index(command.argv)
    word = command.argv[index] if command.argv else ""
    known = "; ".join(f"{name}: {describe_entry(e)}" for name, e in COMMAND_FORMATS.items())
    return command.error(
        index,
        f"the command's entry point {word!r} is none that hpcplace knows, so it cannot tell which framework "
        f"places the processes. The command formats and the entry points each knows: {known}",
        hint=f"if the command is one of these frameworks' under another name, state it: `format: <name>` in "
        f"{source} or --format <name> (one of {', '.join(COMMAND_FORMATS)}); a program of your own is planned "
        "from a native config's components (docs/formats/native.md)",
    )


def command_of(doc: YamlDocument, driver: Sequence[str] | None) -> FrameworkCommand | None:
    """The command given beside a file that holds only hpcplace's blocks (`--driver` wins over
    launch.driver), or None when there is none."""
    if driver:
        return command_from_driver(driver)
    launch = doc.root().get("launch") if isinstance(doc.data, dict) else None
    view = launch.get("driver") if launch is not None and isinstance(launch.value, dict) else None
    if view is None or view.value in (None, "", []):
        return None
    return command_from_view(view)
