"""The first hour's output on real runs (issue 13): Keras' epoch header, Ctrl-C, compare A A."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, is_run

pytestmark = pytest.mark.slow


def _runs(store: Path) -> list[Path]:
    return sorted(p for p in store.iterdir() if is_run(p))


def test_every_epoch_says_n_of_total_and_compare_a_a_says_same_run(launch, three_epoch_run):
    # A plain 3-epoch run (shared: tests/conftest.py).
    headers = [line for line in three_epoch_run["stdout"].splitlines() if line.startswith("Epoch ")]
    assert headers == ["Epoch 1/3", "Epoch 2/3", "Epoch 3/3"]
    (run,) = _runs(three_epoch_run["store"])
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 3
    same = launch("compare", str(run), str(run) + "/")
    assert same.returncode == 0
    assert same.stdout.splitlines()[0].startswith("IDENTICAL")
    assert f"both arguments are the same run ({run})" in same.stdout


def test_ctrl_c_is_one_line_no_traceback_and_the_run_is_resumable(store, mnist_npz):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    argv = [
        sys.executable,
        "-m",
        "launcher",
        f"train.data={mnist_npz}",
        f"store.root={store}",
        "train.epochs=200",
        "train.batch_size=100",
    ]
    # Its own process group, as a terminal's: Ctrl-C reaches the launcher and the job.
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("Epoch 2/200"):
            os.killpg(proc.pid, signal.SIGINT)
            break
    lines += proc.stdout.readlines()
    assert proc.wait(timeout=120) == 130
    output = "".join(lines)
    assert "Traceback" not in output and "KeyboardInterrupt" not in output
    (run,) = _runs(store)
    last = [line for line in lines if line.startswith("[launch] run")]
    assert last == [f"[launch] run {run} INTERRUPTED: Ctrl-C; continue it with: launch resume {run}\n"]
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "interrupted" and status["error"] == "Ctrl-C"
    assert (run / "checkpoints").is_dir() and not (run / "manifest.json").exists()
