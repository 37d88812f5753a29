"""Checkpoint overhead per epoch on the mnist task (target: under 5 % of the epoch time).

Two measurements, side by side in one run:
1. inside each checkpointing run, the time spent saving each checkpoint against the
   time of the epoch it ends (robust to a noisy machine: same process, same moment);
2. the same strict job with checkpoints every epoch and with checkpoints off,
   interleaved, N times each: median epoch times (epochs 2..E, so the first epoch's
   tracing does not count) and their ratio.

    python benchmarks/bench_checkpoint.py [N] [EPOCHS]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from common import launch

N = int(sys.argv[1]) if len(sys.argv) > 1 else 3
EPOCHS = int(sys.argv[2]) if len(sys.argv) > 2 else 4


def timings(store: Path, every: int) -> dict:
    _, result = launch(store, "determinism=strict", f"train.epochs={EPOCHS}", f"train.checkpoint_every={every}")
    return result["timings"]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "runs"
        on: list[float] = []
        off: list[float] = []
        shares: list[float] = []
        for _ in range(N):
            t = timings(store, 1)
            on += t["epoch_s"][1:]
            shares += [c / (e - c) for c, e in zip(t["checkpoint_s"][1:], t["epoch_s"][1:], strict=True)]
            off += timings(store, 0)["epoch_s"][1:]
    m_on, m_off = statistics.median(on), statistics.median(off)
    print(f"checkpoint benchmark: strict mnist on the packaged sample, {N} runs x {EPOCHS - 1} epochs each way")
    share = statistics.median(shares)
    verdict = "OK" if share < 0.05 else "OVER"
    print(f"in-run: median checkpoint time / epoch time: {share:.1%} (target < 5 %): {verdict}")
    print(f"  median epoch with a checkpoint every epoch: {m_on:.3f} s")
    print(f"  median epoch without checkpoints:           {m_off:.3f} s")
    overhead = m_on / m_off - 1
    print(f"A/B: ratio with/without: {m_on / m_off:.3f}  overhead {overhead:+.1%} (noisy: runs differ in time)")


if __name__ == "__main__":
    main()
