"""The project's exception tree.

Every error the launcher expects is a ``LauncherError``; the command line turns it
into one line on stderr and the exit code the subclass names. Subclasses carry
their evidence as fields so callers and tests need not parse messages.

Every exception class of the project is defined here, and only here
(``tests/unit/test_owner_code.py`` checks it): one place to read what can go wrong. So is
``ExitCode``, every exit code ``launch`` ends with: the classes name theirs from it, and so does
every command's ``return``.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Every exit code of ``launch``, in one table: docs/errors.md's "All exit codes", which
    ``tests/unit/test_exit_codes.py`` checks row for row against this enum.

    A script tells the kinds of failure apart by these numbers alone: what differed in the bits
    (1), what was typed or given wrong (2), what was refused as meaningless (3), what was damaged
    (4, 5), a seal whose signature fails (7), or this machine that cannot do what was asked (8).
    """

    OK = 0  # success; IDENTICAL, EQUIVALENT, REPRODUCED, STABLE
    FAILED = 1  # a failed run; DIFFERENT, NOT EQUIVALENT, DIVERGED, NOT STABLE, NOT JUDGED
    USAGE = 2  # bad input: an option, an override, a path, data, a run that cannot be used so
    REFUSED = 3  # REFUSED, NOT COMPARABLE: the comparability keys differ
    SEAL = 4  # a run incomplete or modified after sealing, a damaged snapshot object
    SCHEMA = 5  # a stored file of a schema this launcher cannot read
    NOTHING_COMPARED = 6  # neither run recorded a result: never IDENTICAL nor REPRODUCED
    SIGNATURE = 7  # a signed seal that does not verify, or a signature required and missing
    ENVIRONMENT = 8  # this machine cannot: no Docker daemon, a failed image build, a store it cannot write, no GPU
    INTERNAL = 70  # an unexpected internal error (a bug): EX_SOFTWARE
    INTERRUPTED = 130  # Ctrl-C, SIGTERM, SIGUSR1, SIGUSR2: 128 + SIGINT
    BROKEN_PIPE = 141  # the reader of the output went away (``| head``): 128 + SIGPIPE


class LauncherError(Exception):
    """Base class: an expected failure with a one-line message."""

    exit_code = ExitCode.USAGE

    def __str__(self) -> str:
        # One line, always: the CLI prints exactly this.
        return " ".join(super().__str__().split())


class ConfigError(LauncherError):
    """The composed configuration is invalid (bad value, unknown option)."""


class UsageError(ConfigError):
    """Bad command-line usage: the one-line error, then ``hint`` (a usage line) below it."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


class DataError(LauncherError):
    """Training data is missing, unreadable or not the expected shape."""


class StoreError(LauncherError):
    """The run store cannot be written, read or locked: a fault of this machine (exit 8)."""

    exit_code = ExitCode.ENVIRONMENT


class NotAStore(StoreError):
    """A path given as a store does not exist, is not a directory, or is a run directory: bad
    input (exit 2), not a fault of the store."""

    exit_code = ExitCode.USAGE


class StoreBusy(StoreError):
    """The store's ``.gc.lock`` was held the other way (a gc, or runs storing their snapshots) for
    longer than a caller would wait."""


class IndexUnreadable(Exception):
    """``index.sqlite`` exists but is not a readable SQLite database. Not a ``LauncherError``: it
    never fails a command, because the index is derived from the run directories: whoever meets it
    (record/store/index.py) moves the file aside and rebuilds it, or reads the directories."""


class RunNotFound(LauncherError):
    """A path given as a run is missing or is not a run directory."""


class SealError(LauncherError):
    """A stored run is incomplete or was modified after it was sealed."""

    exit_code = ExitCode.SEAL

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class SnapshotError(SealError):
    """A snapshot object is missing or does not match its name: the store was damaged (exit 4)."""


class SchemaError(LauncherError):
    """A stored file has a schema version this launcher cannot read."""

    exit_code = ExitCode.SCHEMA


class CellError(LauncherError):
    """A notebook cell raised (``train=notebook``): the run fails, naming the cell and the line."""


class DeterminismError(LauncherError):
    """A determinism setting did not take effect in the job process."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or []


class NotComparable(LauncherError):
    """Two fingerprints differ in fields that decide comparability."""

    exit_code = ExitCode.REFUSED

    def __init__(self, message: str, differences: list[tuple[str, object, object]]):
        super().__init__(message)
        self.differences = differences


class ResumeError(LauncherError):
    """A run cannot be resumed (complete, no checkpoint, ...)."""


class DockerUnavailable(LauncherError):
    """No Docker daemon answers (runtime=docker, launch image ...): exit 8."""

    exit_code = ExitCode.ENVIRONMENT

    def __init__(self, url: str) -> None:
        super().__init__(f"no Docker daemon answers at {url}: start one (dockerd) or use runtime=local")
        self.url = url


class ImageError(LauncherError):
    """An image cannot be built or found here (a failed build, a missing base image, no debootstrap,
    an unreachable index): exit 8; the message names the next step."""

    exit_code = ExitCode.ENVIRONMENT


class ImageSpecError(ImageError):
    """An image is specified wrongly (an ``image.*`` setting, a template's placeholder): bad input
    (exit 2)."""

    exit_code = ExitCode.USAGE


class LockfileError(ImageError):
    """A lockfile is missing, has an unpinned requirement or a requirement without hashes: bad input
    (exit 2; ``launch image lock`` makes a good one)."""

    exit_code = ExitCode.USAGE

    def __init__(self, message: str, path: str | None = None, requirement: str | None = None):
        super().__init__(message)
        self.path = path
        self.requirement = requirement


class BuildFailed(ImageError):
    """``docker build`` failed; carries the failing step and the tail of the build log."""

    def __init__(self, message: str, step: str | None = None, log_tail: str = "") -> None:
        super().__init__(message)
        self.step = step
        self.log_tail = log_tail


class PackagesMismatch(ImageError):
    """A rebuilt image's installed package tree differs from the one recorded."""

    def __init__(self, message: str, expected: str, actual: str) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual


class GpuUnavailable(LauncherError):
    """A job asks for GPUs this machine or its Docker daemon cannot give (refused before a run): exit 8."""

    exit_code = ExitCode.ENVIRONMENT


class RebuildError(LauncherError):
    """A stored run's Python environment cannot be rebuilt here (``replay --rebuild``); names the
    distribution. A fault of this machine, as a failed image build is (exit 8)."""

    exit_code = ExitCode.ENVIRONMENT

    def __init__(self, message: str, distribution: str | None = None) -> None:
        super().__init__(message)
        self.distribution = distribution


class UnsafeRun(LauncherError):
    """A run names something that would be written or read outside where it belongs (a ``..`` in a
    snapshot path, an object name that is not a sha256, a link out of the run directory): a
    crafted or corrupted run, refused before anything is written. ``entry`` is what it named."""

    def __init__(self, message: str, entry: str | None = None) -> None:
        super().__init__(message)
        self.entry = entry


class ArchiveError(LauncherError):
    """An archive (``launch pack``'s file) cannot be read or holds what it must not: truncated or
    corrupted, a member outside its place, an object unlike its name, a manifest naming what is
    missing. Refused in one line before anything lands outside the destination (exit 2)."""

    def __init__(self, message: str, member: str | None = None) -> None:
        super().__init__(message)
        self.member = member


class SignatureError(LauncherError):
    """A run's seal is signed and the signature does not verify, or a signature is required and the
    run has none a trusted key made (``store.require_signed``): refused, naming the run (exit 7: not
    a comparability refusal, 3, but a seal that cannot be trusted)."""

    exit_code = ExitCode.SIGNATURE

    def __init__(self, message: str, run: str | None = None) -> None:
        super().__init__(message)
        self.run = run
