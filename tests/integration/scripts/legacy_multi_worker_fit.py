"""TensorFlow's "Multi-worker training with Keras" tutorial, in its shape and unmodified: the cluster
from TF_CONFIG, MultiWorkerMirroredStrategy, the model built and compiled in strategy.scope(), a
shuffled, repeated tf.data pipeline, model.fit with steps_per_epoch. It runs under tf_keras (Keras 2:
TF_USE_LEGACY_KERAS=1, so that tf.keras is tf_keras): Keras 3's fit does not run under the strategy.
Its main.py reads TF_CONFIG itself for the worker count, as here.
Arguments: DATA.npz [EPOCHS [STEPS_PER_EPOCH]]."""
import json
import os
import sys

import numpy as np
import tensorflow as tf

epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
steps_per_epoch = int(sys.argv[3]) if len(sys.argv) > 3 else 8
per_worker_batch_size = 32


def mnist_dataset(batch_size):
    with np.load(sys.argv[1]) as f:
        x_train, y_train = f["x_train"], f["y_train"]
    # The `x` arrays are in uint8 and have values in the [0, 255] range.
    # You need to convert them to float32 with values in the [0, 1] range.
    x_train = x_train / np.float32(255)
    y_train = y_train.astype(np.int64)
    return tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(600).repeat().batch(batch_size)


def build_and_compile_cnn_model():
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(28, 28)),
        tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
        tf.keras.layers.Conv2D(8, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(32, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=tf.keras.optimizers.SGD(learning_rate=0.01, momentum=0.9),
        metrics=["accuracy"],
    )
    return model


tf_config = json.loads(os.environ["TF_CONFIG"])
num_workers = len(tf_config["cluster"]["worker"])

strategy = tf.distribute.MultiWorkerMirroredStrategy()
global_batch_size = per_worker_batch_size * num_workers
multi_worker_dataset = mnist_dataset(global_batch_size)
with strategy.scope():
    # Model building/compiling need to be within `strategy.scope()`.
    multi_worker_model = build_and_compile_cnn_model()
multi_worker_model.fit(multi_worker_dataset, epochs=epochs, steps_per_epoch=steps_per_epoch, verbose=2)
