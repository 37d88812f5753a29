"""Helpers for user training code running under ``launch`` (train=custom or train=script).

The bootstrap exports the run's facts in the environment of the job process;
these functions read them, so a script also runs (unrecorded) outside ``launch``.
"""

from __future__ import annotations

import os
from pathlib import Path

# Filled by record_model(); the bootstrap copies it into result.json.
_recorded_models: dict[str, dict] = {}


def run_dir() -> Path | None:
    """The run directory of the current job, or None outside ``launch``."""
    value = os.environ.get("LAUNCH_RUN_DIR")
    return Path(value) if value else None


def output_dir() -> Path:
    """Where user code saves what it produces; every file here is hashed into result.json.

    Outside ``launch`` this is ``./outputs``, named as a run's.
    """
    from launcher.record import layout

    path = Path(os.environ.get("LAUNCH_OUTPUT_DIR", layout.OUTPUT_DIR))
    path.mkdir(parents=True, exist_ok=True)
    return path


def seed() -> int | None:
    """The run's seed (already applied to every global random source), or None."""
    value = os.environ.get("LAUNCH_SEED")
    return int(value) if value is not None else None


def record_model(model, name: str = "model") -> str:
    """Record a Keras model's final weights hash in result.json; returns the sha256.

    The first recorded model's hash becomes the run's ``weights_sha256``, which is
    what ``launch compare`` checks bit for bit.
    """
    from launcher.record.hashing import keras_weights, weights_digest

    total, per_layer = weights_digest(keras_weights(model))
    _recorded_models[name] = {"weights_sha256": total, "layer_sha256": per_layer}
    return total


def record_data(path: str | os.PathLike) -> None:
    """Name a file or a directory (every file below it) as data the job reads.

    Files that Python code opens are found without this; name what native code reads
    where the launcher cannot see it, e.g. image files a ``tf.data`` pipeline opens with
    ``tf.io.read_file`` inside a ``map``. Their content goes into the run's fingerprint
    (``data``), so changed files refuse a comparison. Outside ``launch`` it does nothing.
    """
    if run_dir() is None:
        return
    from launcher.job.observe import reads

    reads.name_explicitly(path)


def trace_callback():
    """A Keras callback recording the run's divergence trace (``trace.jsonl``); add it to ``fit``.

    It records the loss and the weights' hashes every ``determinism.trace_every`` steps,
    so ``launch compare`` and ``replay`` can name the first step and layer where two
    runs split. Pass the same callback to every ``fit`` of a run. Outside ``launch``,
    or with ``trace_every=0``, it does nothing. A callback of the Keras ``tf.keras`` names: tf_keras'
    where ``TF_USE_LEGACY_KERAS`` selects it (its ``fit`` takes only its own callbacks), else Keras 3's.
    """
    from launcher.job.training import legacy, trace

    flavour = legacy.NAME if legacy.selected() else "keras"
    return trace.keras_callback(run_dir(), int(os.environ.get("LAUNCH_TRACE_EVERY") or 0), flavour)


def __getattr__(name: str):
    """``Checkpointer`` (``launcher.job.training.checkpoints``), imported when first named: the epoch
    checkpoints of a custom training loop, ``launcher.Checkpointer(launcher.run_dir(), model, keep)``."""
    if name == "Checkpointer":
        from launcher.job.training.checkpoints import Checkpointer

        return Checkpointer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
