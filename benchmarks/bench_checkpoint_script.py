"""The epoch checkpoint of an unmodified script's Keras fit, and the way back from a kill (issue 28).

1. Cost: a strict script run (a Keras fit on the packaged 2,000-image sample: the mnist
   task's CNN, a shuffled tf.data pipeline, Dropout) checkpoints every epoch; its
   checkpoint times (epochs 2..E: the first also writes the job's facts) against the
   median epoch of the strict mnist task on the same sample (target: under 5 %).
2. Resume: the same script run SIGKILLed after epoch 1's checkpoint, then ``launch
   resume``: seconds from the command's start until the resumed fit's first epoch ends
   (the key is checked, the job starts, the state is restored, one epoch trained), against
   a fresh launch's seconds until its first epoch's checkpoint.

    python benchmarks/bench_checkpoint_script.py [EPOCHS]
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, launch, tree_env

EPOCHS = int(sys.argv[1]) if len(sys.argv) > 1 else 4
SAMPLE = REPO / "launcher" / "data" / "mnist-sample.npz"
SCRIPT = """
import sys
import numpy as np
import tensorflow as tf
from tensorflow import keras

with np.load(sys.argv[1]) as f:
    x, y = f["x_train"], f["y_train"].astype("int32")
ds = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), reshuffle_each_iteration=True)
      .map(lambda a, b: (tf.cast(a, tf.float32)[..., None] / 255.0, b)).batch(32))
model = keras.Sequential([
    keras.Input(shape=(28, 28, 1)),
    keras.layers.Conv2D(16, 3, activation="relu"), keras.layers.MaxPooling2D(),
    keras.layers.Conv2D(32, 3, activation="relu"), keras.layers.MaxPooling2D(),
    keras.layers.Flatten(), keras.layers.Dropout(0.25), keras.layers.Dense(10),
])
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(ds, epochs=int(sys.argv[2]), verbose=2)
"""


def _args(script: Path, store: Path, epochs: int) -> list[str]:
    return [
        "train=script",
        f"train.script={script}",
        f"train.args=[{SAMPLE},{epochs}]",
        "determinism=strict",
        f"store.root={store}",
    ]


def _until(argv: list[str], cwd: Path, done, timeout: float = 600) -> tuple[float, subprocess.Popen]:
    """Start ``argv``; seconds until ``done()`` holds (the process is left running)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, cwd=cwd, env=tree_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    while not done():
        if proc.poll() is not None or time.perf_counter() - start > timeout:
            sys.exit(f"failed: {' '.join(argv)} ended ({proc.returncode}) before it got there")
        time.sleep(0.01)
    return time.perf_counter() - start, proc


def _run_dirs(store: Path) -> list[Path]:
    return [p for p in store.iterdir() if p.is_dir() and p.name[:1].isdigit()]


def _metrics_lines(run: Path) -> int:
    path = run / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        script = tmp_path / "train.py"
        script.write_text(SCRIPT)
        _, mnist = launch(tmp_path / "mnist", "determinism=strict", f"train.epochs={EPOCHS}")
        epoch = statistics.median(mnist["timings"]["epoch_s"][1:])
        _, scripted = launch(tmp_path / "script", *_args(script, tmp_path / "script", EPOCHS)[:-1])
        saves = scripted["timings"]["checkpoint_s"]
        share = statistics.median(saves[1:]) / epoch
        print(
            f"script checkpoint: median {statistics.median(saves[1:]) * 1000:.0f} ms (first, with the job's facts: "
            f"{saves[0] * 1000:.0f} ms); strict mnist epoch median {epoch:.3f} s: {share:.1%} of an epoch "
            f"(target < 5 %): {'OK' if share < 0.05 else 'OVER'}"
        )

        store = tmp_path / "killed"
        store.mkdir()
        argv = [sys.executable, "-m", "launcher", *_args(script, store, EPOCHS)]

        def first_checkpoint() -> bool:
            return any((r / "checkpoints" / "epoch-000001").is_dir() for r in _run_dirs(store))

        fresh, proc = _until(argv, tmp_path, first_checkpoint)
        os.killpg(proc.pid, signal.SIGKILL)  # at once: the run must not finish first
        proc.wait()
        (run,) = _run_dirs(store)
        time.sleep(1)
        resumed, proc = _until(
            [sys.executable, "-m", "launcher", "resume", str(run)], tmp_path, lambda: _metrics_lines(run) >= 2
        )
        proc.wait()
        status = json.loads((run / "status.json").read_text())["state"]
        print(
            f"resume: {resumed:.1f} s from `launch resume` to its first resumed epoch's end; a fresh launch "
            f"took {fresh:.1f} s to its first epoch's checkpoint (the resumed run ended {status})"
        )


if __name__ == "__main__":
    main()
