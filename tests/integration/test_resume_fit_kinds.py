"""Resume of unmodified Keras-fit scripts beyond one fit on a tf.data pipeline (issue 28): a fit on
NumPy arrays that Keras shuffles, a script with two fits (fine-tuning), and a fit on a generator
whose batches differ when run again, which is refused. Each is killed for real (SIGKILL to the
launcher's process group) after a checkpoint and resumed with `launch resume`; its bits are compared
with an uninterrupted run's."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, copy_store, is_run
from tests.integration.resumed import (
    epoch_lines,
    record,
    run_of,
    start,
    stop_after_checkpoint,
    strict_script,
    trained_only_after,
    uninterrupted,
    work_dir,
)

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).parent / "scripts"
DATA = REPO / "tests" / "data" / "mnist-small" / "mnist-small.npz"
ARRAYS = (SCRIPTS / "arrays_fit.py", "data.npz,3,outputs,split")  # 3 epochs, validation_split=0.2
TWO_FITS = (SCRIPTS / "two_fits.py", "data.npz,2,outputs")  # 2 epochs in each fit: epochs 1-2, then 3-4
KEEP_ONE = "train.checkpoint_keep=1"  # the first fit's end must outlive the pruning (same config in every run)


@pytest.fixture(scope="module")
def arrays_reference(tmp_path_factory) -> dict:
    return uninterrupted(tmp_path_factory.mktemp("arrays-reference"), *ARRAYS)


@pytest.fixture(scope="module")
def two_fits_reference(tmp_path_factory) -> dict:
    return uninterrupted(tmp_path_factory.mktemp("two-fits-reference"), *TWO_FITS, KEEP_ONE)


def _kill_after(work: Path, store: Path, epoch: int, script: Path, script_args: str, *extra: str) -> Path:
    """Start the script's run and SIGKILL its launcher's process group once checkpoint ``epoch`` exists."""
    overrides = strict_script(store, script, script_args, *extra)
    run, proc = stop_after_checkpoint(work, store, epoch, signal.SIGKILL, overrides)
    proc.communicate(timeout=60)
    assert not (run / "manifest.json").exists(), "the run finished before it could be killed"
    return run


def _resumes_to_the_reference(launch, run: Path, work: Path, reference: dict) -> str:
    """Resume ``run``; its record must equal the reference's bit for bit and `launch compare` say IDENTICAL."""
    done = launch("resume", run)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    resumed = record(run, work)
    for key in ("weights", "layers", "metrics", "trace", "history", "outputs", "final"):
        assert resumed[key] == reference[key], key
    compared = launch("compare", reference["run"], run)
    assert compared.returncode == 0 and "IDENTICAL" in compared.stdout, compared.stdout[-2000:]
    return done.stdout


def test_keras_shuffles_arrays_in_the_same_order_in_every_epoch():
    """The measured premise of resuming a fit on arrays (Keras 3.15, TensorFlow backend): the order
    comes from a tf.random.shuffle in the pipeline Keras builds, seeded from TensorFlow's global
    seed; each iterator (each epoch) starts it anew, so no state moves from epoch to epoch."""
    code = """
import numpy as np, keras, tensorflow as tf
from keras.src.trainers.data_adapters.array_data_adapter import ArrayDataAdapter
keras.utils.set_random_seed(0)
x, y = np.arange(20, dtype=np.float32)[:, None], np.arange(20)
def orders(n):
    dataset = ArrayDataAdapter(x, y, batch_size=5, shuffle=True).get_tf_dataset()
    return [[int(v) for b in dataset for v in b[1].numpy()] for _ in range(n)]
first, again = orders(3), orders(1)
print(first[0] != list(range(20)), all(o == first[0] for o in first + again))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True"]  # shuffled, and the same in every epoch


def test_a_fit_on_arrays_killed_after_epoch_1_resumes_to_the_same_bits(launch, tmp_path, arrays_reference):
    work = work_dir(tmp_path, "work")
    run = _kill_after(work, tmp_path / "store", 1, *ARRAYS)
    out = _resumes_to_the_reference(launch, run, work, arrays_reference)
    assert "resumed from checkpoints/epoch-000001" in out
    trained_only_after(out, 1, 3)


@pytest.fixture(scope="module")
def two_fits_killed(tmp_path_factory) -> dict:
    """The two-fit script killed after the second fit's first epoch (checkpoint 3), keeping one
    checkpoint: ``{"work", "store", "run"}``. Each test resumes its own copy of the store (the
    resumed job runs in ``work``, where the run ran, one test after the other), so one killed run
    serves both: from checkpoint 3, and from the first fit's end (checkpoint 2, checkpoint 3 removed
    as from a run killed there a little late)."""
    parent = tmp_path_factory.mktemp("two-fits-killed")
    work = work_dir(parent, "work")
    run = _kill_after(work, parent / "store", 3, *TWO_FITS, KEEP_ONE)
    # the first fit's last checkpoint (epoch 2) outlived the pruning
    assert sorted(p.name for p in (run / "checkpoints").glob("epoch-*")) == ["epoch-000002", "epoch-000003"]
    return {"work": work, "store": parent / "store", "run": run}


def _copy_of(killed: dict, tmp_path: Path) -> Path:
    """The killed run, in a copy of its store of this test's own."""
    return copy_store(killed["store"], tmp_path / "store") / killed["run"].name


def test_a_two_fit_script_killed_in_its_second_fit_resumes_to_the_same_bits(
    launch, tmp_path, two_fits_reference, two_fits_killed
):
    """Killed after the second fit's first epoch, keeping one checkpoint: the first fit's last one
    (epoch 2) is kept too, and the resumed job fast-forwards the first fit from it."""
    run = _copy_of(two_fits_killed, tmp_path)
    assert sorted(p.name for p in (run / "checkpoints").glob("epoch-*")) == ["epoch-000002", "epoch-000003"]
    out = _resumes_to_the_reference(launch, run, two_fits_killed["work"], two_fits_reference)
    assert "[launch] fit 1 fast-forwarded to its end from checkpoints/epoch-000002" in out
    assert "resumed from checkpoints/epoch-000003: fit 2 continues after its epoch 1" in out
    assert epoch_lines(out) == ["Epoch 2/2"]  # fit 1 trained no epoch, fit 2 its second only


def test_a_two_fit_script_killed_at_its_first_fits_end_resumes_to_the_same_bits(
    launch, tmp_path, two_fits_reference, two_fits_killed
):
    """Killed once the first fit's last checkpoint exists: the first fit runs no epoch, and the
    second, on the same pipeline, reads the iterators the uninterrupted run read."""
    run = _copy_of(two_fits_killed, tmp_path)
    shutil.rmtree(run / "checkpoints" / "epoch-000003")  # killed a little late: from epoch 2
    out = _resumes_to_the_reference(launch, run, two_fits_killed["work"], two_fits_reference)
    assert epoch_lines(out) == ["Epoch 1/2", "Epoch 2/2"]  # fit 1 trained no epoch; fit 2 both of its own


def test_a_generator_that_gives_other_batches_when_run_again_is_refused_in_one_line(launch, tmp_path):
    """A generator is read again to its position at resume (tests/integration/test_resume_state.py); one whose
    batches differ when run again (unseeded noise here; a socket, a changed file) is refused, not trained on."""
    work = work_dir(tmp_path, "work")
    run = _kill_after(work, tmp_path / "store", 1, SCRIPTS / "generator_fit.py", "data.npz,3")
    done = launch("resume", run)
    assert done.returncode != 0 and "Traceback" not in done.stdout + done.stderr
    assert "its fit's Python generator gives other batches when run again than it gave" in done.stdout + done.stderr
    assert epoch_lines(done.stdout) == []  # nothing was trained on other data
    assert not (run / "manifest.json").exists()
    # the job refused before its first resumed step: the run is left interrupted, as it was, never failed
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "interrupted" and status["error"].startswith("the resume stopped before it trained")
    assert done.returncode == 130 and "INTERRUPTED: the resume stopped before it trained" in done.stdout
    assert "continue it with" not in done.stdout  # the same resume would refuse again


NOTEBOOK = Path(__file__).parent / "notebooks" / "train.ipynb"


def _notebook_args(store: Path, notebook: Path) -> list[str]:
    return [
        "train=notebook",
        f"train.notebook={notebook}",
        "determinism=strict",
        f"train.params={{data: {DATA}, epochs: 3}}",
        f"store.root={store}",
    ]


def test_a_killed_notebook_resumes_with_its_kept_cells_to_the_same_bits(launch, tmp_path):
    """A notebook (its fit on arrays) killed after epoch 1's checkpoint, then edited (a narrower
    convolution, as a user tuning while the run waited): the resume runs the notebook the run
    kept and ends with the uninterrupted run's weights and metrics; `launch compare` IDENTICAL."""
    notebook = tmp_path / "train.ipynb"
    shutil.copyfile(NOTEBOOK, notebook)
    done = launch(*_notebook_args(tmp_path / "reference", notebook), cwd=tmp_path)  # launched where the other is
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    reference = run_of(tmp_path / "reference")
    store = tmp_path / "store"
    store.mkdir()
    proc = start(_notebook_args(store, notebook), tmp_path)
    deadline = time.monotonic() + 300
    while not (
        (runs := [p for p in store.iterdir() if is_run(p)]) and (runs[0] / "checkpoints" / "epoch-000001").is_dir()
    ):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-2000:]
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    (run,) = runs
    assert not (run / "manifest.json").exists(), "the run finished before it could be killed"
    notebook.write_text(notebook.read_text().replace("Conv2D(8, 3", "Conv2D(4, 3"))
    done = launch("resume", run)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"changed since: {notebook}" in done.stderr  # a note: stderr
    result, expected = (json.loads((r / "result.json").read_text()) for r in (run, reference))
    assert result["weights_sha256"] == expected["weights_sha256"] and result["resumed_from_epoch"] == 1
    trained_only_after(done.stdout, 1, 3)
    assert (run / "metrics.jsonl").read_text() == (reference / "metrics.jsonl").read_text()
    compared = launch("compare", reference, run)
    assert compared.returncode == 0 and compared.stdout.startswith("IDENTICAL"), compared.stdout[-2000:]
