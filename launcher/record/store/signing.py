"""Signed seals: who sealed a run, with the user's SSH key, the way git signs commits.

The seal (``manifest.json``) lists the sha256 of every file of the run, ``snapshot.json``
among them, which names every object of its code and data by its sha256; so a signature
over the manifest's bytes covers all the run is. With a signing key configured
(``store.signing_key``: a key file, or ``git`` for git's ``user.signingkey``), the seal is
signed when it is written: ``ssh-keygen -Y sign -n launch-run``, the signature kept beside
it (``manifest.json.sig``, outside the list: it cannot hold its own hash).

The key is the one of whoever seals the run *now* (``runs.seal(run_dir, signing_key=...)``:
a fresh run's composed config, a replayer's or a resumer's words), never one a run directory
names: a run's own ``config.yaml`` is outside its config hash and, while it is unsealed,
anyone's to write, so a key read from it would sign a stranger's run with yours.

The seal names its run (``"run"``: the directory's name), so the signature covers the run's
id too: a signed seal found under another name (a run renamed, or its signed seal put on
another run) is refused. A signed seal without one (an older launcher's) is read as before,
but not under ``store.require_signed``: what it signs could be any run's.

Reading a run checks it (``check``): a signature that does not verify refuses the run
(``SignatureError``, exit 7): the run was edited and sealed again without the key, or
damaged. One that verifies is *trusted* when its key is in ``store.allowed_signers``
(git's ``gpg.ssh.allowedSignersFile`` format: ``principal [namespaces="launch-run"] key``)
and names its principal; one whose key that file lists but does not let sign a launch run
now (expired, not yet valid, for other namespaces, a certificate authority) is *untrusted*,
and says why (``Seal.why``); otherwise it is "signed by an unknown key". An unsigned run is
read as before and says so, unless ``store.require_signed`` is true, which refuses every
run that a trusted key did not seal.

``ssh-keygen`` is run through ``launcher.proc`` with the message on its stdin and no
terminal (a passphrase it would ask for is an error, not a wait: use ssh-agent). Pure:
``trust_from``, ``key_fingerprint``, ``describe``, ``signed_id``, ``signature_key``,
``parse_allowed_signers``, ``why_not_trusted``, the argv builders. The ``store`` settings themselves
are composed by Hydra, as a run's config is (``launcher.run.composition.compose_store``), and reach
here typed: ``require_signed`` a bool, a key or a file a string or None.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from launcher import proc
from launcher.errors import ConfigError, SignatureError
from launcher.record import layout

NAMESPACE = "launch-run"  # ssh-keygen's -n: a launch signature is never taken for a git or a file one
# The trust settings of a library call given no store settings (resume.resume(run)): nobody's trusted.
DEFAULTS: dict[str, object] = {"signing_key": None, "allowed_signers": None, "require_signed": False}
INSTALL = "apt-get install openssh-client"
_FINGERPRINT = re.compile(r"key (SHA256:[A-Za-z0-9+/=]+)")
# ssh-keygen(1), ALLOWED SIGNERS: the options a line may have; any other makes ssh-keygen skip the line
OPTIONS = ("cert-authority", "namespaces", "valid-after", "valid-before")
# valid-after / valid-before: YYYYMMDD[HHMM[SS]], local time, or UTC with a Z
_MOMENT = re.compile(r"(\d{4})(\d{2})(\d{2})(?:(\d{2})(\d{2})(\d{2})?)?([zZ]?)")


@dataclass(frozen=True)
class Trust:
    """Whose signatures a reader trusts (``store.allowed_signers``) and whether it accepts others."""

    allowed_signers: str | None = None
    require_signed: bool = False


@dataclass(frozen=True)
class Seal:
    """Who sealed a run: ``state`` is trusted, untrusted (signed by a key allowed_signers lists, but
    does not let sign a launch run now: ``why``), unknown (signed by a key not in allowed_signers)
    or unsigned."""

    state: str
    principal: str | None = None
    key: str | None = None  # the signing key's fingerprint (SHA256:...)
    why: str | None = None  # untrusted: how allowed_signers lists the key ("as expired on 2026-01-01 ...")
    run: str | None = None  # the run id under the signature; None: unsigned, or signed by an older launcher


@dataclass(frozen=True)
class Listed:
    """One line of an allowed_signers file: its principals, its options (names lower-cased; a flag
    such as ``cert-authority`` is True), the key's public blob, and the line's number."""

    principals: str
    options: dict = field(default_factory=dict)
    key: bytes = b""
    line: int = 0


NO_TRUST = Trust()  # nobody's signature trusted, none required: a run says who signed it, and nothing more


# ---------------------------------------------------------------- pure
def _path(value: object) -> str | None:
    """A file setting: None when unset (null, or blank), else the path with ``~`` expanded."""
    text = "" if value is None else str(value).strip()
    return os.path.expanduser(text) if text else None


def trust_from(store: Mapping) -> Trust:
    """The trust settings of a config's ``store`` node (``allowed_signers``, ``require_signed``), as
    Hydra composed it: ``require_signed`` is true or false, never a word that might mean either."""
    required = store.get("require_signed", False)
    if not isinstance(required, bool):
        raise ConfigError(f"store.require_signed must be true or false, got {required!r}")
    return Trust(_path(store.get("allowed_signers")), required)


def key_fingerprint_of(blob: bytes | None) -> str | None:
    """A public key blob's fingerprint as ssh-keygen shows it (``SHA256:`` and unpadded base64)."""
    return None if blob is None else "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def key_fingerprint(text: str) -> str | None:
    """The key's fingerprint in ssh-keygen's ``Good "launch-run" signature ... with ED25519 key SHA256:...``."""
    match = _FINGERPRINT.search(text)
    return match.group(1) if match else None


def describe(seal: Seal) -> str:
    """Who sealed the run, in words: ``sealed by alice@lab (trusted)``, ``signed by alice@lab's key, which
    allowed_signers lists as expired on 2026-01-01 (valid-before)``, ``signed by an unknown key``, ``unsigned``."""
    if seal.state == "trusted":
        return f"sealed by {seal.principal} (trusted)"
    if seal.state == "untrusted":
        return f"signed by {seal.principal}'s key, which allowed_signers lists {seal.why}"
    if seal.state == "unknown":
        return f"signed by an unknown key ({seal.key})" if seal.key else "signed by an unknown key"
    return "unsigned"


def signed_id(manifest: bytes) -> tuple[bool, object]:
    """``(named, id)``: whether the seal's bytes name their run (``"run"``, written by ``runs.seal``), and
    the id they name. Bytes that are not a JSON object name none; JSON nested too deeply for Python
    to read is ``ValueError`` (the caller refuses the run)."""
    try:
        data = json.loads(manifest)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    return (True, data["run"]) if isinstance(data, dict) and "run" in data else (False, None)


def _string(blob: bytes, at: int) -> tuple[bytes, int] | None:
    """The SSH wire-format string at ``at`` (a 4-byte big-endian length, then the bytes) and where it ends."""
    end = at + 4 + int.from_bytes(blob[at : at + 4], "big") if len(blob) >= at + 4 else -1
    return (blob[at + 4 : end], end) if 0 <= end <= len(blob) else None


def signature_key(armored: bytes) -> bytes | None:
    """The public key blob inside an SSH signature (``-----BEGIN SSH SIGNATURE-----``: ``SSHSIG``, a
    version, then the signer's public key), or None when it is not one."""
    body = b"".join(line.strip() for line in armored.splitlines() if line.strip() and not line.startswith(b"-----"))
    try:
        raw = base64.b64decode(body, validate=True)
    except (ValueError, binascii.Error):
        return None
    found = _string(raw, 10) if raw.startswith(b"SSHSIG") else None  # 6 bytes of magic, 4 of version
    return found[0] if found else None


def _words(line: str) -> list[str]:
    """The words of an allowed_signers line, split at blanks outside double quotes (quotes kept)."""
    words, word, quoted = [], "", False
    for char in line:
        if char.isspace() and not quoted:
            if word:
                words.append(word)
            word = ""
            continue
        quoted = quoted != (char == '"')
        word += char
    return [*words, word] if word else words


def _options(text: str) -> dict:
    """``name="value",flag`` as ``{name: value, flag: True}``, names lower-cased (commas inside quotes kept)."""
    out: dict = {}
    for part in re.findall(r'(?:[^,"]|"[^"]*")+', text):
        name, sep, value = part.partition("=")
        out[name.strip().lower()] = value.strip().strip('"') if sep else True
    return out


def _key_blob(kind: str, data: str) -> bytes | None:
    """The public key blob of ``kind data`` (``ssh-ed25519 AAAA...``), when ``data`` is one of ``kind``."""
    try:
        blob = base64.b64decode(data, validate=True)
    except (ValueError, binascii.Error):
        return None
    name = _string(blob, 0)
    return blob if name is not None and name[0] == kind.encode() else None


def parse_allowed_signers(text: str) -> list[Listed]:
    """The lines of an allowed_signers file (``principals [options] keytype base64 [comment]``) that
    hold a key; comments, blank lines and lines without a key are left out."""
    found = []
    for number, raw in enumerate(text.splitlines(), 1):
        words = _words(raw.strip())
        if not words or words[0].startswith("#"):
            continue
        for at in range(1, len(words) - 1):
            blob = _key_blob(words[at], words[at + 1])
            if blob is not None:
                found.append(Listed(words[0].strip('"'), _options(" ".join(words[1:at])), blob, number))
                break
    return found


def _matches(name: str, patterns: str) -> bool:
    """Does ``name`` match ssh's pattern list (``git,launch-*,!file``: ``*`` and ``?``, ``!`` excludes)?"""
    found = False
    for pattern in patterns.split(","):
        negated, pattern = pattern.startswith("!"), pattern.removeprefix("!")  # no blank stripped, as ssh
        regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
        if re.fullmatch(regex, name, re.S):
            if negated:
                return False
            found = True
    return found


def _moment(text: object) -> tuple[_dt.datetime, str] | None:
    """A ``valid-after``/``valid-before`` time as ssh-keygen reads it, and as shown (``2026-01-01``)."""
    match = _MOMENT.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        return None
    year, month, day, hour, minute, second, utc = match.groups()
    try:
        when = _dt.datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0))
    except ValueError:
        return None
    when = when.replace(tzinfo=_dt.timezone.utc) if utc else when.astimezone()  # no Z: local time, as ssh-keygen
    clock = f" {hour}:{minute}" + (f":{second}" if second else "") if hour else ""
    return when, f"{year}-{month}-{day}{clock}" + (" UTC" if utc else "")


def why_not_trusted(listed: Listed, now: _dt.datetime) -> str | None:
    """Why ssh-keygen does not let ``listed``'s key sign a launch run at ``now`` (an aware time), in the
    words ``describe`` puts after "which allowed_signers lists"; None when this line gives no reason."""
    options = listed.options
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        return (
            f"with an option ssh-keygen does not know ({', '.join(unknown)}; allowed_signers takes "
            f"{', '.join(OPTIONS)}), so it skips the line"
        )
    if options.get("cert-authority"):
        return "as a certificate authority: a plain key signature is not trusted"
    reasons = []
    namespaces = options.get("namespaces")
    if namespaces is not None and not (isinstance(namespaces, str) and _matches(NAMESPACE, namespaces)):
        reasons.append(f"for namespaces {namespaces}, not {NAMESPACE}")
    for name in ("valid-before", "valid-after"):
        if name not in options:
            continue
        moment = _moment(options[name])
        if moment is None:
            reasons.append(f"with a {name} ssh-keygen cannot read ({options[name]})")
        elif name == "valid-before" and now > moment[0]:
            reasons.append(f"as expired on {moment[1]} (valid-before)")
        elif name == "valid-after" and now < moment[0]:
            reasons.append(f"as not yet valid (valid-after {moment[1]})")
    return ", and ".join(reasons) or None


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
            raise ConfigError(
                "store.signing_key=git, and git has no user.signingkey (git config user.signingkey "
                "~/.ssh/id_ed25519.pub)"
            )
        key = key if key.startswith("key::") else os.path.expanduser(key)
    return key


def sign(run_dir: Path, key: str) -> bytes:
    """The signature of ``run_dir``'s seal by ``key`` (the caller writes it beside the seal, as
    ``RunPaths.signature``). Raises ``SignatureError`` naming why it could not be signed."""
    manifest = layout.RunPaths(run_dir).manifest.read_bytes()
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


def check(run_dir: Path, trust: Trust = NO_TRUST, now: _dt.datetime | None = None) -> Seal:
    """Who sealed ``run_dir`` (whose seal the caller has verified): ``SignatureError`` (exit 7, naming
    the run) when its signature does not verify, when the id it signs is not the run directory's
    name, or when ``trust.require_signed`` and no trusted key sealed it with its id. ``now``: when
    an untrusted key's validity is judged (ssh-keygen judges it now)."""
    run_dir = Path(run_dir)
    if trust.require_signed and not trust.allowed_signers:
        raise ConfigError("store.require_signed=true needs store.allowed_signers (who is trusted)")
    if trust.allowed_signers and not os.path.isfile(trust.allowed_signers):
        raise ConfigError(f"store.allowed_signers {trust.allowed_signers} is not a file")
    signature = layout.RunPaths(run_dir).signature
    if not signature.is_file() or signature.is_symlink():
        seal = Seal("unsigned")
    else:
        seal = _verify(run_dir, signature, trust, now)
    if trust.require_signed and seal.state != "trusted":
        raise SignatureError(
            f"run {run_dir.name} is {describe(seal)}, and store.require_signed=true accepts only "
            f"runs sealed by a key in {trust.allowed_signers}",
            run_dir.name,
        )
    if trust.require_signed and seal.run is None:
        raise SignatureError(
            f"run {run_dir.name} is {describe(seal)}, but its id is not under the signature (signed "
            "by a launcher from before seals named their run: the seal could be another run's, "
            "renamed), and store.require_signed=true refuses it",
            run_dir.name,
        )
    return seal


def _verify(run_dir: Path, signature: Path, trust: Trust, now: _dt.datetime | None) -> Seal:
    program = ssh_keygen()
    manifest = layout.RunPaths(run_dir).manifest.read_bytes()  # read once: what is verified is what is read below
    done = proc.run_piped(check_argv(program, str(signature)), manifest)
    if done.returncode != 0:
        raise SignatureError(
            f"run {run_dir.name}: its seal is signed and the signature does not verify (edited "
            "and sealed again without the key, or damaged): refused",
            run_dir.name,
        )
    found_as = os.path.basename(os.path.realpath(run_dir))
    try:
        named, run = signed_id(manifest)
    except ValueError as exc:
        raise SignatureError(
            f"run {run_dir.name}: its signed seal is not readable JSON ({exc}): refused", run_dir.name
        ) from None
    if named and run != found_as:
        signed_as = run if isinstance(run, str) and run.isprintable() else repr(run)
        raise SignatureError(
            f"run {run_dir.name}: its seal is signed as run {signed_as}, found as {found_as} (a "
            "signed run cannot be renamed, nor its seal put on another run): refused",
            found_as,
        )
    key = key_fingerprint(done.stdout.decode(errors="replace") + done.stderr)
    run = run if named else None
    if not trust.allowed_signers:
        return Seal("unknown", key=key, run=run)
    found = proc.run_piped(principals_argv(program, str(signature), trust.allowed_signers))
    for principal in found.stdout.decode(errors="replace").split() if found.returncode == 0 else []:
        if (
            proc.run_piped(verify_argv(program, str(signature), trust.allowed_signers, principal), manifest).returncode
            == 0
        ):
            return Seal("trusted", principal=principal, key=key, run=run)
    listed = _untrusted(signature, trust.allowed_signers, now)
    return replace(listed, key=key or listed.key, run=run) if listed else Seal("unknown", key=key, run=run)


def _untrusted(signature: Path, allowed: str, now: _dt.datetime | None) -> Seal | None:
    """The seal of a signature whose key ``allowed`` lists but ssh-keygen did not trust: whose key, and
    why (``why_not_trusted`` of the first line listing it); None when no line lists the key."""
    blob = signature_key(signature.read_bytes())
    try:
        text = Path(allowed).read_text(errors="replace")
    except OSError:
        return None
    listing = [line for line in parse_allowed_signers(text) if blob is not None and line.key == blob]
    if not listing:
        return None
    when = now or _dt.datetime.now().astimezone()
    reasons = [(line, why_not_trusted(line, when)) for line in listing]
    line, why = next(((line, why) for line, why in reasons if why), (listing[0], None))
    why = why or f"on line {line.line}, and ssh-keygen -Y verify did not accept it for {NAMESPACE}"
    return Seal("untrusted", principal=line.principals, key=key_fingerprint_of(blob), why=why)
