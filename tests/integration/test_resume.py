"""Checkpoint and resume with a real SIGKILL (issue: checkpoint and resume). A torn checkpoint's
fallback is tested with test_faults.py's SIGKILLed job process, on the same killed run."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.record.store import runs
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


def _kill_after_checkpoint(store: Path, npz: Path, epoch: int) -> tuple[Path, int]:
    """Start a strict run and SIGKILL its launcher (only) once checkpoint ``epoch`` exists; its job
    process dies with it (PR_SET_PDEATHSIG; a silent job is checked in test_interrupts.py).
    Returns the run and the killed launcher's pid."""
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
            return new[0], proc.pid
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


def test_a_killed_strict_run_is_abandoned_refused_elsewhere_and_resumes_to_the_same_bits(
    launch, store, mnist_npz, uninterrupted
):
    """The launcher SIGKILLed after checkpoint 1 (its job dies with it): the run is left running, so
    abandoned (``launch runs`` says so; ``launch compare`` refuses it in one line, saying how to resume
    it); a resume under a changed environment is refused and leaves it untouched; the resume then
    trains epochs 2-3 only, to the uninterrupted run's bits, and a second resume finds it complete.
    (One killed run for what were three tests, one of them test_faults.py's killed launcher.)"""
    run, pid = _kill_after_checkpoint(store, mnist_npz, 1)
    assert json.loads((run / "status.json").read_text())["state"] == "running"
    deadline = time.monotonic() + 10  # a killed process with a large address space takes a moment to go
    while _processes_mentioning(run) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _processes_mentioning(run), "the job process outlived its killed launcher"
    # What the user sees of an abandoned run (was test_faults.py's sigkilled-launcher test)
    listed = launch("runs", "--store", store)
    assert f"{run.name}" in listed.stdout and " abandoned " in listed.stdout, listed.stdout
    refused = launch("compare", run, uninterrupted["run"])
    assert refused.returncode == 4 and len(refused.stderr.strip().splitlines()) == 1
    assert f"run {run.name} is not complete (state: abandoned: its launcher (pid {pid} on " in refused.stderr
    assert f"launch resume {run}" in refused.stderr
    # A changed environment is refused, the run left as it was (was test_resume_refuses_a_changed_environment)
    changed = launch("resume", run, env={"OMP_NUM_THREADS": "7"})
    assert changed.returncode == 3 and "environment.OMP_NUM_THREADS" in changed.stdout
    assert json.loads((run / "status.json").read_text())["state"] == "running"  # untouched
    done = launch("resume", run)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr[-3000:]
    assert f"[launch] run {run.name} was abandoned: its launcher (pid {pid} on " in done.stderr
    runs.verify_seal(run)  # sealed, every file it lists intact
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


# A torn checkpoint falling back to the previous one: test_faults.py's
# test_a_sigkilled_job_process_ends_interrupted_and_resumes_past_a_torn_checkpoint (one killed run for both).


# checkpoint_every and checkpoint_keep: test_faults.py's
# test_a_corrupted_index_never_stops_a_run_and_checkpoint_every_and_keep (on the run it makes).


def test_resume_bad_input(launch, tmp_path):
    assert launch("resume", tmp_path / "missing").returncode == 2
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("seed: 0\n")
    done = launch("resume", run)
    assert done.returncode == 2 and "cannot be resumed" in done.stderr and "no checkpoints" in done.stderr
