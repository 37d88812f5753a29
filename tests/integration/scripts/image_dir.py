"""An ordinary script after TensorFlow's "Load and preprocess images" tutorial: a directory of
PNGs, one folder per class, read by keras.utils.image_dataset_from_directory (the files are
opened by TensorFlow's native code inside a tf.data map), then Keras fit."""
import sys

import keras

data_dir = sys.argv[1]
train_ds = keras.utils.image_dataset_from_directory(data_dir, validation_split=0.2, subset="training", seed=123,
                                                    image_size=(28, 28), color_mode="grayscale", batch_size=32)
val_ds = keras.utils.image_dataset_from_directory(data_dir, validation_split=0.2, subset="validation", seed=123,
                                                  image_size=(28, 28), color_mode="grayscale", batch_size=32)
model = keras.Sequential([
    keras.layers.Rescaling(1.0 / 255),
    keras.layers.Conv2D(8, 3, activation="relu"),
    keras.layers.MaxPooling2D(),
    keras.layers.Flatten(),
    keras.layers.Dense(10),
])
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
model.fit(train_ds, validation_data=val_ds, epochs=1, verbose=2)
