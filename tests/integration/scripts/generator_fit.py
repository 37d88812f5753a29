"""A Keras script that fits on a Python generator whose batches come from a source that is not the same
when run again (here a NumPy generator made without a seed, as a socket or a changing file would be): a
resume cannot read it again to its position. Args: DATA.npz EPOCHS."""
import sys

import numpy as np
from tensorflow import keras

data, epochs = sys.argv[1], int(sys.argv[2])
with np.load(data) as f:
    x, y = (f["x_train"][:400] / 255.0).astype("float32"), f["y_train"][:400]
noise = np.random.default_rng()  # no seed: other numbers in every process


def batches():
    while True:
        for i in range(0, len(x), 100):
            yield x[i:i + 100] + noise.normal(0, 0.01, (100, 28, 28)).astype("float32"), y[i:i + 100]


model = keras.Sequential([keras.Input(shape=(28, 28)), keras.layers.Flatten(), keras.layers.Dense(10)])
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(batches(), steps_per_epoch=4, epochs=epochs, verbose=2)
