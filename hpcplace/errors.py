"""One error hierarchy: the CLI catches HpcplaceError once and maps it to an exit code."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceLocation:
    """Where a value came from: 1-based line and column in a YAML file."""

    path: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.column}"


class HpcplaceError(Exception):
    """Root of every error hpcplace reports to a user (never a traceback)."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None, location: SourceLocation | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.location = location

    def __str__(self) -> str:
        text = f"{self.location}: {self.message}" if self.location else self.message
        if self.hint:
            text += f"\n  HINT: {self.hint}"
        return text


class SpecError(HpcplaceError):
    """The configuration is malformed or asks for something impossible."""

    exit_code = 2


class PlanError(SpecError):
    """The placement cannot be expanded into a valid plan."""


class SlurmError(HpcplaceError):
    """Slurm refused, or is missing, or the cluster cannot run the job."""

    exit_code = 3
