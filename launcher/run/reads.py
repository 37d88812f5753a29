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
  is kept, and the files found there count as read (``launcher.record.usage``).
  Listings by Python's import machinery are not the job's and are skipped.

Not seen (documented in docs/fingerprint.md): files that native code both finds and
opens itself (a C extension, a path computed in a graph from no listing).
``launcher.record_data(path)`` names such files explicitly.

Only paths, modes, the file's stat at first read, listings and the time recording
started are kept here; which of them are data, and their hashes, is decided after the
job (``launcher.record.usage``).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable

from launcher.record.filecache import stat_key

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

# path -> {"read": bool, "written_first": bool, "stat": stat key at first read}
opened: dict[str, dict] = {}
# Never data, and opened thousands of times by imports: skipped with string checks only.
_CODE = (".py", ".pyc", ".pyo", ".so", ".pth", ".pyi")
_SKIP: tuple[str, ...] = ("/proc/", "/sys/", "/dev/")
explicit: list[str] = []  # files and directories named by launcher.record_data()
listed: dict[str, None] = {}  # directories the job listed, in first-listed order
patterns: dict[str, None] = {}  # glob patterns matched by native code (tf.io.gfile.glob, Dataset.list_files)
started_ns = 0  # when recording started: a file modified later is the job's output, not its input
_installed = False
_recording = False
_listings = False


def name_explicitly(path: str | os.PathLike) -> str:
    """Record ``path`` (a file, or a directory: every file below it) as data the job read."""
    real = os.path.realpath(os.path.abspath(os.fspath(path)))
    if real not in explicit:
        explicit.append(real)
    return real


def note(path: object, writing: bool = False) -> None:
    """Record that the job opened ``path`` (for writing when ``writing``)."""
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str) or not path or "://" in path or path.endswith(_CODE):
        return  # file descriptors, URLs (gs://, s3://: not local files), code (hashed as modules)
    if not path.startswith("/"):
        path = os.path.join(os.getcwd(), path)
    if path.startswith(_SKIP):
        return
    info = opened.get(path)
    if info is None:
        info = opened[path] = {"read": False, "written_first": writing, "stat": None}
    if not writing and not info["read"]:
        info["read"] = True
        info["stat"] = stat_key(path)


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
    path = os.path.abspath(path)
    if not path.startswith(_SKIP):
        (patterns if pattern else listed).setdefault(path, None)


def _writing(mode: object, flags: object) -> bool:
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def _hook(event: str, args: tuple) -> None:
    if not _recording:
        return
    try:
        if event == "open" and args:
            note(args[0], _writing(args[1] if len(args) > 1 else None, args[2] if len(args) > 2 else None))
        elif event in ("os.listdir", "os.scandir") and _listings:
            # The import system and importlib.metadata list every directory on sys.path
            # (the script's own among them): that is not the job listing its data.
            if "importlib" not in sys._getframe(1).f_code.co_filename:
                note_listing(args[0] if args else None)
    except Exception:  # an audit hook must never break the job
        pass


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
    global _listings
    _listings = True


def stop() -> None:
    """Stop recording: what runs after the job (the launcher hashing what it used) is not the job."""
    global _recording, _listings
    _recording = _listings = False


# ---------------------------------------------------------------- native file APIs
def _names(value: object) -> Iterable[object]:
    """File names from a str, bytes, list, or eager string tensor argument."""
    numpy = getattr(value, "numpy", None)
    if callable(numpy):
        try:
            value = numpy()
        except Exception:  # a symbolic tensor: its value is not known in Python
            return []
    if isinstance(value, (str, bytes, os.PathLike)):
        return [os.fspath(value)]
    try:
        return [os.fspath(v) if isinstance(v, os.PathLike) else v for v in list(value)]  # type: ignore[arg-type]
    except TypeError:
        return []


def _wrap_init(cls: type, arg: str) -> None:
    original = cls.__init__
    if getattr(original, "_launch_reads", False):
        return

    def __init__(self, *args, **kwargs):
        value = kwargs.get(arg, args[0] if args else None)
        mode = kwargs.get("mode", args[1] if len(args) > 1 and isinstance(args[1], str) else "r")
        for name in _names(value):
            note(name, writing=_writing(mode, None))
        original(self, *args, **kwargs)

    __init__._launch_reads = True  # type: ignore[attr-defined]
    cls.__init__ = __init__


def wrap_native_readers() -> None:
    """Wrap TensorFlow's and h5py's file entry points (call after importing TensorFlow)."""
    import tensorflow as tf

    _wrap_init(tf.io.gfile.GFile, "name")
    for cls in (tf.data.TFRecordDataset, tf.data.TextLineDataset, tf.data.FixedLengthRecordDataset):
        _wrap_init(cls, "filenames")
    read_file = tf.io.read_file
    if not getattr(read_file, "_launch_reads", False):

        def traced_read_file(filename, name=None):
            for value in _names(filename):
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


def _wrap_listings() -> None:
    """TensorFlow lists and globs in native code: note the directory or pattern in Python.

    Wrapped where TensorFlow looks them up itself (``file_io``'s module globals, so
    ``tf.io.gfile.walk`` goes through them) and where users do (``tf.io.gfile``).
    """
    import tensorflow as tf
    from tensorflow.python.lib.io import file_io

    def wrapped(original, pattern: bool):
        if getattr(original, "_launch_reads", False):
            return original

        def listing(arg, *args, **kwargs):
            for value in _names(arg):
                note_listing(value, pattern=pattern)
            return original(arg, *args, **kwargs)

        listing._launch_reads = True  # type: ignore[attr-defined]
        return listing

    file_io.list_directory_v2 = tf.io.gfile.listdir = wrapped(file_io.list_directory_v2, pattern=False)
    file_io.get_matching_files_v2 = tf.io.gfile.glob = wrapped(file_io.get_matching_files_v2, pattern=True)
    list_files = tf.data.Dataset.list_files
    tf.data.Dataset.list_files = staticmethod(wrapped(list_files, pattern=True))
