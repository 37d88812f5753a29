"""Which environment variables the job's own code reads, and what it found.

A script that takes its learning rate from ``os.environ["LR"]`` (or its batch size from
``os.getenv("BATCH_SIZE", "32")``) computes other bits when the variable changes, and
nothing else records it: the fingerprint's environment is an allowlist of the numerics
libraries' variables. So, in the job process, every read of ``os.environ`` (``[]``,
``get``, ``in``, ``os.getenv``, which are all built on ``__getitem__``) is attributed to
the first caller outside the standard library; when that is the job's own code (not
TensorFlow, Keras, another installed library or the launcher), the variable and what it
found (its value, or unset) are recorded the first time, a secret-looking name only by
the hash of its value (``launcher.record.probe.environment.as_read``). They go into the
comparability key as ``environment_read``.

Not seen: a copy of the whole environment (``dict(os.environ)``, iteration), a child
process's reads, and C code calling ``getenv`` itself.
"""

from __future__ import annotations

import os
import sys

from launcher.job.observe import callers
from launcher.record.probe import environment

read: dict[str, str | None] = {}  # name -> what the job's code found first (None: unset)
# The launcher's own variables (launcher.job.userapi): where this run writes, and its seed and
# trace setting, which the key holds as settings. Keyed by value, they would refuse every
# comparison, replay and resume of a run whose code reads them.
LAUNCHERS_OWN = frozenset({"LAUNCH_RUN_DIR", "LAUNCH_OUTPUT_DIR", "LAUNCH_SEED", "LAUNCH_TRACE_EVERY"})
_owned: set[str] = set(LAUNCHERS_OWN)
_original = None


def set_by_the_launcher(name: str) -> None:
    """``name`` is the launcher's own in this job: ``TF_CONFIG`` of a multi-worker run, which names
    fresh ports every run and which the key holds as ``cluster.*`` (workers, their order)."""
    _owned.add(name)


def install() -> None:
    """Start attributing reads of ``os.environ`` (once per process)."""
    global _original
    if _original is not None:
        return
    _original = os._Environ.__getitem__
    kind = callers.code_kind(callers.roots())

    def jobs_code(filename: str) -> bool:
        return kind(filename) == "user"

    def standard(filename: str) -> bool:
        return kind(filename) in ("frozen", "python")

    def getitem(self, key):
        try:
            value = _original(self, key)
        except KeyError:
            _note(self, key, None)
            raise
        _note(self, key, value)
        return value

    def _note(self, key, value) -> None:
        if self is not os.environ or not isinstance(key, str) or key in read or key in _owned:
            return
        frame = sys._getframe(2)
        while frame is not None and standard(frame.f_code.co_filename):
            frame = frame.f_back  # os.getenv, Mapping.get, Mapping.__contains__
        if frame is not None and jobs_code(frame.f_code.co_filename):
            read[key] = environment.as_read(key, value)

    os._Environ.__getitem__ = getitem


def recorded() -> dict[str, str | None]:
    return dict(sorted(read.items()))
