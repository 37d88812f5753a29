"""The launcher's side of a stop: the record of how a run ended is never cut short by a signal.

``held()`` makes a signal wait while the launcher records how a run ended;
``stopping_launcher()``, once a signal stopped a job, ignores further ones where nothing
else (a sweep) handles them, so the launcher records the run and says so. The job's side,
and the signals both sides mean, are ``launcher.job.interrupts``.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from launcher.job.interrupts import REASONS, SIGNALS

__all__ = ["REASONS", "held", "stopping_launcher"]


@contextmanager
def held() -> Iterator[None]:
    """In the launcher, while it records how a run ended: SIGINT and SIGTERM are noted, not
    acted on, and delivered (to the handlers they had) when the record is written."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    for signum, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(signum, lambda s, frame: noted.append(s))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        for signum in dict.fromkeys(noted):
            signal.raise_signal(signum)


def stopping_launcher() -> None:
    """A signal has stopped a job: further SIGINTs and SIGTERMs, which would only cut short
    the record of that run and its summary line, are ignored from now on, unless a handler
    of our own (a sweep's, which aborts on a second Ctrl-C) is installed for them."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in SIGNALS:
        if signal.getsignal(signum) in (signal.default_int_handler, signal.SIG_DFL):
            signal.signal(signum, signal.SIG_IGN)
