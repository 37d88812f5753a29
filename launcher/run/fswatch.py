"""Files opened by code the Python hooks cannot see, watched at the OS level (inotify).

``launcher.run.reads`` sees every open by Python code and TensorFlow's Python file APIs.
Native code that opens files by names it computed itself does not pass through them: a
``tf.io.read_file`` inside a ``tf.data`` map over names read from an index CSV, a C
extension, a child process. inotify reports every open of a file in a watched directory,
by any code of any process, so the job watches (with ``inotify_simple``, the only module
that imports it) the directories its data most likely lies in:

- its working directory, and below it;
- the directory of every data file its Python code reads (an index CSV, a manifest), and
  below it, added as the job reads them;

each tree up to ``MAX_DIRS`` directories in all (inotify watches are a per-user kernel
resource), leaving out run stores, version control, caches of compiled code, the Python
installation and system directories. A file opened there that existed before the job
started counts as read (``launcher.record.usage``); one modified later is an output.

What stays unseen: files opened natively outside the watched trees, and what a child
process reads from a pipe or a network. An event queue that overflowed is recorded as
a gap (``gaps``), and compare then never blames determinism for a difference.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from collections.abc import Iterable

MAX_DIRS = 1000  # inotify watches of one job; Linux allows 8,192 to 1M per user
READ_DELAY_S = 0.05  # how long the watch thread lets events gather before reading them
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then len bytes of name
_HEADER = _EVENT.size
SKIP_NAMES = frozenset({".git", ".hg", ".svn", "__pycache__", "node_modules", ".ipynb_checkpoints", ".mypy_cache",
                        ".pytest_cache", ".ruff_cache", ".tox", ".nox"})  # fmt: skip


def tree(root: str, skip: Iterable[str], budget: int) -> tuple[list[str], bool]:
    """The directories of ``root`` and below, breadth first (shallow ones first), at most
    ``budget``; and whether some were left out for the budget. Directories under ``skip``
    (prefixes), named in ``SKIP_NAMES``, or holding a run store (``index.sqlite``) are not entered."""
    skip = tuple(s.rstrip("/") + "/" for s in skip if s)
    out: list[str] = []
    queue = [root]
    while queue:
        directory = queue.pop(0)
        if (directory + "/").startswith(skip):
            continue
        if len(out) >= budget:
            return out, True
        out.append(directory)
        try:
            with os.scandir(directory) as entries:
                subdirs = sorted(e.path for e in entries
                                 if e.is_dir(follow_symlinks=False) and e.name not in SKIP_NAMES)  # fmt: skip
        except OSError:
            continue
        if os.path.exists(os.path.join(directory, "index.sqlite")):  # a run store: records, not data
            out.pop()
            continue
        queue += subdirs
    return out, False


class Watch:
    """An inotify instance whose thread collects the files opened in the watched directories."""

    def __init__(self, skip: Iterable[str], max_dirs: int = MAX_DIRS) -> None:
        from inotify_simple import INotify, flags

        self._flags = flags
        self._inotify = INotify()
        self._skip = tuple(skip)
        self._budget = max_dirs
        self._dirs: dict[int, str] = {}  # watch descriptor -> directory
        self._roots: set[str] = set()
        self._lock = threading.Lock()
        self.opened: dict[str, None] = {}  # paths, in first-opened order
        self._seen: set[tuple[int, bytes]] = set()
        self.gaps: list[str] = []
        self.truncated = False
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="launch-fswatch", daemon=True)
        self._thread.start()

    def add_tree(self, root: str, recursive: bool = True) -> None:
        """Watch ``root`` and, when ``recursive``, the directories below it (once per root,
        within the budget)."""
        root = os.path.realpath(root)
        with self._lock:
            if root in self._roots or not os.path.isdir(root) or (root + "/").startswith(
                    tuple(s.rstrip("/") + "/" for s in self._skip)):  # fmt: skip
                return
            self._roots.add(root)
            known = set(self._dirs.values())
            budget = self._budget - len(self._dirs)
            directories, truncated = tree(root, self._skip, budget) if recursive else ([root][:budget], budget < 1)
            self.truncated |= truncated
            for directory in directories:
                if directory in known:
                    continue
                try:
                    wd = self._inotify.add_watch(directory, self._flags.OPEN | self._flags.ONLYDIR)
                except OSError:  # a directory gone meanwhile, or the user's watch limit reached
                    continue
                self._dirs[wd] = directory

    @property
    def watched(self) -> int:
        return len(self._dirs)

    def _loop(self) -> None:
        import select

        poller = select.poll()
        poller.register(self._inotify.fileno(), select.POLLIN)
        while not self._stopping.is_set():
            if not poller.poll(100):
                continue
            time.sleep(READ_DELAY_S)  # let events gather: one wake-up per batch, not per open
            if not self._drain():
                return

    def _drain(self) -> bool:
        """Read and note every queued event; False once the descriptor is closed."""
        try:
            data = os.read(self._inotify.fileno(), 1 << 20)
        except BlockingIOError:
            return True
        except (OSError, ValueError):
            return False
        self._parse(data)
        return True

    def _parse(self, data: bytes) -> None:
        # Repeated opens of a file already seen (every epoch of a tf.data pipeline) cost one
        # unpack and one set lookup: the names stay bytes until they are new.
        overflow, isdir = self._flags.Q_OVERFLOW, self._flags.ISDIR
        seen, offset, end = self._seen, 0, len(data)
        while offset + _HEADER <= end:
            wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
            name = data[offset + _HEADER: offset + _HEADER + length].rstrip(b"\0")
            offset += _HEADER + length
            if mask & overflow:
                self._gap("the inotify event queue overflowed: some files opened natively were not seen")
            elif name and not mask & isdir and (wd, name) not in seen:
                seen.add((wd, name))
                directory = self._dirs.get(wd)
                if directory is not None:
                    self.opened.setdefault(os.path.join(directory, os.fsdecode(name)), None)

    def _gap(self, why: str) -> None:
        if why not in self.gaps:
            self.gaps.append(why)

    def stop(self) -> None:
        """Collect the events still queued, then stop watching."""
        self._stopping.set()
        self._thread.join(timeout=5)
        while self._drain_now():
            pass
        try:
            self._inotify.close()
        except (OSError, ValueError):
            pass

    def _drain_now(self) -> bool:
        """Read what is queued without waiting; False when nothing was."""
        import select

        try:
            ready, _, _ = select.select([self._inotify.fileno()], [], [], 0)
        except (OSError, ValueError):
            return False
        return bool(ready) and self._drain()


def start(skip: Iterable[str]) -> Watch | None:
    """A running watch, or None where inotify cannot be had (not Linux, no inotify_simple,
    no instance left for this user): the job then runs with the Python hooks alone."""
    try:
        return Watch(skip)
    except (ImportError, OSError, AttributeError):
        return None
