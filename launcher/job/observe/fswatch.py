"""Files opened by code the Python hooks cannot see, watched at the OS level (fanotify, inotify).

``launcher.job.observe.reads`` sees every open by Python code and TensorFlow's Python file APIs.
Native code that opens files by names it computed itself does not pass through them: a
``tf.io.read_file`` inside a ``tf.data`` map over names read from an index CSV, a C
extension, a child process. The kernel reports every open of a file in a watched
directory, so the job watches the directories its data most likely lies in:

- its working directory, and below it;
- the directory of every data file its Python code reads (an index CSV, a manifest), and
  below it, added as the job reads them;

each tree up to ``MAX_DIRS`` directories in all (watches are a per-user kernel resource),
leaving out run stores, version control, caches of compiled code, the Python installation
and system directories. A file opened there that existed before the job started counts as
read (``launcher.record.probe.usage``), and its stat when the watch first saw it opened tells
whether it was there before a job that then deleted it (an input all the same, as a
checkpoint a job restores and then rotates away is); one created or modified after the job
started is an output.

The watch also notes the files written (closed after writing), made or moved into the watched
directories, and watches every directory made in one while the job runs (the files already in
it when its watch begins are made too): a file the job made or rewrote and then read back is
its output, however it was written (``SaveV2``, ``tf.io.write_file``, a C library), never its
input (``launcher.record.probe.usage.origin``); ``birth_ns`` tells a file made during the run
that kept older times.

Two kernel interfaces, the better first, each behind a small backend class here (ctypes for
fanotify, ``inotify_simple`` for inotify; no other module touches either):

- fanotify (Linux 5.13 and later for a user without privileges) tells whose open it was:
  the job's own process (its threads, TensorFlow's native code) or another one. An open by
  another process while the job had none of its own (no child running, none reaped since
  the watch last read its events) is kept apart (``by_others``): another job or a program
  reading beside the data at the same time is not the job's input. One while the job had a
  child (its program, a library's ``uname -p``) may have been the child's, and counts;
  ``launcher.job.observe.reads`` counts them all once the job's code started programs of its own,
  whose children may outlive them;
- inotify, where fanotify is refused (an older kernel, a container's seccomp profile) or a
  directory cannot be marked (a file system without file handles), reports every open by
  any process, so another program reading there at the same time puts its files in the key.

What stays unseen: files opened natively outside the watched trees, and what a child
process reads from a pipe or a network. An event queue that overflowed is recorded as
a gap (``gaps``), and compare then never blames determinism for a difference.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import threading
import time
from collections.abc import Iterable, Iterator

from launcher.record import layout
from launcher.record.filecache import stat_key

MAX_DIRS = 1000  # watched directories of one job; Linux allows 8,192 to 1M per user
READ_DELAY_S = 0.05  # how long the watch thread lets events gather before reading them
SKIP_NAMES = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        "node_modules",
        ".ipynb_checkpoints",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        ".nox",
    }
)
OVERFLOW = object()  # what a backend yields for a lost event queue
# What a backend reports of a file: opened; written (closed after writing: in place, or new);
# created in its directory, or moved there (a file written under a temporary name, then renamed,
# as TensorFlow's checkpoints and its ``checkpoint`` state file are)
OPENED, WRITTEN, CREATED = "opened", "written", "created"
# A directory made in a watched one (watched too, and what it holds by then is the job's output),
# or moved there (watched too)
NEW_DIR, MOVED_DIR = "new directory", "moved directory"
_OVERFLOW_GAP = "the {} event queue overflowed: some files opened natively were not seen"


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
                subdirs = sorted(
                    e.path for e in entries if e.is_dir(follow_symlinks=False) and e.name not in SKIP_NAMES
                )
        except OSError:
            continue
        if layout.StorePaths(directory).index.exists():  # a run store: records, not data
            out.pop()
            continue
        queue += subdirs
    return out, False


class Inotify:
    """inotify: every open, write and creation in a directory, by any process (whose it was is
    unknown: ``None``)."""

    name = "inotify"

    def __init__(self) -> None:
        from inotify_simple import INotify, flags

        self._inotify = INotify(nonblocking=True)
        self._mask = flags.OPEN | flags.CLOSE_WRITE | flags.CREATE | flags.MOVED_TO | flags.ONLYDIR
        self._kinds = ((flags.OPEN, OPENED), (flags.CLOSE_WRITE, WRITTEN), (flags.CREATE | flags.MOVED_TO, CREATED))
        self._dir_kinds = ((flags.CREATE, NEW_DIR), (flags.MOVED_TO, MOVED_DIR))
        self._overflow, self._isdir = flags.Q_OVERFLOW, flags.ISDIR
        self._event = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then len bytes of name

    def fileno(self) -> int:
        return self._inotify.fileno()

    def add(self, directory: str) -> object:
        """Watch one directory (OSError if it cannot be); the token its events carry."""
        return self._inotify.add_watch(directory, self._mask)

    def discard(self, directory: str, token: object) -> None:
        self._inotify.rm_watch(token)

    def events(self, data: bytes) -> Iterator[tuple[object, bytes, bool | None, str]]:
        """(token, file name, whether the job's own process did it, ``OPENED``, ``WRITTEN`` or
        ``CREATED``) per event on a file in ``data``."""
        header, offset, end = self._event.size, 0, len(data)
        while offset + header <= end:
            wd, mask, _cookie, length = self._event.unpack_from(data, offset)
            name = data[offset + header : offset + header + length].rstrip(b"\0")
            offset += header + length
            if mask & self._overflow:
                yield OVERFLOW, b"", None, OPENED
            elif name:
                for bits, kind in self._dir_kinds if mask & self._isdir else self._kinds:
                    if mask & bits:
                        yield wd, name, None, kind

    def close(self) -> None:
        self._inotify.close()


class Fanotify:
    """fanotify, reporting each open, write and creation by its directory's file handle and its
    name, and the pid when it is this process (an unprivileged listener is told no other pid)."""

    name = "fanotify"
    _INIT = 0x1 | 0x2 | 0x400 | 0x800  # FAN_CLOEXEC | FAN_NONBLOCK | FAN_REPORT_DIR_FID | FAN_REPORT_NAME
    _MARK = 0x1 | 0x4 | 0x8  # FAN_MARK_ADD | FAN_MARK_DONT_FOLLOW | FAN_MARK_ONLYDIR (as the handle is taken)
    _MARK_REMOVE = 0x2 | 0x4 | 0x8  # FAN_MARK_REMOVE | FAN_MARK_DONT_FOLLOW | FAN_MARK_ONLYDIR
    # FAN_OPEN | FAN_CLOSE_WRITE of the directory's files (FAN_EVENT_ON_CHILD), and FAN_CREATE |
    # FAN_MOVED_TO of its entries (reported by name, FAN_REPORT_DIR_FID), directories too (FAN_ONDIR)
    _EVENTS = 0x20 | 0x08 | 0x08000000 | 0x100 | 0x80 | 0x40000000
    _KINDS = ((0x20, OPENED), (0x08, WRITTEN), (0x100 | 0x80, CREATED))
    _DIR_KINDS = ((0x100, NEW_DIR), (0x80, MOVED_DIR))  # a directory's own opens are no file's
    _ONDIR = 0x40000000
    _Q_OVERFLOW = 0x4000
    _DFID_NAME = 2  # FAN_EVENT_INFO_TYPE_DFID_NAME
    _AT_FDCWD = -100
    _MAX_HANDLE = 128
    _META = struct.Struct("=IBBHQii")  # struct fanotify_event_metadata: len, vers, -, metadata_len, mask, fd, pid
    _INFO = struct.Struct("=BBH8sIi")  # info header: type, -, len; fsid; struct file_handle: bytes, type

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self._init, self._mark, self._to_handle = libc.fanotify_init, libc.fanotify_mark, libc.name_to_handle_at
        self._mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]
        fd = self._init(self._INIT, os.O_RDONLY)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "fanotify_init")
        self._fd = fd
        self._pid = os.getpid()

    def fileno(self) -> int:
        return self._fd

    def _handle(self, directory: str) -> tuple[int, bytes]:
        """The directory's file handle, as an event names its directory."""
        buffer = ctypes.create_string_buffer(struct.pack("Ii", self._MAX_HANDLE, 0) + bytes(self._MAX_HANDLE))
        mount_id = ctypes.c_int()
        if self._to_handle(self._AT_FDCWD, os.fsencode(directory), buffer, ctypes.byref(mount_id), 0) < 0:
            raise OSError(ctypes.get_errno(), "name_to_handle_at", directory)
        size, kind = struct.unpack_from("Ii", buffer.raw)
        return kind, buffer.raw[8 : 8 + size]

    def add(self, directory: str) -> object:
        """Mark one directory (OSError if it cannot be: a file system without file handles);
        the token its events carry."""
        token = self._handle(directory)
        if self._mark(self._fd, self._MARK, self._EVENTS, self._AT_FDCWD, os.fsencode(directory)) < 0:
            raise OSError(ctypes.get_errno(), "fanotify_mark", directory)
        return token

    def discard(self, directory: str, token: object) -> None:
        self._mark(self._fd, self._MARK_REMOVE, self._EVENTS, self._AT_FDCWD, os.fsencode(directory))

    def events(self, data: bytes) -> Iterator[tuple[object, bytes, bool | None, str]]:
        """(token, file name, whether the job's own process did it, ``OPENED``, ``WRITTEN`` or
        ``CREATED``) per event on a file in ``data`` (one the kernel merged: each of its kinds)."""
        offset, end = 0, len(data)
        while offset + self._META.size <= end:
            length, _version, _, meta_length, mask, fd, pid = self._META.unpack_from(data, offset)
            if length < self._META.size:
                return
            if fd >= 0:  # not asked for (FAN_REPORT_DIR_FID reports none); never leak one
                os.close(fd)
            if mask & self._Q_OVERFLOW:
                yield OVERFLOW, b"", None, OPENED
            info, event_end = offset + meta_length, offset + length
            while not mask & self._Q_OVERFLOW and info + self._INFO.size <= event_end:  # the records after it
                kind, _, info_length, _fsid, size, handle_kind = self._INFO.unpack_from(data, info)
                if info_length < 4:
                    break
                if kind == self._DFID_NAME:
                    start = info + self._INFO.size
                    name = data[start + size : info + info_length].split(b"\0", 1)[0]
                    if name:
                        token = (handle_kind, data[start : start + size])
                        for bits, kind in self._DIR_KINDS if mask & self._ONDIR else self._KINDS:
                            if mask & bits:
                                yield token, name, pid == self._pid, kind
                    break
                info += info_length
            offset += length

    def close(self) -> None:
        os.close(self._fd)


def backends() -> list:
    """The kernel interfaces this process can have, the better first (none: an empty list)."""
    out: list = []
    for backend in (Fanotify, Inotify):
        try:
            out.append(backend())
        except (ImportError, OSError, AttributeError):  # no such call here, refused, or no instance left
            continue
    return out


class Watch:
    """The watched directories and a thread that collects the files opened in them: by the
    job's own process, or by one it cannot tell (``opened``), and by another (``by_others``)."""

    def __init__(self, skip: Iterable[str], max_dirs: int = MAX_DIRS, using: list | None = None) -> None:
        self._backends = backends() if using is None else using
        if not self._backends:
            raise OSError(errno.ENOSYS, "no fanotify or inotify here")
        self._skip = tuple(skip)
        self._budget = max_dirs
        self._dirs: dict[tuple[int, object], str] = {}  # (backend, token) -> directory
        self._roots: set[str] = set()
        self._lock = threading.Lock()
        # path -> its stat when first seen (``filecache.stat_key``; None if gone by then), in
        # first-opened order: whether the file was there before the job, and unchanged since
        self.opened: dict[str, tuple | None] = {}
        self.by_others: dict[str, tuple | None] = {}
        # path -> CREATED (made, or moved there) or WRITTEN (only written: in place) while watched,
        # by the job (as its opens are told apart), and by another process
        self.written: dict[str, str] = {}
        self.written_by_others: dict[str, str] = {}
        self._seen: set[tuple] = set()
        self._reaped = reaped_children()  # children reaped when the current window began
        self._pid = os.getpid()
        self.gaps: list[str] = []
        self.truncated = False
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="launch-fswatch", daemon=True)
        self._thread.start()

    @property
    def attributed(self) -> bool:
        """Whether every watched directory tells the job's opens from other processes'."""
        return all(isinstance(self._backends[i], Fanotify) for i, _ in self._dirs)

    def add_tree(self, root: str, recursive: bool = True) -> list[str]:
        """Watch ``root`` and, when ``recursive``, the directories below it (once per root,
        within the budget); the directories of it now watched."""
        root = os.path.realpath(root)
        with self._lock:
            if (
                root in self._roots
                or not os.path.isdir(root)
                or (root + "/").startswith(tuple(s.rstrip("/") + "/" for s in self._skip))
            ):
                return []
            self._roots.add(root)
            if len(self._dirs) >= self._budget:  # directories made and removed again (a save's temporary one)
                self._forget_removed()
            known = set(self._dirs.values())
            budget = self._budget - len(self._dirs)
            directories, truncated = tree(root, self._skip, budget) if recursive else ([root][:budget], budget < 1)
            self.truncated |= truncated
            for directory in directories:
                if directory not in known:
                    self._add(directory)
            return directories

    def _forget_removed(self) -> None:
        """Leave out of the budget the watched directories removed since (their marks went with them)."""
        for key, directory in list(self._dirs.items()):
            if not os.path.isdir(directory):
                del self._dirs[key]
                self._roots.discard(directory)

    def _new_directory(self, path: str, made: bool) -> None:
        """A directory made (``made``) or moved into a watched one: watched too, and the files
        already in one made while the job ran (before its watch began) are its output."""
        if os.path.basename(path) in SKIP_NAMES:
            return
        for directory in self.add_tree(path):
            if not made:
                continue
            try:
                with os.scandir(directory) as entries:
                    files = [e.path for e in entries if e.is_file(follow_symlinks=False)]
            except OSError:
                continue
            for file in files:
                _note_write(self.written, file, CREATED)

    def _add(self, directory: str) -> None:
        for index, backend in enumerate(self._backends):
            try:
                token = backend.add(directory)
            except OSError:  # gone meanwhile, the user's limit reached, or not markable: the next backend
                continue
            known = self._dirs.setdefault((index, token), directory)
            if known == directory or _same_directory(known, directory):  # a bind mount: watched already
                return
            # Two file systems gave two directories the same handle: the next backend tells them apart.
            backend.discard(directory, token)

    @property
    def watched(self) -> int:
        return len(self._dirs)

    def _loop(self) -> None:
        import select

        poller = select.poll()
        for backend in self._backends:
            poller.register(backend.fileno(), select.POLLIN)
        try:
            while not self._stopping.is_set():
                mark = reaped_children()  # before waiting: an event the poll misses comes after it
                if not poller.poll(100):
                    self._reaped = mark  # nothing happened meanwhile: a new window
                    continue
                time.sleep(READ_DELAY_S)  # let events gather: one wake-up per batch, not per open
                if not self._drain():
                    return
        except Exception as exc:  # noqa: BLE001 - never the job's failure, but never silent
            self._gap(f"the watch stopped early ({type(exc).__name__}: {exc}): later native opens were not seen")

    def _drain(self) -> bool:
        """Read and note every queued event; False once a backend is closed. An open by another
        process counts as the job's when, at some moment since the previous read, the job had
        a child: one running or unreaped now, or one reaped since (decided after the read)."""
        mark = reaped_children()  # the next window starts before this read
        batches, alive = [], True
        for index, backend in enumerate(self._backends):
            while True:  # until the queue is empty (both descriptors are non-blocking)
                try:
                    data = os.read(backend.fileno(), 1 << 20)
                except BlockingIOError:
                    break
                except (OSError, ValueError):
                    alive = False
                    break
                if not data:
                    break
                batches.append((index, data))
        since = self._reaped
        window = {"child": None}

        def had_a_child() -> bool:
            if window["child"] is None:  # children now first, then the reaped: none falls between
                window["child"] = has_children() or reaped_children() > since
            return window["child"]

        for index, data in batches:
            self._parse(index, data, had_a_child)
        self._reaped = mark
        return alive

    def _parse(self, index: int, data: bytes, had_a_child) -> None:
        # Repeated events on a file already counted (every epoch of a tf.data pipeline opening its
        # files) cost one set lookup: the names stay bytes until they are new.
        seen = self._seen
        for token, name, own, kind in self._backends[index].events(data):
            if token is OVERFLOW:
                self._gap(_OVERFLOW_GAP.format(self._backends[index].name))
            elif (index, token, name, kind) not in seen:
                directory = self._dirs.get((index, token))
                if directory is None:
                    continue
                path = os.path.join(directory, os.fsdecode(name))
                if own is False and not had_a_child():  # another's, unless a later event is the job's
                    if kind in (WRITTEN, CREATED):
                        _note_write(self.written_by_others, path, kind)
                    elif kind == OPENED and path not in self.by_others:
                        self.by_others[path] = stat_key(path, resolved=True)
                    continue
                seen.add((index, token, name, kind))
                if kind in (NEW_DIR, MOVED_DIR):
                    self._new_directory(path, made=kind == NEW_DIR)
                elif kind != OPENED:
                    _note_write(self.written, path, kind)
                elif path not in self.opened:
                    self.opened[path] = self.by_others.get(path) or stat_key(path, resolved=True)

    def _gap(self, why: str) -> None:
        if why not in self.gaps:
            self.gaps.append(why)

    def stop(self) -> None:
        """Collect the events still queued, then stop watching (only in the process that
        started the watch: a forked child shares its descriptors, and must not read them away)."""
        if os.getpid() != self._pid:
            return
        self._stopping.set()
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            try:
                self._drain()
            except Exception as exc:  # noqa: BLE001
                self._gap(f"the watch stopped early ({type(exc).__name__}: {exc}): later native opens were not seen")
        for backend in self._backends:
            try:
                backend.close()
            except (OSError, ValueError):
                pass


def _note_write(written: dict[str, str], path: str, kind: str) -> None:
    """``path`` was written or created: made while watched outranks written in place."""
    if written.get(path) != CREATED:
        written[path] = kind


def _same_directory(a: str, b: str) -> bool:
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


_STATX_BTIME = 0x800
_STATX = struct.Struct("=I4x8x4x4x4x2x2xQ8x8x8x16sqI")  # struct statx to stx_btime: mask, ..., ino, ..., btime
_statx = None


def birth_ns(path: str) -> tuple[int, int] | None:
    """(inode, birth time in ns) of the file at ``path`` (links followed), from ``statx``; None
    where the file system or the C library keeps no birth time, or the file is gone. A file
    born after the job started is one it made, whatever its modification time says (a copy
    that kept its source's, an extracted archive's)."""
    global _statx
    if _statx is None:
        try:
            _statx = ctypes.CDLL(None, use_errno=True).statx
        except AttributeError:  # a C library before glibc 2.28
            _statx = False
    if not _statx:
        return None
    buffer = ctypes.create_string_buffer(256)  # sizeof(struct statx)
    if _statx(-100, os.fsencode(path), 0, ctypes.c_uint(_STATX_BTIME | 0x100), buffer) != 0:  # AT_FDCWD; STATX_INO
        return None
    mask, ino, _atime, seconds, nanoseconds = _STATX.unpack_from(buffer.raw)
    if not mask & _STATX_BTIME:
        return None
    return ino, seconds * 1_000_000_000 + nanoseconds


def reaped_children() -> int:
    """A count that grows whenever this process reaps a child (its children's page faults)."""
    import resource

    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt


_SIGCHLD_BIT = 1 << (17 - 1)  # SIGCHLD in /proc/PID/status's SigIgn mask (Linux)


def has_children() -> bool:
    """Whether a thread of this process has a child now, running or unreaped. True too where
    that cannot be told: Linux's ``/proc/PID/task/TID/children`` unreadable, or SIGCHLD
    ignored (children are then reaped unseen, never counted in the reaped)."""
    tasks = f"/proc/{os.getpid()}/task"
    try:
        with open(f"/proc/{os.getpid()}/status", "rb") as status:
            for line in status:
                if line.startswith(b"SigIgn:") and int(line.split()[1], 16) & _SIGCHLD_BIT:
                    return True
        for task in os.listdir(tasks):
            with open(os.path.join(tasks, task, "children"), "rb") as listed:
                if listed.read(1):
                    return True
    except OSError:
        return True
    return False


def start(skip: Iterable[str]) -> Watch | None:
    """A running watch, or None where neither fanotify nor inotify can be had (not Linux, no
    ``inotify_simple``, no instance left for this user): the job then runs with the Python hooks alone."""
    try:
        return Watch(skip)
    except OSError:
        return None
