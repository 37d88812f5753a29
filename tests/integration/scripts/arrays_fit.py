"""A Keras script written without the launcher in mind: fit on NumPy arrays, shuffled each epoch
by Keras (shuffle=True), with Dropout and ReduceLROnPlateau; it writes its history when it ends.
Args: DATA.npz EPOCHS OUT_DIR [split|data] (validation_split=0.2, or validation_data=(x, y))."""
import json
import os
import sys

import numpy as np
from tensorflow import keras

data, epochs, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
validation = sys.argv[4] if len(sys.argv) > 4 else "split"
with np.load(data) as f:
    x_train, y_train, x_test, y_test = f["x_train"][:400], f["y_train"][:400], f["x_test"][:100], f["y_test"][:100]
x_train, x_test = (x_train / 255.0).astype("float32")[..., None], (x_test / 255.0).astype("float32")[..., None]

model = keras.Sequential([
    keras.Input(shape=(28, 28, 1)),
    keras.layers.Conv2D(4, 3, activation="relu"),
    keras.layers.MaxPooling2D(),
    keras.layers.Flatten(),
    keras.layers.Dropout(0.3),
    keras.layers.Dense(10, activation="softmax"),
])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
held_out = {"validation_split": 0.2} if validation == "split" else {"validation_data": (x_test, y_test)}
history = model.fit(x_train, y_train, batch_size=50, epochs=epochs, shuffle=True, verbose=2,
                    callbacks=[keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=0,
                                                                 min_delta=10.0)], **held_out)
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "history.json"), "w") as f:
    json.dump({k: [repr(v) for v in vs] for k, vs in history.history.items()}, f, sort_keys=True)
