"""The audit's report is written whatever stops it: Ctrl-C in a job, Ctrl-C between jobs, a crash (issue 17)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.run.pipeline import Outcome
from launcher.verdict import audit


def _audit(tmp_path: Path, monkeypatch, capsys, job_run) -> tuple[int | type, Path, list[str], list[str]]:
    """The audit's exit code (or the error it raised), its directory, and what it printed: its report
    on stdout, its notes ([audit] ...) on stderr."""
    monkeypatch.setattr("launcher.run.pipeline.run", job_run)
    store = tmp_path / "store"
    try:
        code = audit.run([f"store.root={store}", "audit.knobs=[level]"])
    except RuntimeError:
        code = RuntimeError
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped the audit: it must end it with its report and exit 130")
    (audit_dir,) = (store / "audits").iterdir()
    said = capsys.readouterr()
    return code, audit_dir, said.out.splitlines(), said.err.splitlines()


def _report(audit_dir: Path) -> dict:
    assert not (audit_dir / "audit.json").stat().st_mode & 0o222  # read-only once written
    assert not (audit_dir / "audit.txt").stat().st_mode & 0o222
    return json.loads((audit_dir / "audit.json").read_text())


def test_ctrl_c_in_a_job_ends_the_audit_with_its_report_and_exit_130(tmp_path, monkeypatch, capsys):
    calls = []

    def interrupted(cfg, options=None, **_):
        calls.append(cfg)
        return Outcome(tmp_path / "store" / "20261123-120000-abcdef", "interrupted", 0, returncode=130)

    code, audit_dir, printed, notes = _audit(tmp_path, monkeypatch, capsys, interrupted)
    assert code == 130 and len(calls) == 1  # no run starts after the interrupted one
    report = _report(audit_dir)
    assert [(r["knob"], r["status"], r["run"]) for r in report["rows"]] == [
        ("repeat", "interrupted", "20261123-120000-abcdef")
    ]
    assert report["verdict"]["interrupted"] is True and report["verdict"]["stable"] is None
    text = (audit_dir / "audit.txt").read_text()
    assert "interrupted: the audit is incomplete" in text and text.strip() in "\n".join(printed)
    assert notes[-1] == f"[audit] saved {audit_dir / 'audit.txt'} and audit.json"


def test_ctrl_c_between_jobs_still_writes_the_report(tmp_path, monkeypatch, capsys):
    def ctrl_c(cfg, options=None, **_):
        raise KeyboardInterrupt

    code, audit_dir, _, _ = _audit(tmp_path, monkeypatch, capsys, ctrl_c)
    assert code == 130
    report = _report(audit_dir)
    assert [(r["knob"], r["value"], r["status"]) for r in report["rows"]] == [("-", "-", "interrupted")]
    assert report["seed"] == 0 and report["options"]["knobs"] == ["level"] and report["schema"] == 1


def test_a_crash_still_writes_the_report_and_is_raised(tmp_path, monkeypatch, capsys):
    def crash(cfg, options=None, **_):
        raise RuntimeError("bug")

    code, audit_dir, printed, notes = _audit(tmp_path, monkeypatch, capsys, crash)
    assert code is RuntimeError
    report = _report(audit_dir)
    assert report["rows"] == [] and report["verdict"]["interrupted"] is True
    assert printed == [] and len(notes) == 1 and notes[0].startswith("[audit] 4 runs of train=mnist")


def test_a_job_that_fails_as_configured_ends_the_audit_with_exit_1(tmp_path, monkeypatch, capsys):
    def failing(cfg, options=None, **_):
        return Outcome(tmp_path / "store" / "20261123-120000-abcdef", "failed", 0, error="boom")

    code, audit_dir, _, _ = _audit(tmp_path, monkeypatch, capsys, failing)
    assert code == 1
    rows = _report(audit_dir)["rows"]
    assert [(r["status"], r["note"]) for r in rows] == [("failed", "boom")]
