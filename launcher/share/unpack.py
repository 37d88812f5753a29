"""Reading an archive, which is reading input from anyone (``launch unpack``, ``launch replay FILE``).

Every member is checked before it is written (its name, its kind: files and directories only,
and links inside the run that stay there), and it is extracted with ``tarfile``'s ``data``
filter into a temporary directory inside the destination store; then the manifest is checked
against the members, each object against its name, each wheel against its hash, the run's
seal and signature; only then are objects, wheels and the run moved into place. A bad archive
is an ``ArchiveError`` (exit 2), and nothing lands outside the destination.
"""

from __future__ import annotations

import json
import os
import tarfile
import tempfile
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from launcher.errors import ArchiveError, RunNotFound
from launcher.record import index, layout, runs, signing, snapshot
from launcher.share.manifest import (
    MAX_MANIFEST,
    NAME,
    OBJECTS,
    RUN,
    WHEELS,
    check_manifest,
    compression_of,
    expected_members,
    member_name,
    member_problem,
    missing_and_extra,
    sha256_file,
)


@contextmanager
def _reader(path: Path) -> Iterator[tarfile.TarFile]:
    """The archive as a tar read in one pass (plain, gzip or zstd)."""
    try:
        raw = open(path, "rb")
    except OSError as exc:
        raise ArchiveError(f"{path}: cannot be read ({exc.strerror})") from None
    with raw:
        kind = compression_of(raw.read(4))
        raw.seek(0)
        try:
            if kind == "zstd":
                try:
                    import zstandard
                except ImportError:
                    raise ArchiveError(f"{path} is compressed with zstd, which needs the zstandard package here "
                                       "(pip install zstandard)") from None  # fmt: skip
                stream = zstandard.ZstdDecompressor().stream_reader(raw)
                with tarfile.open(fileobj=stream, mode="r|") as tar:
                    yield tar
            else:
                with tarfile.open(fileobj=raw, mode="r|gz" if kind == "gzip" else "r|") as tar:
                    yield tar
        except ArchiveError:
            raise
        except (tarfile.TarError, EOFError, zlib.error, OSError, ValueError) as exc:
            raise ArchiveError(f"{path} is truncated or corrupted ({type(exc).__name__}: "
                               f"{' '.join(str(exc).split()) or 'unexpected end'}): nothing was imported") from None


def _kind(member: tarfile.TarInfo) -> str:
    if member.isreg():
        return "file"
    if member.isdir():
        return "dir"
    if member.issym():
        return "symlink"
    if member.islnk():
        return "hard link"
    if member.isdev():
        return "device"
    if member.isfifo():
        return "fifo"
    return "special file"


def _first_manifest(tar: tarfile.TarFile, path: Path) -> dict:
    first = tar.next()
    if first is None or first.name != NAME or not first.isreg():
        raise ArchiveError(f"{path} is not a launch archive (its first member is "
                           f"{first.name if first else 'nothing'!r}, not {NAME})")  # fmt: skip
    if first.size > MAX_MANIFEST:
        raise ArchiveError(f"{path}: {NAME} is {first.size} bytes, too large to be a manifest", NAME)
    try:
        data = json.loads(tar.extractfile(first).read())  # type: ignore[union-attr]
    except ValueError as exc:
        raise ArchiveError(f"{path}: {NAME} is not JSON ({exc})", NAME) from None
    return check_manifest(data)


def read_manifest(path: str | Path) -> dict:
    """The manifest of the archive at ``path``, checked (``check_manifest``); only its first member is read."""
    with _reader(Path(path)) as tar:
        return _first_manifest(tar, Path(path))


@dataclass
class Imported:
    """An archive imported into a store."""

    run_dir: Path
    manifest: dict
    seal: signing.Seal
    already: bool  # the store held this very run already
    wheels: list[Path] = field(default_factory=list)


def unpack(path: str | Path, store_root: str | Path, trust: signing.Trust = signing.NO_TRUST) -> Imported:
    """Import the archive at ``path`` into the store ``store_root`` (made if missing), without running it.

    Every member is checked before it is written and extracted (``data`` filter) into a temporary
    directory of the store; then the manifest against the members, the objects against their names,
    the wheels against their hashes, the seal and the signature (``signing.check``, with ``trust``),
    and only then are the objects, the wheels (``<store>/wheels``) and the run moved into place. The
    same run imported twice is found, not copied again; another run of the same name is refused."""
    path, store = Path(path), Path(os.path.abspath(store_root))
    try:
        store.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=store))
    except OSError as exc:
        raise ArchiveError(f"store {store} cannot be written ({exc.strerror})") from None
    try:
        data = _extract(path, tmp)
        name = data["run"]
        run_tmp = tmp / RUN / name
        try:
            runs.verify_seal(run_tmp)
        except (RunNotFound, snapshot.SealError) as exc:
            raise ArchiveError(f"{path}: the run it holds is not sealed as it says ({exc})", name) from None
        snap = snapshot.read(run_tmp)
        for file, entry in sorted((snap or {}).get("files", {}).items()):
            digest = entry["sha256"]
            if digest not in data["objects"] and not snapshot.object_path(store, digest).is_file():
                raise ArchiveError(f"{path}: run {name}'s snapshot names {file} (object {digest[:12]}), which the "
                                   "archive lacks", file)  # fmt: skip
        seal = signing.check(run_tmp, trust)
        target = store / name
        already = target.exists()
        if already and (not (target / layout.MANIFEST).is_file() or
                        (target / layout.MANIFEST).read_bytes() != (run_tmp / layout.MANIFEST).read_bytes()):
            raise ArchiveError(f"{store} already holds another run named {name}: unpack into another store "
                               "(--store DIR)", name)  # fmt: skip
        for digest in sorted(data["objects"]):
            if not snapshot.put(store, str(tmp / member_name(OBJECTS, digest)), digest):
                raise ArchiveError(f"{path}: object {digest[:12]} could not be stored in {store}", digest)
        wheels = _place_wheels(tmp, store, data)
        if not already:
            os.rename(run_tmp, target)
            runs.make_read_only(target)
            row = index.row_from_dir(target)
            if row is not None:
                index.record(store, row)
        return Imported(target, data, seal, already, wheels)
    finally:
        snapshot.remove(tmp)


def _extract(path: Path, tmp: Path) -> dict:
    """Extract the archive into ``tmp``, each member checked first; returns the checked manifest."""
    seen: dict[str, str] = {}
    with _reader(path) as tar:
        data = _first_manifest(tar, path)
        expected = expected_members(data)
        manifest_member = tar.members[0]
        for member in tar:
            if member is manifest_member:  # iterating starts again from the first member, read already
                continue
            kind = _kind(member)
            name = member.name.rstrip("/") if kind == "dir" else member.name
            problem = member_problem(member.name, kind, member.linkname, data["run"], expected)
            if problem is not None:
                raise ArchiveError(f"{path}: member {member.name!r} {problem}: refused, nothing was imported",
                                   member.name)  # fmt: skip
            if name in seen:
                raise ArchiveError(f"{path}: member {name!r} appears twice: refused, nothing was imported", name)
            try:
                tarfile.data_filter(member, str(tmp))
                tar.extract(member, tmp, set_attrs=kind != "dir", filter="data")
            except tarfile.FilterError as exc:
                raise ArchiveError(f"{path}: member {member.name!r} refused by tarfile's data filter ({exc}): "
                                   "nothing was imported", member.name) from None  # fmt: skip
            if kind == "file":
                target = tmp / name
                if sha256_file(target) != expected[name]:
                    what = "its content does not match its name" if name.startswith(OBJECTS + "/") else \
                        "its content is not what the manifest lists"
                    raise ArchiveError(f"{path}: member {name!r}: {what}: refused, nothing was imported", name)
            seen[name] = kind
    missing, _ = missing_and_extra(expected, [n for n, k in seen.items() if k == "file"])
    if missing:
        raise ArchiveError(f"{path}: the manifest names {missing[0]}, which the archive lacks"
                           f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}: truncated or "
                           "incomplete, nothing was imported", missing[0])  # fmt: skip
    return data


def _place_wheels(tmp: Path, store: Path, data: Mapping) -> list[Path]:
    """Move the archive's wheels into ``<store>/wheels`` (a wheel already there must be the same file)."""
    if not data["wheels"]:
        return []
    directory = store / WHEELS
    directory.mkdir(exist_ok=True)
    placed = []
    for wheel, entry in sorted(data["wheels"].items()):
        target = directory / wheel
        if target.exists():
            if sha256_file(target) != entry["sha256"]:
                raise ArchiveError(f"{directory} holds another {wheel} than the archive's", wheel)
        else:
            os.replace(tmp / member_name(WHEELS, wheel), target)
        placed.append(target)
    return placed


def is_archive(path: str | Path) -> bool:
    """Is ``path`` a file (not a run directory) that ``launch replay|unpack|verify`` read as an archive?"""
    return Path(path).is_file()
