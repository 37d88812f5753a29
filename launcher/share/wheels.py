"""The wheels of a run's environment, for ``launch pack --with-env``: each distribution the job used,
from pip's cache or the index, or else packed from its installed files, checked against the files
the run recorded; the launcher's own built from its source and checked module by module against
what the job ran.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path

from launcher import console, proc
from launcher.errors import ArchiveError
from launcher.record import hashing
from launcher.record.probe import distributions
from launcher.share.archive_index import (
    LAUNCHER_DISTRIBUTION,
    normalize,
    requirement_closure,
    wheel_identity,
    wheel_parts,
    wheel_plan,
)


def pip_argv(*args: str) -> list[str]:
    """This Python's pip with ``args`` (``python -m pip ...``)."""
    return [sys.executable, "-m", "pip", *args]


def collect_wheels(fp: Mapping, dest: Path) -> dict[Path, dict]:
    """The wheels ``wheel_plan`` names, taken from pip's cache or the index once (``pip wheel --no-deps``,
    which builds a wheel from an sdist where the index has no wheel), and the launcher's own built
    from its source (``launcher_wheel``). Each wheel of a distribution the job used must install
    what the run recorded (``wheel_identity`` against ``files_sha256``): ``ArchiveError`` names the
    first that does not. What pip is doing is noted on stderr while it works (``console.Progress``)."""
    dest.mkdir(parents=True, exist_ok=True)
    with console.Progress("pack", "collecting wheels") as progress:
        return _collect(fp, dest, progress)


def _collect(fp: Mapping, dest: Path, progress: console.Progress) -> dict[Path, dict]:
    from importlib import metadata

    progress.say("building the launcher's wheel from its source")
    built = launcher_wheel(fp, dest, progress)  # first: what it requires is what its wheel says, not an older install's
    requires: dict[str, list[str]] = {}
    here: dict[str, str] = {}
    for dist in metadata.distributions():
        if dist.metadata["Name"]:
            requires.setdefault(normalize(dist.metadata["Name"]), list(dist.requires or []))
            here.setdefault(normalize(dist.metadata["Name"]), dist.version)
    requires[LAUNCHER_DISTRIBUTION] = _wheel_requires(built)
    wanted = wheel_plan(fp, requirement_closure(LAUNCHER_DISTRIBUTION, requires), here)
    have = {wheel_parts(w.name): w for w in dest.glob("*.whl")}
    missing = [f"{n}=={v}" for n, v in wanted.items() if (n, v) not in have]
    failed, pip_said = False, ""
    if missing:
        progress.say(f"collecting {len(missing)} wheel(s) for the archive (pip wheel --no-deps)")
        log = dest / "pip.log"
        argv = pip_argv("wheel", "--no-deps", "--disable-pip-version-check", "--wheel-dir", str(dest), *missing)
        failed = proc.run_streaming(argv, os.environ, log, echo=False, progress=progress) != 0
        pip_said = " | ".join(log.read_text(errors="replace").strip().splitlines()[-2:])
        log.unlink()
    have = {wheel_parts(w.name): w for w in dest.glob("*.whl")}
    used = (fp.get("software") or {}).get("distributions") or {}
    out: dict[Path, dict] = {}
    for name, version in wanted.items():
        wheel = have.get((name, version))
        want = (used.get(name) or {}).get("files_sha256")
        identity = _wheel_record_identity(wheel) if wheel is not None else None
        if wheel is None or (want and identity != want):  # none to be had, or rebuilt from an sdist: its files
            repacked = installed_wheel(name, version, want, dest, progress=progress)
            if repacked is not None:
                wheel, identity = repacked, _wheel_record_identity(repacked)
        if wheel is None:
            if failed:
                raise ArchiveError(f"the wheels of the run's distributions could not be had (pip wheel: {pip_said})")
            raise ArchiveError(f"no wheel of {name}=={version} was found or built: the run's environment cannot travel")
        if want and identity != want:
            raise ArchiveError(
                f"the wheel {wheel.name} installs other files than the run's {name} {version} "
                f"(files {str(identity)[:12]}, the run's {want[:12]}): a rebuilt or different "
                "wheel; the run's environment cannot travel"
            )
        out[wheel] = {"sha256": hashing.file_sha256(wheel), "name": name, "version": version, "files_sha256": identity}
    out[built] = {
        "sha256": hashing.file_sha256(built),
        "name": LAUNCHER_DISTRIBUTION,
        "version": wheel_parts(built.name)[1],
        "files_sha256": _wheel_record_identity(built),
    }
    return out


def installed_wheel(
    name: str,
    version: str,
    want: str | None,
    dest: Path,
    path: list[str] | None = None,
    progress: console.Progress | None = None,
) -> Path | None:
    """A wheel of ``name`` ``version`` packed from its files installed here (``python -m wheel pack``),
    when the installed one has the files the run recorded (``want``, its RECORD's identity) and each
    of them still holds what its RECORD says; None otherwise. For what the index cannot give again:
    a distribution it has only as an sdist, rebuilt with today's build tools, installs other files.

    The wheel holds what the identity covers: the files below site-packages and the ``.dist-info``
    (its entry points make the console scripts again); files installed outside site-packages
    (data files, headers, scripts that are not entry points) are left out. ``path``: where to look
    for installed distributions (``sys.path`` by default). ``progress``: where the packing is noted."""
    from importlib import metadata

    found = [d for d in metadata.distributions(path=path or sys.path) if normalize(d.metadata["Name"] or "") == name]
    info = Path(getattr(found[0], "_path", "")) if found and found[0].version == version else None
    if info is None or not (info / "RECORD").is_file() or not (info / "WHEEL").is_file():
        return None  # not installed at that version, or not from a wheel (an egg-info install)
    entries = distributions.parse_record((info / "RECORD").read_text(errors="replace"))
    if want and distributions.files_sha256(entries) != want:
        return None
    site = info.parent.resolve()
    with tempfile.TemporaryDirectory(prefix=".launch-repack-", dir=dest) as tmp:
        unpacked = Path(tmp) / info.name.removesuffix(".dist-info")
        for member, digest in distributions.content_entries(entries):
            source = (site / member).resolve()
            if not source.is_relative_to(site) or not source.is_file():
                return None
            data = source.read_bytes()
            if digest != "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode():
                return None  # changed since it was installed: not the files the run recorded
            target = unpacked / member
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
        log = Path(tmp) / "pack.log"
        out = Path(tmp) / "out"
        out.mkdir()
        argv = [sys.executable, "-m", "wheel", "pack", "--dest-dir", str(out), str(unpacked)]
        env = {**os.environ, "SOURCE_DATE_EPOCH": "315532800"}  # the same bytes every time: 1980-01-01
        if progress is not None:
            progress.say(f"packing {name} {version} from its installed files (wheel pack)")
        if proc.run_streaming(argv, env, log, echo=False, progress=progress) != 0:
            return None
        (packed,) = out.glob("*.whl")
        for old in dest.glob("*.whl"):
            if wheel_parts(old.name) == (name, version):
                old.unlink()  # pip's rebuilt wheel of it: not the run's files
        return Path(shutil.move(packed, dest / packed.name))


def _wheel_requires(wheel: Path) -> list[str]:
    """The ``Requires-Dist`` lines of a wheel's METADATA."""
    from email.parser import HeaderParser

    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        return HeaderParser().parsestr(z.read(name).decode()).get_all("Requires-Dist") or []


def _wheel_record_identity(wheel: Path) -> str | None:
    try:
        with zipfile.ZipFile(wheel) as z:
            record = next(n for n in z.namelist() if n.count("/") == 1 and n.endswith(".dist-info/RECORD"))
            return wheel_identity(z.read(record).decode())
    except (OSError, StopIteration, zipfile.BadZipFile, UnicodeDecodeError) as exc:
        raise ArchiveError(f"{wheel.name} is not a readable wheel ({exc})") from None


_NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".nox",
    ".pytest_cache",
    ".ruff_cache",
    ".import_linter_cache",
    ".benchmarks",
    "runs",
    "tests",
    "docs",
    "benchmarks",
    "mutants",
    ".venv",
    "venv",
)


def launcher_wheel(fp: Mapping, dest: Path, progress: console.Progress | None = None) -> Path:
    """The launcher's wheel, built from its source tree (``pip wheel --no-deps --no-build-isolation``
    from a clean copy: no stale ``build/`` leaks in), and checked: each of the launcher's modules the
    job ran (``code.launcher_modules``) must be in it with the content the run recorded.
    ``progress``: where pip's steps are noted."""
    source = Path(hashing.__file__).resolve().parents[2]
    project = source / "pyproject.toml"
    if not project.is_file() or LAUNCHER_DISTRIBUTION not in project.read_text():
        raise ArchiveError(
            f"the launcher here ({source / 'launcher'}) is not a source tree, so its wheel cannot be "
            "built: pack --with-env from the launcher's source checkout"
        )
    for old in dest.glob(f"{LAUNCHER_DISTRIBUTION.replace('-', '_')}-*.whl"):
        old.unlink()  # never an earlier build's
    with tempfile.TemporaryDirectory(prefix=".launch-wheel-") as tmp:
        copy = Path(tmp) / "src"
        shutil.copytree(source, copy, ignore=_NOT_SOURCE, symlinks=True)
        log = Path(tmp) / "pip.log"
        argv = pip_argv(
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "--wheel-dir",
            str(dest),
            str(copy),
        )
        if proc.run_streaming(argv, os.environ, log, echo=False, progress=progress) != 0:
            tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-2:])
            raise ArchiveError(f"the launcher's wheel could not be built from {source}: {tail}")
    built = sorted(dest.glob(f"{LAUNCHER_DISTRIBUTION.replace('-', '_')}-*.whl"))
    if not built:
        raise ArchiveError(f"pip built no wheel of the launcher from {source}")
    recorded = ((fp.get("code") or {}).get("launcher_modules")) or {}
    with zipfile.ZipFile(built[-1]) as z:
        inside = {
            hashing.module_name(n.removeprefix("launcher/")): hashlib.sha256(z.read(n)).hexdigest()
            for n in z.namelist()
            if n.startswith("launcher/") and n.endswith(".py")
        }
    for module, digest in sorted(recorded.items()):
        if inside.get(module) != digest:
            raise ArchiveError(
                f"the launcher's {module} here is not the code the run ran (it changed since: "
                f"{str(inside.get(module))[:12]}, the run's {str(digest)[:12]}): pack --with-env with "
                "the launcher the run ran"
            )
    return built[-1]
