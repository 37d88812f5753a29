"""A fine-tuning script written without the launcher in mind: fit a small CNN on a tf.data
pipeline reshuffled every epoch, freeze its convolution, recompile with a smaller learning rate
and fit again on the same pipeline, validating on a random half of the test images (a NumPy draw
between the fits). It writes both fits' histories when it ends. Args: DATA.npz EPOCHS OUT_DIR
(EPOCHS for each fit)."""
import json
import os
import sys

import numpy as np
import tensorflow as tf
from tensorflow import keras

data, epochs, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with np.load(data) as f:
    x_train, y_train, x_test, y_test = f["x_train"][:400], f["y_train"][:400], f["x_test"][:100], f["y_test"][:100]


def prep(x, y):
    return tf.cast(x, tf.float32)[..., None] / 255.0, y


train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(400, reshuffle_each_iteration=True).map(prep)
train = train.batch(100)
test = tf.data.Dataset.from_tensor_slices((x_test, y_test)).map(prep).batch(100)
model = keras.Sequential([
    keras.Input(shape=(28, 28, 1)),
    keras.layers.Conv2D(4, 3, activation="relu"),
    keras.layers.MaxPooling2D(),
    keras.layers.Flatten(),
    keras.layers.Dropout(0.3),
    keras.layers.Dense(10, activation="softmax"),
])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
first = model.fit(train, validation_data=test, epochs=epochs, verbose=2)

model.layers[0].trainable = False  # fine-tune the head only
model.compile(optimizer=keras.optimizers.Adam(1e-4), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
half = np.random.choice(len(x_test), len(x_test) // 2, replace=False)
held_out = tf.data.Dataset.from_tensor_slices((x_test[half], y_test[half])).map(prep).batch(50)
second = model.fit(train, validation_data=held_out, epochs=epochs, verbose=2)
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "history.json"), "w") as f:
    json.dump([{k: [repr(v) for v in vs] for k, vs in h.history.items()} for h in (first, second)], f, sort_keys=True)
