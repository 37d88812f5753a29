"""Signed seals (issue 41): a run sealed with store.signing_key carries an ssh-keygen signature of its
manifest; readers say who sealed it, refuse a signature that does not verify (exit 7, naming the run)
and, with store.require_signed, any run a trusted key did not seal. Real ssh-keygen, real keys."""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from launcher.cli.main import main
from launcher.errors import ConfigError, ExitCode, SignatureError
from launcher.record import layout
from launcher.record.store import runs, signing
from launcher.run import composition
from launcher.share import archive_index
from launcher.share import pack as packing
from tests.unit.test_archive import sealed_run

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen (openssh-client)")


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict:
    """alice@lab's and mallory's ed25519 keys, and an allowed_signers naming alice only."""
    root = tmp_path_factory.mktemp("keys")
    for name in ("alice", "mallory"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(root / name)], check=True)
    public = (root / "alice.pub").read_text().split()
    (root / "allowed_signers").write_text(f'alice@lab namespaces="launch-run" {public[0]} {public[1]}\n')
    return {"alice": root / "alice", "mallory": root / "mallory", "allowed": root / "allowed_signers"}


def signed_run(store: Path, key: Path | str | None, name: str = "20261126-120000-abcdef") -> Path:
    """``sealed_run`` sealed with ``key`` (passed to ``runs.seal``, as the pipeline passes its settings'
    ``store.signing_key``), its config naming the key too, as a launch's does."""
    config = f"train:\n  name: script\nstore:\n  root: runs\n  signing_key: {key}\n"
    return sealed_run(store, name, config=config, signing_key=key)


def trust(keys: dict, require: bool = False) -> signing.Trust:
    return signing.Trust(str(keys["allowed"]), require)


def reseal_without_the_key(run: Path, keep_signature: bool = True) -> None:
    """Edit a sealed run's result and seal it again, as anyone can: the manifest lists the new hashes."""
    for path in [run, *run.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    (run / "result.json").write_text('{"weights_sha256": "' + "1" * 64 + '"}\n')
    (run / "manifest.json").unlink()
    signature = (run / layout.SIGNATURE).read_bytes()
    (run / layout.SIGNATURE).unlink()
    (run / "config.yaml").write_text("train:\n  name: script\nstore:\n  root: runs\n")
    runs.seal(run)
    if keep_signature:
        (run / layout.SIGNATURE).write_bytes(signature)


def test_a_run_sealed_with_a_key_says_who_sealed_it(tmp_path, keys):
    run = signed_run(tmp_path / "runs", keys["alice"])
    assert (run / layout.SIGNATURE).read_bytes().startswith(b"-----BEGIN SSH SIGNATURE-----")
    runs.verify_seal(run)  # the signature sits beside the manifest, not in it: the seal still holds
    assert signing.describe(signing.check(run, trust(keys))) == "sealed by alice@lab (trusted)"
    unknown = signing.check(run)  # nobody trusted
    assert unknown.state == "unknown" and signing.describe(unknown).startswith("signed by an unknown key (SHA256:")
    assert signing.describe(signing.check(sealed_run(tmp_path / "other"))) == "unsigned"


def test_a_run_edited_and_sealed_again_without_the_key_is_refused(tmp_path, keys, capsys):
    run = signed_run(tmp_path / "runs", keys["alice"])
    reseal_without_the_key(run)
    runs.verify_seal(run)  # the unkeyed seal alone cannot tell
    with pytest.raises(SignatureError) as info:
        signing.check(run, trust(keys))
    assert info.value.exit_code == ExitCode.SIGNATURE == 7 and run.name in str(info.value)
    assert main(["verify", str(run)]) == ExitCode.SIGNATURE
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and run.name in err and "does not verify" in err


def test_require_signed_refuses_unsigned_runs_and_keys_not_in_allowed_signers(tmp_path, keys, capsys):
    mallory = signed_run(tmp_path / "m", keys["mallory"])
    unsigned = sealed_run(tmp_path / "u")
    alice = signed_run(tmp_path / "a", keys["alice"])
    assert signing.check(mallory, trust(keys)).state == "unknown"  # accepted, and said so, by default
    for run, said in ((mallory, "signed by an unknown key"), (unsigned, "unsigned")):
        with pytest.raises(SignatureError, match=f"run {run.name} is {said}.*require_signed"):
            signing.check(run, trust(keys, require=True))
    assert signing.check(alice, trust(keys, require=True)).principal == "alice@lab"
    assert (
        main(["verify", str(mallory), f"store.allowed_signers={keys['allowed']}", "store.require_signed=true"])
        == ExitCode.SIGNATURE
    )
    assert "require_signed" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="needs store.allowed_signers"):
        signing.check(alice, signing.Trust(None, True))


def test_launch_verify_prints_the_seal_and_the_signer(tmp_path, keys, capsys):
    run = signed_run(tmp_path / "runs", keys["alice"])
    assert main(["verify", str(run), f"store.allowed_signers={keys['allowed']}"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"seal: run {run.name} intact") and out[1] == "signature: sealed by alice@lab (trusted)"


def test_a_signed_runs_archive_keeps_its_signer_and_a_reseal_inside_one_is_refused(tmp_path, keys, capsys):
    run = signed_run(tmp_path / "src", keys["alice"])
    packed = packing.pack(run, tmp_path / "run.tar.gz")
    assert packed.index["signed"] and f"run/{run.name}/{layout.SIGNATURE}" in archive_index.expected_members(
        packed.index
    )
    assert main(["verify", str(packed.path), f"store.allowed_signers={keys['allowed']}"]) == 0
    assert "signature: sealed by alice@lab (trusted)" in capsys.readouterr().out
    assert (
        main(
            ["unpack", str(packed.path), "--store", str(tmp_path / "dest"), f"store.allowed_signers={keys['allowed']}"]
        )
        == 0
    )
    assert capsys.readouterr().out.strip().endswith("sealed by alice@lab (trusted)")

    reseal_without_the_key(run)
    with pytest.raises(SignatureError):  # packing checks the signature too
        packing.pack(run, tmp_path / "forged.tar.gz")


def test_an_archive_holding_a_forged_signed_run_is_refused_before_it_is_imported(tmp_path, keys, capsys):
    """A signed run edited and sealed again without the key, packed by hand (pack itself refuses it)."""
    import hashlib
    import io
    import json
    import tarfile

    run = signed_run(tmp_path / "src", keys["alice"])
    good = packing.pack(run, tmp_path / "good.tar", compression="plain").path
    reseal_without_the_key(run)
    replaced = {
        f"run/{run.name}/{p.relative_to(run).as_posix()}": p.read_bytes() for p in run.rglob("*") if p.is_file()
    }
    with tarfile.open(good) as tar, tarfile.open(tmp_path / "forged.tar", "w") as out:
        for member in tar.getmembers():
            data = tar.extractfile(member).read() if member.isreg() else None
            if member.name == archive_index.NAME:
                listed = json.loads(data)
                listed["run_files"] = {
                    name.split("/", 2)[2]: {"sha256": hashlib.sha256(content).hexdigest(), "size": len(content)}
                    for name, content in replaced.items()
                }
                data = json.dumps(listed).encode()
            elif member.name in replaced:
                data = replaced[member.name]
            if data is not None:
                member.size = len(data)
            out.addfile(member, io.BytesIO(data) if data is not None else None)
    assert main(["unpack", str(tmp_path / "forged.tar"), "--store", str(tmp_path / "dest")]) == ExitCode.SIGNATURE
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and run.name in err and "does not verify" in err
    assert not (tmp_path / "dest" / run.name).exists()


def test_a_key_that_cannot_sign_leaves_the_run_sealed_unsigned_and_says_so(tmp_path, capsys):
    run = signed_run(tmp_path / "runs", tmp_path / "no-such-key")
    runs.verify_seal(run)
    assert not (run / layout.SIGNATURE).exists()
    assert "sealed, not signed" in capsys.readouterr().err


def test_store_signing_key_git_signs_with_gits_user_signingkey(tmp_path, keys, monkeypatch):
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text(f"[user]\n\tsigningkey = {keys['alice']}\n[gpg]\n\tformat = ssh\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    run = signed_run(tmp_path / "runs", "git")
    assert signing.check(run, trust(keys)).principal == "alice@lab"
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match="no user.signingkey"):
        signing.signing_key("git")


def test_the_store_words_are_hydra_overrides_of_the_composed_store_settings():
    settings = composition.compose_store(["store.allowed_signers='~/a'", "store.require_signed=true"])
    assert signing.trust_from(settings) == signing.Trust(str(Path("~/a").expanduser()), True)
    assert signing.trust_from(composition.compose_store([])) == signing.NO_TRUST
    for word in ("store.nope=1", "store.require_signed=maybe", "store.require_signed=yes", "store.require_signed"):
        with pytest.raises(ConfigError):
            composition.compose_store([word])
    with pytest.raises(ConfigError, match="true or false"):  # typed by composition: never a word read by hand
        signing.trust_from({"require_signed": "true"})
