"""What a resume's fast-forward costs (issue 42): reading an input again to where the interrupted fit was,
with no training step, against training on it.

For each input whose position no variable holds — a Python generator (``steps_per_epoch``), a
``keras.utils.PyDataset``, a ``tf.data`` pipeline read with ``steps_per_epoch``, and a ``tf.data``
pipeline with ``cache()`` — on the packaged 2,000-image sample, with the mnist task's CNN:

- train: the median seconds of a trained epoch (``fit``, epochs 2..E: the first traces the step);
- fast-forward: the median seconds per epoch of ``fitstate._read_epochs``, what ``launch resume`` runs,
  through Keras' own epoch iterator of a fresh fit's input;

and their ratio side by side, each pair interleaved ``REPEATS`` times in one process (strict mode's
settings: op determinism, one intra-op thread). The fast-forward's whole cost at resume is this
ratio times the epochs it reads again; the resume prints the seconds it took.

    python benchmarks/bench_fastforward.py [EPOCHS] [REPEATS]
"""

from __future__ import annotations

import statistics
import sys
import time

from common import REPO

sys.path.insert(0, str(REPO))

EPOCHS = int(sys.argv[1]) if len(sys.argv) > 1 else 4
REPEATS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
SAMPLE = REPO / "launcher" / "data" / "mnist-sample.npz"
BATCH = 32


def main() -> None:
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.experimental.enable_op_determinism()
    import keras
    from keras.src.backend.tensorflow.trainer import TFEpochIterator

    from launcher.job.training import fitstate

    keras.utils.set_random_seed(0)
    with np.load(SAMPLE) as f:
        x, y = (f["x_train"] / 255.0).astype("float32")[..., None], f["y_train"].astype("int32")
    steps = len(x) // BATCH

    def generator():
        rng = np.random.default_rng(0)
        while True:
            order = rng.permutation(len(x))
            for i in range(steps):
                idx = order[i * BATCH : (i + 1) * BATCH]
                yield x[idx], y[idx]

    class Batches(keras.utils.PyDataset):
        def __init__(self):
            super().__init__()
            self.order = np.arange(len(x))
            self.rng = np.random.default_rng(0)

        def __len__(self):
            return steps

        def __getitem__(self, i):
            idx = self.order[i * BATCH : (i + 1) * BATCH]
            return x[idx], y[idx]

        def on_epoch_end(self):
            self.order = self.rng.permutation(len(x))

    def pipeline(cache: bool):
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        ds = ds.cache() if cache else ds
        return ds.shuffle(len(x), reshuffle_each_iteration=True).batch(BATCH)

    inputs = {  # name -> (a fresh input, fit's steps_per_epoch)
        "Python generator": (generator, steps),
        "PyDataset": (Batches, None),
        "tf.data, steps_per_epoch": (lambda: pipeline(False).repeat(), steps),
        "tf.data with cache()": (lambda: pipeline(True), None),
    }

    def model():
        m = keras.Sequential(
            [
                keras.Input(shape=(28, 28, 1)),
                keras.layers.Conv2D(16, 3, activation="relu"),
                keras.layers.MaxPooling2D(),
                keras.layers.Conv2D(32, 3, activation="relu"),
                keras.layers.MaxPooling2D(),
                keras.layers.Flatten(),
                keras.layers.Dropout(0.25),
                keras.layers.Dense(10),
            ]
        )
        m.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return m

    class EpochTimes(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.seconds: list[float] = []

        def on_epoch_begin(self, epoch, logs=None):
            self.started = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.seconds.append(time.perf_counter() - self.started)

    rows = []
    for name, (make, steps_per_epoch) in inputs.items():
        trained, forwarded = [], []
        for _ in range(REPEATS):
            times = EpochTimes()
            model().fit(make(), steps_per_epoch=steps_per_epoch, epochs=EPOCHS, verbose=0, callbacks=[times])
            trained += times.seconds[1:]
            iterator = TFEpochIterator(
                x=make(),
                steps_per_epoch=steps_per_epoch,
                batch_size=None,
                distribute_strategy=tf.distribute.get_strategy(),
            )
            started = time.perf_counter()
            fitstate._read_epochs(iterator, EPOCHS, 1)
            forwarded.append((time.perf_counter() - started) / EPOCHS)
        train, forward = statistics.median(trained), statistics.median(forwarded)
        rows.append((name, train, forward, forward / train))
    print(f"{EPOCHS} epochs of {len(x)} images (batch {BATCH}), {REPEATS} repeats, medians:")
    print(f"{'input':28} {'trained epoch s':>16} {'fast-forward epoch s':>21} {'ratio':>7}")
    for name, train, forward, ratio in rows:
        print(f"{name:28} {train:16.3f} {forward:21.3f} {ratio:7.2f}")


if __name__ == "__main__":
    main()
