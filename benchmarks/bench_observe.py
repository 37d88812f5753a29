"""The cost of observing unmodified user code (``train.observe``), on the mnist job.

The mnist task's model and data, run as an ordinary user script (``train=script``)
that calls ``fit`` once per epoch as the task does and times its own epochs. Side by
side in one run, interleaved, N times each:

- ``observe=true`` (the default): every ``fit`` gets the epoch logger and the step trace
  (every 10 steps, the default), every optimizer step is counted, and the trained
  weights are hashed at the end;
- ``observe=false``: none of that.

Printed: the median epoch time (epochs 2..E, so tracing tf.functions does not count),
the median whole-launch wall time, and their ratios (target: at most 1.05x), and
whether both gave the same weights (observation must not change a bit).

    python benchmarks/bench_observe.py [N] [EPOCHS]
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

from common import launch

N = int(sys.argv[1]) if len(sys.argv) > 1 else 3
EPOCHS = int(sys.argv[2]) if len(sys.argv) > 2 else 5

SCRIPT = """
import hashlib, json, sys, time
import numpy as np
import tensorflow as tf
from launcher.job import data
from launcher.job.tasks.mnist import build_model, epoch_order, make_dataset

epochs, out = int(sys.argv[1]), sys.argv[2]
mnist = data.load("sample")
model = build_model(tf.keras, 0.001, False)
x, y = mnist.x_train, mnist.y_train.astype("int32")
times = []
for epoch in range(epochs):
    order = epoch_order(0, epoch, len(x))
    start = time.perf_counter()
    model.fit(make_dataset(tf, x[order], y[order], 64, True), epochs=1, verbose=0, shuffle=False)
    times.append(time.perf_counter() - start)
weights = np.concatenate([np.asarray(w).ravel() for w in model.get_weights()])
json.dump({"epoch_s": times, "weights": hashlib.sha256(weights.tobytes()).hexdigest()}, open(out, "w"))
"""


def main() -> None:
    epochs: dict[str, list[float]] = {"observe=true": [], "observe=false": []}
    walls: dict[str, list[float]] = {mode: [] for mode in epochs}
    weights: dict[str, set[str]] = {mode: set() for mode in epochs}
    with tempfile.TemporaryDirectory() as tmp:
        script, out = Path(tmp) / "train.py", Path(tmp) / "epochs.json"
        script.write_text(SCRIPT)
        store = Path(tmp) / "runs"
        for _ in range(N):  # interleaved, so drift on a noisy machine hits both modes alike
            for mode in epochs:
                wall, _ = launch(
                    store, "train=script", f"train.script={script}", f"train.args=[{EPOCHS},{out}]", f"train.{mode}"
                )
                measured = json.loads(out.read_text())
                epochs[mode] += measured["epoch_s"][1:]
                walls[mode].append(wall)
                weights[mode].add(measured["weights"])
    base_epoch, base_wall = statistics.median(epochs["observe=false"]), statistics.median(walls["observe=false"])
    print(f"observation benchmark: the mnist model as a user script, {N} runs x {EPOCHS - 1} epochs per mode")
    for mode in epochs:
        e, w = statistics.median(epochs[mode]), statistics.median(walls[mode])
        print(
            f"  {mode:<14} median epoch {e:.3f} s ({e / base_epoch:.3f}x)   median launch {w:.2f} s "
            f"({w / base_wall:.3f}x)"
        )
    ratio = statistics.median(epochs["observe=true"]) / base_epoch
    same = weights["observe=true"] == weights["observe=false"] and len(weights["observe=true"]) == 1
    print(f"observed / unobserved epoch time: {ratio:.3f} (target <= 1.05): {'OK' if ratio <= 1.05 else 'OVER'}")
    print(f"same weights observed and unobserved, every run: {'yes' if same else 'NO'}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
