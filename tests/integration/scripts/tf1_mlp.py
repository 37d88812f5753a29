"""A TF1-style script, as written before TensorFlow 2: graph mode, placeholders,
get_variable with its default initializer, optional dropout, a TF1 optimizer, its own
ConfigProto with one thread, and a Session loop. It runs without the launcher.

Usage: tf1_mlp.py DATA.npz STEPS [sgd|adam] [DROPOUT]"""
import sys

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()

data, steps = sys.argv[1], int(sys.argv[2])
optimizer = sys.argv[3] if len(sys.argv) > 3 else "sgd"
dropout = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
with np.load(data) as f:
    x_train = f["x_train"].reshape(-1, 784).astype("float32") / 255.0
    y_train = f["y_train"].astype("int64")

x = tf1.placeholder(tf.float32, [None, 784])
y = tf1.placeholder(tf.int64, [None])
w1 = tf1.get_variable("w1", [784, 32])
b1 = tf1.get_variable("b1", [32], initializer=tf1.zeros_initializer())
w2 = tf1.get_variable("w2", [32, 10])
b2 = tf1.get_variable("b2", [10], initializer=tf1.zeros_initializer())
hidden = tf.nn.relu(tf.matmul(x, w1) + b1)
if dropout:
    hidden = tf1.nn.dropout(hidden, rate=dropout)
logits = tf.matmul(hidden, w2) + b2
loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
opt = tf1.train.AdamOptimizer(1e-3) if optimizer == "adam" else tf1.train.GradientDescentOptimizer(0.1)
train_op = opt.minimize(loss)

config = tf1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
with tf1.Session(config=config) as sess:
    sess.run(tf1.global_variables_initializer())
    for step in range(steps):
        i = (step * 50) % len(x_train)
        _, value = sess.run([train_op, loss], {x: x_train[i:i + 50], y: y_train[i:i + 50]})
        print("step", step, "loss", value)
