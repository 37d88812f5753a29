"""Hints that hold (issue 39): ``launch compare`` and an interrupted run's last line offer
``launch resume RUN`` only where resume would accept the run; otherwise they say why it cannot be
resumed (a custom loop with no checkpoints, a fit with steps_per_epoch)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from launcher.cli import main as cli
from launcher.errors import SealError
from launcher.record import checkpoints, hashing, layout
from launcher.record.store import runs
from launcher.verdict import compare
from tests import factories


def _interrupted(store: Path, fit: dict | None = None, state: str = "interrupted") -> Path:
    """An interrupted train=script run, with one epoch checkpoint of an observed fit when ``fit`` is given."""
    run_dir = factories.sealed_run(
        store, config="seed: 0\ntrain:\n  name: script\n  script: /w/train.py\n", state=state
    )
    if fit is not None:
        ckpt = layout.RunPaths(run_dir).checkpoints / checkpoints.name(1)
        ckpt.mkdir(parents=True)
        runs.write_json(ckpt / checkpoints.EXTRA, fit)
        runs.write_json(
            ckpt / checkpoints.MANIFEST, {"files": {checkpoints.EXTRA: hashing.file_sha256(ckpt / checkpoints.EXTRA)}}
        )
    return run_dir


CASES = [
    (None, "launch resume would refuse it: it has no checkpoints", "a custom loop: use"),  # no fit, no checkpoint
    (
        {"fit": 1, "input": "tf.data", "steps_per_epoch": 20},
        "launch resume would refuse it: its fit",
        "steps_per_epoch",
    ),
    ({"fit": 1, "input": "tf.data", "steps_per_epoch": None}, "continue it with: launch resume", ""),
]


@pytest.mark.parametrize("fit, says, why", CASES)
def test_compare_offers_resume_only_where_resume_accepts(tmp_path, capsys, fit, says, why):
    run_dir = _interrupted(tmp_path, fit)
    with pytest.raises(SealError) as caught:
        compare.load(run_dir)
    message = str(caught.value)
    assert message.startswith(f"run {run_dir.name} is not complete (state: interrupted; no manifest.json); {says}")
    assert why in message
    assert (f"launch resume {run_dir}" in message) == (fit is not None and fit["steps_per_epoch"] is None)
    assert cli.main(["compare", str(run_dir), str(factories.sealed_run(tmp_path))]) == 4  # one line, exit 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err and "Traceback" not in err


@pytest.mark.parametrize("fit, says, why", CASES)
def test_the_interrupted_runs_last_line_offers_resume_only_where_resume_accepts(tmp_path, fit, says, why):
    run_dir = _interrupted(tmp_path, fit)
    hint = cli.resume_hint(SimpleNamespace(status="interrupted", run_dir=run_dir))
    assert hint.startswith(f"; {says}") and why in hint
    assert (f"launch resume {run_dir}" in hint) == (fit is not None and fit["steps_per_epoch"] is None)
    assert cli.resume_hint(SimpleNamespace(status="failed", run_dir=run_dir)) == ""


def test_a_failed_run_is_refused_by_compare_without_advice(tmp_path):
    run_dir = _interrupted(tmp_path, {"fit": 1, "input": "tf.data"}, state="failed")
    with pytest.raises(SealError) as caught:
        compare.load(run_dir)
    assert "resume" not in str(caught.value)
    assert json.loads((run_dir / "status.json").read_text())["state"] == "failed"  # untouched
