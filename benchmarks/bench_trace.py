"""The cost of the step trace (the divergence locator) on the mnist task.

Two measurements, side by side in one run:
1. inside each traced run, the time spent recording trace points against the epoch
   it belongs to (same process, same moment: robust on a noisy machine);
2. the same strict job traced every step, every 10 steps (the default) and not at
   all, interleaved, N times each: median epoch times (epochs 2..E, so the first
   epoch's tracing of tf.functions does not count) and their ratios to no trace.

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
    default = statistics.median(shares["every 10 steps (default)"])
    verdict = "OK" if default < 0.01 else "OVER"
    print(f"default trace, in-run share of the epoch: {default:.2%} (target < 1 %): {verdict}")


if __name__ == "__main__":
    main()
