"""Keras fits whose state a checkpoint's variables do not hold, written without the launcher in mind.
Args: DATA.npz EPOCHS OUT_DIR INPUT MODEL, where INPUT is

- ``generator``: an endless Python generator that shuffles each pass with a NumPy generator of its own
  (``steps_per_epoch``: Keras reads it on across epochs);
- ``pydataset``: a ``keras.utils.PyDataset`` whose ``on_epoch_end`` reshuffles with its own generator;

and MODEL is ``sequential`` (keras-io's reproducibility recipe: a Sequential without ``Input``, its
variables made in its first batch) or ``subclassed`` (a model whose layers are built in its first call).
It writes its history when it ends."""
import json
import os
import sys

import numpy as np
from tensorflow import keras

data, epochs, out, kind, model_kind = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
with np.load(data) as f:
    x, y = (f["x_train"][:300] / 255.0).astype("float32")[..., None], f["y_train"][:300]
BATCH = 50


def batches():
    rng = np.random.default_rng(7)
    while True:
        order = rng.permutation(len(x))
        for i in range(0, len(x), BATCH):
            yield x[order[i:i + BATCH]], y[order[i:i + BATCH]]


class Batches(keras.utils.PyDataset):
    def __init__(self):
        super().__init__()
        self.rng = np.random.default_rng(11)
        self.order = np.arange(len(x))

    def __len__(self):
        return len(x) // BATCH

    def __getitem__(self, i):
        idx = self.order[i * BATCH:(i + 1) * BATCH]
        return x[idx], y[idx]

    def on_epoch_end(self):
        self.order = self.rng.permutation(len(x))


class Net(keras.Model):
    def __init__(self):
        super().__init__()
        self.conv = keras.layers.Conv2D(4, 3, activation="relu")
        self.pool = keras.layers.MaxPooling2D()
        self.drop = keras.layers.Dropout(0.3)
        self.out = keras.layers.Dense(10)

    def call(self, inputs, training=False):
        h = keras.layers.Flatten()(self.pool(self.conv(inputs)))
        return self.out(self.drop(h, training=training))


if model_kind == "sequential":
    model = keras.Sequential([keras.layers.Conv2D(4, 3, activation="relu"), keras.layers.MaxPooling2D(),
                              keras.layers.Flatten(), keras.layers.Dropout(0.3), keras.layers.Dense(10)])
else:
    model = Net()
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
if kind == "generator":
    history = model.fit(batches(), steps_per_epoch=len(x) // BATCH, epochs=epochs, verbose=2)
else:
    history = model.fit(Batches(), epochs=epochs, verbose=2)
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "history.json"), "w") as f:
    json.dump({k: [repr(v) for v in vs] for k, vs in history.history.items()}, f, sort_keys=True)
