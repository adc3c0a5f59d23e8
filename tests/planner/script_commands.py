"""The framework commands in the frameworks' example shell scripts, read without running a shell.

What is read: lines joined at backslash-newlines (a comment line ends where it is, as in bash); arrays
`NAME=( words... )` (one or several lines) whose words are literal; scalars `NAME=word` and
`NAME=${NAME:-word}` with a literal word; a file a here-document writes to a variable's path
(`cat > "${NAME}" <<TAG`: given a folder, the body is written there, its `${NAME}`s expanded as above unless the
tag is quoted, and NAME names that file); the command line holding the entry point, from the `python`
word before it. `${NAME[@]}` and `$NAME`/`${NAME}` are replaced by those literal values. What cannot be
read that way (a variable set by a command, a loop, arithmetic) is left unresolved: a command with an
unresolved word where placement reads a value is "not extractable", with the reason; elsewhere such a
word is replaced by `X` (a value placement does not read); an array never set expands to nothing, as in
bash. Nothing is evaluated."""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

_ARRAY_START = re.compile(r"^\s*(?:export\s+|local\s+|declare\s+-a\s+)?([A-Za-z_]\w*)=\((.*)$")
_SCALAR = re.compile(r"^\s*(?:export\s+|local\s+)?([A-Za-z_]\w*)=(\S*)\s*$")
_DEFAULT = re.compile(r"^\$\{([A-Za-z_]\w*):?-([^}$]*)\}$")
_ARRAY_REF = re.compile(r"^\$\{([A-Za-z_]\w*)\[@\]\}$")
_VAR = re.compile(r"\$\{([A-Za-z_]\w*)(?::?-([^}$]*))?\}|\$([A-Za-z_]\w*)")
_HEREDOC = re.compile(r"^\s*cat\s+>\s*(\S+)\s+<<(-?)\s*(['\"]?)(\w+)\3\s*$")
_TARGET = re.compile(r"^[\"']?\$\{?([A-Za-z_]\w*)\}?[\"']?$")


@dataclass(frozen=True)
class _Heredoc:
    target: str  # the word after `>`
    body: str
    expands: bool  # an unquoted tag: bash expands $NAME in the body


def _heredocs(text: str) -> tuple[str, dict[int, _Heredoc]]:
    """The script with every here-document's body blanked (line numbers kept), and the bodies by the number of
    the line that opens them."""
    lines = text.splitlines()
    found: dict[int, _Heredoc] = {}
    i = 0
    while i < len(lines):
        match = _HEREDOC.match(lines[i])
        i += 1
        if match is None:
            continue
        start, body = i, []
        while i < len(lines) and (lines[i].strip() if match.group(2) else lines[i]) != match.group(4):
            body.append(lines[i].lstrip("\t") if match.group(2) else lines[i])
            lines[i] = ""
            i += 1
        found[start] = _Heredoc(match.group(1), "\n".join(body) + "\n", not match.group(3))
    return "\n".join(lines), found


@dataclass(frozen=True)
class Extracted:
    """One command (its words) and the script line it starts on, or why it could not be read."""

    line: int
    words: tuple[str, ...] = ()
    problem: str | None = None


def _logical_lines(text: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    buffer, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        if raw.lstrip().startswith("#"):  # bash: a comment ends at its line, a `\` in it continues nothing
            continue
        if not buffer:
            start = number
        if raw.rstrip().endswith("\\"):
            buffer += raw.rstrip()[:-1] + " "
            continue
        if _open_quote(buffer + raw):  # a quoted string goes on over the newline (ray's --runtime-env-json='{...}')
            buffer += raw + "\n"
            continue
        out.append((start, buffer + raw))
        buffer = ""
    if buffer:
        out.append((start, buffer))
    return out


_SOURCE = re.compile(r"^\s*(?:source|\.)\s+(\S+)\s*$")


def _open_quote(text: str) -> bool:
    """Whether `text` ends inside a '...' or "..." string (bash's quoting: no escapes inside '...')."""
    quote = None
    escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote is None and char in "'\"":
            quote = char
        elif char == quote:
            quote = None
        elif quote is None and char == "#":
            break  # the rest is a comment (a good enough approximation for these scripts)
    return quote is not None


def extract(
    text: str,
    entry: re.Pattern[str],
    placement_flags: Collection[str],
    script: Path | None = None,
    files: Path | None = None,
) -> list[Extracted]:
    """Every command of the script that runs `entry`. `script`: where it is, for `source "${SCRIPT_DIR}/x.sh"`
    (SCRIPT_DIR: the script's folder), whose arrays and scalars are read the same way. `files`: a folder for the
    files the script's here-documents write."""
    arrays: dict[str, list[str] | None] = {}  # None: not literal
    scalars: dict[str, str | None] = {}
    text, heredocs = _heredocs(text)
    lines = _logical_lines(text)
    if script is not None:
        lines = _with_sourced(lines, script)
    found: list[Extracted] = []
    i = 0
    while i < len(lines):
        number, line = lines[i]
        i += 1
        heredoc = heredocs.get(number)
        target = _TARGET.match(heredoc.target) if heredoc is not None else None
        if heredoc is not None and target is not None and files is not None:
            written = files / f"{target.group(1)}.{number}"
            body = _VAR.sub(lambda m: _scalar(m, scalars), heredoc.body) if heredoc.expands else heredoc.body
            written.write_text(body, encoding="utf-8")
            scalars[target.group(1)] = str(written)
            continue
        start = _ARRAY_START.match(line)
        if start:
            name, body = start.group(1), start.group(2)
            while ")" not in _unquoted(body) and i < len(lines):
                body += " " + lines[i][1]
                i += 1
            body = body[: _unquoted(body).rindex(")")] if ")" in _unquoted(body) else body
            try:
                words = shlex.split(body, comments=True)
            except ValueError:
                arrays[name] = None
                continue
            arrays[name] = words  # a `$` word is judged where it is used (_expand)
            continue
        scalar = _SCALAR.match(line)
        if scalar and "(" not in scalar.group(2):
            value = scalar.group(2).strip("\"'")
            default = _DEFAULT.match(value)
            if default:
                scalars[scalar.group(1)] = default.group(2)
            else:
                scalars[scalar.group(1)] = None if "$" in value or "`" in value else value
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        at = next((k for k, w in enumerate(words) if entry.match(w)), None)
        if at is None:
            continue
        first = at
        while first > 0 and (words[first - 1] in ("-m", "-u") or "python" in words[first - 1]):
            first -= 1
        found.append(_expand(number, words[first:], arrays, scalars, placement_flags))
    return found


def _with_sourced(lines: list[tuple[int, str]], script: Path) -> list[tuple[int, str]]:
    """The lines of the script with each `source FILE` replaced by FILE's lines (FILE written literally or
    with ${SCRIPT_DIR}; a file that is not there is left out: its variables stay unset)."""
    out: list[tuple[int, str]] = []
    for number, line in lines:
        match = _SOURCE.match(line)
        if match is None:
            out.append((number, line))
            continue
        name = match.group(1).strip("\"'").replace("${SCRIPT_DIR}", str(script.parent))
        name = name.replace("$SCRIPT_DIR", str(script.parent))
        path = Path(name) if Path(name).is_absolute() else script.parent / name
        if "$" not in name and path.is_file():
            out.extend((number, sourced) for _, sourced in _logical_lines(path.read_text(errors="replace")))
    return out


def _scalar(match: re.Match[str], scalars: dict[str, str | None]) -> str:
    """A variable's literal value, else its `:-` default, else the reference itself (unresolved)."""
    value = scalars.get(match.group(1) or match.group(3))
    if value is not None:
        return value
    return match.group(2) if match.group(2) is not None else match.group(0)


def _unquoted(text: str) -> str:
    """`text` with quoted parts blanked (so a `)` inside quotes does not end an array)."""
    return re.sub(r"'[^']*'|\"[^\"]*\"", lambda m: " " * len(m.group(0)), text)


def _expand(
    number: int,
    words: list[str],
    arrays: dict[str, list[str] | None],
    scalars: dict[str, str | None],
    placement_flags: Collection[str],
) -> Extracted:
    out: list[str] = []
    for word in words:
        ref = _ARRAY_REF.match(word)
        if ref:
            if ref.group(1) in arrays and arrays[ref.group(1)] is None:
                return Extracted(number, problem=f"${{{ref.group(1)}[@]}} cannot be split as the shell would")
            values = arrays.get(ref.group(1)) or []  # an array never set: bash expands it to nothing
            out.extend(_VAR.sub(lambda m: _scalar(m, scalars), v) for v in values)
            continue

        out.append(_VAR.sub(lambda m: _scalar(m, scalars), word))
    for k, word in enumerate(out):
        if "$" not in word and "`" not in word:
            continue
        before = out[k - 1].split("=", 1)[0] if k else ""
        flag = word.split("=", 1)[0]
        if before in placement_flags or flag in placement_flags:
            return Extracted(number, problem=f"{word!r}, a value placement reads, is set at run time")
        out[k] = "X" if "=" not in word or not word.startswith("-") else f"{flag}=X"
    return Extracted(number, tuple(out))
