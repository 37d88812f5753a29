"""The one place that runs programs: no shell, output streamed to terminal and log.

Like nox's ``popen``: callers build argument lists with pure functions and hand
them here.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path


def run_streaming(
    argv: Sequence[str],
    env: Mapping[str, str],
    log_path: Path,
    cwd: str | None = None,
    echo: bool = True,
    preexec_affinity: set[int] | None = None,
) -> int:
    """Run ``argv``; copy its merged stdout/stderr to our stdout and to ``log_path``.

    Returns the exit code (negative for a signal, as ``subprocess`` does). Ctrl-C is
    passed to the child, and the child is killed if we are interrupted twice.
    """

    def _child_setup() -> None:
        _die_with_parent()
        if preexec_affinity:
            os.sched_setaffinity(0, preexec_affinity)

    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_child_setup,
        )
        try:
            _pump(proc, log, echo)
            return proc.wait()
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)
            try:
                _pump(proc, log, echo)
                return proc.wait(timeout=30)
            except (KeyboardInterrupt, subprocess.TimeoutExpired):
                proc.kill()
                return proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this (child) process when its parent dies: a killed
    launcher must not leave a job training on, orphaned."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass  # not glibc/Linux: the job outlives a killed launcher


def _pump(proc: subprocess.Popen, log, echo: bool) -> None:
    assert proc.stdout is not None
    out = sys.stdout.buffer
    logging = True
    while True:
        chunk = proc.stdout.read1(65536)
        if not chunk:
            return
        if logging:
            try:
                log.write(chunk)
                log.flush()
            except OSError as exc:  # a full disk: the job goes on, and says how it ends
                logging = False
                try:
                    log.close()  # drops what could not be written
                except OSError:
                    pass
                print(f"[launch] {log.name} is no longer written: {exc.strerror}", file=sys.stderr, flush=True)
        if echo:
            out.write(chunk)
            out.flush()


def capture(argv: Sequence[str], cwd: str | None = None, timeout: float = 10) -> str | None:
    """Run a probe; its stdout, or None when the program is missing or fails."""
    try:
        done = subprocess.run(
            list(argv), cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def spawn_detached(argv: Sequence[str]) -> subprocess.Popen:
    """Start a helper in its own session: Ctrl-C in our terminal does not reach it.

    For watchdogs that must outlive an interrupted or killed parent; the caller ends
    it with ``terminate()`` when it is no longer needed.
    """
    return subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
