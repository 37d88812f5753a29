"""``launch gc``: remove the objects of a store that no run references, by mark and sweep.

A run's snapshot (``launcher.record.store.snapshot``) keeps its files as objects of the store,
shared by every run with the same content; deleting a run leaves its objects behind.
The **mark** reads the ``snapshot.json`` of every run directory of the store, whatever
its state (complete, failed, interrupted, running: an unfinished run may still be
resumed from what it names), and the **sweep** removes every object none of them names.
A store's sweeps keep copies of their code (not objects), and a replay's or a resume's
layout is a copy, so runs are the only references.

It is safe while other launches write to the store, without stopping them:

- an object whose mtime is not older than the mark's start survives: one stored while the
  gc runs is new, and a run that reuses an object refreshes its mtime when it has taken
  its snapshot (``snapshot.take``), and stores it again if a gc removed it meanwhile;
- the mark is taken again after the objects are listed, and each object is looked at
  once more just before it is removed, so a ``snapshot.json`` written meanwhile counts;
- ``<store>/.gc.lock`` (``store_lock``): a gc holds it exclusively, so two gcs of one store
  never run at once, and a run holds it shared while it stores its snapshot and writes its
  ``snapshot.json`` (``launcher.record.store.keep``), so a gc never marks between the two.

The gc removes nothing it cannot account for: each of these stops it (``StoreError``, one
line naming the path and what to do) before anything is removed, since what a run
references must be known, never guessed:

- a store that is missing, not a directory, or a run directory itself (``check_store``:
  a run's own ``config.yaml`` would make the whole store look like one run without a
  snapshot, so every object would go);
- a directory of the store the mark cannot list (another user's private run: ``os.walk``
  would skip it in silence);
- a ``snapshot.json`` that cannot be read, or that replay would refuse
  (``snapshot.read``: the wrong shape or schema, an entry that is not a sha256, a link);
- an entry of the store that is a link to a run outside it (a replay of it reads this
  store's objects, but the gc never follows a link out of the store), and an ``objects/``
  that is a link (its sweep would remove files outside the store).

Which objects go is pure (``unreferenced``), and so is what looks like a run
(``run_marker``) and which links the mark reaches (``walked``).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from launcher.errors import LauncherError, NotAStore, StoreBusy, StoreError
from launcher.record import layout
from launcher.record.store import objects, snapshot

# What only a run directory holds at its top: a store root holding one of them is a run given by mistake.
RUN_FILES = (layout.CONFIG, layout.FINGERPRINT, layout.MANIFEST)
_NOTHING_THERE = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)  # a dangling or looping link: no run behind it
# File times come from a coarse clock (a few ms behind time.time()): an object stored just
# after the mark started must not look older than it.
CLOCK_SLACK_S = 0.25
WAIT_S = 120.0  # how long a gc waits for the runs storing their snapshots (seconds for a large one)
_POLL_S = 0.05


@contextmanager
def store_lock(store_root: Path, *, shared: bool, wait_s: float | None) -> Iterator[bool]:
    """Hold ``<store_root>/.gc.lock`` shared (a run storing its snapshot) or exclusively (a gc),
    waiting up to ``wait_s`` seconds (None: for ever) before ``StoreBusy``. ``fcntl.flock``, which
    ``filelock.FileLock`` uses too: the kernel drops a dead process's hold, so no stale lock.
    (``filelock.ReadWriteLock`` is an SQLite database and needs filelock >= 3.21.)

    Yields False, holding nothing, when a run cannot open the lock file (a store it may read
    but not write): such a run's snapshot cannot be stored either."""
    path = layout.StorePaths(store_root).gc_lock
    try:
        fd = os.open(path, (os.O_RDONLY if shared else os.O_RDWR) | os.O_CREAT, 0o644)
    except OSError as exc:
        if not shared:
            raise StoreError(f"cannot lock store {str(store_root)!r} for launch gc: {exc.strerror}") from None
        yield False
        return
    try:
        deadline = None if wait_s is None else time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    holder = "a launch gc" if shared else "another launch gc, or a run storing its snapshot"
                    raise StoreBusy(f"{path} was held by {holder} for {wait_s:g} s") from None
                time.sleep(_POLL_S)
        yield True
    finally:
        os.close(fd)  # closing it drops the hold


@dataclass(frozen=True)
class StoredObject:
    sha256: str
    path: Path
    size: int
    mtime: float


@dataclass
class Report:
    """What a gc did (or, ``dry_run``, would do)."""

    dry_run: bool
    removed: list[StoredObject] = field(default_factory=list)
    kept: int = 0  # objects left in the store
    runs: int = 0  # snapshots read by the mark
    failed: list[tuple[str, str]] = field(default_factory=list)  # (sha256, why) of objects not removable

    @property
    def freed(self) -> int:
        return sum(o.size for o in self.removed)


# ---------------------------------------------------------------- pure
def references(snapshot_json: Mapping) -> set[str]:
    """The object names one ``snapshot.json``'s content references: each entry's sha256 that is a
    valid object name (anything else names no object, so keeps none)."""
    files = snapshot_json.get("files")
    if not isinstance(files, Mapping):
        return set()
    return {e["sha256"] for e in files.values() if isinstance(e, Mapping) and objects.is_sha256(e.get("sha256"))}


def unreferenced(objects: Iterable[StoredObject], marked: set[str], started: float) -> list[StoredObject]:
    """The objects the sweep removes: not ``marked``, and older than the mark's start ``started``
    (less the clock's slack). Sorted by name."""
    return sorted(
        (o for o in objects if o.sha256 not in marked and o.mtime < started - CLOCK_SLACK_S), key=lambda o: o.sha256
    )


def run_marker(names: Iterable[str]) -> str | None:
    """The first of ``RUN_FILES`` among ``names`` (a directory's entries), or None: a directory
    holding one is a run, not a store."""
    present = set(names)
    return next((name for name in RUN_FILES if name in present), None)


def walked(store_root: str, target: str) -> bool:
    """Does the mark read ``target`` itself when it walks ``store_root`` (both resolved): inside the
    store, and not below ``objects/`` or a hidden directory? A link to such a place needs no
    following: whatever run is there is marked where it is."""
    try:
        parts = Path(target).relative_to(store_root).parts
    except ValueError:
        return False  # outside the store
    return not parts or (parts[0] != layout.OBJECTS and not any(p.startswith(".") for p in parts))


def human(size: int) -> str:
    """A size in bytes for people: ``512 B``, ``1.5 KiB``, ``3.2 MiB``."""
    if size < 1024:
        return f"{size} B"
    value, unit = size / 1024, "KiB"
    for bigger in ("MiB", "GiB", "TiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.1f} {unit}"


# ---------------------------------------------------------------- the store
def _entries(directory: str | os.PathLike) -> list[os.DirEntry]:
    """``directory``'s entries by name, none when it is gone; ``StoreError`` when it cannot be listed."""
    try:
        with os.scandir(directory) as listing:
            return sorted(listing, key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise StoreError(
            f"launch gc: cannot list {os.fspath(directory)} ({exc.strerror}); nothing was "
            "removed: run launch gc as a user who can read the whole store"
        ) from None


def check_store(store_root: Path) -> None:
    """Refuse (``NotAStore``, exit 2) a ``store_root`` that is missing, not a directory, or a run directory
    (``run_marker``): a run's ``config.yaml`` at the top would make the whole store one run
    without a snapshot, whose mark keeps nothing. Nothing is written first, not even the lock."""
    root = Path(store_root)
    if not root.exists():
        raise NotAStore(f"store {str(root)!r} does not exist")
    if not root.is_dir():
        raise NotAStore(f"store {str(root)!r} is not a directory: give the store (the directory holding the runs)")
    marker = run_marker(entry.name for entry in _entries(root))
    if marker is not None:
        raise NotAStore(
            f"launch gc: {str(root)!r} looks like a run directory, not a store (it holds {marker}): "
            f"nothing was removed; give the store (the directory holding the runs, "
            f"{str(root.parent)!r} if this is one of them)"
        )


def _unlistable(exc: OSError) -> None:
    """``os.walk``'s ``onerror``: a directory the mark cannot list may hold runs, whose objects
    must not go. One that vanished (a run deleted while the mark ran) references nothing."""
    if isinstance(exc, FileNotFoundError):
        return
    raise StoreError(
        f"launch gc: cannot list {exc.filename} ({exc.strerror}), so cannot tell what the runs in it "
        "reference; nothing was removed: run launch gc as a user who can read the whole store (or "
        "give it access), then run launch gc again"
    ) from None


def _check_link(store_root: Path, link: Path) -> None:
    """Refuse an entry of the store that is a link to a run the mark does not reach (``walked``):
    a replay of ``<store>/<link>`` reads this store's objects, but the gc never follows a link
    out of the store to read what it references. Only whether a ``config.yaml`` is there is
    looked at; a link to anything else (no run behind it) is left alone."""
    target = os.path.realpath(link)
    if walked(os.path.realpath(store_root), target):
        return
    try:
        os.lstat(layout.RunPaths(link).config)
    except OSError as exc:
        if exc.errno in _NOTHING_THERE:
            return
        raise StoreError(
            f"launch gc: {link} is a link to {target}, which cannot be read ({exc.strerror}) to tell "
            "whether it is a run of this store; nothing was removed: delete the link (or move what "
            "it points at into the store), then run launch gc again"
        ) from None
    raise StoreError(
        f"launch gc: {link} is a link to {target}, a run outside the store, whose snapshot the gc "
        "does not follow the link to read (a replay of it uses this store's objects); nothing was "
        "removed: move the run into the store in place of the link (or delete the link), then run "
        "launch gc again"
    )


def snapshot_files(store_root: Path) -> list[Path]:
    """The ``snapshot.json`` of every run directory below ``store_root`` (a directory with a
    ``config.yaml``, whatever its name: a renamed run still references its objects). Not
    below ``objects/`` or hidden directories (a replay's layout), not through links: an entry
    of the store that is a link to a run elsewhere is refused (``_check_link``), and so is a
    directory that cannot be listed (``StoreError``): ``os.walk`` alone skips both in silence."""
    found = []
    root = Path(store_root)
    for current, dirs, files in os.walk(root, onerror=_unlistable):
        here = Path(current)
        if layout.CONFIG in files:  # what makes a directory a run (runs.require_run's test)
            dirs[:] = []  # runs do not nest
            if layout.SNAPSHOT in files:
                found.append(layout.RunPaths(here).snapshot)
            continue
        top = here == root
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not (top and d == layout.OBJECTS))
        if top:  # where runs are made (runs.create): a link among them may stand for a run
            for name in sorted([*dirs, *files]):
                if not name.startswith(".") and (here / name).is_symlink():
                    _check_link(root, here / name)
    return sorted(found)


def read_snapshot(run_dir: Path) -> dict:
    """The run's ``snapshot.json`` read with replay's own check (``snapshot.read``); ``{}`` when it
    is gone (the run was deleted while the mark ran). Whatever replay would refuse stops the
    gc (``StoreError``): a run whose references cannot be told keeps every object."""
    path = layout.RunPaths(run_dir).snapshot
    try:
        data = snapshot.read(run_dir)
    except LauncherError as exc:  # SnapshotError, UnsafeRun: their message names the file
        why = str(exc)
    except (OSError, ValueError, TypeError, RecursionError) as exc:  # deeply nested JSON, an unhashable role
        why = f"{path}: {type(exc).__name__}: {exc}"
    else:
        return data or {}
    raise StoreError(
        f"launch gc: cannot tell what {Path(run_dir).name} references ({why}); nothing was removed: "
        "repair or delete that run, then run launch gc again"
    ) from None


def mark(store_root: Path) -> tuple[set[str], int]:
    """Every object name the store's runs reference, and how many snapshots were read. A
    ``snapshot.json`` that cannot be read stops the gc (``StoreError``): nothing is removed."""
    marked: set[str] = set()
    paths = snapshot_files(store_root)
    for path in paths:
        marked |= references(read_snapshot(path.parent))
    return marked, len(paths)


def stored_objects(store_root: Path) -> list[StoredObject]:
    """The objects of the store: regular files ``objects/ab/abcdef…`` named by a sha256 that
    starts with their directory's name (a temporary file being written is none). An
    ``objects/`` that is a link is refused (``StoreError``): its sweep would remove files
    outside the store, which none of its runs may name."""
    out = []
    folder = layout.StorePaths(store_root).objects
    if folder.is_symlink():
        raise StoreError(
            f"launch gc: {folder} is a link (to {os.readlink(folder)!r}): the gc removes files "
            "inside the store only; nothing was removed: make it a directory of the store, then run "
            "launch gc again"
        )
    for fan in _entries(folder):
        if len(fan.name) != 2 or not fan.is_dir(follow_symlinks=False):
            continue
        for entry in _entries(fan.path):
            if not (objects.is_sha256(entry.name) and entry.name.startswith(fan.name)):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                out.append(StoredObject(entry.name, Path(entry.path), st.st_size, st.st_mtime))
    return out


def collect(
    store_root: str | os.PathLike, *, dry_run: bool = False, echo: Callable[[str], None] | None = None
) -> Report:
    """Remove (or, ``dry_run``, list) the store's unreferenced objects; ``echo`` hears each one as
    ``removed <sha256> (<size>)`` / ``would remove …`` as it goes. Holds ``.gc.lock`` exclusively,
    waiting up to ``WAIT_S`` for another gc or the runs storing their snapshots.

    Raises:
        NotAStore: nothing was removed (exit 2): the store is missing, not a directory, or a run
            directory.
        StoreError: nothing was removed (exit 8): the store cannot be locked, or stayed busy for
            ``WAIT_S``; a directory of it cannot be listed; a link in it points at a run outside it;
            a run's snapshot cannot be read to tell what it references.
    """
    root = Path(store_root)
    check_store(root)
    try:
        with store_lock(root, shared=False, wait_s=WAIT_S):
            return _collect(root, dry_run, echo or (lambda _line: None))
    except StoreBusy as exc:
        raise StoreError(f"the store {str(root)!r} is busy ({exc}); try again") from None


def _collect(root: Path, dry_run: bool, echo: Callable[[str], None]) -> Report:
    started = time.time()
    marked, n_runs = mark(root)
    objects = stored_objects(root)
    candidates = unreferenced(objects, marked, started)
    if candidates:  # snapshots written while the objects were listed count too
        marked |= mark(root)[0]
        candidates = [o for o in candidates if o.sha256 not in marked]
    report = Report(dry_run=dry_run, runs=n_runs)
    for obj in candidates:
        try:
            st = os.lstat(obj.path)
        except FileNotFoundError:
            continue  # another process removed it
        if st.st_mtime >= started - CLOCK_SLACK_S:
            continue  # a run reused it since it was listed (snapshot.take refreshed it)
        if not dry_run:
            try:
                os.unlink(obj.path)
            except FileNotFoundError:
                continue
            except OSError as exc:
                report.failed.append((obj.sha256, exc.strerror or str(exc)))
                continue
        report.removed.append(obj)
        echo(f"{'would remove' if dry_run else 'removed'} {obj.sha256} ({human(obj.size)})")
    report.kept = len(objects) - len(report.removed)
    return report


def summary(report: Report) -> str:
    """The gc's last line: what it removed and freed, and what it kept."""
    verb, freed = ("would remove", "would free") if report.dry_run else ("removed", "freed")
    text = (
        f"launch gc: {verb} {len(report.removed)} object(s), {freed} {human(report.freed)}; "
        f"{report.kept} object(s) kept, the snapshots of {report.runs} run(s) read"
    )
    if report.failed:
        sha, why = report.failed[0]
        text += f"; {len(report.failed)} could not be removed (first: {sha}: {why})"
    return text
