"""The launcher owns Ctrl-C and SIGTERM (issue 27): proc.run_job and launcher.job.interrupts,
with real signals to small Python children (no TensorFlow). The whole path, with real training
interrupted at random moments, is tests/integration/test_interrupts.py."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from launcher import proc
from launcher.job import interrupts
from launcher.run import signals
from tests.conftest import REPO

# A job as the bootstrap is one: it installs the stop, says so, and ends 130 on KeyboardInterrupt.
JOB = """
import sys, time
from launcher.job import interrupts
print("started", flush=True)
time.sleep({before})
try:
    interrupts.install()
    {then}
    print("ready", flush=True)
    time.sleep(30)
except KeyboardInterrupt:
    print("stopped by", interrupts.stopping(), flush=True)
    sys.exit(130)
"""


def _run(
    tmp_path: Path,
    *,
    signals: list[int],
    wait_for: str = "ready",
    before: float = 0,
    then: str = "pass",
    grace_s: float = 20.0,
    gap_s: float = 0.3,
) -> tuple[proc.Ended, str]:
    """Run a job with run_job; once its log says ``wait_for``, signal this process as a terminal would."""
    log = tmp_path / "log.txt"
    log.touch()

    def send() -> None:
        deadline = time.monotonic() + 30
        while wait_for not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.01)
        for signum in signals:
            os.kill(os.getpid(), signum)
            time.sleep(gap_s)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    script = JOB.format(before=before, then=then)
    ended = proc.run_job([sys.executable, "-c", script], env, log, echo=False, grace_s=grace_s)
    sender.join()
    return ended, log.read_text()


def test_the_first_signal_is_sent_on_once_and_the_job_stops_by_itself(tmp_path):
    ended, log = _run(tmp_path, signals=[signal.SIGINT])
    assert ended == proc.Ended(130, signal.SIGINT, None)
    assert "stopped by Ctrl-C" in log


def test_sigterm_is_sent_on_as_sigterm(tmp_path):
    ended, log = _run(tmp_path, signals=[signal.SIGTERM])
    assert ended == proc.Ended(130, signal.SIGTERM, None)
    assert "stopped by SIGTERM" in log


def test_a_signal_sent_while_the_job_starts_waits_until_it_can_stop(tmp_path):
    # Sent while the job sleeps before install(): blocked, not lost, not a traceback from startup.
    ended, log = _run(tmp_path, signals=[signal.SIGINT], wait_for="started", before=1.0)
    assert ended == proc.Ended(130, signal.SIGINT, None)
    assert "ready" not in log and "stopped by Ctrl-C" in log


def test_a_second_signal_kills_the_job_at_once(tmp_path):
    ignore = "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN)"
    started = time.monotonic()
    ended, _ = _run(tmp_path, signals=[signal.SIGINT, signal.SIGINT], then=ignore)
    assert ended == proc.Ended(-signal.SIGKILL, signal.SIGINT, "a second SIGINT")
    assert time.monotonic() - started < 10


def test_a_job_that_does_not_stop_is_killed_when_the_grace_ends(tmp_path):
    ignore = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)"
    ended, _ = _run(tmp_path, signals=[signal.SIGTERM], then=ignore, grace_s=0.5)
    assert ended == proc.Ended(-signal.SIGKILL, signal.SIGTERM, "it did not stop within 0.5 s")


def test_our_handlers_are_restored_and_an_ignored_signal_stays_ignored(tmp_path):
    before = signal.getsignal(signal.SIGINT)
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)  # `launch &` in a script
    try:
        log = tmp_path / "log.txt"
        ended = proc.run_job(
            [sys.executable, "-c", "import os, signal; os.kill(os.getppid(), signal.SIGTERM)"],
            os.environ,
            log,
            echo=False,
        )
        assert ended == proc.Ended(0, None, None)  # the launcher ignored it, so the job was not stopped
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert signal.getsignal(signal.SIGINT) is before


def test_a_handler_installed_before_hears_each_signal_too(tmp_path):
    heard = []
    previous = signal.signal(signal.SIGINT, lambda s, f: heard.append(s))  # a sweep's: no queued job starts
    try:
        ended, _ = _run(tmp_path, signals=[signal.SIGINT])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert ended.returncode == 130 and heard == [signal.SIGINT]


def test_the_job_runs_in_a_session_of_its_own(tmp_path):
    log = tmp_path / "log.txt"
    proc.run_job(
        [sys.executable, "-c", "import os; print(os.getsid(0), os.getpgid(0), os.getpid())"],
        os.environ,
        log,
        echo=False,
    )
    sid, pgid, pid = map(int, log.read_text().split())
    assert sid == pgid == pid != os.getsid(0)


# ---------------------------------------------------------------- the job's side, in this process
def test_no_stop_is_raised_inside_an_import_or_a_finalizer(tmp_path, monkeypatch):
    (tmp_path / "importing_now.py").write_text(
        "import sys\nfrom launcher.job import interrupts\nSEEN = interrupts.unsafe(sys._getframe())\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import importing_now  # noqa: F401 (its import records what it saw)

    assert importing_now.SEEN is True
    assert interrupts.unsafe(sys._getframe()) is False

    seen = []

    class Finalized:
        def __del__(self):
            seen.append(interrupts.unsafe(sys._getframe()))

    Finalized()
    assert seen == [True]


def test_a_stop_during_a_step_waits_for_its_end(monkeypatch):
    monkeypatch.setattr(interrupts, "_requested", None)
    monkeypatch.setattr(interrupts, "_raised", False)
    monkeypatch.setattr(interrupts, "_wake", threading.Event())
    after = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts.deferred():
            with interrupts.deferred():  # a tf.function call inside a fit
                interrupts._handle(signal.SIGINT, sys._getframe())  # no raise: a step runs
                after.append("inner step ended")
            after.append("fit went on to its end")  # no batch boundary in between
    assert after == ["inner step ended", "fit went on to its end"]
    assert interrupts._wake.is_set()  # the watcher was told
    interrupts._handle(signal.SIGINT, sys._getframe())  # raised once: further signals are ignored
    assert interrupts.stopping() == "Ctrl-C"


def test_held_signals_wait_for_the_record_then_reach_their_handler():
    heard = []
    previous = signal.signal(signal.SIGINT, lambda s, f: heard.append(s))
    try:
        with signals.held():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            assert heard == []
        assert heard == [signal.SIGINT]  # once, after the record
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGUSR2])
def test_slurms_warning_signals_stop_the_job_as_sigterm_does(tmp_path, signum):
    # Slurm's --signal=USR1@N (or USR2) before a time limit: the job stops, the run is resumable.
    ended, log = _run(tmp_path, signals=[signum])
    assert ended == proc.Ended(130, signum, None)
    assert f"stopped by {signal.Signals(signum).name}" in log
