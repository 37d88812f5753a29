"""The resumable state of an observed Keras ``fit`` (``train=script`` and ``train=custom``).

At the end of every epoch of every ``fit`` the job's code calls, the observer
(``launcher.job.training.observer``) checkpoints what the next epoch depends on, with no change
to the code: the model's variables (Dropout's seed-generator state among them), the
optimizer's (its step counter, moments and learning rate), the Python, NumPy and
TensorFlow global RNGs (``launcher.Checkpointer``), every other variable,
generator and changed callback attribute the job holds (``launcher.job.training.jobstate``), and, in
``extra.json``, the fit's position (which ``fit`` call of the job, its epoch, its steps) and Keras'
``History``. ``launch resume`` runs the code again; when the checkpointed
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
uninterrupted run had made (``FitCheckpoints.finish_restored``).

An input whose position no variable holds (a Python generator, a ``PyDataset``, a fit with
``steps_per_epoch``, a pipeline with ``cache()``: ``fast_forward_reason``) is read again through the
fit's own Keras epoch iterator, for the epochs trained, with no step (``FitCheckpoints.fast_forward``);
a generator's batches must be the ones it gave. A model with no variables yet is built from its data's
shapes before the restore (``FitCheckpoints.build``).
"""

from __future__ import annotations

import inspect
import weakref

import numpy as np

from launcher.job.observe import reads
from launcher.job.training import legacy
from launcher.job.training.jobstate import decode, encode  # noqa: F401 - the checkpoint's JSON, also for tests


def restore_callbacks(callbacks: list, states: list[dict], arrays: dict[str, np.ndarray]) -> list[str]:
    """Put the kept attributes (``jobstate.CallbackState``) back into ``callbacks``; returns what could
    not be matched (a changed list of callbacks)."""
    from launcher.job.training.jobstate import decode_with_arrays

    problems = []
    for state in states:
        i = state["index"]
        if i >= len(callbacks) or type(callbacks[i]).__name__ != state["class"]:
            problems.append(f"callback {i} is no longer a {state['class']}")
            continue
        for attr, value in state["attrs"].items():
            setattr(callbacks[i], attr, decode_with_arrays(value, arrays))
        if "arrays" in state:  # a checkpoint of an earlier launcher: EarlyStopping's best weights apart
            callbacks[i].best_weights = [arrays[f"callback{i}_{j}"] for j in range(state["arrays"])]
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
    for its next epoch, then the uninterrupted run's own step between epochs (pure).

    ``lead``: how many iterators an epoch makes before the one it reads (Keras 3: none, it reads
    the first it makes; tf_keras' evaluation makes one as it starts and reads the next)."""

    def __init__(self, used: list[int] | None = None, made_at_checkpoint: int | None = None, lead: int = 0) -> None:
        self.used = list(used or [])  # per epoch of the fit so far: the index of the iterator it used
        self.resume_at = made_at_checkpoint  # the index the first resumed epoch's first iterator gets
        self.step = used[-1] - used[-2] if used and len(used) >= 2 else 2  # Keras: two per epoch
        self.lead = int(lead or 0)
        self.began: int | None = None  # iterators made when the current epoch began (measured)

    def target(self, epochs_resumed: int) -> int | None:
        """The index the ``epochs_resumed``-th resumed epoch (0 = the first) must use."""
        return None if self.resume_at is None else self.resume_at + self.lead + epochs_resumed * self.step

    def next_made(self, epochs_resumed: int) -> int | None:
        """The index the first iterator the ``epochs_resumed``-th resumed epoch makes must have."""
        target = self.target(epochs_resumed)
        return None if target is None else target - self.lead

    def seen_lead(self) -> int:
        """The lead the current epoch showed: the iterator it read, past those made when it began."""
        return self.used[-1] - self.began if self.used and self.began is not None else 0

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


# ---------------------------------------------------------------- fast-forward
_epoch_iterators: list = []  # weakrefs to Keras' epoch iterators, newest last (observe_epoch_iterators)


def observe_epoch_iterators(iterator_class) -> None:
    """Note each epoch iterator Keras makes (wraps its constructor once): a fit's first is its training data's."""
    original = iterator_class.__init__
    if getattr(original, "_launch_noted", False):
        return

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        _epoch_iterators[:] = [r for r in _epoch_iterators if r() is not None][-8:]
        _epoch_iterators.append(weakref.ref(self))

    __init__._launch_noted = True  # type: ignore[attr-defined]
    iterator_class.__init__ = __init__


def newest_epoch_iterator():
    """The epoch iterator Keras made last (a fit's training data's, once its callbacks begin), or None."""
    return _epoch_iterators[-1]() if _epoch_iterators else None


def has_cache(dataset: object) -> bool:
    """Does a ``tf.data`` pipeline hold a ``cache()``? Its first iterator fills it; later ones read what
    that one read (an order, augmentations): a resume must read the same epochs again to fill it alike."""
    pending, seen = [dataset], set()
    while pending:
        d = pending.pop()
        if id(d) in seen:
            continue
        seen.add(id(d))
        if "Cache" in type(d).__name__:
            return True
        try:
            pending += list(d._inputs())
        except Exception:  # noqa: BLE001 - not a tf.data dataset we can walk
            continue
    return False


def fast_forward_reason(fit: dict, dataset: object) -> str | None:
    """Why a resume must read the data the interrupted run consumed again (no training step) rather than
    only restore: its input's position is in no variable. None for a ``tf.data`` pipeline or arrays,
    which start every epoch with a new iterator (aligned, ``IteratorAlignment``). A tf_keras fit is
    always read again (``legacy.replay_epochs``): it makes an epoch's iterator before the epoch begins."""
    kind = fit.get("input")
    if fit.get("keras") == legacy.NAME:
        reason = fast_forward_reason({**fit, "keras": None}, dataset)
        return (
            f"tf_keras' fit, {reason}" if reason else "tf_keras' fit, which makes an epoch's iterator before it begins"
        )
    if kind == "generator":
        return "a Python generator"
    if kind == "PyDataset":
        return "a keras.utils.PyDataset"
    if fit.get("steps_per_epoch") is not None:
        return "steps_per_epoch (its iterator runs on across epochs)"
    if kind == "tf.data" and dataset is not None and has_cache(dataset):
        return "a tf.data pipeline with cache()"
    if kind not in ("tf.data", "arrays"):
        return f"a {kind}"
    return None


def digesting(generator, digests: list):
    """``generator``, yielding the same objects, with a digest of each batch noted in ``digests``: a
    resume that fast-forwards it checks that it gives the same batches again."""
    from launcher.job.training.jobstate import _content_digest

    for batch in generator:
        try:
            digests.append(_content_digest(_as_numpy(batch)))
        except Exception:  # noqa: BLE001 - a batch we cannot digest is noted as such
            digests.append("?")
        yield batch


def _as_numpy(batch: object) -> object:
    if isinstance(batch, (tuple, list)):
        return type(batch)(_as_numpy(b) for b in batch)
    if isinstance(batch, dict):
        return {k: _as_numpy(v) for k, v in batch.items()}
    return np.asarray(batch)


def chain(digests: list[str]) -> str:
    import hashlib

    return hashlib.sha256("".join(digests).encode()).hexdigest()[:16]


class FitCheckpoints:
    """The checkpoints of one observed ``fit``: a Keras callback that saves at each epoch's end
    (last of the fit's callbacks) and, when resuming, restores before the first resumed epoch
    and aligns each resumed epoch's data iterators (first of them). Job process only."""

    def __init__(
        self,
        run_dir,
        model,
        keep: int,
        every: int,
        callbacks: list,
        fit: dict,
        count_epoch,
        data: tuple,
        on_save=None,
        yielded: list | None = None,
    ) -> None:
        from launcher.job.training import jobstate

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
        self.generators = jobstate.Generators()
        self.callback_state = jobstate.CallbackState(callbacks)
        self.epoch_iterator = None  # Keras' epoch iterator of the training data (fast-forward)
        self.batches = 0  # training batches begun in this fit (its steps)
        self.yielded = yielded  # digests of what a Python generator fed to fit yielded, in order
        self.fast_forwarded = False
        self.before_first_step = None  # called once, as a resumed fit's first step begins (after every callback)
        self.after_first_step = None  # and once as it ends
        self.resume_from = None  # the checkpoint this fit restores, when resumed (keras_callbacks)
        self.first_epoch = int(fit.get("initial_epoch") or 0)  # the uninterrupted fit's first epoch
        self.read_before: tuple | None = None  # a tf_keras fit's data read again: (epochs, steps, seconds, moved)

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
        kept = {k: self.fit.get(k) for k in ("fit", "input", "steps_per_epoch", "built", "validation")}
        return {**kept, "checkpoint": self.last}

    def batches_read(self, steps: int) -> int:
        """The batches ``steps`` training steps read (``steps_per_execution`` each)."""
        return steps * legacy.steps_per_execution(self.model)

    @property
    def legacy(self) -> bool:
        """A tf_keras fit (``launcher.job.training.legacy``)?"""
        return self.fit.get("keras") == legacy.NAME

    def begin(self) -> None:
        """Once every callback's ``on_train_begin`` ran: what the fit began with (the job's generators,
        its callbacks' attributes) and the fit's epoch iterator. A resumed tf_keras fit's data handler
        is told to read its earlier epochs again before it makes the first resumed epoch's iterator."""
        self.epoch_iterator = newest_epoch_iterator()
        self.generators.begin()
        self.callback_state.begin()
        if self.legacy and self.resume_from is not None and self.epoch_iterator is not None:
            setattr(self.epoch_iterator, legacy.REPLAY, self)

    def read_again(self, read, epochs: int) -> None:
        """A resumed tf_keras fit: its data read again (``read() -> steps``, ``legacy.replay_epochs``), and
        what that moved (variables, generators, the global RNGs), kept for ``restore``."""
        import random
        import time

        from launcher.job.training import jobstate

        variables = jobstate.snapshot_variables(self.model)
        generators = self.generators.snapshot()
        globals_before = (random.getstate(), _numpy_state())
        started = time.perf_counter()
        steps = read()
        seconds = time.perf_counter() - started
        moved = self._moved(variables, generators, globals_before)
        self.read_before = (epochs, steps, seconds, moved)

    def _moved(self, variables: dict, generators: dict, globals_before: tuple) -> tuple[set, set, bool]:
        """What moved since the snapshots: variables, generators (by id), the global RNGs."""
        import random

        from launcher.job.training import jobstate

        after = jobstate.snapshot_variables(self.model)
        moved_variables = {k for k, v in after.items() if variables.get(k) != v}
        now = self.generators.snapshot()
        moved_generators = {k for k, v in now.items() if generators.get(k) != v}
        moved_globals = (random.getstate(), _numpy_state()) != globals_before
        return moved_variables, moved_generators, moved_globals

    def save(self, epoch: int, logs: dict | None) -> None:
        import time

        from launcher.job.training import jobstate

        started = time.perf_counter()
        history = getattr(self.model, "history", None)
        states, arrays, unkept = self.callback_state.save()
        variables, values = jobstate.save_variables(self.model)
        arrays.update(values)
        iterators = [
            {"made": made(d), "used": a.used} if d is not None else None
            for d, a in zip(self.data, self.alignment, strict=True)
        ]
        if self.legacy:  # tf_keras' evaluation reads the second iterator it makes (IteratorAlignment.lead)
            for kept, a in zip(iterators, self.alignment, strict=True):
                if kept is not None:
                    kept["lead"] = a.seen_lead()
        extra = {
            **self.fit,
            "fit_epoch": epoch + 1,
            "callbacks": states,
            "iterators": iterators,
            "variables": variables,
            "generators": self.generators.save(),
            "unkept": unkept,
            "batches": self.batches,
            "fast_forward": fast_forward_reason(self.fit, self.data[0]),
            "stop_training": bool(getattr(self.model, "stop_training", False)),  # EarlyStopping ended the fit
            "final": self.ends_at(epoch),
        }  # the fit's last epoch: kept for a later fit's resume (pruning)
        if self.yielded is not None:  # what the generator gave for the batches trained so far
            extra["yielded"] = chain(self.yielded[: self.batches_read(self.batches)])
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
        """Restore checkpoint ``path`` before the first resumed epoch (or, for a fit with no epoch left,
        at its end): build a model that makes its variables in its first batch, fast-forward an input
        whose position no variable holds, then put back every state the checkpoint keeps."""
        from launcher.job.training import jobstate
        from launcher.record.checkpoints import read_extra

        extra, arrays = read_extra(path)
        if self.fit.get("input") == "arrays" and extra.get("tf_seed") != self.fit.get("tf_seed"):
            raise _resume_error(
                f"the fit's shuffled order of its arrays comes from TensorFlow's global seed, "
                f"{self.fit.get('tf_seed')} now, {extra.get('tf_seed')} in the uninterrupted run"
            )
        self.build()
        moved_variables: set = set()
        moved_generators: set = set()
        moved_globals = False
        if self.legacy:  # read again before its first resumed epoch's iterator was made
            if self.read_before is None:
                raise _resume_error(
                    "its tf_keras fit's data was not read again to its position (tf_keras' DataHandler "
                    "was not found as this launcher knows it)"
                )
            epochs, steps, seconds, moved = self.read_before
            moved_variables, moved_generators, moved_globals = moved
            self._check_read_again(extra, epochs, steps, seconds)
        elif extra.get("fast_forward"):
            moved_variables, moved_generators, moved_globals = self.fast_forward(extra)
        for i, kept in enumerate(extra.get("iterators") or [None, None]):
            if kept is not None and self.data[i] is not None and not (i == 0 and self.fast_forwarded):
                self.alignment[i].__init__(kept["used"], kept["made"], kept.get("lead", 0))
        self.checkpointer().restore(path, rngs=not moved_globals)
        problems = jobstate.restore_variables(self.model, extra.get("variables") or [], arrays, moved_variables)
        problems += self.generators.restore(extra.get("generators") or [], moved_generators)
        problems += restore_callbacks(self.callbacks, extra.get("callbacks", []), arrays)
        if problems:
            raise _resume_error(f"the job's state cannot be put back as the checkpoint keeps it: {'; '.join(problems)}")
        history = getattr(self.model, "history", None)
        if "history" in extra and history is not None and type(history).__name__ == "History":
            kept = decode(extra["history"])
            history.epoch, history.history = kept["epoch"], kept["history"]
        self.batches = int(extra.get("batches") or 0)
        self.resuming = True
        self.kept_made = [(kept or {}).get("made") for kept in (extra.get("iterators") or [None, None])]

    def build(self) -> None:
        """A model that makes its variables in its first batch (a ``Sequential`` without ``Input``, a
        subclassed model) has none yet where a resume restores: build it from the shapes and dtypes of
        its training data (Keras' own symbolic build; no data is read, no step runs)."""
        model = self.model
        had_variables = bool(model.variables)
        if all(getattr(layer, "built", True) for layer in model._flatten_layers()) and had_variables:
            return
        iterator = self.epoch_iterator
        dataset = getattr(iterator, "_distributed_dataset", None) or getattr(iterator, "_dataset", None)
        spec = getattr(dataset, "element_spec", None)
        if spec is None and had_variables:
            return
        if spec is None:
            raise _resume_error(
                "its model had no variables when the fit began, and the shapes of its data are "
                "not known to build it; call the model once on a batch before fit "
                "(model(x[:1])), and its runs resume"
            )
        try:
            if self.legacy:
                legacy.build_from_spec(model, spec)
            else:
                import keras
                import tensorflow as tf

                batch = tf.nest.map_structure(lambda s: keras.KerasTensor(s.shape, s.dtype.name), spec)
                model._symbolic_build(data_batch=batch)
        except Exception as exc:  # noqa: BLE001 - one line: why, and the fix
            if had_variables:  # a model of its own train_step and no call (keras-io's VAE): its layers are
                return  # built; the restore, by name, says which variable it lacks if one is missing
            raise _resume_error(
                f"its model had no variables when the fit began and could not be built from its "
                f"data's shapes ({type(exc).__name__}); call the model once on a batch before "
                "fit (model(x[:1])), and its runs resume"
            ) from None

    def fast_forward(self, extra: dict) -> tuple[set, set, bool]:
        """Read again, with no training step, the batches the interrupted fit trained before its checkpoint,
        through the fit's own epoch iterator: a generator, a ``PyDataset``, a ``steps_per_epoch`` iterator, a
        cache advance exactly as they did. Returns what moved meanwhile (variables, generators, the global
        RNGs): the data path put them where they were, and the checkpoint's values (taken while the input
        may have been prefetching ahead) are not restored over them."""
        import random
        import time

        from launcher.job.training import jobstate

        iterator = self.epoch_iterator
        if iterator is None:
            raise _resume_error(
                f"its input ({extra['fast_forward']}) must be read again to its position, and "
                "the fit's epoch iterator was not found"
            )
        epochs = int(extra["fit_epoch"]) - int(self.fit.get("initial_epoch") or 0)
        variables = jobstate.snapshot_variables(self.model)
        generators = self.generators.snapshot()
        globals_before = (random.getstate(), _numpy_state())
        started = time.perf_counter()
        steps = _read_epochs(iterator, epochs, int(getattr(iterator, "steps_per_execution", 1) or 1))
        seconds = time.perf_counter() - started
        self._check_read_again(extra, epochs, steps, seconds)
        return self._moved(variables, generators, globals_before)

    def _check_read_again(self, extra: dict, epochs: int, steps: int, seconds: float) -> None:
        """The input read again gave what the interrupted fit trained on: as many steps, and a
        generator's batches the same; said in one line, with the time it took."""
        if self.yielded is not None and extra.get("yielded") is not None:
            again = chain(self.yielded[: self.batches_read(int(extra.get("batches") or 0))])
            if again != extra["yielded"]:
                raise _resume_error(
                    "its fit's Python generator gives other batches when run again than it gave "
                    "(it reads something that changed, a socket, or a random source of its own "
                    "that is not seeded): it cannot be fast-forwarded"
                )
        if steps != int(extra.get("batches") or steps):
            raise _resume_error(
                f"its input gave {steps} batches when read again where the interrupted run "
                f"trained {extra.get('batches')}: it cannot be fast-forwarded"
            )
        print(
            f"[launch] fast-forwarding the input pipeline through {epochs} epoch{'s' * (epochs != 1)} "
            f"({extra.get('fast_forward') or fast_forward_reason(self.fit, self.data[0])}): {seconds:.1f} s",
            flush=True,
        )
        self.fast_forwarded = True

    def finish_restored(self, path) -> None:
        """A fit with no epoch left, its last epoch's state restored: it ends there. The iterators of
        its data are made, and dropped, up to the uninterrupted run's count at that epoch's end, so that
        a later fit on the same data reads the same iterators (Keras makes none in a fit with no epoch)."""
        self.last = path.name
        for which, (dataset, count) in enumerate(zip(self.data, self.kept_made, strict=True)):
            if dataset is None or count is None or (which == 0 and self.fast_forwarded):
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
            if dataset is None or (which == 0 and self.fast_forwarded):
                continue
            try:
                count = IteratorAlignment.to_make(alignment.next_made(self.uses[which]), made(dataset))
            except ValueError as exc:
                raise _resume_error(f"the data pipeline's order cannot be reproduced: {exc}") from None
            for _ in range(count):
                iter(dataset)

    def note_epoch_began(self) -> None:
        """As an epoch begins (after the alignment): the iterators made of each dataset so far."""
        for dataset, alignment in zip(self.data, self.alignment, strict=True):
            if dataset is not None:
                alignment.began = made(dataset)

    def note_first_batch(self, which: int) -> None:
        """At the first training (0) or validation (1) batch of an epoch: the iterator it uses,
        checked against the uninterrupted run's when resuming."""
        dataset, alignment = self.data[which], self.alignment[which]
        if dataset is None or made(dataset) == 0:  # read through another dataset (a distributed one): not counted
            return
        index = made(dataset) - 1
        target = alignment.target(self.uses[which]) if self.resuming else None
        if which == 0 and self.fast_forwarded:
            target = None  # the fast-forward made the iterators the uninterrupted run made
        if target is not None and index != target:
            kind = ("training", "validation")[which]
            raise _resume_error(
                f"the resumed fit reads iterator {index} of its {kind} data where the uninterrupted "
                f"run read iterator {target}: its order would differ"
            )
        alignment.used.append(index)
        self.uses[which] += 1

    def keras_callbacks(self, keras, resume_from=None):
        """(first, last): callbacks to add first and last to the fit's callbacks (``keras``: the
        module whose ``callbacks.Callback`` they are, Keras 3 or tf_keras)."""
        owner = self
        self.resume_from = resume_from

        class SaveFitState(keras.callbacks.Callback):
            def on_train_begin(self, logs=None) -> None:
                owner.begin()  # last: after every other callback's on_train_begin

            def on_epoch_end(self, epoch: int, logs=None) -> None:
                # Every N-th epoch, and always the fit's last: a later fit's resume fast-forwards from it.
                if (epoch + 1) % owner.every == 0 or owner.ends_at(epoch):
                    owner.save(epoch, logs)

            def on_train_batch_begin(self, batch: int, logs=None) -> None:
                # last: the train function Keras calls next is the resumed fit's first step
                if owner.resuming and owner.before_first_step is not None:
                    before, owner.before_first_step = owner.before_first_step, None
                    before()

        class FitStateFirst(keras.callbacks.Callback):
            pending = resume_from is not None

            def on_epoch_begin(self, epoch: int, logs=None) -> None:
                if self.pending:
                    self.pending = False
                    owner.restore(resume_from)
                owner.align()
                owner.note_epoch_began()

            def on_train_end(self, logs=None) -> None:
                # No epoch left to run (the checkpoint is the fit's last epoch, or EarlyStopping
                # ended it there): restore now, before the others' on_train_end, as they ran then.
                if self.pending:
                    self.pending = False
                    owner.restore(resume_from)
                    owner.finish_restored(resume_from)

            def on_train_batch_begin(self, batch: int, logs=None) -> None:
                owner.batches += 1
                if batch == 0:
                    owner.note_first_batch(0)

            def on_train_batch_end(self, batch: int, logs=None) -> None:
                if owner.after_first_step is not None:
                    after, owner.after_first_step = owner.after_first_step, None
                    after()

            def on_test_batch_begin(self, batch: int, logs=None) -> None:
                if batch == 0:
                    owner.note_first_batch(1)

        return FitStateFirst(), SaveFitState()


def _numpy_state() -> str:
    from launcher.job.training.jobstate import digest

    return digest(encode(np.random.get_state(legacy=False)))


def _read_epochs(iterator, epochs: int, per_step: int) -> int:
    """Read ``epochs`` epochs of Keras' epoch ``iterator`` as ``fit`` does, each step's batches without
    the step (``per_step``: ``steps_per_execution``); returns the steps read."""
    steps = 0
    for _ in range(epochs):
        with iterator.catch_stop_iteration():
            for _begin, _end, batches in iterator:
                read = 0
                for _ in range(per_step):
                    optional = batches.get_next_as_optional()
                    if not optional.has_value():
                        break
                    read += 1
                if not read:
                    raise StopIteration
                steps += 1
    return steps


def _resume_error(message: str):
    from launcher.errors import ResumeError

    return ResumeError(message)
