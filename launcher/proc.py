"""The one place that runs programs: no shell, output streamed to terminal and log.

Like nox's ``popen``: callers build argument lists with pure functions and hand
them here.

It also runs a program with some files placed at other files' paths (``place_argv``,
``python -m launcher.proc place``): a replay's job reads the data the run kept at the
absolute path the run read it from, through a bind mount in a mount namespace of the job's
own (user namespaces where not root), which nothing outside the job sees.
"""

from __future__ import annotations

import ctypes
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from launcher import console
from launcher.console import NoiseFilter

# Ctrl-C; SIGTERM (Slurm, Kubernetes, spot agents); SIGUSR1/2 (Slurm's --signal before a time limit)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
# How long a job asked to stop may take before it is killed: below the 30 s that Slurm
# (KillWait) and Kubernetes (terminationGracePeriodSeconds) give by default between their
# SIGTERM and SIGKILL, so the launcher still has time to record how the run ended.
STOP_GRACE_S = 20.0


def run_streaming(
    argv: Sequence[str],
    env: Mapping[str, str],
    log_path: Path,
    cwd: str | None = None,
    echo: bool = True,
    preexec_affinity: set[int] | None = None,
    progress: console.Progress | None = None,
) -> int:
    """Run ``argv``; copy its merged stdout/stderr to our stdout (``echo``) and to ``log_path``.
    ``progress``: its output is fed to it too, which notes the lines that say what the program
    is doing (pip's, Docker's) on stderr while the log gets all of them.

    Returns the exit code (negative for a signal, as ``subprocess`` does). Ctrl-C is
    passed to the child, and the child is killed if we are interrupted twice.
    """

    def _child_setup() -> None:
        _die_with_parent()
        if preexec_affinity:
            os.sched_setaffinity(0, preexec_affinity)

    with open(log_path, "ab") as log:
        proc = _start(argv, env, cwd, _child_setup)
        try:
            _pump(proc, log, echo, progress=progress)
            return proc.wait()
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)
            try:
                _pump(proc, log, echo, progress=progress)
                return proc.wait(timeout=30)
            except (KeyboardInterrupt, subprocess.TimeoutExpired):
                proc.kill()
                return proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@dataclass(frozen=True)
class Ended:
    """How a job started by ``run_job`` ended."""

    returncode: int  # negative for a signal, as ``subprocess`` reports it
    stop: int | None = None  # the signal (SIGINT, SIGTERM) that asked us to stop the job, if one came
    killed: str | None = None  # why we killed the job instead of letting it stop, if we did


def run_job(
    argv: Sequence[str],
    env: Mapping[str, str],
    log_path: Path,
    cwd: str | None = None,
    echo: bool = True,
    preexec_affinity: set[int] | None = None,
    grace_s: float = STOP_GRACE_S,
) -> Ended:
    """Run a job like ``run_streaming``, but this process owns SIGINT and SIGTERM.

    The job runs in a session of its own (a terminal's Ctrl-C reaches only us) and starts
    with SIGINT and SIGTERM blocked, to be unblocked when it can stop cleanly (a signal sent
    before then waits). Our first SIGINT or SIGTERM is sent on to the job, once; a second
    one, or ``grace_s`` seconds without the job ending, kills its process group. A handler
    installed before ours (a sweep's) hears each signal too. A signal ignored when we
    started (``launch &`` in a script) stays ignored; off the main thread, where no handler
    can be installed, the job shares our process group instead, as ``run_streaming``'s does.
    """
    own = threading.current_thread() is threading.main_thread()

    def _child_setup() -> None:
        _die_with_parent()
        if preexec_affinity:
            os.sched_setaffinity(0, preexec_affinity)
        if own:
            signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)

    stopper = _Stopper(None, grace_s)
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS} if own else {}
    stopper.previous = previous
    proc = None
    try:
        # Ours before the job exists: a signal that arrives while it is being started is
        # noted, and sent to it as soon as it runs (it waits, blocked, until it can stop).
        for signum, handler in previous.items():
            if handler is not signal.SIG_IGN:
                signal.signal(signum, stopper.handle)
        with open(log_path, "ab") as log:
            proc = _start(argv, env, cwd, _child_setup, new_session=own)
            stopper.started(proc)
            _pump(proc, log, echo, tick=stopper.tick)
            return Ended(proc.wait(), stopper.signal, stopper.killed)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        if proc is not None and proc.poll() is None:
            stopper.kill("the launcher stopped")
            proc.wait()


def _start(argv: Sequence[str], env: Mapping[str, str], cwd: str | None, setup, new_session: bool = False):
    """The job's process: its output (stdout and stderr as one) to us, no stdin."""
    return subprocess.Popen(
        list(argv),
        env=dict(env),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        preexec_fn=setup,
        start_new_session=new_session,
    )


class _Stopper:
    """Our side of a stop: the first signal asks the job, a second one or the grace's end kills it."""

    def __init__(self, proc: subprocess.Popen | None, grace_s: float) -> None:
        self.proc, self.grace_s = proc, grace_s
        self.signal: int | None = None
        self.deadline: float | None = None
        self.killed: str | None = None
        self.previous: dict = {}

    def started(self, proc: subprocess.Popen) -> None:
        """The job runs: a signal noted while it was being started is sent to it now."""
        self.proc = proc
        if self.signal is not None:
            self.deadline = time.monotonic() + self.grace_s
            proc.send_signal(self.signal)

    def handle(self, signum: int, frame) -> None:
        if self.signal is None:
            self.signal = signum
            self.deadline = time.monotonic() + self.grace_s
            if self.proc is not None and self.proc.poll() is None:
                self.proc.send_signal(signum)
        elif self.proc is None:
            pass  # a second signal before the job exists: the first one stops it
        elif self.killed is None:
            self.kill(f"a second {signal.Signals(signum).name}")
        earlier = self.previous.get(signum)
        if callable(earlier) and earlier is not signal.default_int_handler:
            earlier(signum, frame)  # e.g. a sweep's: it starts no queued job

    def tick(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline and self.killed is None:
            self.kill(f"it did not stop within {self.grace_s:g} s")

    def kill(self, why: str) -> None:
        if self.proc.poll() is not None:
            return
        self.killed = why
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the job and whatever it started
        except (ProcessLookupError, PermissionError):
            self.proc.kill()


# ---------------------------------------------------------------- many processes of one job
# How long the other workers of a multi-worker job, asked to stop when one of them died, may take
# before they are killed: a worker blocked in a collective never reaches a place where it could stop.
DEAD_GRACE_S = 10.0


@dataclass(frozen=True)
class Member:
    """One process of a group started by ``run_group``: its command line, environment and log."""

    argv: Sequence[str]
    env: Mapping[str, str]
    log_path: Path
    echo: bool = False  # its output on our stdout too (the chief's), less TensorFlow's start-up noise


@dataclass(frozen=True)
class GroupEnded:
    """How a group of processes started by ``run_group`` ended."""

    ended: list[Ended]  # each member's, in order
    stop: int | None = None  # the signal that asked us to stop the group, if one came
    first_failed: int | None = None  # the member that ended first with a non-zero status (or by a signal)


def run_group(
    members: Sequence[Member],
    cwd: str | None = None,
    preexec_affinity: set[int] | None = None,
    grace_s: float = STOP_GRACE_S,
    dead_grace_s: float = DEAD_GRACE_S,
) -> GroupEnded:
    """Run the processes of one job (a multi-worker job's workers) together, as ``run_job`` runs
    one, each in a session of its own with SIGINT and SIGTERM blocked until it can stop: our first
    SIGINT or SIGTERM goes to every member, a second one or ``grace_s`` seconds kills them all.
    When one member ends with a non-zero status, the others can never finish (they wait for it in
    a collective): they are asked to stop and, ``dead_grace_s`` seconds later, killed with their
    process groups. Members are asked with SIGINT, whatever the signal that came to us. Nothing
    is left running when this returns."""
    own = threading.current_thread() is threading.main_thread()

    def _child_setup() -> None:
        _die_with_parent()
        if preexec_affinity:
            os.sched_setaffinity(0, preexec_affinity)
        if own:
            signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)

    group = _Group(grace_s, dead_grace_s)
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS} if own else {}
    logs: list = []
    try:
        for signum, handler in previous.items():
            if handler is not signal.SIG_IGN:
                signal.signal(signum, group.handle)
        for member in members:
            logs.append(open(member.log_path, "ab"))  # noqa: SIM115 - closed in finally, with the others
            group.procs.append(_start(member.argv, member.env, cwd, _child_setup, new_session=own))
        group.started()
        _pump_group(group, logs, [m.echo for m in members])
        codes = [p.wait() for p in group.procs]
        return GroupEnded(
            [Ended(code, group.signal, group.killed.get(i)) for i, code in enumerate(codes)],
            group.signal,
            group.first_failed,
        )
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        for i, p in enumerate(group.procs):
            if p.poll() is None:
                group.kill(i, "the launcher stopped")
                p.wait()
        for log in logs:
            log.close()


class _Group:
    """Our side of a group's stop: a signal or a member's death asks the others to stop; a
    second signal, or the grace's end, kills them."""

    def __init__(self, grace_s: float, dead_grace_s: float) -> None:
        self.grace_s, self.dead_grace_s = grace_s, dead_grace_s
        self.procs: list[subprocess.Popen] = []
        self.signal: int | None = None
        self.deadline: float | None = None
        self.killed: dict[int, str] = {}
        self.first_failed: int | None = None
        self.pending = False

    def started(self) -> None:
        if self.signal is not None:  # a signal noted while they were being started
            self._ask(self.signal)

    def _ask(self, signum: int) -> None:
        # As SIGINT: in a multi-worker TensorFlow job, the coordination service's preemption
        # notifier takes SIGTERM for itself (measured: the job trained on), never the job's handler.
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)

    def handle(self, signum: int, frame) -> None:
        if self.signal is None:
            self.signal = signum
            self.deadline = time.monotonic() + self.grace_s
            self._ask(signum)
        else:
            for i in range(len(self.procs)):
                self.kill(i, f"a second {signal.Signals(signum).name}")

    def tick(self) -> None:
        if self.first_failed is None:
            for i, p in enumerate(self.procs):
                code = p.poll()
                if code is not None and code != 0:
                    self.first_failed = i
                    if self.deadline is None:
                        self.deadline = time.monotonic() + self.dead_grace_s
                    self._ask(signal.SIGINT)
                    break
        if self.deadline is not None and time.monotonic() > self.deadline:
            why = (
                f"it did not stop within {self.grace_s:g} s"
                if self.signal is not None
                else f"worker {self.first_failed} ended, and it did not stop within {self.dead_grace_s:g} s"
            )
            for i in range(len(self.procs)):
                if i not in self.killed:
                    self.kill(i, why)

    def kill(self, i: int, why: str) -> None:
        p = self.procs[i]
        if p.poll() is not None:
            return
        self.killed[i] = why
        try:
            os.killpg(p.pid, signal.SIGKILL)  # the worker and whatever it started
        except (ProcessLookupError, PermissionError):
            p.kill()


def _pump_group(group: _Group, logs: list, echo: list[bool]) -> None:
    """Copy each member's output to its log (and ours, ``echo``) until every member closed it."""
    out = sys.stdout.buffer
    open_fds = {p.stdout.fileno(): i for i, p in enumerate(group.procs)}
    shown = {i: NoiseFilter() for i, e in enumerate(echo) if e}
    while open_fds:
        group.tick()
        ready = select.select(list(open_fds), [], [], 0.2)[0]
        for fd in ready:
            i = open_fds[fd]
            chunk = os.read(fd, 65536)
            if not chunk:
                del open_fds[fd]
                if i in shown and (rest := shown[i].flush()):
                    out.write(rest)
                    out.flush()
                continue
            try:
                logs[i].write(chunk)
                logs[i].flush()
            except OSError:
                pass  # a full disk: the job goes on, and says how it ends
            if i in shown and (visible := shown[i].feed(chunk)):
                out.write(visible)
                out.flush()
    while any(p.poll() is None for p in group.procs):  # output closed, not yet ended
        group.tick()
        time.sleep(0.05)


def pass_on_as_ctrl_c() -> int:
    """Send SIGINT to this process's children in its process group, as a terminal's Ctrl-C
    would have: a sweep's workers, when a SIGTERM came to ``launch`` alone (jobs run in
    sessions of their own, so only a worker's own handler passes it on to its job). Returns
    how many were sent one."""
    me, group, sent = os.getpid(), os.getpgrp(), 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)": state ppid pgrp ...
            if int(fields[1]) == me and int(fields[2]) == group:
                os.kill(int(entry), signal.SIGINT)
                sent += 1
        except (OSError, IndexError, ValueError):  # gone meanwhile, or not ours to signal
            continue
    return sent


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this (child) process when its parent dies: a killed
    launcher must not leave a job training on, orphaned."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass  # not glibc/Linux: the job outlives a killed launcher


def _pump(proc: subprocess.Popen, log, echo: bool, tick=None, progress: console.Progress | None = None) -> None:
    """Copy the child's output until it closes it; with ``tick``, call it at least every 0.2 s;
    with ``progress``, feed it the output too."""
    assert proc.stdout is not None
    out = sys.stdout.buffer
    shown = NoiseFilter()  # the log keeps every line; the terminal is spared TensorFlow's start-up noise
    logging = True
    fd = proc.stdout.fileno()
    while True:
        if tick is not None:
            tick()
            if not select.select([fd], [], [], 0.2)[0]:
                continue
            chunk = os.read(fd, 65536)
        else:
            chunk = proc.stdout.read1(65536)
        if not chunk:
            if echo and (rest := shown.flush()):
                out.write(rest)
                out.flush()
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
                console.log.warning("%s is no longer written: %s", log.name, exc.strerror)
        if progress is not None:
            progress.feed(chunk)
        if echo and (visible := shown.feed(chunk)):
            out.write(visible)
            out.flush()


def capture(
    argv: Sequence[str],
    cwd: str | None = None,
    timeout: float = 10,
    *,
    any_status: bool = False,
    env: Mapping[str, str] | None = None,
) -> str | None:
    """Run a probe; its stdout, or None when the program is missing, fails or runs past ``timeout``
    seconds (``any_status``: its stdout whatever its exit status, for programs such as
    ``qemu-x86_64 -cpu help`` that exit 1 after printing what was asked). ``env``: its whole
    environment (None: ours), for a probe of another Python environment."""
    try:
        done = subprocess.run(
            list(argv),
            cwd=cwd,
            env=None if env is None else dict(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 or any_status else None


@dataclass(frozen=True)
class Finished:
    """What a program run by ``run_piped`` said, and how it ended."""

    returncode: int  # -1: it could not be started, or ran past its timeout
    stdout: bytes
    stderr: str


def run_piped(argv: Sequence[str], data: bytes = b"", timeout: float = 60) -> Finished:
    """Run ``argv`` with ``data`` on its stdin, in a session of its own (no terminal: a program that
    would ask for a passphrase fails instead of waiting), and return what it printed. For tools
    such as ``ssh-keygen -Y sign|verify`` that read the message on stdin."""
    try:
        done = subprocess.run(
            list(argv), input=data, capture_output=True, timeout=timeout, check=False, start_new_session=True
        )
    except OSError as exc:
        return Finished(-1, b"", f"{argv[0]} could not be started: {exc.strerror}")
    except subprocess.TimeoutExpired:
        return Finished(-1, b"", f"{argv[0]} did not end within {timeout:.0f} s")
    return Finished(done.returncode, done.stdout, done.stderr.decode(errors="replace"))


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


# ---------------------------------------------------------------- a program with files placed at their paths
PLACE_FAILED = 125  # `launcher.proc place`'s status when a file could not be placed: the program never ran
_CLONE_NEWNS, _CLONE_NEWUSER = 0x00020000, 0x10000000
_MS_BIND, _MS_REC, _MS_PRIVATE = 0x1000, 0x4000, 0x40000
LAUNCHER_ROOT = str(Path(__file__).resolve().parents[1])  # the directory holding the `launcher` package


def place_argv(python: str, placed: Mapping[str, str], argv: Sequence[str]) -> list[str]:
    """The command that runs ``argv`` where each path of ``placed`` shows the file it maps to
    (``path -> source``), through ``python -m launcher.proc place`` (``launcher`` importable
    from the environment's ``PYTHONPATH``); ``argv`` as it is when nothing is placed."""
    if not placed:
        return list(argv)
    from launcher import entrypoints  # here, not at the top: the job process (which imports proc) never needs it

    binds = [part for target, source in sorted(placed.items()) for part in ("--bind", source, target)]
    return entrypoints.argv(python, entrypoints.PLACE, "place", *binds, "--", *argv, safe_path=True)


def _parse_place(args: Sequence[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """``--bind SOURCE TARGET ... -- ARGV`` -> ([(source, target)], argv)."""
    binds, i = [], 0
    while i < len(args) and args[i] == "--bind" and i + 2 < len(args):
        binds.append((args[i + 1], args[i + 2]))
        i += 3
    if i >= len(args) or args[i] != "--" or i + 1 >= len(args):
        raise ValueError("usage: python -m launcher.proc place [--bind SOURCE TARGET]... -- PROGRAM [ARG]...")
    return binds, list(args[i + 1 :])


def _libc_call(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def enter_mount_namespace() -> None:
    """Give this single-threaded process a mount namespace of its own, private (its mounts reach
    no other process): directly where it may (root), else inside a user namespace of its own
    with its uid and gid mapped to themselves, so the program it runs sees who it is.
    ``OSError`` where neither is allowed (a container without CAP_SYS_ADMIN, user namespaces
    turned off)."""
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(_CLONE_NEWNS) != 0:
        _libc_call(libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS), "unshare")
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    _libc_call(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "making the mounts private")


def bind_file(source: str, target: str) -> None:
    """Show ``source`` at ``target`` (an existing file) in this mount namespace; checked."""
    libc = ctypes.CDLL(None, use_errno=True)
    _libc_call(libc.mount(os.fsencode(source), os.fsencode(target), None, _MS_BIND, None), f"mount {target}")
    there, kept = os.stat(target), os.stat(source)
    if (there.st_dev, there.st_ino) != (kept.st_dev, kept.st_ino):
        raise OSError(0, f"mount {target}: the file there is still not {source}")


def place_main(args: Sequence[str]) -> int:
    """``python -m launcher.proc place --bind SOURCE TARGET ... -- PROGRAM ARGS``: exec the
    program with every file placed, or exit ``PLACE_FAILED`` without running it."""
    try:
        binds, argv = _parse_place(args)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    try:
        enter_mount_namespace()
        for source, target in binds:
            bind_file(source, target)
    except OSError as exc:
        print(
            f"[launch] cannot place the run's kept data at its paths ({exc.strerror or exc}): the job did not run",
            file=sys.stderr,
            flush=True,
        )
        return PLACE_FAILED
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        print(f"[launch] cannot start {argv[0]}: {exc.strerror}", file=sys.stderr, flush=True)
        return PLACE_FAILED


def placing_refused(python: str = sys.executable) -> str | None:
    """Why no program can be given files at their paths here, or None where it can: measured,
    by placing one file for a small program and reading it back through its path."""
    with tempfile.TemporaryDirectory(prefix="launch-place-") as tmp:
        source, target = os.path.join(tmp, "kept"), os.path.join(tmp, "here")
        for path, text in ((source, "kept"), (target, "here")):
            with open(path, "w") as f:
                f.write(text)
        argv = place_argv(
            python, {target: source}, [python, "-c", "import sys; sys.stdout.write(open(sys.argv[1]).read())", target]
        )
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [LAUNCHER_ROOT, os.environ.get("PYTHONPATH")]))}
        try:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return str(exc)
    if done.returncode == 0 and done.stdout == "kept":
        return None
    said = [line for line in done.stderr.splitlines() if line.strip()]
    if not said:
        return f"a file placed for a test program was not what it read (status {done.returncode})"
    reason = re.search(r"cannot place .* at its paths \((.*)\): the job did not run$", said[-1])
    return reason.group(1) if reason else said[-1].removeprefix("[launch] ")


if __name__ == "__main__":
    if sys.argv[1:2] != ["place"]:
        sys.exit("usage: python -m launcher.proc place [--bind SOURCE TARGET]... -- PROGRAM [ARG]...")
    sys.exit(place_main(sys.argv[2:]))
