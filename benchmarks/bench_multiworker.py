"""Many workers (issue 49): 1 against 2 workers, and launch's overhead for 2 against starting them by hand.

Side by side in one run, each a whole command in a fresh process, interleaved N rounds
(alternating the order) so that drift on a noisy machine hits all alike. The training is
``tests/integration/scripts/multi_worker_loop.py`` (the TensorFlow tutorial's custom loop
under ``MultiWorkerMirroredStrategy``, a global batch of 64 whatever the worker count):

- by hand, 2 workers: the script started twice with its ``TF_CONFIG`` (two free localhost
  ports, index 0 and 1), under a small wrapper that applies what ``determinism=strict`` does
  (the TF_* variables and PYTHONHASHSEED before start, 1 intra- and 1 inter-op thread, op
  determinism, every seed) and gives the strategy RING where it asks for AUTO, as the
  bootstrap does; timed until both have ended;
- launch, 2 workers: ``launch train=script ... distribute.workers=2`` (two bootstraps,
  every worker's fingerprint, records and trace, the settle, the seal, the index);
- launch, 1 worker: the same with ``distribute.workers=1`` (the same global batch on one
  process).

Both 2-worker sides must print the same per-epoch losses to 4 decimals (the same training;
the wrapper applies strict's settings, not the whole bootstrap, so the last digits may differ),
and two launches bitwise the same, or the benchmark fails. Prints the median wall times, the
1-vs-2 worker times, and the launcher's overhead for 2 workers (ratio launch / by hand;
target <= 1.05) with its parts from the run's own timings (bootstrap, fingerprint) and the
rest (start-up, settle, seal).

    python benchmarks/bench_multiworker.py [N] [EPOCHS]

N rounds (default 3); EPOCHS (default 30).
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, timed, tree_env

N = int(sys.argv[1]) if len(sys.argv) > 1 else 3
EPOCHS = int(sys.argv[2]) if len(sys.argv) > 2 else 30
TARGET = 1.05
LOOP = REPO / "tests" / "integration" / "scripts" / "multi_worker_loop.py"
NPZ = REPO / "tests" / "data" / "mnist-small" / "mnist-small.npz"

WRAPPER = """\
import runpy, sys

import keras
import tensorflow as tf
from tensorflow.python.distribute import collective_all_reduce_strategy as cars, collective_util

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.experimental.enable_op_determinism()
keras.utils.set_random_seed(0)  # no tf.random.Generator here: it would start the runtime before the strategy
original = cars.CollectiveAllReduceStrategy.__init__

def ring(self, cluster_resolver=None, communication_options=None):
    options = collective_util.Options(implementation=collective_util.CommunicationImplementation.RING)
    original(self, cluster_resolver=cluster_resolver, communication_options=communication_options or options)

cars.CollectiveAllReduceStrategy.__init__ = ring
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""

STRICT_ENV = {
    "PYTHONHASHSEED": "0",
    "TF_DETERMINISTIC_OPS": "1",
    "TF_CUDNN_DETERMINISTIC": "1",
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
    "TF_ENABLE_ONEDNN_OPTS": "0",
    "TF_CPP_MIN_LOG_LEVEL": "2",
}


def _ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def by_hand(wrapper: Path) -> tuple[float, list[str]]:
    """Two workers started by hand with TF_CONFIG; wall seconds until both ended, the chief's losses."""
    cluster = [f"localhost:{p}" for p in _ports(2)]
    start = time.perf_counter()
    procs = []
    for i in range(2):
        tf_config = json.dumps({"cluster": {"worker": cluster}, "task": {"type": "worker", "index": i}})
        env = tree_env({**os.environ, **STRICT_ENV, "TF_CONFIG": tf_config})
        argv = [sys.executable, str(wrapper), str(LOOP), str(NPZ), str(EPOCHS)]
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
    outs = [p.communicate()[0] for p in procs]
    wall = time.perf_counter() - start
    if any(p.returncode for p in procs):
        sys.exit(f"FAIL: a worker started by hand failed: {[p.returncode for p in procs]}")
    return wall, [line for line in outs[0].splitlines() if line.startswith("epoch ")]


def launched(store: Path, workers: int) -> tuple[float, list[str], dict]:
    """One real launch of the loop on ``workers`` workers: wall, the chief's losses, its result.json."""
    before = set(store.glob("2*")) if store.exists() else set()
    wall, _ = timed(
        [
            sys.executable,
            "-m",
            "launcher",
            "train=script",
            f"train.script={LOOP}",
            f"train.args=[{NPZ},{EPOCHS}]",
            f"distribute.workers={workers}",
            f"store.root={store}",
        ]
    )
    (run,) = set(store.glob("2*")) - before
    losses = [line for line in (run / "log.txt").read_text().splitlines() if line.startswith("epoch ")]
    return wall, losses, json.loads((run / "result.json").read_text())


def _rounded(line: str) -> str:
    """``epoch N loss X`` with X to 4 decimals."""
    head, _, value = line.rpartition(" ")
    return f"{head} {float(value):.4f}"


def main() -> None:
    walls: dict[str, list[float]] = {"by hand, 2 workers": [], "launch, 2 workers": [], "launch, 1 worker": []}
    parts: list[dict] = []
    losses: dict[str, set] = {"by hand, 2 workers": set(), "launch, 2 workers": set()}
    with tempfile.TemporaryDirectory() as tmp:
        wrapper, store = Path(tmp) / "wrapper.py", Path(tmp) / "runs"
        wrapper.write_text(WRAPPER)
        for i in range(N):
            order = list(walls) if i % 2 == 0 else list(reversed(walls))
            for name in order:
                if name == "by hand, 2 workers":
                    wall, said = by_hand(wrapper)
                else:
                    wall, said, result = launched(store, 2 if "2" in name else 1)
                    if "2" in name:
                        parts.append(result.get("timings") or {})
                walls[name].append(wall)
                if name in losses:
                    losses[name].add(tuple(said))
    if len(losses["launch, 2 workers"]) != 1:
        sys.exit(f"FAIL: two launches of the same 2-worker training printed different losses: {losses}")
    rounded = {name: {tuple(_rounded(line) for line in said) for said in seen} for name, seen in losses.items()}
    if len(rounded["by hand, 2 workers"] | rounded["launch, 2 workers"]) != 1:
        sys.exit(f"FAIL: the per-epoch losses differ, so these are not the same training: {losses}")
    bitwise = len(losses["by hand, 2 workers"] | losses["launch, 2 workers"]) == 1
    m = {name: statistics.median(w) for name, w in walls.items()}
    hand, two, one = m["by hand, 2 workers"], m["launch, 2 workers"], m["launch, 1 worker"]
    boot = statistics.median(p.get("bootstrap_s", 0.0) for p in parts)
    fp = statistics.median(p.get("fingerprint_s", 0.0) for p in parts)
    print(f"multi-worker benchmark: the custom loop, global batch 64, {EPOCHS} epochs, {N} interleaved rounds")
    print(
        "  same training: launch's and the hand-started workers' per-epoch losses are "
        + ("bitwise equal" if bitwise else "equal to 4 decimals (not bitwise: the wrapper is not the bootstrap)")
    )
    print(f"  median wall, launch, 1 worker:   {one:7.2f} s")
    print(f"  median wall, launch, 2 workers:  {two:7.2f} s   (2 workers / 1 worker: {two / one:.2f}x)")
    print(f"  median wall, by hand, 2 workers: {hand:7.2f} s")
    ratio = two / hand
    print(f"ratio launch / by hand, 2 workers: {ratio:.3f} (target <= {TARGET}): {'OK' if ratio <= TARGET else 'OVER'}")
    print(
        f"launcher overhead for 2 workers: {two - hand:+.2f} s per run (in the chief: bootstrap {boot:.2f} s, "
        f"fingerprint {fp:.2f} s; the rest: start-up, settle, seal)"
    )


if __name__ == "__main__":
    main()
