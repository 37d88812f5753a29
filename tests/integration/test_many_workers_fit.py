"""A tf_keras fit on many workers (issue 49), real TensorFlow on the CPU: observed like any fit, and
resumed.

The scripts are unmodified tf.keras 2 code run under tf_keras (``TF_USE_LEGACY_KERAS=1``, so that
``tf.keras`` is tf_keras): TensorFlow's multi-worker Keras tutorial in its shape
(``scripts/legacy_multi_worker_fit.py``: ``MultiWorkerMirroredStrategy``, the model built and compiled
in ``strategy.scope()``, ``fit`` with ``steps_per_epoch`` on a repeated pipeline) on 2 workers, and a
plain one-process tf.keras tutorial script (``scripts/legacy_fit.py``: a pipeline reshuffled every
epoch, validation data). Each is run once uninterrupted, and once SIGKILLed (the launcher's process
group) after the checkpoint of epoch 2 of 3 and resumed with ``launch resume``: the resumed run must
equal the uninterrupted one bit for bit, so the pair also stands for "two runs compare IDENTICAL".
The runs are made once, in a module fixture; the module stays on one xdist worker.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.record import layout
from tests.conftest import REPO
from tests.integration.resumed import env, epoch_lines, run_of, stop_after_checkpoint, strict_script, work_dir

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("many_workers_fit"),
    # CI sets LAUNCH_REQUIRE_TF_KERAS=1 (.ci/run installs it): there a missing tf_keras fails these tests.
    pytest.mark.skipif(
        importlib.util.find_spec("tf_keras") is None and not os.environ.get("LAUNCH_REQUIRE_TF_KERAS"),
        reason="tf_keras is not installed: pip install --no-deps 'tf_keras~=2.X.0' (X: TensorFlow's minor version)",
    ),
]

SCRIPTS = REPO / "tests" / "integration" / "scripts"
MULTI = (SCRIPTS / "legacy_multi_worker_fit.py", "data.npz,3,12")  # 3 epochs of 12 steps, on 2 workers
SINGLE = (SCRIPTS / "legacy_fit.py", "data.npz,3")  # 3 epochs, one process
LEGACY = {"TF_USE_LEGACY_KERAS": "1"}


@contextlib.contextmanager
def _legacy_env():
    """``TF_USE_LEGACY_KERAS=1`` in this process's environment while the runs are made (the resume
    helpers start launches with it); it is keyed, so every launch of a run must have it."""
    before = os.environ.get("TF_USE_LEGACY_KERAS")
    os.environ.update(LEGACY)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TF_USE_LEGACY_KERAS", None)
        else:
            os.environ["TF_USE_LEGACY_KERAS"] = before


def _launch(work: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "launcher", *map(str, args)],
        cwd=work,
        env={**env(), **LEGACY},
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )


def _record(run: Path) -> dict:
    """What a run recorded: its result, every epoch's metrics and the trace, the chief's and each
    other worker's."""
    paths = layout.RunPaths(run)
    out = {"run": str(run), "result": json.loads(paths.result.read_text())}
    out["metrics"] = paths.metrics.read_text()
    out["trace"] = paths.trace.read_text()
    out["fingerprint"] = json.loads(paths.fingerprint.read_text())
    out["workers"] = {}
    for worker in sorted(paths.workers.glob("*")) if paths.workers.is_dir() else []:
        w = layout.RunPaths(run).worker(int(worker.name))
        out["workers"][worker.name] = {
            "result": json.loads(w.result.read_text()),
            "metrics": w.metrics.read_text(),
            "trace": w.trace.read_text(),
            "log": w.log.read_text(),
        }
    return out


def _uninterrupted(parent: Path, script: tuple, *extra: str) -> dict:
    work, store = work_dir(parent, "work"), parent / "store"
    done = _launch(work, *strict_script(store, script[0], script[1], *extra))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return _record(run_of(store))


def _killed_and_resumed(parent: Path, script: tuple, *extra: str) -> dict:
    """A run SIGKILLed (the launcher's process group: every worker dies with it) after the checkpoint of
    epoch 2, then ``launch resume``d."""
    work, store = work_dir(parent, "work"), parent / "store"
    with _legacy_env():
        run, proc = stop_after_checkpoint(
            work, store, 2, signal.SIGKILL, strict_script(store, script[0], script[1], *extra)
        )
    proc.communicate(timeout=120)
    done = _launch(work, "resume", run)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {**_record(run), "resume_stdout": done.stdout, "resume_stderr": done.stderr}


@pytest.fixture(scope="module")
def multi(tmp_path_factory) -> dict:
    """The tutorial's fit on 2 workers: uninterrupted, and killed after epoch 2 and resumed."""
    root = tmp_path_factory.mktemp("many-workers-fit")
    (root / "a").mkdir()
    (root / "b").mkdir()
    return {
        "uninterrupted": _uninterrupted(root / "a", MULTI, "distribute.workers=2"),
        "resumed": _killed_and_resumed(root / "b", MULTI, "distribute.workers=2"),
    }


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> dict:
    """A plain tf.keras 2 script in one process: uninterrupted, and killed after epoch 2 and resumed."""
    root = tmp_path_factory.mktemp("legacy-fit")
    (root / "a").mkdir()
    (root / "b").mkdir()
    return {"uninterrupted": _uninterrupted(root / "a", SINGLE), "resumed": _killed_and_resumed(root / "b", SINGLE)}


def _epochs(metrics: str) -> list[dict]:
    return [json.loads(line) for line in metrics.splitlines()]


def test_two_tf_keras_workers_complete_with_their_weights_recorded_and_equal(multi):
    run = multi["uninterrupted"]
    chief = run["result"]["weights_sha256"]
    assert chief and run["workers"]["1"]["result"]["weights_sha256"] == chief
    assert run["fingerprint"]["cluster"]["workers"] == 2
    assert run["fingerprint"]["cluster"]["weights_sha256"] == [chief, chief]
    # Observed as a Keras 3 fit is: every epoch's metrics, the step trace, the fitted model.
    assert [e["epoch"] for e in _epochs(run["metrics"])] == [1, 2, 3]
    assert {"loss", "accuracy"} <= set(_epochs(run["metrics"])[-1]) and run["result"]["final_metrics"]["loss"] > 0
    assert run["trace"].count("\n") >= 4 and run["workers"]["1"]["trace"] == run["trace"]
    observed = run["result"]["observed"]
    assert (observed["fits"], observed["epochs"], observed["optimizer_steps"]) == (1, 3, 36), observed
    # What tf.keras is was recorded and keyed: tf_keras is among what the job used.
    fp = run["fingerprint"]
    assert fp["environment"]["TF_USE_LEGACY_KERAS"] == "1" and "tf-keras" in fp["software"]["distributions"]


def test_a_killed_two_worker_fit_resumes_every_worker_from_the_chiefs_checkpoint_to_the_same_bits(multi):
    whole, resumed = multi["uninterrupted"], multi["resumed"]
    assert resumed["result"]["resumed_from_epoch"] == 2, resumed["result"]
    assert resumed["result"]["weights_sha256"] == whole["result"]["weights_sha256"]
    assert resumed["result"]["final_metrics"] == whole["result"]["final_metrics"]
    assert resumed["metrics"] == whole["metrics"] and resumed["trace"] == whole["trace"]
    other = resumed["workers"]["1"]
    assert other["result"]["weights_sha256"] == whole["result"]["weights_sha256"]
    assert other["metrics"].splitlines()[-1] == whole["metrics"].splitlines()[-1]
    # Both restarted and restored, the other worker from the chief's checkpoint, not its own; both
    # trained epoch 3 only (a restart from epoch 1 would end with the same bits).
    said = "[launch] resumed from checkpoints/epoch-000002: fit 1 continues after its epoch 2"
    assert said in resumed["resume_stdout"], resumed["resume_stdout"][-3000:]
    chiefs = "[launch] resumed from the chief's checkpoints/epoch-000002: fit 1 continues after its epoch 2"
    assert chiefs in other["log"], other["log"][-3000:]
    assert epoch_lines(resumed["resume_stdout"]) == ["Epoch 3/3"], resumed["resume_stdout"][-3000:]
    assert epoch_lines(other["log"].rsplit("[launch] resumed from", 1)[1]) == ["Epoch 3/3"]
    assert (
        "fast-forwarding the input pipeline through 2 epochs (tf_keras' fit, steps_per_epoch"
        in resumed["resume_stdout"]
    )
    assert resumed["result"]["observed"]["steps_restored"] == 24


def test_the_two_worker_run_and_its_resume_compare_identical(multi):
    done = _launch(REPO, "compare", multi["uninterrupted"]["run"], multi["resumed"]["run"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("IDENTICAL: weights, 3 epochs' metrics and "), done.stdout


def test_a_single_worker_tf_keras_fit_records_weights_metrics_and_trace(single):
    run = single["uninterrupted"]
    assert run["result"]["weights_sha256"] and run["result"]["observed"]["models"] == ["sequential"]
    last = _epochs(run["metrics"])[-1]
    assert last["epoch"] == 3 and {"loss", "accuracy", "val_loss", "val_accuracy"} <= set(last)
    assert run["trace"].count("\n") >= 4
    assert "tf-keras" in run["fingerprint"]["software"]["distributions"]


def test_a_killed_single_worker_tf_keras_fit_resumes_to_the_same_bits(single):
    # Its pipeline is reshuffled each epoch, and its validation data read by an evaluation that makes
    # two iterators and reads the second: both read again, or aligned, as the uninterrupted run read them.
    whole, resumed = single["uninterrupted"], single["resumed"]
    assert resumed["result"]["weights_sha256"] == whole["result"]["weights_sha256"]
    assert resumed["metrics"] == whole["metrics"] and resumed["trace"] == whole["trace"]
    assert epoch_lines(resumed["resume_stdout"]) == ["Epoch 3/3"], resumed["resume_stdout"][-3000:]
    done = _launch(REPO, "compare", whole["run"], resumed["run"])
    assert done.returncode == 0 and done.stdout.startswith("IDENTICAL: "), done.stdout + done.stderr
