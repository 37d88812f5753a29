"""The cost of watching native reads at the OS level (``launcher.job.observe.fswatch``).

The worst case for the watch: a ``tf.data`` pipeline that opens every image of a
directory natively each epoch (``tf.io.read_file`` in a ``map``, names from an index), so
every open is an event the job's watch thread reads. Side by side in one process,
interleaved, N rounds of E epochs each:

- ``fanotify``: the image directory's tree watched, as a job's is (the index is read beside
  it), with fanotify (what a job uses where the kernel allows it);
- ``inotify``: the same with inotify (the fallback);
- ``unwatched``: no watch.

Printed: the median epoch time of each, wall and CPU (all threads of the process: the
watch thread's work counts, other processes' does not, so it is the steadier figure on a
busy machine), their ratios (target: CPU at most 1.05x), the files a watched round saw,
and the time to start a watch over the tree. A backend this machine lacks is left out.

    python benchmarks/bench_fswatch.py [N] [EPOCHS] [IMAGES]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

N = int(sys.argv[1]) if len(sys.argv) > 1 else 5
EPOCHS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
IMAGES = int(sys.argv[3]) if len(sys.argv) > 3 else 2000


def main() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf

    from launcher.job.observe import fswatch

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "data"
        rng = np.random.default_rng(0)
        for i in range(IMAGES):  # 20 directories of 100 images, as class folders are
            path = root / f"class{i % 20:02d}" / f"{i}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            tf.io.write_file(str(path), tf.io.encode_png(rng.integers(0, 255, (28, 28, 1), dtype=np.uint8)))
        files = sorted(str(p) for p in root.rglob("*.png"))

        def load(path):
            return tf.cast(tf.io.decode_png(tf.io.read_file(path), channels=1), tf.float32) / 255.0

        dataset = tf.data.Dataset.from_tensor_slices(files).map(load).batch(64)

        def epoch() -> tuple[float, float]:
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in dataset:
                pass
            return time.perf_counter() - wall, time.process_time() - cpu

        epoch()  # trace the map function once, outside the measurement
        backends = {}
        for name in ("Fanotify", "Inotify"):
            try:
                getattr(fswatch, name)().close()
                backends[name.lower()] = getattr(fswatch, name)
            except (ImportError, OSError, AttributeError) as e:
                print(f"  ({name.lower()} left out: {e})")
        if not backends:
            sys.exit("neither fanotify nor inotify here: nothing to measure")
        times: dict[str, list[tuple[float, float]]] = {"unwatched": [], **{name: [] for name in backends}}
        starts: dict[str, list[float]] = {name: [] for name in backends}
        seen: dict[str, list[int]] = {name: [] for name in backends}
        for _ in range(N):
            for mode in times:
                watch = None
                if mode in backends:
                    begun = time.perf_counter()
                    watch = fswatch.Watch(skip=[], using=[backends[mode]()])
                    watch.add_tree(str(root))
                    starts[mode].append(time.perf_counter() - begun)
                times[mode] += [epoch() for _ in range(EPOCHS)]
                if watch is not None:
                    watch.stop()
                    seen[mode].append(len(watch.opened))
    print(f"native-read watch: {IMAGES} PNGs in 20 directories read natively by tf.data, {N} rounds x {EPOCHS} epochs")
    medians = {mode: [statistics.median(t[i] for t in values) for i in (0, 1)] for mode, values in times.items()}
    base = medians["unwatched"]
    for mode, (wall, cpu) in medians.items():
        extra = (
            ""
            if mode not in backends
            else (
                f"; {statistics.median(seen[mode]):.0f} files seen per round, "
                f"started in {statistics.median(starts[mode]) * 1000:.1f} ms"
            )
        )
        print(
            f"  {mode:<10} median epoch {wall:.3f} s wall ({wall / base[0]:.3f}x), {cpu:.3f} s CPU "
            f"({cpu / base[1]:.3f}x){extra}"
        )
    for mode in backends:
        ratio = medians[mode][1] / base[1]
        print(f"{mode} / unwatched epoch CPU time: {ratio:.3f} (target <= 1.05): {'OK' if ratio <= 1.05 else 'OVER'}")


if __name__ == "__main__":
    main()
