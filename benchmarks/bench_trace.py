"""The cost of the step trace (the divergence locator) on the mnist task.

Two measurements, side by side in one run:
1. inside each traced run, the time spent recording trace points (hashing the weights,
   writing the line) against the epoch it belongs to;
2. the same strict job traced every step, every 10 steps (the default) and not at
   all, interleaved, N times each: median epoch times (epochs 2..E, so the first
   epoch's tracing of tf.functions does not count) and their ratios to no trace.
   This is the whole cost: a callback with a per-step hook also makes Keras hand
   over each step's logs synchronously (no async dispatch), which (1) does not see.
   Target: the default at most 1.05x no trace.
3. in this process, one-epoch fits of the same model alternating, in rotating order:
   no callback, a per-step hook that does nothing, the trace every 10 steps, every
   step. Less noisy than (2), and it shows what any per-step hook costs.

    python benchmarks/bench_trace.py [N] [EPOCHS]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import launch

N = int(sys.argv[1]) if len(sys.argv) > 1 else 3
EPOCHS = int(sys.argv[2]) if len(sys.argv) > 2 else 4
MODES = {"every step": 1, "every 10 steps (default)": 10, "no trace": 0}
EPOCH_STEPS = 32  # the packaged sample: 2,000 images in batches of 64


def timings(store: Path, every: int) -> dict:
    _, result = launch(
        store,
        "determinism=strict",
        f"train.epochs={EPOCHS}",
        "train.checkpoint_every=0",
        f"determinism.trace_every={every}",
    )
    return result["timings"]


def main() -> None:
    epochs: dict[str, list[float]] = {mode: [] for mode in MODES}
    shares: dict[str, list[float]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "runs"
        for _ in range(N):  # interleaved, so drift on a noisy machine hits every mode alike
            for mode, every in MODES.items():
                t = timings(store, every)
                epochs[mode] += t["epoch_s"][1:]
                shares[mode] += [s / (e - s) for s, e in zip(t["trace_s"][1:], t["epoch_s"][1:], strict=True)]
    print(f"trace benchmark: strict mnist on the packaged sample, {N} runs x {EPOCHS - 1} epochs per mode")
    base = statistics.median(epochs["no trace"])
    for mode in MODES:
        median = statistics.median(epochs[mode])
        share = statistics.median(shares[mode])
        print(
            f"  {mode:<26} median epoch {median:.3f} s   in-run trace share {share:6.2%}   "
            f"A/B ratio to no trace {median / base:.3f}"
        )
    default = statistics.median(epochs["every 10 steps (default)"]) / base
    steps = EPOCH_STEPS
    extra_ms = (statistics.median(epochs["every 10 steps (default)"]) - base) / steps * 1000
    print(
        f"default trace: A/B ratio {default:.3f} (target <= 1.05): {'OK' if default <= 1.05 else 'OVER'}; "
        f"{extra_ms:+.2f} ms per step of {base / steps * 1000:.1f} ms"
    )


def in_process(rounds: int = 12) -> None:
    """Measurement 3: alternating fits in this process (TensorFlow is first imported here)."""
    import os

    os.environ.update(TF_ENABLE_ONEDNN_OPTS="0", TF_CPP_MIN_LOG_LEVEL="2")
    import keras
    import tensorflow as tf

    from launcher.job import data
    from launcher.job.tasks.mnist import build_model, make_dataset
    from launcher.job.training import trace

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(0)

    class NoOp(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            pass

    mnist = data.load("sample")
    model = build_model(keras, 1e-3, False)
    ds = make_dataset(tf, mnist.x_train, mnist.y_train.astype("int32"), 64, True, 1)
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        modes = [
            ("no callback", []),
            ("a no-op per-step hook", [NoOp()]),
            ("trace every 10 steps", [trace.keras_callback(Path(a), 10)]),
            ("trace every step", [trace.keras_callback(Path(b), 1)]),
        ]
        model.fit(ds, epochs=1, verbose=0, shuffle=False)  # trace the tf.functions first
        times: dict[str, list[float]] = {name: [] for name, _ in modes}
        for r in range(rounds):
            for name, callbacks in modes[r % 4 :] + modes[: r % 4]:
                start = time.perf_counter()
                model.fit(ds, epochs=1, verbose=0, shuffle=False, callbacks=callbacks)
                times[name].append(time.perf_counter() - start)
    base = statistics.median(times["no callback"])
    print(f"in one process, {rounds} alternating one-epoch fits per mode (32 steps each), medians:")
    for name, values in times.items():
        print(f"  {name:<26} {statistics.median(values):.3f} s   ratio {statistics.median(values) / base:.3f}")


if __name__ == "__main__":
    main()
    in_process()
