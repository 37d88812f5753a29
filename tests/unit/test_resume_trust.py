"""``launch resume`` and trust: the resumed run's seal is signed with the resumer's key
(``store.signing_key`` given to resume; none by default), never with the key the run's own config
names; resume takes the ``store.*`` words as replay does, says whose run it resumes from the store's
ledger (``layout.CREATED``), and under ``store.require_signed=true`` refuses a run this store did not
create, before anything of it is written."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from launcher.cli import main as cli
from launcher.errors import ConfigError, ExitCode, ResumeError, SealError, SignatureError
from launcher.record import hashing, layout
from launcher.record.store import runs, signing
from launcher.run import pipeline, resume
from tests.conftest import NPZ, TINY, is_run, q, run_dir_of

CRAFTED_KEY = "~/.ssh/id_ed25519"  # what a crafted run's config.yaml names: the resumer's own key


def _interrupted(store: Path, signing_key: str | None = CRAFTED_KEY) -> Path:
    """An interrupted mnist run made in ``store`` (noted in its ledger) with one complete checkpoint,
    its config naming ``signing_key`` as a crafted run's would."""
    run = runs.create(store, ledger=True)
    store_node = f"store:\n  signing_key: {signing_key}\n" if signing_key else ""
    runs.write_bytes(run / "config.yaml", f"seed: 0\ntrain:\n  name: mnist\n{store_node}".encode())
    runs.write_json(run / "fingerprint.json", {})
    runs.write_bytes(run / "metrics.jsonl", b'{"epoch": 1}\n{"epoch": 2}\n')
    checkpoint = run / "checkpoints" / "epoch-000001"
    checkpoint.mkdir(parents=True)
    (checkpoint / "state.index").write_bytes(b"variables")
    runs.write_json(
        checkpoint / "checkpoint.json",
        {"epoch": 1, "files": {"state.index": hashing.file_sha256(checkpoint / "state.index")}},
    )
    runs.set_status(run, "interrupted", error="SIGTERM", returncode=130)
    return run


def _tree(root: Path) -> dict:
    """Every path below ``root`` with its mode and content: what "nothing was written" compares."""
    return {
        p.relative_to(root).as_posix(): (p.stat().st_mode, p.read_bytes() if p.is_file() else None)
        for p in sorted([root, *root.rglob("*")])
    }


@pytest.fixture
def handed_to_execute(monkeypatch) -> list[pipeline.Options]:
    """Resume as far as ``pipeline.execute``, which records what it was handed instead of training (the
    environment checks, which a hand-made run cannot pass, are left out)."""
    calls: list[dict] = []
    monkeypatch.setattr(resume.precheck, "key_differences_now", lambda *a, **k: [])
    monkeypatch.setattr(resume.gpus, "check", lambda *a, **k: None)

    def execute(resolved, run_dir, options):
        calls.append(options)
        return pipeline.Outcome(run_dir, "complete", 0)

    monkeypatch.setattr(pipeline, "execute", execute)
    return calls


# ---------------------------------------------------------------- the key: the resumer's, never the run's
def test_the_resumed_seal_is_signed_with_the_resumers_key_never_the_one_the_run_names(tmp_path, handed_to_execute):
    run = _interrupted(tmp_path / "store")
    resume.resume(run, echo=False)  # the resumer gave no key: none, whatever the run's config says
    resume.resume(run, echo=False, store={"signing_key": "/keys/resumer"})
    assert [call.signing_key for call in handed_to_execute] == [None, "/keys/resumer"]


# ---------------------------------------------------------------- whose run: the store's ledger
def test_the_store_notes_each_run_it_creates_outside_the_run(tmp_path):
    store = tmp_path / "store"
    run = runs.create(store, ledger=True)
    (entry,) = [json.loads(line) for line in (store / layout.CREATED).read_text().splitlines()]
    assert entry["run"] == run.name and entry["inode"] == os.stat(run).st_ino and entry["pid"] == os.getpid()
    assert entry["host"] == socket.gethostname() and entry["user"] and entry["time"]
    assert runs.creation(run) == entry and not (run / layout.CREATED).exists()
    runs.create(store / "sweeps")  # a sweep's or an audit's directory is no run: not noted
    assert not (store / "sweeps" / layout.CREATED).exists()
    assert len((store / layout.CREATED).read_text().splitlines()) == 1


def test_resume_says_whose_run_it_resumes(tmp_path):
    run = _interrupted(tmp_path / "a")
    entry = runs.creation(run)
    who = f"{entry['user']}@{entry['host']} on {entry['time']}"
    assert resume.origin(run) == f"resuming run {run.name}, created in this store by {who}"
    copy = tmp_path / "b" / run.name
    shutil.copytree(run, copy)
    assert runs.creation(copy) is None
    assert resume.origin(copy).startswith(f"run {copy.name} was not created in this store (copied in from elsewhere")


def test_the_ledger_names_the_very_directory_not_another_put_in_its_place(tmp_path):
    run = _interrupted(tmp_path / "store")
    aside = run.rename(tmp_path / "aside")  # kept: its inode stays in use, so the copy's cannot be the same
    shutil.copytree(aside, run)
    assert runs.creation(run) is None
    with pytest.raises(SignatureError, match="was not created in this store"):
        resume.origin(run, require_created=True)


def test_a_damaged_or_forged_ledger_line_is_passed_over(tmp_path):
    run = _interrupted(tmp_path / "store")
    ledger = tmp_path / "store" / layout.CREATED
    good = ledger.read_text()
    forged = json.dumps({"run": run.name, "inode": os.stat(run).st_ino + 1, "user": "mallory", "host": "x"})
    ledger.write_text(f'{run.name} {"[" * 200_000}\n{forged}\n{{"run": "{run.name}"\n[]\n')
    assert runs.creation(run) is None
    ledger.write_text(f"{forged}\n{'[' * 200_000}{run.name}\n{good}")
    assert runs.creation(run)["user"] != "mallory"


def test_require_signed_refuses_a_run_this_store_did_not_create_before_writing_anything(tmp_path, capsys):
    run = _interrupted(tmp_path / "a")
    copy = tmp_path / "b" / run.name
    shutil.copytree(run, copy)
    before = _tree(copy.parent)
    assert cli.main(["resume", str(copy), "store.require_signed=true"]) == ExitCode.SIGNATURE
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"launch: error: run {copy.name} was not created in this store") and "\n" not in err
    assert "store.require_signed=true resumes only runs this store created" in err
    assert _tree(copy.parent) == before  # refused before anything was written

    # made in this store: past the ledger, on to the next checks (which this hand-made run does not pass)
    assert cli.main(["resume", str(run), "store.require_signed=true", "store.signing_key=none"]) not in (
        0,
        ExitCode.SIGNATURE,
    )
    said = capsys.readouterr()
    assert f"[launch] resuming run {run.name}, created in this store by " in said.err  # a note: on stderr
    assert "not created" not in said.err


def test_resume_takes_the_store_trust_words_and_no_others(tmp_path, handed_to_execute, capsys):
    run = _interrupted(tmp_path / "store")
    assert cli.main(["resume", str(run), "store.signing_key=/keys/resumer", "store.allowed_signers=null"]) == 0
    assert handed_to_execute[-1].signing_key == "/keys/resumer"
    err = capsys.readouterr().err
    assert f"[launch] resuming run {run.name}, created in this store by " in err
    assert cli.main(["resume", str(run), f"store.root={tmp_path}"]) == ConfigError.exit_code
    assert "store.root cannot be given" in capsys.readouterr().err
    assert cli.main(["resume", str(run), "store.nope=1"]) == 2  # the words are Hydra's overrides of store.*
    assert "Could not override 'store.nope': no such key in the config" in capsys.readouterr().err


def test_metrics_nested_too_deeply_are_refused_in_one_line(tmp_path):
    run = _interrupted(tmp_path / "store")
    runs.write_bytes(run / "metrics.jsonl", b'{"epoch": 1}\n' + b"[" * 200_000 + b"\n")
    with pytest.raises(SealError, match=r"metrics.jsonl line 2 is not readable JSON: nested too deeply"):
        resume.keep_metrics_through(run, 1)
    runs.write_bytes(run / "metrics.jsonl", b'{"epoch": 1}\n["epoch"]\n')
    with pytest.raises(SealError, match="line 2 has no epoch"):
        resume.keep_metrics_through(run, 1)


def test_a_complete_run_is_still_refused_as_complete(tmp_path):
    run = _interrupted(tmp_path / "store")
    runs.seal(run)
    with pytest.raises(ResumeError, match="is complete; nothing to resume"):
        resume.resume(run, echo=False, store={"require_signed": True})


# ---------------------------------------------------------------- the attack, whole: real training
def _keys(root: Path) -> dict:
    root.mkdir()
    for name in ("victim", "resumer"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(root / name)], check=True)
    public = " ".join((root / "resumer.pub").read_text().split()[:2])
    (root / "allowed").write_text(f'resumer@lab namespaces="launch-run" {public}\n')
    return {"victim": root / "victim", "resumer": root / "resumer", "allowed": root / "allowed"}


def _crafted_interrupted(run: Path, key: Path) -> None:
    """Turn a complete two-epoch run into an interrupted one after its first checkpoint, as a crafted
    run handed over would be, its config naming ``key`` (the victim's own) as the key to sign with."""
    for path in [run, *run.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | 0o200)
    for name in ("manifest.json", "manifest.json.sig", "result.json"):
        (run / name).unlink(missing_ok=True)
    shutil.rmtree(run / "checkpoints" / "epoch-000002")
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["store"]["signing_key"] = str(key)
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    runs.set_status(run, "interrupted", error="SIGTERM", returncode=130)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen (openssh-client)")
def test_a_crafted_interrupted_run_naming_the_victims_key_is_not_signed_by_it(launch, tmp_path):
    keys = _keys(tmp_path / "keys")
    store = tmp_path / "store"
    done = launch("train=mnist", f"train.data={q(NPZ)}", *TINY, "train.epochs=2", f"store.root={q(store)}")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    run = run_dir_of(done)
    _crafted_interrupted(run, keys["victim"])
    copied = tmp_path / "other" / run.name  # the same crafted run, handed over and copied into another store
    shutil.copytree(run, copied)

    # --allow-mismatch: what is checked here is the seal, not the environment's key (a launcher edited meanwhile)
    resumed = launch("resume", str(run), "--allow-mismatch")
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    runs.verify_seal(run)
    assert not (run / layout.SIGNATURE).exists(), "sealed with the key the run's own config named"
    assert signing.describe(signing.check(run)) == "unsigned"
    assert f"[launch] resuming run {run.name}, created in this store by " in resumed.stderr

    refused = launch("resume", str(copied), f"store.allowed_signers={keys['allowed']}", "store.require_signed=true")
    assert refused.returncode == ExitCode.SIGNATURE and "was not created in this store" in refused.stderr, (
        refused.stderr
    )
    resumed = launch("resume", str(copied), "--allow-mismatch", f"store.signing_key={keys['resumer']}")
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert f"[launch] run {copied.name} was not created in this store (copied in from elsewhere" in resumed.stderr
    seal = signing.check(runs.verify_seal(copied), signing.Trust(str(keys["allowed"]), require_signed=True))
    assert seal.principal == "resumer@lab" and seal.run == copied.name  # the resumer's key, the run's id signed
    assert [p.name for p in (tmp_path / "other").iterdir() if is_run(p)] == [copied.name]
