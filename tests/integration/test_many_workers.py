"""One run on two workers (issue 49): ``distribute.workers=2`` on this machine, real TensorFlow.

The script is the TensorFlow tutorial's custom loop under ``MultiWorkerMirroredStrategy``,
unmodified. Every multi-worker launch costs two TensorFlow start-ups, so the runs the verdict
tests judge are made once, in a module fixture, and the module stays on one xdist worker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.record import layout
from tests.conftest import REPO, q, run_dir_of, run_launch, verdict_of

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("many_workers")]

SCRIPTS = REPO / "tests" / "integration" / "scripts"
LOOP = SCRIPTS / "multi_worker_loop.py"


def _loop(npz: Path, store: Path, epochs: int = 2, workers: int = 2) -> list[str]:
    return [
        "train=script",
        f"train.script={q(LOOP)}",
        f"train.args=[{q(npz)},{epochs}]",
        f"store.root={q(store)}",
        f"distribute.workers={workers}",
    ]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, mnist_npz_module) -> dict[str, Path]:
    """Two 2-worker runs of the loop and a 1-worker run of it, in one store."""
    store = tmp_path_factory.mktemp("many-workers") / "store"
    out = {}
    for name, workers in (("a", 2), ("b", 2), ("one", 1)):
        done = run_launch(*_loop(mnist_npz_module, store, workers=workers))
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        out[name] = run_dir_of(done)
    return out


@pytest.fixture(scope="module")
def mnist_npz_module() -> Path:
    return REPO / "tests" / "data" / "mnist-small" / "mnist-small.npz"


def test_two_local_workers_run_twice_compare_identical(runs):
    done = run_launch("compare", runs["a"], runs["b"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("IDENTICAL: "), done.stdout


def test_every_workers_weights_are_recorded_and_equal(runs):
    run = layout.RunPaths(runs["a"])
    fp = json.loads(run.fingerprint.read_text())
    chief = json.loads(run.result.read_text())["weights_sha256"]
    other = json.loads(run.worker(1).result.read_text())["weights_sha256"]
    assert chief and other == chief
    cluster = fp["cluster"]
    assert cluster["workers"] == 2 and cluster["weights_sha256"] == [chief, chief]
    # The collective the strategy really used: the script left AUTO, the bootstrap pinned RING.
    assert (cluster["collective"], cluster["asked"], cluster["pinned_by_launcher"]) == ("RING", "AUTO", True)
    assert cluster["order"] == ["worker:0", "worker:1"] and len(set(cluster["hardware"])) == 1
    # Worker 1's own facts, metrics of its steps and log, beside the chief's.
    worker = json.loads(run.worker(1).fingerprint.read_text())
    assert worker["software"]["tensorflow"] == fp["software"]["tensorflow"]
    assert worker["cluster"]["worker"] == 1 and worker["cluster"]["implementation"] == "RING"
    assert "epoch 2 " in run.worker(1).log.read_text() and run.worker(1).trace.exists()
    # Sealed with the run: the manifest covers every worker's files.
    manifest = json.loads(run.manifest.read_text())["files"]
    assert f"{layout.WORKERS}/1/{layout.RESULT}" in manifest
    # A job that does not select tf_keras (TF_USE_LEGACY_KERAS) never loads it, installed or not.
    software = fp["software"]
    assert "tf-keras" not in software["distributions"] and "tf-keras" not in (software["distributions_probed"] or {})


def test_one_worker_against_two_is_refused_naming_the_worker_count(runs):
    done = run_launch("compare", runs["one"], runs["a"])
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.startswith("REFUSED: "), done.stdout
    row = next(line.split() for line in done.stdout.splitlines() if line.strip().startswith("cluster.workers"))
    assert row == ["cluster.workers", "1", "2"], done.stdout


def test_a_packed_run_verifies_and_replays_elsewhere_on_two_workers_and_reproduces(runs, tmp_path):
    """Packed, the 2-worker run carries every worker's files (the seal covers them: verify checks
    them); replayed from the archive into another store, it starts two workers and is REPRODUCED."""
    archive = tmp_path / "a.launch.tar.gz"
    packed = run_launch("pack", runs["a"], "-o", archive)
    assert packed.returncode == 0, packed.stdout[-3000:] + packed.stderr[-3000:]
    verified = run_launch("verify", archive)
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    done = run_launch("replay", archive, "--store", elsewhere)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    unpacked = layout.RunPaths(elsewhere / runs["a"].name)
    assert unpacked.worker(1).result.read_text() == layout.RunPaths(runs["a"]).worker(1).result.read_text()
    said = verdict_of(done.stdout)
    line = next(ln for ln in said.splitlines() if ln.startswith("REPRODUCED: "))
    new = Path(line.split(" of ")[0].removeprefix("REPRODUCED: replay "))
    fp = json.loads(layout.RunPaths(new).fingerprint.read_text())
    assert fp["cluster"]["workers"] == 2 and len(set(fp["cluster"]["weights_sha256"])) == 1


def _processes_naming(text: str) -> list[int]:
    """Every process whose command line holds ``text``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


def _start_long_run(tmp_path: Path, npz: Path) -> tuple[subprocess.Popen, Path]:
    """A 2-worker run of many epochs, started; returns once worker 1 has ended its second epoch."""
    store = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    launch = subprocess.Popen(
        [sys.executable, "-m", "launcher", *_loop(npz, store, epochs=400)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        logs = list(store.glob(f"2*/{layout.WORKERS}/1/{layout.LOG}")) if store.exists() else []
        if logs and "epoch 2 " in logs[0].read_text():
            return launch, logs[0].parents[2]
        assert launch.poll() is None, launch.communicate()[0][-3000:]
        time.sleep(0.2)
    launch.kill()
    pytest.fail("worker 1 never ended its second epoch")


def test_a_worker_killed_after_its_second_epoch_ends_the_run_naming_it(tmp_path, mnist_npz_module):
    launch, run = _start_long_run(tmp_path, mnist_npz_module)
    (worker,) = [pid for pid in _processes_naming(str(run)) if f"{layout.WORKERS}/1".encode() in _cmdline(pid)]
    os.kill(worker, signal.SIGKILL)
    killed = time.monotonic()
    out, _ = launch.communicate(timeout=150)
    assert time.monotonic() - killed < 120, out[-2000:]
    status = json.loads(layout.RunPaths(run).status.read_text())
    assert status["state"] in ("interrupted", "failed"), status
    assert status["error"].startswith("worker 1 was killed by signal 9"), status
    assert not _processes_naming(str(run)), "a worker outlived its run"
    assert "worker 1 was killed by signal 9" in out.strip().splitlines()[-1]
    # The script's own loop: where it stands is known to the loop alone, so resume refuses, in one line.
    refused = run_launch("resume", run)
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-2000:]
    said = refused.stderr.strip()
    assert said.count("\n") == 0 and said.startswith(f"launch: error: run {run.name} cannot be resumed: "), said
    assert "this run on 2 workers had none: it trains with its own loop" in said, said


def test_sigterm_to_the_launcher_stops_every_worker(tmp_path, mnist_npz_module):
    launch, run = _start_long_run(tmp_path, mnist_npz_module)
    launch.send_signal(signal.SIGTERM)
    out, _ = launch.communicate(timeout=150)
    status = json.loads(layout.RunPaths(run).status.read_text())
    # Asked, they stopped: none had to be killed (TensorFlow's coordination service takes SIGTERM).
    assert (status["state"], status["error"]) == ("interrupted", "SIGTERM; all 2 workers were stopped"), status
    assert not _processes_naming(str(run)), "a worker outlived its run"


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def test_keras3_fit_under_the_strategy_is_refused_in_one_line(tmp_path, mnist_npz_module):
    store = tmp_path / "store"
    done = run_launch(
        "train=script",
        f"train.script={q(SCRIPTS / 'multi_worker_fit.py')}",
        f"train.args=[{q(mnist_npz_module)}]",
        f"store.root={q(store)}",
        "distribute.workers=2",
        timeout=300,
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    last = next(ln for ln in (done.stdout + done.stderr).splitlines() if ln.startswith("[launch] run "))
    assert " FAILED: Keras 3's Model.fit does not run under tf.distribute.MultiWorkerMirroredStrategy" in last, last
    assert "keras-team/keras#20585" in last and "custom loop" in last and "TF_USE_LEGACY_KERAS=1" in last
    # the install that keeps tensorflow-cpu: tf_keras' own requirement is the `tensorflow` distribution
    assert "pip install --no-deps 'tf_keras~=2." in last, last
    assert "Traceback" not in done.stdout + done.stderr
