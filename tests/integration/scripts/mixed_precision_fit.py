"""The shape of TensorFlow's mixed precision guide, written without the launcher in mind: the global
policy mixed_float16, a small Dense model whose last activation is float32, RMSprop (Keras 3 wraps it
in a LossScaleOptimizer), fit on a few hundred MNIST images. Args: DATA.npz EPOCHS OUT_DIR."""

import json
import os
import sys

import numpy as np
from tensorflow import keras

data, epochs, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
keras.mixed_precision.set_global_policy("mixed_float16")
with np.load(data) as f:
    x_train, y_train = f["x_train"][:300], f["y_train"][:300]
x_train = x_train.reshape(300, 784).astype("float32") / 255

inputs = keras.Input(shape=(784,), name="digits")
x = keras.layers.Dense(64, activation="relu", name="dense_1")(inputs)
x = keras.layers.Dense(64, activation="relu", name="dense_2")(x)
x = keras.layers.Dense(10, name="dense_logits")(x)
outputs = keras.layers.Activation("softmax", dtype="float32", name="predictions")(x)
model = keras.Model(inputs=inputs, outputs=outputs)
model.compile(loss="sparse_categorical_crossentropy", optimizer=keras.optimizers.RMSprop(), metrics=["accuracy"])
history = model.fit(x_train, y_train, batch_size=60, epochs=epochs, validation_split=0.2, verbose=2)
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "history.json"), "w") as f:
    json.dump({k: [repr(v) for v in vs] for k, vs in history.history.items()}, f, sort_keys=True)
