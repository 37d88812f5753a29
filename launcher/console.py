"""What reaches the terminal: a job's output, less TensorFlow's harmless start-up noise; and the
one printer of fixed-width tables (``table``), which every listing and report uses.

TensorFlow's C++ runtime prints a few lines at start-up that look like errors and are
not (``E0000 … NodeDef mentions attribute use_unbounded_threadpool``, the oneDNN
notice, the absl preamble, CUDA probes on a CPU-only machine). They stay in the run's
``log.txt``; only the terminal is spared them. Only these known messages are dropped:
any other C++ log line may be a real error and is shown. Pure: bytes in, bytes out.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence

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
