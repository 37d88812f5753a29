"""What keeping a run's code snapshot costs (targets: under 0.1 s per launch; one copy per
distinct content over a sweep of unchanged code and data).

Two real runs are made first (the mnist task on the packaged sample, and a script that
imports two helper modules and reads a small .npz by a relative name). Then, side by
side in this process, each run's snapshot is taken again N times (``keep.keep_snapshot``,
what the launcher does before sealing) into a fresh store (cold: every object copied)
and into the same store (warm: every object already there, as for every run after the
first of unchanged code). Finally a 10-seed sweep of the script shows the store's growth:
the bytes of objects against the bytes one run's snapshot names.

    python benchmarks/bench_snapshot.py [N]
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, tree_env

sys.path.insert(0, str(REPO))

from omegaconf import OmegaConf  # noqa: E402

from launcher.record import keep
from launcher.run import job  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 20

SCRIPT = """import sys
import numpy as np
import keras
import helper_a, helper_b
with np.load(sys.argv[1]) as f:
    x, y = f["x_train"][:600].reshape(-1, 784) / 255.0, f["y_train"][:600]
m = keras.Sequential([keras.Input((784,)), keras.layers.Dense(helper_a.UNITS), keras.layers.Dense(10)])
m.compile(keras.optimizers.SGD(helper_b.LR), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
m.fit(x, y, batch_size=100, epochs=1, verbose=0)
"""


def _launch(cwd: Path, *overrides: str) -> Path:
    done = subprocess.run([sys.executable, "-m", "launcher", *overrides], cwd=cwd, env=tree_env(),
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"launch failed: {(done.stdout + done.stderr)[-3000:]}")
    return cwd / done.stdout.strip().splitlines()[-1].split()[2]


def _objects_bytes(store: Path) -> int:
    return sum(p.stat().st_size for p in (store / "objects").rglob("*") if p.is_file())


def _time_snapshot(run: Path, launch_dir: str, stores: Path) -> tuple[float, float]:
    resolved = OmegaConf.load(run / job.CONFIG)
    fp = json.loads((run / job.FINGERPRINT).read_text())
    cold, warm = [], []
    for i in range(N):
        fresh = stores / f"cold-{i}" / "r"
        fresh.mkdir(parents=True)
        start = time.perf_counter()
        keep.keep_snapshot(fresh, resolved, fp, launch_dir)
        cold.append(time.perf_counter() - start)
        again = stores / "warm" / f"r{i}"
        again.mkdir(parents=True)
        start = time.perf_counter()
        keep.keep_snapshot(again, resolved, fp, launch_dir)
        warm.append(time.perf_counter() - start)
    return statistics.median(cold), statistics.median(warm[1:] or warm)


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-snapshot-"))
    try:
        project = work / "project"
        project.mkdir()
        (project / "train.py").write_text(SCRIPT)
        (project / "helper_a.py").write_text("UNITS = 32\n")
        (project / "helper_b.py").write_text("LR = 0.1\n")
        shutil.copy(REPO / "tests" / "data" / "mnist-small" / "mnist-small.npz", project / "digits.npz")
        script = ("train=script", "train.script=train.py", "train.args=[digits.npz]")
        mnist_run = _launch(project, "train.epochs=1", "store.root=mnist-store")
        script_run = _launch(project, *script, "store.root=script-store")
        print(f"snapshot per launch (medians of {N}; cold = every object copied, warm = all already stored)")
        data_kb = (project / "digits.npz").stat().st_size // 1024
        runs = (("mnist task (bundled sample)", mnist_run), (f"script + 2 helpers + {data_kb} KiB", script_run))
        for name, run in runs:
            cold, warm = _time_snapshot(run, str(project), work / f"stores-{run.name}")
            files = json.loads((run / "snapshot.json").read_text())["files"]
            print(f"  {name:<34} {len(files)} file(s): cold {cold * 1000:6.1f} ms   warm {warm * 1000:6.1f} ms"
                  f"   (target < 100 ms)")  # fmt: skip
        one = _objects_bytes(project / "script-store")
        start = time.perf_counter()
        argv = [sys.executable, "-m", "launcher", "-m", *script, "store.root=sweep-store", "+seed=range(10)"]
        done = subprocess.run(argv, cwd=project, env=tree_env(), capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"sweep failed: {(done.stdout + done.stderr)[-3000:]}")
        swept = _objects_bytes(project / "sweep-store")
        runs = list((project / "sweep-store").glob("20*"))
        print(f"store growth over a 10-seed sweep ({len(runs)} runs, {time.perf_counter() - start:.0f} s): "
              f"objects {swept} bytes against {one} for one run = {swept / one:.2f}x (target 1.00x: one copy)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
