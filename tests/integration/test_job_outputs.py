"""A job's own files are its outputs, however they are written (real training, the real kernel).

``scripts/checkpoint_gan.py`` is the DCGAN tutorial's shape: ``checkpoint.save`` every epoch
into ./training_checkpoints (``SaveV2`` writes natively: no Python hook sees it) and
``checkpoint.restore(tf.train.latest_checkpoint(...))`` at the end. Run twice in one project
directory, the second run rewrites the first's checkpoints (``ckpt-N.index`` in place, the rest
renamed over) and reads them back: outputs both times, never data, so two runs with an
unseeded generator are DIFFERENT with the generator named, never REFUSED on their checkpoints.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import DATA, q, run_dir_of, run_launch, verdict_of

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parent / "scripts" / "checkpoint_gan.py"


@pytest.fixture(scope="module")
def gan_runs(tmp_path_factory) -> dict[str, list[Path]]:
    """Two seeded runs, then two with the unseeded generator, one after the other in one project."""
    project = tmp_path_factory.mktemp("gan")
    shutil.copy(DATA / "mnist-small" / "mnist-small.npz", project / "digits.npz")
    runs: dict[str, list[Path]] = {"seeded": [], "unseeded": []}
    for kind in ("seeded", "seeded", "unseeded", "unseeded"):
        args = "[digits.npz,unseeded]" if kind == "unseeded" else "[digits.npz]"
        done = run_launch(
            "train=script",
            f"train.script={q(SCRIPT)}",
            f"train.args={args}",
            f"store.root={q(project / 'store')}",
            cwd=project,
        )
        runs[kind].append(run_dir_of(done))
    return runs


def _fingerprint(run: Path) -> dict:
    return json.loads((run / "fingerprint.json").read_text())


def test_the_jobs_checkpoints_are_its_outputs_and_never_its_data(gan_runs):
    first, second = (_fingerprint(r) for r in gan_runs["seeded"])
    for fp in (first, second):
        assert list(fp["data"]) == ["digits.npz"]
    # the first run made the directory as it ran (watched once made), the second rewrote the first's files
    checkpoints = {f"training_checkpoints/{n}" for n in ("checkpoint", "ckpt-1.index", "ckpt-2.index")}
    checkpoints |= {f"training_checkpoints/ckpt-{n}.data-00000-of-00001" for n in (1, 2)}
    for fp in (first, second):
        outputs = fp["observation"]["outputs"]["files"]
        assert checkpoints <= set(outputs) and set(outputs.values()) == {"output"}, outputs


def test_two_runs_with_an_unseeded_generator_differ_and_it_is_named(launch, gan_runs):
    a, b = gan_runs["unseeded"]
    done = launch("compare", a, b)
    assert done.returncode == 1 and done.stdout.startswith("DIFFERENT"), done.stdout
    line = next(i for i, text in enumerate(SCRIPT.read_text().splitlines(), 1) if text.startswith("rng = "))
    assert f"likely cause: a generator made without a seed: np.random.default_rng() at checkpoint_gan.py:{line}" in (
        done.stdout
    )
    assert "training_checkpoints" not in done.stdout
    # against a seeded run the keys differ in the config alone: the checkpoints are never listed
    refused = launch("compare", gan_runs["seeded"][0], a)
    assert refused.returncode == 3 and "REFUSED" in refused.stdout, refused.stdout
    assert "training_checkpoints" not in refused.stdout
    mismatch = launch("compare", "--allow-mismatch", gan_runs["seeded"][0], a)
    assert "NOT COMPARABLE" in mismatch.stdout and "training_checkpoints" not in mismatch.stdout, mismatch.stdout


def test_seeded_runs_are_identical_and_a_replay_reproduces(launch, gan_runs):
    a, b = gan_runs["seeded"]
    done = launch("compare", a, b)
    assert done.returncode == 0 and done.stdout.startswith("IDENTICAL"), done.stdout
    replay = launch("replay", b)
    assert replay.returncode == 0, replay.stdout[-3000:] + replay.stderr[-2000:]
    verdict = verdict_of(replay.stdout)
    assert "\nREPRODUCED: " in verdict and "NOT COMPARABLE" not in verdict, replay.stdout
