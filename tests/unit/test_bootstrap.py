"""The job process refuses to train when a planned determinism setting did not take effect.

In-process and without TensorFlow: what the job applies and reads back is replaced by a fake
that reports one setting that did not take; the bootstrap must stop before any task code, with
the setting named in error.json. The same bootstrap with a faithful read-back goes on to the
run's next step, so the refusal comes from the check, not from the fakes.
"""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from launcher.job import bootstrap, determinism, tasks
from launcher.job.observe import reads
from launcher.record import layout
from launcher.record.probe import fingerprint
from launcher.record.store import runs
from launcher.run import composition, config


class PastVerification(Exception):
    """Raised by the step after verification: the bootstrap went on."""


@pytest.fixture
def job(tmp_path, monkeypatch):
    """A prepared run directory with a strict plan; the job's outside effects faked."""
    plan = determinism.plan("strict", 7, 1, 1, False)
    runs.write_json(
        layout.RunPaths(tmp_path).job, {"plan": plan.to_dict(), "progress": False, "launch_dir": str(tmp_path)}
    )
    resolved = config.resolve(
        composition.compose(["+seed=7", "determinism.intra_op_threads=1", "determinism.inter_op_threads=1"])
    )
    layout.RunPaths(tmp_path).config.write_text(OmegaConf.to_yaml(resolved))
    for name in ("LAUNCH_RUN_DIR", "LAUNCH_OUTPUT_DIR", "LAUNCH_SEED", "LAUNCH_TRACE_EVERY"):
        monkeypatch.setenv(name, "restored after the test")  # the bootstrap sets them
    monkeypatch.setattr(reads, "install", lambda: None)  # an audit hook cannot be removed again
    monkeypatch.setattr(reads, "wrap_native_readers", lambda: None)
    applied = []
    monkeypatch.setattr(determinism, "apply", applied.append)

    def past(*args, **kwargs):
        raise PastVerification

    monkeypatch.setattr(fingerprint, "job_facts", past)
    trained = []
    monkeypatch.setattr(tasks, "get", lambda name: trained.append(name))
    return tmp_path, plan, applied, trained


def _read_back(plan: determinism.Plan, **changed) -> dict:
    """What TensorFlow would report had every planned setting taken effect, with ``changed``."""
    effective = {
        "level": plan.level,
        "seed": plan.seed,
        "op_determinism": plan.op_determinism,
        "intra_op_threads": plan.intra_op_threads,
        "inter_op_threads": plan.inter_op_threads,
        "deterministic_data": plan.deterministic_data,
        "jit_compile": plan.jit_compile,
        "env": dict(plan.env),
        "keras": {},
        "sessions": [],
        "random_ops": plan.random_ops,
    }
    effective.update(changed)
    return effective


@pytest.mark.parametrize(
    "changed,named",
    [
        ({"op_determinism": False}, "op determinism is not enabled"),
        ({"intra_op_threads": 2}, "intra_op_threads=2 (planned 1)"),
        ({"env": {"PYTHONHASHSEED": "0"}}, "PYTHONHASHSEED='0' (planned '7')"),
        ({"jit_compile": True}, "jit_compile=True (planned False)"),
        ({"deterministic_data": False}, "deterministic_data=False (planned True)"),
    ],
)
def test_a_setting_that_did_not_take_effect_stops_the_job_before_its_task(job, monkeypatch, changed, named):
    run_dir, plan, applied, trained = job
    monkeypatch.setattr(determinism, "read_back", lambda p: _read_back(p, **changed))
    assert bootstrap.main([str(run_dir)]) == 1
    error = json.loads(layout.RunPaths(run_dir).error.read_text())
    assert error["type"] == "DeterminismError", error
    assert error["message"].startswith("determinism settings did not take effect: ") and named in error["message"]
    assert applied == [plan] and trained == []


def test_a_faithful_read_back_goes_on_past_the_check(job, monkeypatch):
    run_dir, plan, applied, trained = job
    monkeypatch.setattr(determinism, "read_back", _read_back)
    assert bootstrap.main([str(run_dir)]) == 1
    assert json.loads(layout.RunPaths(run_dir).error.read_text())["type"] == "PastVerification"
    assert applied == [plan]
