"""The wheels of a run's environment, for ``launch pack --with-env``: each distribution the job used,
from pip's cache or the index, checked against the files the run recorded; the launcher's own
built from its source and checked module by module against what the job ran.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path

from launcher import proc
from launcher.errors import ArchiveError
from launcher.record import hashing
from launcher.share.manifest import (
    LAUNCHER_DISTRIBUTION,
    normalize,
    requirement_closure,
    sha256_file,
    wheel_identity,
    wheel_parts,
    wheel_plan,
)


def collect_wheels(fp: Mapping, dest: Path, echo: bool = True) -> dict[Path, dict]:
    """The wheels ``wheel_plan`` names, taken from pip's cache or the index once (``pip wheel --no-deps``,
    which builds a wheel from an sdist where the index has no wheel), and the launcher's own built
    from its source (``launcher_wheel``). Each wheel of a distribution the job used must install
    what the run recorded (``wheel_identity`` against ``files_sha256``): ``ArchiveError`` names the
    first that does not."""
    from importlib import metadata

    dest.mkdir(parents=True, exist_ok=True)
    built = launcher_wheel(fp, dest)  # first: what it requires is what its wheel says, not an older install's
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
    if missing:
        if echo:
            print(f"[launch] collecting {len(missing)} wheel(s) for the archive (pip wheel --no-deps)",
                  file=sys.stderr, flush=True)  # fmt: skip
        log = dest / "pip.log"
        argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "--wheel-dir",
                str(dest), *missing]  # fmt: skip
        if proc.run_streaming(argv, os.environ, log, echo=False) != 0:
            tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-2:])
            raise ArchiveError(f"the wheels of the run's distributions could not be had (pip wheel: {tail})")
        log.unlink()
    have = {wheel_parts(w.name): w for w in dest.glob("*.whl")}
    used = (fp.get("software") or {}).get("distributions") or {}
    out: dict[Path, dict] = {}
    for name, version in wanted.items():
        wheel = have.get((name, version))
        if wheel is None:
            raise ArchiveError(f"no wheel of {name}=={version} was found or built: the run's environment cannot travel")
        identity = _wheel_record_identity(wheel)
        want = (used.get(name) or {}).get("files_sha256")
        if want and identity != want:
            raise ArchiveError(f"the wheel {wheel.name} installs other files than the run's {name} {version} "
                               f"(files {str(identity)[:12]}, the run's {want[:12]}): a rebuilt or different "
                               "wheel; the run's environment cannot travel")  # fmt: skip
        out[wheel] = {"sha256": sha256_file(wheel), "name": name, "version": version, "files_sha256": identity}
    out[built] = {"sha256": sha256_file(built), "name": LAUNCHER_DISTRIBUTION, "version": wheel_parts(built.name)[1],
                  "files_sha256": _wheel_record_identity(built)}  # fmt: skip
    return out


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


_NOT_SOURCE = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", ".nox", ".pytest_cache",
                                     ".ruff_cache", ".import_linter_cache", ".benchmarks", "runs", "tests", "docs",
                                     "benchmarks", "mutants", ".venv", "venv")  # fmt: skip


def launcher_wheel(fp: Mapping, dest: Path) -> Path:
    """The launcher's wheel, built from its source tree (``pip wheel --no-deps --no-build-isolation``
    from a clean copy: no stale ``build/`` leaks in), and checked: each of the launcher's modules the
    job ran (``code.launcher_modules``) must be in it with the content the run recorded."""
    source = Path(hashing.__file__).resolve().parents[2]
    project = source / "pyproject.toml"
    if not project.is_file() or LAUNCHER_DISTRIBUTION not in project.read_text():
        raise ArchiveError(f"the launcher here ({source / 'launcher'}) is not a source tree, so its wheel cannot be "
                           "built: pack --with-env from the launcher's source checkout")  # fmt: skip
    for old in dest.glob(f"{LAUNCHER_DISTRIBUTION.replace('-', '_')}-*.whl"):
        old.unlink()  # never an earlier build's
    with tempfile.TemporaryDirectory(prefix=".launch-wheel-") as tmp:
        copy = Path(tmp) / "src"
        shutil.copytree(source, copy, ignore=_NOT_SOURCE, symlinks=True)
        log = Path(tmp) / "pip.log"
        argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                "--disable-pip-version-check", "--wheel-dir", str(dest), str(copy)]  # fmt: skip
        if proc.run_streaming(argv, os.environ, log, echo=False) != 0:
            tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-2:])
            raise ArchiveError(f"the launcher's wheel could not be built from {source}: {tail}")
    built = sorted(dest.glob(f"{LAUNCHER_DISTRIBUTION.replace('-', '_')}-*.whl"))
    if not built:
        raise ArchiveError(f"pip built no wheel of the launcher from {source}")
    recorded = ((fp.get("code") or {}).get("launcher_modules")) or {}
    with zipfile.ZipFile(built[-1]) as z:
        inside = {hashing.module_name(n.removeprefix("launcher/")): hashlib.sha256(z.read(n)).hexdigest()
                  for n in z.namelist() if n.startswith("launcher/") and n.endswith(".py")}  # fmt: skip
    for module, digest in sorted(recorded.items()):
        if inside.get(module) != digest:
            raise ArchiveError(f"the launcher's {module} here is not the code the run ran (it changed since: "
                               f"{str(inside.get(module))[:12]}, the run's {str(digest)[:12]}): pack --with-env with "
                               "the launcher the run ran")  # fmt: skip
    return built[-1]
