"""The code and small data a run ran with, kept in the store so the run can be rerun from itself alone.

A replay that needs the user's directory as it was is no replay: the helper gets edited,
the data file moved, the script deleted. So every run keeps a **snapshot**: the script
or entrypoint, every local module the job imported (what ``code.modules`` lists), the
user's config files, and each data file it read up to ``store.snapshot_max_mb``. Files
are stored once per distinct content in the store (``<store>/objects/ab/abcdef…``,
read-only), and the run's ``snapshot.json`` names each by the absolute path the job
knew it by, with its sha256; the seal covers ``snapshot.json`` and every object is
checked against its name when it is used.

A snapshot is used by laying it out again (``materialize``): each file at
``ROOT/<its absolute path>`` under a fresh directory ``ROOT``, so a script, the helper
beside it and the data it opens by a relative name keep their places relative to each
other and to the launch directory. The job then runs with ``ROOT`` as its *root*: the
script path, ``train.path``, ``PYTHONPATH`` and a task's data path are looked up under
it first (``rooted``), and the paths it records are taken out of it again
(``unrooted``), so a rerun records the same names as the run it reruns.

Which files are kept is pure (``plan``); storing, reading and laying out are I/O.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from launcher.errors import SealError

SNAPSHOT = "snapshot.json"
OBJECTS = "objects"
SCHEMA = 1
DEFAULT_MAX_MB = 64  # per data file: the bundled sample and typical small data sets fit
# A sweep lays out the code beside its script before any job starts: .py files and notebooks only,
# so many at most (a script in a big repository), never below these directories.
SWEEP_MAX_FILES = 2000
SWEEP_MAX_DIRS = 500
_NOT_CODE_DIRS = ("__pycache__", "node_modules", "site-packages", "dist-packages")


class SnapshotError(SealError):
    """A snapshot object is missing or does not match its name: the store was damaged (exit 4)."""


# ---------------------------------------------------------------- pure
def data_path(name: str, launch_dir: str) -> str | None:
    """Where a recorded data name was: absolute, or relative to the launch directory.
    ``launcher/…`` names (the bundled sample) are the launcher's own and are not kept."""
    if name.startswith("launcher/"):
        return None
    return name if os.path.isabs(name) else os.path.normpath(os.path.join(launch_dir, name))


def plan(fp: Mapping, launch_dir: str, script: str | None, config_dir: str | None,
         data_sizes: Mapping[str, int], max_bytes: int) -> tuple[dict[str, dict], dict[str, str]]:
    """The files a run keeps: ``(kept, left_out)``.

    ``kept`` maps each absolute path to ``{"sha256", "role"}`` (role: script, notebook, module,
    config, data) with the digest the run recorded; ``left_out`` maps a path to why it is
    not kept (a data file larger than ``max_bytes``, one whose size is unknown). A digest
    the run recorded as not a plain sha256 (``changed while the job ran``, ``missing``)
    is never kept: there is nothing true to keep.
    """
    kept: dict[str, dict] = {}
    left_out: dict[str, str] = {}
    code = fp.get("code") or {}

    def keep(path: str, digest: object, role: str) -> None:
        if isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest):
            kept.setdefault(path, {"sha256": digest, "role": role})
        else:
            left_out[path] = f"recorded as {digest!r}"

    if script and code.get("script_sha256"):
        keep(os.path.abspath(script), code["script_sha256"], "script")
    if script and code.get("notebook_sha256"):  # train=notebook: the whole file, as it ran
        keep(os.path.abspath(script), code["notebook_sha256"], "notebook")
    for module in (code.get("modules") or {}).values():
        keep(module["path"], module["sha256"], "module")
    if config_dir:
        for name, digest in (fp.get("config_files") or {}).items():
            keep(os.path.join(config_dir, name), digest, "config")
    for name, digest in (fp.get("data") or {}).items():
        path = data_path(name, launch_dir)
        if path is None or path in kept:
            continue
        size = data_sizes.get(path)
        if size is None:
            left_out[path] = "not readable when the run was sealed"
        elif size > max_bytes:
            left_out[path] = f"{size} bytes, over store.snapshot_max_mb ({max_bytes // (1 << 20)} MiB)"
        else:
            keep(path, digest, "data")
    return kept, left_out


def rooted(path: str, root: str | None) -> str:
    """``path`` inside the laid-out snapshot ``root`` when it is there, else ``path`` itself."""
    if not root or not os.path.isabs(path):
        return path
    inside = os.path.join(root, path.lstrip("/"))
    return inside if os.path.lexists(inside) else path


def unrooted(path: str, root: str | None) -> str:
    """The path a file inside the laid-out snapshot ``root`` stands for (others unchanged)."""
    if not root:
        return path
    root = root.rstrip("/")
    if path == root:
        return "/"
    return path[len(root):] if path.startswith(root + "/") else path


def unroot_facts(facts: dict, root: str | None) -> dict:
    """The job's facts with every path inside ``root`` named as the snapshot's original."""
    if not root:
        return facts
    out = dict(facts)
    if out.get("modules"):
        out["modules"] = {name: {**m, "path": unrooted(m["path"], root)} for name, m in out["modules"].items()}
    if out.get("data"):
        out["data"] = {unrooted(name, root): digest for name, digest in out["data"].items()}
    return out


def rooted_pythonpath(value: str, root: str | None, keep: Iterable[str] = ()) -> str:
    """``PYTHONPATH`` with each entry the snapshot lays out replaced by its laid-out copy."""
    keep = set(keep)
    parts = [p if p in keep else rooted(p, root) for p in value.split(os.pathsep) if p]
    return os.pathsep.join(parts)


# ---------------------------------------------------------------- the store's objects
def object_path(store_root: Path, sha256: str) -> Path:
    return Path(store_root) / OBJECTS / sha256[:2] / sha256


def put(store_root: Path, path: str, sha256: str) -> bool:
    """Keep the file at ``path`` as object ``sha256``; False when its content is not that
    (it changed since the job read it: what is there now is not what ran)."""
    target = object_path(store_root, sha256)
    if target.exists():
        return True
    target.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".obj.", suffix=".tmp")
    try:
        with open(path, "rb") as src, os.fdopen(fd, "wb") as dst:
            for block in iter(lambda: src.read(1 << 20), b""):
                h.update(block)
                dst.write(block)
            dst.flush()
            os.fsync(dst.fileno())
        if h.hexdigest() != sha256:
            os.unlink(tmp)
            return False
        os.chmod(tmp, 0o444)
        os.replace(tmp, target)
        return True
    except OSError:
        if os.path.exists(tmp):
            os.unlink(tmp)
        return False


def take(store_root: Path, kept: Mapping[str, dict], left_out: Mapping[str, str], launch_dir: str,
         root: str | None = None) -> dict:
    """Store every kept file (read from inside ``root`` when the run ran from a laid-out
    snapshot) and return the content of ``snapshot.json``."""
    files, missed = {}, dict(left_out)
    for path, entry in sorted(kept.items()):
        if put(store_root, rooted(path, root), entry["sha256"]):
            files[path] = entry
        else:
            missed[path] = "changed or gone since the job read it"
    return {"schema": SCHEMA, "launch_dir": launch_dir, "files": files, "left_out": dict(sorted(missed.items()))}


def read(run_dir: Path) -> dict | None:
    """The run's ``snapshot.json``, or None for a run from before snapshots."""
    import json

    path = Path(run_dir) / SNAPSHOT
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SnapshotError(f"{path} is not readable: {exc}", SNAPSHOT) from None
    if data.get("schema") != SCHEMA or not isinstance(data.get("files"), dict):
        raise SnapshotError(f"{path} has an unknown schema", SNAPSHOT)
    return data


def data_sizes(paths: Iterable[str], root: str | None = None) -> dict[str, int]:
    out = {}
    for path in paths:
        try:
            out[path] = os.stat(rooted(path, root)).st_size
        except OSError:
            continue
    return out


def materialize(store_root: Path, snapshot: Mapping, dest: Path) -> Path:
    """Lay ``snapshot`` out under ``dest`` (``dest/<absolute path>``), checking every object's
    content against its name; ``SnapshotError`` names the first missing or damaged one."""
    for path, entry in sorted(snapshot["files"].items()):
        source = object_path(store_root, entry["sha256"])
        target = Path(dest) / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        h = hashlib.sha256()
        try:
            with open(source, "rb") as src, open(target, "wb") as dst:
                for block in iter(lambda: src.read(1 << 20), b""):
                    h.update(block)
                    dst.write(block)
        except FileNotFoundError:
            raise SnapshotError(f"the snapshot of {path} is missing from the store ({source})") from None
        if h.hexdigest() != entry["sha256"]:
            raise SnapshotError(f"the snapshot of {path} is damaged ({source} does not match its hash)")
    (Path(dest) / str(snapshot["launch_dir"]).lstrip("/")).mkdir(parents=True, exist_ok=True)
    return Path(dest)


def changed_since(files: Mapping[str, dict]) -> list[str]:
    """The kept files whose original is now gone or holds other content (an edited script)."""
    changed = []
    for path, entry in sorted(files.items()):
        h = hashlib.sha256()
        try:
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        except OSError:
            changed.append(path)
            continue
        if h.hexdigest() != entry["sha256"]:
            changed.append(path)
    return changed


def link(dest: Path, original: str, target: str) -> None:
    """Make ``original`` (an absolute path) inside the laid-out ``dest`` point at ``target``."""
    inside = Path(dest) / original.lstrip("/")
    inside.parent.mkdir(parents=True, exist_ok=True)
    if not os.path.lexists(inside):
        os.symlink(target, inside)


def code_tree(directory: str, skip: Iterable[str] = (), max_files: int = SWEEP_MAX_FILES,
              max_dirs: int = SWEEP_MAX_DIRS) -> list[str]:
    """The ``.py`` files (and ``.ipynb`` notebooks) below ``directory`` that a job started there could run: not in
    hidden directories, virtual environments, caches or ``skip`` (the store); at most
    ``max_files``, looking into at most ``max_dirs`` directories (a sweep started from a
    home directory must not walk it all)."""
    skip = {os.path.realpath(s) for s in skip}
    out: list[str] = []
    for seen, (current, dirs, files) in enumerate(os.walk(directory)):
        if seen >= max_dirs:
            break
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _NOT_CODE_DIRS
                         and os.path.realpath(os.path.join(current, d)) not in skip
                         and not os.path.exists(os.path.join(current, d, "pyvenv.cfg")))  # fmt: skip
        out += [os.path.join(current, f) for f in sorted(files) if f.endswith((".py", ".ipynb"))]
        if len(out) >= max_files:
            return out[:max_files]
    return out


def lay_out_code(dest: Path, code_dirs: Iterable[str], launch_dir: str, skip: Iterable[str] = ()) -> int:
    """Copy the code below ``code_dirs`` (``code_tree``) to ``dest/<absolute path>`` as it is
    now, and link everything else of those directories and of ``launch_dir`` to the
    originals: what a sweep's jobs run, whatever is edited while they wait. Returns the
    number of files copied."""
    copied = 0
    for directory in dict.fromkeys(os.path.abspath(d) for d in code_dirs):
        for path in code_tree(directory, skip):
            target = Path(dest) / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                shutil.copyfile(path, target)
                copied += 1
    skip = {os.path.realpath(s) for s in skip}
    for directory in dict.fromkeys([os.path.abspath(launch_dir), *map(os.path.abspath, code_dirs)]):
        (Path(dest) / directory.lstrip("/")).mkdir(parents=True, exist_ok=True)
        mirror_rest(dest, directory, skip)
    return copied


def mirror_rest(dest: Path, directory: str, skip: set[str] | frozenset[str] = frozenset()) -> None:
    """Link every entry of ``directory`` that the laid-out snapshot lacks to the original,
    descending into the directories the snapshot has (a sweep's jobs see the launch
    directory's data where it is, and its code as it was when the sweep started)."""
    inside = Path(dest) / directory.lstrip("/")
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        mirrored = inside / entry.name
        if os.path.realpath(entry.path) in skip:
            continue
        if not os.path.lexists(mirrored):
            os.symlink(entry.path, mirrored)
        elif mirrored.is_dir() and not mirrored.is_symlink() and entry.is_dir(follow_symlinks=False):
            mirror_rest(dest, entry.path, skip)


def remove(dest: Path) -> None:
    """Delete a laid-out snapshot (its files may have been made read-only by the job)."""

    def writable(func, path, _exc) -> None:
        parent = os.path.dirname(path)
        os.chmod(parent, os.stat(parent).st_mode | stat.S_IWUSR)
        func(path)

    shutil.rmtree(dest, onerror=writable)
