"""A GAN in the shape of the DCGAN tutorial (tensorflow.org/tutorials/generative/dcgan): a
generator and a discriminator trained in a GradientTape loop, ``checkpoint.save`` every epoch
into ./training_checkpoints, ``checkpoint.restore(tf.train.latest_checkpoint(...))`` at the end.
Usage: checkpoint_gan.py DATA.npz [unseeded]  (unseeded: the noise from np.random.default_rng())"""

import os
import sys

import numpy as np
import tensorflow as tf

with np.load(sys.argv[1]) as f:
    images = (f["x_train"][:128].reshape(-1, 784).astype("float32") - 127.5) / 127.5
rng = np.random.default_rng() if sys.argv[2:] == ["unseeded"] else None
dataset = tf.data.Dataset.from_tensor_slices(images).batch(32)

generator = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(784, activation="tanh")])
discriminator = tf.keras.Sequential([tf.keras.Input((784,)), tf.keras.layers.Dense(1)])
cross_entropy = tf.keras.losses.BinaryCrossentropy(from_logits=True)
generator_optimizer = tf.keras.optimizers.Adam(1e-3)
discriminator_optimizer = tf.keras.optimizers.Adam(1e-3)

checkpoint_dir = "./training_checkpoints"
checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt")
checkpoint = tf.train.Checkpoint(
    generator_optimizer=generator_optimizer,
    discriminator_optimizer=discriminator_optimizer,
    generator=generator,
    discriminator=discriminator,
)


@tf.function
def train_step(real, noise):
    with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
        fake = generator(noise, training=True)
        real_output, fake_output = discriminator(real, training=True), discriminator(fake, training=True)
        gen_loss = cross_entropy(tf.ones_like(fake_output), fake_output)
        disc_loss = cross_entropy(tf.ones_like(real_output), real_output) + cross_entropy(
            tf.zeros_like(fake_output), fake_output
        )
    gen_grads = gen_tape.gradient(gen_loss, generator.trainable_variables)
    disc_grads = disc_tape.gradient(disc_loss, discriminator.trainable_variables)
    generator_optimizer.apply_gradients(zip(gen_grads, generator.trainable_variables, strict=True))
    discriminator_optimizer.apply_gradients(zip(disc_grads, discriminator.trainable_variables, strict=True))
    return gen_loss, disc_loss


for epoch in range(2):
    for batch in dataset:
        n = int(batch.shape[0])
        noise = rng.normal(size=(n, 8)).astype("float32") if rng is not None else tf.random.normal([n, 8])
        gen_loss, disc_loss = train_step(batch, noise)
    checkpoint.save(file_prefix=checkpoint_prefix)
    print("epoch", epoch, "gen_loss", float(gen_loss), "disc_loss", float(disc_loss))

checkpoint.restore(tf.train.latest_checkpoint(checkpoint_dir))
