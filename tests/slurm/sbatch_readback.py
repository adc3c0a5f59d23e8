"""Read `#SBATCH` lines back as sbatch 22.05 does (src/sbatch/opt.c: `_get_argument` per line;
options stop at the first line that is not a comment; `#SBATCH hetjob` starts the next component).

Quoting rules of that parser: '...' and "..." group characters, a backslash escapes the next
character (inside quotes too, so backslashes never survive), an unquoted `#` ends the line."""

from __future__ import annotations


def sbatch_words(text: str) -> list[str]:
    words: list[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            return words
        arg: list[str] = []
        quoted, q_char, escape, comment = False, "", False, False
        while i < n and (quoted or not text[i].isspace()) and text[i] != "\n":
            c = text[i]
            if escape:
                escape = False
            elif c == "\\":
                escape = True
                i += 1
                continue
            elif quoted:
                if c == q_char:
                    quoted = False
                    i += 1
                    continue
            elif c in "\"'":
                quoted, q_char = True, c
                i += 1
                continue
            elif c == "#":
                comment = True
                break
            arg.append(c)
            i += 1
        if arg:
            words.append("".join(arg))
        if comment:
            return words


def read_sbatch_options(script: str) -> list[list[str]]:
    """Per het component, the option words sbatch would read from the script."""
    components: list[list[str]] = [[]]
    for line in script.splitlines()[1:]:
        if line.startswith("#SBATCH"):
            words = sbatch_words(line[len("#SBATCH") :])
            if words and words[0].lower() in ("hetjob", "packjob"):
                components.append([])
            else:
                components[-1].extend(words)
        elif line.strip() and not line.lstrip().startswith("#"):
            break
    return components
