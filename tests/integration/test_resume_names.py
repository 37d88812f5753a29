"""Resume restores by name, and says when it cannot be bitwise (issue 46): TensorFlow's mixed precision
guide (a LossScaleOptimizer, whose counters and slots a restore by position mixed up) killed after
epoch 2 resumes IDENTICAL; keras-io's VAE shape, whose Sampling layer draws with the legacy
keras.backend.random_normal (a random op whose state is in no variable), is named before the resume
trains, and compare says why its bits differ. Both scripts are unmodified; each is killed for real."""

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.resumed import (
    env,
    record,
    stop_after_checkpoint,
    strict_script,
    trained_only_after,
    uninterrupted,
    work_dir,
)

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).parent / "scripts"
MIXED = (SCRIPTS / "mixed_precision_fit.py", "data.npz,3,outputs")  # 3 epochs of 4 steps
VAE = (SCRIPTS / "vae_fit.py", "data.npz,2,outputs,legacy")  # 2 epochs of 4 steps
WARNING = "[launch] warning: this resume will not be bitwise"
# where the Sampling layer draws with the legacy op, as the warning must name it
DRAWN_AT = "vae_fit.py:" + str(
    next(n for n, line in enumerate(VAE[0].read_text().splitlines(), 1) if "= keras.backend.random_normal(" in line)
)


def _killed(tmp_path: Path, epoch: int, script: Path, args: str) -> tuple[Path, Path]:
    """The script's run, its launch's process group SIGKILLed once checkpoint ``epoch`` exists."""
    work = work_dir(tmp_path, "work")
    run, proc = stop_after_checkpoint(
        work, tmp_path / "store", epoch, signal.SIGKILL, strict_script(tmp_path / "store", script, args)
    )
    proc.communicate(timeout=60)
    assert not (run / "manifest.json").exists(), "the run finished before it could be killed"
    return run, work


def _resume(run: Path, work: Path) -> subprocess.CompletedProcess:
    """``launch resume RUN`` with stdout and stderr in one stream, as a redirected log has them."""
    return subprocess.run(
        [sys.executable, "-m", "launcher", "resume", str(run)],
        cwd=work,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )


def _observed(run: Path) -> dict:
    return json.loads((run / "result.json").read_text())["observed"]


def test_a_mixed_precision_fit_killed_after_epoch_2_resumes_identical(launch, tmp_path):
    (tmp_path / "reference").mkdir()
    reference = uninterrupted(tmp_path / "reference", *MIXED)
    (tmp_path / "killed").mkdir()
    run, work = _killed(tmp_path / "killed", 2, *MIXED)
    done = _resume(run, work)
    assert done.returncode == 0, done.stdout[-3000:]
    resumed = record(run, work)
    for key in ("weights", "layers", "metrics", "trace", "history", "final"):
        assert resumed[key] == reference[key], key
    observed = _observed(run)
    assert observed.pop("steps_restored") == 8  # epochs 1-2 of 4 steps, from the checkpoint
    assert observed == _observed(reference["run"])  # optimizer_steps: each step counted once
    assert "steps_restored" not in _observed(reference["run"])
    trained_only_after(done.stdout, 2, 3)
    assert WARNING not in done.stdout  # nothing of its train function escapes a checkpoint
    lines = done.stdout.splitlines()
    abandoned = next(i for i, line in enumerate(lines) if "was abandoned" in line and "resuming it" in line)
    assert abandoned < lines.index("Epoch 3/3")  # said when it happened, before the job's output
    compared = launch("compare", reference["run"], run)
    assert compared.returncode == 0 and compared.stdout.startswith("IDENTICAL"), compared.stdout[-2000:]


def test_a_legacy_random_op_in_a_train_step_is_named_before_the_resume_trains(launch, tmp_path):
    (tmp_path / "reference").mkdir()
    reference = uninterrupted(tmp_path / "reference", *VAE)
    (tmp_path / "killed").mkdir()
    run, work = _killed(tmp_path / "killed", 1, *VAE)
    done = _resume(run, work)
    assert done.returncode == 0, done.stdout[-3000:]
    trained_only_after(done.stdout, 1, 2)
    lines = done.stdout.splitlines()
    (warning,) = [line for line in lines if line.startswith(WARNING)]
    assert f"RandomStandardNormal at {DRAWN_AT}" in warning and "SeedGenerator" in warning
    first_step = next(i for i, line in enumerate(lines) if "loss:" in line)  # the epoch's end: its steps ran
    assert lines.index("Epoch 2/2") < lines.index(warning) < first_step
    assert _observed(run)["resume_not_bitwise"] == [{"op": "RandomStandardNormal", "where": DRAWN_AT}]
    assert "resume_not_bitwise" not in _observed(reference["run"])
    compared = launch("compare", reference["run"], run)
    assert compared.stdout.startswith("NOT COMPARABLE"), compared.stdout[-2000:]
    assert f"its resume said it would not be bitwise: RandomStandardNormal at {DRAWN_AT}" in compared.stdout
