"""Keras' Model.fit under tf.distribute.MultiWorkerMirroredStrategy, as TensorFlow's multi-worker
Keras tutorial writes it. Argument: DATA.npz."""
import sys

import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with np.load(sys.argv[1]) as f:
    x = f["x_train"][:256, ..., None].astype("float32") / 255.0
    y = f["y_train"][:256].astype("int64")

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((28, 28, 1)), tf.keras.layers.Flatten(), tf.keras.layers.Dense(10)])
    model.compile("sgd", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(64), epochs=1, verbose=2)
