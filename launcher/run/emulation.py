"""Another x86-64 CPU on this machine: the job process under qemu-user (``replay --cpu MODEL``).

``qemu-x86_64 -cpu MODEL python ...`` runs the same interpreter and wheels with the
instructions of ``MODEL`` (qemu's TCG runs AVX2 and below, so AVX-512 models are
emulated without AVX-512). The process' children would run natively (no binfmt_misc
here), so the job process itself is wrapped. Under qemu-user ``/proc/cpuinfo`` is the
host's file: the emulated CPU is known only by asking ``CPUID`` inside the emulator
(``launcher.record.probe.cpuid``), which is what the fingerprint records for such a run.
"""

from __future__ import annotations

import copy
import functools
import json
import platform
import re
import shutil

from launcher import entrypoints, proc
from launcher.errors import ConfigError
from launcher.record.probe import cpuid, probes

QEMU = "qemu-x86_64"
INSTALL = "apt-get install qemu-user"


def parse_cpu_models(text: str) -> list[str]:
    """The model names of ``qemu-x86_64 -cpu help`` ("x86 Haswell   (alias ...)" lines)."""
    return [m.group(1) for m in re.finditer(r"^x86\s+(\S+)", text, re.M)]


def qemu() -> str:
    """The path of qemu-x86_64; ``ConfigError`` with the install command when it is missing."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        raise ConfigError(f"--cpu emulates x86-64 CPUs with {QEMU}; this machine is {platform.machine()}")
    path = shutil.which(QEMU)
    if path is None:
        raise ConfigError(f"--cpu needs qemu-user's {QEMU}, which is not installed here: {INSTALL}")
    return path


def check_model(model: str) -> str:
    """Refuse a CPU model qemu does not know (one line, with a few it does); the qemu path."""
    path = qemu()
    known = parse_cpu_models(proc.capture([path, "-cpu", "help"], any_status=True) or "")
    if known and model not in known:
        some = ", ".join(m for m in ("Haswell", "Skylake-Client", "EPYC", "EPYC-Rome", "Nehalem") if m in known)
        raise ConfigError(f"--cpu {model!r}: qemu-x86_64 knows no such CPU model (e.g. {some}; all: {QEMU} -cpu help)")
    return path


def wrap(argv: list[str], model: str) -> list[str]:
    """``argv`` (a Python command) run under qemu-user as CPU ``model``."""
    return [qemu(), "-cpu", model, *argv]


def version_line(text: str) -> str | None:
    """``qemu-x86_64 version 7.2.22 (Debian ...)`` -> ``7.2.22``."""
    match = re.search(r"version\s+(\S+)", text)
    return match.group(1) if match else None


def emulated_cpu(model: str, python: str, launcher_root: str) -> dict:
    """See ``_emulated_cpu``: asked once per process (each ask starts an emulated interpreter)."""
    return copy.deepcopy(_emulated_cpu(model, python, launcher_root))


@functools.lru_cache(maxsize=8)
def _emulated_cpu(model: str, python: str, launcher_root: str) -> dict:
    """The ``hardware.cpu`` of a job run as ``model``: what CPUID says inside the emulator
    (vendor, brand, family/model/stepping, flags), the emulator and the model asked for. Caches
    and microcode are the emulator's inventions or the host's: recorded as unknown."""
    path = check_model(model)
    code = f"import sys; sys.path.insert(0, {launcher_root!r}); import {entrypoints.CPUID.module} as c; c.main()"
    out = proc.capture([path, "-cpu", model, python, "-P", "-c", code], timeout=300)
    try:
        seen = json.loads(out or "")
    except ValueError:
        seen = None
    if not seen:
        raise ConfigError(f"--cpu {model}: could not read the emulated CPU ({QEMU} -cpu {model} {python} failed)")
    flags = seen["flags"]
    version = version_line(proc.capture([path, "--version"], any_status=True) or "")
    return {
        "vendor": seen["vendor"],
        "model": seen["model"],
        "isa": sorted(f for f in flags if probes.is_isa_flag(f)),
        "family": seen["family"],
        "model_number": seen["model_number"],
        "stepping": seen["stepping"],
        "cache_size": "unknown (emulated)",
        "caches": "unknown (emulated)",
        "microcode": None,
        "levels": cpuid.levels(flags),
        "emulated": {"by": QEMU, "version": version, "cpu": model},
    }
