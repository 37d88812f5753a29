"""What reaches the terminal: a job's output, less TensorFlow's harmless start-up noise; and the
one printer of fixed-width tables (``table``), which every listing and report uses.

TensorFlow's C++ runtime prints a few lines at start-up that look like errors and are
not (``E0000 … NodeDef mentions attribute use_unbounded_threadpool``, the oneDNN
notice, the absl preamble, CUDA probes on a CPU-only machine). They stay in the run's
``log.txt``; only the terminal is spared them. Only these known messages are dropped:
any other C++ log line may be a real error and is shown. Pure: bytes in, bytes out.

The launcher's own notes go through the ``launch`` logger (``log``): results (verdicts, tables,
a run's summary line) are printed on stdout, notes (``[launch] ...``) and warnings reach stderr
through the one handler ``setup`` puts on it at the command line's edge (``launcher.cli.main``),
at the level ``-q`` (warnings only) or ``-v`` (debug too) asks for. ``Progress`` says what a long
program (pip, Docker) is doing while it works, through the same logger.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import re
import sys
import threading
import time
from collections.abc import Collection, Iterable, Iterator, Sequence

# A glog/absl line: severity and date, time, thread, file:line] message.
_PREFIX = rb"[IWE]\d{4} [\d:.]+\s+\d+ [\w.\-]+:\d+\] "
HARMLESS = re.compile(
    rb"(WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    rb"|" + _PREFIX + rb"(oneDNN custom operations are on"
    rb"|.*NodeDef mentions attribute use_unbounded_threadpool"
    rb"|This TensorFlow binary is optimized to use available CPU instructions"
    rb"|To enable the following instructions"
    rb"|Unable to register cu(DNN|FFT|BLAS) factory"
    rb"|failed call to cuInit"
    rb"|Could not find cuda drivers"
    rb"|computation placer already registered"
    rb"|TensorFlow was not built with CUDA kernel binaries)"
    rb").*\r?"
)
# The starts a harmless line can have, to know early that a line is ordinary output.
_STARTS = (b"WARNING: All log messages", b"I0", b"W0", b"E0", b"I1", b"W1", b"E1")


class NoiseFilter:
    """Feed it a child's output chunk by chunk; it returns what the terminal should show.

    Ordinary output passes through at once (Keras' progress bar redraws a line without
    ending it); only a line that starts like a C++ log line is held until its end, then
    dropped if it is a known harmless one."""

    def __init__(self) -> None:
        self._held = b""  # the start of a line that may be noise
        self._passing = False  # inside a line already shown: pass until its end

    def feed(self, chunk: bytes) -> bytes:
        out = bytearray()
        for piece in re.split(rb"(?<=\n)", chunk):
            if not piece:
                continue
            if self._passing:
                out += piece
                self._passing = not piece.endswith(b"\n")
                continue
            line = self._held + piece
            if not line.endswith(b"\n"):
                if _may_be_noise(line):
                    self._held = line
                else:
                    out += line
                    self._held, self._passing = b"", True
                continue
            self._held = b""
            if not HARMLESS.fullmatch(line.rstrip(b"\n")):
                out += line
        return bytes(out)

    def flush(self) -> bytes:
        """What is still held when the output ends (a last line without a newline)."""
        held, self._held = self._held, b""
        return b"" if HARMLESS.fullmatch(held) else held


def _may_be_noise(start: bytes) -> bool:
    return any(s.startswith(start) or start.startswith(s) for s in _STARTS)


def table(
    header: Sequence[object],
    rows: Iterable[Sequence[object]],
    *,
    indent: str = "",
    sep: str = "  ",
    widths: Sequence[int] = (),
    right: Collection[int] = (),
    rule: bool = False,
) -> list[str]:
    """The lines of a fixed-width table, ``header`` first: each cell (``str()`` of it) padded to
    its column's width, the longest of the column's cells and at least ``widths[i]``; left-aligned
    but for the columns numbered in ``right``; joined by ``sep`` after ``indent``; no trailing
    spaces. ``rule``: a line of dashes under the header. A row shorter than the header ends in a
    cell that spans the columns left (a remark wrapped below a row): it counts in no column's
    width. Pure; the one table printer, so every listing aligns the same way."""
    lines = [[str(cell) for cell in line] for line in [header, *rows]]
    size = [widths[i] if i < len(widths) else 0 for i in range(len(header))]
    for line in lines:
        counted = line if len(line) == len(header) else line[:-1]
        for i, cell in enumerate(counted):
            size[i] = max(size[i], len(cell))
    out = [
        (
            indent + sep.join(cell.rjust(size[i]) if i in right else cell.ljust(size[i]) for i, cell in enumerate(line))
        ).rstrip()
        for line in lines
    ]
    if rule:
        out.insert(1, indent + sep.join("-" * w for w in size))
    return out


# ---------------------------------------------------------------- notes: the `launch` logger
log = logging.getLogger("launch")  # its children: launch.sweep, launch.audit ([sweep] ..., [audit] ...)
_HIDDEN: contextvars.ContextVar[bool] = contextvars.ContextVar("launch_notes_hidden", default=False)


class _Stderr(logging.StreamHandler):
    """To the stderr of the moment (a redirected or captured one too), stdout flushed first: where
    both go to one file (``2>&1``, a CI log) notes and results stay in the order they were said."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass  # always sys.stderr, as it is when a note is written

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stdout.flush()
        except (OSError, ValueError):  # a closed pipe or file: the note still goes to stderr
            pass
        super().emit(record)


class _Format(logging.Formatter):
    """``[launch] note``, ``[launch] warning: ...``; a child logger's last name instead of ``launch``
    (``launch.sweep``: ``[sweep] ...``)."""

    def format(self, record: logging.LogRecord) -> str:
        kind = (
            "warning: " if record.levelno == logging.WARNING else "error: " if record.levelno > logging.WARNING else ""
        )
        return f"[{record.name.rpartition('.')[2]}] {kind}{record.getMessage()}"


def _shown(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.WARNING or not _HIDDEN.get()


def setup(level: int = logging.INFO) -> None:
    """The ``launch`` logger's one handler (stderr) at ``level``: ``INFO`` notes and warnings,
    ``WARNING`` (``-q``) warnings only, ``DEBUG`` (``-v``) also every line a program printed to
    its log. Called by the command line's ``main``; called again, it replaces the handler (never
    two). The logger does not pass its records on to the root logger: a handler a library put
    there (Hydra's, MLflow's) never prints a note twice."""
    for old in [h for h in log.handlers if isinstance(h, _Stderr)]:
        log.removeHandler(old)
    handler = _Stderr()
    handler.setFormatter(_Format())
    handler.addFilter(_shown)
    log.addHandler(handler)
    log.setLevel(level)
    log.propagate = False


def is_set_up() -> bool:
    """Whether ``setup`` ran in this process (not in a sweep's worker process, at first)."""
    return any(isinstance(h, _Stderr) for h in log.handlers)


@contextlib.contextmanager
def notes_hidden() -> Iterator[None]:
    """Within: this thread's notes (below ``WARNING``) are dropped, its warnings still shown. For a
    sweep's job, whose notes would interleave with the other jobs' lines (each job's own line says
    how it ended)."""
    token = _HIDDEN.set(True)
    try:
        yield
    finally:
        _HIDDEN.reset(token)


# ---------------------------------------------------------------- progress of a long program
HEARTBEAT_S = 5.0  # the seconds a long program may go without a note before its elapsed time is noted
# The lines of pip's and Docker's output that say what they are doing: noted as they come (the
# program's log keeps every line; -v shows the others too).
STEPS = re.compile(
    r"(Collecting |Saved |Building wheel for |Created wheel for |Processing |File was already downloaded "
    r"|Installing collected packages|Successfully (built|installed|downloaded) |Step \d+/\d+ ?: )"
)


class Progress:
    """What a long program (pip, Docker) is doing, noted on stderr while it works: each line of its
    output that names a step (``Collecting X``, ``Saved X``, ``Building wheel for X``, Docker's
    ``Step N/M : ...``), and, after ``every`` seconds (``HEARTBEAT_S``) with nothing said, how long it has been at it
    (``[launch] pack: collecting wheels... 12 s``: ``what``, then ``doing``, which the caller may
    change as the work goes on), also when stderr is not a terminal (a CI log).

    A context manager: the elapsed-time line is kept from its start to its end, by a thread of its
    own. ``feed`` takes the program's output as it comes (``launcher.proc.run_streaming``'s
    ``progress``), ``line`` one line of it, ``say`` a note of the caller's own."""

    def __init__(self, what: str, doing: str, every: float | None = None) -> None:
        self.what, self.doing, self.every = what, doing, HEARTBEAT_S if every is None else every
        self._held = b""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._started = self._said = time.monotonic()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Progress:
        self._started = self._said = time.monotonic()
        self._stop.clear()
        context = contextvars.copy_context()  # a sweep job's hidden notes stay hidden in the thread
        self._thread = threading.Thread(target=context.run, args=(self._beat,), name="launch-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._held:
            self.line(self._held.decode(errors="replace"))
            self._held = b""

    def feed(self, chunk: bytes) -> None:
        """A program's output, chunk by chunk: each complete line to ``line``."""
        *lines, self._held = (self._held + chunk).split(b"\n")
        for line in lines:
            self.line(line.decode(errors="replace"))

    def line(self, text: str) -> None:
        """One line of the program's output: a note when it names a step, else a debug line."""
        text = text.strip()
        if not text:
            return
        if STEPS.match(text):
            self.say(text if len(text) <= 160 else text[:157] + "...")
        else:
            log.debug("%s: %s", self.what, text)

    def say(self, text: str) -> None:
        """A note about this work (``[launch] WHAT: TEXT``); the elapsed-time line waits again."""
        with self._lock:
            self._said = time.monotonic()
        log.info("%s: %s", self.what, text)

    def _beat(self) -> None:
        while not self._stop.wait(min(0.25, self.every)):
            now = time.monotonic()
            with self._lock:
                due = now - self._said >= self.every
                if due:
                    self._said = now
            if due:
                log.info("%s: %s... %.0f s", self.what, self.doing, now - self._started)
