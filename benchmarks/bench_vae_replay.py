"""How often a strict replay of keras-io's VAE says REPRODUCED, quiet and under CPU load (issue 46, part 4).

One strict run of ``tests/integration/scripts/vae.py`` (keras-io's "Variational AutoEncoder",
small: a custom ``train_step`` with three ``keras.metrics.Mean`` trackers), made on a quiet
machine, then N ``launch replay RUN`` of it, alternating:

=========  ==================================================================
quiet      the replay alone (beside whatever else the machine runs)
loaded     the replay beside LOAD busy loops (``python -c 'while True: pass'``)
=========  ==================================================================

Printed: N of M REPRODUCED in each condition, side by side, with the load average each
replay started under; for every DIVERGED replay, which of its results differed (weights,
each metric of each epoch). The launcher measured is this checkout as it was when the
benchmark started (copied first, so an edit made meanwhile does not refuse the replays).

    python benchmarks/bench_vae_replay.py [N] [LOAD] [EPOCHS] [IMAGES]

N replays per condition (default 20), LOAD busy loops (default 2), EPOCHS (default 2) and
IMAGES (default 640, batches of 128) of the script, run as ``launch train=script
determinism=strict`` plans it. Results: benchmarks/RESULTS.md; what they mean:
docs/determinism.md ("A metric's last bits under TensorFlow's graph optimizer").
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from common import REPO, _runs, tree_env

ARGS = sys.argv[1:]
N = int(ARGS[0]) if len(ARGS) > 0 else 20
LOAD = int(ARGS[1]) if len(ARGS) > 1 else 2
EPOCHS = int(ARGS[2]) if len(ARGS) > 2 else 2
IMAGES = int(ARGS[3]) if len(ARGS) > 3 else 640
SCRIPT = REPO / "tests" / "integration" / "scripts" / "vae.py"
DATA = REPO / "tests" / "data" / "mnist-small" / "mnist-small.npz"


def launch(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """One real ``launch ARGS`` (any exit status: a DIVERGED replay exits 1)."""
    return subprocess.run(
        [sys.executable, "-m", "launcher", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=900
    )


def verdict(done: subprocess.CompletedProcess) -> str:
    """REPRODUCED, DIVERGED, or the first word of whatever else the replay said."""
    for line in done.stdout.splitlines():
        word = line.split(":", 1)[0]
        if word in ("REPRODUCED", "DIVERGED", "REFUSED", "NOTHING COMPARED"):
            return word
    return f"failed ({done.returncode})"


def results(run: Path) -> dict:
    """What a replay is judged on: the weights hash and every epoch's metrics, as stored."""
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {"weights": json.loads((run / "result.json").read_text())["weights_sha256"], "metrics": metrics}


def differences(a: dict, b: dict) -> list[str]:
    """The results of ``b`` that differ from ``a``: 'weights', 'loss@2', ..."""
    out = ["weights"] if a["weights"] != b["weights"] else []
    for ma, mb in zip(a["metrics"], b["metrics"], strict=False):
        out += [f"{k}@{ma['epoch']}" for k in sorted(ma) if k != "epoch" and ma[k] != mb.get(k)]
    return out


def busy(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copytree(REPO / "launcher", root / "tree" / "launcher")  # the launcher as it is now
        env = tree_env()
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root / "tree"), os.environ.get("PYTHONPATH")]))
        (root / "data").mkdir()
        shutil.copy(DATA, root / "data" / "mnist.npz")
        (root / "cwd").mkdir()
        store = root / "runs"
        done = launch(
            env,
            root / "cwd",
            "train=script",
            f"train.script={SCRIPT}",
            f"train.args=[{root / 'data' / 'mnist.npz'},{EPOCHS},{IMAGES}]",
            "determinism=strict",
            f"store.root={store}",
        )
        if done.returncode != 0:
            sys.exit(f"the original run failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
        (original,) = _runs(store)
        stored = results(original)
        rows: dict[str, list[tuple[str, float, list[str]]]] = {"quiet": [], "loaded": []}
        for _ in range(N):
            for condition in rows:
                burners = busy(LOAD) if condition == "loaded" else []
                try:
                    load = os.getloadavg()[0]
                    before = _runs(store)
                    done = launch(env, root / "cwd", "replay", str(original))
                finally:
                    for burner in burners:
                        burner.kill()
                        burner.wait()
                new = _runs(store) - before
                diff = differences(stored, results(new.pop())) if len(new) == 1 else []
                rows[condition].append((verdict(done), load, diff))
                print(f"  {condition:<7} load {load:5.2f}  {rows[condition][-1][0]}  {' '.join(diff)}", flush=True)
        print(
            f"VAE strict replay benchmark: {EPOCHS} epochs of {IMAGES} images (batches of 128), "
            f"{N} replays per condition, alternating; loaded = {LOAD} busy loops"
        )
        print(f"  {'condition':<10} {'reproduced':>12} {'load avg (1 min) min-max':>26}  diverged in")
        for condition, got in rows.items():
            ok = sum(v == "REPRODUCED" for v, _, _ in got)
            loads = [load for _, load, _ in got]
            what = sorted({d for v, _, diff in got if v != "REPRODUCED" for d in diff})
            print(
                f"  {condition:<10} {f'{ok} of {len(got)}':>12} {f'{min(loads):.2f}-{max(loads):.2f}':>26}  "
                f"{', '.join(what) or '-'}"
            )


if __name__ == "__main__":
    main()
