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

The seal names its run (``"run"``: the directory's name), so a signed seal covers the run's
id (``launcher.record.store.signing``); it is signed only with the key its caller passes (the
settings of whoever seals it now), never with one the run directory names.

The store keeps a ledger of the runs made in it (``layout.CREATED``, outside every run directory):
an interrupted run has no seal, and the ledger is how ``launch resume`` tells a run this
store made from one copied in (``creation``). It is a note, not a proof: whoever can write
the store can write it too.
"""

from __future__ import annotations

import datetime as _dt
import errno
import fcntl
import json
import os
import pwd
import secrets
import socket
import stat
import sys
import tempfile
from pathlib import Path

from launcher.errors import LauncherError, RunNotFound, SealError, StoreError, UnsafeRun
from launcher.record import layout
from launcher.record.hashing import file_sha256

MANIFEST_SCHEMA = 1
RESERVE = ".reserve"  # freed when the disk is full, so status.json can still be written
RESERVE_BYTES = 64 * 1024
# The store's ledger of the runs made in it (StorePaths.created): one JSON line per run (its name,
# the directory's inode, host, user, pid, time), appended by ``create(..., ledger=True)``, read by
# ``creation``. A file of the store (beside objects/, index.sqlite), never in a run directory: a run
# handed over cannot bring its own entry.


def create(store_root: str | os.PathLike, now: _dt.datetime | None = None, *, ledger: bool = False) -> Path:
    """Create and return a new, empty, uniquely named run directory under ``store_root``.

    ``ledger``: note it in the store's ledger (``layout.CREATED``): a run's directory (``job.create_run``),
    not a sweep's or an audit's, which are made here too."""
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
        if ledger:
            note_created(path)
        return path
    raise StoreError(f"could not find a free run name in {str(root)!r}")


def _user() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # a uid with no name (a container's)
        return str(os.getuid())


def note_created(run_dir: Path) -> None:
    """Append ``run_dir`` to its store's ledger (``layout.CREATED``): its name and inode (the very directory,
    not a later one of that name), host, user, pid and time. One ``write`` of one line, under an
    exclusive ``flock``, so launches creating runs at once never mix their lines. The ledger takes
    the store directory's own mode (a group's shared store: the group appends to it), whatever the
    umask. A ledger that cannot be written leaves the run made and says so on stderr: the run is
    then one ``launch resume`` says this store did not create, the safe side."""
    store = run_dir.parent
    entry = {
        "run": run_dir.name,
        "inode": os.stat(run_dir).st_ino,
        "host": socket.gethostname(),
        "user": _user(),
        "pid": os.getpid(),
        "time": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
    }
    line = (json.dumps(entry, sort_keys=True) + "\n").encode()
    path = layout.StorePaths(store).created
    try:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            os.fchmod(fd, stat.S_IMODE(os.stat(store).st_mode) & 0o666)
        except FileExistsError:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            written = 0
            while written < len(line):
                written += os.write(fd, line[written:])
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        print(
            f"[launch] warning: run {run_dir.name} is not noted in {path} ({exc.strerror}): launch resume will "
            "say this store did not create it",
            file=sys.stderr,
        )


def find_created(lines, name: str, inode: int) -> dict | None:
    """The ledger entry (``layout.CREATED``'s lines) of run ``name`` whose directory is ``inode``, or None.
    A line that is not such an entry (damaged, cut short, nested too deeply) is passed over."""
    for line in lines:
        if name not in line:
            continue
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(entry, dict) and entry.get("run") == name and entry.get("inode") == inode:
            return entry
    return None


def creation(run_dir: Path) -> dict | None:
    """Who made ``run_dir`` in its store, as the store's ledger (``layout.CREATED``) says: the entry noted when
    ``create`` made this very directory (its name and inode), or None: copied in from elsewhere (a
    copy is another directory), made before the store kept a ledger, or another directory put in its
    place under its name. Whoever can write the store can write the ledger: a note, not a proof."""
    try:
        inode = os.stat(run_dir).st_ino
        with open(layout.StorePaths(Path(run_dir).parent).created, encoding="utf-8", errors="replace") as f:
            return find_created(f, Path(run_dir).name, inode)
    except OSError:
        return None


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
    """The JSON object in ``path``: ``RunNotFound`` when it is missing, ``SealError`` (one line) when it
    cannot be read, is not JSON, is JSON nested too deeply for Python's parser (a crafted file:
    ``[`` repeated 200,000 times), or is not an object."""
    data = loads_json(_read_text(path), path)
    if not isinstance(data, dict):
        raise SealError(f"{path} is not a JSON object", str(path))
    return data


def _read_text(path: str | os.PathLike) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        raise RunNotFound(f"{path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise SealError(f"{path} is not readable JSON: {exc}", str(path)) from None


def loads_json(text: str, where: str | os.PathLike) -> object:
    """``text`` as JSON; ``SealError`` naming ``where`` when it is not, or nests too deeply to be read."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise SealError(f"{where} is not readable JSON: {exc}", str(where)) from None
    except RecursionError:
        raise SealError(f"{where} is not readable JSON: nested too deeply", str(where)) from None


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
    path = layout.RunPaths(run_dir).status
    try:
        write_json(path, data)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or not (run_dir / RESERVE).exists():
            raise
        (run_dir / RESERVE).unlink()
        data["disk_full"] = True
        write_json(path, data)


def status(run_dir: Path) -> dict:
    path = layout.RunPaths(run_dir).status
    return read_json(path) if path.exists() else {"state": "unknown"}


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
    if layout.RunPaths(run_dir).manifest.exists():
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


def _files(run_dir: Path) -> list[str]:
    """Every file below ``run_dir``, hidden ones included, but the manifest itself (it cannot hold
    its own hash) and its signature (made from it). Nothing else is left out: a hidden file is as
    much a part of the run as any other."""
    names = (p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*") if p.is_file())
    return sorted(name for name in names if name not in (layout.MANIFEST, layout.SIGNATURE))


def seal(run_dir: Path, signing_key: object = None) -> dict:
    """Mark ``run_dir`` complete: write the manifest last, sign it with ``signing_key``, then make every
    file read-only.

    The manifest names the run (``"run"``: its directory's name, so a signature covers the run's id)
    and lists every file (``_files``). ``signing_key`` is the ``store.signing_key`` setting of whoever
    seals the run now (``launcher.record.store.signing.signing_key``'s forms; None: unsigned), passed by the
    caller: never read from the run directory, whose ``config.yaml`` anyone may have written. The
    disk-full reserve is deleted first: it only exists so an unsealed run can still record how it
    ended, and a sealed run needs none.
    """
    set_status(run_dir, "complete")
    (run_dir / RESERVE).unlink(missing_ok=True)
    manifest = {
        "schema": MANIFEST_SCHEMA,
        "run": os.path.basename(os.path.realpath(run_dir)),  # as signing.check finds it
        "files": {name: file_sha256(run_dir / name) for name in _files(run_dir)},
    }
    write_json(layout.RunPaths(run_dir).manifest, manifest)
    if signing_key is not None:
        sign_seal(run_dir, signing_key)
    make_read_only(run_dir)
    return manifest


def sign_seal(run_dir: Path, signing_key: object) -> bool:
    """Sign the seal with ``signing_key`` (a ``store.signing_key`` setting: a key file, ``git``, None;
    ``launcher.record.store.signing``). A key that cannot sign leaves the run sealed and unsigned, and says
    so on stderr: a finished training is never lost to a missing key. True when it was signed."""
    from launcher.record.store import signing

    try:
        key = signing.signing_key(signing_key)
        if key is None:
            return False
        write_bytes(layout.RunPaths(run_dir).signature, signing.sign(run_dir, key))
        return True
    except OSError as exc:
        print(f"[launch] warning: run {run_dir.name} is sealed, not signed: {exc}", file=sys.stderr)
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
        raise UnsafeRun(
            f"run {run_dir.name} holds a link pointing outside it ({name} -> {target}): refused "
            "before anything was written (a run is read from itself alone; see docs/store.md)",
            name,
        )


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
    if not run_dir.is_dir() or not layout.RunPaths(run_dir).config.exists():
        raise RunNotFound(f"{str(run_dir)!r} is not a run directory (no {layout.CONFIG})")
    return run_dir


def verify_seal(path: str | os.PathLike) -> Path:
    """Check that a run is complete and untouched; the run directory.

    Raises:
        RunNotFound: ``path`` does not exist or is not a run directory (no ``config.yaml``) (exit 2).
        UnsafeRun: the run holds a link pointing outside it, whatever its seal says (exit 2).
        SealError: the run is not sealed (running, failed, interrupted, abandoned: the message says
            which, and how to resume it), its seal has an unknown schema, or a file was changed,
            removed or added after sealing (exit 4); the message names the file.
    """
    run_dir = require_run(path)
    refuse_links_out(run_dir)
    seal_path = layout.RunPaths(run_dir).manifest
    if not seal_path.exists():
        state = describe_state(run_dir)
        hint = f"; `launch resume {run_dir}` continues it" if state.startswith(("abandoned", "interrupted")) else ""
        raise SealError(f"run {run_dir.name} is not complete (state: {state}; no {layout.MANIFEST}){hint}")
    manifest = read_json(seal_path)
    if manifest.get("schema") != MANIFEST_SCHEMA or not isinstance(manifest.get("files"), dict):
        raise SealError(f"run {run_dir.name}: {layout.MANIFEST} has an unknown schema", layout.MANIFEST)
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
