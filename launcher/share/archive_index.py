"""An archive's index and members, checked: the pure part of a run that travels.

An archive (``launch pack``) is one tar whose members are, in this order:

```
launch-archive.json          the index: format, the run's name, every member with its sha256,
                             the data the snapshot left out (with its hash), the wheels
run/<name>/...               the sealed run directory (manifest.json, its signature if signed)
objects/ab/abcdef...         every object the run's snapshot.json names
wheels/*.whl                 with --with-env: the wheels of every distribution the job used and
                             of the launcher with what it needs, so `tar -x` then
                             `pip install --no-index --no-deps wheels/*.whl` installs the run's
                             environment (docs/sharing.md, "Replay elsewhere")
```

Every member is declared with its sha256 and its size, so a reader refuses a member larger than
declared before reading it, and can tell before the first write whether the whole fits its bounds
(``Limits``, ``store.snapshot_max_*``) and the disk.

Pure: the index (``index``, ``check_index``), member names and checks
(``member_name``, ``member_problem``, ``missing_and_extra``), what goes in (``wheel_plan``,
``requirement_closure``, ``wheel_identity``), which wheels a run's record names
(``wheel_refusal``), the compression (``compression_of``).

The index is not the seal: the seal is the run's ``manifest.json``, inside ``run/<name>/``, which
the index lists as one of the run's files.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from launcher.errors import ArchiveError
from launcher.record import layout
from launcher.record.probe import distributions
from launcher.record.store import objects, snapshot
from launcher.share.tarstream import MAX_SIZE, name_problem

NAME = "launch-archive.json"


FORMAT = "launch-archive"


VERSION = 2  # 2: every member with its size (1 had sizes for objects only: its readers trusted tarfile)


RUN = "run"


LAUNCHER_DISTRIBUTION = "tf-repro-launcher"


MAX_INDEX = 16 << 20  # bytes: an index is small; a huge one is not ours
MAX_RUN_FILES = 100_000  # files of one run directory (its records, checkpoints and outputs)
MAX_WHEELS = 2_000  # a run's environment: 44 wheels for the mnist job


_GZIP, _ZSTD = b"\x1f\x8b", b"\x28\xb5\x2f\xfd"


_WHEEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+!-]{0,250}\.whl")


def normalize(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    from packaging.utils import canonicalize_name

    return str(canonicalize_name(name))


def member_name(kind: str, *parts: str) -> str:
    """The member name of a run file (``run``, name, relative path), an object (``objects``, sha256)
    or a wheel (``wheels``, file name)."""
    if kind == layout.OBJECTS:  # fanned out as a store keeps them (objects.object_path)
        return f"{layout.OBJECTS}/{parts[0][:2]}/{parts[0]}"
    return "/".join([kind, *parts])


def index(
    run_name: str,
    run_files: Mapping[str, str],
    objects: Mapping[str, int],
    left_out: Mapping[str, dict],
    wheels: Mapping[str, dict],
    signed: bool,
    launcher_version: str,
    created: str,
) -> dict:
    """The archive's index (``launch-archive.json``): ``run_files`` (path in the run -> {sha256, size}),
    ``objects`` (sha256 -> size), ``left_out`` (data the snapshot did not keep: path -> {sha256, why}),
    ``wheels`` (file name -> {sha256, size, name, version, files_sha256}), whether the seal is signed."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "run": run_name,
        "created": created,
        "launcher_version": launcher_version,
        "signed": signed,
        "run_files": dict(sorted(run_files.items())),
        "objects": dict(sorted(objects.items())),
        "left_out": dict(sorted(left_out.items())),
        "wheels": dict(sorted(wheels.items())),
    }


@dataclass(frozen=True)
class Limits:
    """What one archive may bring into a store, as one run may (``store.snapshot_max_files`` and
    ``store.snapshot_max_total_mb``; None: no cap), and the disk's free bytes (None: not checked)."""

    max_objects: int | None = snapshot.DEFAULT_MAX_FILES
    max_object_bytes: int | None = snapshot.DEFAULT_MAX_TOTAL_MB << 20
    free_bytes: int | None = None


def limits_from(store: Mapping) -> Limits:
    """The ``Limits`` of a config's ``store`` node (``snapshot_max_files``, ``snapshot_max_total_mb``; null: no cap)."""

    def number(key: str, default: int) -> int | None:
        value = store.get(key, default)
        if value is None or str(value).strip().lower() in ("null", "none", ""):
            return None
        try:
            return int(str(value))
        except ValueError:
            raise ArchiveError(f"store.{key} must be a whole number or null, got {value!r}") from None

    files = number("snapshot_max_files", snapshot.DEFAULT_MAX_FILES)
    total = number("snapshot_max_total_mb", snapshot.DEFAULT_MAX_TOTAL_MB)
    return Limits(files, None if total is None else total << 20)


def _size_problem(size: object) -> str | None:
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_SIZE:
        return f"has the size {size!r}, not a number of bytes"
    return None


def check_index(data: object, limits: Limits = Limits()) -> dict:
    """``data`` (a ``launch-archive.json``) checked whole before any of it names a member: its format
    and version, a run name that is a run's id (``layout.is_run_id``: never a name the store
    keeps for itself), relative normalised run paths, object names of 64 hex digits, wheel file
    names; every digest 64 hex digits and every size a number; the objects within ``limits``, and
    the whole within the disk's free space. ``ArchiveError`` names the first fault."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ArchiveError(f"{NAME} is not a launch archive's index")
    if data.get("version") != VERSION:
        raise ArchiveError(
            f"{NAME} is of version {data.get('version')!r}; this launcher reads version {VERSION} "
            "(pack the run again with this launcher)"
        )
    name = data.get("run")
    if not layout.is_run_id(name):
        raise ArchiveError(f"{NAME} names the run {name!r}, which is not a run's id (YYYYMMDD-HHMMSS-xxxxxx)", NAME)
    for key in ("run_files", "objects", "left_out", "wheels"):  # not layout's: the index's tables
        if not isinstance(data.get(key), dict):
            raise ArchiveError(f"{NAME} has no {key} table", NAME)
    if len(data["run_files"]) > MAX_RUN_FILES or len(data["wheels"]) > MAX_WHEELS:
        raise ArchiveError(
            f"{NAME} lists {len(data['run_files'])} run files and {len(data['wheels'])} wheels, over "
            f"the {MAX_RUN_FILES} and {MAX_WHEELS} an archive may hold",
            NAME,
        )
    for path, entry in data["run_files"].items():
        if (problem := name_problem(path) if isinstance(path, str) else "is not a path") is not None:
            raise ArchiveError(f"{NAME} names a run file {path!r} that {problem}", str(path))
        if not isinstance(entry, dict) or not objects.is_sha256(entry.get("sha256")):
            raise ArchiveError(f"{NAME} gives run file {path!r} no sha256 of 64 hex digits", path)
        if (problem := _size_problem(entry.get("size"))) is not None:
            raise ArchiveError(f"{NAME}: run file {path!r} {problem}", path)
    if layout.MANIFEST not in data["run_files"]:
        raise ArchiveError(f"{NAME} lists no {layout.MANIFEST}: the archive holds no sealed run", NAME)
    for digest, size in data["objects"].items():
        if not objects.is_sha256(digest):
            raise ArchiveError(f"{NAME} names an object {digest!r}, not 64 lowercase hex digits", str(digest))
        if (problem := _size_problem(size)) is not None:
            raise ArchiveError(f"{NAME}: object {digest[:12]} {problem}", digest)
    for wheel, entry in data["wheels"].items():
        if not isinstance(wheel, str) or not _WHEEL.fullmatch(wheel):
            raise ArchiveError(f"{NAME} names a wheel {wheel!r}, not a wheel's file name", str(wheel))
        if not isinstance(entry, dict) or not objects.is_sha256(entry.get("sha256")):
            raise ArchiveError(f"{NAME} gives wheel {wheel} no sha256 of 64 hex digits", wheel)
        if (problem := _size_problem(entry.get("size"))) is not None:
            raise ArchiveError(f"{NAME}: wheel {wheel} {problem}", wheel)
    _check_bounds(data, limits)
    return data


def _check_bounds(data: Mapping, limits: Limits) -> None:
    objects = sum(data["objects"].values())
    if limits.max_objects is not None and len(data["objects"]) > limits.max_objects:
        raise ArchiveError(
            f"the archive holds {len(data['objects'])} objects, over store.snapshot_max_files "
            f"({limits.max_objects}): nothing was imported",
            NAME,
        )
    if limits.max_object_bytes is not None and objects > limits.max_object_bytes:
        raise ArchiveError(
            f"the archive's objects hold {objects} bytes, over store.snapshot_max_total_mb "
            f"({limits.max_object_bytes >> 20} MiB): nothing was imported",
            NAME,
        )
    total = declared_bytes(data)
    if limits.free_bytes is not None and 2 * total > limits.free_bytes:  # extracted, then stored
        raise ArchiveError(
            f"the archive declares {total} bytes, and the store's disk has {limits.free_bytes} free "
            "(twice as much is needed while it is checked): nothing was imported",
            NAME,
        )


def declared_bytes(data: Mapping) -> int:
    """The bytes of every member the index declares."""
    return (
        sum(e["size"] for e in data["run_files"].values())
        + sum(data["objects"].values())
        + sum(e["size"] for e in data["wheels"].values())
    )


def expected_members(data: Mapping) -> dict[str, tuple[str, int]]:
    """Every file member the index names -> (its sha256, its size) (the index itself left out)."""
    out = {member_name(RUN, data["run"], path): (e["sha256"], e["size"]) for path, e in data["run_files"].items()}
    out.update({member_name(layout.OBJECTS, digest): (digest, size) for digest, size in data["objects"].items()})
    out.update({member_name(layout.WHEELS, wheel): (e["sha256"], e["size"]) for wheel, e in data["wheels"].items()})
    return out


def directories(names: Iterable[str]) -> set[str]:
    """Every directory above these member names."""
    out = set()
    for name in names:
        parts = name.split("/")[:-1]
        out.update("/".join(parts[: n + 1]) for n in range(len(parts)))
    return out


def member_problem(
    name: str, kind: str, run_name: str, expected: Mapping[str, object], needed_dirs: set[str]
) -> str | None:
    """Why a member of kind ``kind`` (``file``, ``directory``, or what else ``tarstream`` names) cannot
    be extracted, or None. Files must be ones the index names; directories the ones above them
    (``needed_dirs``) or inside the run (an empty ``outputs/``); nothing else at all: the
    archive format has no links, devices or fifos."""
    if (problem := name_problem(name.rstrip("/") if kind == "directory" else name)) is not None:
        return f"its name {problem}"
    name = name.rstrip("/")
    if kind == "file":
        return None if name in expected else "is not named by the archive's index"
    if kind == "directory":
        inside = name.startswith(f"{RUN}/{run_name}/")
        return None if inside or name in needed_dirs else "is a directory the index's files do not need"
    return f"is a {kind}: a launch archive holds files and directories only"


def missing_and_extra(expected: Iterable[str], seen: Iterable[str]) -> tuple[list[str], list[str]]:
    """The files the index names that the archive lacks, and the files it holds that the index does not name."""
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
    return normalize(name), version


def recorded_versions(fp: Mapping) -> dict[str, str]:
    """name -> version of every distribution the run recorded as installed (``software.packages``)."""
    out = {}
    for line in (fp.get("software") or {}).get("packages") or []:
        name, sep, version = str(line).partition("==")
        if sep:
            out[normalize(name)] = version.strip()
    return out


def wheel_refusal(
    name: str, version: str, identity: str | None, fp: Mapping, launcher_modules: Mapping[str, str] | None = None
) -> str | None:
    """Why the run's sealed record ``fp`` (its fingerprint) does not name this wheel, or None when it does.

    A distribution the job used must be at its recorded version and install the recorded files
    (``identity``, from the wheel's RECORD, against ``files_sha256``); any other at the version
    ``software.packages`` lists; the launcher's own must hold every launcher module the job ran
    as it ran (``launcher_modules``: module -> sha256 of the wheel's copy)."""
    software = fp.get("software") or {}
    if name == LAUNCHER_DISTRIBUTION:
        recorded = (fp.get("code") or {}).get("launcher_modules") or {}
        if not recorded:
            return "the run recorded none of the launcher's modules to check the launcher's wheel against"
        for module, digest in sorted(recorded.items()):
            if (launcher_modules or {}).get(module) != digest:
                return f"its {module} is not the code the run ran"
        return None
    used = {normalize(n): d for n, d in (software.get("distributions") or {}).items() if d}
    if name in used:
        want = used[name]
        if str(want.get("version")) != version:
            return f"the run used {name} {want.get('version')}, not {version}"
        if want.get("files_sha256") and identity != want["files_sha256"]:
            return (
                f"it installs other files than the run's {name} {version} (files {str(identity)[:12]}, the "
                f"run's {str(want['files_sha256'])[:12]})"
            )
        return None
    if recorded_versions(fp).get(name) != version:
        return f"the run's record names no {name} {version}"
    return None


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
            name = normalize(req.name)
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
    recorded = recorded_versions(fp)
    out = {}
    for name, identity in (software.get("distributions") or {}).items():
        if identity and normalize(name) != LAUNCHER_DISTRIBUTION:
            out[normalize(name)] = str(identity["version"])
    for name in needed_by_launcher:
        name = normalize(name)
        if name == LAUNCHER_DISTRIBUTION or name in out:
            continue
        version = recorded.get(name) or (here or {}).get(name)
        if version is None:
            raise ArchiveError(
                f"the launcher needs {name}, which neither the run recorded nor is installed here: "
                "its wheel cannot be packed"
            )
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
