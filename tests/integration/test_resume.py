"""Checkpoint and resume with a real SIGKILL (issue: checkpoint and resume)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, THREE_EPOCHS, is_run
from tests.integration.resumed import trained_only_after

pytestmark = pytest.mark.slow

ARGS = THREE_EPOCHS  # ("train=mnist", "determinism=strict", "train.epochs=3", "train.batch_size=50")


def _result(run: Path) -> dict:
    return json.loads((run / "result.json").read_text())


def _start(store: Path, npz: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "launcher", *ARGS, f"train.data={npz}", f"store.root={store}"],
        cwd=store,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))},
    )


def _kill_after_checkpoint(store: Path, npz: Path, epoch: int) -> Path:
    """Start a strict run and SIGKILL its launcher (only) once checkpoint ``epoch`` exists; its job
    process dies with it (PR_SET_PDEATHSIG; a silent job is checked in test_interrupts.py)."""
    before = set(store.iterdir())
    proc = _start(store, npz)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        new = [p for p in set(store.iterdir()) - before if is_run(p)]
        if new and (new[0] / "checkpoints" / f"epoch-{epoch:06d}").is_dir():
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            assert not (new[0] / "manifest.json").exists(), "the run finished before it could be killed"
            gone = time.monotonic() + 10
            while _processes_mentioning(new[0]) and time.monotonic() < gone:
                time.sleep(0.05)
            return new[0]
        assert proc.poll() is None, "the run ended before its checkpoint"
        time.sleep(0.02)
    raise AssertionError("no checkpoint appeared")


def _processes_mentioning(path: Path) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(path) in text:
            found.append(text)
    return found


@pytest.fixture
def uninterrupted(three_epoch_run) -> dict:
    """The same run, uninterrupted (shared: ``tests/conftest.py::three_epoch_run``, made with ``ARGS``)."""
    return three_epoch_run


def _checkpoints(run: Path) -> list[str]:
    return sorted(p.name for p in (run / "checkpoints").iterdir())


def test_a_killed_strict_run_resumes_to_the_same_bits(launch, store, mnist_npz, uninterrupted):
    run = _kill_after_checkpoint(store, mnist_npz, 1)
    assert json.loads((run / "status.json").read_text())["state"] == "running"
    deadline = time.monotonic() + 10  # a killed process with a large address space takes a moment to go
    while _processes_mentioning(run) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _processes_mentioning(run), "the job process outlived its killed launcher"
    done = launch("resume", run)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    result = _result(run)
    assert result["weights_sha256"] == uninterrupted["result"]["weights_sha256"]
    assert result["layer_sha256"] == uninterrupted["result"]["layer_sha256"]
    assert (run / "metrics.jsonl").read_text() == uninterrupted["metrics"]
    assert (run / "trace.jsonl").read_text() == uninterrupted["trace"]  # every traced step, bit for bit
    assert result["resumed_from_epoch"] >= 1
    trained_only_after(done.stdout, result["resumed_from_epoch"], 3)  # not a restart from epoch 1
    job = json.loads((run / "job.json").read_text())
    assert job["resume"]["history"][-1]["from_epoch"] == result["resumed_from_epoch"]
    assert (run / "manifest.json").exists()
    # checkpoint_every=1, checkpoint_keep=2 (the defaults): the two newest epochs, resumed or not.
    assert _checkpoints(run) == uninterrupted["checkpoints"] == ["epoch-000002", "epoch-000003"]
    again = launch("resume", run)
    assert again.returncode == 2 and "is complete; nothing to resume" in again.stderr


def test_a_torn_checkpoint_falls_back_to_the_previous_one(launch, store, mnist_npz, uninterrupted):
    run = _kill_after_checkpoint(store, mnist_npz, 2)
    newest = run / "checkpoints" / "epoch-000002"
    data = next(newest.glob("state.data-*"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])  # torn mid-write
    done = launch("resume", run)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "checkpoint epoch-000002 is incomplete" in done.stderr and "falling back" in done.stderr  # a note: stderr
    assert _result(run)["resumed_from_epoch"] == 1
    trained_only_after(done.stdout, 1, 3)
    assert _result(run)["weights_sha256"] == uninterrupted["result"]["weights_sha256"]


def test_resume_refuses_a_changed_environment(launch, store, mnist_npz):
    run = _kill_after_checkpoint(store, mnist_npz, 1)
    done = launch("resume", run, env={"OMP_NUM_THREADS": "7"})
    assert done.returncode == 3 and "environment.OMP_NUM_THREADS" in done.stdout
    assert json.loads((run / "status.json").read_text())["state"] == "running"  # untouched


def test_checkpoint_every_and_keep(launch, store, mnist_npz):
    done = launch(
        "train=mnist",
        "determinism=strict",
        "train.epochs=4",
        "train.batch_size=100",
        "train.max_samples=300",
        "train.checkpoint_every=2",
        "train.checkpoint_keep=1",
        f"train.data={mnist_npz}",
        f"store.root={store}",
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (run,) = [p for p in store.iterdir() if is_run(p)]
    assert len(_result(run)["timings"]["checkpoint_s"]) == 2  # saved after epochs 2 and 4
    assert _checkpoints(run) == ["epoch-000004"]  # and only the newest one kept
    assert json.loads((run / "checkpoints" / "epoch-000004" / "checkpoint.json").read_text())["epoch"] == 4


def test_resume_bad_input(launch, tmp_path):
    assert launch("resume", tmp_path / "missing").returncode == 2
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("seed: 0\n")
    done = launch("resume", run)
    assert done.returncode == 2 and "cannot be resumed" in done.stderr and "no checkpoints" in done.stderr
