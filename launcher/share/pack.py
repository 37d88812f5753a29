"""``launch pack RUN``: a sealed run, every object its snapshot names and, with ``--with-env``, the
wheels of its Python environment, written into one archive (its index, ``archive_index``, says what
it holds).

Compressed with zstd when the ``zstandard`` package is importable, else gzip; the output's
name may choose (``.tar.zst``, ``.tar.gz``, ``.tar``).
"""

from __future__ import annotations

import datetime as _dt
import io
import json
import os
import stat
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import ArchiveError, SnapshotError
from launcher.record import hashing, layout
from launcher.record.store import objects, runs, signing, snapshot
from launcher.share.archive_index import (
    NAME,
    RUN,
    compression_for,
    index,
    left_out_data,
    member_name,
)
from launcher.share.wheels import collect_wheels


@dataclass
class Packed:
    path: Path
    index: dict  # launch-archive.json: every member with its sha256 and size
    size: int
    seal: signing.Seal
    mode: int  # the archive file's: no wider than the most private file it holds, unless asked


def default_compression() -> str:
    """zstd when the ``zstandard`` package is importable, else gzip."""
    try:
        import zstandard  # noqa: F401
    except ImportError:
        return "gzip"
    return "zstd"


def pack(
    run_dir: str | Path,
    out: str | Path | None = None,
    *,
    with_wheels: bool = False,
    compression: str | None = None,
    trust: signing.Trust = signing.NO_TRUST,
    wheel_dir: Path | None = None,
    mode: int | None = None,
) -> Packed:
    """Write the archive of the sealed run ``run_dir`` to ``out`` (default ``<run name>.launch.tar.gz``
    or ``.tar.zst`` in the current directory), atomically. Refuses a run that is not sealed (naming
    why), whose seal or signature does not verify, or an object missing from the store.
    ``with_wheels`` (``launch pack --with-env``): the wheels of the run's Python environment too
    (``collect_wheels``; ``wheel_dir``: reuse wheels already there).
    ``mode``: the archive file's mode; by default the most private of what it holds (``private_mode``):
    a run of ``0600`` data packs into a ``0600`` archive.

    Raises:
        SealError: the run is not sealed, or its seal or an object does not verify (exit 4).
        SignatureError: its signature does not verify, or a required one is missing (exit 7).
        ArchiveError: the run cannot travel (its name, its wheels) or the archive cannot be written (exit 2).
    """
    run_dir = Path(os.path.abspath(runs.verify_seal(run_dir)))
    if not layout.is_run_id(run_dir.name):
        raise ArchiveError(
            f"run {run_dir.name} is not named as runs are (YYYYMMDD-HHMMSS-xxxxxx), and an archive's "
            "run must be: give it back its name to pack it"
        )
    seal = signing.check(run_dir, trust)
    compression = compression or (compression_for(str(out)) if out else None) or default_compression()
    suffix = {"zstd": ".tar.zst", "gzip": ".tar.gz", "plain": ".tar"}[compression]
    out = Path(out) if out else Path(f"{run_dir.name}.launch{suffix}")
    store = run_dir.parent
    snap = snapshot.read(run_dir) or {"files": {}, "left_out": {}, "launch_dir": "/"}
    paths = layout.RunPaths(run_dir)
    fp = runs.read_json(paths.fingerprint)
    kept: dict[str, Path] = {}
    for path, entry in sorted(snap["files"].items()):
        source = objects.object_path(store, entry["sha256"])
        if not source.is_file():
            raise SnapshotError(
                f"run {run_dir.name}: the object of {path} is missing from the store "
                f"({source}): the run cannot travel without it"
            )
        kept[entry["sha256"]] = source
    # every file the seal lists (a link inside the run is packed as the file it names: an archive has no links)
    run_files = {
        name: {"sha256": hashing.file_sha256(run_dir / name), "size": (run_dir / name).stat().st_size}
        for name in runs.read_json(paths.manifest)["files"]
    }
    run_files[layout.MANIFEST] = _entry(paths.manifest)
    if paths.signature.is_file():
        run_files[layout.SIGNATURE] = _entry(paths.signature)
    try:
        data, wheels = _write_archive(run_dir, out, kept, run_files, fp, snap, with_wheels, compression, wheel_dir)
        chosen = private_mode([*(run_dir / n for n in run_files), *kept.values()]) if mode is None else mode
        os.chmod(out, chosen)
    except OSError as exc:  # no such directory, a full disk, no permission
        raise ArchiveError(f"cannot write {out}: {exc.strerror or exc}") from None
    return Packed(out, data, out.stat().st_size, seal, chosen)


def _entry(path: Path) -> dict:
    return {"sha256": hashing.file_sha256(path), "size": path.stat().st_size}


def private_mode(paths: list[Path]) -> int:
    """The archive's mode: ``0600``, with the group's and others' read bits only where every file it
    holds has them (a run with one ``0600`` data file packs into a ``0600`` archive)."""
    readable = 0o044
    for path in paths:
        readable &= os.stat(path).st_mode
    return 0o600 | readable


def _write_archive(
    run_dir: Path,
    out: Path,
    objects: Mapping[str, Path],
    run_files: Mapping[str, dict],
    fp: Mapping,
    snap: Mapping,
    with_wheels: bool,
    compression: str,
    wheel_dir: Path | None,
) -> tuple[dict, list[Path]]:
    """The archive written to a temporary file beside ``out`` (mode 0600 while it is written), renamed to
    ``out`` once complete; its index and the wheels it holds."""
    with tempfile.TemporaryDirectory(prefix=".launch-pack-", dir=out.parent.resolve()) as tmp:
        wheels = {}
        if with_wheels:
            wheels = collect_wheels(fp, wheel_dir or Path(tmp) / "wheels")  # not layout's: scratch
        for digest, source in objects.items():  # the store's copy is checked: a damaged one never travels
            if hashing.file_sha256(source) != digest:
                raise SnapshotError(f"run {run_dir.name}: object {source} does not match its name")
        from launcher.version import __version__

        data = index(
            run_dir.name,
            run_files,
            {d: p.stat().st_size for d, p in objects.items()},
            left_out_data(fp, snap),
            {w.name: {**info, "size": w.stat().st_size} for w, info in wheels.items()},
            layout.RunPaths(run_dir).signature.is_file(),
            __version__,
            _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        )
        partial = Path(tmp) / "archive.part"
        with _writer(partial, compression) as tar:
            _add_bytes(tar, NAME, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())
            _add_run(tar, run_dir, f"{RUN}/{run_dir.name}", run_files)
            for digest, source in sorted(objects.items()):
                _add_file(tar, source, member_name(layout.OBJECTS, digest))
            for wheel in sorted(wheels, key=lambda w: w.name):
                _add_file(tar, wheel, member_name(layout.WHEELS, wheel.name))
        os.replace(partial, out)
    return data, list(wheels)


def _info(name: str, size: int, mode: int, kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.type, info.mtime = size, mode, kind, 0
    info.uname = info.gname = ""
    return info


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    tar.addfile(_info(name, len(data), 0o644), io.BytesIO(data))


def _add_file(tar: tarfile.TarFile, path: Path, name: str) -> None:
    # a member's mode keeps the file's read and execute bits and gains the owner's write bit: the
    # unpacked copy is made read-only again once checked (a sealed run, an object)
    mode = (stat.S_IMODE(os.stat(path).st_mode) & 0o555) | 0o200
    with open(path, "rb") as f:
        tar.addfile(_info(name, os.fstat(f.fileno()).st_size, mode), f)


def _add_run(tar: tarfile.TarFile, top: Path, name: str, files: Mapping[str, dict]) -> None:
    """The run directory: its directories (an empty ``outputs/`` too; not through links), then each of ``files``."""
    tar.addfile(_info(name, 0, 0o755, tarfile.DIRTYPE))
    for current, dirs, _ in os.walk(top):
        dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(current, d)))
        rel = Path(current).relative_to(top).as_posix()
        for d in dirs:
            tar.addfile(_info(f"{name}/{d}" if rel == "." else f"{name}/{rel}/{d}", 0, 0o755, tarfile.DIRTYPE))
    for rel in sorted(files):
        _add_file(tar, top / rel, f"{name}/{rel}")


@contextmanager
def _writer(path: Path, compression: str) -> Iterator[tarfile.TarFile]:
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as raw:
        if compression == "zstd":
            import zstandard

            with zstandard.ZstdCompressor(level=6).stream_writer(raw, closefd=False) as z:
                with tarfile.open(fileobj=z, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                    yield tar
        elif compression == "gzip":
            with tarfile.open(fileobj=raw, mode="w:gz", compresslevel=6, format=tarfile.PAX_FORMAT) as tar:
                yield tar
        else:
            with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
                yield tar
        raw.flush()
        os.fsync(raw.fileno())
