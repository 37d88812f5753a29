"""The launcher's own ``python -m`` entry points, listed in one place (as submitit's ``_submit.py``
is its job's): which module a process the launcher starts begins with, and what for.

Each is a module of the package with an ``if __name__ == "__main__":`` block; the command lines
that start one are built by ``argv`` from the names here, never spelled out where they are used
(``tests/unit/test_owner_code.py`` checks both). Moving one of these modules means changing its
name here and nowhere else, but for ``JOB``: images and users call it by its name too
(``images/*/Dockerfile.template``'s ``ENTRYPOINT``), so it stays.

A leaf: it imports nothing of the project. The job process never imports it (``proc`` imports it
where it builds a command line), so adding an entry point changes no run's comparability key.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class EntryPoint:
    """A module run as ``python -m MODULE ARGS``."""

    module: str
    args: str  # its arguments, as its usage line names them
    what: str  # what it is for, and who starts it


JOB = EntryPoint(
    "launcher.bootstrap",
    "RUN_DIR",
    "the job process, by its public name: runtime=local's child (run/runtime.py), the images' ENTRYPOINT",
)
JOB_MODULE = EntryPoint(
    "launcher.job.bootstrap",
    "RUN_DIR",
    "the job process under its module's own name; JOB is the name the launcher and images use",
)
CLI = EntryPoint("launcher.cli.main", "[ARGS]...", "the command line, as `launch` (and `python -m launcher`)")
PACKAGE = EntryPoint("launcher", "[ARGS]...", "the command line, as `launch` (launcher/__main__.py)")
PLACE = EntryPoint(
    "launcher.proc",
    "place [--bind SOURCE TARGET]... -- PROGRAM [ARG]...",
    "a program run with kept files bind-mounted at the paths a run read them from (replay's job)",
)
REAP = EntryPoint(
    "launcher.docker.containers",
    "reap OWNER_PID CONTAINER_ID",
    "the watchdog that removes a job's container once the launcher that started it is gone",
)
TREEHASH = EntryPoint(
    "launcher.docker.treehash",
    "[--lines] DIR",
    "the content hash of the tree an image build installed, computed inside the image (standard library only)",
)
CPUID = EntryPoint(
    "launcher.record.probe.cpuid",
    "",
    "the CPU this process sees, by CPUID, as JSON: run under qemu-user for `replay --cpu MODEL`",
)

ALL = (JOB, JOB_MODULE, CLI, PACKAGE, PLACE, REAP, TREEHASH, CPUID)


def argv(python: str, entry: EntryPoint, *args: str, safe_path: bool = False) -> list[str]:
    """``python [-P] -m MODULE ARGS``: the command that starts ``entry``. ``safe_path``: ``-P`` where
    this launcher's Python has it (3.11+), so the launcher is imported from where it is installed
    (``PYTHONPATH``), never from a ``launcher/`` of the working directory."""
    safe = ["-P"] if safe_path and sys.version_info >= (3, 11) else []
    return [python, *safe, "-m", entry.module, *args]
