"""Reads every file below a directory with open() and trains a tiny Keras model on numbers
derived from their bytes: a job whose data is thousands of small files (issue 40's bounds).

    python many_files.py DIR [EPOCHS]
"""

import os
import sys

import keras
import numpy as np

directory = sys.argv[1]
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 2
rows = []
for name in sorted(os.listdir(directory)):
    with open(os.path.join(directory, name), "rb") as f:
        rows.append(np.frombuffer(f.read(16).ljust(16, b"\0"), dtype=np.uint8))
x = np.stack(rows).astype("float32") / 255.0
y = (x[:, 0] > x[:, 1]).astype("int32")
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x, y, batch_size=300, epochs=epochs, verbose=0)
