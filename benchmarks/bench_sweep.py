"""A 4-seed sweep in 2 slots against the same 4 runs one after another (target ratio >= 1.7).

Side by side in one run, through the real command in fresh processes: "serial" is
``launch train=mnist ... +seed=S`` four times; "parallel" is one
``launch -m train=mnist ... '+seed=range(4)' runtime.slots=2``. Rounds alternate the
order so that drift on a noisy machine hits both alike. Both modes must give the same
weights for each seed (a slot changes where a job runs, never its bits).

On a shared machine other processes steal CPU: the benchmark measures the CPU time used
by processes other than its own during each measurement ("foreign CPU", from /proc/stat
less its children's rusage) and counts only quiet rounds, running more (up to ROUNDS x
--attempts) until it has ROUNDS of them; without any, it says the ratio is unreliable.

    python benchmarks/bench_sweep.py [ROUNDS] [--epochs N] [--data PATH] [--quiet-cpu S]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import tree_env

REPO = Path(__file__).resolve().parent.parent
SEEDS = 4
SLOTS = 2
TARGET = 1.7


def busy_cpu_s() -> float:
    """CPU seconds the whole machine has spent not idle (all processes), from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def launch(args: list[str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "launcher", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=tree_env(),
    )
    if done.returncode != 0:
        sys.exit(f"launch {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done.stdout


def measure(mode: str, common: list[str], store: Path) -> tuple[float, float]:
    """Wall seconds for one mode, and the foreign CPU seconds meanwhile."""
    busy, own, start = busy_cpu_s(), own_cpu_s(), time.perf_counter()
    if mode == "serial":
        for seed in range(SEEDS):
            launch([*common, f"+seed={seed}", f"store.root={store / 'serial'}"])
    else:
        launch(["-m", *common, f"+seed=range({SEEDS})", f"runtime.slots={SLOTS}", f"store.root={store / 'parallel'}"])
    wall = time.perf_counter() - start
    foreign = (busy_cpu_s() - busy) - (own_cpu_s() - own)
    return wall, max(0.0, foreign)


def weights_by_seed(store: Path) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for result in store.glob("*/result.json"):
        data = json.loads(result.read_text())
        out.setdefault(int(data["seed"]), set()).add(data["weights_sha256"])
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rounds", nargs="?", type=int, default=2)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--data", default=str(REPO / "tests" / "data" / "mnist-small" / "mnist-small.npz"))
    p.add_argument(
        "--quiet-cpu",
        type=float,
        default=3.0,
        help="count a round only when other processes used at most this many CPU s",
    )
    p.add_argument("--attempts", type=int, default=3, help="at most ROUNDS x this many rounds")
    args = p.parse_args()
    if len(os.sched_getaffinity(0)) < SLOTS:
        sys.exit(f"needs at least {SLOTS} CPU cores")
    common = ["train=mnist", "determinism=strict", f"train.data={args.data}", f"train.epochs={args.epochs}"]
    store = Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    rows, clean = [], []
    try:
        for r in range(args.rounds * args.attempts):
            order = ("serial", "parallel") if r % 2 == 0 else ("parallel", "serial")
            got = {mode: measure(mode, common, store) for mode in order}
            rows.append(got)
            quiet = max(got["serial"][1], got["parallel"][1]) <= args.quiet_cpu
            if quiet:
                clean.append(got)
            s, q = got["serial"][0], got["parallel"][0]
            print(
                f"round {r + 1}: serial {s:6.1f} s  parallel {q:6.1f} s  ratio {s / q:.2f}  "
                f"(foreign CPU {got['serial'][1]:.1f} / {got['parallel'][1]:.1f} s"
                f"{'' if quiet else ', noisy: not counted'})",
                flush=True,
            )
            if len(clean) == args.rounds:
                break
        serial_w = weights_by_seed(store / "serial")
        parallel_w = weights_by_seed(store / "parallel")
        same = serial_w == parallel_w and all(len(v) == 1 for v in serial_w.values())
    finally:
        shutil.rmtree(store, ignore_errors=True)
    counted = clean or rows
    serial = statistics.median(g["serial"][0] for g in counted)
    parallel = statistics.median(g["parallel"][0] for g in counted)
    foreign = max(g[m][1] for g in counted for m in g)
    ratio = serial / parallel
    print(
        f"sweep benchmark: {SEEDS} seeds, {SLOTS} slots, medians of {len(counted)} "
        f"{'quiet' if clean else 'NOISY (no quiet round: unreliable)'} round(s)"
    )
    print(f"  {f'serial   ({SEEDS} x launch)':<32} {serial:7.1f} s")
    print(f"  {f'parallel (launch -m, {SLOTS} slots)':<32} {parallel:7.1f} s")
    print(f"  same weights per seed in both modes: {'yes' if same else 'NO'}")
    print(f"  most foreign CPU in a counted measurement: {foreign:.1f} s (a round counts when <= {args.quiet_cpu} s)")
    print(f"serial/parallel wall-time ratio: {ratio:.2f} (target >= {TARGET}): {'OK' if ratio >= TARGET else 'UNDER'}")


if __name__ == "__main__":
    main()
