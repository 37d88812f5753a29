"""Reading an archive, which is reading input from anyone (``launch unpack``, ``launch verify FILE``,
``launch replay FILE``).

Nothing of ``tarfile`` is trusted. The archive is read once, through ``tarstream`` (bounded
headers, no links), and every member is checked against the index before a byte of it is
written: its name, its kind (files and directories only), its declared size. Each file is then
created by this process, relative to directory descriptors it opened itself (``_Tree``:
``O_NOFOLLOW``, ``O_EXCL``), in a private temporary directory inside the destination store, and
hashed as it is written. Then every JSON file of the run is parsed (bounded), the run's seal and
signature are checked, every object its snapshot names is found, and every wheel must be one the
run's sealed record names (``archive_index.wheel_refusal``). Only then, holding the store's
``.gc.lock`` shared (so a ``launch gc`` cannot remove what the import reuses), is each object
hashed again and moved into place, each wheel hashed again and moved into the run's own wheel
folder (``<store>/wheels/<run id>/``), and the run renamed into place, read-only. A bad archive is
an ``ArchiveError`` (exit 2; 3 for a signature) and nothing lands outside the temporary directory,
which is removed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from launcher.errors import ArchiveError, RunNotFound, SealError, StoreBusy
from launcher.record import hashing, layout
from launcher.record.store import gc, index, objects, runs, signing, snapshot
from launcher.share.archive_index import (
    MAX_INDEX,
    NAME,
    RUN,
    Limits,
    check_index,
    compression_of,
    directories,
    expected_members,
    member_name,
    member_problem,
    missing_and_extra,
    wheel_identity,
    wheel_parts,
    wheel_refusal,
)
from launcher.share.tarstream import Reader

LOCK_WAIT_S = 600.0  # how long an import waits for a launch gc to end (as a run storing its snapshot does)
MAX_JSON = 64 << 20  # bytes of one JSON file of the run parsed before the import
MAX_WHEEL_METADATA = 16 << 20  # bytes of a wheel's RECORD or METADATA


@contextmanager
def _stream(path: Path) -> Iterator[BinaryIO]:
    """The archive's tar stream, decompressed as it is read (plain, gzip or zstd)."""
    try:
        raw = open(path, "rb")
    except OSError as exc:
        raise ArchiveError(f"{path}: cannot be read ({exc.strerror})") from None
    with raw:
        if not stat.S_ISREG(os.fstat(raw.fileno()).st_mode):
            raise ArchiveError(f"{path} is not a file")
        kind = compression_of(raw.read(4))
        raw.seek(0)
        if kind == "zstd":
            try:
                import zstandard
            except ImportError:
                raise ArchiveError(
                    f"{path} is compressed with zstd, which needs the zstandard package here (pip install zstandard)"
                ) from None
            with zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True) as stream:
                yield stream
        elif kind == "gzip":
            import gzip

            with gzip.GzipFile(fileobj=raw, mode="rb") as stream:
                yield stream  # type: ignore[misc]
        else:
            yield raw


@contextmanager
def _reading(path: Path) -> Iterator[Reader]:
    """A ``tarstream.Reader`` of the archive; every fault of the stream is one ``ArchiveError``."""
    try:
        with _stream(path) as stream:
            yield Reader(stream)
    except ArchiveError as exc:
        if exc.member is not None or str(exc).startswith(str(path)):
            raise
        raise ArchiveError(f"{path} is truncated or corrupted ({exc}): nothing was imported") from None
    except (EOFError, zlib.error, OSError, ValueError, MemoryError, *_zstd_errors()) as exc:
        raise ArchiveError(
            f"{path} is truncated or corrupted ({type(exc).__name__}: "
            f"{' '.join(str(exc).split()) or 'unexpected end'}): nothing was imported"
        ) from None


def _zstd_errors() -> tuple[type[BaseException], ...]:
    try:
        import zstandard
    except ImportError:
        return ()
    return (zstandard.ZstdError,)


def _first_index(tar: Reader, path: Path, limits: Limits) -> dict:
    first = tar.next()
    if first is None or first.name != NAME or first.kind != "file":
        raise ArchiveError(
            f"{path} is not a launch archive (its first member is {first.name if first else 'nothing'!r}, not {NAME})"
        )
    if first.size > MAX_INDEX:
        raise ArchiveError(f"{path}: {NAME} is {first.size} bytes, too large to be an archive's index", NAME)
    data = parse_json(b"".join(tar.chunks()), f"{path}: {NAME}")
    try:
        return check_index(data, limits)
    except ArchiveError as exc:
        raise ArchiveError(f"{path}: {exc}", exc.member or NAME) from None


def parse_json(raw: bytes, where: str) -> object:
    """``raw`` parsed as JSON; ``ArchiveError`` for anything else, nesting too deep for the parser included."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ArchiveError(f"{where} is not JSON that can be read ({why})", where) from None


def read_index(path: str | Path) -> dict:
    """The index of the archive at ``path``, checked (``check_index``); only its first member is read."""
    with _reading(Path(path)) as tar:
        return _first_index(tar, Path(path), Limits(None, None))


@dataclass
class Imported:
    """An archive imported into a store."""

    run_dir: Path
    index: dict  # the archive's launch-archive.json, checked
    seal: signing.Seal
    already: bool  # the store held this very run already
    wheels: list[Path] = field(default_factory=list)


def unpack(
    path: str | Path, store_root: str | Path, trust: signing.Trust = signing.NO_TRUST, limits: Limits | None = None
) -> Imported:
    """Import the archive at ``path`` into the store ``store_root`` (made if missing), without running it.

    Everything is checked before anything lands in the store (the module's docstring): members
    against the archive's index and their hashes, the run's JSON files, seal and signature (with
    ``trust``), its snapshot's objects, its wheels against its sealed record. ``limits``: the
    store's caps (``store.snapshot_max_*``); the disk's free space is checked too. The same run
    imported twice is found, not copied again; another run of the same name is refused.

    Raises:
        ArchiveError: the archive is unreadable, malformed, or holds what it must not (exit 2).
        SignatureError: the seal's signature does not verify, or a required one is missing (exit 7).
    """
    path, store = Path(path), Path(os.path.abspath(store_root))
    if store.exists() and not store.is_dir():
        raise ArchiveError(f"store {store} is not a directory")
    try:
        store.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=store))
        free = shutil.disk_usage(store).free
    except OSError as exc:
        raise ArchiveError(f"store {store} cannot be written ({exc.strerror})") from None
    limits = limits or Limits()
    try:
        data = _extract(path, tmp, Limits(limits.max_objects, limits.max_object_bytes, free))
        name = data["run"]
        run_tmp = tmp / RUN / name
        _parse_run_json(run_tmp, path)
        try:
            runs.verify_seal(run_tmp)
            snap = snapshot.read(run_tmp)
        except (RunNotFound, SealError) as exc:
            raise ArchiveError(f"{path}: the run it holds is not sealed as it says ({exc})", name) from None
        seal = signing.check(run_tmp, trust)
        fp_path = layout.RunPaths(run_tmp).fingerprint
        fp = runs.read_json(fp_path) if fp_path.is_file() else {}
        _check_wheels(tmp, data, fp, path)
        target = store / name
        already = target.exists()
        if already and (
            not layout.RunPaths(target).manifest.is_file()
            or layout.RunPaths(target).manifest.read_bytes() != layout.RunPaths(run_tmp).manifest.read_bytes()
        ):
            raise ArchiveError(
                f"{store} already holds another run named {name}: unpack into another store (--store DIR)", name
            )
        try:
            with gc.store_lock(store, shared=True, wait_s=LOCK_WAIT_S):
                _store_objects(tmp, store, data, snap, path)
                wheels = _place_wheels(tmp, store, data)
                if not already:
                    os.rename(run_tmp, target)
                    runs.make_read_only(target)
        except StoreBusy as exc:
            raise ArchiveError(f"store {store} is busy ({exc}): nothing was imported; try again") from None
        if not already:
            row = index.row_from_dir(target)
            if row is not None:
                index.record(store, row)
        return Imported(target, data, seal, already, wheels)
    except OSError as exc:  # a full disk, a store that cannot be written
        raise ArchiveError(
            f"{path} could not be imported into {store} ({exc.strerror or exc}): nothing was imported"
        ) from None
    finally:
        snapshot.remove(tmp)


# ---------------------------------------------------------------- extracting
class _Tree:
    """Directories and files made below one directory by this process alone, each one through a
    descriptor of the directory above it (``O_NOFOLLOW``, ``O_EXCL``): nothing already there, and
    no link, is ever followed or written through."""

    def __init__(self, top: Path) -> None:
        self._fds = {"": os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)}

    def directory(self, rel: str) -> int:
        """The descriptor of directory ``rel`` (made, with its parents, if this tree has not yet)."""
        if rel in self._fds:
            return self._fds[rel]
        parent, _, base = rel.rpartition("/")
        parent_fd = self.directory(parent)
        try:
            os.mkdir(base, 0o700, dir_fd=parent_fd)
        except FileExistsError:
            pass  # made by this tree for another member (an entry this tree did not make cannot exist here)
        self._fds[rel] = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
        return self._fds[rel]

    def create(self, rel: str, mode: int) -> int:
        """A new file ``rel``, open for writing; ``FileExistsError`` when it is there already."""
        parent, _, base = rel.rpartition("/")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        return os.open(base, flags, mode, dir_fd=self.directory(parent))

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def _extract(path: Path, tmp: Path, limits: Limits) -> dict:
    """Extract the archive into ``tmp``, each member checked before it is written and hashed as it
    is; returns the checked index."""
    seen: set[str] = set()
    tree = _Tree(tmp)
    try:
        with _reading(path) as tar:
            data = _first_index(tar, path, limits)
            expected = expected_members(data)
            needed = directories(expected)
            while (member := tar.next()) is not None:
                name = member.name.rstrip("/") if member.kind == "directory" else member.name
                problem = member_problem(member.name, member.kind, data["run"], expected, needed)
                if problem is None and name in seen:
                    problem = "appears twice"
                if problem is None and member.kind == "file" and member.size != expected[name][1]:
                    problem = f"declares {member.size} bytes, and the index {expected[name][1]}"
                if problem is not None:
                    raise ArchiveError(
                        f"{path}: member {member.name!r} {problem}: refused, nothing was imported", member.name
                    )
                seen.add(name)
                if member.kind == "directory":
                    tree.directory(name)
                    continue
                _write_member(tree, tar, name, member.mode, expected[name][0], path)
    finally:
        tree.close()
    missing, _ = missing_and_extra(expected, seen)
    if missing:
        raise ArchiveError(
            f"{path}: the index names {missing[0]}, which the archive lacks"
            f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}: truncated or "
            "incomplete, nothing was imported",
            missing[0],
        )
    return data


def _write_member(tree: _Tree, tar: Reader, name: str, mode: int, digest: str, path: Path) -> None:
    """Write the current member's content to the new file ``name``, hashing it; refused unless it is ``digest``."""
    fd = tree.create(name, 0o600)
    h = hashlib.sha256()
    with os.fdopen(fd, "wb") as out:
        for chunk in tar.chunks():
            h.update(chunk)
            out.write(chunk)
        os.fchmod(out.fileno(), (mode & 0o555) | 0o600)
    if h.hexdigest() != digest:
        what = (
            "its content does not match its name"
            if name.startswith(layout.OBJECTS + "/")
            else "its content is not what the index lists"
        )
        raise ArchiveError(f"{path}: member {name!r}: {what}: refused, nothing was imported", name)


# ---------------------------------------------------------------- checking what was extracted
def _parse_run_json(run: Path, path: Path) -> None:
    """Parse every JSON (and JSON-lines) file of the extracted run, so that none a reader opens later
    can fail it (a nesting too deep for the parser, a file that is not JSON where JSON belongs)."""
    for file in sorted(run.rglob("*")):
        if file.suffix not in (".json", ".jsonl") or not file.is_file():
            continue
        rel = file.relative_to(run).as_posix()
        if file.stat().st_size > MAX_JSON:
            raise ArchiveError(f"{path}: run file {rel} is {file.stat().st_size} bytes, too large to read", rel)
        raw = file.read_bytes()
        for line in raw.splitlines() if file.suffix == ".jsonl" else [raw]:
            if line.strip():
                parse_json(line, f"{path}: run file {rel}")


def _check_wheels(tmp: Path, data: Mapping, fp: Mapping, path: Path) -> None:
    """Each wheel must be one the run's sealed record names (``wheel_refusal``), as its own
    METADATA and RECORD say: the index's word for it is not taken."""
    for wheel, entry in sorted(data["wheels"].items()):
        name, version = wheel_parts(wheel)
        if (entry.get("name"), entry.get("version")) != (name, version):
            raise ArchiveError(
                f"{path}: the index says wheel {wheel} is {entry.get('name')} "
                f"{entry.get('version')}: refused, nothing was imported",
                wheel,
            )
        identity, modules = _wheel_contents(tmp / member_name(layout.WHEELS, wheel), name, version, path)
        why = wheel_refusal(name, version, identity, fp, modules)
        if why is not None:
            raise ArchiveError(
                f"{path}: wheel {wheel} is not one the run's sealed record names ({why}): refused, "
                "nothing was imported",
                wheel,
            )


def _wheel_contents(wheel: Path, name: str, version: str, path: Path) -> tuple[str | None, dict[str, str]]:
    """(its installed files' identity from its RECORD, the sha256 of each ``launcher`` module it holds),
    once its METADATA is found to name ``name`` ``version``."""
    from email.parser import HeaderParser

    from launcher.share.archive_index import normalize

    def small(z: zipfile.ZipFile, member: str) -> bytes:
        info = z.getinfo(member)
        if info.file_size > MAX_WHEEL_METADATA:
            raise ArchiveError(f"{path}: wheel {wheel.name}'s {member} is {info.file_size} bytes, too large", member)
        return z.read(member)

    try:
        with zipfile.ZipFile(wheel) as z:
            names = z.namelist()
            info = [n for n in names if n.count("/") == 1 and n.split("/")[0].endswith(".dist-info")]
            meta = next(n for n in info if n.endswith("/METADATA"))
            record = next(n for n in info if n.endswith("/RECORD"))
            headers = HeaderParser().parsestr(small(z, meta).decode("utf-8"))
            if (normalize(headers.get("Name") or ""), headers.get("Version")) != (name, version):
                raise ArchiveError(
                    f"{path}: wheel {wheel.name}'s METADATA names {headers.get('Name')} "
                    f"{headers.get('Version')}: refused, nothing was imported",
                    wheel.name,
                )
            identity = wheel_identity(small(z, record).decode("utf-8"))
            modules = {}
            if name == "tf-repro-launcher":
                for n in names:
                    if n.startswith("launcher/") and n.endswith(".py"):
                        modules[hashing.module_name(n.removeprefix("launcher/"))] = hashlib.sha256(
                            small(z, n)
                        ).hexdigest()
    except (OSError, StopIteration, KeyError, zipfile.BadZipFile, UnicodeDecodeError, ValueError) as exc:
        raise ArchiveError(
            f"{path}: wheel {wheel.name} is not a readable wheel ({type(exc).__name__}): refused, nothing was imported",
            wheel.name,
        ) from None
    return identity, modules


# ---------------------------------------------------------------- into the store
def _store_objects(tmp: Path, store: Path, data: Mapping, snap: Mapping | None, path: Path) -> None:
    """Move each of the archive's objects into the store, hashed again as it goes (``objects.put``),
    and check and refresh each the snapshot names that the store held already."""
    for digest in sorted(data["objects"]):
        if not objects.put(store, str(tmp / member_name(layout.OBJECTS, digest)), digest, move=True):
            raise ArchiveError(f"{path}: object {digest[:12]} could not be stored in {store}", digest)
        objects.refresh(store, digest)  # one the store held already is now in use again
    for file, entry in sorted(((snap or {}).get("files") or {}).items()):
        digest = entry["sha256"]
        if digest in data["objects"]:
            continue
        if not objects.holds(store, digest):
            raise ArchiveError(
                f"{path}: run {data['run']}'s snapshot names {file} (object {digest[:12]}), "
                "which neither the archive nor the store holds intact: nothing was imported",
                file,
            )
        objects.refresh(store, digest)


def _place_wheels(tmp: Path, store: Path, data: Mapping) -> list[Path]:
    """Move the archive's wheels into the run's own folder, ``<store>/wheels/<run id>/``, each hashed
    again as it goes (a wheel already there must be the same file)."""
    if not data["wheels"]:
        return []
    directory = run_wheels(store, data["run"])
    directory.mkdir(parents=True, exist_ok=True)
    placed = []
    for wheel, entry in sorted(data["wheels"].items()):
        target, source = directory / wheel, tmp / member_name(layout.WHEELS, wheel)
        if target.is_file() and not target.is_symlink():
            if hashing.file_sha256(target) != entry["sha256"]:
                raise ArchiveError(f"{directory} holds another {wheel} than the archive's", wheel)
        elif os.path.lexists(target):
            raise ArchiveError(f"{target} is there and is not a wheel: nothing was imported", wheel)
        else:
            if hashing.file_sha256(source) != entry["sha256"]:
                raise ArchiveError(f"wheel {wheel} changed while it was imported: nothing was imported", wheel)
            os.rename(source, target)
            os.chmod(target, 0o444)
        placed.append(target)
    return placed


def run_wheels(store: str | Path, run_id: str) -> Path:
    """The folder of the wheels an archive brought for run ``run_id`` (its replay ``--rebuild`` uses them)."""
    if not layout.is_run_id(run_id):
        raise ArchiveError(f"{run_id!r} is not a run's id: it has no wheel folder")
    return layout.StorePaths(store).run_wheels(run_id)


@dataclass(frozen=True)
class RunWheels:
    """The wheels an archive brought for one run, each checked against the run's sealed record."""

    folder: Path
    hashes: dict[str, str]  # file name -> sha256


def checked_wheels(store: str | Path, run_id: str, fp: Mapping) -> RunWheels | None:
    """The wheels in run ``run_id``'s wheel folder of ``store``, each hashed and checked again against the
    run's sealed record ``fp`` (``wheel_refusal``), as at import; None when there is no such folder.
    ``ArchiveError`` names a file there that is not such a wheel: nothing of the folder is used."""
    if not layout.is_run_id(run_id):
        return None
    folder = run_wheels(store, run_id)
    if not folder.is_dir() or folder.is_symlink():
        return None
    hashes = {}
    for wheel in sorted(folder.iterdir()):
        if not wheel.name.endswith(".whl") or wheel.is_symlink() or not wheel.is_file():
            raise ArchiveError(f"{folder} holds {wheel.name}, which is not a wheel an archive brought: remove it")
        name, version = wheel_parts(wheel.name)
        identity, modules = _wheel_contents(wheel, name, version, folder)
        why = wheel_refusal(name, version, identity, fp, modules)
        if why is not None:
            raise ArchiveError(f"{wheel} is not one run {run_id}'s sealed record names ({why}): remove it")
        hashes[wheel.name] = hashing.file_sha256(wheel)
    return RunWheels(folder, hashes)


def is_archive(path: str | Path) -> bool:
    """Is ``path`` a file (not a run directory) that ``launch replay|unpack|verify`` read as an archive?"""
    return Path(path).is_file()
