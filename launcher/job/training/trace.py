"""The step trace's recorders in the job: a Keras callback, and the points a training loop appends.

The format, the reading and the divergence locator are ``launcher.record.trace``.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

from launcher.record import layout
from launcher.record.trace import append, point, read

__all__ = ["append", "point", "read", "keras_callback", "recorder_class"]


def keras_callback(run_dir: Path | None, every: int, flavour: str = "keras"):
    """A Keras callback that records the trace of ``run_dir``; a no-op when ``every`` is 0.

    Pass the same callback to every ``fit`` of a run: it resumes the step count from
    the optimizer and never records a step twice. ``flavour``: ``keras`` (Keras 3) or ``tf_keras``
    (a callback of tf_keras' own: its ``fit`` takes no other). Job process only (imports Keras).
    """
    if not every or run_dir is None:
        return _keras(flavour).callbacks.Callback()
    return recorder_class(flavour)(layout.RunPaths(run_dir).trace, every)


def _keras(flavour: str):
    import importlib

    return importlib.import_module(flavour)


def recorder_class(flavour: str = "keras"):
    """The Keras callback class that records a trace (one class per process and flavour, so it can be
    recognized): a ``keras.callbacks.Callback`` (Keras 3), or with ``flavour`` ``tf_keras`` a
    ``tf_keras.callbacks.Callback`` (tf_keras' ``fit`` takes only its own)."""
    return _recorder_class(flavour)


@functools.cache
def _recorder_class(flavour: str):
    keras = _keras(flavour)

    from launcher.record.hashing import keras_weights

    class TraceRecorder(keras.callbacks.Callback):
        """Appends a point before the first step, every ``every`` steps and at each epoch's end.

        Steps are counted from the batch index, so the per-batch hook does no tensor
        work unless it records. Each ``fit`` starts counting from the optimizer's
        ``iterations`` (a resumed run continues its numbering), never below the steps
        already recorded (a recompiled model continues after them).
        """

        def __init__(self, path: Path, every: int) -> None:
            super().__init__()
            self.path, self.every = path, every
            existing = read(path.parent)
            self.last_step = existing[-1]["step"] if existing else -1
            self.epoch = (existing[-1]["epoch"] or 0) if existing else 0
            self.step = 0  # optimizer steps taken so far
            self.epoch_start = 0  # the step count when the current epoch began
            self.seconds = 0.0  # time spent recording, for the cost in result.json

        def _record(self, loss: float | None, sync: bool = False) -> None:
            started = time.perf_counter()
            append(self.path.parent, point(self.step, self.epoch, loss, keras_weights(self.model)), sync)
            self.last_step = self.step
            self.seconds += time.perf_counter() - started

        def on_train_begin(self, logs=None) -> None:
            # Every epoch's end is recorded, so the last recorded step is where training stands,
            # also after a recompile that reset the optimizer's counter.
            self.step = max(int(self.model.optimizer.iterations.numpy()), self.last_step, 0)
            if self.step > self.last_step:
                self._record(None)

        def on_epoch_begin(self, epoch: int, logs=None) -> None:
            self.epoch += 1
            self.epoch_start = self.step

        def on_train_batch_end(self, batch: int, logs=None) -> None:
            # batch: the index of the epoch's last step run (with steps_per_execution=k, every k-th).
            self.step = self.epoch_start + batch + 1
            if self.step // self.every > self.last_step // self.every:
                self._record(_loss(logs))

        def on_epoch_end(self, epoch: int, logs=None) -> None:
            if self.step > self.last_step:
                self._record(_loss(logs), sync=True)

    return TraceRecorder


def _loss(logs: dict | None) -> float | None:
    value = (logs or {}).get("loss")
    return None if value is None else float(value)
