"""Where a path belongs: the OS's, the Python installation's, an installed distribution's, the
launcher's own, or the user's, and which directories are never the job's data.

Used live by the job's observers (is this file, this caller, the job's own?) and after the
job by ``usage.gather``. ``classify`` and ``system_path`` are pure; ``roots`` reads this
interpreter's layout.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from launcher.record.filecache import cache_path

# Never data: the OS, devices and pseudo-files. The job's reads there are settings the
# fingerprint records otherwise (hardware, software, environment), or noise.
SYSTEM_DIRS = (
    "/proc",
    "/sys",
    "/dev",
    "/run",
    "/etc",
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/bin",
    "/sbin",
    "/var/lib",
    "/var/cache",
    "/snap",
)
# Where a user's data lies inside those: RAM disks of the session and of the machine.
USER_DATA_IN_SYSTEM_DIRS = ("/run/user", "/dev/shm")


@dataclass(frozen=True)
class Roots:
    """The directories that decide what a path is."""

    site: tuple[str, ...]  # site-packages and dist-packages: installed distributions
    python: tuple[str, ...]  # the interpreter's prefixes: the standard library, lib-dynload, libpython
    launcher: str  # the launcher package itself (the files the job imported from it are code.launcher)
    ignored: tuple[str, ...] = ()  # never data: the run directory, caches


def under(path: str, roots: Iterable[str]) -> bool:
    return any(root and (path == root or path.startswith(root.rstrip("/") + "/")) for root in roots)


class RealPaths:
    """``os.path.realpath``, for many files in few directories: each file and directory costs one
    ``lstat``, once (``realpath`` stats every component of every path: a job's 4,000 module
    files cost it 40,000 calls)."""

    def __init__(self) -> None:
        self._dirs: dict[str, str] = {}

    def __call__(self, path: str) -> str:
        path = os.path.abspath(path)
        head, base = os.path.split(path)
        if not base or os.path.islink(path):
            return os.path.realpath(path)
        return os.path.join(self._directory(head), base)

    def _directory(self, path: str) -> str:
        real = self._dirs.get(path)
        if real is None:
            head, base = os.path.split(path)
            if not base or os.path.islink(path):
                real = os.path.realpath(path)
            else:
                real = os.path.join(self._directory(head), base)
            self._dirs[path] = real
        return real


def system_path(path: str) -> bool:
    """Whether a real path is the OS's, a device's or a pseudo-file's (``SYSTEM_DIRS``, but
    the RAM disks of ``USER_DATA_IN_SYSTEM_DIRS``): never data, on any layout of ``/``
    (judged by the path itself, whether ``/lib`` is a directory or a link into ``/usr``)."""
    return under(path, SYSTEM_DIRS) and not under(path, USER_DATA_IN_SYSTEM_DIRS)


def classify(path: str, roots: Roots) -> str:
    """``launcher``, ``site`` (an installed distribution), ``python`` (the interpreter and
    its standard library) or ``user`` (anything else: the user's code, a system library)."""
    if under(path, [roots.launcher]):
        return "launcher"
    if under(path, roots.site):
        return "site"
    if under(path, roots.python):
        return "python"
    return "user"


def roots(run_dir: str | None = None) -> Roots:
    """This interpreter's roots."""
    paths = sysconfig.get_paths()
    site_dirs = {paths.get("purelib"), paths.get("platlib")}
    try:
        site_dirs.update(site.getsitepackages())
        site_dirs.add(site.getusersitepackages())
    except AttributeError:  # a virtualenv's old site.py
        pass
    site_dirs.update(p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages"))
    python = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, paths.get("stdlib")}
    launcher_dir = str(Path(__file__).resolve().parents[2])
    ignored = [run_dir] if run_dir else []
    ignored.append(str(cache_path().parent))  # the launcher's own cache (file digests, distributions)

    def both(paths) -> tuple[str, ...]:  # as given and resolved: paths are compared before resolving
        return tuple(sorted({form for p in paths if p for form in (os.path.abspath(p), os.path.realpath(p))}))

    return Roots(site=both(site_dirs), python=both(python), launcher=launcher_dir, ignored=both(ignored))


def unwatched(run_dir: str, root: str | None = None) -> list[str]:
    """Directories whose file opens are never the job's data, so never watched natively
    (``launcher.job.observe.fswatch``): the system's, the Python installation and its distributions,
    the launcher, its caches, and the run store, except the snapshot a replay laid out in it
    (``root``, the store's ``.replay-*``), where the replayed job's data lies."""
    r = roots(run_dir)
    store = os.path.dirname(os.path.abspath(run_dir))
    in_store = root is not None and under(os.path.abspath(root), [store])
    return [*SYSTEM_DIRS, *r.site, *r.python, *r.ignored, r.launcher, *([] if in_store else [store])]


def broad_directories() -> list[str]:
    """Directories too broad to watch below (a job started there, a file read there): home,
    the root and the temporary directories; each is watched by itself."""
    import tempfile

    return [os.path.expanduser("~"), "/", tempfile.gettempdir(), "/tmp", "/var/tmp"]
