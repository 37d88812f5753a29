"""The cost of determinism on the mnist task, each cause measured apart.

Five modes, each a real ``launch train=mnist +seed=0`` in a temporary store, run
round-robin N times so that drift on a noisy machine hits all alike:

====================================  =================================================================
off                                   ``determinism=off`` (TensorFlow's defaults: threads = cores, oneDNN on)
seeded                                ``determinism=seeded``
strict, threads=cores, oneDNN on      strict with off's threads and oneDNN: only determinism differs
strict, threads=cores                 strict with both thread counts ``auto`` (oneDNN off, strict's default)
strict (default)                      ``determinism=strict``: 1 intra- and 1 inter-op thread, oneDNN off
====================================  =================================================================

The ratios printed, on training time and on whole-launch wall time:

- determinism itself: strict(threads=cores, oneDNN on) / off: seeds, op determinism,
  ordered tf.data, XLA off. Target <= 1.05. (The TF 2.3 reproducibility report measured
  1.26x for strict on its GPU setup.)
- oneDNN off, strict's default (results independent of oneDNN's ISA-specific kernels):
  strict(threads=cores) / strict(threads=cores, oneDNN on).
- pinning fewer threads than the machine has: strict(default) / strict(threads=cores).
- the whole price of strict's defaults: strict(default) / off; and seeded / off.

Every mode runs with ``train.checkpoint_every=0`` and ``determinism.trace_every=0``:
checkpoints and the step trace are not determinism (``off`` has neither by default) and
have their own benchmarks (a per-step Keras callback costs a sync every step, so a
trace left on would be counted here). "Training time" is the sum of
``timings.epoch_s`` over epochs 2..E (epoch 1 includes tf.function tracing).

    python benchmarks/bench_determinism.py [N] [EPOCHS] [DATA]

N rounds (default 5), EPOCHS per run (default 10), DATA ``sample`` (default: the packaged
2,000-image sample) or the path of a Keras-layout ``mnist.npz``.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from common import launch

N = int(sys.argv[1]) if len(sys.argv) > 1 else 5
EPOCHS = int(sys.argv[2]) if len(sys.argv) > 2 else 10
DATA = sys.argv[3] if len(sys.argv) > 3 else "sample"
TARGET = 1.05
CORES = ("determinism.intra_op_threads=auto", "determinism.inter_op_threads=auto")

MODES = {
    "off": ("determinism=off",),
    "seeded": ("determinism=seeded",),
    "strict, threads=cores, oneDNN on": ("determinism=strict", *CORES, "determinism.onednn_opts=true"),
    "strict, threads=cores": ("determinism=strict", *CORES),
    "strict (default)": ("determinism=strict",),
}


def measure(store: Path, data: str, mode: tuple[str, ...]) -> tuple[float, float]:
    """One run: (training seconds over epochs 2..E, whole-command wall seconds)."""
    wall, result = launch(store, "train=mnist", f"train.data={data}", f"train.epochs={EPOCHS}",
                          "train.checkpoint_every=0", "+seed=0", *mode, "determinism.trace_every=0")  # fmt: skip
    return sum(result["timings"]["epoch_s"][1:]), wall


def ratio_line(label: str, num: str, den: str, med: dict[str, tuple[float, float]], target: bool = False) -> str:
    train, wall = med[num][0] / med[den][0], med[num][1] / med[den][1]
    line = f"  {label:<58} {train:6.3f}   {wall:6.3f}"
    if target:
        line += f"   target <= {TARGET} (training): {'OK' if train <= TARGET else 'OVER'}"
    return line


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
    print(f"determinism benchmark: mnist on {DATA}, {EPOCHS} epochs, {N} interleaved rounds, medians (seconds)")
    print(f"  {'mode':<34} {'training (epochs 2..E)':>22} {'whole launch':>14}")
    for mode, (train, wall) in med.items():
        print(f"  {mode:<34} {train:22.3f} {wall:14.3f}")
    print(f"  {'ratio':<58} {'train':>6}   {'wall':>6}")
    print(ratio_line("determinism itself: strict(cores, oneDNN on) / off", "strict, threads=cores, oneDNN on",
                     "off", med, target=True))  # fmt: skip
    print(ratio_line("oneDNN off: strict(cores) / strict(cores, oneDNN on)", "strict, threads=cores",
                     "strict, threads=cores, oneDNN on", med))  # fmt: skip
    print(ratio_line("fewer threads: strict(1 thread) / strict(cores)", "strict (default)",
                     "strict, threads=cores", med))  # fmt: skip
    print(ratio_line("strict's defaults in all: strict(default) / off", "strict (default)", "off", med))
    print(ratio_line("seeded / off", "seeded", "off", med))


if __name__ == "__main__":
    main()
