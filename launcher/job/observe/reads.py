"""Which files the job opened, and how: the raw material of the fingerprint's ``data``.

Installed first in the job process, before TensorFlow or any user code is imported:

- a Python audit hook (PEP 578) sees every ``open`` by Python code: ``open()``,
  ``io.open``, ``os.open`` and what is built on them (NumPy, pandas, PIL, pickle,
  Keras' ``.keras`` archives, downloads into ``~/.keras/datasets``);
- TensorFlow's and h5py's own file APIs read through native code the hook cannot see,
  so their Python entry points are wrapped: ``tf.io.gfile.GFile``,
  ``tf.io.read_file`` (eager), ``tf.data.TFRecordDataset``, ``TextLineDataset`` and
  ``FixedLengthRecordDataset`` (file names known in Python), and ``h5py.File``;
- directory listings: a file read natively inside a ``tf.data`` map (a
  ``tf.io.read_file`` over file names, as ``image_dataset_from_directory`` and the
  image-loading tutorials do) is invisible, but the listing that found its name is
  not. Every directory the job listed (``os.listdir``, ``os.scandir`` and what is built
  on them: ``os.walk``, ``glob``, ``pathlib``; TensorFlow's ``tf.io.gfile.listdir``,
  ``walk`` and ``glob``) and every pattern TensorFlow matched (``Dataset.list_files``)
  is kept, and the files found there count as read (``launcher.record.probe.usage``).
  Listings by Python's import machinery are not the job's and are skipped.

Not seen (documented in docs/fingerprint.md): files that native code both finds and
opens itself (a C extension, a path computed in a graph from no listing).
``launcher.record_data(path)`` names such files explicitly.

Only paths, modes, the file's stat at first read, listings and the time recording
started are kept here; which of them are data, and their hashes, is decided after the
job (``launcher.record.probe.usage``).
"""

from __future__ import annotations

import functools
import os
import shlex
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from launcher.job.observe import callers
from launcher.record.filecache import stat_key

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

# path -> {"read": bool, "written_first": bool, "stat": stat key at first read,
#          "relative": the job named it relative to its working directory}, and "written": True
# once the job opened it for writing. "written_first": the job's first write made the file or
# replaced what was in it (``w``, ``O_TRUNC``) before any read found it; a write in place of a
# file that was there (``a``, ``O_WRONLY``) keeps what it held: that content may still be read.
opened: dict[str, dict] = {}
# Never data, and opened thousands of times by imports: skipped with string checks only.
_CODE = (".py", ".pyc", ".pyo", ".so", ".pth", ".pyi")
_SKIP: tuple[str, ...] = ("/proc/", "/sys/", "/dev/")
# The values say whether the job named the path relative to its working directory: the
# fingerprint then records it relative to the launch directory, as the job will find it
# when replayed elsewhere (absolute paths are recorded as such).
explicit: dict[str, bool] = {}  # files and directories named by launcher.record_data()
listed: dict[str, bool] = {}  # directories the job listed, in first-listed order
patterns: dict[str, bool] = {}  # glob patterns (glob, pathlib, tf.io.gfile.glob, Dataset.list_files)
started_ns = 0  # when recording started: a file modified later is the job's output, not its input
code_files: set[str] = set()  # files the job runs as code but not by import (a notebook): never data
# Source files whose code the job ran with exec, by path (runpy.run_path("cfg.py"), IPython's
# %run): code the key holds beside the imported modules; imports show up too, and are told apart later.
executed: dict[str, None] = {}
children: list[dict] = []  # the programs the job started: {"argv": [...], "cwd": ...}
# Existing files the job's own code named in a Dataset.from_tensor_slices (a list of shards):
# what a native reader given names computed inside the graph (an interleave, a map) opens.
named_in_datasets: dict[str, None] = {}
unnamed_readers: dict[str, None] = {}  # such readers when no named files or listings explain them
_watch = None  # a launcher.job.observe.fswatch.Watch: the directories of data files read are watched too
_broad: frozenset[str] = frozenset()  # directories watched without what lies below them (home, /tmp)
_installed = False
_recording = False
_listings = False


def name_explicitly(path: str | os.PathLike) -> str:
    """Record ``path`` (a file, or a directory: every file below it) as data the job read."""
    given = os.fspath(path)
    real = os.path.realpath(os.path.abspath(given))
    explicit.setdefault(real, not os.path.isabs(given))
    return real


def note(path: object, writing: bool = False, source: bool = False, replacing: bool = True) -> None:
    """Record that the job opened ``path`` (for writing when ``writing``, replacing what it held
    when ``replacing``; Python ``source`` it read as text when ``source``)."""
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str) or not path or "://" in path or "\0" in path or (path.endswith(_CODE) and not source):
        return  # file descriptors, URLs (gs://, s3://: not local files), code (hashed as modules), no file at all
    relative = not path.startswith("/")
    if relative:
        path = os.path.join(os.getcwd(), path)
    if path.startswith(_SKIP) and not path.startswith("/dev/shm/"):  # a RAM disk holds data
        return
    info = opened.get(path)
    if info is None:
        # a first write in place keeps what an existing file held: not the job's alone
        made = writing and (replacing or not os.path.lexists(path))
        info = opened[path] = {"read": False, "written_first": made, "stat": None, "relative": relative}
        if source:
            info["source"] = True
    if writing:
        info["written"] = True
    if writing and info["read"] and info["stat"] is None:
        info["written_first"] = True  # a read found nothing, then the job made it: its output (a tool's cache)
    elif not writing and (not info["read"] or info["stat"] is None):  # the first read that found a file
        info["read"] = True
        info["stat"] = stat_key(path)
        if _watch is not None and info["stat"] is not None:  # native code may read what lies beside it
            directory = os.path.realpath(os.path.dirname(path))
            _watch.add_tree(directory, recursive=directory not in _broad)


SHELLS = ("sh", "bash", "dash", "zsh", "ksh")  # their -c command is split into words too
_kind = None  # callers.code_kind of this interpreter, made on the first program started


def _started_by_the_job() -> bool:
    """Whether the first caller outside the standard library is the job's own code (a script
    running ``zcat``), not a library probing its platform (``uname -p``, ``ldconfig -p``)."""
    return _called_by_the_job(sys._getframe(2))


def _called_by_the_job(frame, imports: bool = True) -> bool:
    """Whether the first caller from ``frame`` outside the standard library and code made by
    ``exec`` of a string is the job's own; never, with ``imports`` False, through an import."""
    global _kind
    if _kind is None:
        _kind = callers.code_kind(callers.roots())
    while frame is not None and _kind(frame.f_code.co_filename) in ("frozen", "python"):
        if not imports and frame.f_code.co_filename.startswith("<frozen importlib"):
            return False
        frame = frame.f_back
    return frame is not None and _kind(frame.f_code.co_filename) == "user"


def note_child(argv: object, cwd: object = None) -> None:
    """Record a program the job started, and the existing files its arguments name as read
    (``zcat digits.csv.gz``): what it reads beyond them is seen only in watched directories."""
    if isinstance(argv, (str, bytes)):
        text = os.fsdecode(argv)
        try:
            args = shlex.split(text)
        except ValueError:
            args = text.split()
    else:
        try:
            args = [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in argv]  # type: ignore[union-attr]
        except TypeError:
            return
    where = os.fsdecode(cwd) if isinstance(cwd, (str, bytes, os.PathLike)) else os.getcwd()
    child = {"argv": args, "cwd": where}
    if child in children:
        return
    children.append(child)
    here = os.path.realpath(where) == os.path.realpath(os.getcwd())
    words = list(args[1:])
    if os.path.basename(args[0] if args else "") in SHELLS and "-c" in words[:-1]:  # sh -c 'zcat a.gz | ...'
        try:
            words += shlex.split(words[words.index("-c") + 1])
        except ValueError:
            pass
    for arg in words:
        for candidate in dict.fromkeys([arg, arg.partition("=")[2]]):
            # As the job named it where the child runs in the job's directory (a replay elsewhere finds it there).
            path = candidate if here or os.path.isabs(candidate) else os.path.join(where, candidate)
            if candidate and os.path.isfile(path):
                note(path)
                info = opened.get(os.path.join(os.getcwd(), path) if not os.path.isabs(path) else path)
                if info is not None:
                    info.setdefault("child", True)


def note_listing(path: object, pattern: bool = False) -> None:
    """Record that the job listed the directory ``path`` (or matched the glob ``pattern``)."""
    if not _listings:
        return
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if path is None:
        path = "."
    if not isinstance(path, str) or not path or "://" in path:
        return  # a file descriptor, or a URL (gs://, s3://: not local files)
    relative = not os.path.isabs(path)
    path = os.path.abspath(path)
    if not path.startswith(_SKIP):
        (patterns if pattern else listed).setdefault(path, relative)


def _writing(mode: object, flags: object) -> bool:
    """Whether an open makes or rewrites the file rather than reading what was there: ``r+``
    (``np.memmap(mode="r+")``) and a bare ``O_RDWR`` read it first."""
    if isinstance(mode, str):
        return any(c in mode for c in "wax") or ("+" in mode and "r" not in mode)
    return isinstance(flags, int) and bool(
        flags & (_WRITE_FLAGS & ~os.O_RDWR) or (flags & os.O_RDWR and flags & (os.O_CREAT | os.O_TRUNC))
    )


def _replacing(mode: object, flags: object) -> bool:
    """Whether a write makes the file anew or empties it (``w``, ``x``, ``O_TRUNC``, ``O_EXCL``),
    rather than writing into what was there (``a``, ``O_APPEND``, a bare ``O_WRONLY``)."""
    if isinstance(mode, str):
        return "w" in mode or "x" in mode
    return isinstance(flags, int) and bool(flags & (os.O_TRUNC | os.O_EXCL))


def _not_the_jobs_listings() -> frozenset[str]:
    """The files of code whose os.listdir/os.scandir calls are not the job listing its data:
    the import system and package metadata (they list every directory on sys.path, the
    script's own among them), the launcher's native watch, and glob and pathlib, whose patterns are recorded instead
    (``glob.glob`` audit events, ``Path.glob``), so that only what matches counts."""
    import glob
    import importlib.metadata
    import importlib.util
    import pathlib
    import pkgutil
    import site

    from launcher.job.observe import fswatch  # its walk of the watched trees is the launcher's, not the job's

    files = {"<frozen importlib._bootstrap_external>", "<frozen zipimport>"}
    files.update(m.__file__ for m in (glob, importlib.metadata, pathlib, pkgutil, site, fswatch) if m.__file__)
    for name in ("importlib_metadata", "pkg_resources"):  # the backport, setuptools' older API
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            files.add(spec.origin)
    return frozenset(files)


_not_the_jobs: frozenset[str] = frozenset()


def _hook(event: str, args: tuple) -> None:
    if not _recording:
        return
    try:
        if event == "open" and args:
            mode, flags = args[1] if len(args) > 1 else None, args[2] if len(args) > 2 else None
            writing = _writing(mode, flags)
            path = args[0]
            if isinstance(path, str) and path.endswith(".py") and not writing:
                # Python source the job's code reads as text, not by importing it: a config file
                # applied with exec(open("config/exp.py").read()), as nanoGPT's configurator does
                if _called_by_the_job(sys._getframe(1), imports=False):
                    note(path, source=True)
            else:
                note(path, writing, replacing=writing and _replacing(mode, flags))
        elif event in ("os.listdir", "os.scandir") and _listings:
            if sys._getframe(1).f_code.co_filename not in _not_the_jobs:
                note_listing(args[0] if args else None)
        elif event == "subprocess.Popen" and len(args) > 2 and _started_by_the_job():  # (executable, args, cwd, env)
            note_child(args[1] if args[1] is not None else [args[0]], args[2])
        elif event in ("os.system", "os.exec", "os.posix_spawn", "os.spawn") and args and _started_by_the_job():
            argv = args[0] if event == "os.system" else args[2] if event == "os.spawn" else args[1]
            note_child(argv)
        elif event == "exec" and args:
            filename = getattr(args[0], "co_filename", "")
            if filename and filename[0] != "<":
                path = os.path.abspath(filename)
                if not path.startswith(_SKIP):
                    executed.setdefault(path, None)
        elif event in ("glob.glob", "glob.glob/2") and _listings and args:
            root = args[2] if len(args) > 2 and args[2] is not None else None
            note_listing(os.path.join(os.fsdecode(root), os.fsdecode(args[0])) if root else args[0], pattern=True)
    except Exception as exc:  # an audit hook must never break the job, and a read it missed is a gap, never nothing
        _hook_failed(event, exc)


hook_failures: dict[str, str] = {}  # event -> the first error the hook met noting it: each a gap in what was seen


def _hook_failed(event: str, exc: Exception) -> None:
    try:
        hook_failures.setdefault(event, f"{type(exc).__name__}: {exc}"[:200])
    except Exception:  # noqa: BLE001 - even formatting the error may fail (a broken __str__): still a gap
        hook_failures.setdefault(event, type(exc).__name__)


def install() -> None:
    """Start recording (once per process; audit hooks cannot be removed)."""
    global _installed, _recording, _SKIP, started_ns
    if not _installed:
        prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
        _SKIP = (*_SKIP, *(p.rstrip("/") + "/" for p in prefixes if p and p != "/"))
        started_ns = time.time_ns()
        sys.addaudithook(_hook)
        _installed = True
    _recording = True


def watch_listings() -> None:
    """Record directory listings from now on: the job's code starts (the launcher's own
    start-up, listing sys.path for the installed distributions, is not the job)."""
    global _listings, _not_the_jobs
    _not_the_jobs = _not_the_jobs_listings()
    _listings = True


def watch_natively(launch_dirs: Iterable[str], skip: Iterable[str], broad: Iterable[str]) -> None:
    """Watch file opens at the OS level (``launcher.job.observe.fswatch``) in ``launch_dirs`` and, from
    now on, beside every data file the job reads; directories under ``skip`` never, those in
    ``broad`` (home, /tmp) without what lies below them."""
    global _watch, _broad
    from launcher.job.observe import fswatch

    _broad = frozenset(os.path.realpath(b) for b in broad)
    _watch = fswatch.start(skip)
    if _watch is not None:
        for launch_dir in launch_dirs:
            real = os.path.realpath(launch_dir)
            _watch.add_tree(real, recursive=real not in _broad)


def observation() -> dict:
    """How completely the job's reads were seen: the programs it started, the watch, the gaps."""
    gaps = []
    if children:
        ran = "; ".join(shlex.join(c["argv"])[:160] for c in children[:5]) + ("; ..." if len(children) > 5 else "")
        gaps.append(
            f"the job ran {len(children)} program(s) whose reads are seen only for the files their "
            f"arguments name and in watched directories: {ran}"
        )
    if unnamed_readers:
        gaps.append(
            f"{', '.join(unnamed_readers)} opened files whose names were computed inside the graph, "
            "from names the launcher did not see: only those in watched directories are in the key"
        )
    for event, error in hook_failures.items():
        gaps.append(
            f"the launcher failed to note the job's {event!r} event ({error}): what the job read then is not in the key"
        )
    watch = None
    if _watch is not None:
        watch = {
            "directories": _watch.watched,
            "truncated": _watch.truncated,
            "attributed": _watch.attributed,
            "opened_by_others": len(_watch.by_others),
            "others_in_key": bool(_watch.by_others and children),
        }
        gaps += _watch.gaps
    return {"children": [c["argv"] for c in children], "watch": watch, "gaps": gaps}


def natively_opened() -> dict[str, tuple | None]:
    """The files opened natively in the watched directories by the job, each with its stat when
    first seen: by its own process or one that may have been its (``launcher.job.observe.fswatch``),
    and, once its code started programs of its own (whose children may outlive them), by any."""
    if _watch is None:
        return {}
    return {**(_watch.by_others if children else {}), **_watch.opened}


def natively_written() -> dict[str, str]:
    """The files written or created in the watched directories while watched: path -> ``created``
    (made, or moved there, by the job: its output, whatever it held before), ``written`` (written
    in place by the job), or ``another process`` (by none that may have been the job's)."""
    if _watch is None:
        return {}
    if children:  # as for opens: once the job started programs, any process's may be the job's
        return {**_watch.written_by_others, **_watch.written}
    return {**dict.fromkeys(_watch.written_by_others, "another process"), **_watch.written}


@contextmanager
def paused() -> Iterator[None]:
    """Not recording meanwhile: the launcher reads what the job used (a checkpoint's facts)."""
    global _recording, _listings
    was = _recording, _listings
    _recording = _listings = False
    try:
        yield
    finally:
        _recording, _listings = was


def stop() -> None:
    """Stop recording: what runs after the job (the launcher hashing what it used) is not the job."""
    global _recording, _listings
    _recording = _listings = False
    if _watch is not None:
        _watch.stop()


# ---------------------------------------------------------------- native file APIs
def _names(value: object, reader: str | None = None) -> Iterable[object]:
    """File names from a str, bytes, list, or eager string tensor argument. A symbolic tensor's
    value is not known in Python: for a ``reader`` of files, the files the job named in its
    datasets are taken as what it reads (``_read_unnamed``)."""
    if type(value).__module__.startswith("tensorflow") and hasattr(value, "dtype"):  # a tensor
        try:
            value = value.numpy()
        except Exception:  # a symbolic tensor (no ``numpy``, or one that raises)
            if reader is not None:
                _read_unnamed(reader)
            return []
    if isinstance(value, (str, bytes, os.PathLike)):
        return [os.fspath(value)]
    try:
        return [os.fspath(v) if isinstance(v, os.PathLike) else v for v in list(value)]  # type: ignore[arg-type]
    except TypeError:
        return []


def _read_unnamed(reader: str) -> None:
    """A native ``reader`` was given names computed inside the graph (``Dataset.interleave(
    tf.data.TFRecordDataset)``). The files the job named in ``from_tensor_slices`` are noted
    as read; with none, and no listing or pattern to take names from (``make_csv_dataset``,
    ``image_dataset_from_directory``), it is a gap in what was observed."""
    if named_in_datasets:
        for path in named_in_datasets:
            note(path)
    elif not listed and not patterns:
        unnamed_readers.setdefault(reader, None)


MAX_NAMED = 100_000  # strings of one from_tensor_slices looked at as file names


def _files_named(value: object) -> list[str]:
    """The existing files among the strings of a ``from_tensor_slices`` argument (nested
    tuples, lists, dicts, NumPy string arrays)."""
    import numpy as np

    out: list[str] = []
    stack = [value]
    while stack and len(out) < MAX_NAMED:
        v = stack.pop()
        if isinstance(v, dict):
            stack += v.values()
        elif isinstance(v, (tuple, list)):
            if v and all(isinstance(e, (str, bytes, os.PathLike)) for e in v[:MAX_NAMED]):
                out += [os.fsdecode(os.fspath(e)) for e in v[:MAX_NAMED]]
            else:
                stack += v
        elif isinstance(v, np.ndarray) and v.dtype.kind in "SUO":
            out += [
                os.fsdecode(e) if isinstance(e, bytes) else e
                for e in v.ravel()[:MAX_NAMED].tolist()
                if isinstance(e, (str, bytes))
            ]
    return [n for n in out if n and "\0" not in n and os.path.isfile(n)]  # as named: note() keeps it relative


def _wrap_from_tensor_slices(tf) -> None:
    original = tf.data.Dataset.from_tensor_slices
    if getattr(original, "_launch_reads", False):
        return

    @functools.wraps(original)
    def from_tensor_slices(tensors, *args, **kwargs):
        if _recording and _started_by_the_job():
            named_in_datasets.update(dict.fromkeys(_files_named(tensors)))
        return original(tensors, *args, **kwargs)

    from_tensor_slices._launch_reads = True  # type: ignore[attr-defined]
    tf.data.Dataset.from_tensor_slices = staticmethod(from_tensor_slices)


def _wrap_init(cls: type, arg: str, reader: str | None = None) -> None:
    """``cls.__init__`` noting the files its argument ``arg`` names (``reader``: its public name)."""
    original = cls.__init__
    if getattr(original, "_launch_reads", False):
        return

    def __init__(self, *args, **kwargs):
        value = kwargs.get(arg, args[0] if args else None)
        mode = kwargs.get("mode", args[1] if len(args) > 1 and isinstance(args[1], str) else "r")
        for name in _names(value, reader=reader):
            note(name, writing=_writing(mode, None), replacing=_replacing(mode, None))
        original(self, *args, **kwargs)

    __init__._launch_reads = True  # type: ignore[attr-defined]
    cls.__init__ = __init__


def wrap_native_readers() -> None:
    """Wrap TensorFlow's and h5py's file entry points (call after importing TensorFlow)."""
    import tensorflow as tf

    _wrap_init(tf.io.gfile.GFile, "name")
    data = tf.data
    for cls, name in (
        (data.TFRecordDataset, "TFRecordDataset"),
        (data.TextLineDataset, "TextLineDataset"),
        (data.FixedLengthRecordDataset, "FixedLengthRecordDataset"),
        (data.experimental.CsvDataset, "experimental.CsvDataset"),
    ):
        _wrap_init(cls, "filenames", reader=f"tf.data.{name}")
    _wrap_from_tensor_slices(tf)
    _wrap_checkpoint_reads(tf)
    read_file = tf.io.read_file
    if not getattr(read_file, "_launch_reads", False):

        def traced_read_file(filename, name=None):
            for value in _names(filename, reader="tf.io.read_file"):
                note(value)
            return read_file(filename, name=name)

        traced_read_file._launch_reads = True  # type: ignore[attr-defined]
        tf.io.read_file = traced_read_file
    _wrap_listings()
    try:
        import h5py
    except ImportError:
        return
    _wrap_init(h5py.File, "name")


def checkpoint_files(path: object) -> list[str]:
    """The files a TensorFlow checkpoint restore reads: ``PREFIX.index`` and ``PREFIX.data-*``
    of a prefix (``pretrained/ckpt-3``), or of the latest checkpoint of a directory and its
    ``checkpoint`` state file. TensorFlow opens them natively, unseen by the audit hook."""
    if isinstance(path, (bytes, os.PathLike)):
        path = os.fsdecode(path)
    if not isinstance(path, str) or not path:
        return []
    import glob

    with paused():  # the launcher's own globbing and state reading are not the job's listings
        out = []
        if os.path.isdir(path):
            state = os.path.join(path, "checkpoint")
            import tensorflow as tf

            out.append(state)
            path = tf.train.latest_checkpoint(path) or ""
            if not path:
                return [state] if os.path.isfile(state) else []
        out += [path + ".index", *sorted(glob.glob(glob.escape(path) + ".data-*"))]
    return [f for f in out if os.path.isfile(f)]


def _wrap_checkpoint_reads(tf) -> None:
    """``tf.train.Checkpoint.restore``/``read``, ``tf.compat.v1.train.Saver.restore``,
    ``tf.train.load_checkpoint``/``list_variables``/``load_variable`` and ``Dataset.cache(filename)``:
    the existing files they read count as data wherever they lie (a pretrained model in a
    shared directory, a stale cache of the data the job would otherwise read)."""

    def noting(original, arg: str, position: int):
        if getattr(original, "_launch_reads", False):
            return original

        @functools.wraps(original)
        def restoring(*args, **kwargs):
            for path in checkpoint_files(kwargs.get(arg, args[position] if len(args) > position else None)):
                note(path)
            return original(*args, **kwargs)

        restoring._launch_reads = True  # type: ignore[attr-defined]
        return restoring

    checkpoint, saver = tf.train.Checkpoint, tf.compat.v1.train.Saver
    checkpoint.restore = noting(checkpoint.restore, "save_path", 1)
    checkpoint.read = noting(checkpoint.read, "save_path", 1)
    saver.restore = noting(saver.restore, "save_path", 2)
    for name in ("load_checkpoint", "list_variables", "load_variable"):
        setattr(tf.train, name, noting(getattr(tf.train, name), "ckpt_dir_or_file", 0))
    # A tf.data cache file is a bundle too: an existing one is read instead of the data it was made from.
    tf.data.Dataset.cache = noting(tf.data.Dataset.cache, "filename", 1)


def _noting(original, name: str, pattern: bool):
    """``original`` wrapped to note its argument ``name`` (by position first, or keyword) as
    a listed directory or a matched pattern."""
    if getattr(original, "_launch_reads", False):
        return original

    @functools.wraps(original)
    def listing(*args, **kwargs):
        for value in _names(args[0] if args else kwargs.get(name)):
            note_listing(value, pattern=pattern)
        return original(*args, **kwargs)

    listing._launch_reads = True  # type: ignore[attr-defined]
    return listing


def _wrap_listings() -> None:
    """Listings and globs whose directory or pattern the audit hook cannot see.

    TensorFlow lists and matches in native code: every ``tf.io.gfile`` listing (v1 and v2,
    ``walk`` included) goes through ``_pywrap_file_io.GetChildren`` and
    ``GetMatchingFiles``, wrapped where ``file_io`` looks them up; ``Dataset.list_files``
    matches inside the graph, so its pattern is noted when it is known in Python.
    ``pathlib.Path.glob`` raises no audit event with its pattern.
    """
    import pathlib

    import tensorflow as tf
    from tensorflow.python.lib.io import _pywrap_file_io

    _pywrap_file_io.GetChildren = _noting(_pywrap_file_io.GetChildren, "dir", pattern=False)
    _pywrap_file_io.GetMatchingFiles = _noting(_pywrap_file_io.GetMatchingFiles, "pattern", pattern=True)
    tf.data.Dataset.list_files = staticmethod(_noting(tf.data.Dataset.list_files, "file_pattern", pattern=True))
    for method, below in (("glob", ""), ("rglob", "**")):
        original = getattr(pathlib.Path, method)
        if getattr(original, "_launch_reads", False):
            continue

        def globbing(self, pattern, *args, _original=original, _below=below, **kwargs):
            note_listing(os.path.join(os.fspath(self), _below, os.fspath(pattern)), pattern=True)
            return _original(self, pattern, *args, **kwargs)

        globbing._launch_reads = True  # type: ignore[attr-defined]
        setattr(pathlib.Path, method, functools.wraps(original)(globbing))
