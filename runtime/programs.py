"""A program file on the node, as the kernel will start it: the interpreter its `#!` line names.

Read by the preflight (is that interpreter there?) and by the preload choice (which Python runs the
program?); one small module so neither imports the other.
"""

from __future__ import annotations


def shebang_words(path: str) -> list[str]:
    """The words of a script's `#!` line (`['/usr/bin/env', 'python3']`); [] when it has none."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline(512)
    except OSError:
        return []
    return first[2:].decode(errors="replace").split() if first.startswith(b"#!") else []
