"""The ``mnist`` task: a small Keras CNN, trained epoch by epoch.

Each epoch's shuffle order is a pure function of (seed, epoch), never a stream
that advances with iteration, so an epoch reads the same batches whether the run
started at epoch 0 or resumed at epoch k. In seeded and strict modes the complete
training state is checkpointed every ``train.checkpoint_every`` epochs.
"""

from __future__ import annotations

import time

import numpy as np

from launcher.job import data as mnist_data
from launcher.job import interrupts
from launcher.job.tasks import TaskContext
from launcher.job.training import trace
from launcher.job.training.checkpoints import Checkpointer
from launcher.record.hashing import keras_weights, weights_digest
from launcher.record.store import snapshot

WEIGHTS_FILE = "weights.weights.h5"


def build_model(keras, learning_rate: float, jit_compile):
    """Conv-pool-conv-pool-dropout-dense: small enough to train in seconds on a CPU."""
    model = keras.Sequential(
        [
            keras.Input(shape=(28, 28, 1)),
            keras.layers.Conv2D(16, 3, activation="relu", name="conv1"),
            keras.layers.MaxPooling2D(name="pool1"),
            keras.layers.Conv2D(32, 3, activation="relu", name="conv2"),
            keras.layers.MaxPooling2D(name="pool2"),
            keras.layers.Flatten(name="flatten"),
            keras.layers.Dropout(0.25, name="dropout"),
            keras.layers.Dense(10, name="logits"),
        ],
        name="mnist_cnn",
    )
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        jit_compile="auto" if jit_compile is None else jit_compile,
    )
    return model


def _stop_after_one_epoch(keras):
    """A callback that ends ``fit`` after the epoch it started with."""

    class OneEpoch(keras.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs=None) -> None:
            self.model.stop_training = True

    return OneEpoch()


def epoch_order(seed: int, epoch: int, n: int) -> np.ndarray:
    """The example order of ``epoch``: a permutation that depends on nothing else."""
    return np.random.default_rng([seed, epoch]).permutation(n)


def make_dataset(tf, x, y, batch_size: int, deterministic: bool | None, parallel_calls: int | str = 1):
    """Batches of (uint8 images scaled to [0, 1] float32, labels).

    The scaling is a ``map`` over batches with ``parallel_calls`` workers (``autotune``
    lets tf.data choose); with ``deterministic`` false a parallel map may hand batches
    on out of order, which is what ``launch audit`` checks. Op determinism forces order.
    """
    calls = tf.data.AUTOTUNE if parallel_calls == "autotune" else int(parallel_calls)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)
    ds = ds.map(
        lambda images, labels: (tf.cast(images, tf.float32)[..., None] / 255.0, labels),
        num_parallel_calls=None if calls == 1 else calls,
    )
    if deterministic is None:  # tf.data's default (in order)
        return ds
    options = tf.data.Options()
    options.deterministic = deterministic
    return ds.with_options(options)


def run(ctx: TaskContext) -> dict:
    import keras
    import tensorflow as tf

    started = time.perf_counter()
    train = ctx.cfg.train
    mnist = mnist_data.load(snapshot.rooted(str(train.data), ctx.root))
    ctx.data_files.update(mnist.files)
    x_train, y_train = mnist.x_train, mnist.y_train
    if train.max_samples is not None:
        x_train, y_train = x_train[: train.max_samples], y_train[: train.max_samples]
    x_test, y_train, y_test = mnist.x_test, y_train.astype("int32"), mnist.y_test.astype("int32")
    print(f"[launch] data: {mnist.source}; training on {len(x_train)} images", flush=True)

    model = build_model(keras, float(train.learning_rate), ctx.plan.jit_compile)
    ctx.effective["jit_compile"] = bool(model.jit_compile)  # Keras turns XLA off under op determinism
    deterministic, calls = ctx.plan.deterministic_data, train.get("data_parallel_calls", 1)
    val = make_dataset(tf, x_test, y_test, train.batch_size, deterministic, calls)
    checkpointer = None
    if ctx.plan.level != "off" and train.checkpoint_every:
        checkpointer = Checkpointer(ctx.run_dir, model, int(train.checkpoint_keep))
    first_epoch = 0
    if ctx.resume:
        first_epoch = checkpointer.restore(ctx.run_dir / ctx.resume["checkpoint"])
        print(f"[launch] resumed from {ctx.resume['checkpoint']}: continuing after epoch {first_epoch}", flush=True)

    recorder = trace.keras_callback(ctx.run_dir, ctx.trace_every)
    one_epoch = _stop_after_one_epoch(keras)
    setup_s = time.perf_counter() - started
    epoch_times: list[float] = []
    trace_times: list[float] = []
    checkpoint_times: list[float] = []
    history: dict[str, float] = {}
    safe_points = interrupts.keras_callback(keras)
    for epoch in range(first_epoch, int(train.epochs)):
        with interrupts.deferred():  # a stop waits for the current batch, or the epoch's checkpoint, to end
            t0 = time.perf_counter()
            order = epoch_order(ctx.seed, epoch, len(x_train))
            ds = make_dataset(tf, x_train[order], y_train[order], train.batch_size, deterministic, calls)
            traced = getattr(recorder, "seconds", 0.0)
            fit = model.fit(
                ds,
                validation_data=val,
                epochs=int(train.epochs),  # so Keras' progress says "Epoch N/total"
                initial_epoch=epoch,
                verbose=1 if ctx.progress else 2,
                shuffle=False,  # the order comes from epoch_order(), not from Keras
                # one epoch per fit (its data is this epoch's order); a Ctrl-C stops it between batches
                callbacks=[recorder, one_epoch, safe_points],
            )
            trace_times.append(getattr(recorder, "seconds", 0.0) - traced)
            history = {k: float(v[-1]) for k, v in sorted(fit.history.items())}
            ctx.log_epoch(epoch + 1, history)
            trained = time.perf_counter()
            if checkpointer and (epoch + 1) % int(train.checkpoint_every) == 0:
                checkpointer.save(epoch + 1)
                checkpoint_times.append(time.perf_counter() - trained)
            epoch_times.append(time.perf_counter() - t0)

    model.save_weights(ctx.run_dir / WEIGHTS_FILE)
    total, per_layer = weights_digest(keras_weights(model))
    return {
        "final_metrics": history,
        "weights_sha256": total,
        "layer_sha256": per_layer,
        "weights_file": WEIGHTS_FILE,
        "timings": {
            "setup_s": setup_s,
            "epoch_s": epoch_times,
            "checkpoint_s": checkpoint_times,
            "trace_s": trace_times,
        },
    }
