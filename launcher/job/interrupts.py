"""Stopping a run on Ctrl-C, SIGTERM, SIGUSR1 or SIGUSR2: the job stops at a safe point, the
launcher records it (a run with an epoch checkpoint can then be resumed: ``launch resume``).

The launcher owns the signals (``launcher.proc.run_job``): it starts the job in a session
of its own, so a terminal's Ctrl-C reaches the launcher only, with the stop signals
blocked; on its first stop signal it sends the job that one signal. In the job,
``install()`` (the bootstrap, before any task code) catches both and unblocks them, so a
signal sent while the job was starting is delivered then. The first signal becomes one
``KeyboardInterrupt``, raised only where Python code may raise:

- while a training step or a Keras ``fit`` runs (``deferred``), at the end of the current
  batch or step (``safe_point``), so training is never cut inside a step or a checkpoint;
- never inside Python code that native code called: an import (a native module may be
  initializing: pybind11 turns the exception into ``std::terminate``, measured), an audit
  hook, a finalizer, a ``tf.py_function``. A watcher thread waits until the main thread
  is out of it and signals it again;
- anywhere else, at once.

Further signals never raise a second one.

``SIGNALS`` and ``REASONS`` are the contract with the launcher, whose own side of a stop is
``launcher.run.signals``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

# Ctrl-C; SIGTERM (Slurm, Kubernetes, spot agents); SIGUSR1/2 (Slurm's --signal before a time limit)
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
REASONS = {
    signal.SIGINT: "Ctrl-C",
    signal.SIGTERM: "SIGTERM",
    signal.SIGUSR1: "SIGUSR1",
    signal.SIGUSR2: "SIGUSR2",
}  # the run's error, by the signal that stopped it

_requested: int | None = None  # the signal that asked the job to stop
_raised = False  # the one KeyboardInterrupt has been raised
_depth = 0  # > 0 while a step or a fit runs: a stop waits for its next safe point
_wake = threading.Event()  # set by the handler when the stop must wait: the watcher takes over

# Python code that native code calls, where an exception is not the Python caller's to handle.
_CALLED_FROM_NATIVE = (
    os.path.join(os.path.dirname(__file__), "observe", "reads.py"),  # the job's audit hook
    os.path.join("tensorflow", "python", "ops", "script_ops.py"),  # tf.py_function, tf.numpy_function
)


def install() -> None:
    """In the job: the first SIGINT or SIGTERM stops it (once); signals sent earlier arrive now."""
    # Started now, idle: a thread started by the handler could deadlock on a lock the
    # interrupted code holds (threading's own, when it was starting a thread).
    threading.Thread(target=_watch, args=(threading.main_thread().ident,), name="launch-stop", daemon=True).start()
    for signum in SIGNALS:
        signal.signal(signum, _handle)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)


def _handle(signum: int, frame) -> None:
    global _requested
    if _raised:
        return  # one stop: further signals change nothing
    if _requested is None:
        _requested = signum
    if _depth or unsafe(frame):
        _wake.set()
        return
    _stop()


def unsafe(frame) -> bool:
    """Whether a stack (innermost ``frame`` first) is inside an import, a finalizer, or Python
    code that native code called: no place for a KeyboardInterrupt."""
    while frame is not None:
        code = frame.f_code
        name = code.co_filename
        if name.startswith("<frozen importlib") or code.co_name == "__del__":
            return True
        if name.endswith(_CALLED_FROM_NATIVE) or name.endswith(os.path.join("", "weakref.py")):
            return True
        frame = frame.f_back
    return False


def _watch(main: int) -> None:
    """Once a stop waits: until it is raised, whenever the main thread is out of the unsafe
    place and not in a step, signal it again (its handler then raises)."""
    _wake.wait()
    while not _raised:
        time.sleep(0.02)
        frame = sys._current_frames().get(main)
        if frame is None:
            return
        if not _depth and not unsafe(frame):
            signal.pthread_kill(main, _requested or signal.SIGINT)
            time.sleep(0.2)


def _stop() -> None:
    global _raised
    if _requested is not None and not _raised:
        _raised = True
        _note_stopped()
        raise KeyboardInterrupt


def _note_stopped() -> None:
    """On record before the stop is raised: the job was stopped. A script that catches the
    ``KeyboardInterrupt`` (``except KeyboardInterrupt: model.save(...)``) and then ends with
    status 0 has still not completed; the launcher reads this (``was_stopped``) and ends the run
    interrupted, resumable, whatever the exit code. Never fails the stop."""
    run_dir = os.environ.get("LAUNCH_RUN_DIR")
    if not run_dir:
        return
    try:
        from launcher.job.observe import reads
        from launcher.record import layout
        from launcher.record.store import runs

        with reads.paused():  # the launcher's own file, not a write of the job's
            runs.write_json(
                layout.RunPaths(run_dir).error,
                {"type": "KeyboardInterrupt", "message": REASONS.get(_requested, "Ctrl-C")},
            )
    except Exception:  # noqa: BLE001 - the stop must happen; the exit code then decides, as before
        pass


def was_stopped(run_dir) -> str | None:
    """The reason, when the job in ``run_dir`` was stopped by a stop signal it received (it
    raised the ``KeyboardInterrupt``), whatever its exit code; None otherwise. Read by the launcher."""
    from launcher.errors import LauncherError
    from launcher.record import layout
    from launcher.record.store import runs

    path = layout.RunPaths(run_dir).error
    try:
        error = runs.read_json(path) if path.exists() else None
    except LauncherError:  # unreadable: not a stop on record
        return None
    if isinstance(error, dict) and error.get("type") == "KeyboardInterrupt":
        return str(error.get("message") or "Ctrl-C")
    return None


def safe_point() -> None:
    """After a batch or a step: stop here if a stop was asked for."""
    _stop()


@contextmanager
def deferred() -> Iterator[None]:
    """A step or a ``fit`` runs: a stop asked for meanwhile waits for a safe point (a batch's
    end inside, or the end of the outermost block)."""
    global _depth
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
    if not _depth:
        _stop()


def stopping() -> str:
    """The job is ending interrupted: ignore further signals; the reason to record."""
    global _raised
    _raised = True
    return REASONS.get(_requested or signal.SIGINT, "Ctrl-C")


def keras_callback(keras):
    """A callback whose batch starts and epoch ends are safe points (add it to ``fit``).

    A batch's start, not its end: Keras calls batch-start hooks in this thread without
    waiting for the step's results, so the callback costs ``fit`` nothing.
    """

    class SafePoints(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None) -> None:
            safe_point()

        def on_test_batch_begin(self, batch, logs=None) -> None:
            safe_point()

        def on_predict_batch_begin(self, batch, logs=None) -> None:
            safe_point()

        def on_epoch_end(self, epoch, logs=None) -> None:
            safe_point()

    return SafePoints()
