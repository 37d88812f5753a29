"""The most common Keras shape, written without the launcher in mind (issue 42's): a tf.data pipeline
reshuffled every epoch, a map applying tf.image.random_flip_left_right and a RandomTranslation layer
made outside the model (Keras' "augment in the tf.data pipeline"), batch, prefetch; a small CNN with
Dropout; ReduceLROnPlateau and EarlyStopping; one fit. It writes its history when it ends.
Args: DATA.npz EPOCHS OUT_DIR"""
import json
import os
import sys

import numpy as np
import tensorflow as tf
from tensorflow import keras

data, epochs, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with np.load(data) as f:
    x_train, y_train, x_test, y_test = f["x_train"][:300], f["y_train"][:300], f["x_test"][:100], f["y_test"][:100]

translate = keras.layers.RandomTranslation(0.1, 0.1)  # its seed generator is a variable outside the model


def prep(x, y):
    return tf.cast(x, tf.float32)[..., None] / 255.0, y


def augment(x, y):
    return translate(tf.image.random_flip_left_right(x)), y


train = (tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(300, reshuffle_each_iteration=True)
         .map(prep).map(augment).batch(50).prefetch(tf.data.AUTOTUNE))
test = tf.data.Dataset.from_tensor_slices((x_test, y_test)).map(prep).batch(100).prefetch(tf.data.AUTOTUNE)
model = keras.Sequential([
    keras.Input(shape=(28, 28, 1)),
    keras.layers.Conv2D(4, 3, activation="relu"),
    keras.layers.MaxPooling2D(),
    keras.layers.Flatten(),
    keras.layers.Dropout(0.3),
    keras.layers.Dense(10, activation="softmax"),
])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
callbacks = [keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=0, min_delta=10.0),
             keras.callbacks.EarlyStopping(monitor="val_loss", patience=10, restore_best_weights=True)]
history = model.fit(train, validation_data=test, epochs=epochs, callbacks=callbacks, verbose=2)
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "history.json"), "w") as f:
    json.dump({k: [repr(v) for v in vs] for k, vs in history.history.items()}, f, sort_keys=True)
