"""A Keras script written without the launcher in mind: a tf.data pipeline reshuffled every
epoch with a random augmentation map, Dropout, ReduceLROnPlateau and EarlyStopping; stopped by
hand (Ctrl-C, or SIGTERM turned into one), it saves the model it has, as Keras' own examples do,
and ends with status 0; it saves the model and writes its history when it ends.
Args: DATA.npz EPOCHS OUT_DIR [PATIENCE MIN_DELTA]
(EarlyStopping's on val_loss; default 10 0: it never stops early in 6 epochs).
A slow callback of its own (a logger's pause: 2 s after epoch 3's first step) gives a stop sent
just after epoch 2's checkpoint the time to land inside epoch 3, on a busy machine too."""
import json
import os
import sys
import time

import numpy as np
import tensorflow as tf
from tensorflow import keras

data, epochs, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
patience, min_delta = (int(sys.argv[4]), float(sys.argv[5])) if len(sys.argv) > 5 else (10, 0.0)
with np.load(data) as f:
    x_train, y_train, x_test, y_test = f["x_train"][:400], f["y_train"][:400], f["x_test"][:100], f["y_test"][:100]


def prep(x, y):
    return tf.cast(x, tf.float32)[..., None] / 255.0, y


def augment(x, y):
    return x + tf.random.uniform(tf.shape(x), maxval=0.1), y


train = (tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(400, reshuffle_each_iteration=True)
         .map(prep).map(augment).batch(100))
test = tf.data.Dataset.from_tensor_slices((x_test, y_test)).map(prep).batch(100)
model = keras.Sequential([
    keras.Input(shape=(28, 28, 1)),
    keras.layers.Conv2D(4, 3, activation="relu"),
    keras.layers.MaxPooling2D(),
    keras.layers.Flatten(),
    keras.layers.Dropout(0.3),
    keras.layers.Dense(10, activation="softmax"),
])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])


class Pause(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.third = epoch == 2

    def on_train_batch_end(self, batch, logs=None):
        if self.third and batch == 0:
            time.sleep(2.0)


callbacks = [Pause(), keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=0, min_delta=10.0),
             keras.callbacks.EarlyStopping(monitor="val_loss", patience=patience, min_delta=min_delta,
                                           restore_best_weights=True)]

os.makedirs(out, exist_ok=True)
try:
    history = model.fit(train, validation_data=test, epochs=epochs, callbacks=callbacks, verbose=2)
except KeyboardInterrupt:
    print("stopped: saving the model as it is", flush=True)
    history = model.history
model.save(os.path.join(out, "model.keras"))
with open(os.path.join(out, "history.json"), "w") as f:
    json.dump({k: [repr(v) for v in vs] for k, vs in history.history.items()}, f, sort_keys=True)
