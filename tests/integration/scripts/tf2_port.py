"""The TF2 port of tf1_mlp.py: Keras layers, a GradientTape loop in eager mode, SGD.

The layers keep the TF1 model's initializers (``tf.compat.v1.glorot_uniform_initializer``
for kernels, zeros for biases), as a port must for its first step to match.

Usage: tf2_port.py DATA.npz STEPS [correct|no-bias|tanh]"""
import sys

import numpy as np
import tensorflow as tf

data, steps = sys.argv[1], int(sys.argv[2])
variant = sys.argv[3] if len(sys.argv) > 3 else "correct"
with np.load(data) as f:
    x_train = f["x_train"].reshape(-1, 784).astype("float32") / 255.0
    y_train = f["y_train"].astype("int64")


def tf1_glorot(shape, dtype=None):
    return tf.compat.v1.glorot_uniform_initializer()(shape, dtype=dtype or tf.float32)


model = tf.keras.Sequential([
    tf.keras.Input((784,)),
    tf.keras.layers.Dense(32, activation="tanh" if variant == "tanh" else "relu", use_bias=variant != "no-bias",
                          kernel_initializer=tf1_glorot),
    tf.keras.layers.Dense(10, kernel_initializer=tf1_glorot),
])
opt = tf.keras.optimizers.SGD(0.1)
for step in range(steps):
    i = (step * 50) % len(x_train)
    with tf.GradientTape() as tape:
        logits = model(x_train[i:i + 50])
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y_train[i:i + 50], logits=logits))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    print("step", step, "loss", float(loss))
