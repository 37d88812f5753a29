"""The code and small data a run ran with, kept in the store so the run can be rerun from itself alone.

A replay that needs the user's directory as it was is no replay: the helper gets edited,
the data file moved, the script deleted. So every run keeps a **snapshot**: the script
or entrypoint, every local module the job imported (what ``code.modules`` lists), the
user's config files, and each data file it read up to ``store.snapshot_max_mb``, as many
as fit ``store.snapshot_max_files`` and ``store.snapshot_max_total_mb`` (``fit``). Files
are stored once per distinct content in the store (``<store>/objects/ab/abcdef…``,
read-only, with the read bits of the file it was taken from: a private file's object is
private), and the run's ``snapshot.json`` names each by the absolute path the job knew
it by, with its sha256; the seal covers ``snapshot.json`` and every object is checked
against its name when it is used.

A ``snapshot.json`` is input from whoever made the run, so it is checked whole when it
is read (``validate``): each name a normalised absolute path, each sha256 64 lowercase
hex digits, before any of it becomes a path. Laying it out writes nothing outside its
destination: every target is checked to resolve inside it, and every object to exist,
before the first file is written, and each file appears under its name only once its
content matched its hash. docs/store.md has the store's whole trust model.

A snapshot is used by laying it out again (``materialize``): each file at
``ROOT/<its absolute path>`` under a fresh directory ``ROOT``, so a script, the helper
beside it and the data it opens by a relative name keep their places relative to each
other and to the launch directory. The job then runs with ``ROOT`` as its *root*: the
script path, ``train.path``, ``PYTHONPATH`` and a task's data path are looked up under
it first (``rooted``), and the paths it records are taken out of it again
(``unrooted``), so a rerun records the same names as the run it reruns.

Which files are kept is pure (``plan``, ``fit``); storing, reading and laying out are I/O.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from launcher.errors import SnapshotError, UnsafeRun
from launcher.record import hashing, layout
from launcher.record.store import objects

SCHEMA = 1
DEFAULT_MAX_MB = 64  # per data file: the bundled sample and typical small data sets fit
# Per run (docs/store.md, "Bounds"): a laptop's store grows by at most this much per distinct run.
DEFAULT_MAX_TOTAL_MB = 1024
DEFAULT_MAX_FILES = 10_000
_ROLE_ORDER = {"script": 0, "notebook": 0, "config": 1, "module": 1, "data": 2}  # what a rerun needs first
# A sweep lays out the code beside its script before any job starts: .py files and notebooks only,
# so many at most (a script in a big repository), never below these directories.
SWEEP_MAX_FILES = 2000
SWEEP_MAX_DIRS = 500
_NOT_CODE_DIRS = ("__pycache__", "node_modules", "site-packages", "dist-packages")
ROLES = frozenset({"script", "notebook", "module", "config", "data"})
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_PATH = 4096  # PATH_MAX: no file the job opened had a longer name


# ---------------------------------------------------------------- pure
def path_problem(path: object, directory: bool = False) -> str | None:
    """Why ``path`` cannot name a file of a laid-out snapshot, or None when it can: it must be
    absolute and normalised (no empty, ``.`` or ``..`` component), without control characters
    (NUL above all). ``directory``: ``/`` itself is allowed (a launch directory)."""
    if not isinstance(path, str):
        return f"is a {type(path).__name__}, not a path"
    if not path.startswith("/"):
        return "is not an absolute path"
    if len(path) > MAX_PATH:
        return f"is longer than {MAX_PATH} characters"
    if _CONTROL.search(path):
        return "holds a control character"
    if directory and path == "/":
        return None
    if any(part in ("", ".", "..") for part in path.split("/")[1:]):
        return "is not a normalised path (an empty, '.' or '..' component)"
    return None


def _ancestors(path: str) -> Iterable[str]:
    parts = path.split("/")[1:-1]
    for n in range(1, len(parts) + 1):
        yield "/" + "/".join(parts[:n])


def validate(data: object, where: str) -> dict:
    """``data`` (a ``snapshot.json``'s content) checked whole before any of it is used as a path:
    ``UnsafeRun`` (exit 2) names the first entry that is not a normalised absolute path with a
    sha256 of 64 hex digits and a known role, a file that another entry needs as a directory,
    or a launch directory that is not a normalised absolute path. Returns ``data``."""
    if not isinstance(data, dict):
        raise SnapshotError(f"{where} is not a JSON object", layout.SNAPSHOT)
    files, left_out = data.get("files"), data.get("left_out", {})
    if not isinstance(files, dict) or not isinstance(left_out, dict):
        raise SnapshotError(f"{where} has an unknown schema", layout.SNAPSHOT)

    def refuse(entry: object, why: str) -> UnsafeRun:
        return UnsafeRun(
            f"{where}: entry {entry!r} {why}: refused before anything was written (a crafted or "
            "damaged run; see docs/store.md)",
            str(entry),
        )

    launch_dir = data.get("launch_dir")
    if (problem := path_problem(launch_dir, directory=True)) is not None:
        raise refuse(launch_dir, f"(launch_dir) {problem}")
    for path, entry in sorted(files.items()):
        if (problem := path_problem(path)) is not None:
            raise refuse(path, problem)
        if not isinstance(entry, dict) or not objects.is_sha256(entry.get("sha256")):
            sha = entry.get("sha256") if isinstance(entry, dict) else entry
            raise refuse(path, f"has sha256 {sha!r}, not 64 lowercase hex digits")
        if not isinstance(entry.get("role"), str) or entry["role"] not in ROLES:
            raise refuse(path, f"has an unknown role {entry.get('role')!r}")
    for path in sorted(files):
        if (above := next((a for a in _ancestors(path) if a in files), None)) is not None:
            raise refuse(path, f"lies below {above!r}, which is a file of the snapshot too")
    if launch_dir in files or any(a in files for a in _ancestors(launch_dir + "/x")):
        raise refuse(launch_dir, "(launch_dir) is, or lies below, a file of the snapshot")
    return data


def data_path(name: str, launch_dir: str) -> str | None:
    """Where a recorded data name was: absolute, or relative to the launch directory.
    ``launcher/…`` names (the bundled sample) are the launcher's own and are not kept."""
    if name.startswith("launcher/"):
        return None
    return name if os.path.isabs(name) else os.path.normpath(os.path.join(launch_dir, name))


def plan(
    fp: Mapping,
    launch_dir: str,
    script: str | None,
    config_dir: str | None,
    data_sizes: Mapping[str, int] | None,
    max_bytes: int,
) -> tuple[dict[str, dict], dict[str, str]]:
    """The files a run keeps: ``(kept, left_out)``.

    ``kept`` maps each absolute path to ``{"sha256", "role"}`` (role: script, notebook, module,
    config, data) with the digest the run recorded; ``left_out`` maps a path to why it is
    not kept (a data file larger than ``max_bytes``, one whose size is unknown; with
    ``data_sizes`` None every data file counts as fitting: all the run could keep). A digest
    the run recorded as not a plain sha256 (``changed while the job ran``, ``missing``)
    is never kept: there is nothing true to keep.
    """
    kept: dict[str, dict] = {}
    left_out: dict[str, str] = {}
    code = fp.get("code") or {}

    def keep(path: str, digest: object, role: str) -> None:
        if (problem := path_problem(path)) is not None:
            left_out[path] = f"its name {problem}"  # never laid out again: refused when read
        elif objects.is_sha256(digest):
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
        size = 0 if data_sizes is None else data_sizes.get(path)
        if size is None:
            left_out[path] = "not readable when the run was sealed"
        elif size > max_bytes:
            left_out[path] = f"{size} bytes, over store.snapshot_max_mb ({max_bytes // (1 << 20)} MiB)"
        else:
            keep(path, digest, "data")
    return kept, left_out


def fit(
    kept: Mapping[str, dict], sizes: Mapping[str, int], max_files: int | None, max_bytes: int | None
) -> tuple[dict[str, dict], dict[str, str]]:
    """Which of ``kept`` (``plan``'s) a run keeps under its caps: ``(kept, left_out)``.

    At most ``max_files`` files and ``max_bytes`` bytes in all (None: no cap), chosen in one
    fixed order, so two runs of the same files keep the same set: code first (the script or
    notebook, then config files and modules), then data, each by path. Once ``max_files``
    are kept every later file is left out; a file that would take the total past
    ``max_bytes`` is left out and the next ones are still tried. A size ``sizes`` lacks
    counts as 0 (an unreadable file is not kept anyway, ``take``). ``left_out`` names the
    cap each file did not fit, as ``plan`` names ``store.snapshot_max_mb``.
    """
    chosen: dict[str, dict] = {}
    left_out: dict[str, str] = {}
    used = 0
    for path in sorted(kept, key=lambda p: (_ROLE_ORDER.get(kept[p]["role"], 2), p)):
        size = sizes.get(path, 0)
        if max_files is not None and len(chosen) >= max_files:
            left_out[path] = f"over store.snapshot_max_files ({max_files} files kept per run)"
        elif max_bytes is not None and used + size > max_bytes:
            left_out[path] = (
                f"{size} bytes, over store.snapshot_max_total_mb ({max_bytes // (1 << 20)} MiB per "
                f"run, {max_bytes - used} bytes left)"
            )
        else:
            chosen[path] = kept[path]
            used += size
    return chosen, left_out


def cap_named(why: str) -> str:
    """The store setting a ``left_out`` reason names (``store.snapshot_max_mb`` where it names none)."""
    found = re.search(r"store\.snapshot_max_\w+", why)
    return found.group(0) if found else "store.snapshot_max_mb"


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
    return path[len(root) :] if path.startswith(root + "/") else path


def unroot_facts(facts: dict, root: str | None) -> dict:
    """The job's facts with every path inside ``root`` named as the snapshot's original."""
    if not root:
        return facts
    out = dict(facts)
    if out.get("modules"):
        out["modules"] = {name: {**m, "path": unrooted(m["path"], root)} for name, m in out["modules"].items()}
    if out.get("data"):  # a name the job recorded outside root wins over one mapped back from inside it
        data = {name: digest for name, digest in out["data"].items() if unrooted(name, root) == name}
        for name, digest in out["data"].items():
            data.setdefault(unrooted(name, root), digest)
        out["data"] = data
    return out


def rooted_pythonpath(value: str, root: str | None, keep: Iterable[str] = ()) -> str:
    """``PYTHONPATH`` with each entry the snapshot lays out replaced by its laid-out copy."""
    keep = set(keep)
    parts = [p if p in keep else rooted(p, root) for p in value.split(os.pathsep) if p]
    return os.pathsep.join(parts)


# ---------------------------------------------------------------- the store's objects
def take(
    store_root: Path, kept: Mapping[str, dict], left_out: Mapping[str, str], launch_dir: str, root: str | None = None
) -> dict:
    """Store every kept file (read from inside ``root`` when the run ran from a laid-out
    snapshot) and return the content of ``snapshot.json``.

    Last, every object is refreshed (``refresh``), and one a concurrent ``launch gc`` removed
    is stored again: what the returned snapshot names is in the store when it returns."""
    files, missed = {}, dict(left_out)
    for path, entry in sorted(kept.items()):
        if objects.put(store_root, rooted(path, root), entry["sha256"]):
            files[path] = entry
        else:
            missed[path] = "changed or gone since the job read it"
    for path, entry in list(files.items()):
        if not objects.refresh(store_root, entry["sha256"]) and not objects.put(
            store_root, rooted(path, root), entry["sha256"]
        ):
            del files[path]
            missed[path] = "changed or gone since the job read it"
    return {"schema": SCHEMA, "launch_dir": launch_dir, "files": files, "left_out": dict(sorted(missed.items()))}


def read(run_dir: Path) -> dict | None:
    """The run's ``snapshot.json``, checked whole (``validate``), or None for a run from before
    snapshots. A ``snapshot.json`` that is a link is refused: a run is read from itself alone."""
    import json

    path = layout.RunPaths(run_dir).snapshot
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SnapshotError(f"{path} is not readable: {exc.strerror}", layout.SNAPSHOT) from None
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeRun(
            f"{path} is a link (to {os.readlink(path)!r}), not a file of the run: refused before "
            "anything was written (a crafted run; see docs/store.md)",
            layout.SNAPSHOT,
        )
    try:
        data = json.loads(path.read_text())
    except RecursionError:
        raise SnapshotError(f"{path} is not readable: its JSON is nested too deeply", layout.SNAPSHOT) from None
    except (OSError, ValueError) as exc:
        raise SnapshotError(f"{path} is not readable: {exc}", layout.SNAPSHOT) from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("files"), dict):
        raise SnapshotError(f"{path} has an unknown schema", layout.SNAPSHOT)
    return validate(data, str(path))


def check_recorded(snap: Mapping, fp: Mapping, script: str | None, config_dir: str | None, where: str) -> None:
    """Refuse (``UnsafeRun``) an entry of ``snap`` that the run's own record ``fp`` (its whole
    fingerprint) does not name with that content and role: what an unsealed run's
    ``snapshot.json`` may hold is what ``plan`` would keep of that record, nothing more."""
    try:
        recorded, _ = plan(fp, str(snap["launch_dir"]), script, config_dir, None, 0)
    except (AttributeError, KeyError, TypeError) as exc:
        raise UnsafeRun(
            f"{where}: the run's fingerprint cannot be read as a record of its code "
            f"({type(exc).__name__}: {exc}): refused before anything was written",
            None,
        ) from None
    for path, entry in sorted(snap["files"].items()):
        want = recorded.get(path)
        if want is None or (want["sha256"], want["role"]) != (entry["sha256"], entry["role"]):
            said = "names no such file" if want is None else f"recorded {want['role']} {want['sha256'][:12]}"
            raise UnsafeRun(
                f"{where}: entry {path!r} ({entry['role']} {entry['sha256'][:12]}) is not what the "
                f"run recorded (its fingerprint {said}): refused before anything was written "
                "(a forged or damaged run; see docs/store.md)",
                path,
            )


def data_sizes(paths: Iterable[str], root: str | None = None) -> dict[str, int]:
    out = {}
    for path in paths:
        try:
            out[path] = os.stat(rooted(path, root)).st_size
        except OSError:
            continue
    return out


def _check_inside(dest: Path, path: str, directory: bool = False) -> None:
    """Refuse a target ``dest/<path>`` that would not be a plain file (or directory) inside ``dest``:
    a link already in the destination on its way, or something else where a file goes."""
    current = dest
    parts = [p for p in path.split("/") if p]
    for n, part in enumerate(parts):
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            return  # made afresh from here on, by materialize
        last = n == len(parts) - 1
        if stat.S_ISLNK(st.st_mode):
            raise UnsafeRun(
                f"laying out {path}: {current} is a link already in the destination (to "
                f"{os.readlink(current)!r}): refused before anything was written",
                path,
            )
        if (last and not directory and not stat.S_ISREG(st.st_mode)) or (
            (not last or directory) and not stat.S_ISDIR(st.st_mode)
        ):
            raise UnsafeRun(
                f"laying out {path}: {current} is already there, and not a "
                f"{'file' if last and not directory else 'directory'}: refused before anything "
                "was written",
                path,
            )


def _copy_checked(source: Path, target: Path, sha256: str, path: str) -> None:
    """Copy object ``source`` to ``target`` through a temporary name beside it, renamed only once the
    copy matched ``sha256``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:64]}.", suffix=".part")
    try:
        h = hashlib.sha256()
        with open(source, "rb") as src, os.fdopen(fd, "wb") as dst:
            mode = objects.laid_out_mode(os.fstat(src.fileno()).st_mode)
            for block in iter(lambda: src.read(1 << 20), b""):
                h.update(block)
                dst.write(block)
        if h.hexdigest() != sha256:
            raise SnapshotError(f"the snapshot of {path} is damaged ({source} does not match its hash)")
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def materialize(store_root: Path, snapshot: Mapping, dest: Path) -> Path:
    """Lay ``snapshot`` out under ``dest`` (``dest/<absolute path>``), checking every object's
    content against its name; ``SnapshotError`` names the first missing or damaged one.

    Everything is checked before the first write: the snapshot itself (``validate``), every
    object's existence, and every target's place inside ``dest`` (``_check_inside``); each
    file is then written under a temporary name and renamed once its hash matched."""
    validate(snapshot, "the snapshot")
    dest = Path(os.path.realpath(dest))
    files = snapshot["files"]
    sources = {}
    for path, entry in sorted(files.items()):
        source = objects.object_path(store_root, entry["sha256"])
        if not source.is_file():
            raise SnapshotError(f"the snapshot of {path} is missing from the store ({source})")
        _check_inside(dest, path)
        sources[path] = source
    launch_dir = str(snapshot["launch_dir"])
    _check_inside(dest, launch_dir, directory=True)
    for path, source in sources.items():
        _copy_checked(source, dest / path.lstrip("/"), files[path]["sha256"], path)
    (dest / launch_dir.lstrip("/")).mkdir(parents=True, exist_ok=True)
    return dest


def changed_since(files: Mapping[str, dict]) -> list[str]:
    """The kept files whose original is now gone or holds other content (an edited script)."""
    changed = []
    for path, entry in sorted(files.items()):
        try:
            digest = hashing.file_sha256(path)
        except OSError:
            changed.append(path)
            continue
        if digest != entry["sha256"]:
            changed.append(path)
    return changed


def link(dest: Path, original: str, target: str) -> None:
    """Make ``original`` (an absolute path) inside the laid-out ``dest`` point at ``target``; an
    ``original`` that is not a normalised absolute path, or whose place in ``dest`` is reached
    through a link, is refused (``UnsafeRun``) before anything is made."""
    if (problem := path_problem(original)) is not None:
        raise UnsafeRun(f"a data file's name {original!r} {problem}: refused before anything was written", original)
    _check_inside(Path(os.path.realpath(dest)), os.path.dirname(original), directory=True)
    inside = Path(dest) / original.lstrip("/")
    inside.parent.mkdir(parents=True, exist_ok=True)
    if not os.path.lexists(inside):
        os.symlink(target, inside)


def code_tree(
    directory: str, skip: Iterable[str] = (), max_files: int = SWEEP_MAX_FILES, max_dirs: int = SWEEP_MAX_DIRS
) -> list[str]:
    """The ``.py`` files (and ``.ipynb`` notebooks) below ``directory`` that a job started there could run: not in
    hidden directories, virtual environments, caches or ``skip`` (the store); at most
    ``max_files``, looking into at most ``max_dirs`` directories (a sweep started from a
    home directory must not walk it all)."""
    skip = {os.path.realpath(s) for s in skip}
    out: list[str] = []
    for seen, (current, dirs, files) in enumerate(os.walk(directory)):
        if seen >= max_dirs:
            break
        dirs[:] = sorted(
            d
            for d in dirs
            if not d.startswith(".")
            and d not in _NOT_CODE_DIRS
            and os.path.realpath(os.path.join(current, d)) not in skip
            and not os.path.exists(os.path.join(current, d, "pyvenv.cfg"))
        )
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
