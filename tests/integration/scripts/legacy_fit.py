"""A Keras 2 script as TensorFlow's tutorials wrote it for tf.keras, unmodified, run under tf_keras
(TF_USE_LEGACY_KERAS=1): a tf.data pipeline reshuffled every epoch, a CNN, Adam, validation data,
model.fit. Arguments: DATA.npz [EPOCHS]."""
import sys

import numpy as np
import tensorflow as tf

epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
with np.load(sys.argv[1]) as f:
    x_train, y_train = f["x_train"][..., None] / np.float32(255), f["y_train"]
    x_test, y_test = f["x_test"][..., None] / np.float32(255), f["y_test"]

train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(600).batch(50)
test = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(100)
model = tf.keras.models.Sequential([
    tf.keras.layers.Conv2D(8, 3, activation="relu", input_shape=(28, 28, 1)),
    tf.keras.layers.MaxPooling2D(),
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(32, activation="relu"),
    tf.keras.layers.Dense(10),
])
model.compile(
    optimizer=tf.keras.optimizers.Adam(1e-3),
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)
model.fit(train, epochs=epochs, validation_data=test, verbose=2)
