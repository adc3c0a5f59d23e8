"""YAML loading that remembers where every value came from.

Errors about configuration must point at file:line:col, so parsers read the document through
`View`, which knows each value's position and builds `SpecError`s that carry it.
"""

from __future__ import annotations

import builtins  # View has methods named str, int and bool: its annotations name the types through builtins
import os
import re
import shlex
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hpcplace.config import limits
from hpcplace.errors import SourceLocation, SpecError
from hpcplace.runtime.services import FIELDS, REFERENCE_RE

PathKey = tuple[Any, ...]
# libyaml's parser when PyYAML has it: the same node graph and marks (plain style '' instead of
# None, which `_mark` folds), ten times faster than the pure-Python one.
_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class ScalarMark:
    line: int  # 1-based
    column: int  # 1-based
    style: str | None  # None = plain, "'" or '"' quoted, "|"/">" block
    raw: str | None = None  # the text as written, for plain scalars (YAML 1.1 reads `010` as 8)
    file: str | None = None  # the file that defined the value, when composed from another file (Hydra)


@dataclass(frozen=True)
class YamlDocument:
    """A parsed YAML file: plain Python data plus a mark for every path in it."""

    path: str
    data: Any
    marks: dict[PathKey, ScalarMark]

    def location(self, path: PathKey, offset: int | None = None) -> SourceLocation:
        """Location of `path` (or its closest ancestor); `offset` points inside a one-line scalar."""
        key = tuple(path)
        while key not in self.marks and key:
            key = key[:-1]
        mark = self.marks.get(key)
        if mark is None:
            return SourceLocation(self.path, 1, 1)
        shift = 0
        if offset is not None and mark.style in (None, "'", '"'):
            shift = offset + (1 if mark.style else 0)
        return SourceLocation(mark.file or self.path, mark.line, mark.column + shift)

    def root(self) -> View:
        return View(self, (), self.data)


def yaml_error(exc: yaml.YAMLError, path: str, text: str | None = None) -> SpecError:
    """A YAML syntax error as one located line (`text`: the document, to place a reader error)."""
    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow (NUL, other control codes)
        before = (text or "")[: exc.position]
        line, column = before.count("\n") + 1, exc.position - before.rfind("\n")
        char = exc.character  # a str (PyYAML's reader), an int (LibYAML's) or bytes (an encoding error)
        code = ord(char) if isinstance(char, str) else char if isinstance(char, int) else char[0]
        return SpecError(
            f"invalid YAML: character {code:#04x} is not allowed in YAML",
            location=SourceLocation(path, line, column),
            hint="a config is UTF-8 text: is this a binary file, or is a stray control character there?",
        )
    if not isinstance(exc, yaml.MarkedYAMLError):
        return SpecError(f"invalid YAML: {exc}", location=SourceLocation(path, 1, 1))
    mark = exc.problem_mark or exc.context_mark
    what = "; ".join(t for t in (exc.context, exc.problem) if t) or str(exc)
    at = mark.index if mark is not None and text is not None and 0 <= mark.index < len(text) else None
    tab = "'\\t'" in (exc.problem or "") or (at is not None and text is not None and text[at] == "\t")
    return SpecError(
        f"invalid YAML: {what}",
        location=SourceLocation(mark.name if os.path.isfile(mark.name) else path, mark.line + 1, mark.column + 1)
        if mark
        else SourceLocation(path, 1, 1),
        hint="YAML indents with spaces, never tabs: replace the tab"
        if tab
        else "check indentation and quoting near this position",
    )


def load_yaml_text(text: str, path: str = "<string>") -> YamlDocument:
    """Parse YAML safely (never constructs Python objects) and record positions."""
    if len(text) > limits.MAX_CONFIG_BYTES:
        raise limits.LimitError(
            f"the config has {len(text)} characters; hpcplace reads at most {limits.MAX_CONFIG_BYTES}",
            location=SourceLocation(path, 1, 1),
        )
    try:
        _check_depth(text, path)
        node = yaml.compose(text, Loader=_FAST_LOADER)
    except RecursionError:
        raise limits.LimitError(
            f"the YAML nesting is too deep (hpcplace reads at most {limits.MAX_YAML_DEPTH} levels)",
            location=SourceLocation(path, 1, 1),
        ) from None
    except yaml.YAMLError as exc:
        raise yaml_error(exc, path, text) from None
    marks: dict[PathKey, ScalarMark] = {}
    if node is None:
        return YamlDocument(path, None, marks)
    constructor = yaml.SafeLoader("")
    try:
        data = _Converter(constructor, path, marks).convert(node, ())
    except RecursionError:
        raise limits.LimitError(
            f"the YAML nesting is too deep (hpcplace reads at most {limits.MAX_YAML_DEPTH} levels)",
            location=SourceLocation(path, 1, 1),
        ) from None
    return YamlDocument(path, data, marks)


def _check_depth(text: str, path: str) -> None:
    """Refuse deep nesting before composing (PyYAML's composer recurses once per level)."""

    def too_deep(mark: yaml.Mark | yaml._yaml.Mark | None) -> limits.LimitError:  # LibYAML's marks are its own class
        return limits.LimitError(
            f"the YAML nesting is deeper than {limits.MAX_YAML_DEPTH} levels",
            location=SourceLocation(path, mark.line + 1, mark.column + 1)
            if mark is not None
            else SourceLocation(path, 1, 1),
        )

    depth = 0
    try:
        for event in yaml.parse(text, Loader=_FAST_LOADER):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > limits.MAX_YAML_DEPTH:
                    raise too_deep(event.start_mark)
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
    except yaml.MarkedYAMLError as exc:  # LibYAML >= 0.2.6 (PyYAML 6.0.4 wheels) scans ahead and stops at 1000 levels
        if "nesting depth" in str(exc.problem) and exc.problem_mark is not None:
            raise too_deep(exc.problem_mark) from None
        raise


def load_yaml_file(path: str | Path) -> YamlDocument:
    """Read and parse a config file. At most MAX_CONFIG_BYTES + 1 bytes are ever read, whatever the path
    is (a regular file, a pipe or process substitution, /dev/zero): one byte more is the size error."""
    p = Path(path)
    cap = limits.MAX_CONFIG_BYTES

    def too_large(size: str) -> limits.LimitError:
        return limits.LimitError(
            f"config file {p} has {size} bytes; hpcplace reads at most {cap}", location=SourceLocation(str(p), 1, 1)
        )

    try:
        with open(p, "rb") as fh:
            info = os.fstat(fh.fileno())
            if stat.S_ISREG(info.st_mode) and info.st_size > cap:  # the size it has, without reading it
                raise too_large(str(info.st_size))
            data = fh.read(cap + 1)
        if len(data) > cap:
            raise too_large(f"more than {cap}")
        text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")  # as read_text's newlines
    except FileNotFoundError:
        raise SpecError(f"config file not found: {p}", hint="pass the path of a YAML config") from None
    except UnicodeDecodeError as exc:
        if data.startswith((b"\xff\xfe", b"\xfe\xff")):
            raise SpecError(
                f"config file {p} is UTF-16 text",
                location=SourceLocation(str(p), 1, 1),
                hint="save it as UTF-8 (e.g. iconv -f utf-16 -t utf-8)",
            ) from None
        before = data[: exc.start]
        raise SpecError(
            f"config file {p} is not UTF-8 text: byte {data[exc.start]:#04x} cannot be decoded",
            location=SourceLocation(str(p), before.count(b"\n") + 1, exc.start - before.rfind(b"\n")),
            hint="save it as UTF-8 (e.g. iconv -f latin1 -t utf-8); is it a binary file?",
        ) from None
    except IsADirectoryError:
        raise SpecError(f"config path {p} is a directory", hint="pass the config's YAML file") from None
    except OSError as exc:
        raise SpecError(f"cannot read config file {p}: {exc.strerror or exc}") from None
    return load_yaml_text(text, str(p))


KEY = "<key>"  # marks[path + (KEY,)] is where the key of `path` stands
_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
_RESOLVER = yaml.resolver.Resolver()


def yaml11_sexagesimal(text: str) -> bool:
    """Whether YAML 1.1 (PyYAML, and OmegaConf, which loads with it) reads the plain scalar `text` as a
    base-60 number: `1:00:00` as 3600, `30:00` as 1800, `1:30.5` as 90.5. YAML 1.2 has no such numbers,
    and every one of them reads otherwise where hpcplace takes them (a Slurm time limit in minutes)."""
    if ":" not in text:
        return False
    tag = _RESOLVER.resolve(  # type: ignore[no-untyped-call]  # unannotated in types-PyYAML
        yaml.ScalarNode, text, (True, False)
    )
    return tag in _NUMBER_TAGS


def scalar_value(text: str) -> Any:
    """A command-line value (`--set key=VALUE`, `key=VALUE` after the config) read as the loader reads a
    value: a YAML 1.1 number, boolean or null, except base-60 numbers (`1:00:00` stays that text); a flow
    list or mapping (`[python, main.py]`, `{actor: 0-3}`) as Hydra reads one, through the same loader and
    caps as a config file, and an unclosed one refused (as Hydra refuses it); other unparsable YAML is the
    text itself."""
    if yaml11_sexagesimal(text.strip()):
        return text.strip()
    reference = REFERENCE_RE.match(text.strip())
    if reference is not None and reference.group(3) in FIELDS:  # `{rm.0.url}/path`: a service's address, text
        return text.strip()  # (hpcplace fills it in before the program starts: hpcplace.config.services)
    if text.strip().startswith(("[", "{")):
        try:
            return load_yaml_text(text, "<override>").data
        except SpecError as exc:  # Hydra refuses it too: never a command made of its broken pieces
            raise SpecError(
                f"cannot read {text.strip()!r} as a list or mapping ({exc.message})",
                hint="close the brackets ([a, b], {k: v}), or quote the whole value for a text that "
                "starts with a bracket (KEY=\"'[text'\")",
            ) from None
    try:
        value = yaml.safe_load(text)
    except (yaml.YAMLError, ValueError, OverflowError):
        return text
    return text if isinstance(value, (dict, list)) else value  # block YAML (`a: b`) is no Hydra value: text


def _mark(node: yaml.Node) -> ScalarMark:
    style = getattr(node, "style", None) if isinstance(node, yaml.ScalarNode) else None
    raw = node.value if isinstance(node, yaml.ScalarNode) and not style else None
    return ScalarMark(node.start_mark.line + 1, node.start_mark.column + 1, style or None, raw)


class _Converter:
    """Node graph -> plain data with marks. Aliases are expanded (every use gets its own path and
    marks), so their total is capped: a few hundred bytes of nested aliases could otherwise expand
    into gigabytes ("billion laughs"); an alias used inside its own anchor is an error."""

    def __init__(self, constructor: yaml.SafeLoader, file: str, marks: dict[PathKey, ScalarMark]) -> None:
        self.constructor = constructor
        self.file = file
        self.marks = marks
        self.count = 0
        self.active: set[int] = set()  # ids of the collection nodes being converted (cycle check)

    def _error(self, node: yaml.Node, message: str, hint: str | None = None) -> SpecError:
        m = _mark(node)
        return SpecError(message, location=SourceLocation(self.file, m.line, m.column), hint=hint)

    def convert(self, node: yaml.Node, path: PathKey, marks: dict[PathKey, ScalarMark] | None = None) -> Any:
        marks = self.marks if marks is None else marks
        self.count += 1
        if self.count > limits.MAX_YAML_VALUES:
            raise limits.LimitError(
                f"the document holds more than {limits.MAX_YAML_VALUES} values once YAML aliases are expanded",
                location=self._error(node, "").location,
                hint="use fewer or less nested aliases (*name)",
            )
        if len(path) > limits.MAX_YAML_DEPTH:
            raise limits.LimitError(
                f"the YAML nesting is deeper than {limits.MAX_YAML_DEPTH} levels",
                location=self._error(node, "").location,
            )
        marks[path] = _mark(node)
        if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
            if id(node) in self.active:
                raise self._error(
                    node,
                    "a YAML alias refers to the mapping or list that contains it",
                    hint="an anchor (&name) cannot be used (*name) inside itself",
                )
            self.active.add(id(node))
            try:
                if isinstance(node, yaml.MappingNode):
                    return self._mapping(node, path, marks)
                return [self.convert(item, path + (i,), marks) for i, item in enumerate(node.value)]
            finally:
                self.active.discard(id(node))
        if isinstance(node, yaml.ScalarNode) and not node.style and node.tag in _NUMBER_TAGS and ":" in node.value:
            return node.value  # a YAML 1.1 base-60 number (`time: 1:00:00` is not 3600): the text as written
        try:
            return self.constructor.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError as exc:
            raise self._error(node, f"unsupported YAML value: {exc.problem}") from None
        except (ValueError, OverflowError) as exc:  # e.g. an integer of more than 4300 digits
            raise self._error(node, f"unreadable YAML value: {exc}", hint="quote it, or shorten it") from None

    def _mapping(self, node: yaml.MappingNode, path: PathKey, marks: dict[PathKey, ScalarMark]) -> dict[Any, Any]:
        """A mapping; merge keys (`<<: *base` or `<<: [*a, *b]`) are expanded here, counted like
        any alias (PyYAML's own flattening copies node lists and can grow exponentially first)."""
        out: dict[Any, Any] = {}
        own = []
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for source in reversed(sources):  # the first listed wins (YAML merge rules)
                    if not isinstance(source, yaml.MappingNode):
                        raise self._error(source, "a merge key (<<) takes a mapping or a list of mappings")
                    merged = self.convert(source, path, marks)
                    out.update(merged)
            else:
                own.append((key_node, value_node))
        marks[path] = _mark(node)
        seen: set[Any] = set()
        for key_node, value_node in own:
            if key_node.tag == "tag:yaml.org,2002:value":
                key_node.tag = "tag:yaml.org,2002:str"
            key = self.convert(key_node, path + (KEY,), {})
            if isinstance(key, (list, dict)):
                raise self._error(key_node, "a mapping key must be a scalar")
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable scalar (cannot happen with SafeLoader, but never crash)
                raise self._error(key_node, "a mapping key must be a scalar") from None
            if duplicate:
                raise self._error(
                    key_node,
                    f"duplicate key {key!r}",
                    hint="each key may appear once in a mapping; merge the two entries",
                )
            seen.add(key)
            marks[path + (key, KEY)] = _mark(key_node)
            out[key] = self.convert(value_node, path + (key,), marks)
        return out


_MISSING = object()
# A whole value that is one absolute OmegaConf interpolation, e.g. `${actor.model.tensor_model_parallel_size}`.
_INTERPOLATION = re.compile(r"^\$\{\s*([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)\s*\}$")


def closest(word: str, known: Iterable[str]) -> str | None:
    """The near miss for `word` among `known`, or None."""
    import difflib  # only for a config with a mistake in it: not on every command's start-up

    close = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.75)
    return close[0] if close else None


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """`; did you mean 'device_mapping'?` for a near miss among `known`, else ``."""
    close = closest(word, known)
    return f"; did you mean {close!r}?" if close else ""


class View:
    """A value inside a YamlDocument plus its path, with typed accessors that fail with locations."""

    __slots__ = ("doc", "path", "value")

    def __init__(self, doc: YamlDocument, path: PathKey, value: Any) -> None:
        self.doc = doc
        self.path = path
        self.value = value

    # navigation -------------------------------------------------------------------------------
    def deref(self) -> View:
        """Follow a whole-value interpolation `${a.b.c}` (OmegaConf's absolute form) to the value it
        names, so errors point at the line that holds the real value."""
        view, seen = self, set()
        while isinstance(view.value, str):
            m = _INTERPOLATION.match(view.value)
            if m is None:
                if "${" in view.value:
                    return View(view.doc, view.path, view._omegaconf())
                break
            if view.path in seen:
                raise self.error(f"interpolation cycle through {self.value!r}")
            seen.add(view.path)
            target = view.doc.root()
            for part in m.group(1).split("."):
                value = target.value
                key: Any = int(part) if part.isdigit() and isinstance(value, list) else part
                if (isinstance(value, dict) and key in value) or (
                    isinstance(value, list) and isinstance(key, int) and key < len(value)
                ):
                    target = View(view.doc, target.path + (key,), value[key])
                else:
                    raise view.error(
                        f"interpolation {view.value!r} names a key that does not exist",
                        hint=f"define `{m.group(1)}` in the config (or in a composed defaults file)",
                    )
            view = target
        return view

    def _omegaconf(self) -> Any:
        """Any other interpolation (`${subtract:a,b}`, `${oc.env:X}`, `x-${y}`), resolved by OmegaConf."""
        from hpcplace.config.interpolation import resolve_value

        try:
            return resolve_value(self.doc.data, self.path)
        except Exception as exc:  # noqa: BLE001 - OmegaConf's errors: unknown resolver, missing key, unset env var
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise self.error(
                f"cannot resolve {self.value!r}: {text}",
                hint="placement reads this value; define what it refers to (or set the "
                "environment variable), or override it, e.g. KEY=VALUE after the config",
            ) from None

    def get(self, key: Any) -> View | None:
        mapping = self.mapping()
        if key not in mapping:
            return None
        return View(self.doc, self.path + (key,), mapping[key])

    def given(self, key: Any) -> View | None:
        """The key's view where the config gives it a value: absent and null (`key: null`, `~`) are not given."""
        child = self.get(key)
        return child if child is not None and child.deref().value is not None else None

    def require(self, key: Any, what: str = "") -> View:
        child = self.get(key)
        if child is None:
            raise self.error(
                f"missing required key {key!r}{' (' + what + ')' if what else ''}",
                hint=f"add `{key}:` " + (f"under `{self.dotted()}`" if self.dotted() else "at the top level"),
            )
        return child

    def items(self) -> Iterator[tuple[Any, View]]:
        for key, value in self.mapping().items():
            yield key, View(self.doc, self.path + (key,), value)

    def elements(self) -> Iterator[View]:
        for i, value in enumerate(self.list()):
            yield View(self.doc, self.path + (i,), value)

    def check_keys(self, allowed: set[str] | frozenset[str]) -> None:
        for key in self.mapping():
            if key not in allowed:
                raise View(self.doc, self.path + (key,), None).key_error(
                    f"unknown key {key!r} in `{self.dotted() or 'top level'}`" + did_you_mean(str(key), allowed),
                    hint="allowed keys: " + ", ".join(sorted(allowed)),
                )

    # typed values -----------------------------------------------------------------------------
    def mapping(self) -> dict[Any, Any]:
        if isinstance(self.value, str) and "${" in self.value and (d := self.deref()).value != self.value:
            return d.mapping()
        if self.value is None:
            return {}
        if not isinstance(self.value, dict):
            raise self.error(f"expected a mapping, got {_describe(self.value)}")
        return self.value

    def list(self) -> list[Any]:
        if isinstance(self.value, str) and "${" in self.value and (d := self.deref()).value != self.value:
            return d.list()
        if not isinstance(self.value, list):
            raise self.error(f"expected a list, got {_describe(self.value)}")
        return self.value

    def str(self) -> builtins.str:
        if isinstance(self.value, str) and "${" in self.value and (d := self.deref()).value != self.value:
            return d.str()
        if not isinstance(self.value, str) or not self.value.strip():
            raise self.error(f"expected a non-empty string, got {_describe(self.value)}")
        return self.value

    def int(self, minimum: builtins.int | None = None) -> builtins.int:
        if isinstance(self.value, str) and "${" in self.value and (d := self.deref()).value != self.value:
            return d.int(minimum)
        example = f"{self._key_text()}: {max(minimum if minimum is not None else 1, 1)}"
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            raise self.error(
                f"expected an integer, got {_describe(self.value)}",
                hint=f"write a whole number without quotes, e.g. `{example}`",
            )
        if minimum is not None and self.value < minimum:
            raise self.error(f"expected an integer >= {minimum}, got {self.value}", hint=f"e.g. `{example}`")
        return self.value

    def bool(self) -> builtins.bool:
        if isinstance(self.value, str) and "${" in self.value and (d := self.deref()).value != self.value:
            return d.bool()
        if not isinstance(self.value, bool):
            raise self.error(
                f"expected true or false, got {_describe(self.value)}",
                hint=f"write `{self._key_text()}: true` or `{self._key_text()}: false`",
            )
        return self.value

    def _key_text(self) -> builtins.str:
        """This value's own key, for an example in a hint (`nodes`; a list item: its list's key)."""
        return next((k for k in reversed(self.path) if isinstance(k, str)), "value")

    def as_written(self) -> builtins.str:
        """A scalar as text, a number as written: YAML 1.1 reads an unquoted `010` as 8, `0x10` as 16 and
        `1_000` as 1000, but a program's argument or an environment value is the text the user typed."""
        mark = self.doc.marks.get(self.path)
        if (
            isinstance(self.value, (int, float))
            and not isinstance(self.value, bool)
            and mark is not None
            and mark.raw is not None
            and "${" not in mark.raw
        ):
            return mark.raw.strip()
        return str(self.value)

    def str_map(self, allowed: tuple[builtins.str, ...] = ()) -> dict[builtins.str, builtins.str]:
        """An environment: variable names (checked: syntax, not one hpcplace sets unless `allowed`)
        to string values (numbers as written, booleans as 1/0)."""
        from hpcplace.config.safe_words import check_env_name, check_env_value

        out: dict[str, str] = {}
        for key, child in self.items():
            if not isinstance(key, str) or not key:
                raise child.key_error(
                    f"expected a string name, got {_describe(key)}",
                    hint="variable names use letters, digits and '_' (e.g. MY_FLAG)",
                )
            key_path = child.path + (KEY,)
            where = self.doc.location(key_path) if key_path in self.doc.marks else child.location()
            check_env_name(key, location=where, allowed=allowed, what=f"`{self.dotted() or 'env'}`")
            if isinstance(child.value, bool):
                out[key] = "1" if child.value else "0"
            elif isinstance(child.value, (str, int, float)):
                out[key] = check_env_value(
                    key, child.as_written(), location=child.location(), what=f"`{self.dotted() or 'env'}`"
                )
            else:
                raise child.error(f"expected a string value for {key!r}, got {_describe(child.value)}")
        return out

    # errors -----------------------------------------------------------------------------------
    def dotted(self) -> builtins.str:
        return ".".join(str(p) for p in self.path)

    def location(self, offset: builtins.int | None = None) -> SourceLocation:
        return self.doc.location(self.path, offset)

    def raw_text(self) -> builtins.str | None:
        """The scalar exactly as written when it was unquoted (None for quoted or non-scalars)."""
        mark = self.doc.marks.get(self.path)
        return mark.raw if mark is not None else None

    def number_text(self) -> builtins.str | None:
        """An unquoted number exactly as written (`010`, or `1:00:00` where a YAML 1.1 reader composed
        it), or None: no number, or its text is unknown (a composed value of a file hpcplace cannot read
        back)."""
        raw = self.raw_text()
        if raw is None or isinstance(self.value, bool) or not isinstance(self.value, (int, float)):
            return None
        try:
            return raw if yaml.safe_load(raw) == self.value else None
        except (yaml.YAMLError, ValueError, OverflowError):
            return None

    def error(
        self, message: builtins.str, *, hint: builtins.str | None = None, offset: builtins.int | None = None
    ) -> SpecError:
        where = f"`{self.dotted()}`: " if self.path else ""
        return SpecError(where + message, hint=hint, location=self.location(offset))

    def key_error(self, message: builtins.str, *, hint: builtins.str | None = None) -> SpecError:
        """An error about this value's key (unknown, duplicate...): points at the key itself."""
        key_path = self.path + (KEY,)
        loc = self.doc.location(key_path) if key_path in self.doc.marks else self.location()
        return SpecError(message, hint=hint, location=loc)


def _describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"boolean {value}"
    if isinstance(value, (int, float)):
        return f"number {value}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def yaml_words(view: View, what: str) -> list[str]:
    """A YAML argv: a list of words (preferred) or a string split like a shell would (no expansion)."""
    if isinstance(view.value, list):
        words = []
        for item in view.elements():
            if not isinstance(item.value, (str, int, float)) or isinstance(item.value, bool):
                raise item.error(f"{what} arguments must be strings")
            words.append(item.as_written())
        return words
    text = view.str()
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise view.error(f"cannot split {what} {text!r}: {exc}", hint=f"give the {what} as a YAML list") from None
