"""The cost of TensorBoard event files (always on) and of ``tracking=mlflow``, on the mnist job.

1. The event writer alone: rewriting a whole event file from a long run's records
   (EPOCHS_BIG epochs x 4 metrics, TRACE_BIG traced steps), and one poll of the live
   follower when nothing is new (what the launcher's thread does every 2 s while a job runs).
2. Whole ``launch`` runs, side by side, interleaved, N times each:
   - ``tensorboard off``: the follower patched out (a benchmark-only switch: the product has none);
   - ``tensorboard on``: the default;
   - ``+ tracking=mlflow``: also logged to MLflow (SQLite in the store) after sealing.
   Printed: median wall seconds and the ratios to ``tensorboard off``, and whether all gave
   the same weights (neither may change a bit: the job process is never touched).
3. What ``tracking=mlflow`` adds after the seal, alone: ``tracking.log_run`` of a sealed run
   in a fresh process (mlflow's import included), into a new store (the database is
   created) and into a store that has one.

    python benchmarks/bench_tracking.py [N] [EPOCHS]
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import timed

N = int(sys.argv[1]) if len(sys.argv) > 1 else 3
EPOCHS = int(sys.argv[2]) if len(sys.argv) > 2 else 2
EPOCHS_BIG, TRACE_BIG = 100, 10_000
ROOT = Path(__file__).resolve().parents[1]

# Runs `launch` with the TensorBoard follower replaced by a no-op when argv[1] == "off".
WRAPPER = """
import contextlib, sys
sys.path.insert(0, {root!r})
if sys.argv[1] == "off":
    import launcher.record.tbevents as t
    t.follow = lambda *a, **k: contextlib.nullcontext()
from launcher.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


def writer_cost(tmp: Path) -> tuple[float, float, int]:
    """Median seconds to (re)write a long run's event file, median seconds of an idle poll, file bytes."""
    sys.path.insert(0, str(ROOT))
    from launcher.record import tbevents

    run = tmp / "big-run"
    run.mkdir()
    metrics = [
        {"epoch": e, "loss": 1 / e, "accuracy": 1 - 1 / e, "val_loss": 1.1 / e, "val_accuracy": 0.9}
        for e in range(1, EPOCHS_BIG + 1)
    ]
    layers = [[f"layer{i}", "0123456789abcdef"] for i in range(8)]
    trace = [
        {"step": s, "epoch": s // 100, "loss": 1 / (s + 1), "weights": "f" * 64, "layers": layers}
        for s in range(TRACE_BIG)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    (run / "trace.jsonl").write_text("".join(json.dumps(p) + "\n" for p in trace))
    log = tbevents.EventLog(run)
    rewrite, poll = [], []
    for _ in range(5):
        started = time.perf_counter()
        log.start()
        rewrite.append(time.perf_counter() - started)
        started = time.perf_counter()
        log.sync()
        poll.append(time.perf_counter() - started)
    return statistics.median(rewrite), statistics.median(poll), log.path.stat().st_size


LOG_RUN = """
import sys, time
sys.path.insert(0, {root!r})
from launcher.record import tracking
started = time.perf_counter()
assert tracking.log_run(sys.argv[1])
print(time.perf_counter() - started)
"""


def log_run_cost(run: Path, tmp: Path) -> tuple[float, float]:
    """Median seconds of log_run in a fresh process: into a new database, and into an existing one."""
    import shutil
    import subprocess

    fresh, existing = [], []
    for i in range(N):
        store = tmp / f"log-store-{i}"
        store.mkdir()
        copy = store / run.name
        shutil.copytree(run, copy)
        for times in (fresh, existing):
            done = subprocess.run(
                [sys.executable, "-c", LOG_RUN.format(root=str(ROOT)), str(copy)],
                capture_output=True,
                text=True,
                check=True,
            )
            times.append(float(done.stdout.strip().splitlines()[-1]))
    return statistics.median(fresh), statistics.median(existing)


def main() -> None:
    modes = {
        "tensorboard off": ("off", ()),
        "tensorboard on": ("on", ()),
        "+ tracking=mlflow": ("on", ("tracking=mlflow",)),
    }
    walls: dict[str, list[float]] = {m: [] for m in modes}
    weights: dict[str, set[str]] = {m: set() for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        rewrite, poll, size = writer_cost(Path(tmp))
        print(
            f"event file of {EPOCHS_BIG} epochs x 4 metrics + {TRACE_BIG} traced steps ({size} bytes): "
            f"written in {rewrite * 1000:.0f} ms (median of 5); an idle poll: {poll * 1e6:.0f} us"
        )
        wrapper = Path(tmp) / "launch_wrapper.py"
        wrapper.write_text(WRAPPER.format(root=str(ROOT)))
        for i in range(N):
            for mode, (tb, extra) in modes.items():
                store = Path(tmp) / f"store-{i}-{tb}-{len(extra)}"
                argv = [sys.executable, str(wrapper), tb, f"train.epochs={EPOCHS}", f"store.root={store}", *extra]
                wall, _ = timed(argv)
                (run,) = [p for p in store.iterdir() if p.is_dir() and p.name[0].isdigit()]
                walls[mode].append(wall)
                weights[mode].add(json.loads((run / "result.json").read_text())["weights_sha256"])
                assert (run / "tensorboard").is_dir() == (tb == "on")
                tracked_run = run
        base = statistics.median(walls["tensorboard off"])
        print(f"whole launch, mnist sample, {EPOCHS} epochs, N={N} interleaved (median wall s, ratio to off):")
        for mode in modes:
            med = statistics.median(walls[mode])
            runs = ", ".join(f"{w:.2f}" for w in walls[mode])
            print(f"  {mode:<18} {med:7.2f} s  {med / base:5.3f}x   runs: {runs}")
        fresh, existing = log_run_cost(tracked_run, Path(tmp))  # the last run of "+ tracking=mlflow"
        print(
            f"tracking.log_run alone, fresh process (N={N}, median): {fresh:.2f} s into a new database, "
            f"{existing:.2f} s into an existing one"
        )
    same = len(set().union(*weights.values())) == 1
    print(f"same weights in every mode: {same}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
