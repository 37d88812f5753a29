"""Split the CPU into two logical devices first (as GPU tutorials configure devices first),
then train a Keras model under tf.distribute.MirroredStrategy."""
import sys

import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])

with np.load(sys.argv[1]) as f:
    x = f["x_train"][..., None].astype("float32") / 255.0
    y = f["y_train"].astype("int64")

with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.Input((28, 28, 1)),
        tf.keras.layers.Conv2D(8, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dropout(0.2),
        tf.keras.layers.Dense(10),
    ])
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(100), epochs=2, verbose=2)
