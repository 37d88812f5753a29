"""The resumable state of an observed Keras ``fit`` (``train=script`` and ``train=custom``).

At the end of every epoch of every ``fit`` the job's code calls, the observer
(``launcher.job.training.observer``) checkpoints what the next epoch depends on, with no change
to the code: the model's variables (Dropout's seed-generator state among them), the
optimizer's (its step counter, moments and learning rate), the Python, NumPy and
TensorFlow global RNGs (``launcher.job.training.checkpoints.Checkpointer``), and, in
``extra.json``, the fit's position (which ``fit`` call of the job, its epoch) and the
state of the built-in callbacks that carry state across epochs (``STATEFUL``) and of
Keras' ``History``. ``launch resume`` runs the code again; when the checkpointed
``fit`` starts, it starts at the next epoch (``initial_epoch``), and before that epoch
runs (after every callback's ``on_train_begin``) the state is restored.

A ``tf.data`` pipeline with ``shuffle(reshuffle_each_iteration=True)`` draws a new
order each time an iterator of it is made, from a seed generator the dataset owns: a
resumed ``fit`` would replay epoch 0's order (measured). Keras' ``fit`` makes two
iterators per epoch (one when the epoch starts, one more when it ends, measured with
Keras 3.15), one in its first epoch when the pipeline's length is unknown. So the job
counts the iterators made of every dataset (``count_iterators``); a checkpoint keeps
how many the fit's training and validation data had and which one each epoch used, and
the resumed fit makes, and drops, as many as it takes for each resumed epoch to use the
same one (``IteratorAlignment``): nothing is read, the random ``map`` values restart
with each iterator as they did. Before a resumed epoch's first step runs, the iterator it
uses is checked; a mismatch fails the run rather than train on another order.

A fit on NumPy arrays needs no alignment: Keras 3.15 (TensorFlow backend) shuffles them with a
``tf.random.shuffle`` in the pipeline it builds, seeded from TensorFlow's global seed and run
anew by every iterator, so every epoch reads the same order (measured); the checkpoint keeps
that seed, and a resumed fit checks it. A checkpoint in a later fit of the job names the
checkpoint of each earlier fit's last epoch (``before``; the last epoch is always checkpointed
and never pruned): the resumed job fast-forwards those fits, running no epoch and restoring
that state at ``on_train_end``, and makes their data's iterators up to the count the
uninterrupted run had made (``FitCheckpoints.finish_restored``). Generators and ``PyDataset``s
are refused (``REFUSED_INPUTS``).
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Iterable

import numpy as np

from launcher.job.observe import reads

# Built-in callbacks whose attributes carry state from one epoch to the next. Others:
# LearningRateScheduler's state is the optimizer's learning rate (a checkpointed
# variable); TerminateOnNaN, LambdaCallback, ProgbarLogger keep none.
STATEFUL: dict[str, tuple[str, ...]] = {
    "EarlyStopping": ("wait", "stopped_epoch", "best", "best_epoch"),
    "ReduceLROnPlateau": ("wait", "cooldown_counter", "best"),
    "ModelCheckpoint": ("best", "_last_batch_seen", "_batches_seen_since_last_saving"),
    "History": ("epoch", "history"),
}
ARRAY_STATE = {"EarlyStopping": "best_weights"}  # list-of-arrays attributes, kept in arrays.npz


def encode(value: object) -> object:
    """``value`` as JSON that ``decode`` turns back into the same types and bits (NumPy
    scalars keep their dtype: a float32 prints differently from the float it widens to)."""
    if isinstance(value, np.generic):
        return {"__numpy__": value.dtype.str, "value": value.item()}
    if isinstance(value, np.ndarray):
        return {"__ndarray__": value.dtype.str, "value": value.tolist()}
    if isinstance(value, dict):
        return {"__dict__": [[encode(k), encode(v)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return {"__list__" if isinstance(value, list) else "__tuple__": [encode(v) for v in value]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot keep a {type(value).__name__} in a checkpoint")


def decode(value: object) -> object:
    """The inverse of ``encode``."""
    if not isinstance(value, dict):
        return value
    if "__numpy__" in value:
        return np.dtype(value["__numpy__"]).type(value["value"])
    if "__ndarray__" in value:
        return np.array(value["value"], dtype=np.dtype(value["__ndarray__"]))
    if "__dict__" in value:
        return {decode(k): decode(v) for k, v in value["__dict__"]}
    if "__list__" in value:
        return [decode(v) for v in value["__list__"]]
    return tuple(decode(v) for v in value["__tuple__"])


def callback_states(callbacks: Iterable[object]) -> tuple[list[dict], dict[str, np.ndarray]]:
    """The state of each stateful built-in callback, by its place in ``callbacks``, and their arrays."""
    states, arrays = [], {}
    for i, cb in enumerate(callbacks):
        kind = type(cb).__name__
        if kind not in STATEFUL:
            continue
        attrs = {a: encode(getattr(cb, a)) for a in STATEFUL[kind] if hasattr(cb, a)}
        state = {"index": i, "class": kind, "attrs": attrs}
        weights = getattr(cb, ARRAY_STATE.get(kind, ""), None)
        if weights is not None:
            state["arrays"] = len(weights)
            arrays.update({f"callback{i}_{j}": np.asarray(w) for j, w in enumerate(weights)})
        states.append(state)
    return states, arrays


def restore_callbacks(callbacks: list, states: list[dict], arrays: dict[str, np.ndarray]) -> list[str]:
    """Put ``states`` back into ``callbacks``; returns what could not be matched (a changed list)."""
    problems = []
    for state in states:
        i = state["index"]
        if i >= len(callbacks) or type(callbacks[i]).__name__ != state["class"]:
            problems.append(f"callback {i} is no longer a {state['class']}")
            continue
        for attr, value in state["attrs"].items():
            setattr(callbacks[i], attr, decode(value))
        if "arrays" in state:
            weights = [arrays[f"callback{i}_{j}"] for j in range(state["arrays"])]
            setattr(callbacks[i], ARRAY_STATE[state["class"]], weights)
    return problems


def history_after(history: dict, epochs: list, epoch: int, logs: dict | None) -> tuple[list, dict]:
    """Keras' ``History`` as it will be once the epoch ending now is added (it hears the
    epoch's end after the checkpoint is written)."""
    merged = {k: list(v) for k, v in history.items()}
    for k, v in (logs or {}).items():
        merged.setdefault(k, []).append(v)
    return [*epochs, epoch], merged


# dataset -> iterators made of it in this job. Keyed by the dataset object itself, held weakly: an
# id() is reused once its object is collected, and a count would pass to another dataset.
_made: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def count_iterators(dataset_class) -> None:
    """Count the iterators made of each ``tf.data`` dataset (wraps ``DatasetV2.__iter__`` once)."""
    original = dataset_class.__iter__
    if getattr(original, "_launch_counted", False):
        return

    def __iter__(self):
        note_iterator(self)
        return original(self)

    __iter__._launch_counted = True  # type: ignore[attr-defined]
    dataset_class.__iter__ = __iter__


def note_iterator(dataset: object) -> None:
    """One more iterator of ``dataset`` was made (a dataset that cannot be weakly referenced is not counted)."""
    try:
        _made[dataset] = _made.get(dataset, 0) + 1
    except TypeError:
        pass


def made(dataset: object) -> int:
    """How many iterators of ``dataset`` the job has made."""
    try:
        return _made.get(dataset, 0)
    except TypeError:
        return 0


class IteratorAlignment:
    """Which iterator of a dataset each epoch of a fit uses (its index, from 0), and, when
    resuming, the index each resumed epoch must use: the checkpoint's count of iterators
    for its next epoch, then the uninterrupted run's own step between epochs (pure)."""

    def __init__(self, used: list[int] | None = None, made_at_checkpoint: int | None = None) -> None:
        self.used = list(used or [])  # per epoch of the fit so far: the index of the iterator it used
        self.resume_at = made_at_checkpoint  # the index the first resumed epoch uses
        self.step = used[-1] - used[-2] if used and len(used) >= 2 else 2  # Keras: two per epoch

    def target(self, epochs_resumed: int) -> int | None:
        """The index the ``epochs_resumed``-th resumed epoch (0 = the first) must use."""
        return None if self.resume_at is None else self.resume_at + epochs_resumed * self.step

    @staticmethod
    def to_make(target: int | None, made_now: int) -> int:
        """How many iterators to make and drop so that the next one made has index ``target``."""
        if target is None:
            return 0
        if made_now > target:
            raise ValueError(f"{made_now} iterators were made already, past the {target} of the uninterrupted run")
        return target - made_now


def input_kind(x: object) -> str:
    """What feeds a fit: ``tf.data``, ``arrays`` (NumPy arrays or tensors, also in a tuple, list or
    dict), ``generator``, ``PyDataset``, or the class's name."""
    module = type(x).__module__
    if module.startswith("tensorflow") and "Dataset" in type(x).__name__:
        return "tf.data"
    if _is_array(x) or (isinstance(x, (tuple, list, dict)) and x and all(map(_is_array, _leaves(x)))):
        return "arrays"
    if inspect.isgenerator(x):
        return "generator"
    if any(c.__name__ == "PyDataset" and c.__module__.startswith("keras") for c in type(x).__mro__):
        return "PyDataset"
    return type(x).__name__


def _is_array(x: object) -> bool:
    return isinstance(x, np.ndarray) or (type(x).__module__.startswith("tensorflow") and hasattr(x, "shape"))


def _leaves(x: object) -> list:
    if isinstance(x, dict):
        return [leaf for v in x.values() for leaf in _leaves(v)]
    if isinstance(x, (tuple, list)):
        return [leaf for v in x for leaf in _leaves(v)]
    return [x]






class FitCheckpoints:
    """The checkpoints of one observed ``fit``: a Keras callback that saves at each epoch's end
    (last of the fit's callbacks) and, when resuming, restores before the first resumed epoch
    and aligns each resumed epoch's data iterators (first of them). Job process only."""

    def __init__(self, run_dir, model, keep: int, every: int, callbacks: list, fit: dict, count_epoch,
                 data: tuple, on_save=None) -> None:  # fmt: skip
        self.run_dir, self.model, self.keep, self.every = run_dir, model, keep, every
        self.callbacks = callbacks  # the job's own callbacks, as given to fit
        self.fit = fit  # {"fit": n, "input": kind, "epochs": n, "initial_epoch": k, "steps_per_epoch", "before"}
        self.count_epoch = count_epoch  # () -> the job's epochs so far, across fits (metrics.jsonl's numbering)
        self.data = data  # (training dataset, validation dataset or None): their iterators are counted
        self.alignment = (IteratorAlignment(), IteratorAlignment())
        self.on_save = on_save  # called before each checkpoint (write the job's facts so far)
        self._checkpointer = None
        self.resuming = False
        self.kept_made: list[int | None] = [None, None]  # iterators made of the data at the checkpoint
        self.last: str | None = None  # the checkpoint of the fit's last epoch, once written or restored
        self.uses = [0, 0]  # first batches of training and of validation seen since the resume
        self.seconds: list[float] = []

    def checkpointer(self):
        from launcher.job.training.checkpoints import Checkpointer

        if self._checkpointer is None:
            self._checkpointer = Checkpointer(self.run_dir, self.model, self.keep)
        return self._checkpointer

    def ends_at(self, epoch: int) -> bool:
        """Is ``epoch`` (from 0) the fit's last? Its last asked for, or EarlyStopping ended the fit there."""
        return epoch + 1 >= int(self.fit.get("epochs", 1)) or bool(getattr(self.model, "stop_training", False))

    def ending(self) -> dict:
        """What a later fit's checkpoint keeps of this one (in ``before``), once it has ended: its
        kind, and the checkpoint of its last epoch a resume fast-forwards it from (None: none)."""
        kept = {k: self.fit.get(k) for k in ("fit", "input", "steps_per_epoch", "built")}
        return {**kept, "checkpoint": self.last}

    def save(self, epoch: int, logs: dict | None) -> None:
        import time

        started = time.perf_counter()
        history = getattr(self.model, "history", None)
        states, arrays = callback_states(self.callbacks)
        iterators = [{"made": made(d), "used": a.used} if d is not None else None
                     for d, a in zip(self.data, self.alignment, strict=True)]  # fmt: skip
        extra = {**self.fit, "fit_epoch": epoch + 1, "callbacks": states, "iterators": iterators,
                 "stop_training": bool(getattr(self.model, "stop_training", False)),  # EarlyStopping ended the fit
                 "final": self.ends_at(epoch)}  # the fit's last epoch: kept for a later fit's resume (pruning)
        if history is not None and type(history).__name__ == "History":
            epochs, merged = history_after(history.history, history.epoch, epoch, logs)
            extra["history"] = encode({"epoch": epochs, "history": merged})
        if self.on_save is not None:  # first: once the checkpoint exists, what it needs is on record
            self.on_save()
        with reads.paused():  # the launcher's own files, not the job's reads or writes
            path = self.checkpointer().save(self.count_epoch(), extra=extra, arrays=arrays)
        self.last = path.name if extra["final"] else None
        self.seconds.append(time.perf_counter() - started)

    def restore(self, path) -> None:
        """Restore checkpoint ``path`` before the first resumed epoch."""
        from launcher.record.checkpoints import read_extra

        extra, arrays = read_extra(path)
        if self.fit.get("input") == "arrays" and extra.get("tf_seed") != self.fit.get("tf_seed"):
            raise _resume_error(f"the fit's shuffled order of its arrays comes from TensorFlow's global seed, "
                                f"{self.fit.get('tf_seed')} now, {extra.get('tf_seed')} in the uninterrupted run")
        for i, kept in enumerate(extra.get("iterators") or [None, None]):
            if kept is not None and self.data[i] is not None:
                self.alignment[i].__init__(kept["used"], kept["made"])
        self.checkpointer().restore(path)
        problems = restore_callbacks(self.callbacks, extra.get("callbacks", []), arrays)
        if problems:
            raise _resume_error(f"the code's fit callbacks changed since the checkpoint: {'; '.join(problems)}")
        history = getattr(self.model, "history", None)
        if "history" in extra and history is not None and type(history).__name__ == "History":
            kept = decode(extra["history"])
            history.epoch, history.history = kept["epoch"], kept["history"]
        self.resuming = True
        self.kept_made = [(kept or {}).get("made") for kept in (extra.get("iterators") or [None, None])]

    def finish_restored(self, path) -> None:
        """A fit with no epoch left, its last epoch's state restored: it ends there. The iterators of
        its data are made, and dropped, up to the uninterrupted run's count at that epoch's end, so that
        a later fit on the same data reads the same iterators (Keras makes none in a fit with no epoch)."""
        self.last = path.name
        for dataset, count in zip(self.data, self.kept_made, strict=True):
            if dataset is None or count is None:
                continue
            try:
                missing = IteratorAlignment.to_make(count, made(dataset))
            except ValueError as exc:
                raise _resume_error(f"the data pipeline's order cannot be reproduced: {exc}") from None
            for _ in range(missing):
                iter(dataset)

    def align(self) -> None:
        """Before a resumed epoch: make and drop iterators until the next one of the training and
        of the validation data is the one the uninterrupted run used there."""
        if not self.resuming:
            return
        for which, (dataset, alignment) in enumerate(zip(self.data, self.alignment, strict=True)):
            if dataset is None:
                continue
            try:
                count = IteratorAlignment.to_make(alignment.target(self.uses[which]), made(dataset))
            except ValueError as exc:
                raise _resume_error(f"the data pipeline's order cannot be reproduced: {exc}") from None
            for _ in range(count):
                iter(dataset)

    def note_first_batch(self, which: int) -> None:
        """At the first training (0) or validation (1) batch of an epoch: the iterator it uses,
        checked against the uninterrupted run's when resuming."""
        dataset, alignment = self.data[which], self.alignment[which]
        if dataset is None:
            return
        index = made(dataset) - 1
        target = alignment.target(self.uses[which]) if self.resuming else None
        if target is not None and index != target:
            kind = ("training", "validation")[which]
            raise _resume_error(f"the resumed fit reads iterator {index} of its {kind} data where the uninterrupted "
                                f"run read iterator {target}: its order would differ")  # fmt: skip
        alignment.used.append(index)
        self.uses[which] += 1

    def keras_callbacks(self, keras, resume_from=None):
        """(first, last): callbacks to add first and last to the fit's callbacks."""
        owner = self

        class SaveFitState(keras.callbacks.Callback):
            def on_epoch_end(self, epoch: int, logs=None) -> None:
                # Every N-th epoch, and always the fit's last: a later fit's resume fast-forwards from it.
                if (epoch + 1) % owner.every == 0 or owner.ends_at(epoch):
                    owner.save(epoch, logs)

        class FitStateFirst(keras.callbacks.Callback):
            pending = resume_from is not None

            def on_epoch_begin(self, epoch: int, logs=None) -> None:
                if self.pending:
                    self.pending = False
                    owner.restore(resume_from)
                owner.align()

            def on_train_end(self, logs=None) -> None:
                # No epoch left to run (the checkpoint is the fit's last epoch, or EarlyStopping
                # ended it there): restore now, before the others' on_train_end, as they ran then.
                if self.pending:
                    self.pending = False
                    owner.restore(resume_from)
                    owner.finish_restored(resume_from)

            def on_train_batch_begin(self, batch: int, logs=None) -> None:
                if batch == 0:
                    owner.note_first_batch(0)

            def on_test_batch_begin(self, batch: int, logs=None) -> None:
                if batch == 0:
                    owner.note_first_batch(1)

        return FitStateFirst(), SaveFitState()


def _resume_error(message: str):
    from launcher.errors import ResumeError

    return ResumeError(message)
