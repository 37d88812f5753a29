"""Signed seals: who sealed a run, with the user's SSH key, the way git signs commits.

The seal (``manifest.json``) lists the sha256 of every file of the run, ``snapshot.json``
among them, which names every object of its code and data by its sha256; so a signature
over the manifest's bytes covers all the run is. With a signing key configured
(``store.signing_key``: a key file, or ``git`` for git's ``user.signingkey``), the seal is
signed when it is written: ``ssh-keygen -Y sign -n launch-run``, the signature kept beside
it (``manifest.json.sig``, outside the list: it cannot hold its own hash).

Reading a run checks it (``check``): a signature that does not verify refuses the run
(``SignatureError``, exit 3): the run was edited and sealed again without the key, or
damaged. One that verifies is *trusted* when its key is in ``store.allowed_signers``
(git's ``gpg.ssh.allowedSignersFile`` format: ``principal [namespaces="launch-run"] key``)
and names its principal; otherwise it is "signed by an unknown key". An unsigned run is
read as before and says so, unless ``store.require_signed`` is true, which refuses every
run that a trusted key did not seal.

``ssh-keygen`` is run through ``launcher.proc`` with the message on its stdin and no
terminal (a passphrase it would ask for is an error, not a wait: use ssh-agent). Pure:
``trust_from``, ``store_overrides``, ``key_fingerprint``, ``describe``, the argv builders.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from launcher import proc
from launcher.errors import ConfigError, SignatureError
from launcher.record import layout

NAMESPACE = "launch-run"  # ssh-keygen's -n: a launch signature is never taken for a git or a file one
SIGNATURE = layout.SIGNATURE
STORE_KEYS = ("signing_key", "allowed_signers", "require_signed")
DEFAULTS: dict[str, object] = {"signing_key": None, "allowed_signers": None, "require_signed": False}
INSTALL = "apt-get install openssh-client"
_FINGERPRINT = re.compile(r"key (SHA256:[A-Za-z0-9+/=]+)")


@dataclass(frozen=True)
class Trust:
    """Whose signatures a reader trusts (``store.allowed_signers``) and whether it accepts others."""

    allowed_signers: str | None = None
    require_signed: bool = False


@dataclass(frozen=True)
class Seal:
    """Who sealed a run: ``state`` is trusted, unknown (signed by a key not in allowed_signers) or unsigned."""

    state: str
    principal: str | None = None
    key: str | None = None  # the signing key's fingerprint (SHA256:...)


NO_TRUST = Trust()  # nobody's signature trusted, none required: a run says who signed it, and nothing more


# ---------------------------------------------------------------- pure
def _true(value: object, name: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no", "", "none", "null"):
        return False
    raise ConfigError(f"store.{name} must be true or false, got {value!r}")


def _path(value: object) -> str | None:
    text = "" if value is None else str(value).strip()
    return None if text.lower() in ("", "none", "null") else os.path.expanduser(text)


def trust_from(store: Mapping) -> Trust:
    """The trust settings of a config's ``store`` node (``allowed_signers``, ``require_signed``)."""
    return Trust(_path(store.get("allowed_signers")), _true(store.get("require_signed", False), "require_signed"))


def store_overrides(words: Iterable[str], base: Mapping | None = None) -> dict:
    """The ``store`` settings after ``store.KEY=VALUE`` words (``launch verify RUN store.allowed_signers=F``)
    over ``base`` (the config's defaults); a word that is not one of ``STORE_KEYS`` is refused."""
    out = {**DEFAULTS, **(base or {})}
    for word in words:
        key, sep, value = word.partition("=")
        name = key.removeprefix("store.")
        if not sep or not key.startswith("store.") or name not in (*STORE_KEYS, "root"):
            raise ConfigError(f"{word!r}: only store.root and store.{{{','.join(STORE_KEYS)}}} can be given "
                              "here, as KEY=VALUE")  # fmt: skip
        out[name] = value
    return out


def key_fingerprint(text: str) -> str | None:
    """The key's fingerprint in ssh-keygen's ``Good "launch-run" signature ... with ED25519 key SHA256:...``."""
    match = _FINGERPRINT.search(text)
    return match.group(1) if match else None


def describe(seal: Seal) -> str:
    """Who sealed the run, in words: ``sealed by alice@lab (trusted)``, ``signed by an unknown key``, ``unsigned``."""
    if seal.state == "trusted":
        return f"sealed by {seal.principal} (trusted)"
    if seal.state == "unknown":
        return f"signed by an unknown key ({seal.key})" if seal.key else "signed by an unknown key"
    return "unsigned"


def sign_argv(ssh_keygen: str, key: str) -> list[str]:
    """Sign stdin with ``key``; the signature on stdout."""
    return [ssh_keygen, "-Y", "sign", "-f", key, "-n", NAMESPACE]


def check_argv(ssh_keygen: str, signature: str) -> list[str]:
    """Is stdin signed by the key inside ``signature`` (whoever's it is)?"""
    return [ssh_keygen, "-Y", "check-novalidate", "-n", NAMESPACE, "-s", signature]


def principals_argv(ssh_keygen: str, signature: str, allowed: str) -> list[str]:
    """The principals ``allowed`` names for the key of ``signature``."""
    return [ssh_keygen, "-Y", "find-principals", "-s", signature, "-f", allowed]


def verify_argv(ssh_keygen: str, signature: str, allowed: str, principal: str) -> list[str]:
    """Is stdin signed by ``principal``'s key as ``allowed`` lists it, for this namespace?"""
    return [ssh_keygen, "-Y", "verify", "-f", allowed, "-I", principal, "-n", NAMESPACE, "-s", signature]


# ---------------------------------------------------------------- I/O
def store_settings(words: Iterable[str]) -> dict:
    """The ``store`` node of the launch config (``launcher/configs/launch.yaml``) with ``store.KEY=VALUE``
    words from a subcommand's command line over it (``store_overrides``)."""
    import yaml

    base = Path(__file__).resolve().parents[1] / "configs" / "launch.yaml"
    return store_overrides(words, (yaml.safe_load(base.read_text()) or {}).get("store") or {})


def ssh_keygen() -> str:
    """The ``ssh-keygen`` program, or ``SignatureError`` naming how to install it."""
    found = shutil.which("ssh-keygen")
    if found is None:
        raise SignatureError(f"ssh-keygen is not installed, and signatures need it ({INSTALL})")
    return found


def signing_key(setting: object) -> str | None:
    """The key file ``store.signing_key`` names: None when unset; ``git``: git's ``user.signingkey``
    (a key file, or ``key::<public key>`` whose private half is in ssh-agent)."""
    key = _path(setting)
    if key is None:
        return None
    if key == "git":
        key = (proc.capture(["git", "config", "--get", "user.signingkey"]) or "").strip()
        if not key:
            raise ConfigError("store.signing_key=git, and git has no user.signingkey (git config user.signingkey "
                              "~/.ssh/id_ed25519.pub)")  # fmt: skip
        key = key if key.startswith("key::") else os.path.expanduser(key)
    return key


def sign(run_dir: Path, key: str) -> bytes:
    """The signature of ``run_dir``'s seal by ``key`` (the caller writes it beside the seal, as
    ``SIGNATURE``). Raises ``SignatureError`` naming why it could not be signed."""
    manifest = (Path(run_dir) / layout.MANIFEST).read_bytes()
    with tempfile.TemporaryDirectory(prefix="launch-sign-") as tmp:
        if key.startswith("key::"):  # a public key given inline: ssh-keygen signs with its agent's private half
            Path(tmp, "key.pub").write_text(key.removeprefix("key::") + "\n")
            key = str(Path(tmp, "key.pub"))
        elif not os.path.isfile(key):
            raise SignatureError(f"store.signing_key {key} is not a file", Path(run_dir).name)
        done = proc.run_piped(sign_argv(ssh_keygen(), key), manifest)
    if done.returncode != 0 or not done.stdout.startswith(b"-----BEGIN SSH SIGNATURE-----"):
        why = " ".join(done.stderr.split())[-300:] or f"exit status {done.returncode}"
        raise SignatureError(f"ssh-keygen could not sign with {key}: {why}", Path(run_dir).name)
    return done.stdout


def check(run_dir: Path, trust: Trust = NO_TRUST) -> Seal:
    """Who sealed ``run_dir`` (whose seal the caller has verified): ``SignatureError`` (exit 3, naming
    the run) when its signature does not verify, or when ``trust.require_signed`` and no trusted
    key sealed it."""
    run_dir = Path(run_dir)
    if trust.require_signed and not trust.allowed_signers:
        raise ConfigError("store.require_signed=true needs store.allowed_signers (who is trusted)")
    if trust.allowed_signers and not os.path.isfile(trust.allowed_signers):
        raise ConfigError(f"store.allowed_signers {trust.allowed_signers} is not a file")
    signature = run_dir / SIGNATURE
    if not signature.is_file() or signature.is_symlink():
        seal = Seal("unsigned")
    else:
        seal = _verify(run_dir, signature, trust)
    if trust.require_signed and seal.state != "trusted":
        raise SignatureError(f"run {run_dir.name} is {describe(seal)}, and store.require_signed=true accepts only "
                             f"runs sealed by a key in {trust.allowed_signers}", run_dir.name)  # fmt: skip
    return seal


def _verify(run_dir: Path, signature: Path, trust: Trust) -> Seal:
    program = ssh_keygen()
    manifest = (run_dir / layout.MANIFEST).read_bytes()
    done = proc.run_piped(check_argv(program, str(signature)), manifest)
    if done.returncode != 0:
        raise SignatureError(f"run {run_dir.name}: its seal is signed and the signature does not verify (edited "
                             "and sealed again without the key, or damaged): refused", run_dir.name)  # fmt: skip
    key = key_fingerprint(done.stdout.decode(errors="replace") + done.stderr)
    if not trust.allowed_signers:
        return Seal("unknown", key=key)
    found = proc.run_piped(principals_argv(program, str(signature), trust.allowed_signers))
    for principal in found.stdout.decode(errors="replace").split() if found.returncode == 0 else []:
        if proc.run_piped(verify_argv(program, str(signature), trust.allowed_signers, principal),
                          manifest).returncode == 0:  # fmt: skip
            return Seal("trusted", principal=principal, key=key)
    return Seal("unknown", key=key)
