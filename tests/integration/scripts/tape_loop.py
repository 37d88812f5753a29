"""An ordinary GradientTape loop: bare tf.Variables, a conv layer, dropout and a Keras optimizer,
its step in a tf.function. Usage: tape_loop.py DATA.npz [PARAMS_OUT.npy]"""
import sys

import numpy as np
import tensorflow as tf

with np.load(sys.argv[1]) as f:
    x = f["x_train"][..., None].astype("float32") / 255.0
    y = f["y_train"].astype("int64")

kernel = tf.Variable(tf.random.normal([3, 3, 1, 16], stddev=0.1), name="kernel")
w = tf.Variable(tf.random.normal([26 * 26 * 16, 10], stddev=0.01), name="w")
b = tf.Variable(tf.zeros([10]), name="b")
params = [kernel, w, b]
opt = tf.keras.optimizers.Adam(1e-3)
ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(600).batch(50)


@tf.function
def step(xb, yb):
    with tf.GradientTape() as tape:
        h = tf.nn.relu(tf.nn.conv2d(xb, kernel, 1, "VALID"))
        logits = tf.reshape(tf.nn.dropout(h, 0.2), [-1, 26 * 26 * 16]) @ w + b
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(yb, logits))
    grads = tape.gradient(loss, params)
    opt.apply_gradients(zip(grads, params, strict=True))
    return loss


for epoch in range(2):
    for xb, yb in ds:
        loss = step(xb, yb)
    print("epoch", epoch, "loss", float(loss))

if len(sys.argv) > 2:
    np.save(sys.argv[2], np.concatenate([p.numpy().ravel() for p in params]))
