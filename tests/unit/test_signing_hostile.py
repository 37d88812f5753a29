"""Signed seals against a hostile run or a careless allowed_signers: a seal is never signed with a key
the run directory names; the signature covers the run's id, so a signed run found under another name
is refused; a key allowed_signers lists but does not trust says why; JSON nested too deeply for Python's
parser is a one-line refusal, never a traceback. Real ssh-keygen, real keys."""

from __future__ import annotations

import datetime as _dt
import json
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from launcher.cli.main import main
from launcher.errors import ExitCode, SealError, SignatureError
from launcher.record import layout
from launcher.record.store import runs, signing
from tests.unit.test_archive import sealed_run
from tests.unit.test_signing import signed_run

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen (openssh-client)")

DATA = Path(__file__).parent.parent / "data"
DEEP = "[" * 200_000  # deeper than Python's JSON parser can go: RecursionError, not ValueError


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict:
    """alice@lab's and the victim's (the resumer's, the replayer's) ed25519 keys; ``listed(options)``
    writes an allowed_signers naming alice@lab with those options and returns its path."""
    root = tmp_path_factory.mktemp("keys")
    for name in ("alice", "victim"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(root / name)], check=True)
    public = " ".join((root / "alice.pub").read_text().split()[:2])

    def listed(options: str, name: str = "allowed") -> Path:
        path = root / name
        path.write_text(f"# who may seal runs\nalice@lab {options} {public}\n".replace("  ", " "))
        return path

    return {
        "alice": root / "alice",
        "victim": root / "victim",
        "public": public,
        "listed": listed,
        "allowed": listed('namespaces="launch-run"', "trusted"),
    }


def _writable(run: Path) -> None:
    for path in [run, *run.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


# ---------------------------------------------------------------- 1: the key is the caller's, never the run's
def test_the_seal_is_never_signed_with_a_key_the_run_directory_names(tmp_path, keys):
    """A run's config.yaml is outside its config hash and, unsealed, anyone's to write: a crafted run
    naming the victim's key must not come out signed by it when the victim's launcher seals it."""
    run = tmp_path / "store" / "20261126-120000-abcdef"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(f"train:\n  name: mnist\nstore:\n  signing_key: {keys['victim']}\n")
    (run / "result.json").write_text("{}\n")
    runs.seal(run)  # whoever seals it configured no key
    assert not (run / layout.SIGNATURE).exists()
    assert signing.describe(signing.check(runs.verify_seal(run))) == "unsigned"

    other = tmp_path / "store" / "20261126-120001-abcdef"
    other.mkdir()
    (other / "config.yaml").write_text("train:\n  name: mnist\n")  # names no key: the caller's is used
    runs.seal(other, signing_key=str(keys["victim"]))
    assert (other / layout.SIGNATURE).is_file() and signing.check(other).state == "unknown"


# ---------------------------------------------------------------- 3: the run's id under the signature
def test_a_signed_run_found_under_another_name_is_refused(tmp_path, keys, capsys):
    run = signed_run(tmp_path / "runs", keys["alice"])
    renamed = run.with_name("20261126-130000-fedcba")
    _writable(run)
    run.rename(renamed)
    runs.verify_seal(renamed)  # every file as sealed: only the name changed
    with pytest.raises(SignatureError, match=f"signed as run {run.name}, found as {renamed.name}") as info:
        signing.check(renamed, signing.Trust(str(keys["allowed"])))
    assert info.value.exit_code == ExitCode.SIGNATURE and info.value.run == renamed.name
    assert main(["verify", str(renamed)]) == ExitCode.SIGNATURE
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"signed as run {run.name}, found as {renamed.name}" in err

    copy = tmp_path / "runs" / "20261126-140000-012345"  # the signed seal carried onto a copy of the run
    shutil.copytree(renamed, copy)
    with pytest.raises(SignatureError, match=f"found as {copy.name}"):
        signing.check(copy)
    renamed.rename(run)  # its own name again: accepted
    assert signing.check(run, signing.Trust(str(keys["allowed"]))).principal == "alice@lab"
    assert json.loads((run / "manifest.json").read_text())["run"] == run.name
    assert signing.check(run, signing.Trust(str(keys["allowed"]))).run == run.name


def test_an_unsigned_run_may_be_renamed(tmp_path):
    run = sealed_run(tmp_path / "runs")
    _writable(run)
    renamed = run.rename(run.with_name("my-baseline"))
    runs.verify_seal(renamed)
    assert signing.check(renamed).state == "unsigned"


def test_a_signed_seal_without_its_id_is_read_as_before_but_refused_under_require_signed(tmp_path, keys):
    """A seal signed by a launcher from before seals named their run: trusted, and said so, but what
    it signs could be another run's seal, renamed, so store.require_signed=true refuses it."""
    run = sealed_run(tmp_path / "runs")  # unsigned: make its seal an older launcher's, then sign it
    _writable(run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest.pop("run", None)  # (a seal of this launcher names it)
    (run / "manifest.json").write_text(json.dumps(manifest, sort_keys=True, indent=2) + "\n")
    (run / layout.SIGNATURE).write_bytes(signing.sign(run, str(keys["alice"])))
    runs.verify_seal(run)
    with pytest.raises(
        SignatureError, match=f"run {run.name} is sealed by alice@lab .trusted., but its id is not under the signature"
    ):
        signing.check(run, signing.Trust(str(keys["allowed"]), require_signed=True))
    seal = signing.check(run, signing.Trust(str(keys["allowed"])))
    assert seal.state == "trusted" and seal.run is None
    assert signing.describe(seal) == "sealed by alice@lab (trusted)"
    run.rename(run.with_name("renamed"))  # its id is not signed: it cannot be checked
    assert signing.check(run.with_name("renamed")).state == "unknown"


@pytest.mark.parametrize("store", ["runs-b591ce5", "runs-schema2"])
def test_stored_runs_from_before_seals_named_their_run_keep_verifying(store):
    (run,) = [p for p in (DATA / store).iterdir() if p.name != "objects"]
    assert "run" not in json.loads((run / "manifest.json").read_text())
    assert runs.verify_seal(run) == run
    assert signing.check(run).state == "unsigned"


# ---------------------------------------------------------------- 4: a listed key refused, and why
@pytest.mark.parametrize(
    "options, why",
    [
        ('valid-before="20200101"', "as expired on 2020-01-01 (valid-before)"),
        ('namespaces="launch-run",valid-after="20990101Z"', "as not yet valid (valid-after 2099-01-01 UTC)"),
        ('namespaces="git,file"', "for namespaces git,file, not launch-run"),
        ("cert-authority", "as a certificate authority: a plain key signature is not trusted"),
        ('expiry-time="20990101"', "with an option ssh-keygen does not know (expiry-time;"),
    ],
)
def test_a_key_allowed_signers_lists_but_does_not_trust_says_why(tmp_path, keys, options, why, capsys):
    run = signed_run(tmp_path / "runs", keys["alice"])
    allowed = keys["listed"](options, f"allowed-{abs(hash(options))}")
    seal = signing.check(run, signing.Trust(str(allowed)))
    assert seal.state == "untrusted" and seal.principal == "alice@lab" and seal.key.startswith("SHA256:")
    assert signing.describe(seal).startswith(f"signed by alice@lab's key, which allowed_signers lists {why}")
    with pytest.raises(SignatureError, match="require_signed") as info:
        signing.check(run, signing.Trust(str(allowed), require_signed=True))
    assert why in str(info.value) and "unknown key" not in str(info.value)
    assert main(["verify", str(run), f"store.allowed_signers={allowed}"]) == 0
    assert f"signature: signed by alice@lab's key, which allowed_signers lists {why}" in capsys.readouterr().out


def test_a_key_allowed_signers_does_not_list_is_still_an_unknown_key(tmp_path, keys):
    run = signed_run(tmp_path / "runs", keys["victim"])
    seal = signing.check(run, signing.Trust(str(keys["listed"]('valid-before="20200101"', "expired-alice"))))
    assert seal.state == "unknown" and signing.describe(seal).startswith("signed by an unknown key (SHA256:")


def test_allowed_signers_lines_are_read_as_ssh_keygen_reads_them(keys):
    kind, data = keys["public"].split()
    text = (
        f'# a comment\n\n"alice@lab,alice@home" namespaces="git, launch-*",valid-before="202601011230" '
        f"{kind} {data} alice's laptop\nbob@lab {kind} not-base64\ncarol@lab CERT-AUTHORITY {kind} {data}\n"
    )
    first, second = signing.parse_allowed_signers(text)
    assert first.principals == "alice@lab,alice@home" and first.line == 3
    assert first.options == {"namespaces": "git, launch-*", "valid-before": "202601011230"}
    assert second.options == {"cert-authority": True} and second.line == 5 and second.key == first.key
    now = _dt.datetime(2025, 6, 1, tzinfo=_dt.timezone.utc)
    assert signing.why_not_trusted(first, now) == "for namespaces git, launch-*, not launch-run"  # " launch-*"
    fixed = signing.Listed("a", {**first.options, "namespaces": "git,launch-*"}, first.key, 3)
    assert signing.why_not_trusted(fixed, now) is None  # launch-* matches launch-run; not expired yet
    later = _dt.datetime(2026, 1, 2, tzinfo=_dt.timezone.utc)
    assert signing.why_not_trusted(fixed, later) == "as expired on 2026-01-01 12:30 (valid-before)"
    negated = signing.Listed("a", {"namespaces": "*,!launch-run"}, b"", 1)
    assert signing.why_not_trusted(negated, now) == "for namespaces *,!launch-run, not launch-run"
    garbled = signing.Listed("a", {"valid-after": "soon"}, b"", 1)
    assert signing.why_not_trusted(garbled, now) == "with a valid-after ssh-keygen cannot read (soon)"


def test_the_signers_key_is_read_from_the_signature_itself(tmp_path, keys):
    run = signed_run(tmp_path / "runs", keys["alice"])
    (listed,) = signing.parse_allowed_signers(keys["allowed"].read_text())
    blob = signing.signature_key((run / layout.SIGNATURE).read_bytes())
    assert blob == listed.key
    assert signing.key_fingerprint_of(blob) == signing.check(run).key  # as ssh-keygen prints it
    assert signing.signature_key(b"-----BEGIN SSH SIGNATURE-----\nnot base64!\n-----END SSH SIGNATURE-----\n") is None


# ---------------------------------------------------------------- 5: JSON nested too deeply
def test_json_nested_too_deeply_is_a_one_line_refusal_not_a_traceback(tmp_path, capsys):
    (tmp_path / "deep.json").write_text(DEEP)
    with pytest.raises(SealError, match="deep.json is not readable JSON: nested too deeply"):
        runs.read_json(tmp_path / "deep.json")
    (tmp_path / "list.json").write_text("[1]")
    with pytest.raises(SealError, match="is not a JSON object"):
        runs.read_json(tmp_path / "list.json")

    run = sealed_run(tmp_path / "runs")
    _writable(run)
    (run / "manifest.json").write_text(DEEP)
    assert main(["verify", str(run)]) == 4
    err = capsys.readouterr().err.strip()
    assert err.startswith("launch: error: ") and "\n" not in err and "nested too deeply" in err
    (run / "status.json").write_text(DEEP)
    (run / "manifest.json").unlink()
    assert runs.effective_status(run) == {"state": "unknown"}


def test_a_signed_seal_nested_too_deeply_is_refused_in_one_line(tmp_path, keys):
    run = sealed_run(tmp_path / "runs")
    _writable(run)
    (run / "manifest.json").write_text(DEEP)  # signed as it is: the signature verifies, the id cannot be read
    (run / layout.SIGNATURE).write_bytes(signing.sign(run, str(keys["alice"])))
    with pytest.raises(SignatureError, match="its signed seal is not readable JSON .nested too deeply"):
        signing.check(run)
