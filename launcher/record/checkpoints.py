"""A run's epoch checkpoints as stored: their layout, their verification, and whether one can be resumed.

The job writes them (``launcher.job.training.checkpoints``, ``launcher.job.training.fitstate``);
``launch resume`` reads them here: the newest complete one (each file checked against its
``checkpoint.json``), what it needs of earlier fits, and why a fit's checkpoint cannot be
resumed bitwise, said in one line.
"""

from __future__ import annotations

import json
from pathlib import Path

from launcher.errors import SealError
from launcher.record import hashing, layout

MANIFEST = "checkpoint.json"
PREFIX = "state"  # TensorFlow writes state.index and state.data-00000-of-00001
EXTRA = "extra.json"  # what a caller keeps beside the variables (an observed fit's state)
ARRAYS = "arrays.npz"  # and its arrays (EarlyStopping's best weights)
INPUTS = ("tf.data", "arrays")  # the fit inputs a resume restores by aligning their iterators
# What the job reads again to its position, with no training step, where a checkpoint written by a
# launcher from before the fast-forward refused it (Keras 3.15's TF backend, read in its source).
OLD_REFUSALS = {
    "generator": (
        "a Python generator cannot be rewound, and this checkpoint was written by a launcher that did not "
        "fast-forward one"
    ),
    "PyDataset": "a keras.utils.PyDataset's own state was not checkpointed by the launcher that wrote this checkpoint",
}
UNFOLLOWED_VALIDATION = ("generator", "PyDataset")  # evaluated through an iterator cached across epochs


def name(epoch: int) -> str:
    return f"epoch-{epoch:06d}"


def verify(path: Path) -> str | None:
    """None when the checkpoint at ``path`` is complete, else what is wrong with it."""
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        return f"no {MANIFEST}"
    try:
        manifest = json.loads(manifest_path.read_text())
        files = manifest["files"]
    except (ValueError, KeyError, OSError, RecursionError, TypeError):
        return f"{MANIFEST} is unreadable"
    for file, digest in files.items():
        if not (path / file).is_file():
            return f"{file} is missing"
        if hashing.file_sha256(path / file) != digest:
            return f"{file} does not match its hash (torn write?)"
    return None


def latest_complete(run_dir: Path) -> tuple[Path | None, int, list[str]]:
    """The newest complete checkpoint, its epoch, and a note for each newer one skipped."""
    root = layout.RunPaths(run_dir).checkpoints
    candidates = sorted(root.glob("epoch-*"), reverse=True) if root.is_dir() else []
    notes: list[str] = []
    for path in candidates:
        problem = verify(path)
        if problem is None:
            problem = _earlier_missing(path)
        if problem is None:
            return path, int(path.name.split("-")[1]), notes
        notes.append(f"checkpoint {path.name} is incomplete ({problem}); falling back to an earlier one")
    return None, 0, notes


def trace_points(path: Path) -> int | None:
    """How many trace points the run had when the checkpoint at ``path`` was written (None: a
    checkpoint from a launcher that did not count them, or a count that is not one)."""
    try:
        points = json.loads((path / MANIFEST).read_text()).get("trace_points")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    return points if isinstance(points, int) and not isinstance(points, bool) and points >= 0 else None


def needs(extra: dict | None) -> list[str]:
    """The other checkpoints a resume from a checkpoint with ``extra`` needs: the last epoch's of each
    earlier ``fit`` of the job, which the resumed job fast-forwards (``launcher.job.training.fitstate``)."""
    return [e["checkpoint"] for e in (extra or {}).get("before") or [] if e.get("checkpoint")]


def _earlier_missing(path: Path) -> str | None:
    """What is wrong with the earlier fits' checkpoints that the checkpoint at ``path`` needs, or None."""
    try:
        extra = json.loads((path / EXTRA).read_text()) if (path / EXTRA).is_file() else None
    except (ValueError, RecursionError):
        return f"{EXTRA} is unreadable"
    for needed in needs(extra):
        problem = verify(path.parent / needed)
        if problem is not None:
            return f"it needs {needed}, the end of an earlier fit, and that one has {problem}"
    return None


def is_fit_end(path: Path) -> bool:
    """Is the checkpoint at ``path`` the last epoch of an observed fit (kept for later fits' resume)?"""
    try:
        return bool(json.loads((path / EXTRA).read_text()).get("final"))
    except (OSError, ValueError, AttributeError, RecursionError):
        return False


def read_extra(path: Path) -> tuple[dict | None, dict]:
    """The ``extra`` JSON and the arrays a checkpoint was saved with (None and {} when none)."""
    import numpy as np

    try:
        extra = json.loads((path / EXTRA).read_text()) if (path / EXTRA).is_file() else None
    except (ValueError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else exc
        raise SealError(f"{path / EXTRA} is unreadable ({why})", EXTRA) from None
    arrays: dict = {}
    if (path / ARRAYS).is_file():
        with np.load(path / ARRAYS) as loaded:
            arrays = {k: loaded[k] for k in loaded.files}
    return extra, arrays


def _why_not_kind(fit: dict, fast_forwards: bool) -> str | None:
    """Why a fit's input, its steps or its callbacks cannot be reproduced by a resume, or None.
    ``fast_forwards``: the checkpoint was written by a launcher that reads an input again to its position
    (and builds a lazily built model), not one from before."""
    kind = fit.get("input")
    if fit.get("validation") in UNFOLLOWED_VALIDATION:
        return (
            f"its validation_data is a {fit['validation']}, which Keras reads through one iterator across "
            "epochs: its position is neither kept nor read again; give it as a tf.data.Dataset or arrays"
        )
    if fit.get("unkept"):
        return (
            f"its callback attribute {fit['unkept'][0]} changed during training and holds what a checkpoint "
            "cannot keep (numbers, strings, arrays, and lists, tuples, dicts and sets of them)"
        )
    if fast_forwards:
        return None
    if kind in OLD_REFUSALS:
        return OLD_REFUSALS[kind]
    if kind not in INPUTS:
        return (
            f"it reads {kind}, not a tf.data.Dataset or arrays, and was checkpointed by a launcher that did not "
            "read such an input again to its position"
        )
    if fit.get("steps_per_epoch") is not None:
        return (
            "it sets steps_per_epoch (its iterator runs on across epochs), and was checkpointed by a launcher "
            "that did not read it again to its position"
        )
    if fit.get("built") is False:
        return (
            "its model had no variables when the fit began (a subclassed keras.Model, or a Sequential "
            "without keras.Input, makes them in its first batch), and it was checkpointed by a launcher that "
            "did not build such a model before restoring; call the model once on a batch before fit "
            "(model(x[:1])) and its runs resume"
        )
    return None


def why_not_resumable(fit: dict) -> str | None:
    """Why the fit a checkpoint is in cannot be resumed bitwise, or None when it can. A checkpoint
    in a later fit needs every earlier fit fast-forwarded from its last epoch's checkpoint (``before``)."""
    again = "; run it again with launch"
    fast_forwards = "batches" in fit  # written by a launcher that fast-forwards and builds (issue 42)
    if (why := _why_not_kind(fit, fast_forwards)) is not None:
        return f"its fit (call {fit.get('fit', 1)} of Keras fit) cannot be resumed: {why}{again}"
    before = fit.get("before")
    if fit.get("fit", 1) != 1 and before is None:
        return (
            f"its checkpoint is in call {fit['fit']} of Keras fit and was written by a launcher that does not "
            f"keep the earlier fits' ends{again}"
        )
    for earlier in before or []:
        if (why := _why_not_kind(earlier, fast_forwards)) is not None:
            return (
                f"its checkpoint is in call {fit['fit']} of Keras fit, after call {earlier['fit']}, which a "
                f"resume must fast-forward and cannot: {why}{again}"
            )
        if earlier.get("checkpoint") is None:
            return (
                f"its checkpoint is in call {fit['fit']} of Keras fit, after call {earlier['fit']}, whose last "
                f"epoch has no checkpoint to fast-forward it from (it ran no epoch){again}"
            )
    return None
