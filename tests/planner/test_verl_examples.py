"""Every `python3 -m verl.trainer.main_ppo ...` command of a verl checkout's examples/ (shell scripts), planned
unchanged with a `slurm:` block. The scripts are never run: their commands are read statically (literal
assignments `X=v` / `X=${X:-default}`, bash arrays `A=( ... )` and `"${A[@]}"`, `$X`/`${X}`; `$@` is what the
user would add, dropped; anything else, such as `$(...)`, stays as written and the reader refuses it where a
placement value needs it). Each command is planned or refused with a located SpecError, never a traceback.

Needs a verl checkout: HPCPLACE_VERL_SRC=/path/to/verl (skipped otherwise: CI has no network to fetch one).
Its own config files are composed (the checkout's verl/trainer/config), as its examples expect."""

from __future__ import annotations

import os
import re
import shlex
from collections import Counter
from pathlib import Path

import pytest

from hpcplace.config.formats import load_spec
from hpcplace.errors import HpcplaceError
from hpcplace.plan.planner import plan_from_spec

SOURCE = os.environ.get("HPCPLACE_VERL_SRC")
ENTRY = "verl.trainer.main_ppo"
_ASSIGN = re.compile(r"^(?:export\s+|local\s+|readonly\s+)?([A-Za-z_]\w*)(\+?)=(.*)$", re.S)
_VAR = re.compile(r"\$\{([A-Za-z_]\w*)(?:(:?)-([^}]*))?\}|\$([A-Za-z_]\w*)")
_ARRAY = re.compile(r'"?\$\{([A-Za-z_]\w*)\[[@*]\]\}"?')


def logical_lines(text: str) -> list[str]:
    """Lines with backslash-newlines joined and a quoted value spanning lines (X="a<newline>b") joined."""
    out: list[str] = []
    pending = ""
    for line in text.replace("\\\n", " ").splitlines():
        pending = f"{pending} {line.strip()}" if pending else line.strip()
        if (pending.count('"') % 2 == 0 and pending.count("'") % 2 == 0) or pending.startswith("#"):
            out.append(pending)
            pending = ""
    return out + ([pending] if pending else [])


def expand(text: str, env: dict[str, str], arrays: dict[str, list[str]]) -> str:
    """Arrays, variables (with ${X:-default}) and `$@` substituted in the text; `$((...))` kept as one word."""
    text = re.sub(r"\$\(\((.*?)\)\)", lambda m: "$((" + m.group(1).replace(" ", "") + "))", text)
    text = re.sub(r"\$\(([^()]*)\)", lambda m: "$(" + m.group(1).replace(" ", "_") + ")", text)  # $(date +%F)
    text = _ARRAY.sub(lambda m: " ".join(shlex.quote(w) for w in arrays.get(m.group(1), [])), text)
    text = re.sub(r'"\$[@*]"|\$[@*]|"\$\{@\}"', "", text)

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(4)
        default = m.group(3)
        if name in env and not (default is not None and m.group(2) == ":" and env[name] == ""):
            return env[name]  # bash: ${X:-d} also takes d when X is empty, ${X-d} only when unset
        if default is not None:
            return expand(default, env, arrays)
        return m.group(0)

    return _VAR.sub(one, text)


def shell_words(text: str) -> list[str]:
    try:
        return shlex.split(text, comments=True)
    except ValueError:  # an unbalanced quote the joining above could not close: words as spaced
        return text.split()


def split(text: str) -> list[str]:
    words = shell_words(text)
    for k, word in enumerate(words):  # the command ends at a pipe, a redirection or a list operator
        if word in ("|", "||", "&&", ";", "&") or re.match(r"^(\d*>|&>|<)", word):
            return words[:k]
    return words


def commands(script: Path) -> list[list[str]]:
    """The main_ppo commands of one script, with its variables and arrays substituted."""
    env: dict[str, str] = {"HOME": "/home/user"}
    arrays: dict[str, list[str]] = {}
    found: list[list[str]] = []
    lines = logical_lines(script.read_text(errors="replace"))
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _ASSIGN.match(line)
        if line.startswith("#"):
            pass
        elif m and m.group(3).startswith("("):
            body = m.group(3)[1:]
            while ")" not in re.sub(r"\$\{[^}]*\}|\$\(\(.*?\)\)|'[^']*'|\"[^\"]*\"", "", body) and i + 1 < len(lines):
                i += 1
                body += " " + (lines[i] if not lines[i].startswith("#") else "")
            body = body.rsplit(")", 1)[0]
            items = shell_words(expand(body, env, arrays))
            arrays[m.group(1)] = (arrays.get(m.group(1), []) if m.group(2) else []) + items
        elif m and ENTRY not in line:
            value = expand(m.group(3), env, arrays).strip()
            env[m.group(1)] = " ".join(shell_words(value) or [value])
        elif ENTRY in line:
            words = split(expand(line, env, arrays))
            start = next((k for k, w in enumerate(words) if w.endswith(ENTRY)), None)
            if start is not None:
                lead = start > 0 and words[start - 1] == "-m"
                found.append(["python3", "-m", *words[start:]] if lead else words[max(start - 1, 0) :])
        i += 1
    return found


@pytest.mark.skipif(not SOURCE, reason="HPCPLACE_VERL_SRC (a verl checkout) is not set; CI cannot fetch one")
def test_every_example_command_is_planned_or_refused_with_a_location(tmp_path: Path) -> None:
    assert SOURCE is not None
    site = tmp_path / "site.yaml"
    site.write_text("slurm: {partition: gpu, gpu_type: h100, time: '04:00:00'}\n")
    scripts = sorted((Path(SOURCE) / "examples").rglob("*.sh"))
    planned, refused = 0, []
    per_reason: Counter[str] = Counter()
    total = 0
    for script in scripts:
        for argv in commands(script):
            total += 1
            try:
                plan_from_spec(load_spec(site, driver=argv))
                planned += 1
            except HpcplaceError as exc:
                location = getattr(exc, "location", None)
                assert location is not None, f"{script}: {exc} has no location"
                refused.append(f"{script.relative_to(SOURCE)}: {exc}")
                per_reason[str(exc).split(":")[0][:80]] += 1
    report = tmp_path.parent / "verl-examples.txt"
    report.write_text(
        f"{total} commands in {len(scripts)} scripts: {planned} planned, {len(refused)} refused\n"
        + "\n".join(refused)
        + "\n",
        encoding="utf-8",
    )
    print(report.read_text())
    assert total > 0 and planned + len(refused) == total
