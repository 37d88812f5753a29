"""A run that travels: one file holding a sealed run and everything its replay needs (``launch pack``).

A run's code and small data live in its store's ``objects/``, shared with the store's other
runs, so a run directory copied alone cannot be replayed. An **archive** is one tar
(compressed with zstd when the ``zstandard`` package is importable, else gzip; plain, gzip
and zstd are all read) whose members are, in this order:

```
launch-archive.json          the manifest: format, the run's name, every member with its sha256,
                             the data the snapshot left out (with its hash), the wheels
run/<name>/...               the sealed run directory (manifest.json, its signature if signed)
objects/ab/abcdef...         every object the run's snapshot.json names
wheels/*.whl                 with --with-env: the wheels of every distribution the job used and
                             of the launcher with what it needs, so `tar -x` then
                             `pip install --no-index --find-links wheels tf-repro-launcher` works
```

Reading one is reading input from anyone (``unpack``): every member is checked before it is
written (its name, its kind: files and directories only, and links inside the run that stay
there), and it is extracted with ``tarfile``'s ``data`` filter into a temporary directory
inside the destination store; then the manifest is checked against the members, each object
against its name, each wheel against its hash, the run's seal and signature; only then are
objects, wheels and the run moved into place. A bad archive is an ``ArchiveError`` (exit 2),
and nothing lands outside the destination.

Pure: the manifest (``manifest``, ``check_manifest``), member names and checks
(``member_name``, ``member_problem``, ``missing_and_extra``), what goes in (``wheel_plan``,
``requirement_closure``, ``wheel_identity``), the compression (``compression_of``). I/O:
``pack``, ``collect_wheels``, ``launcher_wheel``, ``unpack``, ``read_manifest``.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import io
import json
import os
import re
import shutil
import stat
import sys
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from launcher import proc
from launcher.errors import ArchiveError, RunNotFound
from launcher.record import distributions, hashing, index, layout, runs, signing, snapshot

NAME = "launch-archive.json"
FORMAT = "launch-archive"
VERSION = 1
RUN = "run"
OBJECTS = "objects"
WHEELS = "wheels"
LAUNCHER_DISTRIBUTION = "tf-repro-launcher"
MAX_MANIFEST = 16 << 20  # bytes: a manifest is small; a huge one is not ours
_GZIP, _ZSTD = b"\x1f\x8b", b"\x28\xb5\x2f\xfd"
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}")
_WHEEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+!-]{0,250}\.whl")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\\]")


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------- pure: the manifest and its members
def member_name(kind: str, *parts: str) -> str:
    """The member name of a run file (``run``, name, relative path), an object (``objects``, sha256)
    or a wheel (``wheels``, file name)."""
    if kind == OBJECTS:
        return f"{OBJECTS}/{parts[0][:2]}/{parts[0]}"
    return "/".join([kind, *parts])


def manifest(run_name: str, run_files: Mapping[str, str], objects: Mapping[str, int],
             left_out: Mapping[str, dict], wheels: Mapping[str, dict], signed: bool, launcher_version: str,
             created: str) -> dict:  # fmt: skip
    """The archive's manifest: ``run_files`` (path in the run -> sha256), ``objects`` (sha256 -> size),
    ``left_out`` (data the snapshot did not keep: path -> {sha256, why}), ``wheels`` (file name ->
    {sha256, name, version}), whether the seal is signed."""
    return {
        "format": FORMAT, "version": VERSION, "run": run_name, "created": created,
        "launcher_version": launcher_version, "signed": signed,
        "run_files": dict(sorted(run_files.items())), "objects": dict(sorted(objects.items())),
        "left_out": dict(sorted(left_out.items())), "wheels": dict(sorted(wheels.items())),
    }  # fmt: skip


def _relative_problem(path: object) -> str | None:
    if not isinstance(path, str) or not path:
        return "is not a path"
    if path.startswith("/") or _CONTROL.search(path):
        return "is absolute or holds a control character or a backslash"
    if any(part in ("", ".", "..") for part in path.split("/")):
        return "is not a normalised relative path (an empty, '.' or '..' component)"
    return None


def check_manifest(data: object) -> dict:
    """``data`` (a ``launch-archive.json``) checked whole before any of it names a member: its format
    and version, a run name that is one plain directory name, relative normalised run paths, object
    names of 64 hex digits, wheel file names; every digest 64 hex digits. ``ArchiveError`` names the first fault."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ArchiveError(f"{NAME} is not a launch archive's manifest")
    if data.get("version") != VERSION:
        raise ArchiveError(f"{NAME} is of version {data.get('version')!r}; this launcher reads version {VERSION}")
    name = data.get("run")
    if not isinstance(name, str) or not _RUN_NAME.fullmatch(name) or name in (".", ".."):
        raise ArchiveError(f"{NAME} names the run {name!r}, which is not a plain directory name", NAME)
    for key in ("run_files", "objects", "left_out", "wheels"):
        if not isinstance(data.get(key), dict):
            raise ArchiveError(f"{NAME} has no {key} table", NAME)
    for path, digest in data["run_files"].items():
        if (problem := _relative_problem(path)) is not None:
            raise ArchiveError(f"{NAME} names a run file {path!r} that {problem}", path)
        if not snapshot.is_sha256(digest):
            raise ArchiveError(f"{NAME} gives run file {path!r} the hash {digest!r}, not 64 hex digits", path)
    if layout.MANIFEST not in data["run_files"]:
        raise ArchiveError(f"{NAME} lists no {layout.MANIFEST}: the archive holds no sealed run", NAME)
    for digest in data["objects"]:
        if not snapshot.is_sha256(digest):
            raise ArchiveError(f"{NAME} names an object {digest!r}, not 64 lowercase hex digits", str(digest))
    for wheel, entry in data["wheels"].items():
        if not isinstance(wheel, str) or not _WHEEL.fullmatch(wheel):
            raise ArchiveError(f"{NAME} names a wheel {wheel!r}, not a wheel's file name", str(wheel))
        if not isinstance(entry, dict) or not snapshot.is_sha256(entry.get("sha256")):
            raise ArchiveError(f"{NAME} gives wheel {wheel} no sha256 of 64 hex digits", wheel)
    return data


def expected_members(data: Mapping) -> dict[str, str]:
    """Every file member the manifest names -> its sha256 (the manifest itself left out)."""
    out = {member_name(RUN, data["run"], path): digest for path, digest in data["run_files"].items()}
    out.update({member_name(OBJECTS, digest): digest for digest in data["objects"]})
    out.update({member_name(WHEELS, wheel): entry["sha256"] for wheel, entry in data["wheels"].items()})
    return out


def _directories(names: Iterable[str]) -> set[str]:
    out = set()
    for name in names:
        parts = name.split("/")[:-1]
        out.update("/".join(parts[: n + 1]) for n in range(len(parts)))
    return out


def member_problem(name: str, kind: str, linkname: str, run_name: str, expected: Mapping[str, str]) -> str | None:
    """Why a member of kind ``kind`` (file, dir, symlink, link, device...) cannot be extracted, or None.

    Files must be ones the manifest names; directories the ones above them; a symbolic link only
    inside the run, pointing inside the run; nothing else (hard links, devices, fifos) at all."""
    if (problem := _relative_problem(name.rstrip("/") if kind == "dir" else name)) is not None:
        return f"its name {problem}"
    name = name.rstrip("/")
    if kind == "file":
        return None if name in expected else "is not named by the archive's manifest"
    if kind == "dir":  # above a file the manifest names, or in the run (an empty outputs/)
        inside = name.startswith(f"{RUN}/{run_name}/")
        return None if inside or name in _directories(expected) else "is a directory the manifest's files do not need"
    if kind == "symlink":
        top = f"{RUN}/{run_name}"
        if not name.startswith(top + "/"):
            return f"is a link outside {top}/"
        target = os.path.normpath(os.path.join(os.path.dirname(name), linkname))
        if linkname.startswith("/") or not (target == top or target.startswith(top + "/")):
            return f"is a link pointing out of the run (to {linkname!r})"
        return None
    return f"is a {kind}, not a file or a directory"


def missing_and_extra(expected: Iterable[str], seen: Iterable[str]) -> tuple[list[str], list[str]]:
    """The files the manifest names that the archive lacks, and the files it holds that the manifest does not name."""
    expected, seen = set(expected), set(seen)
    return sorted(expected - seen), sorted(seen - expected)


def compression_of(head: bytes) -> str:
    """``zstd``, ``gzip`` or ``plain``, from a file's first bytes."""
    if head.startswith(_ZSTD):
        return "zstd"
    if head.startswith(_GZIP):
        return "gzip"
    return "plain"


def compression_for(filename: str) -> str | None:
    """The compression a file name asks for (``.tar.gz``/``.tgz``: gzip, ``.tar.zst``: zstd, ``.tar``:
    plain), or None when it says nothing."""
    name = filename.lower()
    if name.endswith((".gz", ".tgz")):
        return "gzip"
    if name.endswith((".zst", ".zstd", ".tzst")):
        return "zstd"
    return "plain" if name.endswith(".tar") else None


def wheel_identity(record_text: str) -> str | None:
    """The ``files_sha256`` a wheel's distribution has once installed, from the wheel's RECORD: the
    files of ``*.data/purelib`` and ``platlib`` land in site-packages; its scripts, headers and data
    land outside it, which the installed identity leaves out (``distributions.content_entries``)."""
    entries = []
    for path, digest in distributions.parse_record(record_text):
        match = re.match(r"[^/]+\.data/(purelib|platlib)/(.+)", path)
        if match:
            path = match.group(2)
        elif re.match(r"[^/]+\.data/", path):
            continue
        entries.append((path, digest))
    return distributions.files_sha256(entries)


def wheel_parts(filename: str) -> tuple[str, str]:
    """(normalized name, version) of a wheel's file name."""
    name, version = filename.split("-")[:2]
    return _normalize(name), version


def requirement_closure(root: str, requires: Mapping[str, Iterable[str]]) -> set[str]:
    """``root`` and every distribution it needs, transitively, for this platform: ``requires`` maps a
    normalized name to its ``Requires-Dist`` lines; a line only an extra or another platform needs
    (its marker false here) is left out."""
    from packaging.requirements import InvalidRequirement, Requirement

    out, todo = {root}, [root]
    while todo:
        for line in requires.get(todo.pop(), ()):
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            name = _normalize(req.name)
            if name not in out:
                out.add(name)
                todo.append(name)
    return out


def wheel_plan(fp: Mapping, needed_by_launcher: Iterable[str], here: Mapping[str, str] | None = None) -> dict[str, str]:
    """name -> version of each wheel ``--with-env`` packs (the launcher's own built apart): every
    distribution the job used (``software.distributions``) and every one the launcher needs to be
    installed, at the versions the run recorded (``software.packages``), or, for one the run did not
    record (installed since), at the version installed ``here`` (name -> version)."""
    software = fp.get("software") or {}
    recorded = {}
    for line in software.get("packages") or []:
        name, sep, version = str(line).partition("==")
        if sep:
            recorded[_normalize(name)] = version.strip()
    out = {}
    for name, identity in (software.get("distributions") or {}).items():
        if identity and _normalize(name) != LAUNCHER_DISTRIBUTION:
            out[_normalize(name)] = str(identity["version"])
    for name in needed_by_launcher:
        name = _normalize(name)
        if name == LAUNCHER_DISTRIBUTION or name in out:
            continue
        version = recorded.get(name) or (here or {}).get(name)
        if version is None:
            raise ArchiveError(f"the launcher needs {name}, which neither the run recorded nor is installed here: "
                               "its wheel cannot be packed")  # fmt: skip
        out[name] = version
    return dict(sorted(out.items()))


def left_out_data(fp: Mapping, snap: Mapping) -> dict[str, dict]:
    """The data the snapshot left out, each with the hash the run recorded and why it was left out."""
    launch_dir = str(snap.get("launch_dir") or "/")
    by_path = {}
    for name, digest in (fp.get("data") or {}).items():
        path = snapshot.data_path(name, launch_dir)
        if path is not None:
            by_path[path] = (name, digest)
    out = {}
    for path, why in (snap.get("left_out") or {}).items():
        name, digest = by_path.get(path, (path, None))
        out[path] = {"name": name, "sha256": digest, "why": why}
    return out


# ---------------------------------------------------------------- I/O: packing
@dataclass
class Packed:
    path: Path
    manifest: dict
    size: int
    seal: signing.Seal


def default_compression() -> str:
    """zstd when the ``zstandard`` package is importable, else gzip."""
    try:
        import zstandard  # noqa: F401
    except ImportError:
        return "gzip"
    return "zstd"


def pack(run_dir: str | Path, out: str | Path | None = None, *, with_env: bool = False,
         compression: str | None = None, trust: signing.Trust = signing.NO_TRUST, echo: bool = True,
         wheel_dir: Path | None = None) -> Packed:  # fmt: skip
    """Write the archive of the sealed run ``run_dir`` to ``out`` (default ``<run name>.launch.tar.gz``
    or ``.tar.zst`` in the current directory), atomically. Refuses a run that is not sealed (naming
    why), whose seal or signature does not verify, or an object missing from the store.
    ``with_env``: the wheels too (``collect_wheels``; ``wheel_dir``: reuse wheels already there)."""
    run_dir = Path(os.path.abspath(runs.verify_seal(run_dir)))
    seal = signing.check(run_dir, trust)
    compression = compression or (compression_for(str(out)) if out else None) or default_compression()
    suffix = {"zstd": ".tar.zst", "gzip": ".tar.gz", "plain": ".tar"}[compression]
    out = Path(out) if out else Path(f"{run_dir.name}.launch{suffix}")
    store = run_dir.parent
    snap = snapshot.read(run_dir) or {"files": {}, "left_out": {}, "launch_dir": "/"}
    fp = runs.read_json(run_dir / layout.FINGERPRINT)
    objects: dict[str, Path] = {}
    for path, entry in sorted(snap["files"].items()):
        source = snapshot.object_path(store, entry["sha256"])
        if not source.is_file():
            raise snapshot.SnapshotError(f"run {run_dir.name}: the object of {path} is missing from the store "
                                         f"({source}): the run cannot travel without it")  # fmt: skip
        objects[entry["sha256"]] = source
    run_files = {p.relative_to(run_dir).as_posix(): _sha256_file(p) for p in sorted(run_dir.rglob("*"))
                 if p.is_file() and not p.is_symlink()}  # fmt: skip
    try:
        data = _write_archive(run_dir, out, objects, run_files, fp, snap, with_env, compression, echo, wheel_dir)
    except OSError as exc:  # no such directory, a full disk, no permission
        raise ArchiveError(f"cannot write {out}: {exc.strerror or exc}") from None
    return Packed(out, data, out.stat().st_size, seal)


def _write_archive(run_dir: Path, out: Path, objects: Mapping[str, Path], run_files: Mapping[str, str],
                   fp: Mapping, snap: Mapping, with_env: bool, compression: str, echo: bool,
                   wheel_dir: Path | None) -> dict:  # fmt: skip
    """The archive written to a temporary file beside ``out``, renamed to ``out`` once complete; its manifest."""
    with tempfile.TemporaryDirectory(prefix=".launch-pack-", dir=out.parent.resolve()) as tmp:
        wheels = {}
        if with_env:
            wheels = collect_wheels(fp, wheel_dir or Path(tmp) / "wheels", echo=echo)
        for digest, source in objects.items():  # the store's copy is checked: a damaged one never travels
            if _sha256_file(source) != digest:
                raise snapshot.SnapshotError(f"run {run_dir.name}: object {source} does not match its name")
        from launcher.version import __version__

        data = manifest(run_dir.name, run_files, {d: p.stat().st_size for d, p in objects.items()},
                        left_out_data(fp, snap), {w.name: info for w, info in wheels.items()},
                        (run_dir / layout.SIGNATURE).is_file(), __version__,
                        _dt.datetime.now().astimezone().isoformat(timespec="seconds"))  # fmt: skip
        partial = Path(tmp) / "archive.part"
        with _writer(partial, compression) as tar:
            _add_bytes(tar, NAME, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())
            _add_tree(tar, run_dir, f"{RUN}/{run_dir.name}")
            for digest, source in sorted(objects.items()):
                _add_file(tar, source, member_name(OBJECTS, digest))
            for wheel in sorted(wheels, key=lambda w: w.name):
                _add_file(tar, wheel, member_name(WHEELS, wheel.name))
        os.replace(partial, out)
    return data


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


def _add_tree(tar: tarfile.TarFile, top: Path, name: str) -> None:
    tar.addfile(_info(name, 0, 0o755, tarfile.DIRTYPE))
    for current, dirs, files in os.walk(top):
        dirs.sort()
        rel = Path(current).relative_to(top).as_posix()
        base = name if rel == "." else f"{name}/{rel}"
        for d in dirs:
            path = Path(current) / d
            if path.is_symlink():
                tar.addfile(_link(f"{base}/{d}", os.readlink(path)))
            else:
                tar.addfile(_info(f"{base}/{d}", 0, 0o755, tarfile.DIRTYPE))
        for f in sorted(files):
            path = Path(current) / f
            if path.is_symlink():
                tar.addfile(_link(f"{base}/{f}", os.readlink(path)))
            else:
                _add_file(tar, path, f"{base}/{f}")


def _link(name: str, target: str) -> tarfile.TarInfo:
    info = _info(name, 0, 0o777, tarfile.SYMTYPE)
    info.linkname = target
    return info


@contextmanager
def _writer(path: Path, compression: str) -> Iterator[tarfile.TarFile]:
    with open(path, "wb") as raw:
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


def collect_wheels(fp: Mapping, dest: Path, echo: bool = True) -> dict[Path, dict]:
    """The wheels ``wheel_plan`` names, taken from pip's cache or the index once (``pip wheel --no-deps``,
    which builds a wheel from an sdist where the index has no wheel), and the launcher's own built
    from its source (``launcher_wheel``). Each wheel of a distribution the job used must install
    what the run recorded (``wheel_identity`` against ``files_sha256``): ``ArchiveError`` names the
    first that does not."""
    from importlib import metadata

    dest.mkdir(parents=True, exist_ok=True)
    built = launcher_wheel(fp, dest)  # first: what it requires is what its wheel says, not an older install's
    requires: dict[str, list[str]] = {}
    here: dict[str, str] = {}
    for dist in metadata.distributions():
        if dist.metadata["Name"]:
            requires.setdefault(_normalize(dist.metadata["Name"]), list(dist.requires or []))
            here.setdefault(_normalize(dist.metadata["Name"]), dist.version)
    requires[LAUNCHER_DISTRIBUTION] = _wheel_requires(built)
    wanted = wheel_plan(fp, requirement_closure(LAUNCHER_DISTRIBUTION, requires), here)
    have = {wheel_parts(w.name): w for w in dest.glob("*.whl")}
    missing = [f"{n}=={v}" for n, v in wanted.items() if (n, v) not in have]
    if missing:
        if echo:
            print(f"[launch] collecting {len(missing)} wheel(s) for the archive (pip wheel --no-deps)",
                  file=sys.stderr, flush=True)  # fmt: skip
        log = dest / "pip.log"
        argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "--wheel-dir",
                str(dest), *missing]  # fmt: skip
        if proc.run_streaming(argv, os.environ, log, echo=False) != 0:
            tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-2:])
            raise ArchiveError(f"the wheels of the run's distributions could not be had (pip wheel: {tail})")
        log.unlink()
    have = {wheel_parts(w.name): w for w in dest.glob("*.whl")}
    used = (fp.get("software") or {}).get("distributions") or {}
    out: dict[Path, dict] = {}
    for name, version in wanted.items():
        wheel = have.get((name, version))
        if wheel is None:
            raise ArchiveError(f"no wheel of {name}=={version} was found or built: the run's environment cannot travel")
        identity = _wheel_record_identity(wheel)
        want = (used.get(name) or {}).get("files_sha256")
        if want and identity != want:
            raise ArchiveError(f"the wheel {wheel.name} installs other files than the run's {name} {version} "
                               f"(files {str(identity)[:12]}, the run's {want[:12]}): a rebuilt or different "
                               "wheel; the run's environment cannot travel")  # fmt: skip
        out[wheel] = {"sha256": _sha256_file(wheel), "name": name, "version": version, "files_sha256": identity}
    out[built] = {"sha256": _sha256_file(built), "name": LAUNCHER_DISTRIBUTION, "version": wheel_parts(built.name)[1],
                  "files_sha256": _wheel_record_identity(built)}  # fmt: skip
    return out


def _wheel_requires(wheel: Path) -> list[str]:
    """The ``Requires-Dist`` lines of a wheel's METADATA."""
    from email.parser import HeaderParser

    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        return HeaderParser().parsestr(z.read(name).decode()).get_all("Requires-Dist") or []


def _wheel_record_identity(wheel: Path) -> str | None:
    try:
        with zipfile.ZipFile(wheel) as z:
            record = next(n for n in z.namelist() if n.count("/") == 1 and n.endswith(".dist-info/RECORD"))
            return wheel_identity(z.read(record).decode())
    except (OSError, StopIteration, zipfile.BadZipFile, UnicodeDecodeError) as exc:
        raise ArchiveError(f"{wheel.name} is not a readable wheel ({exc})") from None


_NOT_SOURCE = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", ".nox", ".pytest_cache",
                                     ".ruff_cache", ".import_linter_cache", ".benchmarks", "runs", "tests", "docs",
                                     "benchmarks", "mutants", ".venv", "venv")  # fmt: skip


def launcher_wheel(fp: Mapping, dest: Path) -> Path:
    """The launcher's wheel, built from its source tree (``pip wheel --no-deps --no-build-isolation``
    from a clean copy: no stale ``build/`` leaks in), and checked: each of the launcher's modules the
    job ran (``code.launcher_modules``) must be in it with the content the run recorded."""
    source = Path(hashing.__file__).resolve().parents[2]
    project = source / "pyproject.toml"
    if not project.is_file() or LAUNCHER_DISTRIBUTION not in project.read_text():
        raise ArchiveError(f"the launcher here ({source / 'launcher'}) is not a source tree, so its wheel cannot be "
                           "built: pack --with-env from the launcher's source checkout")  # fmt: skip
    for old in dest.glob(f"{LAUNCHER_DISTRIBUTION.replace('-', '_')}-*.whl"):
        old.unlink()  # never an earlier build's
    with tempfile.TemporaryDirectory(prefix=".launch-wheel-") as tmp:
        copy = Path(tmp) / "src"
        shutil.copytree(source, copy, ignore=_NOT_SOURCE, symlinks=True)
        log = Path(tmp) / "pip.log"
        argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                "--disable-pip-version-check", "--wheel-dir", str(dest), str(copy)]  # fmt: skip
        if proc.run_streaming(argv, os.environ, log, echo=False) != 0:
            tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-2:])
            raise ArchiveError(f"the launcher's wheel could not be built from {source}: {tail}")
    built = sorted(dest.glob(f"{LAUNCHER_DISTRIBUTION.replace('-', '_')}-*.whl"))
    if not built:
        raise ArchiveError(f"pip built no wheel of the launcher from {source}")
    recorded = ((fp.get("code") or {}).get("launcher_modules")) or {}
    with zipfile.ZipFile(built[-1]) as z:
        inside = {hashing.module_name(n.removeprefix("launcher/")): hashlib.sha256(z.read(n)).hexdigest()
                  for n in z.namelist() if n.startswith("launcher/") and n.endswith(".py")}  # fmt: skip
    for module, digest in sorted(recorded.items()):
        if inside.get(module) != digest:
            raise ArchiveError(f"the launcher's {module} here is not the code the run ran (it changed since: "
                               f"{str(inside.get(module))[:12]}, the run's {str(digest)[:12]}): pack --with-env with "
                               "the launcher the run ran")  # fmt: skip
    return built[-1]


# ---------------------------------------------------------------- I/O: reading
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
                if _sha256_file(target) != expected[name]:
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
            if _sha256_file(target) != entry["sha256"]:
                raise ArchiveError(f"{directory} holds another {wheel} than the archive's", wheel)
        else:
            os.replace(tmp / member_name(WHEELS, wheel), target)
        placed.append(target)
    return placed


def is_archive(path: str | Path) -> bool:
    """Is ``path`` a file (not a run directory) that ``launch replay|unpack|verify`` read as an archive?"""
    return Path(path).is_file()
