"""An archive's manifest and members, checked: the pure part of a run that travels.

An archive (``launch pack``) is one tar whose members are, in this order:

```
launch-archive.json          the manifest: format, the run's name, every member with its sha256,
                             the data the snapshot left out (with its hash), the wheels
run/<name>/...               the sealed run directory (manifest.json, its signature if signed)
objects/ab/abcdef...         every object the run's snapshot.json names
wheels/*.whl                 with --with-env: the wheels of every distribution the job used and
                             of the launcher with what it needs, so `tar -x` then
                             `pip install --no-index --find-links wheels tf-repro-launcher` works
```

Pure: the manifest (``manifest``, ``check_manifest``), member names and checks
(``member_name``, ``member_problem``, ``missing_and_extra``), what goes in (``wheel_plan``,
``requirement_closure``, ``wheel_identity``), the compression (``compression_of``).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from launcher.errors import ArchiveError
from launcher.record import distributions, layout, snapshot

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


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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
    return normalize(name), version


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
    recorded = {}
    for line in software.get("packages") or []:
        name, sep, version = str(line).partition("==")
        if sep:
            recorded[normalize(name)] = version.strip()
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
