"""Run directories: unique creation, atomic files, status, and the seal.

A run directory is ``<store>/<YYYYMMDD-HHMMSS>-<6 hex>``, created with an exclusive
``mkdir`` so runs started in the same second, or by several processes at once,
never collide. Every file is written atomically (temporary file, fsync, rename).

A run is *complete* only when ``manifest.json`` exists: it lists the sha256 of every
other file below the run directory, hidden files included, and is written last, after
which all files are made read-only. A run without a manifest is running, failed or
interrupted, never complete.

A ``running`` run names its owner in ``status.json``: the launcher's pid, that
process's start time and the host. A reader on that host whose owner is gone sees
the run as ``abandoned`` (``effective_status``); on another host it cannot tell, and
says ``running`` (a job of a shared store running elsewhere is not misjudged).

A run is read from itself alone: a link in it that points outside it is refused
(``refuse_links_out``, exit 2) before a judgment reads it or a resume writes through it,
and neither the seal nor a resume changes the mode of anything a link points at.

Each run directory holds a small ``.reserve`` file while it is not sealed: when the
store's disk is full, ``set_status`` frees it so a run can still say how it ended. The
seal deletes it before listing the files, so a sealed run has none.
"""

from __future__ import annotations

import datetime as _dt
import errno
import hashlib
import json
import os
import secrets
import socket
import stat
import sys
import tempfile
from pathlib import Path

from launcher.errors import LauncherError, RunNotFound, SealError, StoreError, UnsafeRun
from launcher.record import layout

MANIFEST = layout.MANIFEST
SIGNATURE = layout.SIGNATURE  # the seal signed (launcher.record.signing): beside the manifest, not in it
STATUS = layout.STATUS
MANIFEST_SCHEMA = 1
RESERVE = ".reserve"  # freed when the disk is full, so status.json can still be written
RESERVE_BYTES = 64 * 1024


def create(store_root: str | os.PathLike, now: _dt.datetime | None = None) -> Path:
    """Create and return a new, empty, uniquely named run directory under ``store_root``."""
    root = Path(store_root)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create store {str(root)!r}: {exc.strerror}") from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise StoreError(f"store {str(root)!r} is not writable")
    stamp = (now or _dt.datetime.now()).strftime("%Y%m%d-%H%M%S")
    for _ in range(100):
        path = root / f"{stamp}-{secrets.token_hex(3)}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise StoreError(f"cannot create a run in {str(root)!r}: {exc.strerror}") from None
        make_reserve(path)
        return path
    raise StoreError(f"could not find a free run name in {str(root)!r}")


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: readers see the old file or the new one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path: str | os.PathLike, data: object) -> None:
    """Atomic canonical JSON (sorted keys, trailing newline)."""
    write_bytes(path, (json.dumps(data, sort_keys=True, indent=2) + "\n").encode())


def read_json(path: str | os.PathLike) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise RunNotFound(f"{path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise SealError(f"{path} is not readable JSON: {exc}", str(path)) from None


def make_reserve(run_dir: Path) -> None:
    """Set aside ``RESERVE_BYTES`` in the run directory (best effort: a full disk has none)."""
    try:
        with open(run_dir / RESERVE, "wb") as f:
            f.write(b"\0" * RESERVE_BYTES)
    except OSError:
        (run_dir / RESERVE).unlink(missing_ok=True)


def set_status(run_dir: Path, state: str, **fields: object) -> None:
    """Record the run's state (running, failed, interrupted); complete comes with the seal.

    A ``running`` status with a ``pid`` also records that process's start time and this
    host, which is how ``effective_status`` tells a live owner from a dead one. When the
    disk is full the run's reserve is freed and the write tried once more.
    """
    data = {"state": state, "time": _dt.datetime.now().astimezone().isoformat(), **fields}
    if state == "running" and isinstance(fields.get("pid"), int):
        data.setdefault("host", socket.gethostname())
        data.setdefault("pid_start", process_start(fields["pid"]))
    try:
        write_json(run_dir / STATUS, data)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or not (run_dir / RESERVE).exists():
            raise
        (run_dir / RESERVE).unlink()
        data["disk_full"] = True
        write_json(run_dir / STATUS, data)


def status(run_dir: Path) -> dict:
    return read_json(run_dir / STATUS) if (run_dir / STATUS).exists() else {"state": "unknown"}


def process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), or None when there is none."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat_line.rsplit(")", 1)[-1].split()
    if fields[0] == "Z":
        return None  # a zombie has ended
    return int(fields[19])  # field 22 of proc(5); fields[0] is field 3


def owner_alive(data: dict) -> bool | None:
    """Is the process that owns a ``running`` status alive? None: it ran on another host."""
    host, pid = data.get("host"), data.get("pid")
    if host is None or not isinstance(pid, int):
        return None  # written by an older launcher: nothing to judge by
    if host != socket.gethostname():
        return None
    start = process_start(pid)
    if start is None:
        return False
    recorded = data.get("pid_start")
    return recorded is None or recorded == start  # another start time: the pid was reused


def effective_status(run_dir: Path) -> dict:
    """``status.json`` as readers should see it: ``complete`` once sealed, ``abandoned`` when
    it says ``running`` but its owner is gone from this host (its ``pid`` and ``host`` kept)."""
    if (run_dir / MANIFEST).exists():
        return {"state": "complete"}
    try:
        data = status(run_dir)
    except (RunNotFound, SealError):
        return {"state": "unknown"}
    if data.get("state") == "running" and owner_alive(data) is False:
        data = {**data, "state": "abandoned", "recorded_state": "running"}
    return data


def describe_state(run_dir: Path) -> str:
    """The run's state in words, for messages: ``abandoned: its launcher (pid 12 on h) is gone``."""
    data = effective_status(run_dir)
    state = data.get("state", "unknown")
    if state == "abandoned":
        return f"abandoned: its launcher (pid {data.get('pid')} on {data.get('host')}) is gone"
    if state == "running" and data.get("host") and data.get("host") != socket.gethostname():
        return f"running on host {data['host']} (pid {data.get('pid')})"
    return state


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _files(run_dir: Path) -> list[str]:
    """Every file below ``run_dir``, hidden ones included, but the manifest itself (it cannot hold
    its own hash) and its signature (made from it). Nothing else is left out: a hidden file is as
    much a part of the run as any other."""
    names = (p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*") if p.is_file())
    return sorted(name for name in names if name not in (MANIFEST, SIGNATURE))


def seal(run_dir: Path) -> dict:
    """Mark ``run_dir`` complete: write the manifest last, then make every file read-only.

    The manifest lists every file (``_files``). The disk-full reserve is deleted first: it
    only exists so an unsealed run can still record how it ended, and a sealed run needs none.
    """
    set_status(run_dir, "complete")
    (run_dir / RESERVE).unlink(missing_ok=True)
    manifest = {
        "schema": MANIFEST_SCHEMA,
        "files": {name: file_sha256(run_dir / name) for name in _files(run_dir)},
    }
    write_json(run_dir / MANIFEST, manifest)
    sign_seal(run_dir)
    make_read_only(run_dir)
    return manifest


def sign_seal(run_dir: Path) -> bool:
    """Sign the seal when the run's config names a key (``store.signing_key``; ``launcher.record.signing``).
    A key that cannot sign leaves the run sealed and unsigned, and says so on stderr: a finished
    training is never lost to a missing key. True when it was signed."""
    from launcher.record import signing

    try:
        import yaml

        if not (run_dir / layout.CONFIG).is_file():
            return False  # no config, no key configured
        store = (yaml.safe_load((run_dir / layout.CONFIG).read_text()) or {}).get("store") or {}
        key = signing.signing_key(store.get("signing_key"))
        if key is None:
            return False
        write_bytes(run_dir / signing.SIGNATURE, signing.sign(run_dir, key))
        return True
    except (OSError, ValueError, AttributeError, yaml.YAMLError) as exc:
        print(f"[launch] warning: run {run_dir.name} is sealed, not signed: its config cannot be read ({exc})",
              file=sys.stderr)  # fmt: skip
    except LauncherError as exc:
        print(f"[launch] warning: run {run_dir.name} is sealed, not signed: {exc}", file=sys.stderr)
    return False


def make_read_only(directory: Path) -> None:
    """Remove every write permission below ``directory`` and on it: stored records stay as written.
    A link is left alone (a mode is not a link's; what it points at is not the run's)."""
    for path in [*directory.rglob("*"), directory]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def links_out(run_dir: Path) -> list[tuple[str, str]]:
    """Every link below ``run_dir`` that resolves outside it (or nowhere inside it): ``(name, target)``,
    names relative to the run. Links are not followed into."""
    top = os.path.realpath(run_dir)
    found = []
    for current, dirs, files in os.walk(run_dir):
        for name in sorted([*dirs, *files]):
            path = os.path.join(current, name)
            if os.path.islink(path):
                real = os.path.realpath(path)
                if real != top and not real.startswith(top + os.sep):
                    found.append((os.path.relpath(path, run_dir), os.readlink(path)))
    return sorted(found)


def refuse_links_out(run_dir: Path) -> None:
    """``UnsafeRun`` (exit 2) naming the first link of ``run_dir`` that points outside it: what a run
    holds is in it, and a resume writing into the run must never write through one."""
    found = links_out(run_dir)
    if found:
        name, target = found[0]
        raise UnsafeRun(f"run {run_dir.name} holds a link pointing outside it ({name} -> {target}): refused "
                        "before anything was written (a run is read from itself alone; see docs/store.md)",
                        name)  # fmt: skip


def unseal_for_resume(run_dir: Path) -> None:
    """Make a (never sealed) interrupted run's files writable again for resuming it."""
    try:
        for path in [run_dir, *run_dir.rglob("*")]:
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | stat.S_IWUSR)
    except OSError as exc:
        raise StoreError(f"run {run_dir.name} cannot be written ({exc.strerror}): is the store read-only?") from None
    if not (run_dir / RESERVE).exists():
        make_reserve(run_dir)


def require_run(path: str | os.PathLike) -> Path:
    """``path`` as a run directory, or ``RunNotFound`` with the reason."""
    run_dir = Path(path)
    if not run_dir.exists():
        raise RunNotFound(f"run directory {str(run_dir)!r} does not exist")
    if not run_dir.is_dir() or not (run_dir / "config.yaml").exists():
        raise RunNotFound(f"{str(run_dir)!r} is not a run directory (no config.yaml)")
    return run_dir


def verify_seal(path: str | os.PathLike) -> Path:
    """Check that a run is complete and untouched; raise ``SealError`` naming the culprit
    (``UnsafeRun`` for a link pointing outside the run, whatever its seal says)."""
    run_dir = require_run(path)
    refuse_links_out(run_dir)
    if not (run_dir / MANIFEST).exists():
        state = describe_state(run_dir)
        hint = f"; `launch resume {run_dir}` continues it" if state.startswith(("abandoned", "interrupted")) else ""
        raise SealError(f"run {run_dir.name} is not complete (state: {state}; no {MANIFEST}){hint}")
    manifest = read_json(run_dir / MANIFEST)
    if manifest.get("schema") != MANIFEST_SCHEMA or not isinstance(manifest.get("files"), dict):
        raise SealError(f"run {run_dir.name}: {MANIFEST} has an unknown schema", MANIFEST)
    listed = manifest["files"]
    for name, digest in sorted(listed.items()):
        file = run_dir / name
        if not file.is_file():
            raise SealError(f"run {run_dir.name} was modified: {name} is missing", name)
        if file_sha256(file) != digest:
            raise SealError(f"run {run_dir.name} was modified: {name} changed after sealing", name)
    extra = sorted(set(_files(run_dir)) - set(listed))
    if extra:
        raise SealError(f"run {run_dir.name} was modified: {extra[0]} was added after sealing", extra[0])
    return run_dir
