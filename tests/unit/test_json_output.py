"""``--json`` (issue 47): ``launch runs``, ``compare``, ``verify``, ``replay`` and ``sweep replay`` print one
JSON document on stdout, everything else on stderr, with the exit code the text would have; a command
that fails prints its line on stderr and an error document on stdout. Every top-level field of each
document is in docs/json.md. On sealed runs made by ``tests.factories`` (no training; a replay is faked).
"""

from __future__ import annotations

import copy
import datetime as _dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import launcher.verdict
from launcher.cli import main as cli
from launcher.errors import ExitCode, NotComparable
from launcher.record.store import runs
from launcher.verdict import compare
from launcher.verdict import replay as verdict_replay
from tests import factories
from tests.unit.test_fingerprint import _fp
from tests.unit.test_sweep import FakeReplay, _replay_sweep

DOCS = Path(__file__).resolve().parents[2] / "docs" / "json.md"
CONFIG = "seed: 0\ntrain:\n  name: mnist\ndeterminism:\n  level: strict\n"


def _run(store: Path, minute: int, fp: dict | None = None, weights: str = "ab" * 32, **over) -> Path:
    return factories.sealed_run(
        store,
        config=CONFIG,
        fingerprint=fp or _fp(),
        result={"weights_sha256": weights, "final_metrics": {"loss": 0.5}},
        metrics=[{"epoch": 1, "loss": 0.5}],
        now=_dt.datetime(2026, 11, 23, 12, minute),
        **over,
    )


def _document(capfd, code: int, argv: list[str]) -> tuple[dict, str]:
    """Run ``launch ARGV``: it must exit ``code`` and print exactly one JSON document on stdout
    (file descriptor 1 included), whose ``exit_code`` is that code; the document and stderr."""
    assert cli.main(argv) == code
    out, err = capfd.readouterr()
    doc = json.loads(out)  # the whole of stdout: one document, nothing before or after it
    assert doc["schema"] == 1 and doc["exit_code"] == code and doc["ok"] == (code == 0)
    _documented(doc)
    return doc, err


def _documented(doc: dict) -> None:
    """Every top-level field of ``doc`` is named in docs/json.md: in "Every document", or in its own
    section (its command's, or "When a command fails" for an error document)."""
    sections = {part.split("\n", 1)[0]: part for part in DOCS.read_text().split("\n## ")[1:]}
    heading = "When a command fails" if "error" in doc else f"`launch {doc['command']} "
    (own,) = [text for title, text in sections.items() if title.startswith(heading)]
    (common,) = [text for title, text in sections.items() if title.startswith("Every document")]
    missing = [key for key in doc if f"`{key}`" not in own + common]
    assert not missing, f"docs/json.md does not describe {missing} of launch {doc['command']} --json"


# ---------------------------------------------------------------- runs
def test_runs_json_lists_every_run_with_its_fields(tmp_path, capfd):
    a, b = _run(tmp_path, 1), _run(tmp_path, 2, weights="cd" * 32)
    doc, err = _document(capfd, 0, ["runs", "--store", str(tmp_path), "--json"])
    assert doc["command"] == "runs" and doc["count"] == 2 and doc["store"] == str(tmp_path.resolve())
    assert [r["id"] for r in doc["runs"]] == [b.name, a.name]  # newest first, as the table
    first = doc["runs"][0]
    assert first["path"] == str(b) and first["weights_sha256"] == "cd" * 32 and first["status"] == "complete"
    assert first["metrics"] == {"loss": 0.5} and first["task"] == "mnist" and first["seed"] == 0
    assert "run(s)" not in err  # no table anywhere


# ---------------------------------------------------------------- compare
def test_compare_json_identical_names_both_runs_weights_and_signers(tmp_path, capfd):
    a, b = _run(tmp_path, 1), _run(tmp_path, 2)
    doc, err = _document(capfd, ExitCode.OK, ["compare", str(a), str(b), "--json"])
    assert doc["command"] == "compare" and doc["verdict"] == "IDENTICAL" and doc["differences"] == []
    assert [(r["id"], r["path"], r["weights_sha256"]) for r in doc["runs"]] == [
        (a.name, str(a), "ab" * 32),
        (b.name, str(b), "ab" * 32),
    ]
    assert [r["signer"]["state"] for r in doc["runs"]] == ["unsigned", "unsigned"]
    assert doc["compared"] == ["weights", "1 epoch's metrics"] and doc["equal"] is True
    assert doc["same_run"] is False and doc["tolerance"] is None and err == ""


def test_compare_json_refused_lists_each_field_with_both_values(tmp_path, capfd):
    other = copy.deepcopy(_fp())
    other["determinism"]["intra_op_threads"] = 2
    a, b = _run(tmp_path, 1), _run(tmp_path, 2, other)
    doc, _ = _document(capfd, ExitCode.REFUSED, ["compare", str(a), str(b), "--json"])
    assert doc["verdict"] == "REFUSED"
    assert {"field": "determinism.intra_op_threads", "a": 1, "b": 2} in doc["differences"]
    # the text says the same, from the same Comparison
    assert cli.main(["compare", str(a), str(b)]) == ExitCode.REFUSED
    text = capfd.readouterr().out
    assert text.startswith("REFUSED") and "determinism.intra_op_threads" in text


def test_compare_json_and_text_come_from_one_comparison(tmp_path, capfd):
    a, b = _run(tmp_path, 1), _run(tmp_path, 2, weights="cd" * 32)
    result = compare.compare_runs(a, b)
    doc, _ = _document(capfd, result.exit_code, ["compare", str(a), str(b), "--json"])
    assert (doc["verdict"], doc["exit_code"]) == (result.verdict, result.exit_code) == ("DIFFERENT", 1)
    assert [r["weights_sha256"] for r in doc["runs"]] == list(result.weights) == ["ab" * 32, "cd" * 32]
    assert doc["notes"] == result.notes


def test_a_failing_command_with_json_prints_its_line_and_an_error_document(tmp_path, capfd):
    a = _run(tmp_path, 1)
    doc, err = _document(capfd, ExitCode.USAGE, ["compare", str(a), str(tmp_path / "nope"), "--json"])
    assert doc["command"] == "compare" and doc["error"]["type"] == "RunNotFound" and "verdict" not in doc
    assert err.count("\n") == 1 and err.startswith("launch: error: ") and doc["error"]["message"] in err
    doc, err = _document(capfd, ExitCode.USAGE, ["compare", str(a), "--json"])  # argparse's error
    assert doc["error"]["type"] == "UsageError" and "RUN_B" in doc["error"]["message"]
    # without --json, stdout stays empty
    assert cli.main(["compare", str(a), str(tmp_path / "nope")]) == ExitCode.USAGE
    assert capfd.readouterr().out == ""


# ---------------------------------------------------------------- verify, and signatures
@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict:
    if shutil.which("ssh-keygen") is None:
        pytest.skip("needs ssh-keygen (openssh-client)")
    root = tmp_path_factory.mktemp("keys")
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice", "-f", str(root / "alice")], check=True
    )
    public = (root / "alice.pub").read_text().split()
    (root / "allowed_signers").write_text(f'alice@lab namespaces="launch-run" {public[0]} {public[1]}\n')
    return {"alice": root / "alice", "allowed": root / "allowed_signers"}


def test_verify_json_says_the_seal_and_who_signed_it(tmp_path, keys, capfd):
    run = _run(tmp_path, 1, signing_key=str(keys["alice"]))
    argv = ["verify", str(run), f"store.allowed_signers={keys['allowed']}", "--json"]
    doc, _ = _document(capfd, ExitCode.OK, argv)
    (entry,) = doc["runs"]
    assert doc["command"] == "verify" and doc["seal"] == "intact" and doc["archive"] is None
    assert (entry["id"], entry["path"], entry["weights_sha256"]) == (run.name, str(run), "ab" * 32)
    assert entry["signer"]["state"] == "trusted" and entry["signer"]["principal"] == "alice@lab"
    assert entry["signer"]["key"].startswith("SHA256:") and entry["files"] > 0
    doc, _ = _document(capfd, ExitCode.OK, ["verify", str(_run(tmp_path / "u", 2)), "--json"])
    assert doc["runs"][0]["signer"] == {
        "state": "unsigned",
        "principal": None,
        "key": None,
        "why": None,
        "text": "unsigned",
    }


def test_a_signed_run_resealed_without_the_key_exits_with_the_signature_code(tmp_path, keys, capfd):
    from tests.unit.test_signing import reseal_without_the_key

    run = _run(tmp_path, 1, signing_key=str(keys["alice"]))
    other = _run(tmp_path, 2)
    reseal_without_the_key(run)
    runs.verify_seal(run)  # the unkeyed seal holds: only the signature tells
    for argv in (["verify", str(run)], ["compare", str(run), str(other)], ["replay", str(run)]):
        assert cli.main(argv) == ExitCode.SIGNATURE == 7, argv
        out, err = capfd.readouterr()
        assert out == "" and err.count("\n") == 1 and "does not verify" in err and run.name in err
        doc, err = _document(capfd, ExitCode.SIGNATURE, [*argv, "--json"])
        assert doc["error"]["type"] == "SignatureError" and "does not verify" in err
    assert ExitCode.SIGNATURE not in (ExitCode.REFUSED, ExitCode.SEAL)  # its own code, not REFUSED's


# ---------------------------------------------------------------- replay (faked: no training)
def test_replay_json_is_one_document_whatever_the_job_printed(tmp_path, capfd, monkeypatch):
    original = _run(tmp_path, 1)
    new = _run(tmp_path, 2)

    def replayed(run, **kwargs):
        print("Epoch 1/1 ... the job's output")  # what a job prints goes to stdout without --json
        os.write(1, b"[launch] written to file descriptor 1 by a program\n")
        return verdict_replay.verdict(Path(run), new)

    monkeypatch.setattr(verdict_replay, "replay", replayed)
    doc, err = _document(capfd, ExitCode.OK, ["replay", str(original), "--json"])
    assert doc["command"] == "replay" and doc["verdict"] == "REPRODUCED" and doc["differences"] == []
    assert [(r["id"], r["weights_sha256"]) for r in doc["runs"]] == [(original.name, "ab" * 32), (new.name, "ab" * 32)]
    assert doc["runs"][0]["signer"]["state"] == "unsigned" and doc["runs"][1]["signer"] is None
    assert doc["compared"] == ["weights", "1 epoch's metrics"] and doc["reason"] is None
    assert "the job's output" in err and "file descriptor 1" in err and f"the stored run {original.name}" in err
    assert cli.main(["replay", str(original)]) == 0  # the text: the same verdict, everything on stdout
    out, err = capfd.readouterr()
    assert f"REPRODUCED: replay {new} of " in out and "the job's output" in out and "file descriptor 1" in out


def test_replay_json_refused_names_each_field_of_the_environment(tmp_path, capfd, monkeypatch):
    original = _run(tmp_path, 1)

    def refused(run, **kwargs):
        raise NotComparable("cannot replay it here: 1 field differs", [("software.tensorflow", "2.16.1", "2.17.0")])

    monkeypatch.setattr(verdict_replay, "replay", refused)
    doc, _ = _document(capfd, ExitCode.REFUSED, ["replay", str(original), "--json"])
    assert doc["verdict"] == "REFUSED" and doc["reason"] == "cannot replay it here: 1 field differs"
    assert doc["differences"] == [{"field": "software.tensorflow", "a": "2.16.1", "b": "2.17.0"}]
    assert [r["id"] for r in doc["runs"]] == [original.name]


def test_sweep_replay_json_is_the_report(tmp_path, capfd, monkeypatch):
    d = _replay_sweep(tmp_path, ["complete", "complete", "failed"])
    fake = FakeReplay({"run0": "REPRODUCED", "run1": "RAISE"})
    monkeypatch.setitem(sys.modules, "launcher.verdict.replay", fake)
    monkeypatch.setattr(launcher.verdict, "replay", fake, raising=False)
    doc, err = _document(capfd, 1, ["sweep", "replay", str(d), "--json"])
    assert doc["command"] == "sweep replay" and (doc["reproduced"], doc["total"]) == (1, 3)
    assert [j["verdict"] for j in doc["jobs"]] == ["REPRODUCED", "NOT COMPARABLE", "NOT RUN"]
    assert Path(doc["report"]).parent == d / "verify" and json.loads(Path(doc["report"]).read_text())["total"] == 3
    assert doc["jobs"][0]["runs"][0]["path"] == str(tmp_path / "run0") and "[sweep] replay job 000" in err
    assert doc["jobs"][1]["differences"] == [] and "key differs" in doc["jobs"][1]["detail"]
