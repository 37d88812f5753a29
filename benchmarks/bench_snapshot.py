"""What keeping a run's code snapshot costs (targets: under 0.1 s per launch; one copy per
distinct content over a sweep of unchanged code and data).

Two real runs are made first (the mnist task on the packaged sample, and a script that
imports two helper modules and reads a small .npz by a relative name). Then, side by
side in this process, each run's snapshot is taken again N times (``keep.keep_snapshot``,
what the launcher does before sealing) into a fresh store (cold: every object copied)
and into the same store (warm: every object already there, as for every run after the
first of unchanged code). Finally a 10-seed sweep of the script shows the store's growth:
the bytes of objects against the bytes one run's snapshot names.

``--first-checkpoint [REV]`` measures instead what keeping the snapshot costs the job
itself (issue 40): a script that reads 3,000 small files with open() and fits a tiny model
for 2 epochs, checkpointed after each, is run by the launcher of this tree and by that of
``REV`` (``git archive``; default: the commit before the job's checkpoints kept code only,
when they still copied every data file read so far), alternately, each into a fresh store;
it prints the job's first-checkpoint time (``result.json``'s ``timings.checkpoint_s[0]``)
and the whole launch's, side by side, with their ratio.

    python benchmarks/bench_snapshot.py [N]
    python benchmarks/bench_snapshot.py --first-checkpoint [REV] [N]
"""

from __future__ import annotations

import hashlib
import json
import os
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

from launcher.record import layout  # noqa: E402
from launcher.record.store import keep  # noqa: E402

FIRST_CHECKPOINT = "--first-checkpoint" in sys.argv
_ARGS = [a for a in sys.argv[1:] if a != "--first-checkpoint"]
BEFORE = _ARGS.pop(0) if FIRST_CHECKPOINT and _ARGS and not _ARGS[0].isdigit() else "f16ca2ceff66"
N = int(_ARGS[0]) if _ARGS else (2 if FIRST_CHECKPOINT else 20)
N_FILES = 3000

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
    done = subprocess.run(
        [sys.executable, "-m", "launcher", *overrides], cwd=cwd, env=tree_env(), capture_output=True, text=True
    )
    if done.returncode != 0:
        sys.exit(f"launch failed: {(done.stdout + done.stderr)[-3000:]}")
    return cwd / done.stdout.strip().splitlines()[-1].split()[2]


def _objects_bytes(store: Path) -> int:
    return sum(p.stat().st_size for p in (store / "objects").rglob("*") if p.is_file())


def _time_snapshot(run: Path, launch_dir: str, stores: Path) -> tuple[float, float]:
    resolved = OmegaConf.load(run / layout.CONFIG)
    fp = json.loads((run / layout.FINGERPRINT).read_text())
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


def _checkpoint_run(project: Path, store: Path, launcher_dir: Path) -> tuple[float, float, int]:
    """One launch of the 3,000-file job by the launcher in ``launcher_dir``: its first checkpoint's
    seconds, the whole launch's, and the files its snapshot kept."""
    env = tree_env()
    env["PYTHONPATH"] = f"{launcher_dir}{os.pathsep}{env['PYTHONPATH']}"
    start = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "launcher",
            "train=script",
            "train.script=train.py",
            "train.args=[data]",
            f"store.root={store}",
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"launch failed: {(done.stdout + done.stderr)[-3000:]}")
    run = project / done.stdout.strip().splitlines()[-1].split()[2]
    first = json.loads((run / "result.json").read_text())["timings"]["checkpoint_s"][0]
    return first, wall, len(json.loads((run / "snapshot.json").read_text())["files"])


def first_checkpoint() -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-snapshot-ckpt-"))
    try:
        before = work / "before"
        before.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", BEFORE, "launcher"], capture_output=True)
        if archive.returncode != 0:
            sys.exit(f"git archive {BEFORE} failed: {archive.stderr.decode()[-500:]}")
        subprocess.run(["tar", "-x", "-C", str(before)], input=archive.stdout, check=True)
        project = work / "project"
        (project / "data").mkdir(parents=True)
        shutil.copy(REPO / "tests" / "integration" / "scripts" / "many_files.py", project / "train.py")
        for n in range(N_FILES):
            (project / "data" / f"f{n:05d}.bin").write_bytes(hashlib.sha256(str(n).encode()).digest()[:16] + b"." * 100)
        times: dict[str, list[tuple[float, float, int]]] = {"before": [], "after": []}
        for i in range(N):  # alternately: the machine's drift is shared
            times["before"].append(_checkpoint_run(project, work / f"store-before-{i}", before))
            times["after"].append(_checkpoint_run(project, work / f"store-after-{i}", REPO))
        print(
            f"the job's first checkpoint, a script reading {N_FILES} files of 116 bytes (medians of {N}, "
            f"each into a fresh store; before = {BEFORE}, after = this tree)"
        )
        print(f"  {'':<24}{'before':>10}{'after':>10}{'before/after':>14}")
        for label, k in (("first checkpoint (s)", 0), ("whole launch (s)", 1)):
            b, a = (statistics.median(t[k] for t in times[side]) for side in ("before", "after"))
            print(f"  {label:<24}{b:>10.2f}{a:>10.2f}{b / a:>13.1f}x")
        print(f"  files kept per run: before {times['before'][0][2]}, after {times['after'][0][2]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    if FIRST_CHECKPOINT:
        first_checkpoint()
        return
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
            print(
                f"  {name:<34} {len(files)} file(s): cold {cold * 1000:6.1f} ms   warm {warm * 1000:6.1f} ms"
                f"   (target < 100 ms)"
            )
        one = _objects_bytes(project / "script-store")
        start = time.perf_counter()
        argv = [sys.executable, "-m", "launcher", "-m", *script, "store.root=sweep-store", "+seed=range(10)"]
        done = subprocess.run(argv, cwd=project, env=tree_env(), capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"sweep failed: {(done.stdout + done.stderr)[-3000:]}")
        swept = _objects_bytes(project / "sweep-store")
        runs = list((project / "sweep-store").glob("20*"))
        print(
            f"store growth over a 10-seed sweep ({len(runs)} runs, {time.perf_counter() - start:.0f} s): "
            f"objects {swept} bytes against {one} for one run = {swept / one:.2f}x (target 1.00x: one copy)"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
