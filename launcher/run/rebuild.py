"""A stored run's Python environment, rebuilt here: ``launch replay RUN --rebuild``.

The environment is an *overlay*: a venv of this interpreter whose own site-packages hold
only the recorded distributions this environment lacks, has at another version, or (for
those the job used) has with other content, installed ``--no-deps`` from wheels pinned by
their hashes; a ``.pth`` file then adds this interpreter's site directories after them,
so everything else (TensorFlow's 250 MB among them) is shared. It takes seconds. A full
venv of the 211 distributions installed here took 51 s to download, 142 s to install with
pip (18 s with uv) and 2.3 GB per run, and one of them (an sdist) cannot be installed
offline at all.

It is checked: after building, every distribution the job used is identified
(``usage.distribution_identity``: version and content) by the venv's own interpreter
and compared with the record; any difference refuses, naming the distribution, and so
does a recorded Python other than this one, or a distribution the index does not have
(an editable or local install). It is built in a temporary directory beside the cache
and renamed when complete, so a killed build never leaves an environment that looks ready.

Pure: ``recorded_packages``, ``plan``, ``cache_key``, the command builders, ``requirements``,
``pth_text``, ``mismatches``. I/O: ``environment``, ``probe``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import site
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from launcher import proc
from launcher.errors import RebuildError
from launcher.record import usage

LAUNCHER_DISTRIBUTION = "tf-repro-launcher"  # the launcher itself: the replay runs this one's code
LAUNCHER_ROOT = str(Path(__file__).resolve().parents[2])  # put on the job's PYTHONPATH (job.LAUNCHER_ROOT)
SHARED_PTH = "_launch_shared.pth"
INFO = "rebuild.json"  # what was built, for reading


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
        raise RebuildError(f"the run used Python {software.get('python')} and this is Python {python}: "
                           f"run launch with Python {software.get('python')} to rebuild its environment")  # fmt: skip
    recorded = recorded_packages(software["packages"])
    used = {name: d for name, d in (software.get("distributions") or {}).items()
            if d is not None and name != LAUNCHER_DISTRIBUTION}  # fmt: skip
    for name in used:
        if name not in recorded:
            raise RebuildError(f"the job used {name}, which the run's installed packages do not list: "
                               "it cannot be rebuilt", distribution=name)  # fmt: skip
    differ = {name for name, _, _ in mismatches(used, here_used)}  # used, and not as recorded here
    install = [f"{name}=={version}" for name, version in sorted(recorded.items())
               if here.get(name) != version or name in differ]  # fmt: skip
    return Plan(recorded=recorded, install=tuple(install), used=used)


def cache_key(p: Plan, interpreter: str, shared: Iterable[str]) -> str:
    """The environment's name: the recorded distribution set, what is installed over this
    interpreter (its path and version) and the site directories shared."""
    canonical = json.dumps({"recorded": sorted(f"{n}=={v}" for n, v in p.recorded.items()), "install": list(p.install),
                            "interpreter": interpreter, "shared": list(shared)}, sort_keys=True)  # fmt: skip
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


def download_argv(python: str, dest: Path, wanted: Iterable[str]) -> list[str]:
    """Download these ``name==version`` as wheels, without their dependencies."""
    return [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
            "--retries", "2", "--dest", str(dest), *wanted]  # fmt: skip


def install_argv(python: str, venv_python: Path, wheels: Path, requirements_file: Path) -> list[str]:
    """Install the downloaded wheels into the venv, offline, each pinned by its hash (pip run
    by this interpreter for the venv's, the venv seeing nothing else; no pip configuration)."""
    return [python, "-m", "pip", "--isolated", "--python", str(venv_python), "install", "--no-index", "--no-deps",
            "--require-hashes", "--ignore-installed", "--no-warn-script-location", "--disable-pip-version-check",
            "--find-links", str(wheels), "-r", str(requirements_file)]  # fmt: skip


def wheel_name(filename: str) -> tuple[str, str]:
    """(normalized name, version) of a wheel file name (``name-version[-build]-py-abi-platform.whl``)."""
    name, version = filename.split("-")[:2]
    return _normalize(name), version


def requirements(wheels: Mapping[str, tuple[str, str]]) -> str:
    """A requirements file pinning each ``name`` to ``(version, sha256 of its wheel)``."""
    return "".join(f"{name}=={version} --hash=sha256:{digest}\n" for name, (version, digest) in sorted(wheels.items()))


def pth_text(site_dirs: Iterable[str]) -> str:
    """A ``.pth`` that adds these site directories after the venv's own, their ``.pth`` files processed."""
    return "".join(f"import site; site.addsitedir({d!r})\n" for d in site_dirs)


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


def environment(stored_fp: dict, *, cache_root: Path | None = None, echo: bool = True) -> Path:
    """The Python interpreter of an environment holding the run's recorded distributions,
    built (or found in the cache under ``cache_root``, default ``default_cache_root()``) and
    verified; raises ``RebuildError``."""
    root = cache_root or default_cache_root()
    used_names = list((stored_fp.get("software") or {}).get("distributions") or {})
    p = plan(stored_fp, here_versions(), {n: usage.distribution_identity(n) for n in used_names},
             platform.python_version())  # fmt: skip
    shared = shared_site_dirs()
    final = root / cache_key(p, os.path.realpath(sys.executable) + " " + sys.version, shared)
    if not (final / "bin" / "python").exists():
        try:
            _build(p, final, shared, echo)
        except OSError as exc:
            raise RebuildError(f"cannot write the rebuilt environment at {final} ({exc.strerror or exc}): "
                               "remove it, or free or fix the cache directory") from None  # fmt: skip
    python = final / "bin" / "python"
    verify(python, p)
    return python


def verify(python: Path, p: Plan) -> dict:
    """Refuse unless ``python`` sees every distribution the job used as recorded; its probe."""
    probed = probe(python, list(p.used))
    wrong = mismatches(p.used, probed["distributions"])
    if wrong:
        name, want, got = wrong[0]
        found = "missing" if got is None else f"{got.get('version')} (files {str(got.get('files_sha256'))[:12]})"
        raise RebuildError(f"the rebuilt environment's {name} is {found}, the run's was {want.get('version')} "
                           f"(files {str(want.get('files_sha256'))[:12]}): its wheel on the index is not the one "
                           f"the run used ({python.parent.parent})", distribution=name)  # fmt: skip
    return probed


_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
try:
    import launcher, launcher.run.bootstrap, launcher.run.determinism, launcher.run.tasks, omegaconf
    from launcher.record import fingerprint, probes, runs, usage
    out = {"software": probes.software(), "launcher": launcher.__file__,
           "distributions": {name: usage.distribution_identity(name) for name in sys.argv[2:]}}
except Exception as exc:
    out = {"error": f"{type(exc).__name__}: {exc}"}
print(json.dumps(out))
"""


def probe(python: Path, names: list[str]) -> dict:
    """The software (``probes.software()``) and the identities of ``names`` as ``python`` sees
    them, with the launcher importable as the job imports it; for ``precheck(probed=...)``."""
    out = proc.capture([str(python), "-c", _PROBE, LAUNCHER_ROOT, *names], timeout=300)
    try:
        probed = json.loads(out or "")
    except ValueError:
        raise RebuildError(f"{python} does not start: remove {python.parent.parent} and rebuild") from None
    if "error" in probed:
        raise RebuildError(f"the launcher cannot be imported by {python} as the job imports it "
                           f"({probed['error']})")  # fmt: skip
    return probed


def _build(p: Plan, final: Path, shared: list[str], echo: bool) -> None:
    """Build the overlay in a temporary directory beside ``final``, then rename it there."""
    started = time.monotonic()
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(final)
    tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    log = final.with_name(f"{final.name}.log")  # beside it: kept when a build fails
    if echo:
        print(f"[launch] rebuilding the run's environment in {final}: {', '.join(p.install) or 'nothing'} "
              "over this Python's site-packages", file=sys.stderr, flush=True)  # fmt: skip
    try:
        _run([sys.executable, "-m", "venv", "--without-pip", str(tmp)], log, "creating the venv")
        if p.install:
            _install(p.install, tmp, log)
        site_dir = tmp / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
        (site_dir / SHARED_PTH).write_text(pth_text(shared))
        info = {"install": list(p.install), "shared": shared, "seconds": round(time.monotonic() - started, 1)}
        (tmp / INFO).write_text(json.dumps(info, indent=2) + "\n")
        try:
            tmp.rename(final)
        except OSError:  # another launch built it first
            if not (final / "bin" / "python").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if echo:
        print(f"[launch] rebuilt in {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)


def _install(wanted: tuple[str, ...], venv: Path, log: Path) -> None:
    wheels = venv / "wheels"
    if proc.run_streaming(download_argv(sys.executable, wheels, wanted), os.environ, log, echo=False) != 0:
        for one in wanted:  # which ones: the index has no wheel of them, or is not reachable
            if proc.run_streaming(download_argv(sys.executable, wheels, [one]), os.environ, log, echo=False) != 0:
                raise RebuildError(f"no wheel of {one} could be downloaded (an editable or local install, or no "
                                   f"wheel on the index; was the index reachable?): it cannot be rebuilt",
                                   distribution=one.partition("==")[0])  # fmt: skip
    found = {}
    for wheel in sorted(wheels.glob("*.whl")):
        found[wheel_name(wheel.name)[0]] = (wheel_name(wheel.name)[1], hashlib.sha256(wheel.read_bytes()).hexdigest())
    for one in wanted:
        name, _, version = one.partition("==")
        if found.get(name, ("",))[0] != version:
            raise RebuildError(f"the index gave no wheel of {one}: it cannot be rebuilt", distribution=name)
    pinned = venv / "requirements.txt"
    pinned.write_text(requirements({name: found[name] for name in (w.partition("==")[0] for w in wanted)}))
    _run(install_argv(sys.executable, venv / "bin" / "python", wheels, pinned), log, "installing the wheels")
    shutil.rmtree(wheels)


def _run(argv: list[str], log: Path, what: str) -> None:
    if proc.run_streaming(argv, os.environ, log, echo=False) != 0:
        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-2:])
        raise RebuildError(f"rebuilding the run's environment failed {what} (see {log}): {tail}")


def _remove_stale(final: Path) -> None:
    """Remove the temporary directories of builds of ``final`` whose process is gone (killed)."""
    for tmp in final.parent.glob(f".{final.name}.*.tmp"):
        try:
            os.kill(int(tmp.name.rsplit(".", 2)[1]), 0)
        except ProcessLookupError:
            shutil.rmtree(tmp, ignore_errors=True)
        except (ValueError, PermissionError):
            continue
