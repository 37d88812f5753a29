"""Epoch checkpoints that resume bit for bit, written atomically, verified on restore.

A checkpoint is a directory ``checkpoints/epoch-NNNNNN`` holding a TensorFlow
checkpoint of every model variable (Keras' ``tf.train.Checkpoint(model=...)`` misses
the dropout seed-generator states; measured), every optimizer variable (Adam's
moments and step counter) and TensorFlow's global ``tf.random.Generator``, plus the
Python and NumPy global RNG states, and ``checkpoint.json`` listing the sha256 of
each file. It is written under a temporary name and renamed into place, so a
checkpoint directory exists whole or not at all; a file damaged afterwards (a torn
write on a lost node) is caught by its hash and the previous checkpoint is used.

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
from launcher.record import hashing, layout, trace
from launcher.record.checkpoints import ARRAYS, EXTRA, MANIFEST, PREFIX, is_fit_end, name
from launcher.record.store import runs


class Checkpointer:
    """Saves and restores a compiled Keras model's complete training state. Job process only."""

    def __init__(self, run_dir: Path, model, keep: int) -> None:
        import tensorflow as tf

        self.run_dir = run_dir
        self.root = layout.RunPaths(run_dir).checkpoints
        self.keep = keep
        self.model = model
        model.optimizer.build(model.trainable_variables)  # create the moments now, to restore into
        variables = {f"model_{i}": v.value for i, v in enumerate(model.variables)}
        variables.update({f"optimizer_{i}": v.value for i, v in enumerate(model.optimizer.variables)})
        self.checkpoint = tf.train.Checkpoint(variables=variables, generator=tf.random.get_global_generator())

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
                    "variables": [v.path for v in self.model.variables],
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

        self.checkpoint.read(str(path / PREFIX)).assert_consumed()
        rng = json.loads((path / "rng.json").read_text())
        if rngs:
            random.setstate(_python_state(rng["python"]))
            kind, keys, pos, has_gauss, cached = rng["numpy"]
            np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
        _restore_more_rngs(rng)
        return json.loads((path / MANIFEST).read_text())["epoch"]

    def _prune(self) -> None:
        """Keep the newest ``keep`` checkpoints, and the last epoch's of every fit: a resume from a
        later fit fast-forwards the earlier ones from them."""
        complete = sorted(self.root.glob("epoch-*"))
        for old in complete[: max(0, len(complete) - self.keep)]:
            if not is_fit_end(old):
                shutil.rmtree(old, ignore_errors=True)


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
