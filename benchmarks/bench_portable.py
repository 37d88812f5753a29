"""What determinism=portable costs against strict, and how long an emulated replay takes (issue 30).

portable is strict with every runtime ISA dispatch capped at x86-64-v3 (AVX2 + FMA): on a
CPU with AVX-512 the capped kernels are the AVX2 ones. Modes, each a real ``launch
train=mnist +seed=0`` in a temporary store, run round-robin N times:

=========  ======================================
strict     ``determinism=strict``
portable   ``determinism=portable``
=========  ======================================

Printed: medians of whole-launch wall time and of training time (the sum of
``timings.epoch_s`` over epochs 2..E; epoch 1 includes tf.function tracing), each as
portable / strict. Then, with qemu-x86_64 installed, the wall time of one
``launch replay RUN --cpu Haswell`` of a portable run (an emulated job: TensorFlow's
import alone takes tens of seconds there) against the native run's.

    python benchmarks/bench_portable.py [N] [EPOCHS] [DATA] [MAX_SAMPLES]

N rounds (default 5), EPOCHS per run (default 3), DATA ``sample`` (default: the
packaged 2,000-image sample) or a Keras-layout ``mnist.npz``, MAX_SAMPLES (default all).
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from common import _runs, launch, timed

N = int(sys.argv[1]) if len(sys.argv) > 1 else 5
EPOCHS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
DATA = sys.argv[3] if len(sys.argv) > 3 else "sample"
MAX_SAMPLES = sys.argv[4] if len(sys.argv) > 4 else "null"
MODES = {"strict": ("determinism=strict",), "portable": ("determinism=portable",)}


def measure(store: Path, data: str, mode: tuple[str, ...]) -> tuple[float, float, str]:
    """One run: (training seconds over epochs 2..E, whole-command wall seconds, weights hash)."""
    wall, result = launch(
        store,
        "train=mnist",
        f"train.data={data}",
        f"train.epochs={EPOCHS}",
        f"train.max_samples={MAX_SAMPLES}",
        "+seed=0",
        *mode,
    )
    return sum(result["timings"]["epoch_s"][1:]), wall, result["weights_sha256"]


def main() -> None:
    if EPOCHS < 2:
        sys.exit("EPOCHS must be at least 2 (epoch 1 is dropped)")
    data = DATA if DATA in ("sample", "full") else str(Path(DATA).resolve())
    samples: dict[str, list[tuple[float, float, str]]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "runs"
        for _ in range(N):  # round-robin: every mode once per round
            for mode, args in MODES.items():
                samples[mode].append(measure(store, data, args))
        med = {
            m: (statistics.median(t for t, _, _ in s), statistics.median(w for _, w, _ in s))
            for m, s in samples.items()
        }
        print(
            f"portable benchmark: mnist on {DATA} (max_samples {MAX_SAMPLES}), {EPOCHS} epochs, {N} interleaved "
            "rounds, medians"
        )
        print(f"  {'mode':<10} {'whole launch':>12} {'/ strict':>9} {'training':>9} {'/ strict':>9}  weights")
        for mode, (train, wall) in med.items():
            hashes = sorted({h[:12] for _, _, h in samples[mode]})
            print(
                f"  {mode:<10} {wall:11.2f}s {wall / med['strict'][1]:9.3f} {train:8.2f}s "
                f"{train / med['strict'][0]:9.3f}  {', '.join(hashes)}"
            )
        if shutil.which("qemu-x86_64") is None:
            print("  emulated replay: skipped (qemu-x86_64 is not installed: apt-get install qemu-user)")
            return
        before = _runs(store)
        native, _ = launch(
            store,
            "train=mnist",
            f"train.data={data}",
            "train.epochs=1",
            f"train.max_samples={MAX_SAMPLES}",
            "+seed=0",
            "determinism=portable",
        )
        (run,) = _runs(store) - before
        emulated, out = timed([sys.executable, "-m", "launcher", "replay", str(run), "--cpu", "Haswell"])
        verdict = next(
            (line.split(":")[0] for line in out.splitlines() if line.split(":")[0] in ("REPRODUCED", "DIVERGED")), "?"
        )
        print(
            f"  emulated replay (--cpu Haswell, 1 epoch): {emulated:.1f}s against {native:.1f}s native "
            f"({emulated / native:.1f}x): {verdict}"
        )


if __name__ == "__main__":
    main()
