"""A tutorial-style script that imports more than the launcher: it plots its loss with matplotlib
(which draws the PNG with Pillow), as keras-io examples do. Usage: plot_loss.py DATA.npz"""
import io
import sys

import helper
import matplotlib
import numpy as np
import tensorflow as tf

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

with np.load(sys.argv[1]) as f:
    x = f["x_train"][:300].reshape(-1, 784).astype("float32") / 255.0
    y = f["y_train"][:300].astype("int64")

model = tf.keras.Sequential([tf.keras.Input((784,)), tf.keras.layers.Dense(10)])
model.compile(tf.keras.optimizers.SGD(helper.LEARNING_RATE),
              tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
history = model.fit(x, y, batch_size=100, epochs=1, verbose=2)
plt.plot(history.history["loss"])
plt.savefig(io.BytesIO(), format="png")
