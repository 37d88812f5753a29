"""The store's objects: each file a run keeps, stored once per distinct content, named by its sha256.

``<store>/objects/ab/abcdef…``, read-only, with the read bits of the file it was taken from (a
private file's object is private: ``object_mode``). An object is trusted only when it is intact
(``holds``): a regular file, not a link, holding exactly the content its name says; anything
else under that name is replaced when the content is stored again (``put``). A name is a path
only once it is 64 lowercase hex digits (``object_path``), so a recorded string never names
another file. Runs name their objects in their ``snapshot.json`` (``launcher.record.store.snapshot``);
``launch gc`` removes the ones no run names (``launcher.record.store.gc``).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tempfile
from pathlib import Path

from launcher.errors import UnsafeRun
from launcher.record import layout

_SHA256 = re.compile(r"[0-9a-f]{64}")


def is_sha256(value: object) -> bool:
    """Is ``value`` a sha256 as the store names objects: exactly 64 lowercase hex digits?"""
    return isinstance(value, str) and _SHA256.fullmatch(value) is not None


def object_path(store_root: Path, sha256: str) -> Path:
    """Where object ``sha256`` is kept: ``<store>/objects/ab/abcdef…``. Anything but 64 lowercase
    hex digits is refused (``UnsafeRun``): a recorded string never becomes a path unchecked."""
    if not is_sha256(sha256):
        raise UnsafeRun(f"{sha256!r} is not a sha256 (64 lowercase hex digits): not an object name", str(sha256))
    return layout.StorePaths(store_root).objects / sha256[:2] / sha256


def object_mode(source_mode: int) -> int:
    """The mode of an object taken from a file of mode ``source_mode``: the file's read (and
    execute) bits, never a write bit, and always readable by its owner (the store reads it
    back). A ``0600`` data file's object is ``0400``: private data stays private."""
    return (stat.S_IMODE(source_mode) & 0o555) | 0o400


def laid_out_mode(object_mode_: int) -> int:
    """The mode of a file laid out from an object: the object's, writable by its owner."""
    return (stat.S_IMODE(object_mode_) & 0o555) | 0o600


def _object_dir(store_root: Path, sha256: str) -> Path:
    """``objects/`` and its fan-out directory for ``sha256``, each made with the store's own mode
    (a private store's objects are not listed to others)."""
    store_root = Path(store_root)
    store_root.mkdir(parents=True, exist_ok=True)
    mode = stat.S_IMODE(os.stat(store_root).st_mode)
    directory = object_path(store_root, sha256).parent
    for d in (directory.parent, directory):
        try:
            d.mkdir(mode=mode)
        except FileExistsError:
            continue
        os.chmod(d, mode)  # mkdir's mode is narrowed by the umask
    return directory


def _digest_of(fd: int) -> str:
    h = hashlib.sha256()
    for block in iter(lambda: os.read(fd, 1 << 20), b""):
        h.update(block)
    return h.hexdigest()


def holds(store_root: Path, sha256: str) -> bool:
    """Does the store hold object ``sha256`` intact: a regular file (not a link) whose content is that?"""
    try:
        fd = os.open(object_path(store_root, sha256), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and _digest_of(fd) == sha256
    finally:
        os.close(fd)


def put(store_root: Path, path: str, sha256: str, move: bool = False) -> bool:
    """Keep the file at ``path`` as object ``sha256``; False when its content is not that
    (it changed since the job read it: what is there now is not what ran). The object
    gets ``object_mode`` of the file's mode. ``move``: rename ``path`` into place (a file of
    this process's own, on the store's filesystem: an archive's member) instead of copying it.

    An object already in the store is trusted only once it is found intact (``holds``): one that
    is not (a planted file, a link, a damaged copy) is replaced by this content."""
    target = object_path(store_root, sha256)
    if holds(store_root, sha256):
        return True
    directory = _object_dir(store_root, sha256)
    if move:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode) or _digest_of(fd) != sha256:
                return False
            os.fchmod(fd, object_mode(os.fstat(fd).st_mode))
        finally:
            os.close(fd)
        os.replace(path, target)
        return True
    h = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".obj.", suffix=".tmp")
    try:
        with open(path, "rb") as src, os.fdopen(fd, "wb") as dst:
            mode = object_mode(os.fstat(src.fileno()).st_mode)
            for block in iter(lambda: src.read(1 << 20), b""):
                h.update(block)
                dst.write(block)
            dst.flush()
            os.fsync(dst.fileno())
        if h.hexdigest() != sha256:
            os.unlink(tmp)
            return False
        os.chmod(tmp, mode)
        os.replace(tmp, target)
        return True
    except OSError:
        if os.path.exists(tmp):
            os.unlink(tmp)
        return False


def refresh(store_root: Path, sha256: str) -> bool:
    """Mark object ``sha256`` as just used (its mtime now), so a ``launch gc`` that started
    before this run wrote its ``snapshot.json`` keeps it (``launcher.record.store.gc``). False when
    it is gone (a gc removed it meanwhile); an object of another user's is left as it is."""
    try:
        os.utime(object_path(store_root, sha256))
    except FileNotFoundError:
        return False
    except OSError:
        pass
    return True
