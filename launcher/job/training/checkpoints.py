"""Epoch checkpoints that resume bit for bit, written atomically, verified on restore.

A checkpoint is a directory ``checkpoints/epoch-NNNNNN`` holding a TensorFlow
checkpoint of every model variable (Keras' ``tf.train.Checkpoint(model=...)`` misses
the dropout seed-generator states; measured), every optimizer variable (Adam's
moments and step counter) and TensorFlow's global ``tf.random.Generator``, plus the
Python and NumPy global RNG states, and ``checkpoint.json`` listing the sha256 of
each file. Variables are kept by name (``named_variables``: the model's paths, the optimizer's
names, a ``LossScaleOptimizer``'s inner optimizer under ``inner_optimizer``), never by position:
the order an optimizer's variables are made in differs between a process that trained and one
that resumes. ``checkpoint.json`` records each name's dtype and shape, and a restore that does
not match names the variable (``ResumeError``: the resume leaves the run interrupted). It is
written under a temporary name and renamed into place, so a checkpoint directory exists whole
or not at all; a file damaged afterwards (a torn write on a lost node) is caught by its hash
and the previous checkpoint is used.

The example order needs no state: each epoch's order is a pure function of
(seed, epoch) (``tasks.mnist.epoch_order``). Pruning keeps the newest ``keep`` and, for an
observed fit, the last epoch of every fit (``is_fit_end``): a resume from a later fit needs
them. The layout, the verification and the reading are ``launcher.record.checkpoints``.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

from launcher.errors import StoreError
from launcher.job.training import legacy
from launcher.record import hashing, layout, trace
from launcher.record.checkpoints import ARRAYS, EXTRA, MANIFEST, PREFIX, is_fit_end, name
from launcher.record.store import runs


class Checkpointer:
    """Saves and restores a compiled Keras model's complete training state. Job process only."""

    def __init__(self, run_dir: Path, model, keep: int = 2) -> None:
        import tensorflow as tf

        self.run_dir = run_dir
        self.root = layout.RunPaths(run_dir).checkpoints
        self.keep = keep
        self.model = model
        if not legacy.optimizer_built(model.optimizer):  # create the moments now, to restore into; never
            if legacy.is_tf_keras(model):  # twice (a LossScaleOptimizer would add a second loss scale)
                legacy.build_optimizer(model)  # named as its first step names them
            else:
                model.optimizer.build(model.trainable_variables)
        self.named = named_variables(model)
        self.checkpoint = tf.train.Checkpoint(
            variables={key: _tf_variable(v) for key, v in self.named.items()},
            generator=tf.random.get_global_generator(),
        )

    def save(self, epoch: int, extra: dict | None = None, arrays: dict | None = None) -> Path:
        """Write checkpoint ``epoch`` atomically; ``extra`` (JSON) and ``arrays`` (NumPy) are kept
        beside the variables, under the same hashes (``read_extra``)."""
        import io

        import numpy as np

        self.root.mkdir(exist_ok=True)
        final = self.root / name(epoch)
        tmp = self.root / f".tmp-{name(epoch)}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            self.checkpoint.write(str(tmp / PREFIX))
            rng = {"python": _jsonable(random.getstate()), "numpy": _jsonable(np.random.get_state()), **_more_rngs()}
            runs.write_json(tmp / "rng.json", rng)
            if extra is not None:
                runs.write_json(tmp / EXTRA, extra)
            if arrays:
                buffer = io.BytesIO()
                np.savez(buffer, **arrays)
                runs.write_bytes(tmp / ARRAYS, buffer.getvalue())
            files = {p.name: hashing.file_sha256(p) for p in sorted(tmp.iterdir())}
            # The trace's points so far: a resume keeps exactly these, and none written after this
            # checkpoint (a stopped script's last point, labelled with the epoch it had finished).
            runs.write_json(
                tmp / MANIFEST,
                {
                    "epoch": epoch,
                    "files": files,
                    "trace_points": trace.count(self.run_dir),
                    "variables": [_path(v) for v in self.model.variables],
                    "state": {key: _described(v) for key, v in self.named.items()},  # restored by these names
                },
            )
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)  # a full disk gets its space back
            if isinstance(exc, Exception) and "No space left on device" in str(exc):
                raise StoreError(
                    f"checkpoint {name(epoch)} could not be written: no space left on the device of {self.root}"
                ) from None
            raise
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        self._prune()
        return final

    def restore(self, path: Path, rngs: bool = True) -> int:
        """Load the checkpoint at ``path``; returns its epoch (the next epoch to train is epoch + 1).
        With ``rngs`` false, Python's and NumPy's global generators are left where they are (a
        fast-forward of the input put them where they were)."""
        import numpy as np

        manifest = json.loads((path / MANIFEST).read_text())
        kept = manifest.get("state")
        if kept is not None:  # by name: the model's paths, the optimizer's own names (nested ones by attribute)
            if (mismatch := first_mismatch(kept, {key: _described(v) for key, v in self.named.items()})) is not None:
                raise _mismatch_error(path, mismatch)
            checkpoint = self.checkpoint
        else:  # a checkpoint of a launcher before the names: by position, as it was written
            checkpoint = self._positional()
        try:
            checkpoint.read(str(path / PREFIX)).assert_consumed()
        except (AssertionError, ValueError) as exc:  # what the names could not tell (TensorFlow's own check)
            raise _mismatch_error(path, str(exc).splitlines()[0]) from None
        except Exception as exc:
            if type(exc).__name__ not in ("InvalidArgumentError", "NotFoundError"):
                raise
            raise _mismatch_error(path, str(exc).splitlines()[-1].split("] ")[-1]) from None
        rng = json.loads((path / "rng.json").read_text())
        if rngs:
            random.setstate(_python_state(rng["python"]))
            kind, keys, pos, has_gauss, cached = rng["numpy"]
            np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
        _restore_more_rngs(rng)
        return manifest["epoch"]

    def _positional(self):
        """The checkpoint as launchers before the names wrote it: the model's and the optimizer's
        variables by their place in ``model.variables`` and ``optimizer.variables``."""
        import tensorflow as tf

        variables = {f"model_{i}": _tf_variable(v) for i, v in enumerate(self.model.variables)}
        optimizer = legacy.optimizer_variables(self.model.optimizer)
        variables.update({f"optimizer_{i}": _tf_variable(v) for i, v in enumerate(optimizer)})
        return tf.train.Checkpoint(variables=variables, generator=tf.random.get_global_generator())

    def _prune(self) -> None:
        """Keep the newest ``keep`` checkpoints, and the last epoch's of every fit: a resume from a
        later fit fast-forwards the earlier ones from them."""
        complete = sorted(self.root.glob("epoch-*"))
        for old in complete[: max(0, len(complete) - self.keep)]:
            if not is_fit_end(old):
                shutil.rmtree(old, ignore_errors=True)


def named_variables(model) -> dict:
    """Every variable a checkpoint keeps, by a name that does not depend on the order the variables
    were made in: ``model/<path>`` for the model's, ``optimizer/<name>`` for the optimizer's own
    (``iteration``, ``learning_rate``, ``dense_kernel_velocity``: Keras names a slot after its model
    variable's path), and a wrapped optimizer's under its attribute
    (``optimizer/inner_optimizer/<name>`` in a ``LossScaleOptimizer``), as Keras' own saving walks
    them. A name met twice gets ``#2``, ``#3``... in order. A tf_keras model's variables have no path:
    its names (``model/dense/kernel:0``, ``optimizer/SGD/m/dense/kernel:0``) stand for it."""
    named: dict = {}

    def add(key: str, variable) -> None:
        n, unique = 1, key
        while unique in named:
            n += 1
            unique = f"{key}#{n}"
        named[unique] = variable

    for v in model.variables:
        add(f"model/{_path(v)}", v)
    pending = [("optimizer", model.optimizer)]
    while pending:
        prefix, optimizer = pending.pop(0)
        inner = [(a, o) for a, o in sorted(vars(optimizer).items()) if _is_optimizer(o) and o is not optimizer]
        nested = {id(v) for _, o in inner for v in o.variables}
        for v in legacy.optimizer_variables(optimizer):
            if id(v) not in nested:
                add(f"{prefix}/{getattr(v, 'name', None) or v.path}", v)
        pending += [(f"{prefix}/{attribute}", o) for attribute, o in inner]
    return named


def _path(variable) -> str:
    """A model variable's path (Keras 3), or its name (tf_keras' ``tf.Variable``: no path)."""
    return getattr(variable, "path", None) or variable.name


def _tf_variable(variable):
    """The TensorFlow variable a checkpoint writes: a Keras 3 variable's ``value``, a ``tf.Variable``
    (tf_keras') itself (its ``value`` is a method)."""
    value = getattr(variable, "value", None)
    return variable if value is None or callable(value) else value


def _is_optimizer(value: object) -> bool:
    return any(c.__name__ == "BaseOptimizer" for c in type(value).__mro__) and hasattr(value, "variables")


def _described(variable) -> list:
    """[dtype, shape] of a variable, as a checkpoint's record keeps it."""
    return [str(getattr(variable.dtype, "name", variable.dtype)), [int(d) for d in variable.shape]]


def first_mismatch(kept: dict, now: dict) -> str | None:
    """The first variable (by name) the checkpoint (``kept``: name -> [dtype, shape]) and the resumed
    job (``now``) disagree on, said in words; None when they match (pure)."""
    for key in sorted(set(kept) | set(now)):
        if key not in now:
            return f"{key} ({_shown(kept[key])}) is in the checkpoint and not in the resumed job"
        if key not in kept:
            return f"{key} ({_shown(now[key])}) is in the resumed job and not in the checkpoint"
        if list(kept[key]) != list(now[key]):
            return f"{key} is {_shown(kept[key])} in the checkpoint and {_shown(now[key])} in the resumed job"
    return None


def _shown(described) -> str:
    dtype, shape = described
    return f"{dtype} {list(shape)}"


def _mismatch_error(path: Path, what: str):
    from launcher.errors import ResumeError

    return ResumeError(f"checkpoint {path.name} does not match the resumed job's variables: {what}")


def _op_seeds():
    """TensorFlow's eager source of op seeds (``random.Random``; None without a global seed): a
    ``tf.random.*`` op or ``Dataset.shuffle`` made without a seed draws its seed from it."""
    from tensorflow.python.eager import context

    return getattr(context.context(), "_rng", None)


def _keras_seeds():
    """Keras' global ``SeedGenerator`` (``keras.random.*`` without a seed draws from it), or None."""
    from keras.src.backend.common import global_state
    from keras.src.random import seed_generator

    return global_state.get_global_attribute(seed_generator.GLOBAL_SEED_GENERATOR)


def _more_rngs() -> dict:
    """The states of TensorFlow's op-seed source and Keras' global seed generator, when they exist:
    code between two fits may draw from them (a new layer, a new shuffled dataset)."""
    out: dict = {}
    if (ops := _op_seeds()) is not None:
        out["tf_op_seeds"] = _jsonable(ops.getstate())
    if (keras_seeds := _keras_seeds()) is not None:
        out["keras_seed_generator"] = _jsonable(keras_seeds.state.numpy())
    return out


def _restore_more_rngs(rng: dict) -> None:
    if "tf_op_seeds" in rng and (ops := _op_seeds()) is not None:
        ops.setstate(_python_state(rng["tf_op_seeds"]))
    if "keras_seed_generator" in rng and (keras_seeds := _keras_seeds()) is not None:
        keras_seeds.state.assign(rng["keras_seed_generator"])


def _jsonable(state):
    if isinstance(state, tuple):
        return [_jsonable(x) for x in state]
    if hasattr(state, "tolist"):
        return state.tolist()
    return state


def _python_state(state: list):
    version, internal, gauss = state
    return (version, tuple(internal), gauss)
