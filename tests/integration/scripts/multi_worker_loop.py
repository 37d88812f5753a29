"""A custom training loop under tf.distribute.MultiWorkerMirroredStrategy, in the shape of
TensorFlow's "Custom training loop with Keras and MultiWorkerMirroredStrategy" tutorial:
the cluster comes from TF_CONFIG, the input from ``distribute_datasets_from_function``, each
step through ``strategy.run`` with ``compute_average_loss``. Arguments: DATA.npz [EPOCHS]."""
import sys

import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 2
global_batch = 64

with np.load(sys.argv[1]) as f:
    x = f["x_train"][:512, ..., None].astype("float32") / 255.0
    y = f["y_train"][:512].astype("int64")


def dataset_fn(input_context):
    batch = input_context.get_per_replica_batch_size(global_batch)
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return ds.shuffle(512, seed=1).batch(batch)


dataset = strategy.distribute_datasets_from_function(dataset_fn)

with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.Input((28, 28, 1)),
        tf.keras.layers.Conv2D(4, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(10),
    ])
    optimizer = tf.keras.optimizers.SGD(0.1)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")


@tf.function
def train_step(iterator):
    def step_fn(inputs):
        images, labels = inputs
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss = tf.nn.compute_average_loss(loss_fn(labels, logits), global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    losses = strategy.run(step_fn, args=(next(iterator),))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)


for epoch in range(1, epochs + 1):
    iterator = iter(dataset)
    total = 0.0
    for _ in range(len(x) // global_batch):
        total += float(train_step(iterator))
    print(f"epoch {epoch} loss {total / (len(x) // global_batch):.6f}", flush=True)
