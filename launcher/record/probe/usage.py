"""What a job used, found after the fact: the code it imported, the distributions and
native libraries it loaded, and the files it read.

The comparability key must hold everything that can change a job's bits and nothing
else. Rather than ask the user, the job process reports what it actually used:

- **code**: every imported module whose file lies outside the Python installation and
  its site-packages (a helper beside a script, a package on ``PYTHONPATH``, an
  editable install's source), hashed by content, git repository or not;
- **launcher**: the launcher's own modules the job imported (its bootstrap, observers,
  tasks, data loading, what records the run), hashed by file: the launcher code that can
  change the job's bits, and not its command line, verdicts, Docker or sweep code;
- **distributions**: the installed distributions whose modules were imported or whose
  shared libraries are mapped into the process (``/proc/self/maps``: TensorFlow loads
  the ``nvidia-*`` wheels' libraries without importing them), each with its version
  and the sha256 of what it contains (its ``RECORD``'s hashed files, without what says
  where and by what it was installed: ``files_sha256``);
- **libraries**: the other shared libraries mapped (libm, libstdc++, libgomp, ...),
  hashed by content;
- **data**: the files the job opened for reading (seen by ``launcher.job.observe.reads``), and
  the files found by its directory listings that existed before it started (a file
  read by native code is found by a listing first), except code, libraries, the Python
  installation, system directories, caches and run directories, hashed by content.

Classification is pure (``classify``, ``parse_maps``, ``data_files``,
``listed_files``), tested on recorded paths; ``gather`` does the I/O in the job
process.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from launcher.record import layout
from launcher.record.filecache import FileHashes, stat_key
from launcher.record.hashing import module_name
from launcher.record.layout import RUN_ID as RUN_NAME
from launcher.record.probe.distributions import (
    METADATA,
    Installed,
    distribution_identity,
    keyed_distributions,
    requires,
    version_of,
)
from launcher.record.probe.places import RealPaths, Roots, classify, roots, system_path, under

# ~/.cache and ~/.config hold data sets (kagglehub, Hugging Face datasets, download
# helpers) and are read like any directory; only these tools' own caches below them are
# never the job's data (font lists, compiled kernels), and the launcher's own cache
# (``roots().ignored``).
# MLflow keeps an installation id in ~/.config/mlflow/telemetry.json, made on its first run
# and read on every later one: a run logging to MLflow would be refused against its first.
TOOL_CACHES = ("matplotlib", "fontconfig", "pip", "launch", "mlflow")
# Keras creates ~/.keras/keras.json on first import, so its presence differs between a
# first and a second run; the settings it holds are recorded from Keras itself instead
# (determinism.keras: floatx, epsilon, image_data_format, backend).
IGNORED_NAMES = ("keras.json",)
_SHARED_LIBRARY = re.compile(r"\.so(\.[0-9.]+)?$")
# Code TensorFlow writes and imports itself (AutoGraph's conversions of the user's functions,
# whose source is hashed): a new temporary name every run.
_GENERATED = re.compile(r"^__autograph_generated_file")


def parse_maps(text: str) -> list[str]:
    """The shared libraries mapped into a process, from ``/proc/PID/maps``, in first-mapped order."""
    out: dict[str, None] = {}
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 6:
            continue
        path = parts[5].strip()
        if path.startswith("/") and not path.endswith("(deleted)") and _SHARED_LIBRARY.search(path):
            out.setdefault(path, None)
    return list(out)


def tool_caches(home: str, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The directories of tools' own caches (``TOOL_CACHES``) below every cache and config
    root a tool looks in: ``~/.cache``, ``~/.config``, ``$XDG_CACHE_HOME``, ``$XDG_CONFIG_HOME``;
    and matplotlib's ``$MPLCONFIGDIR``."""
    bases = [os.path.join(home, ".cache"), os.path.join(home, ".config")]
    bases += [environ[name] for name in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME") if environ.get(name)]
    dirs = [os.path.join(base, tool) for base in dict.fromkeys(bases) for tool in TOOL_CACHES]
    return tuple(dirs + ([environ["MPLCONFIGDIR"]] if environ.get("MPLCONFIGDIR") else []))


# What a file the job read was to it (``origin``): its input, its own output, or both (it
# was there before the job, which changed it: what it held before may have reached the job).
INPUT, OUTPUT, BOTH = "input", "output", "input and output"
# What the native watch saw done to a file (``launcher.job.observe.reads.natively_written``):
# made or moved there by the job, written in place by it, or by another process.
CREATED, WRITTEN, ANOTHER = "created", "written", "another process"


def origin(
    info: Mapping[str, object],
    started_ns: int | None,
    written: str | None = None,
    birth: tuple[int, int] | None = None,
    now: tuple | None = None,
) -> str:
    """Whether a file the job read is its ``INPUT``, its own ``OUTPUT``, or ``BOTH`` (pure).

    ``info`` is its entry in the opened map (``stat`` at first read; ``written_first``;
    ``written``: a Python write seen), ``written`` what the native watch saw done to it
    (``CREATED``, ``WRITTEN``, ``ANOTHER``), ``birth`` the (inode, birth time) of the file at its
    path now and ``now`` its stat now (``filecache.stat_key``), where known.

    What the job read is its own output when the job wrote it: it made the file, or rewrote it
    before reading it, through Python or natively (``SaveV2``, ``tf.io.write_file``, a C library,
    rewriting in place what an earlier run left). Its input when it was there before the job
    started (read before the job changed it: ``BOTH``, as an existing file Python wrote into in
    place, appending, before reading it back), or was changed meanwhile only by another process.
    A file made by the job that kept older times (a copy with ``cp -p``, an extracted archive)
    is told by its birth. With no write seen, a file modified after the job started is its output.
    """
    if info.get("written_first"):  # made, or emptied, by the job's Python code before any read
        return OUTPUT
    first = info.get("stat")
    if started_ns is None or not isinstance(first, tuple) or len(first) < 5:
        return INPUT
    born = birth[1] if birth is not None and now is not None and birth[0] == now[2] == first[2] else None
    if first[4] < started_ns:  # what it read was there before the job started
        made = born is not None and born >= started_ns and now == first and written != ANOTHER
        return OUTPUT if made else INPUT
    if written == ANOTHER and not info.get("written"):  # written meanwhile by another process only
        return INPUT
    if info.get("written") and (born is None or born < started_ns):
        return BOTH  # an existing file the job's Python code wrote into (not replaced): what it held stays
    return OUTPUT


def data_files(
    opened: Mapping[str, dict],
    roots: Roots,
    home: str,
    code: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
    started_ns: int | None = None,
    written: Mapping[str, str] | None = None,
    born: Callable[[str], tuple[int, int] | None] | None = None,
) -> list[str]:
    """The paths of ``opened`` (path -> {"read": bool, "written_first": bool, "stat"}) that are data:
    the files of ``read_files`` that were the job's input (``INPUT`` or ``BOTH``)."""
    found = read_files(opened, roots, home, code, environ, started_ns, written, born)
    return [path for path, kind in found.items() if kind != OUTPUT]


def read_files(
    opened: Mapping[str, dict],
    roots: Roots,
    home: str,
    code: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
    started_ns: int | None = None,
    written: Mapping[str, str] | None = None,
    born: Callable[[str], tuple[int, int] | None] | None = None,
) -> dict[str, str]:
    """The paths of ``opened`` the job read that may be data, each with its ``origin``: the job's
    input, its own output, or both (with ``written``, what the native watch saw done to each
    real path, and ``born``, the (inode, birth time) of a path where the file system keeps one).

    Out: files that did not exist when the job first tried to read them (``stat`` None: a cache
    a tool then wrote, such as matplotlib's font list), files gone now unless they were there
    before ``started_ns`` (a checkpoint the job restored, then deleted: its input all the same),
    code and shared libraries, the Python installation and its distributions, system
    directories (but ``/run/user`` and ``/dev/shm``), tools' own caches (``tool_caches``, with
    ``environ``'s XDG directories), the launcher's cache, the run directory, and
    ``IGNORED_NAMES``. Data in ``~/.cache``, ``~/.config`` and ``/tmp`` counts like any other.
    """
    code = set(code)
    caches = tool_caches(home, environ or {})
    written = written or {}
    out = {}
    for opened_as, info in sorted(opened.items()):
        if "\0" in opened_as:  # not a path any file can have (a probe's, a library's sentinel)
            continue
        path = os.path.realpath(opened_as)
        if not info.get("read") or path in code:
            continue
        if "stat" in info and info["stat"] is None:  # nothing there to read when the job looked
            continue
        if path.endswith(".py") and not info.get("source"):  # source read as text by the job's code is data
            continue
        if not os.path.isfile(path) and (os.path.exists(path) or not _there_before(info.get("stat"), started_ns)):
            continue
        if not _user_file(path, roots, caches):
            continue
        how = written.get(path, written.get(opened_as))
        first = info.get("stat")
        later = started_ns is not None and isinstance(first, tuple) and len(first) > 4 and first[4] >= started_ns
        # birth decides only a file written in place by Python, or made natively with older times
        asks = info.get("written") if later else how == CREATED
        birth = born(path) if born is not None and asks else None
        out[opened_as] = origin(info, started_ns, how, birth, stat_key(path) if birth is not None else None)
    return out


def _user_file(path: str, roots: Roots, caches: Iterable[str]) -> bool:
    """Whether a real path may be data or the job's output: not code or a library, the Python
    installation, a distribution's, the system's, a tool's cache, the run directory, ``IGNORED_NAMES``."""
    if path.endswith((".pyc", ".pyo", ".pth")) or _SHARED_LIBRARY.search(path):
        return False
    if os.path.basename(path) in IGNORED_NAMES or METADATA.search(path):
        return False
    return not (system_path(path) or under(path, (*caches, *roots.ignored)) or classify(path, roots) != "user")


# A run directory (named like index.RUN_NAME) holds these: what a listing finds inside one
# is the launcher's record of a run, not data.
RUN_MARKERS = (layout.JOB, layout.STATUS, layout.CONFIG)


def listed_files(found: Iterable[tuple[str, int]], started_ns: int) -> list[str]:
    """The files of ``found`` ((path, mtime in ns) from the job's listings) that count as read.

    A file modified after the job started is its output (a checkpoint TensorFlow wrote
    natively, a log), not its input; every other file a listing found may have been read
    by native code the job ran, so it counts.
    """
    return sorted({path for path, mtime_ns in found if mtime_ns < started_ns})


def display_name(path: str, launch_dir: str, relative: bool = True) -> str:
    """A recorded path: relative to the launch directory when the job named it relatively
    and it lies there (a replay elsewhere finds it relative to its own directory), else
    absolute (where a replay will read it too)."""
    if relative and under(path, [launch_dir]):
        return os.path.relpath(path, launch_dir)
    return path


# ---------------------------------------------------------------- I/O (the job process)


def _there_before(stat: tuple | None, started_ns: int | None) -> bool:
    """Whether a file's stat at first read (``filecache.stat_key``) is from before the job started."""
    return stat is not None and started_ns is not None and stat[4] < started_ns


def _existed_before(path: str, started_ns: int) -> bool:
    """A file that was there before the job started (not one it wrote: IPython's cell files)."""
    try:
        return os.stat(path).st_mtime_ns < started_ns
    except OSError:
        return False


def module_files(modules: Mapping[str, object] | None = None) -> dict[str, str]:
    """module name -> the absolute path of its file, for every imported module that has one."""
    out = {}
    for name, module in list((modules if modules is not None else sys.modules).items()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and file and not _GENERATED.match(name):
            out[name] = os.path.abspath(file)
    return out


def _files_below(path: str) -> list[str]:
    if os.path.isdir(path):
        return sorted(os.path.join(d, f) for d, _, names in os.walk(path) for f in names)
    return [path]


@functools.lru_cache(maxsize=4096)
def _in_a_run(directory: str, depth: int = 3) -> bool:
    """Whether ``directory`` is a run directory or lies in one (outputs/, checkpoints/, ...)."""
    for _ in range(depth + 1):
        if RUN_NAME.fullmatch(os.path.basename(directory)) and all(
            os.path.isfile(os.path.join(directory, marker)) for marker in RUN_MARKERS
        ):
            return True
        directory = os.path.dirname(directory)
    return False


def _scan(listed: Mapping[str, bool], patterns: Mapping[str, bool]) -> list[tuple[str, int, bool]]:
    """(path, mtime in ns, named relatively) of each regular file in a listed directory or
    matching a pattern; the maps say whether the job named the directory or pattern relatively."""
    found = []
    for directory, relative in listed.items():
        if _in_a_run(directory):
            continue
        try:
            with os.scandir(directory) as entries:
                found += [(e.path, e.stat().st_mtime_ns, relative) for e in entries if e.is_file()]
        except OSError:
            continue
    for pattern, relative in patterns.items():
        for path in glob.glob(pattern, recursive=True):
            try:
                if os.path.isfile(path) and not _in_a_run(os.path.dirname(path)):
                    found.append((path, os.stat(path).st_mtime_ns, relative))
            except OSError:
                continue
    _in_a_run.cache_clear()
    return found


def _mtimes(paths: Iterable[str]) -> list[tuple[str, int]]:
    """(path, mtime in ns) of each of ``paths`` that is a regular file now."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        if os.path.isfile(path):
            out.append((path, st.st_mtime_ns))
    return out


def _named(paths: Mapping[str, bool] | Iterable[str]) -> dict[str, bool]:
    """path -> named relatively; a plain iterable of paths counts as named relatively."""
    return dict(paths) if isinstance(paths, Mapping) else dict.fromkeys(paths, True)


@dataclass(frozen=True)
class Observed:
    """What the job's observers saw (``launcher.job.observe``), handed to ``gather`` whole.

    ``opened``: path -> {"read", "written_first", "stat", "relative", ...} of each file the job
    opened (``reads.opened``). ``explicit`` are files and directories the job named as data
    itself; ``listed`` and ``patterns`` the directories it listed and the globs it matched, whose
    files from before ``started_ns`` count as read. Each of these maps a path to whether the job
    named it relatively (a plain list: relatively), which decides how it is recorded
    (``display_name``). ``modules`` (default ``sys.modules``) and ``maps_text`` (default
    ``/proc/self/maps``): what the process imported and mapped. ``direct_imports`` are the
    top-level names the job's code or the launcher imported (``launcher.job.observe.imports``);
    without them every used distribution is keyed. ``native`` are the files opened in directories
    watched at the OS level (``launcher.job.observe.fswatch``), each with its stat when first seen
    where known: they count as listed ones do (one modified since ``started_ns`` is the job's
    output: a database it logs to, as MLflow's default ``mlflow.db``), and one from before
    ``started_ns`` that is gone now as read, then deleted while the job ran (a checkpoint
    restored, then rotated away). ``code_files`` are files the job ran as code without importing
    them (a notebook, keyed by its code cells, the script): never data. ``executed`` are the
    source files whose code the job ran with ``exec`` (``runpy.run_path("cfg.py")``, IPython's
    ``%run``): those of the job's own that are not imported modules, and existed before
    ``started_ns``, are code, keyed as ``exec:<name>``. ``importers`` maps a top-level name to the
    files of the other code (libraries, the standard library) that imported it
    (``launcher.job.observe.imports``): the import chain, along which a distribution imported only
    by a library's optional probe, and what that probe pulled in, is told apart from one a keyed
    distribution needs (``distributions.keyed_distributions``). ``written`` are the files the
    native watch saw written or created, by real path (``CREATED``, ``WRITTEN``, ``ANOTHER``), and
    ``born`` gives a path's (inode, birth time) where the file system keeps one: with them, a
    file the job made and read back is its output, not its input (``origin``).
    """

    opened: Mapping[str, dict] = field(default_factory=dict)
    explicit: Mapping[str, bool] | Iterable[str] = ()
    modules: Mapping[str, object] | None = None
    maps_text: str | None = None
    listed: Mapping[str, bool] | Iterable[str] = ()
    patterns: Mapping[str, bool] | Iterable[str] = ()
    started_ns: int = 0
    direct_imports: Iterable[str] | None = None
    native: Mapping[str, tuple | None] | Iterable[str] = ()
    code_files: Iterable[str] = ()
    executed: Iterable[str] = ()
    importers: Mapping[str, Iterable[str]] | None = None
    written: Mapping[str, str] = field(default_factory=dict)
    born: Callable[[str], tuple[int, int] | None] | None = None


@dataclass
class _Imported:
    """What ``gather`` found the job imported, as it goes: its own code (module -> path and sha256),
    the launcher's modules (module -> sha256), the distributions used (in the order found) and,
    for each, the top-level names of its modules imported."""

    code: dict[str, dict] = field(default_factory=dict)
    launcher: dict[str, str] = field(default_factory=dict)
    used: dict[str, None] = field(default_factory=dict)
    imported: dict[str, set[str]] = field(default_factory=dict)


def gather(seen: Observed, run_dir: str, launch_dir: str) -> dict:
    """code.modules, software.distributions, software.libraries and data, measured now, from what
    the job's observers ``seen``.

    A data file whose stat changed after the job first read it gets a value no other run
    can have, so the key can never call two such runs comparable.
    """
    r = roots(run_dir)
    opened = _opened(seen)
    maps_text = seen.maps_text
    if maps_text is None:
        try:
            maps_text = Path("/proc/self/maps").read_text()
        except OSError:
            maps_text = ""
    dists = Installed(r.site)
    files = module_files(seen.modules)
    real = RealPaths()
    with FileHashes() as hashes:
        found = _imported(files, r, dists, hashes, real)
        _executed(found, files, seen, r, launch_dir, hashes, real)
        libraries = _libraries(maps_text, r, dists, hashes, found.used)
        data, outputs = _data(opened, seen, r, {m["path"] for m in found.code.values()}, run_dir, launch_dir, hashes)
    distributions, probed = _keyed(found, seen, dists, r, real)
    return {
        "modules": found.code,
        "distributions": distributions,
        "libraries": dict(sorted(libraries.items())),
        "data": dict(sorted(data.items())),
        "launcher": dict(sorted(found.launcher.items())),
        "distributions_probed": probed,
        "outputs": outputs,
    }


def _opened(seen: Observed) -> dict[str, dict]:
    """The job's opened files, with those its listings, globs and native watches found: a native
    file there before the job and gone now was read, then deleted by the job; a listed one from
    before ``started_ns`` counts as read."""
    opened = dict(seen.opened)
    started_ns = seen.started_ns
    found = _scan(_named(seen.listed), _named(seen.patterns))
    native = dict(seen.native) if isinstance(seen.native, Mapping) else dict.fromkeys(seen.native)
    for path, first in native.items():
        # there before the job when it first saw it, and gone now: read, then deleted by the job
        if first is not None and first[4] < started_ns and not os.path.lexists(path):
            opened.setdefault(path, {"read": True, "written_first": False, "stat": first, "relative": True})
    found += [(path, mtime, True) for path, mtime in _mtimes(p for p in native if p not in opened)]
    relative = {path: rel for path, _, rel in found}
    for path in listed_files([(path, mtime) for path, mtime, _ in found], started_ns):
        opened.setdefault(
            path, {"read": True, "written_first": False, "stat": stat_key(path), "relative": relative[path]}
        )
    return opened


def _imported(
    files: Mapping[str, str], r: Roots, dists: Installed, hashes: FileHashes, real: Callable[[str], str]
) -> _Imported:
    """Each imported module (name -> file) by where its file lies: the launcher's, a distribution's
    in site-packages, or the job's own code."""
    found = _Imported()
    for name, path in sorted(files.items()):
        kind = classify(path, r)
        if kind == "user":
            path = real(path)
            kind = classify(path, r)  # a symlink into site-packages is still site-packages
        if kind == "launcher":
            found.launcher[module_name(os.path.relpath(path, r.launcher))] = hashes.sha256(path) or "missing"
        elif kind == "site":
            owner = dists.owner(path, r.site)
            if owner:
                found.used.setdefault(owner, None)
                found.imported.setdefault(owner, set()).add(name.partition(".")[0])
        elif kind == "user" and name != "__main__" and os.path.isfile(path):
            found.code[name] = {"path": path, "sha256": hashes.sha256(path)}
    return found


def _executed(
    found: _Imported,
    files: Mapping[str, str],
    seen: Observed,
    r: Roots,
    launch_dir: str,
    hashes: FileHashes,
    real: Callable[[str], str],
) -> None:
    """Add to ``found.code`` the job's own source files it ran with ``exec`` (``exec:<name>``) that
    are neither imported modules (``files``) nor ``code_files``, and were there before it started."""
    known = {real(p) for p in [*files.values(), *seen.code_files]}
    for path in seen.executed:
        resolved = real(path)
        if resolved in known or classify(resolved, r) != "user" or not _existed_before(resolved, seen.started_ns):
            continue
        known.add(resolved)
        found.code[f"exec:{display_name(path, launch_dir)}"] = {"path": resolved, "sha256": hashes.sha256(resolved)}


def _libraries(maps_text: str, r: Roots, dists: Installed, hashes: FileHashes, used: dict[str, None]) -> dict[str, str]:
    """The shared libraries mapped that are no distribution's (path -> sha256); a distribution's
    library marks the distribution used (``used``, added to)."""
    libraries = {}
    for path in parse_maps(maps_text):
        real = os.path.realpath(path)
        kind = classify(real, r)
        if kind == "site":
            owner = dists.owner(real, r.site)
            if owner:
                used.setdefault(owner, None)
        elif kind == "user":
            libraries[real] = hashes.sha256(real)
    return libraries


MAX_OUTPUTS = 1000  # output files named in the record (a job may write many thousands)


def _data(
    opened: Mapping[str, dict],
    seen: Observed,
    r: Roots,
    code: set[str],
    run_dir: str,
    launch_dir: str,
    hashes: FileHashes,
) -> tuple[dict[str, str], dict]:
    """Recorded name -> sha256 of each data file the job read (``read_files``: its input, not
    ``code``) and of every file below what it named as data itself (``explicit``), a file changed
    or deleted while the job ran with a value no other run can have; and the job's outputs seen
    (``outputs``)."""
    data = {}
    found = read_files(
        opened,
        r,
        os.path.expanduser("~"),
        code=code | set(seen.code_files),
        environ=os.environ,
        started_ns=seen.started_ns,
        written=seen.written,
        born=seen.born,
    )
    names: dict[str, str] = {}
    for opened_as, kind in found.items():
        path = os.path.realpath(opened_as)
        named = names[opened_as] = display_name(
            _as_named(opened_as, path, launch_dir), launch_dir, opened[opened_as].get("relative", True)
        )
        if kind == OUTPUT:
            continue
        digest = hashes.sha256(path) or "unreadable"
        if kind == BOTH or opened[opened_as].get("stat") != stat_key(opened_as):
            if opened[opened_as].get("child"):  # a file a child process was given and wrote: its output
                found[opened_as] = OUTPUT
                continue
            how = "changed" if os.path.exists(path) else "deleted"
            digest = f"{how} while the job ran ({os.path.basename(run_dir)})"
            found[opened_as] = BOTH if how == "changed" else INPUT  # one deleted is no output
        data[named] = digest
    for named, rel in _named(seen.explicit).items():
        for path in (f for f in _files_below(named) if not under(f, r.ignored)):
            data[display_name(path, launch_dir, rel)] = hashes.sha256(path) or "unreadable"
    return data, outputs(found, names, opened, seen.written, r, launch_dir)


def outputs(
    found: Mapping[str, str],
    names: Mapping[str, str],
    opened: Mapping[str, dict],
    written: Mapping[str, str],
    r: Roots,
    launch_dir: str,
) -> dict:
    """The job's output files seen, for the record (never the key): recorded name -> ``OUTPUT``, or
    ``BOTH`` for an input it changed. Those it read back (``found``, named as ``names``), and
    those there now that it wrote through Python or natively in a watched directory; at most
    ``MAX_OUTPUTS``, ``{"files": ..., "total": N}``."""
    files = {names[p]: kind for p, kind in found.items() if kind != INPUT}
    caches = tool_caches(os.path.expanduser("~"), os.environ)
    made = [(p, info.get("relative", True)) for p, info in opened.items() if info.get("written")]
    made += [(p, True) for p, how in written.items() if how in (CREATED, WRITTEN)]
    for path, relative in made:
        if path in found or "\0" in path:
            continue
        real = os.path.realpath(path)
        if os.path.isfile(real) and _user_file(real, r, caches) and not _in_a_run(os.path.dirname(real)):
            files.setdefault(display_name(_as_named(path, real, launch_dir), launch_dir, relative), OUTPUT)
    _in_a_run.cache_clear()
    return {"files": dict(sorted(files.items())[:MAX_OUTPUTS]), "total": len(files)}


def _keyed(
    found: _Imported, seen: Observed, dists: Installed, r: Roots, real: Callable[[str], str]
) -> tuple[dict, dict[str, str]]:
    """(name -> identity of each used distribution the key holds, name -> version of each used only
    by a library's optional probe): all are keyed without ``direct_imports``."""
    used, imported = found.used, found.imported
    owner = functools.lru_cache(maxsize=None)(functools.partial(_owner, dists, r, real))
    by = None if seen.importers is None else imported_by(seen.importers, imported, owner)
    keyed = (
        set(used)
        if seen.direct_imports is None
        else keyed_distributions(used, imported, set(seen.direct_imports), {name: requires(name) for name in used}, by)
    )
    distributions = {name: distribution_identity(name) for name in sorted(keyed)}
    probed = {name: version_of(name) for name in sorted(set(used) - keyed)}
    return distributions, probed


def imported_by(
    importers: Mapping[str, Iterable[str]], imported: Mapping[str, set[str]], owner: Callable[[str], str | None]
) -> dict[str, set[str | None]]:
    """distribution -> the distributions whose code imported one of its top-level names (``None``:
    code no distribution owns, as the standard library's or C's), from ``importers`` (top-level
    name -> the files that imported it) and ``imported`` (distribution -> its top-level names
    imported); ``owner`` says which distribution a file is of. A distribution's imports of itself
    are left out."""
    by_top: dict[str, set[str]] = {}
    for dist, tops in imported.items():
        for top in tops:
            by_top.setdefault(top, set()).add(dist)
    out: dict[str, set[str | None]] = {}
    for top, files in importers.items():
        owners = {owner(f) for f in files}
        for dist in by_top.get(top, ()):
            if owners - {dist}:
                out.setdefault(dist, set()).update(owners - {dist})
    return out


def _owner(dists: Installed, r: Roots, real: Callable[[str], str], filename: str) -> str | None:
    """The distribution whose code ``filename`` (a running frame's) is, or None (the standard
    library, the interpreter's own ``<frozen ...>``, a file no distribution owns)."""
    if filename.startswith("<"):
        return None
    path = os.path.abspath(filename)
    if classify(path, r) == "user":
        path = real(path)  # a link into site-packages is still site-packages
    return dists.owner(path, r.site) if classify(path, r) == "site" else None


def _as_named(opened_as: str, real: str, launch_dir: str) -> str:
    """The path to record for a file opened as ``opened_as``: as the job reached it when that
    lies in the launch directory (a link there to data elsewhere is found again by its name
    there), else where it really is."""
    given = os.path.abspath(opened_as)
    return given if under(given, [launch_dir]) else real
