"""The project's exception tree.

Every error the launcher expects is a ``LauncherError``; the command line turns it
into one line on stderr and the exit code the subclass names. Subclasses carry
their evidence as fields so callers and tests need not parse messages.
"""

from __future__ import annotations


class LauncherError(Exception):
    """Base class: an expected failure with a one-line message."""

    exit_code = 2

    def __str__(self) -> str:
        # One line, always: the CLI prints exactly this.
        return " ".join(super().__str__().split())


class ConfigError(LauncherError):
    """The composed configuration is invalid (bad value, unknown option)."""


class DataError(LauncherError):
    """Training data is missing, unreadable or not the expected shape."""


class StoreError(LauncherError):
    """The run store cannot be written or read."""


class RunNotFound(LauncherError):
    """A path given as a run is missing or is not a run directory."""


class SealError(LauncherError):
    """A stored run is incomplete or was modified after it was sealed."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class SchemaError(LauncherError):
    """A stored file has a schema version this launcher cannot read."""


class DeterminismError(LauncherError):
    """A determinism setting did not take effect in the job process."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or []


class JobFailed(LauncherError):
    """The training job exited unsuccessfully."""

    exit_code = 1

    def __init__(self, message: str, run_dir: str | None = None, returncode: int | None = None):
        super().__init__(message)
        self.run_dir = run_dir
        self.returncode = returncode


class NotComparable(LauncherError):
    """Two fingerprints differ in fields that decide comparability."""

    exit_code = 3

    def __init__(self, message: str, differences: list[tuple[str, object, object]]):
        super().__init__(message)
        self.differences = differences


class ResumeError(LauncherError):
    """A run cannot be resumed (complete, no checkpoint, ...)."""
