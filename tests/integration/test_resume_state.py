"""Resume restores everything the job holds (issue 42), and lazily built models resume (issue 39): real
kills and stops of scripts written without the launcher in mind, `launch resume`, and the bits compared
with an uninterrupted run's.

- The most common Keras shape (the acceptance shape of issue 42): a tf.data pipeline reshuffled every
  epoch, a map applying tf.image.random_flip_left_right and a RandomTranslation layer made outside the
  model (its seed generator: a variable outside the model that advances with every image), batch,
  prefetch; a CNN with Dropout, ReduceLROnPlateau and EarlyStopping; SIGKILL after epoch 2, then its
  resume SIGTERMed after epoch 3, and resumed again.
- A fit on a Python generator (with steps_per_epoch) of a Sequential without Input, and one on a
  keras.utils.PyDataset of a model built in its first call: fast-forwarded, and built before the restore.

Each resumed process must have trained the remaining epochs only (its epoch lines)."""

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.integration.resumed import (
    epoch_lines,
    record,
    start,
    stop_after_checkpoint,
    strict_script,
    trained_only_after,
    uninterrupted,
    work_dir,
)

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).parent / "scripts"
AUGMENT = (SCRIPTS / "augment_fit.py", "data.npz,6,outputs")
GENERATOR = (SCRIPTS / "fit_kinds.py", "data.npz,4,outputs,generator,sequential")
PYDATASET = (SCRIPTS / "fit_kinds.py", "data.npz,4,outputs,pydataset,subclassed")


@pytest.fixture(scope="module")
def augment_reference(tmp_path_factory) -> dict:
    return uninterrupted(tmp_path_factory.mktemp("augment-reference"), *AUGMENT)


def _stop_after(work: Path, store: Path, epoch: int, signum: int, script: Path, script_args: str):
    """Start the run; once checkpoint ``epoch`` exists, SIGKILL its process group or send ``signum`` to the
    launcher. Returns the run and the launcher's (returncode, stdout)."""
    run, proc = stop_after_checkpoint(work, store, epoch, signum, strict_script(store, script, script_args))
    out, err = proc.communicate(timeout=120)
    assert not (run / "manifest.json").exists(), "the run finished before it could be stopped"
    return run, proc.returncode, out + err


def _resumes_to(launch, run: Path, work: Path, reference: dict, epochs: int) -> str:
    """Resume ``run``: the remaining epochs only, every bit of the reference's, `launch compare` IDENTICAL."""
    done = launch("resume", run)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    trained_only_after(done.stdout, json.loads((run / "result.json").read_text())["resumed_from_epoch"], epochs)
    resumed = record(run, work)
    for key in ("weights", "layers", "metrics", "trace", "history", "final", "saved"):
        assert resumed[key] == reference[key], key
    compared = launch("compare", reference["run"], run)
    assert compared.returncode == 0 and compared.stdout.startswith("IDENTICAL"), compared.stdout[-2000:]
    return done.stdout


def test_augmentation_killed_after_epoch_2_and_its_resume_stopped_after_epoch_3_resumes_to_the_same_bits(
    launch, tmp_path, augment_reference
):
    """SIGKILL after epoch 2; its resume SIGTERMed after epoch 3 (a run stopped twice, the second time
    in a resumed job, whose checkpoint 3 must hold what a fresh job's would); resumed again: epochs 4-6
    only, every bit of the uninterrupted run's. (One run for what were a SIGKILL and a SIGTERM test.)"""
    work = work_dir(tmp_path, "work")
    run, _, _ = _stop_after(work, tmp_path / "store", 2, signal.SIGKILL, *AUGMENT)
    extra = json.loads((run / "checkpoints" / "epoch-000002" / "extra.json").read_text())
    assert [v["key"][0] for v in extra["variables"]] == ["seed_generator/seed_generator_state:0"]  # RandomTranslation's
    resuming = start(["resume", str(run)], work)
    try:
        deadline = time.monotonic() + 300
        while not (run / "checkpoints" / "epoch-000003").is_dir():
            assert resuming.poll() is None and time.monotonic() < deadline, resuming.communicate()[0][-2000:]
            time.sleep(0.02)
        os.kill(resuming.pid, signal.SIGTERM)  # the launcher alone, as a scheduler's stop
        out, err = resuming.communicate(timeout=120)
    finally:
        if resuming.poll() is None:
            os.killpg(resuming.pid, signal.SIGKILL)
    assert resuming.returncode == 130 and "INTERRUPTED: SIGTERM" in out + err, (out + err)[-2000:]
    assert not (run / "manifest.json").exists(), "the resume finished before it could be stopped"
    assert epoch_lines(out)[0] == "Epoch 3/6", out[-2000:]  # the first resume trained on from epoch 3
    _resumes_to(launch, run, work, augment_reference, 6)
    assert json.loads((run / "result.json").read_text())["resumed_from_epoch"] == 3
    assert [h["from_epoch"] for h in json.loads((run / "job.json").read_text())["resume"]["history"]] == [2, 3]


@pytest.mark.parametrize("kind", [GENERATOR, PYDATASET], ids=["generator-lazy-sequential", "pydataset-subclassed"])
def test_a_fit_fast_forwarded_and_built_before_the_restore_resumes_to_the_same_bits(launch, tmp_path, kind):
    (tmp_path / "reference").mkdir()
    reference = uninterrupted(tmp_path / "reference", *kind)
    work = work_dir(tmp_path, "work")
    run, _, _ = _stop_after(work, tmp_path / "store", 2, signal.SIGKILL, *kind)
    out = _resumes_to(launch, run, work, reference, 4)
    what = "a Python generator" if "generator" in kind[1] else "a keras.utils.PyDataset"
    epochs = json.loads((run / "result.json").read_text())["resumed_from_epoch"]
    assert f"[launch] fast-forwarding the input pipeline through {epochs} epochs ({what}): " in out
