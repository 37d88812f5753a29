"""Launcher overhead: `launch` against the same training as a plain Python script (target <= 1.05x, ~30 s job).

Side by side in one run, each a whole command in a fresh process, interleaved N rounds
(alternating which goes first) so that drift on a noisy machine hits both alike:

- plain:  ``python script.py EPOCHS``, a standalone program this benchmark writes to a
  temporary directory. It applies strict determinism as ``launcher.job.determinism`` plans
  and applies it (PYTHONHASHSEED and the TF_* variables set before it starts, one intra-
  and one inter-op thread, op determinism, every seed and TensorFlow's global
  Generator), loads the packaged sample and trains with the mnist
  task's own ``build_model``, ``epoch_order`` and ``make_dataset``, called as
  ``launcher.job.tasks.mnist.run`` calls them; no checkpoints; verbose=2, as the launcher runs
  Keras; it prints the weights' sha256.
- launch: ``python -m launcher determinism=strict train.checkpoint_every=0
  train.epochs=EPOCHS +seed=0`` in a temporary store (fingerprint, records, trace, seal,
  index: everything a real launch does).

Both must end with the same ``weights_sha256``, which proves they ran the same training;
the benchmark fails when they differ. Prints the median wall times, the ratio
launch/plain and the difference in seconds.

    python benchmarks/bench_launcher.py [N] [EPOCHS]

N rounds (default 3); EPOCHS (default 50: the plain script took 28-30 s on a 2-core machine).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from importlib import resources
from pathlib import Path

from common import launch, timed
from omegaconf import OmegaConf

N = int(sys.argv[1]) if len(sys.argv) > 1 else 3
EPOCHS = int(sys.argv[2]) if len(sys.argv) > 2 else 50
TARGET = 1.05

# The plain program. Batch size and learning rate are the packaged defaults of train=mnist
# (filled in below), so the launch side needs no overrides for them.
SCRIPT = """\
import sys

import keras
import tensorflow as tf

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.experimental.enable_op_determinism()
keras.utils.set_random_seed(0)
tf.random.set_global_generator(tf.random.Generator.from_seed(0))

from launcher.job import data
from launcher.record.hashing import keras_weights, weights_digest
from launcher.job.tasks.mnist import build_model, epoch_order, make_dataset

SEED, EPOCHS, BATCH, LR = 0, int(sys.argv[1]), {batch_size}, {learning_rate}
mnist = data.load("sample")
x_train, y_train = mnist.x_train, mnist.y_train
x_test, y_train, y_test = mnist.x_test, y_train.astype("int32"), mnist.y_test.astype("int32")
model = build_model(keras, LR, False)
val = make_dataset(tf, x_test, y_test, BATCH, True, 1)
for epoch in range(EPOCHS):
    order = epoch_order(SEED, epoch, len(x_train))
    ds = make_dataset(tf, x_train[order], y_train[order], BATCH, True, 1)
    model.fit(ds, validation_data=val, epochs=epoch + 1, initial_epoch=epoch, verbose=2, shuffle=False)
print("weights_sha256=" + weights_digest(keras_weights(model))[0])
"""

# What determinism=strict puts in the job's environment (PYTHONHASHSEED only works from the start).
STRICT_ENV = {
    "PYTHONHASHSEED": "0",
    "TF_DETERMINISTIC_OPS": "1",
    "TF_CUDNN_DETERMINISTIC": "1",
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
    "TF_ENABLE_ONEDNN_OPTS": "0",
    "TF_CPP_MIN_LOG_LEVEL": "2",
}


def plain(script: Path) -> tuple[float, str]:
    wall, out = timed([sys.executable, str(script), str(EPOCHS)], env={**os.environ, **STRICT_ENV})
    (line,) = [x for x in out.splitlines() if x.startswith("weights_sha256=")]
    return wall, line.split("=", 1)[1]


def launched(store: Path) -> tuple[float, str]:
    wall, result = launch(store, "determinism=strict", "train.checkpoint_every=0", f"train.epochs={EPOCHS}", "+seed=0")
    return wall, result["weights_sha256"]


def main() -> None:
    defaults = OmegaConf.load(resources.files("launcher") / "configs" / "train" / "mnist.yaml")
    walls: dict[str, list[float]] = {"plain script": [], "launch": []}
    hashes: dict[str, set[str]] = {"plain script": set(), "launch": set()}
    with tempfile.TemporaryDirectory() as tmp:
        script, store = Path(tmp) / "script.py", Path(tmp) / "runs"
        script.write_text(
            SCRIPT.format(batch_size=int(defaults.batch_size), learning_rate=float(defaults.learning_rate))
        )
        for i in range(N):  # interleaved; the order alternates by round
            for name in ("plain script", "launch") if i % 2 == 0 else ("launch", "plain script"):
                wall, digest = plain(script) if name == "plain script" else launched(store)
                walls[name].append(wall)
                hashes[name].add(digest)
    if len(hashes["plain script"] | hashes["launch"]) != 1:
        sys.exit(f"FAIL: the weights differ, so these are not the same training: {hashes}")
    (digest,) = hashes["launch"]
    m_plain, m_launch = statistics.median(walls["plain script"]), statistics.median(walls["launch"])
    ratio = m_launch / m_plain
    print(f"launcher benchmark: strict mnist on the packaged sample, {EPOCHS} epochs, {N} interleaved rounds")
    print(f"  same training: both give weights_sha256={digest}")
    print(f"  median wall, plain script: {m_plain:7.2f} s")
    print(f"  median wall, launch:       {m_launch:7.2f} s")
    print(f"ratio launch / plain: {ratio:.3f} (target <= {TARGET}): {'OK' if ratio <= TARGET else 'OVER'}")
    print(f"launcher overhead: {m_launch - m_plain:+.2f} s per run")


if __name__ == "__main__":
    main()
