"""A framework's argparse command line read as its own `parser.parse_args()` reads it, without importing
the framework (its CLI module imports Ray, vLLM, DeepSpeed, torch).

What is reproduced of Python's argparse (3.11, the parsers of OpenRLHF and slime: `ArgumentParser()` with
its defaults, only `--long` options, no positionals): `--flag value` and `--flag=value`; a unique prefix of
a flag stands for it (`allow_abbrev`, on by default) and an ambiguous one is refused; `store_true` flags
take no value; `nargs` N, `+` and `*`; `type` int/float/str converted by Python's own int()/float();
`choices`; a word that starts with `-` is a value only when it reads as a negative number; the last of a
repeated flag wins; `-h`/`--help` prints the help and exits. Every error names the word and what argparse
says, with the closest real flag for an unknown one."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from hpcplace.config.formats.command import FrameworkCommand
from hpcplace.config.yaml_source import closest

# argparse's `_negative_number_matcher`: such a word is a value, not an option (no option looks like one)
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


@dataclass(frozen=True)
class Flag:
    """One option of the framework's parser: `kind` is `store_true`/`store_false` or the type's name (int,
    float, str),
    `nargs` argparse's (None: one value), `choices` the allowed values (None: any)."""

    kind: str
    nargs: int | str | None = None
    choices: tuple[str, ...] | None = None


Value = bool | int | float | str | tuple[int | float | str, ...]


@dataclass(frozen=True)
class Given:
    """A flag the command sets: its value (converted as argparse would) and the index of the flag's word."""

    value: Value
    index: int


def parse_flags(
    command: FrameworkCommand,
    start: int,
    flags: Mapping[str, Flag],
    framework: str,
    other_names: Mapping[str, str] | None = None,
    *,
    known: frozenset[str] | None = None,
    near: tuple[str, ...] | None = None,
    abbrev: bool = True,
) -> dict[str, Given]:
    """command.argv[start:] parsed with `flags` -> each flag given (by its full name). `other_names` maps
    a flag of another version of the framework to a sentence saying so (used for an unknown flag).

    `known` given: the framework parses with parse_known_args and ignores what it does not know (slime:
    Megatron's parser with ignore_unknown_args, SGLang's flags on another parser), so only `flags` are read;
    another word is skipped, unless it is a flag outside `known` close to one of `flags` (a misspelt
    placement flag the framework would silently ignore; `near`: the flags that count, default all of `flags`).
    `abbrev`: the parser's allow_abbrev."""
    argv = command.argv
    out: dict[str, Given] = {}
    i = start
    while i < len(argv):
        word = argv[i]
        if known is not None and (word.split("=", 1)[0] not in flags or not word.startswith("--")):
            name = word.split("=", 1)[0]
            if name.startswith("--") and name not in known and (close := closest(name, list(near or flags))):
                raise command.error(
                    i,
                    f"{framework} has no flag {name}: its parser would ignore it (it skips unknown flags), and it "
                    f"is close to {close}, which it reads for placement",
                    hint=f"did you mean {close}?",
                )
            i += 1
            continue
        if word == "--" or not word.startswith("-") or _NEGATIVE_NUMBER.match(word):
            raise command.error(
                i,
                f"{framework}'s parser takes no positional argument, and {word!r} is one "
                "(argparse: unrecognized arguments)",
                hint="every argument of the command is a --flag or a flag's value; quote a value with spaces "
                "as one word",
            )
        name, _, explicit = word.partition("=")
        has_explicit = "=" in word
        full = _match(command, i, name, flags, framework, other_names or {}, abbrev)
        if full in ("-h", "--help"):
            raise command.error(
                i, f"{word}: {framework}'s parser prints its help and exits: the command would start nothing"
            )
        flag = flags[full]
        at = i  # the flag's word: where a refusal of its value points
        i += 1
        if flag.kind in ("store_true", "store_false"):
            if has_explicit:
                raise command.error(
                    i - 1,
                    f"argument {full}: ignored explicit argument {explicit!r} (argparse: a switch takes no value)",
                    hint=f"write {full} alone to set it; leave it out to keep it off",
                )
            out[full] = Given(flag.kind == "store_true", i - 1)
            continue
        values: list[str] = []
        indices: list[int] = []
        if has_explicit:
            values.append(explicit)
            indices.append(i - 1)
        want_min, want_max = _arity(flag.nargs)
        while not has_explicit and len(values) < want_max and i < len(argv) and _is_value(argv[i]):
            values.append(argv[i])
            indices.append(i)
            i += 1
        if not want_min <= len(values) <= want_max:
            expected = (
                "one argument"
                if flag.nargs is None
                else "at least one argument"
                if flag.nargs == "+"
                else f"{flag.nargs} arguments"
            )
            raise command.error(
                i - 1 if not values else indices[-1],
                f"argument {full}: expected {expected} (argparse)",
                hint=f"give {full} its value: {full} VALUE or {full}=VALUE",
            )
        converted = tuple(_convert(command, indices[k], full, flag, v, framework) for k, v in enumerate(values))
        out[full] = Given(converted[0] if flag.nargs is None else converted, at)
    return out


def _arity(nargs: int | str | None) -> tuple[int, int]:
    if nargs is None:
        return 1, 1
    if isinstance(nargs, int):
        return nargs, nargs
    if nargs == "+":
        return 1, 1 << 30
    if nargs == "*":
        return 0, 1 << 30
    return 0, 1  # "?"


def _is_value(word: str) -> bool:
    return not word.startswith("-") or bool(_NEGATIVE_NUMBER.match(word)) or word == "-"


def _match(
    command: FrameworkCommand,
    index: int,
    name: str,
    flags: Mapping[str, Flag],
    framework: str,
    other_names: Mapping[str, str],
    abbrev: bool = True,
) -> str:
    """The full flag `name` stands for: itself, or the one flag it is a prefix of (argparse's
    abbreviations; only for `--` options, as argparse's for long options)."""
    if name in flags:
        return name
    if abbrev and name.startswith("--") and len(name) > 2:
        matches = sorted(f for f in flags if f.startswith(name))
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            shown = ", ".join(matches[:6]) + (", ..." if len(matches) > 6 else "")
            raise command.error(
                index,
                f"ambiguous option: {name} could match {shown} (argparse)",
                hint="write the whole flag name",
            )
    near = closest(name, [f for f in flags if f.startswith("--")])
    if name in other_names:  # a flag of another version: the closest of this version's, if any, as the hint
        raise command.error(index, other_names[name], hint=f"did you mean {near}?" if near else None)
    raise command.error(
        index,
        f"{framework}'s parser has no flag {name} (argparse: unrecognized arguments)",
        hint=f"did you mean {near}?" if near else f"see the flags of {framework}'s entry point (--help)",
    )


def _convert(
    command: FrameworkCommand, index: int, full: str, flag: Flag, text: str, framework: str
) -> int | float | str:
    value: int | float | str
    try:
        if flag.kind == "int":
            value = int(text)
        elif flag.kind == "float":
            value = float(text)
        else:
            value = text
    except ValueError:
        raise command.error(
            index,
            f"argument {full}: invalid {flag.kind} value: {text!r} (argparse; {framework} exits here)",
            hint=f"{full} takes {'an integer' if flag.kind == 'int' else 'a number'}",
        ) from None
    if flag.choices is not None and value not in flag.choices:
        raise command.error(
            index,
            f"argument {full}: invalid choice: {text!r} (choose from {', '.join(map(repr, flag.choices))})",
            hint=f"did you mean {near!r}?" if (near := closest(text, flag.choices)) else None,
        )
    return value


def submitted_command(command: FrameworkCommand, entry: int, notes: list[str]) -> tuple[str, ...]:
    """The driver of a command wrapped as `ray job submit [OPTIONS] -- CMD...` (the frameworks' scripts start it
    so): CMD, which hpcplace runs on the head of the job's own Ray cluster (there is no job server to submit to),
    with a note saying so; () for an unwrapped command (the whole command is the driver)."""
    head = command.argv[:entry]
    if "submit" not in head or "--" not in head:
        return ()
    driver = command.argv[len(head) - head[::-1].index("--") :]
    notes.append(
        "the command is wrapped in `ray job submit ... --`: the job's driver is the part after `--` ("
        + " ".join(driver[: driver.index(command.argv[entry]) + 1])
        + " ...): hpcplace starts the Ray cluster and runs it on the head, with no job server to submit to"
    )
    return driver
