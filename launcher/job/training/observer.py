"""What an unmodified training script trained, observed without its help.

Installed in the job process before user code runs (``train=script`` and
``train=custom``; the built-in mnist task records itself). It wraps four Python
entry points and changes none of their arguments that reach the math:

- ``keras.Model.fit``: adds two callbacks, one appending each epoch's logs to
  ``metrics.jsonl`` and the step-trace recorder (``launcher.record.trace``), and in seeded
  and strict runs the epoch checkpoints of ``launcher.job.training.fitstate`` (a resumed job's
  checkpointed fit starts at its next epoch, its state restored; its earlier fits are
  fast-forwarded to their ends from their last epochs' checkpoints);
- a Keras optimizer's ``apply`` (``apply_gradients`` calls it) and TensorFlow's
  ``tf.compat.v1.train.Optimizer.apply_gradients``: note the variables trained, and
  in eager code count the step;
- ``tf.function``'s ``Function.__call__``: after a top-level call (a ``@tf.function``
  training step), count the optimizer steps it took, from the optimizers' own
  ``iterations`` counters;
- ``tf.GradientTape.gradient`` (eager only): remember a scalar loss for the trace;
- a variable's ``assign``, ``assign_add`` and ``assign_sub`` (TensorFlow's and
  Keras'), when the job's own code calls them: a loop that trains without an optimizer
  (``w.assign_sub(lr * dw)``, as TensorFlow's basic training loop guide does). Calls
  from Keras and TensorFlow themselves (optimizers, metrics) are theirs, not noted.

The wrapped steps and fits are also where a Ctrl-C or SIGTERM stops the job
(``launcher.job.interrupts``): after the current step or batch, never inside one.

``keras.Model`` creation is noted (weakly) so that variables trained in a custom loop
can be traced back to their model, whose non-trainable weights are then hashed too.

What is hashed at the end, in the order first trained: every Keras model that was
fitted or whose variables an optimizer updated, then every other variable an
optimizer updated or the job's code assigned (bare ``tf.Variable``s). The observer keeps them alive, so a model
built and fitted inside a function and dropped is still hashed. Reading weights never
changes them: an observed run and an unobserved one give the same bits (tested).

TF1 graphs trained in a ``Session`` are observed through ``launcher.job.training.tf1``: the
variables a ``tf.compat.v1.train`` optimizer updates, read from the session before
it closes, and every ``Session.run`` of its train op as a step.

Not observed as steps: assignments without an optimizer (their variables are hashed,
but the step trace counts optimizer steps only). ``launcher.record_model(model)``
remains the explicit choice of what to hash.

tf_keras (Keras 2, ``TF_USE_LEGACY_KERAS=1``) is observed the same way, once the job has imported it
(``launcher.job.training.legacy``): its ``Model.fit`` (metrics, trace, checkpoints; a resumed fit reads
its earlier epochs' data again), model creation, and its optimizers' ``apply_gradients``.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import time
import weakref
from pathlib import Path

import numpy as np

from launcher.job import interrupts
from launcher.job.training import fitstate, jobstate, legacy, tf1, trace
from launcher.record import layout
from launcher.record.hashing import keras_weights, weights_digest
from launcher.record.probe import places

_observer: Observer | None = None


class Observer:
    """The models and variables a job trains, its optimizer steps, epochs and trace."""

    def __init__(
        self,
        run_dir: Path,
        trace_every: int,
        log_epoch,
        checkpoint: dict | None = None,
        resume: dict | None = None,
        on_checkpoint=None,
    ) -> None:
        self.run_dir, self.trace_every, self.log_epoch = Path(run_dir), trace_every, log_epoch
        self.checkpoint = checkpoint  # {"every": N, "keep": K}: checkpoint every fit's epochs (None: never)
        self.resume = resume  # the checkpoint a resumed job continues from, until its fit starts
        # where that checkpoint lies: the run's own checkpoints, or (another worker of a multi-worker
        # run) the chief's, which serve every worker (``from``: the chief's run directory, relative)
        self.resume_dir = Path(os.path.normpath(self.run_dir / (resume or {}).get("from", ".")))
        self.on_checkpoint = on_checkpoint  # called before each checkpoint (the job's facts so far)
        self.checkpoint_seconds: list[float] = []
        self.models: list = []  # trained Keras models, first trained first (strong references)
        self.variables: list = []  # other trained variables, first trained first
        self.optimizers: list = []  # Keras optimizers that applied gradients
        self.created: list[weakref.ref] = []  # every Keras model, in creation order (weakly)
        self._trained_ids: set[int] = set()
        self._seen: set[tuple[int, ...]] = set()
        self.v1_steps = 0  # steps of tf.compat.v1 optimizers, counted in eager code
        # TF1 graphs and sessions (launcher.job.training.tf1): train ops, the variables they train, the
        # session that ran them, and the values read from it before it closed.
        self.train_ops: dict[int, object] = {}
        self.graph_variables: list = []
        self.session = None
        self.session_steps = 0
        self.session_values: list[np.ndarray] | None = None
        self.in_fit = 0
        self.fits = 0
        self.finished: list[dict] = []  # each ended fit's kind and last checkpoint (fitstate.FitCheckpoints.ending)
        self.jit_requested: dict[str, object] = {}  # model name -> the jit_compile its compile() asked for
        self.epochs = 0
        self.history: dict[str, float] = {}
        self.loss = None  # the last scalar loss a GradientTape differentiated, eagerly
        existing = trace.read(run_dir)
        self.last_step = existing[-1]["step"] if existing else -1
        self.seconds = 0.0
        self.not_bitwise: list[dict] = []  # a resumed fit's random ops whose state no checkpoint keeps
        self.steps_restored: int | None = None  # a resumed run's optimizer steps its checkpoint brought

    # ------------------------------------------------------------ what was trained
    def note_model(self, model) -> None:
        if all(m is not model for m in self.models):
            self.models.append(model)
            self._trained_ids.update(id(v) for v in model.weights)

    def note_variables(self, variables: list) -> None:
        ids = tuple(id(v) for v in variables)
        if ids in self._seen:
            return
        self._seen.add(ids)
        applied = set(ids)
        # A model noted before it was built (a Sequential without an Input, fitted) owns
        # weights now that it did not own then: they are its, not another model's.
        for model in self.models:
            self._trained_ids.update(id(v) for v in model.weights)
        # The first-created model owning applied variables is the outer one (a Sequential is
        # created before the Functional it builds inside itself, which shares its weights).
        for ref in self.created:
            model = ref()
            if model is None or any(m is model for m in self.models):
                continue
            owned = {id(v) for v in model.weights}
            if applied & {id(v) for v in model.trainable_variables} and not owned <= self._trained_ids:
                self.note_model(model)
        for v in variables:
            if id(v) not in self._trained_ids:
                self._trained_ids.add(id(v))
                self.variables.append(v)

    def note_optimizer(self, optimizer) -> None:
        if all(o is not optimizer for o in self.optimizers):
            self.optimizers.append(optimizer)

    def note_train_op(self, op, variables: list) -> None:
        """A TF1 train op (graph mode) and the variables it updates."""
        self.train_ops[id(op)] = op
        known = {id(v) for v in self.graph_variables}
        self.graph_variables += [v for v in variables if id(v) not in known]

    def note_session(self, session) -> None:
        self.session = session

    def snapshot_session(self, session) -> None:
        """Read the trained variables from ``session`` before it closes."""
        if session is self.session and self.graph_variables and not getattr(session, "_closed", False):
            self.session_values = tf1.read_variables(session, self.graph_variables)

    def _session_arrays(self) -> list[tuple[str, str, np.ndarray]]:
        if not self.graph_variables or self.session is None:
            return []
        if not getattr(self.session, "_closed", False):
            self.snapshot_session(self.session)
        names = [v.op.name for v in self.graph_variables]
        return [
            (name.rsplit("/", 1)[0], name, value) for name, value in zip(names, self.session_values or [], strict=False)
        ]

    def named_arrays(self) -> list[tuple[str, str, np.ndarray]]:
        """(layer, weight path, value) of everything trained, in a stable order."""
        session = self._session_arrays()
        if session:
            return session
        out = []
        prefix = len(self.models) + bool(self.variables) > 1
        for model in self.models:
            for layer, path, value in keras_weights(model):
                out.append((f"{model.name}/{layer}" if prefix else layer, path, value))
        for i, v in enumerate(self.variables):
            name = getattr(v, "path", None) or getattr(v, "name", None) or f"variable_{i}"
            out.append((f"variable {i} ({name})", name, _value(v)))
        return out

    def digest(self) -> tuple[str, dict[str, str]] | None:
        trained = self.models or self.variables or (self.graph_variables and self.session is not None)
        return weights_digest(self.named_arrays()) if trained else None

    # ------------------------------------------------------------ steps and trace
    def steps(self) -> int:
        return sum(int(_value(o.iterations)) for o in self.optimizers) + self.v1_steps + self.session_steps

    def trained(self) -> bool:
        return bool(self.optimizers or self.v1_steps or self.session_steps)

    def after_step(self) -> None:
        """After an eager optimizer step or a top-level tf.function call: trace when due."""
        if not self.trace_every or not self.trained():
            return
        step = self.steps()
        if step // self.trace_every > self.last_step // self.trace_every:
            self.record(step)

    def record(self, step: int, sync: bool = False, initial: bool = False) -> None:
        started = time.perf_counter()
        loss = None
        if initial:  # before any step: the initial weights, no loss yet
            pass
        elif isinstance(self.loss, float):
            loss = self.loss
        elif self.loss is not None:
            try:
                loss = float(_value(self.loss))
            except (TypeError, ValueError):
                loss = None
        trace.append(self.run_dir, trace.point(step, self.epochs or None, loss, self.named_arrays()), sync)
        self.last_step = step
        self.seconds += time.perf_counter() - started

    def record_initial(self) -> None:
        """Step 0, before the first optimizer step of a custom loop: the initial weights."""
        if self.trace_every and self.last_step < 0 and self.steps() == 0:
            self.record(0, initial=True)

    def finish(self) -> None:
        """At the job's end: the last step, so the trace ends at the final weights."""
        if self.trace_every and self.trained() and self.steps() > self.last_step:
            self.record(self.steps(), sync=True)

    def summary(self) -> dict:
        return {
            "models": [m.name for m in self.models],
            "variables": len(self.variables),
            "fits": self.fits,
            "epochs": self.epochs,
            "optimizer_steps": self.steps() if self.trained() else 0,
            "session_variables": len(self.graph_variables) if self.session is not None else 0,
            **({"steps_restored": self.steps_restored} if self.steps_restored is not None else {}),
            **({"resume_not_bitwise": self.not_bitwise} if self.not_bitwise else {}),
        }


def _value(v) -> np.ndarray:
    """A variable's current value as NumPy, also while a tf.function is being traced."""
    import tensorflow as tf

    with tf.init_scope():
        return np.asarray(v.numpy())


# ---------------------------------------------------------------- the wrappers
def install(
    run_dir: Path,
    trace_every: int,
    log_epoch,
    checkpoint: dict | None = None,
    resume: dict | None = None,
    on_checkpoint=None,
) -> Observer:
    """Wrap Keras' and TensorFlow's training entry points; returns the observer. With
    ``checkpoint`` ({"every", "keep"}), every fit's epochs are checkpointed
    (``launcher.job.training.fitstate``); with ``resume`` (job.json's), the checkpointed fit continues."""
    global _observer
    import keras
    import tensorflow as tf
    from tensorflow.python.eager.polymorphic_function import polymorphic_function

    _observer = obs = Observer(run_dir, trace_every, log_epoch, checkpoint, resume, on_checkpoint)
    _wrap_model_new(keras.Model, obs)
    _wrap_fit(keras, keras.Model, obs)
    fitstate.count_iterators(tf.data.Dataset)
    jobstate.observe_variables()
    from keras.src.backend.tensorflow.trainer import TFEpochIterator

    fitstate.observe_epoch_iterators(TFEpochIterator)
    _wrap_compile(keras, obs)
    _wrap_keras_apply(keras, tf, obs)
    _wrap_v1_apply(tf, obs)
    _wrap_function_call(polymorphic_function.Function, tf, obs)
    _wrap_gradient(tf, obs)
    _wrap_assignments(keras, obs)
    tf1.observe_sessions(obs)
    legacy.when_imported(lambda tf_keras: _install_tf_keras(tf_keras, tf, obs))
    return obs


def _install_tf_keras(tf_keras, tf, obs: Observer) -> None:
    """The same observation of tf_keras' models, fits and optimizers, once the job imported it (never
    imported here: a job that does not use it does not load it)."""
    model = legacy.model_class(tf_keras)
    _wrap_model_new(model, obs)
    _wrap_fit(tf_keras, model, obs)
    handler = legacy.data_handler_class(tf_keras)
    fitstate.observe_epoch_iterators(handler)
    legacy.observe_data_handlers(handler)
    for cls in legacy.optimizer_classes(tf_keras):
        _wrap_apply_gradients(cls, tf, obs)


def _wrap_model_new(model_class, obs: Observer) -> None:
    original = model_class.__new__

    def __new__(cls, *args, **kwargs):
        model = original(cls, *args, **kwargs)
        try:
            obs.created.append(weakref.ref(model))
        except TypeError:
            pass
        return model

    model_class.__new__ = staticmethod(__new__)


def _wrap_fit(keras, model_class, obs: Observer) -> None:
    """Wrap ``model_class.fit`` (Keras 3's ``keras.Model``, or tf_keras'), adding callbacks of
    ``keras`` (the module: Keras 3 or tf_keras)."""
    original = model_class.fit
    signature = inspect.signature(original)
    flavour = keras.__name__.split(".", 1)[0]

    @functools.wraps(original)
    def fit(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        own = list(bound.arguments.get("callbacks") or [])
        callbacks = [*own, _epoch_logger(keras, obs)]
        recorder_class = trace.recorder_class(flavour)
        if obs.trace_every and not any(isinstance(c, recorder_class) for c in callbacks):
            callbacks.append(recorder_class(layout.RunPaths(obs.run_dir).trace, obs.trace_every))
        obs.fits += 1
        checkpoints = None
        if obs.checkpoint:
            checkpoints, (first, saver) = _fit_checkpoints(keras, obs, self, bound, own)
            callbacks = [first, *callbacks]
            callbacks.append(saver)  # after every callback has updated its state, the metrics logged
        callbacks.append(interrupts.keras_callback(keras))
        bound.arguments["callbacks"] = callbacks
        obs.note_model(self)
        obs.in_fit += 1
        try:
            with interrupts.deferred():  # a Ctrl-C stops the job between two batches
                history = original(*bound.args, **bound.kwargs)
            if checkpoints is not None:  # ended normally: a later fit's checkpoints name its last one
                obs.finished.append(checkpoints.ending())
            return history
        finally:
            obs.in_fit -= 1
            existing = trace.read(obs.run_dir)
            obs.last_step = existing[-1]["step"] if existing else obs.last_step

    model_class.fit = fit


def _fit_checkpoints(keras, obs: Observer, model, bound, own: list):
    """This fit's ``FitCheckpoints`` and its (restorer, saver) callbacks. When it is the fit a resume
    continues, it starts at the checkpointed epoch (``initial_epoch``) and the metrics' numbering
    continues; when it is an earlier fit of the job, it is fast-forwarded to its end from its last
    epoch's checkpoint."""
    args = bound.arguments
    validation = args.get("validation_data")
    if isinstance(validation, tuple) and len(validation) == 1:
        validation = validation[0]
    fit = {
        "fit": obs.fits,
        "input": fitstate.input_kind(args.get("x")),
        "epochs": int(args.get("epochs", 1)),
        "initial_epoch": int(args.get("initial_epoch") or 0),
        "steps_per_epoch": args.get("steps_per_epoch"),
        "before": list(obs.finished),
        "built": bool(model.variables),
        "validation": fitstate.input_kind(validation) if validation is not None else None,
    }
    if legacy.is_tf_keras(model):  # its data is read again on resume (legacy.replay_epochs)
        fit["keras"] = legacy.NAME
    if fit["input"] == "arrays":  # the order Keras shuffles arrays in comes from TensorFlow's global seed
        fit["tf_seed"] = _tf_global_seed()
    yielded = None
    if fit["input"] == "generator":  # the same generator, its batches digested: a fast-forward checks them
        yielded = []
        args["x"] = fitstate.digesting(args["x"], yielded)
    data = tuple(d if fitstate.input_kind(d) == "tf.data" else None for d in (args.get("x"), validation))
    checkpoints = fitstate.FitCheckpoints(
        obs.run_dir,
        model,
        int(obs.checkpoint["keep"]),
        int(obs.checkpoint["every"]),
        own,
        fit,
        lambda: obs.epochs,
        data,
        obs.on_checkpoint,
        yielded,
    )
    obs.checkpoint_seconds = checkpoints.seconds  # the cost, in result.json (the last fit's)
    resume_from = None
    if obs.resume and int(obs.resume.get("fit") or 0) == obs.fits:
        resume_from = obs.resume_dir / obs.resume["checkpoint"]
        args["initial_epoch"] = int(obs.resume["fit_epoch"])
        if obs.resume.get("stop_training"):  # EarlyStopping had ended this fit: no epoch is left
            args["initial_epoch"] = max(args["initial_epoch"], int(args.get("epochs", 1)))
        obs.epochs = int(obs.resume["epoch"])
        obs.history = _logged_metrics(obs.run_dir, obs.epochs)  # the final metrics, if no epoch is left
        obs.resume = None
        print(
            f"[launch] resumed from {_shown_checkpoint(obs, resume_from)}: fit {fit['fit']} continues after "
            f"its epoch {args['initial_epoch']}",
            flush=True,
        )
        checkpoints.before_first_step = lambda: _resumed_step(obs, model)
        checkpoints.after_first_step = lambda: _probe_next_call(None)  # a step of no tf.function (run_eagerly)
    elif obs.resume and obs.fits < int(obs.resume.get("fit") or 0):
        resume_from = _fast_forward(obs, args)
    return checkpoints, checkpoints.keras_callbacks(keras, resume_from)


def _fast_forward(obs: Observer, args: dict) -> Path:
    """An earlier fit of the job than the one a resume continues: it runs no epoch
    (``initial_epoch`` = ``epochs``) and ends in its last epoch's state, restored from the
    checkpoint the resumed checkpoint names for it (``fitstate.FitCheckpoints.finish_restored``)."""
    from launcher.errors import ResumeError
    from launcher.record import checkpoints

    extra, _ = checkpoints.read_extra(obs.resume_dir / obs.resume["checkpoint"])
    ended = [e for e in (extra or {}).get("before") or [] if e.get("fit") == obs.fits and e.get("checkpoint")]
    if not ended:
        raise ResumeError(
            f"fit {obs.fits} of the job has no checkpoint of its end in the resumed checkpoint's "
            "record: it cannot be fast-forwarded"
        )
    path = layout.RunPaths(obs.resume_dir).checkpoints / ended[0]["checkpoint"]
    args["initial_epoch"] = max(int(args.get("initial_epoch") or 0), int(args.get("epochs", 1)))
    obs.epochs = int(path.name.split("-")[1])
    obs.history = _logged_metrics(obs.run_dir, obs.epochs)
    print(f"[launch] fit {obs.fits} fast-forwarded to its end from {_shown_checkpoint(obs, path)}", flush=True)
    return path


def _shown_checkpoint(obs: Observer, path: Path) -> str:
    """A checkpoint as said: relative to the run (``checkpoints/epoch-000002``), and, where another
    worker restores the chief's, ``the chief's checkpoints/epoch-000002``."""
    shown = path.relative_to(obs.resume_dir).as_posix()
    return shown if obs.resume_dir == Path(os.path.normpath(obs.run_dir)) else f"the chief's {shown}"


def _tf_global_seed() -> int | None:
    """TensorFlow's global seed now (``tf.random.set_seed``'s), or None."""
    from tensorflow.python.eager import context

    return context.global_seed()


def _logged_metrics(run_dir: Path, epoch: int) -> dict[str, float]:
    """The metrics ``metrics.jsonl`` holds for ``epoch`` ({} when none)."""
    import json

    path = layout.RunPaths(run_dir).metrics
    lines = path.read_text().splitlines() if path.exists() else []
    for line in reversed(lines):
        values = json.loads(line)
        if values.pop("epoch", None) == epoch:
            return values
    return {}


def _wrap_compile(keras, obs: Observer) -> None:
    """Remember the ``jit_compile`` a model asked for: Keras turns it off under op determinism
    with only a warning, and the record should say what was asked and what ran.

    The wrapper replaces ``compile`` on the class that defines it (Keras' ``Trainer``), not on
    ``Model``: ``load_model`` compiles a loaded model only when ``cls.compile`` is
    ``Trainer.compile``, and takes anything else for the user's own override."""
    owner = next(c for c in keras.Model.__mro__ if "compile" in vars(c))
    original = owner.compile

    @functools.wraps(original)
    def compile(self, *args, **kwargs):
        if "jit_compile" in kwargs:
            obs.jit_requested[self.name] = kwargs["jit_compile"]
        return original(self, *args, **kwargs)

    owner.compile = compile


def jit_compile_in_effect(obs: Observer) -> dict | None:
    """{model: {"requested", "in_effect"}} for models whose compile asked for XLA; None when none did."""
    out = {}
    for model in obs.models:
        asked = obs.jit_requested.get(model.name)
        if asked not in (None, "auto"):
            out[model.name] = {"requested": asked, "in_effect": bool(getattr(model, "jit_compile", False))}
    return out or None


def _epoch_logger(keras, obs: Observer):
    class EpochLogger(keras.callbacks.Callback):
        """Appends each epoch's logs to metrics.jsonl, numbered across all fits of the job."""

        def on_epoch_end(self, epoch: int, logs=None) -> None:
            obs.epochs += 1
            values = {}
            for k, v in (logs or {}).items():
                try:
                    values[k] = float(v)
                except (TypeError, ValueError):
                    continue
            obs.history = values
            obs.log_epoch(obs.epochs, values)

    return EpochLogger()


def _before_step(obs: Observer, optimizer, variables: list) -> None:
    """An optimizer about to apply gradients to ``variables``: note both, and outside ``fit`` the
    weights before the first step (the trace's step 0)."""
    obs.note_optimizer(optimizer)
    obs.note_variables(variables)
    if not obs.in_fit:
        try:
            obs.record_initial()
        except Exception:  # reading weights mid-trace failed: no step-0 point
            pass


def _wrap_keras_apply(keras, tf, obs: Observer) -> None:
    base = keras.optimizers.Optimizer.__mro__
    cls = next(c for c in base if "apply" in c.__dict__ and c.__name__ == "BaseOptimizer")
    original = cls.apply

    @functools.wraps(original)
    def apply(self, grads, trainable_variables=None):
        variables = list(trainable_variables) if trainable_variables is not None else None
        if variables is not None:
            _before_step(obs, self, variables)
        with interrupts.deferred():  # a Ctrl-C stops the job after this step, never inside it
            result = original(self, grads, variables if variables is not None else trainable_variables)
        if variables is None:  # a built optimizer applying to its own variables
            obs.note_optimizer(self)
            obs.note_variables(list(self._trainable_variables))
        if tf.executing_eagerly() and not obs.in_fit:
            obs.after_step()
        return result

    cls.apply = apply


def _wrap_v1_apply(tf, obs: Observer) -> None:
    cls = tf.compat.v1.train.Optimizer
    original = cls.apply_gradients

    @functools.wraps(original)
    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        pairs = list(grads_and_vars)
        eager = tf.executing_eagerly()
        if eager:
            obs.note_variables([v for _, v in pairs if v is not None])
            if obs.v1_steps == 0:
                obs.record_initial()
        with interrupts.deferred():
            result = original(self, pairs, *args, **kwargs)
        if eager:
            obs.v1_steps += 1
            obs.after_step()
        else:  # a TF1 graph: the train op runs in a session (launcher.job.training.tf1)
            obs.note_train_op(result, [v for _, v in pairs if v is not None])
        return result

    cls.apply_gradients = apply_gradients


def _wrap_apply_gradients(cls, tf, obs: Observer) -> None:
    """A tf_keras optimizer's ``apply_gradients`` (its own and ``OptimizerV2``'s, in ``fit`` and in a
    custom loop): note the optimizer and the variables it trains, and in eager code count the step."""
    original = cls.__dict__.get("apply_gradients")
    if original is None or getattr(original, "_launch_observed", False):
        return

    @functools.wraps(original)
    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        pairs = list(grads_and_vars)
        _before_step(obs, self, [v for _, v in pairs if v is not None])
        with interrupts.deferred():  # a Ctrl-C stops the job after this step, never inside it
            result = original(self, pairs, *args, **kwargs)
        if tf.executing_eagerly() and not obs.in_fit:
            obs.after_step()
        return result

    apply_gradients._launch_observed = True  # type: ignore[attr-defined]
    cls.apply_gradients = apply_gradients


_probe = None  # (observer) whose next top-level tf.function call is a resumed fit's first step


def _resumed_step(obs: Observer, model) -> None:
    """As a resumed fit's first step begins, its state restored: the optimizer steps the checkpoint
    brought (``steps_restored``: of ``optimizer_steps``, the steps an earlier process ran), then the
    probe of its train function."""
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and getattr(optimizer, "iterations", None) is not None:
        obs.steps_restored = int(_value(optimizer.iterations))
    _probe_next_call(obs)


def _probe_next_call(obs: Observer | None) -> None:
    global _probe
    _probe = obs


def _check_resumed_step(function, args: tuple, kwargs: dict, obs: Observer) -> None:
    """A resumed fit's train function, traced now (the call that follows reuses the trace) and searched
    for random ops whose state no checkpoint keeps (``seeding.stateful_random_ops``): said before the
    step runs, and kept in the result (``resume_not_bitwise``)."""
    from launcher.job.observe import seeding

    try:
        found = seeding.stateful_random_ops(function.get_concrete_function(*args, **kwargs).graph)
    except Exception:  # noqa: BLE001 - a function we cannot trace apart: its own call says what is wrong
        return
    if found:
        obs.not_bitwise = found
        print(seeding.not_bitwise_note(found), flush=True)


def _wrap_function_call(function_class, tf, obs: Observer) -> None:
    original = function_class.__call__

    @functools.wraps(original)
    def __call__(self, *args, **kwargs):
        global _probe
        if _probe is not None:  # the resumed fit's first step: before it runs
            probed, _probe = _probe, None
            _check_resumed_step(self, args, kwargs, probed)
        with interrupts.deferred():  # a training step: a Ctrl-C stops the job after it
            result = original(self, *args, **kwargs)
        if obs.optimizers and not obs.in_fit and tf.executing_eagerly():
            if (
                getattr(result, "shape", None) == ()
                and getattr(result, "dtype", None) is not None
                and result.dtype.is_floating
            ):
                obs.loss = result
            obs.after_step()
        return result

    function_class.__call__ = __call__


def _wrap_gradient(tf, obs: Observer) -> None:
    original = tf.GradientTape.gradient

    @functools.wraps(original)
    def gradient(self, target, *args, **kwargs):
        if tf.executing_eagerly() and getattr(target, "shape", None) == ():
            obs.loss = target
        return original(self, target, *args, **kwargs)

    tf.GradientTape.gradient = gradient


_AUTOGRAPH_CALL = os.path.join("autograph", "impl", "api.py")


def _library_code() -> tuple[str, ...]:
    """Where code that is not the job's own lives (prefixes of file names): the Python
    installation, its site-packages (TensorFlow, Keras) and the launcher, as
    ``launcher.record.probe.usage`` classifies modules."""
    r = places.roots()
    return ("<frozen", *sorted({root.rstrip("/") + "/" for root in (*r.site, *r.python, r.launcher)}))


_assignments_to = None  # the observer that hears of the job's own assignments


def _wrap_assignments(keras, obs) -> None:
    global _assignments_to
    from tensorflow.python.ops import variables

    _assignments_to = obs  # the methods are wrapped once per process; the latest observer hears
    library = _library_code()
    # Every variable class that defines its own assignments: ResourceVariable, the
    # distribution strategies' mirrored variables, Keras' variable.
    classes, pending = [], [variables.Variable, *keras.Variable.__mro__]
    while pending:
        cls = pending.pop()
        if cls not in classes and cls is not object:
            classes.append(cls)
            pending += cls.__subclasses__() if issubclass(cls, variables.Variable) else []
    for cls in classes:
        for name in ("assign", "assign_add", "assign_sub"):
            original = cls.__dict__.get(name)
            if original is None or getattr(original, "_launch_observed", False):
                continue

            def assigned(self, *args, _original=original, **kwargs):
                # The caller's file: the job's own code, or a library (an optimizer, a metric)?
                # In a tf.function, AutoGraph's converted_call stands between them.
                caller = sys._getframe(1)
                while caller.f_back is not None and caller.f_code.co_filename.endswith(_AUTOGRAPH_CALL):
                    caller = caller.f_back
                if _assignments_to is not None and not caller.f_code.co_filename.startswith(library):
                    try:
                        _assignments_to.note_variables([self])
                    except Exception:  # noting must never break the job's own assignment
                        pass
                return _original(self, *args, **kwargs)

            assigned._launch_observed = True  # type: ignore[attr-defined]
            functools.update_wrapper(assigned, original)
            setattr(cls, name, assigned)


def current() -> Observer | None:
    """The job's observer, if one is installed (for launcher.userapi)."""
    return _observer
