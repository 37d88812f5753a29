"""tf_keras (Keras 2: ``pip install --no-deps tf_keras`` at TensorFlow's version, then
``TF_USE_LEGACY_KERAS=1``, so that ``tf.keras`` is ``tf_keras``): where it differs from Keras 3 for
the observer, its checkpoints and their resume.

Measured with tf_keras 2.21 (TensorFlow 2.21):

- ``import tensorflow`` imports ``tf_keras`` itself when ``TF_USE_LEGACY_KERAS`` is set (its optimizers,
  eagerly); a job may also ``import tf_keras`` later, or never. The launcher never imports it: the
  observer is installed on it when the job's import of it ends (``when_imported``), so a job that does
  not use it has no ``tf_keras`` among the distributions it used.
- Its ``Model.fit`` (``tf_keras.src.engine.training.Model``) takes the same arguments and callbacks
  (``tf_keras.callbacks.Callback``: a Keras 3 callback lacks the hooks its ``CallbackList`` asks for),
  and logs floats; under ``MultiWorkerMirroredStrategy`` it runs where Keras 3's fails.
- Its optimizer (``tf_keras.src.optimizers.optimizer.Optimizer``; the legacy ``OptimizerV2`` too)
  applies through ``apply_gradients``, not ``apply``; ``variables`` is a list that can be called
  (``OptimizerV2``: a method); it is built on its first step inside its name scope, so its slots are
  ``SGD/m/dense/kernel:0``: built from outside (a resume restores into it before any step), it must
  be built in that scope to get the same names (``build_optimizer``). Its variables are
  ``tf.Variable`` s named ``dense/kernel:0``, with no ``path``.
- Its ``fit`` makes an epoch's data iterator before the epoch's callbacks begin
  (``DataHandler.enumerate_epochs``), one iterator across all epochs when ``steps_per_epoch`` is set on
  a repeated pipeline, and under a distribution strategy iterates a distributed dataset, not the
  job's own. So a resumed tf_keras fit reads its data again, as the uninterrupted fit read it, through
  its own ``DataHandler`` (its iterators made as they were, each epoch's steps read without training),
  before the first resumed epoch's iterator is made (``replay_epochs``): an iterator that runs on
  across epochs, a pipeline reshuffled each epoch, a ``cache()``, a generator all stand where they stood.

Job process only; imports nothing of the launcher.
"""

from __future__ import annotations

import functools
import importlib.abc
import os
import sys

NAME = "tf_keras"
TRUE = ("1", "true", "True")  # what TensorFlow takes for TF_USE_LEGACY_KERAS set (its __init__)


def selected(env=os.environ) -> bool:
    """Does ``tf.keras`` name tf_keras in this process (``TF_USE_LEGACY_KERAS``, as TensorFlow reads it)?"""
    return env.get("TF_USE_LEGACY_KERAS") in TRUE


def is_tf_keras(obj: object) -> bool:
    """Is ``obj`` (a model, an optimizer, a callback) tf_keras', not Keras 3's?"""
    return any(c.__module__.split(".", 1)[0] == NAME for c in type(obj).__mro__)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when ``tf_keras`` is imported, its loader runs the callbacks once the
    package has been executed."""

    def __init__(self) -> None:
        self.callbacks: list = []

    def find_spec(self, fullname, path=None, target=None):
        if fullname != NAME:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module) -> None:
            original(module)
            _fire(module)

        loader.exec_module = exec_module
        return spec


_watch: _AfterImport | None = None


def when_imported(callback) -> None:
    """``callback(tf_keras)``: now if the job has imported tf_keras, else as soon as its import ends."""
    global _watch
    module = sys.modules.get(NAME)
    if module is not None and hasattr(module, "Model"):
        callback(module)
        return
    if _watch is None:
        _watch = _AfterImport()
        sys.meta_path.insert(0, _watch)
    _watch.callbacks.append(callback)


def _fire(module) -> None:
    global _watch
    watch, _watch = _watch, None
    if watch is None:
        return
    if watch in sys.meta_path:
        sys.meta_path.remove(watch)
    for callback in watch.callbacks:
        callback(module)


def model_class(tf_keras):
    """The class whose ``fit``, ``compile`` and ``__new__`` every tf_keras model runs."""
    from tf_keras.src.engine import training

    return training.Model


def optimizer_classes(tf_keras) -> list:
    """The tf_keras optimizer classes whose ``apply_gradients`` a step goes through: the optimizer of
    tf_keras 2.11+ and the legacy ``OptimizerV2`` (``tf.keras.optimizers.legacy``)."""
    classes = []
    try:
        from tf_keras.src.optimizers import optimizer

        classes.append(optimizer.Optimizer)
    except ImportError:
        pass
    try:
        from tf_keras.src.optimizers.legacy import optimizer_v2

        classes.append(optimizer_v2.OptimizerV2)
    except ImportError:
        pass
    return classes


def data_handler_class(tf_keras):
    """tf_keras' epoch iterator: the ``DataHandler`` a fit reads its data through."""
    from tf_keras.src.engine import data_adapter

    return data_adapter.DataHandler


def optimizer_variables(optimizer) -> list:
    """An optimizer's variables: Keras 3's and tf_keras' ``variables`` list, ``OptimizerV2``'s method."""
    found = getattr(optimizer, "variables", None)
    if callable(found) and not isinstance(found, (list, tuple)):
        found = found()
    return list(found or [])


def optimizer_built(optimizer) -> bool:
    """Has the optimizer made its slots? (Keras 3: ``built``; tf_keras: ``_built``; ``OptimizerV2``: slots.)"""
    built = getattr(optimizer, "built", None)
    if built is not None:
        return bool(built)
    if hasattr(optimizer, "_create_all_weights"):  # OptimizerV2: built once it has slots
        return bool(getattr(optimizer, "_slots", None))
    return bool(getattr(optimizer, "_built", False))


def build_optimizer(model) -> None:
    """Make a tf_keras model's optimizer's slots now, as its first step would: in its distribution
    strategy's scope, inside the optimizer's name scope and lifted out of any function (as
    ``apply_gradients`` does), so that the slots get the names they get in training."""
    import tensorflow as tf

    optimizer = model.optimizer
    name = getattr(optimizer, "name", None) or getattr(optimizer, "_name", None) or "optimizer"
    strategy = getattr(model, "distribute_strategy", None) or tf.distribute.get_strategy()
    with strategy.scope(), tf.name_scope(name), tf.init_scope():
        if hasattr(optimizer, "_create_all_weights"):
            optimizer._create_all_weights(model.trainable_variables)
        else:
            optimizer.build(model.trainable_variables)


def steps_per_execution(model) -> int:
    """How many batches a step of ``model`` reads (Keras 3's ``steps_per_execution``; tf_keras keeps it
    in a variable)."""
    value = getattr(model, "steps_per_execution", None)
    if value is None:
        variable = getattr(model, "_steps_per_execution", None)
        value = int(variable.numpy()) if variable is not None else 1
    return int(value or 1)


def build_from_spec(model, spec) -> None:
    """Build a tf_keras model that makes its variables in its first step from its data's ``spec``
    (``element_spec``: features, or (features, labels[, weights])), in its strategy's scope."""
    import tensorflow as tf

    features = spec[0] if isinstance(spec, tuple) else spec
    shapes = tf.nest.map_structure(lambda s: s.shape, features)
    strategy = getattr(model, "distribute_strategy", None) or tf.distribute.get_strategy()
    with strategy.scope():
        model.build(shapes)


# ---------------------------------------------------------------- a resumed fit's data, read again
REPLAY = "_launch_replay"  # on a DataHandler: the FitCheckpoints whose resumed fit reads through it


def observe_data_handlers(handler_class) -> None:
    """Wrap ``DataHandler.enumerate_epochs`` once: a handler given a ``replay`` (``REPLAY``) reads again
    the epochs its fit trained before the checkpoint, then yields the resumed ones."""
    original = handler_class.enumerate_epochs
    if getattr(original, "_launch_replays", False):
        return

    @functools.wraps(original)
    def enumerate_epochs(self):
        replay = self.__dict__.pop(REPLAY, None)
        if replay is None:
            yield from original(self)
            return
        yield from replay_epochs(self, original, replay)

    enumerate_epochs._launch_replays = True  # type: ignore[attr-defined]
    handler_class.enumerate_epochs = enumerate_epochs


def replay_epochs(handler, original, replay):
    """The epochs of a resumed fit: those before its ``initial_epoch`` (from the uninterrupted fit's
    own first, ``replay.first_epoch``) made and read as the uninterrupted fit made and read them, each
    step's batches without the step, through the handler's own ``enumerate_epochs``, ``steps`` and
    ``catch_stop_iteration``; then the resumed epochs, yielded. ``replay.read_again(read)`` runs the
    reading (``read() -> steps read``) and notes what it moved."""
    resumed_at = handler._initial_epoch
    handler._initial_epoch = min(int(replay.first_epoch), resumed_at)
    epochs = original(handler)
    first: list = []

    def read() -> int:
        steps = 0
        for epoch, iterator in epochs:
            if epoch >= resumed_at:
                first.append((epoch, iterator))
                break
            steps += read_epoch(handler, iterator)
        return steps

    try:
        replay.read_again(read, resumed_at - handler._initial_epoch)
    finally:
        handler._initial_epoch = resumed_at
    if first:
        yield first[0]
        yield from epochs


def read_epoch(handler, iterator) -> int:
    """One epoch of ``iterator`` read as tf_keras' fit reads it (its ``steps``, each
    ``steps_per_execution`` batches), with no step; returns the steps."""
    steps = 0
    with handler.catch_stop_iteration():
        for _ in handler.steps():
            steps += 1  # as fit counts them: a step is begun before it reads
            for _ in range(int(handler._steps_per_execution.numpy())):
                next(iterator)
    return steps
