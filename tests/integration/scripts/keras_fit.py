"""An ordinary Keras script (after keras-io's reproducibility recipe): the model is built and
fitted inside a function that returns only the history; tf.data shuffle + parallel map; Dropout."""
import sys

import numpy as np
import tensorflow as tf
from tensorflow import keras


def load(path):
    with np.load(path) as f:
        return (f["x_train"], f["y_train"]), (f["x_test"], f["y_test"])


def train_model(train_ds, test_ds, epochs):
    model = keras.Sequential([
        keras.Input(shape=(28, 28, 1)),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dropout(0.3),
        keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(train_ds, validation_data=test_ds, epochs=epochs, verbose=2)
    return history.history


def main():
    data = sys.argv[1]
    epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    (x_train, y_train), (x_test, y_test) = load(data)
    def prep(x, y):
        return tf.cast(x, tf.float32)[..., None] / 255.0, y
    train_ds = (tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(1000)
                .map(prep, num_parallel_calls=tf.data.AUTOTUNE).batch(100))
    test_ds = tf.data.Dataset.from_tensor_slices((x_test, y_test)).map(prep).batch(100)
    history = train_model(train_ds, test_ds, epochs)
    print("final loss", history["loss"][-1])


if __name__ == "__main__":
    main()
