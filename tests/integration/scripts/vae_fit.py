"""The shape of keras-io's variational autoencoder, tiny, written without the launcher in mind: a
``Sampling`` layer that draws its noise, an encoder and a decoder, a ``train_step`` of its own, fit
on a few hundred MNIST images. Args: DATA.npz EPOCHS OUT_DIR NOISE, where NOISE is how the layer
draws: ``legacy`` (``keras.backend.random_normal``, no seed, as the tf.keras example did),
``unseeded`` (``keras.random.normal``, no seed) or ``seeded`` (a ``keras.random.SeedGenerator``)."""

import json
import os
import sys

import numpy as np
import tensorflow as tf
from tensorflow import keras

data, epochs, out, noise = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
with np.load(data) as f:
    images = (f["x_train"][:240, ::2, ::2] / 255.0).astype("float32").reshape(240, 196)


class Sampling(keras.layers.Layer):
    """z = mean + exp(log_var / 2) * epsilon."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seed_generator = keras.random.SeedGenerator(1337)

    def call(self, inputs):
        z_mean, z_log_var = inputs
        shape = tf.shape(z_mean)
        if noise == "legacy":
            epsilon = keras.backend.random_normal(shape=shape)
        elif noise == "unseeded":
            epsilon = keras.random.normal(shape=shape)
        else:
            epsilon = keras.random.normal(shape=shape, seed=self.seed_generator)
        return z_mean + tf.exp(0.5 * z_log_var) * epsilon


latent = 2
encoder_inputs = keras.Input(shape=(196,))
h = keras.layers.Dense(16, activation="relu")(encoder_inputs)
z_mean, z_log_var = keras.layers.Dense(latent)(h), keras.layers.Dense(latent)(h)
encoder = keras.Model(encoder_inputs, [z_mean, z_log_var, Sampling()([z_mean, z_log_var])], name="encoder")
latent_inputs = keras.Input(shape=(latent,))
decoder = keras.Model(
    latent_inputs,
    keras.layers.Dense(196, activation="sigmoid")(keras.layers.Dense(16, activation="relu")(latent_inputs)),
    name="decoder",
)


class VAE(keras.Model):
    def __init__(self, encoder, decoder, **kwargs):
        super().__init__(**kwargs)
        self.encoder, self.decoder = encoder, decoder
        self.total_loss_tracker = keras.metrics.Mean(name="total_loss")

    @property
    def metrics(self):
        return [self.total_loss_tracker]

    def train_step(self, data):
        with tf.GradientTape() as tape:
            z_mean, z_log_var, z = self.encoder(data)
            reconstruction = self.decoder(z)
            reconstruction_loss = tf.reduce_mean(tf.reduce_sum(keras.losses.binary_crossentropy(data, reconstruction)))
            kl_loss = -0.5 * (1 + z_log_var - tf.square(z_mean) - tf.exp(z_log_var))
            total_loss = reconstruction_loss + tf.reduce_mean(tf.reduce_sum(kl_loss, axis=1))
        grads = tape.gradient(total_loss, self.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.trainable_weights, strict=True))
        self.total_loss_tracker.update_state(total_loss)
        return {"loss": self.total_loss_tracker.result()}


vae = VAE(encoder, decoder)
vae.compile(optimizer=keras.optimizers.Adam())
history = vae.fit(images, epochs=epochs, batch_size=60, verbose=2)
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "history.json"), "w") as f:
    json.dump({k: [repr(v) for v in vs] for k, vs in history.history.items()}, f, sort_keys=True)
