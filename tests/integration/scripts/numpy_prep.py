"""A script whose preprocessing is NumPy math (float64 log1p, exp and a BLAS product): NumPy's
and OpenBLAS' runtime dispatch reach the weights, as well as TensorFlow's (issue 30)."""
import sys

import numpy as np
import tensorflow as tf
from tensorflow import keras


def main():
    with np.load(sys.argv[1]) as f:
        x, y = f["x_train"].astype(np.float64) / 255.0, f["y_train"]
    x = np.log1p(x) - np.exp(-x)  # NumPy's own SIMD loops (AVX-512 ones where the CPU has them)
    rng = np.random.default_rng(0)
    projection = rng.standard_normal((784, 64)).astype(np.float32)
    features = x.reshape(len(x), 784).astype(np.float32) @ projection  # OpenBLAS sgemm
    model = keras.Sequential([keras.Input(shape=(64,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(tf.constant(features), tf.constant(y), epochs=1, batch_size=100, verbose=2)


if __name__ == "__main__":
    main()
