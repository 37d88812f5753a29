"""Which files the job opened, and how: the raw material of the fingerprint's ``data``.

Installed first in the job process, before TensorFlow or any user code is imported:

- a Python audit hook (PEP 578) sees every ``open`` by Python code: ``open()``,
  ``io.open``, ``os.open`` and what is built on them (NumPy, pandas, PIL, pickle,
  Keras' ``.keras`` archives, downloads into ``~/.keras/datasets``);
- TensorFlow's and h5py's own file APIs read through native code the hook cannot see,
  so their Python entry points are wrapped: ``tf.io.gfile.GFile``,
  ``tf.io.read_file`` (eager), ``tf.data.TFRecordDataset``, ``TextLineDataset`` and
  ``FixedLengthRecordDataset`` (file names known in Python), and ``h5py.File``.

Not seen (documented in docs/fingerprint.md): files opened by native code through
other paths, e.g. a ``tf.io.read_file`` inside a ``tf.data`` map over file names
computed in the graph. ``launcher.record_data(path)`` names such files explicitly.

Only paths, modes and the file's stat at first read are kept here; which of them are
data, and their hashes, is decided after the job (``launcher.record.usage``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

from launcher.record.filecache import stat_key

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

# path -> {"read": bool, "written_first": bool, "stat": stat key at first read}
opened: dict[str, dict] = {}
# Never data, and opened thousands of times by imports: skipped with string checks only.
_CODE = (".py", ".pyc", ".pyo", ".so", ".pth", ".pyi")
_SKIP: tuple[str, ...] = ("/proc/", "/sys/", "/dev/")
explicit: list[str] = []  # files and directories named by launcher.record_data()
_installed = False


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


def _writing(mode: object, flags: object) -> bool:
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def _hook(event: str, args: tuple) -> None:
    if event == "open" and args:
        try:
            note(args[0], _writing(args[1] if len(args) > 1 else None, args[2] if len(args) > 2 else None))
        except Exception:  # an audit hook must never break the job
            pass


def install() -> None:
    """Start recording (once per process; audit hooks cannot be removed)."""
    global _installed, _SKIP
    if not _installed:
        prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
        _SKIP = (*_SKIP, *(p.rstrip("/") + "/" for p in prefixes if p and p != "/"))
        sys.addaudithook(_hook)
        _installed = True


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
    try:
        import h5py
    except ImportError:
        return
    _wrap_init(h5py.File, "name")
