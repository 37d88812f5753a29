"""A stored run's Python environment, rebuilt here: ``launch replay RUN --rebuild``.

The environment is an *overlay*: a venv of this interpreter whose own site-packages hold
only the recorded distributions this environment lacks, has at another version, or (for
those the job used) has with other content, installed ``--no-deps`` from wheels pinned by
their hashes; a ``.pth`` file then adds this interpreter's site directories after them,
so everything else (TensorFlow's 250 MB among them) is shared. It takes seconds. A full
venv of the 211 distributions installed here took 51 s to download, 142 s to install with
pip (18 s with uv) and 2.3 GB per run, and one of them (an sdist) cannot be installed
offline at all.

The overlay comes first: the job's ``PYTHONPATH`` starts with the launcher's own directory,
which is a site directory when the launcher is installed (not run from its source tree),
and a directory on ``PYTHONPATH`` is searched before any site-packages. The ``.pth`` takes
each shared site directory off the front of ``sys.path`` before adding it after the
overlay, so an installed launcher's neighbours never shadow what the overlay installed.

It is checked: after building, every distribution the job used is identified
(``distributions.distribution_identity``: version and content) by the venv's own interpreter
and compared with the record; any difference refuses, naming the distribution, and so
does a recorded Python other than this one, or a distribution the index does not have
(an editable or local install). A distribution found anywhere but in the overlay that
installed it (a directory earlier on the job's path) is refused as that, naming the
directory, not blamed on the index. It is built in a temporary directory beside the cache
and renamed when complete, so a killed build never leaves an environment that looks ready;
the build holds a lock file (``.<key>.lock``, naming its host and pid) from start to end,
so a second launch waits for it instead of building twice, and a build directory is judged
abandoned only by a launch that holds that lock: on a shared (NFS) cache another node's
build in progress is never removed.

Pure: ``recorded_packages``, ``plan``, ``cache_key``, the command builders, ``requirements``,
``pth_text``, ``mismatches``, ``explain``. I/O: ``python_environment``, ``probe``, ``verify``,
``remove_abandoned``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import site
import socket
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path

from launcher import console, proc
from launcher.errors import RebuildError
from launcher.record import hashing, layout
from launcher.record.probe import distributions

LAUNCHER_DISTRIBUTION = "tf-repro-launcher"  # the launcher itself: the replay runs this one's code
LAUNCHER_ROOT = str(Path(__file__).resolve().parents[2])  # put on the job's PYTHONPATH (job.LAUNCHER_ROOT)
SHARED_PTH = "_launch_shared.pth"
LAYOUT = 3  # how an overlay is made (3: --no-compile, checked statically); in the cache key


@dataclass(frozen=True)
class Plan:
    """What a rebuild installs over this environment, and what it then checks."""

    recorded: dict[str, str]  # every recorded distribution (the launcher left out): name -> version
    install: tuple[str, ...]  # name==version installed in the overlay, sorted
    used: dict[str, dict]  # the distributions the job used: name -> recorded identity


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def recorded_packages(packages: Iterable[str]) -> dict[str, str]:
    """name -> version of a recorded ``software.packages`` (``name==version``), the launcher left out."""
    out = {}
    for line in packages:
        name, sep, version = line.partition("==")
        if not sep or not name.strip() or not version.strip():
            raise RebuildError(f"the run's installed packages list {line!r}, not name==version: it cannot be rebuilt")
        if _normalize(name) != LAUNCHER_DISTRIBUTION:
            out[_normalize(name)] = version.strip()
    return out


def plan(stored_fp: dict, here: Mapping[str, str], here_used: Mapping[str, dict | None], python: str) -> Plan:
    """What to install over this environment (``here``: name -> version, as imports see it;
    ``here_used``: the identities here of the distributions the job used) to get the run's.

    Refuses a Docker run, a run that recorded no packages, a recorded Python other than
    ``python``, and a used distribution missing from the recorded list.
    """
    software = stored_fp.get("software") or {}
    if software.get("container"):
        raise RebuildError("the run ran in a Docker image, which its replay uses: --rebuild is for local runs")
    if not software.get("packages"):
        raise RebuildError("the run recorded no installed packages (software.packages): nothing to rebuild from")
    if software.get("python") != python:
        raise RebuildError(
            f"the run used Python {software.get('python')} and this is Python {python}: "
            f"run launch with Python {software.get('python')} to rebuild its environment"
        )
    recorded = recorded_packages(software["packages"])
    used = {
        name: d
        for name, d in (software.get("distributions") or {}).items()
        if d is not None and name != LAUNCHER_DISTRIBUTION
    }
    for name in used:
        if name not in recorded:
            raise RebuildError(
                f"the job used {name}, which the run's installed packages do not list: it cannot be rebuilt",
                distribution=name,
            )
    differ = {name for name, _, _ in mismatches(used, here_used)}  # used, and not as recorded here
    install = [
        f"{name}=={version}"
        for name, version in sorted(recorded.items())
        if here.get(name) != version or name in differ
    ]
    return Plan(recorded=recorded, install=tuple(install), used=used)


def cache_key(p: Plan, interpreter: str, shared: Iterable[str], wheels: Mapping[str, str] | None = None) -> str:
    """The environment's name: the recorded distribution set, what is installed over this
    interpreter (its path and version), the site directories shared, the sha256 of each wheel
    an archive brought for it (``wheels``: an environment built from other wheels is another
    one) and ``LAYOUT`` (an overlay made by an older launcher is not reused)."""
    canonical = json.dumps(
        {
            "recorded": sorted(f"{n}=={v}" for n, v in p.recorded.items()),
            "install": list(p.install),
            "interpreter": interpreter,
            "shared": list(shared),
            "layout": LAYOUT,
            "wheels": sorted((wheels or {}).items()),
        },
        sort_keys=True,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:20]


def mismatches(recorded: Mapping[str, dict], found: Mapping[str, dict | None]) -> list[tuple[str, dict, dict | None]]:
    """(name, recorded identity, identity found) of each distribution whose version, or
    content where recorded (``files_sha256``), is not the recorded one."""
    out = []
    for name, want in sorted(recorded.items()):
        got = found.get(name)
        fields = ("version", "files_sha256") if "files_sha256" in want else ("version",)
        if got is None or any(got.get(f) != want.get(f) for f in fields):
            out.append((name, want, got))
    return out


def download_argv(
    python: str, dest: Path, wanted: Iterable[str], find_links: Path | None = None, no_index: bool = False
) -> list[str]:
    """Download these ``name==version`` as wheels, without their dependencies; ``find_links``: a folder of
    wheels looked in too (an archive's), alone with ``no_index``."""
    links = ["--find-links", str(find_links)] if find_links else []
    return [
        python,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--retries",
        "2",
        *(["--no-index"] if no_index else []),
        *links,
        "--dest",
        str(dest),
        *wanted,
    ]


def install_argv(python: str, venv_python: Path, wheels: Path, requirements_file: Path) -> list[str]:
    """Install the downloaded wheels into the venv, offline, each pinned by its hash (pip run
    by this interpreter for the venv's, the venv seeing nothing else; no pip configuration)."""
    return [
        python,
        "-m",
        "pip",
        "--isolated",
        "--python",
        str(venv_python),
        "install",
        "--no-index",
        "--no-deps",
        "--require-hashes",
        "--ignore-installed",
        "--no-warn-script-location",
        "--disable-pip-version-check",
        "--no-compile",
        "--find-links",
        str(wheels),
        "-r",
        str(requirements_file),
    ]


def wheel_name(filename: str) -> tuple[str, str]:
    """(normalized name, version) of a wheel file name (``name-version[-build]-py-abi-platform.whl``)."""
    name, version = filename.split("-")[:2]
    return _normalize(name), version


def requirements(wheels: Mapping[str, tuple[str, str]]) -> str:
    """A requirements file pinning each ``name`` to ``(version, sha256 of its wheel)``."""
    return "".join(f"{name}=={version} --hash=sha256:{digest}\n" for name, (version, digest) in sorted(wheels.items()))


def pth_text(site_dirs: Iterable[str]) -> str:
    """A ``.pth`` that adds these site directories after the venv's own, their ``.pth`` files processed.

    Each is first taken off ``sys.path`` where it already is (``PYTHONPATH`` puts an
    installed launcher's site directory before every site-packages): ``site.addsitedir``
    appends only a directory not yet on the path, so it would otherwise stay in front of
    the overlay and its distributions would win. One line each: a ``.pth`` runs lines
    that start with ``import``, in the ``site`` module's namespace (hence ``__import__``).
    """
    return "".join(
        f"import site, sys; sys.path[:] = [p for p in sys.path if not p or "
        f"__import__('os').path.realpath(p) != __import__('os').path.realpath({d!r})]; "
        f"site.addsitedir({d!r})\n"
        for d in site_dirs
    )


def explain(
    name: str,
    want: dict,
    got: dict | None,
    where: Mapping | None,
    overlay: str,
    installed: bool,
    launcher_root: str = LAUNCHER_ROOT,
) -> str:
    """Why the rebuilt environment's ``name`` is not the recorded one, in one line, from where
    its probe found it (``where``: {"site": directory of its metadata, "shadowed": [[module,
    file]] of its top-level modules that import from elsewhere}). Blames the index only when
    the overlay's own copy, installed from the index's wheel, is the one found and differs."""

    def ident(d: Mapping) -> str:
        return f"{d.get('version')} (files {str(d.get('files_sha256'))[:12]})"

    if got is None:
        return f"the rebuilt environment has no {name} (the run's was {ident(want)}): remove {overlay} and rebuild"
    where = where or {}
    site_dir, shadowed = where.get("site"), where.get("shadowed") or []
    if installed and shadowed:
        module, origin = shadowed[0]
        return (
            f"the rebuilt environment imports {name}'s module {module} from {origin}, not from the overlay "
            f"holding the run's {name} {ident(want)}: {_ahead(origin, launcher_root)}"
        )
    if installed and site_dir and _real(site_dir) != _real(overlay):
        return (
            f"the rebuilt environment's {name} is {ident(got)} from {site_dir}, not from the overlay holding the "
            f"run's {ident(want)}: {_ahead(site_dir, launcher_root)}"
        )
    if installed:
        return (
            f"the rebuilt environment's {name} is {ident(got)}, the run's was {ident(want)}: its wheel on the "
            f"index is not the one the run used ({overlay})"
        )
    return (
        f"the rebuilt environment's {name} is {ident(got)} from {site_dir or 'an unknown directory'}, the run's "
        f"was {ident(want)}, though the launching interpreter sees the run's: another copy comes first on the "
        "job's path"
    )


def _ahead(directory: str, launcher_root: str) -> str:
    """Why ``directory`` (or a module file) is searched before the overlay, and what to do."""
    fix = "; install the launcher into this Python with pip, or run it from its source tree"
    if _real(directory) == _real(launcher_root):
        return "that is the launcher's own directory, which the job's path puts first" + fix
    if _real(directory).startswith(_real(launcher_root) + os.sep):
        return f"that is inside {launcher_root}, the launcher's own directory, which the job's path puts first" + fix
    return "the job's path searches it before the overlay: take it off PYTHONPATH"


def _real(path: str) -> str:
    return os.path.realpath(path)


# ---------------------------------------------------------------- I/O
def default_cache_root() -> Path:
    """``$XDG_CACHE_HOME/launch/envs``, or ``~/.cache/launch/envs``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "launch" / "envs"


def shared_site_dirs() -> list[str]:
    """This interpreter's site directories, in the order it searches them."""
    dirs = set(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.add(site.getusersitepackages())
    return [p for p in dict.fromkeys(sys.path) if p in dirs]


def here_versions() -> dict[str, str]:
    """name -> version of every installed distribution, the one imports find first."""
    out: dict[str, str] = {}
    for dist in metadata.distributions():
        if dist.metadata["Name"]:
            out.setdefault(_normalize(dist.metadata["Name"]), dist.version)
    return out


def python_environment(
    stored_fp: dict,
    *,
    cache_root: Path | None = None,
    find_links: Path | None = None,
    wheel_hashes: Mapping[str, str] | None = None,
) -> Path:
    """The Python interpreter of a Python environment holding the run's recorded distributions,
    built (or found in the cache under ``cache_root``, default ``default_cache_root()``) and
    verified; raises ``RebuildError``. ``find_links``: a folder of wheels (an archive's,
    ``launch pack --with-env``, checked against the run's record: ``wheel_hashes``, file name
    -> sha256) used first, with no index when it holds them all.

    No interpreter of the environment starts before every file of its overlay is checked
    (``check_overlay``): after a build, and again each time a cached one is reused."""
    root = cache_root or default_cache_root()
    used_names = list((stored_fp.get("software") or {}).get("distributions") or {})
    p = plan(
        stored_fp,
        here_versions(),
        {n: distributions.distribution_identity(n) for n in used_names},
        platform.python_version(),
    )
    if find_links:  # an archive's: a distribution the job did not use and the archive has no wheel of is left out
        have = {wheel_name(w.name)[0] for w in Path(find_links).glob("*.whl")}
        p = replace(p, install=tuple(i for i in p.install if i.partition("==")[0] in {*p.used, *have}))
    shared = shared_site_dirs()
    final = root / cache_key(p, os.path.realpath(sys.executable) + " " + sys.version, shared, wheel_hashes)
    if not (final / "bin" / "python").exists():
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            with build_lock(final):
                if not (final / "bin" / "python").exists():  # not built meanwhile by the launch we waited for
                    _build(p, final, shared, find_links, wheel_hashes)
        except OSError as exc:
            raise RebuildError(
                f"cannot write the rebuilt environment at {final} ({exc.strerror or exc}): "
                "remove it, or free or fix the cache directory"
            ) from None
    check_overlay(overlay_site(final), p, pth_text(shared))
    python = final / "bin" / "python"
    verify(python, p)
    return python


def _record_digest(data: bytes) -> str:
    """A file's hash as a RECORD writes it: ``sha256=`` and its urlsafe base64, unpadded."""
    import base64

    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


_STARTUP = ("sitecustomize.py", "usercustomize.py")  # imported by every start of the interpreter, as .pth files are


def check_overlay(site_dir: Path, p: Plan, shared_pth: str) -> None:
    """Refuse (``RebuildError``) an overlay holding anything but what the rebuild installed, as installed.

    Read, never imported, before any interpreter of the environment starts: each distribution
    (its ``.dist-info``) must be one of ``p.install`` at its version; each file its RECORD lists
    below site-packages must hold what the RECORD says, and none may be compiled code (pip
    installs ``--no-compile``: a ``.pyc`` came from the wheel); a distribution the job used must
    install the recorded files (``files_sha256``); a ``.pth`` file or ``sitecustomize``, which
    every start of the interpreter runs, only from a distribution whose files the run recorded;
    and no file may be there that no RECORD lists, but the overlay's own ``.pth`` (``shared_pth``)
    and the bytecode imports write in ``__pycache__``. No link, anywhere."""
    from email.parser import HeaderParser

    site_dir = Path(site_dir)
    wanted = {name: version for name, _, version in (i.partition("==") for i in p.install)}
    claimed: set[str] = set()

    def refuse(why: str, name: str | None = None) -> RebuildError:
        return RebuildError(
            f"the rebuilt environment {site_dir.parent.parent.parent.parent} {why}: refused before "
            "its Python started; remove it and replay again",
            distribution=name,
        )

    for info in sorted(site_dir.glob("*.dist-info")):
        try:
            headers = HeaderParser().parsestr((info / "METADATA").read_text(errors="replace"))
            entries = distributions.parse_record((info / "RECORD").read_text(errors="replace"))
        except OSError:
            raise refuse(f"holds {info.name} without its METADATA or RECORD") from None
        name, version = _normalize(headers.get("Name") or ""), headers.get("Version")
        if wanted.get(name) != version:
            raise refuse(f"holds {name} {version}, which the rebuild did not install", name)
        for path, digest in entries:
            rel = os.path.normpath(path.replace("\\", "/"))
            if rel.startswith(("..", "/")):
                continue  # a console script or a data file, outside site-packages: nothing runs it at start
            if not digest and rel == f"{info.name}/RECORD":
                claimed.add(rel)
                continue
            file = site_dir / rel
            try:
                content = file.read_bytes() if not file.is_symlink() else None
            except OSError:
                content = None
            if content is None or not digest or _record_digest(content) != digest:
                raise refuse(f"holds {name}'s {rel}, which is not what its RECORD lists", name)
            if rel.endswith((".pyc", ".pyo")):
                raise refuse(f"holds {name}'s {rel}: compiled code shipped in a wheel", name)
            claimed.add(rel)
        want = p.used.get(name) or {}
        recorded = bool(want.get("files_sha256")) and distributions.files_sha256(entries) == want["files_sha256"]
        if want.get("files_sha256") and not recorded:
            raise refuse(f"holds {name} {version} with other files than the run's", name)
        startup = sorted(rel for rel, _ in entries if "/" not in rel and (rel.endswith(".pth") or rel in _STARTUP))
        if startup and not recorded:
            raise refuse(
                f"holds {startup[0]} from {name}, which every start of its Python would run, and the run's "
                f"record does not name {name}'s files",
                name,
            )
    for current, dirs, files in os.walk(site_dir):
        for entry in [*dirs, *files]:
            path = Path(current, entry)
            rel = path.relative_to(site_dir).as_posix()
            if path.is_symlink():
                raise refuse(f"holds a link, {rel}")
            if entry in dirs:
                continue
            if rel == SHARED_PTH:
                if path.read_text(errors="replace") != shared_pth:
                    raise refuse(f"holds a {SHARED_PTH} this launcher did not write")
            elif rel not in claimed and not ("__pycache__" in rel.split("/") and rel.endswith(".pyc")):
                raise refuse(f"holds {rel}, which no distribution it installed lists")


def overlay_site(venv: Path) -> Path:
    """The overlay's own site-packages, where its distributions are installed."""
    return venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def verify(python: Path, p: Plan) -> dict:
    """Refuse unless ``python`` sees every distribution the job used as recorded, and those
    the overlay installed from the overlay itself; its probe. The refusal says why (``explain``)."""
    probed = probe(python, list(p.used))
    venv = python.parent.parent
    installed = {n.partition("==")[0] for n in p.install}
    where = probed.get("where") or {}
    wrong = mismatches(p.used, probed["distributions"])
    wrong += [
        (n, p.used[n], probed["distributions"].get(n))
        for n in sorted(installed & set(p.used))
        if (where.get(n) or {}).get("shadowed") and n not in {w[0] for w in wrong}
    ]
    if wrong:
        name, want, got = wrong[0]
        raise RebuildError(
            explain(name, want, got, where.get(name), str(overlay_site(venv)), name in installed), distribution=name
        )
    return probed


_PROBE = """
import importlib.util, json, os, sys
from importlib import metadata

def where(name):
    # the directory of the distribution's metadata, and its top-level modules that import from elsewhere
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None
    site = os.path.realpath(str(dist.locate_file("")))
    tops = set()
    for f in dist.files or ():
        top = f.parts[0]
        top = top.split(".")[0] if len(f.parts) == 1 and f.suffix in (".py", ".so", ".pyd") else top
        if top.isidentifier() and not top.startswith("__"):
            tops.add(top)
    shadowed = []
    for module in sorted(tops):
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            continue
        if spec is None or not spec.has_location or not spec.origin:  # a namespace package spans directories
            continue
        if not os.path.realpath(spec.origin).startswith(site + os.sep):
            shadowed.append([module, os.path.dirname(spec.origin) if spec.submodule_search_locations else spec.origin])
    return {"site": site, "shadowed": shadowed}

try:
    import launcher, launcher.job.bootstrap, launcher.job.determinism, launcher.job.tasks, omegaconf
    from launcher.record.probe import distributions, fingerprint, probes
    from launcher.record.store import runs
    names = sys.argv[1:]
    out = {"software": probes.software(), "launcher": launcher.__file__,
           "distributions": {name: distributions.distribution_identity(name) for name in names},
           "where": {name: where(name) for name in names}}
except Exception as exc:
    out = {"error": f"{type(exc).__name__}: {exc}"}
print(json.dumps(out))
"""


def probe_argv(python: Path, names: list[str]) -> list[str]:
    """The probe's command line: as the job starts (``-P``: no current directory on the path)."""
    return [str(python), *(["-P"] if sys.version_info >= (3, 11) else []), "-c", _PROBE, *names]


def probe(python: Path, names: list[str]) -> dict:
    """The software (``probes.software()``) and the identities of ``names`` as ``python`` sees
    them, with the launcher importable as the job imports it (its ``PYTHONPATH``, built by
    ``runtime.job_env``); for ``precheck(probed=...)``. ``where`` says, for each, where
    its metadata lies and which of its top-level modules import from elsewhere."""
    from launcher.run import runtime

    out = proc.capture(probe_argv(python, names), timeout=300, env=runtime.job_env(dict(os.environ), {}, LAUNCHER_ROOT))
    try:
        probed = json.loads(out or "")
    except ValueError:
        raise RebuildError(f"{python} does not start: remove {python.parent.parent} and rebuild") from None
    if "error" in probed:
        raise RebuildError(f"the launcher cannot be imported by {python} as the job imports it ({probed['error']})")
    return probed


def _build(
    p: Plan,
    final: Path,
    shared: list[str],
    find_links: Path | None = None,
    wheel_hashes: Mapping[str, str] | None = None,
) -> None:
    """Build the overlay in a temporary directory beside ``final``, then rename it there; what pip
    is doing is noted on stderr while it works (``console.Progress``)."""
    started = time.monotonic()
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_builds(final)  # the caller holds the build lock: no other launch builds it now
    tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    tmp.mkdir()
    log = final.with_name(f"{final.name}.log")  # beside it: kept when a build fails
    console.log.info(
        "rebuilding the run's environment in %s: %s over this Python's site-packages",
        final,
        ", ".join(p.install) or "nothing",
    )
    try:
        with console.Progress("rebuild", "creating the venv") as progress:
            _run([sys.executable, "-m", "venv", "--without-pip", str(tmp)], log, "creating the venv", progress)
            if p.install:
                _install(p.install, tmp, log, find_links, wheel_hashes, progress)
        (overlay_site(tmp) / SHARED_PTH).write_text(pth_text(shared))
        info = {"install": list(p.install), "shared": shared, "seconds": round(time.monotonic() - started, 1)}
        (tmp / layout.REBUILD).write_text(json.dumps(info, indent=2) + "\n")  # what was built, for reading
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    console.log.info("rebuilt in %.1f s", time.monotonic() - started)


def _install(
    wanted: tuple[str, ...],
    venv: Path,
    log: Path,
    find_links: Path | None = None,
    wheel_hashes: Mapping[str, str] | None = None,
    progress: console.Progress | None = None,
) -> None:
    wheels = venv / "wheels"  # not layout's: the overlay's downloads, no store's

    def download(argv: list[str]) -> bool:
        return proc.run_streaming(argv, os.environ, log, echo=False, progress=progress) == 0

    if progress is not None:
        progress.doing = f"downloading {len(wanted)} wheel(s)"
    if find_links and download(download_argv(sys.executable, wheels, wanted, find_links, no_index=True)):
        pass  # the archive's wheels hold them all: no index asked
    elif not download(download_argv(sys.executable, wheels, wanted, find_links)):
        for one in wanted:  # which ones: the index has no wheel of them, or is not reachable
            if not download(download_argv(sys.executable, wheels, [one], find_links)):
                raise RebuildError(
                    f"no wheel of {one} could be downloaded (an editable or local install, or no "
                    f"wheel on the index; was the index reachable?): it cannot be rebuilt",
                    distribution=one.partition("==")[0],
                )
    found = {}
    for wheel in sorted(wheels.glob("*.whl")):
        found[wheel_name(wheel.name)[0]] = (wheel_name(wheel.name)[1], hashing.file_sha256(wheel))
        checked = (wheel_hashes or {}).get(wheel.name)
        if checked is not None and checked != found[wheel_name(wheel.name)[0]][1]:
            raise RebuildError(
                f"the archive's wheel {wheel.name} changed after it was checked: it is not installed",
                distribution=wheel_name(wheel.name)[0],
            )
    for one in wanted:
        name, _, version = one.partition("==")
        if found.get(name, ("",))[0] != version:
            raise RebuildError(f"the index gave no wheel of {one}: it cannot be rebuilt", distribution=name)
    pinned = venv / "requirements.txt"
    pinned.write_text(requirements({name: found[name] for name in (w.partition("==")[0] for w in wanted)}))
    if progress is not None:
        progress.doing = "installing the wheels"
    _run(install_argv(sys.executable, venv / "bin" / "python", wheels, pinned), log, "installing the wheels", progress)
    shutil.rmtree(wheels)


def _run(argv: list[str], log: Path, what: str, progress: console.Progress | None = None) -> None:
    if proc.run_streaming(argv, os.environ, log, echo=False, progress=progress) != 0:
        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-2:])
        raise RebuildError(f"rebuilding the run's environment failed {what} (see {log}): {tail}")


def lock_path(final: Path) -> Path:
    """The lock file a build of ``final`` holds from start to end."""
    return final.with_name(f".{final.name}.lock")


def owner_text() -> str:
    """What a build writes into its lock: this host and process."""
    return json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")})


def lock_owner(final: Path) -> str:
    """Who holds (or last held) the build lock of ``final``, for a message."""
    try:
        owner = json.loads(lock_path(final).read_text())
        return f"pid {int(owner['pid'])} on {owner['host']} (since {owner['since']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another launch"


@contextmanager
def build_lock(final: Path, timeout: float = -1) -> Iterator[None]:
    """Hold the build lock of ``final`` (waiting for it, ``timeout`` s; -1: as long as it
    takes), with this host and pid written in it. A lock file rather than a pid probe: a pid
    means nothing on another node of a cluster sharing the cache over NFS, a lock does."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(lock_path(final)))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        console.log.info("waiting for %s, which is building %s", lock_owner(final), final)
        try:
            with console.Progress("rebuild", "waiting for that build"):
                lock.acquire(timeout=timeout)
        except Timeout:
            raise RebuildError(
                f"{lock_owner(final)} is still building {final} after {timeout:.0f} s: wait for it, or end that launch"
            ) from None
    try:
        # filelock >= 4 falls back to a marker file of its own (naming its holder) where the
        # filesystem has no flock (Lustre without -o flock): that one is not ours to write.
        if not getattr(getattr(lock, "_context", None), "soft_fallback", False):
            fd = os.open(lock_path(final), os.O_WRONLY)
            try:
                data = owner_text().encode()
                os.write(fd, data)
                os.ftruncate(fd, len(data))
            finally:
                os.close(fd)
        yield
    finally:
        lock.release()


def remove_abandoned(final: Path) -> list[Path]:
    """Remove the temporary directories that builds of ``final`` left (killed), only if its
    build lock can be taken now: while another launch, on any host, holds it they are its
    build in progress. The directories removed."""
    from filelock import FileLock, Timeout

    if not lock_path(final).parent.is_dir():
        return []
    lock = FileLock(str(lock_path(final)))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return []
    try:
        return _remove_builds(final)
    finally:
        lock.release()


def _remove_builds(final: Path) -> list[Path]:
    """Remove every temporary build directory of ``final``; the caller holds its build lock."""
    removed = sorted(final.parent.glob(f".{final.name}.*.tmp"))
    for tmp in removed:
        shutil.rmtree(tmp, ignore_errors=True)
    return removed
