"""An installed distribution's identity: its version and the sha256 of the files it installed
(its ``RECORD``'s hashed files, without what says where and by what it was installed), which
distribution owns a file, and which of the distributions a job used can change its bits.

The launcher asks it before a rerun (``launcher.run.precheck``, ``launcher.run.rebuild``),
the job after it ran (``usage.gather``). ``parse_record``, ``content_entries``,
``files_sha256``, ``keyed_distributions`` and ``parse_requires`` are pure.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path

from launcher.record.filecache import cache_path
from launcher.record.probe.places import under

METADATA = re.compile(r"\.(dist|egg)-info(/|$)")  # an installed distribution's metadata (editable ones too)
# RECORD entries that say where and by what a distribution was installed, not what it is:
# the installer's markers, RECORD itself, console scripts and data files outside
# site-packages (a script's first line holds the environment's Python) and bytecode
# compiled at install time (it holds the source's mtime).
_INSTALL_MARKERS = ("INSTALLER", "REQUESTED", "direct_url.json", "RECORD")
_COMPILED = re.compile(r"(^|/)__pycache__/[^/]+\.pyc$")


class Installed:
    """Which installed distribution owns a file below a site directory."""

    def __init__(self, site_dirs: Iterable[str]) -> None:
        self.by_top = _packages_distributions(site_dirs)
        self._files: dict[str, set[str]] = {}

    def owner(self, path: str, site_dirs: Iterable[str]) -> str | None:
        for root in site_dirs:
            if under(path, [root]):
                rel = path[len(root.rstrip("/")) + 1 :] or "."  # os.path.relpath, for a normalized path
                break
        else:
            return None
        top = rel.split(os.sep, 1)[0]
        top = top.split(".", 1)[0] if os.sep not in rel else top
        names = self.by_top.get(top) or self.by_top.get(top.split(".", 1)[0]) or []
        if len(set(names)) == 1:
            return _normalize(names[0])
        for name in dict.fromkeys(names):  # a namespace (nvidia/, google/): find the owner by its file list
            if rel in self._record(name):
                return _normalize(name)
        return None

    def _record(self, name: str) -> set[str]:
        if name not in self._files:
            try:
                files = metadata.distribution(name).files or []
            except metadata.PackageNotFoundError:
                files = []
            self._files[name] = {os.path.normpath(str(f)) for f in files}
        return self._files[name]


def _packages_distributions(site_dirs: Iterable[str]) -> dict[str, list[str]]:
    """``importlib.metadata.packages_distributions()``, remembered (it reads every installed
    distribution's metadata: 0.2 s) until a distribution is installed, upgraded or removed."""
    entries = []
    for root in sorted(set(site_dirs)):
        try:
            with os.scandir(root) as it:
                entries += [f"{root}/{e.name}:{e.stat().st_mtime_ns}" for e in it if METADATA.search(e.name + "/")]
        except OSError:
            continue
    signature = hashlib.sha256("\n".join([sys.version, *sorted(entries)]).encode()).hexdigest()[:24]
    path = cache_path().parent / f"distributions-{signature}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    found = {top: list(dict.fromkeys(names)) for top, names in metadata.packages_distributions().items()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(found))
        os.replace(tmp, path)
    except OSError:
        pass
    return found


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_record(text: str) -> list[tuple[str, str]]:
    """(path, hash) of each line of a ``RECORD`` (CSV: path, hash, size); hash may be empty."""
    return [(row[0], row[1] if len(row) > 1 else "") for row in csv.reader(io.StringIO(text)) if row]


def content_entries(entries: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The (path, hash) entries that are the distribution's own content, sorted by path.

    Out: entries without a hash, paths outside site-packages (``..``: console scripts
    and data files; absolute paths), the installer's markers of ``*.dist-info``
    (``INSTALLER``, ``REQUESTED``, ``direct_url.json``, ``RECORD``) and ``__pycache__/*.pyc``.
    """
    kept = set()
    for path, digest in entries:
        path = path.replace("\\", "/")
        if not digest or path.startswith(("../", "/")) or path == ".." or _COMPILED.search(path):
            continue
        parent, _, base = path.rpartition("/")
        if parent.endswith(".dist-info") and base in _INSTALL_MARKERS:
            continue
        kept.add((path, digest))
    return sorted(kept)


def files_sha256(entries: Iterable[tuple[str, str]]) -> str | None:
    """The sha256 of a distribution's content entries (``content_entries``); None when it has none."""
    kept = content_entries(entries)
    if not kept:
        return None
    return hashlib.sha256("".join(f"{path}\t{digest}\n" for path, digest in kept).encode()).hexdigest()


def _hashed_files(dist: metadata.Distribution, listing: str) -> list[tuple[str, str]]:
    """(path below site-packages, sha256) of the files an ``installed-files.txt`` lists (paths
    relative to the metadata directory), hashed as they are now."""
    info = getattr(dist, "_path", None)  # the metadata directory (importlib's PathDistribution)
    if info is None:
        return []
    out = []
    for line in filter(None, listing.splitlines()):
        path = os.path.normpath(os.path.join(Path(info).name, line)).replace(os.sep, "/")
        try:
            data = (Path(info).parent / path).read_bytes()
        except OSError:
            continue
        out.append((path, "sha256=" + hashlib.sha256(data).hexdigest()))
    return out


def distribution_identity(name: str) -> dict | None:
    """{"version", "files_sha256", "record_sha256"} of an installed distribution, or None when it is not installed.

    ``files_sha256`` is what it contains (``files_sha256()`` of its RECORD), the same in
    every environment it is installed in from the same wheel: the comparability key uses
    it. A distribution without a RECORD is hashed by the files its ``installed-files.txt``
    lists, as they are now; None when it lists none (an egg-link's source is in
    code.modules). ``record_sha256`` hashes the whole RECORD or file list, for reading: it
    changes with the environment's path and the installer.
    """
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None
    record = dist.read_text("RECORD")
    listing = record or dist.read_text("installed-files.txt") or ""
    content = files_sha256(parse_record(record) if record else _hashed_files(dist, listing))
    return {
        "version": dist.version,
        "files_sha256": content,
        "record_sha256": hashlib.sha256(listing.encode()).hexdigest() if listing else None,
    }


def keyed_distributions(
    used: Iterable[str],
    imported: Mapping[str, set[str]],
    direct: set[str],
    requires: Mapping[str, Iterable[str]],
    imported_by: Mapping[str, set[str | None]] | None = None,
) -> set[str]:
    """The used distributions that can change the job's bits.

    Keyed from the start: those the job's code or the launcher imported (``direct``, top-level
    names) and those whose shared libraries it loaded without importing them (TensorFlow's
    ``nvidia-*`` wheels). Then, along the import chain: a distribution that a keyed one
    imported and requires (``requires``: normalized names, extras left out, followed to any
    depth), as TensorFlow imports numpy and Keras rich. The rest was imported only by a library's
    optional probe, or by what such a probe pulled in: ``import keras`` imports IPython when it
    is installed, and IPython pygments, which rich (that Keras requires) requires too; since no
    keyed distribution imported pygments, it is probed with IPython, out of the key.

    ``imported_by`` maps a distribution to the distributions whose code imported it (``None``
    for an importer not known: the standard library, C code, the interpreter); a distribution
    with no known importer, or one unknown among them, is keyed as before the chain was
    recorded: when a keyed distribution requires it. Without ``imported_by`` at all, every
    distribution is judged that way.
    """
    used = set(used)
    keyed = {d for d in used if d not in imported or imported[d] & direct}
    wanted = _closure(requires)
    grew = True
    while grew:
        grew = False
        for d in sorted(used - keyed):
            by = (imported_by or {}).get(d) or {None}
            known = by - {None}
            if None in by:  # someone not known imported it: what keyed distributions require is keyed
                needed = any(d in requires.get(k, ()) for k in keyed)
            else:
                needed = any(k in keyed and d in wanted(k) for k in known)
            if needed:
                keyed.add(d)
                grew = True
    return keyed


def _closure(requires: Mapping[str, Iterable[str]]):
    """``name -> every distribution it requires, to any depth``, remembered."""
    memo: dict[str, set[str]] = {}

    def wanted(name: str) -> set[str]:
        if name not in memo:
            memo[name] = set()
            todo = list(requires.get(name, ()))
            while todo:
                dep = todo.pop()
                if dep not in memo[name]:
                    memo[name].add(dep)
                    todo.extend(requires.get(dep, ()))
        return memo[name]

    return wanted


def parse_requires(lines: Iterable[str] | None) -> list[str]:
    """Normalized names of ``Requires-Dist`` lines, without those that only an extra pulls in."""
    out = []
    for line in lines or []:
        requirement, _, marker = line.partition(";")
        if "extra" in marker:
            continue
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
        if match:
            out.append(_normalize(match.group(1)))
    return out


def requires(name: str) -> list[str]:
    try:
        return parse_requires(metadata.requires(name))
    except metadata.PackageNotFoundError:
        return []


def version_of(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
