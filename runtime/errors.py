"""The runtime's own error: the in-job side never imports the login-node side (hpcplace.errors)."""

from __future__ import annotations


class ShimError(Exception):
    """A problem the shim reports as one message plus a hint, then exits (never a traceback)."""

    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  HINT: {self.hint}" if self.hint else self.message
