"""What strict costs on the mnist task: its defaults, and each cause apart.

Modes, each a real ``launch train=mnist +seed=0`` in a temporary store, run round-robin
N times so that drift on a noisy machine hits all alike. Every mode runs with its own
level's defaults (strict checkpoints every epoch and traces every 10 steps; off does
neither), since that is what a user pays:

=======================================  ==========================================================
off                                      ``determinism=off``: TensorFlow's defaults (threads = cores, oneDNN on)
strict (defaults)                        ``determinism=strict``
strict at off's thread count             strict with both thread counts ``auto`` (= the cores, as off)
strict, oneDNN off                       strict's defaults with ``determinism.onednn_opts=false``
strict, inter-op threads = cores         strict's defaults with ``determinism.inter_op_threads=auto``
seeded                                   ``determinism=seeded``
=======================================  ==========================================================

Printed, as medians and ratios to off, on whole-launch wall time (what the user waits
for) and on training time (the sum of ``timings.epoch_s`` over epochs 2..E: epoch 1
includes tf.function tracing):

- strict's defaults / off: target <= 1.25 (the TF 2.3 reproducibility report, seed 003,
  paid 1.26x);
- strict at off's thread count / off: target <= 1.05 (determinism itself);
- what oneDNN off and inter-op pinning would add, for the record of why the defaults are
  what they are.

    python benchmarks/bench_determinism.py [N] [EPOCHS] [DATA] [MAX_SAMPLES]

N rounds (default 5), EPOCHS per run (default 4), DATA ``sample`` (default: the packaged
2,000-image sample) or the path of a Keras-layout ``mnist.npz`` (the issue's measurement
used 8,000 real MNIST training images), MAX_SAMPLES (default: all).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from common import launch

N = int(sys.argv[1]) if len(sys.argv) > 1 else 5
EPOCHS = int(sys.argv[2]) if len(sys.argv) > 2 else 4
DATA = sys.argv[3] if len(sys.argv) > 3 else "sample"
MAX_SAMPLES = sys.argv[4] if len(sys.argv) > 4 else "null"
CORES = ("determinism.intra_op_threads=auto", "determinism.inter_op_threads=auto")

MODES = {
    "off": ("determinism=off",),
    "strict (defaults)": ("determinism=strict",),
    "strict at off's thread count": ("determinism=strict", *CORES),
    "strict, oneDNN off": ("determinism=strict", "determinism.onednn_opts=false"),
    "strict, inter-op threads = cores": ("determinism=strict", "determinism.inter_op_threads=auto"),
    "seeded": ("determinism=seeded",),
}
TARGETS = {"strict (defaults)": 1.25, "strict at off's thread count": 1.05}


def measure(store: Path, data: str, mode: tuple[str, ...]) -> tuple[float, float]:
    """One run: (training seconds over epochs 2..E, whole-command wall seconds)."""
    wall, result = launch(
        store,
        "train=mnist",
        f"train.data={data}",
        f"train.epochs={EPOCHS}",
        f"train.max_samples={MAX_SAMPLES}",
        "+seed=0",
        *mode,
    )
    return sum(result["timings"]["epoch_s"][1:]), wall


def main() -> None:
    if EPOCHS < 2:
        sys.exit("EPOCHS must be at least 2 (epoch 1 is dropped)")
    data = DATA if DATA in ("sample", "full") else str(Path(DATA).resolve())
    samples: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "runs"
        for _ in range(N):  # round-robin: every mode once per round
            for mode, args in MODES.items():
                samples[mode].append(measure(store, data, args))
    med = {m: (statistics.median(t for t, _ in s), statistics.median(w for _, w in s)) for m, s in samples.items()}
    rounds = {m: [w / off_w for (_, w), (_, off_w) in zip(s, samples["off"], strict=True)] for m, s in samples.items()}
    print(
        f"determinism benchmark: mnist on {DATA} (max_samples {MAX_SAMPLES}), {EPOCHS} epochs, {N} interleaved "
        "rounds, medians"
    )
    print(f"  {'mode':<34} {'whole launch':>12} {'/ off':>7} {'per round (min-max)':>20} {'training':>9} {'/ off':>7}")
    for mode, (train, wall) in med.items():
        spread = f"{min(rounds[mode]):.2f}-{max(rounds[mode]):.2f}"
        line = (
            f"  {mode:<34} {wall:11.2f}s {wall / med['off'][1]:7.3f} {spread:>20} {train:8.2f}s "
            f"{train / med['off'][0]:7.3f}"
        )
        if mode in TARGETS:
            verdict = "OK" if wall / med["off"][1] <= TARGETS[mode] else "OVER"
            line += f"   target <= {TARGETS[mode]} (whole launch): {verdict}"
        print(line)


if __name__ == "__main__":
    main()
