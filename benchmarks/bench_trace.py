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

    python benchmarks/bench_trace.py [N] [EPOCHS]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from common import launch

N = int(sys.argv[1]) if len(sys.argv) > 1 else 3
EPOCHS = int(sys.argv[2]) if len(sys.argv) > 2 else 4
MODES = {"every step": 1, "every 10 steps (default)": 10, "no trace": 0}
EPOCH_STEPS = 32  # the packaged sample: 2,000 images in batches of 64


def timings(store: Path, every: int) -> dict:
    _, result = launch(store, "determinism=strict", f"train.epochs={EPOCHS}", "train.checkpoint_every=0",
                       f"determinism.trace_every={every}")  # fmt: skip
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
        print(f"  {mode:<26} median epoch {median:.3f} s   in-run trace share {share:6.2%}   "
              f"A/B ratio to no trace {median / base:.3f}")  # fmt: skip
    default = statistics.median(epochs["every 10 steps (default)"]) / base
    steps = EPOCH_STEPS
    extra_ms = (statistics.median(epochs["every 10 steps (default)"]) - base) / steps * 1000
    print(f"default trace: A/B ratio {default:.3f} (target <= 1.05): {'OK' if default <= 1.05 else 'OVER'}; "
          f"{extra_ms:+.2f} ms per step of {base / steps * 1000:.1f} ms")


if __name__ == "__main__":
    main()
