"""TensorBoard event files of a run, written by the launcher from what the job recorded.

Every run gets ``RUN/tensorboard/events.out.tfevents.launch``: one scalar per epoch
metric (``epoch/<name>``, step = epoch, from ``metrics.jsonl``) and the traced loss
(``trace/loss``, step = optimizer step, from ``trace.jsonl``). ``tensorboard --logdir
<store>`` then shows every run under its run id.

Why the launcher writes them, not the job: the job process is never touched, so
TensorBoard cannot change a bit of training, cannot start TensorFlow's runtime early,
costs the job nothing, and works the same for mnist, unmodified user code (whose
epochs and trace the observers record) and Docker runs. While the job runs, a thread of
the launcher appends what is new every ``POLL_S`` seconds, so TensorBoard shows a run
live; the last catch-up happens before the seal, so the manifest covers the file.

The format is TensorBoard's own (TFRecord framing of ``Event`` protocol buffers, scalars
as ``simple_value``), encoded here in a few lines so that writing needs neither the
``tensorboard`` package nor TensorFlow in the launcher process. Event files hold
wall-clock times: they are sealed with the run but never compared (compare reads
result.json, metrics.jsonl, trace.jsonl and outputs only).
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from launcher import console
from launcher.record import layout
from launcher.record.layout import METRICS, TRACE

FILE = "events.out.tfevents.launch"  # TensorBoard reads any file whose name holds ".tfevents."
SWEEP_DIR = layout.TENSORBOARD  # <sweep>/tensorboard/<job>: links to the jobs' run directories, named as a run's

POLL_S = 2.0


# ---------------------------------------------------------------- the format (pure)
def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as TFRecord uses."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked(data: bytes) -> bytes:
    crc = crc32c(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def record(data: bytes) -> bytes:
    """One TFRecord: length, its masked CRC, the data, its masked CRC."""
    length = struct.pack("<Q", len(data))
    return length + _masked(length) + data + _masked(data)


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # int64 two's complement, as protobuf encodes negatives
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _bytes_field(number: int, value: bytes) -> bytes:
    return _field(number, 2) + _varint(len(value)) + value


def event(
    wall_time: float, step: int = 0, *, file_version: str | None = None, scalars: dict[str, float] | None = None
) -> bytes:
    """An ``Event`` protocol buffer: a file-version header, or scalars (``simple_value``) at ``step``."""
    out = _field(1, 1) + struct.pack("<d", wall_time)  # double wall_time = 1
    if step:
        out += _field(2, 0) + _varint(step)  # int64 step = 2
    if file_version is not None:
        out += _bytes_field(3, file_version.encode())  # string file_version = 3
    if scalars:
        values = b"".join(
            # Summary.Value: string tag = 1; float simple_value = 2
            _bytes_field(1, _bytes_field(1, tag.encode()) + _field(2, 5) + struct.pack("<f", value))
            for tag, value in scalars.items()
        )
        out += _bytes_field(5, values)  # Summary summary = 5 (repeated Value value = 1)
    return out


def metric_scalars(line: dict) -> tuple[int, dict[str, float]] | None:
    """(epoch, {"epoch/<name>": value}) from one metrics.jsonl line; None if it has no epoch."""
    epoch = line.get("epoch")
    if not isinstance(epoch, int) or isinstance(epoch, bool):
        return None
    scalars = {
        f"epoch/{k}": float(v)
        for k, v in sorted(line.items())
        if k != "epoch" and isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    return epoch, scalars


def trace_scalars(p: dict) -> tuple[int, dict[str, float]] | None:
    """(step, {"trace/loss": loss}) from one trace point; None when it has no loss (step 0)."""
    step, loss = p.get("step"), p.get("loss")
    if not isinstance(step, int) or not isinstance(loss, (int, float)) or isinstance(loss, bool):
        return None
    return step, {"trace/loss": float(loss)}


def _float32_safe(scalars: dict[str, float]) -> dict[str, float]:
    # simple_value is a float32: beyond its range a value becomes +-inf, as TensorBoard would show it.
    return {k: (v if math.isnan(v) or abs(v) < 3.4e38 else math.copysign(math.inf, v)) for k, v in scalars.items()}


# ---------------------------------------------------------------- a run's event file
class EventLog:
    """The event file of one run, appended as ``metrics.jsonl`` and ``trace.jsonl`` grow."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = layout.RunPaths(self.run_dir).tensorboard / FILE
        self.offsets = {METRICS: 0, TRACE: 0}  # bytes of each source already turned into events

    def start(self) -> None:
        """(Re)write the file from what the run holds now (a resumed run's files were cut back)."""
        self.offsets = {METRICS: 0, TRACE: 0}
        self.path.parent.mkdir(exist_ok=True)
        data = record(event(time.time(), file_version="brain.Event:2")) + b"".join(self._new_records())
        tmp = self.path.with_name(f".{FILE}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, self.path)

    def sync(self) -> int:
        """Append events for the lines added since the last call; the number of records added."""
        records = self._new_records()
        if records:
            with open(self.path, "ab") as f:
                f.write(b"".join(records))
                f.flush()
                os.fsync(f.fileno())
        return len(records)

    def _new_records(self) -> list[bytes]:
        out = []
        now = time.time()
        for name, convert in ((METRICS, metric_scalars), (TRACE, trace_scalars)):
            for line in self._new_lines(name):
                try:
                    item = convert(json.loads(line))
                except (ValueError, TypeError, AttributeError):
                    continue  # a line that does not parse (a crash tore it) is skipped, never fatal
                if item and item[1]:
                    out.append(record(event(now, item[0], scalars=_float32_safe(item[1]))))
        return out

    def _new_lines(self, name: str) -> list[str]:
        path = self.run_dir / name
        try:
            with open(path, "rb") as f:
                f.seek(self.offsets[name])
                chunk = f.read()
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n") + 1  # only whole lines: the job may be writing the next one
        self.offsets[name] += end
        return chunk[:end].decode("utf-8", errors="replace").splitlines()


@contextmanager
def follow(run_dir: Path, poll_s: float = POLL_S) -> Iterator[None]:
    """Keep ``run_dir``'s event file current while the body (the job) runs; catch up at the end.

    Never raises and never fails a run: a problem is one warning line, and the run goes on.
    """
    log = EventLog(run_dir)
    try:
        log.start()
    except Exception as exc:  # an event file must never cost a run
        _warn(exc)
        yield
        return
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(poll_s):
            try:
                log.sync()
            except Exception:  # the final catch-up reports a lasting problem
                pass

    thread = threading.Thread(target=loop, name="launch-tensorboard", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        try:
            log.sync()
        except Exception as exc:
            _warn(exc)


def _warn(exc: BaseException, what: str = "TensorBoard event file not written") -> None:
    reason = " ".join(str(exc).split()) or type(exc).__name__
    console.log.warning("%s: %s", what, reason)


# ---------------------------------------------------------------- a sweep's view
def job_link_name(num: int, label: str) -> str:
    """The name a sweep job has in TensorBoard: its number and swept values ("000 +seed=1")."""
    safe = re.sub(r"[^A-Za-z0-9+=.,_-]+", "_", label).strip("_")
    return f"{num:03d}" + (f" {safe}" if safe and safe != "no_sweep" else "")


def link_sweep_job(sweep_dir: Path, num: int, label: str, run_dir: Path) -> None:
    """``<sweep>/tensorboard/<job>`` -> the job's ``RUN/tensorboard``, a relative symlink.

    ``tensorboard --logdir <sweep>/tensorboard`` then shows the sweep's jobs together, named
    by their swept values; ``--logdir <store>`` shows them under the sweep as well. Best effort.
    """
    target = layout.RunPaths(run_dir).tensorboard
    link = Path(sweep_dir) / SWEEP_DIR / job_link_name(num, label)
    try:
        link.parent.mkdir(exist_ok=True)
        if link.is_symlink():
            link.unlink()
        link.symlink_to(os.path.relpath(target.resolve(), link.parent.resolve()), target_is_directory=True)
    except OSError as exc:
        _warn(exc, "TensorBoard link of the sweep job not made")
