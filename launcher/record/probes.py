"""Probes of what a run ran on: hardware, software, code.

Each *probe* (reads a file or runs a program) is kept apart from its *parser* (pure,
tested on recorded output); nothing is mutated while probing. The launcher process
never imports TensorFlow: ``tensorflow_software`` runs in the job process.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import platform
import re
import sys
from importlib import metadata
from pathlib import Path

from launcher import proc
from launcher.record import cpuid

# ---------------------------------------------------------------- hardware
# Instruction-set features that select oneDNN/Eigen/XLA kernels on x86 and ARM.
ISA_PATTERNS = ("sse4_1", "sse4_2", "avx", "avx2", "avx512*", "amx*", "fma", "f16c", "avx_vnni*",
                "asimd*", "sve*", "bf16", "i8mm")  # fmt: skip


def is_isa_flag(flag: str) -> bool:
    """Whether a /proc/cpuinfo flag is one of the kernel-selecting ISA features (``ISA_PATTERNS``)."""
    return any(fnmatch.fnmatchcase(flag, p) for p in ISA_PATTERNS)


def parse_cpuinfo(text: str) -> dict:
    """Vendor, model and kernel-selecting ISA flags from /proc/cpuinfo (first CPU)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = (fields.get("flags") or fields.get("Features") or "").split()
    isa = sorted({f for f in flags if is_isa_flag(f)})
    return {
        "vendor": fields.get("vendor_id") or fields.get("CPU implementer"),
        "model": fields.get("model name") or fields.get("CPU part"),
        "isa": isa,
        # The generation behind a model name ("AMD EPYC" names several): x86's family, model
        # and stepping, or ARM's architecture, variant and revision.
        "family": fields.get("cpu family") or fields.get("CPU architecture"),
        "model_number": fields.get("model") or fields.get("CPU variant"),
        "stepping": fields.get("stepping") or fields.get("CPU revision"),
        "cache_size": fields.get("cache size"),
        "microcode": fields.get("microcode"),
        # The x86-64 levels (v2, v3, v4) all of whose flags the CPU has: portable runs key on one.
        "levels": cpuid.levels(flags),
    }


def parse_cpu_caches(entries: list[tuple[str, str, str]]) -> dict[str, str]:
    """``{"L1d": "48K", "L1i": "32K", "L2": "1024K", "L3": "32768K"}`` from (level, type, size)
    of ``/sys/devices/system/cpu/cpu0/cache/index*``."""
    out = {}
    for level, kind, size in entries:
        suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
        out[f"L{level}{suffix}"] = size
    return dict(sorted(out.items()))


def _cpu_caches() -> dict[str, str]:
    entries = []
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        level, kind, size = (_read(str(index / name)).strip() for name in ("level", "type", "size"))
        if level and size:
            entries.append((level, kind, size))
    return parse_cpu_caches(entries)


def parse_meminfo(text: str) -> int | None:
    """MemTotal in bytes from /proc/meminfo."""
    match = re.search(r"^MemTotal:\s+(\d+)\s*kB", text, re.M)
    return int(match.group(1)) * 1024 if match else None


GPU_QUERY = "index,name,compute_cap,driver_version,memory.total,mig.mode.current,uuid"


def parse_nvidia_smi_query(text: str) -> list[dict]:
    """Rows of ``nvidia-smi --query-gpu=GPU_QUERY --format=csv,noheader,nounits``."""
    gpus = []
    for line in text.strip().splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 7:
            continue
        index, name, cap, driver, memory, mig, uuid = cells
        gpus.append(
            {
                "index": int(index),
                "name": name,
                "compute_capability": cap,
                "driver_version": driver,
                "memory_mib": int(memory) if memory.isdigit() else None,
                "mig_mode": mig,
                "uuid": uuid,
            }
        )
    return gpus


def parse_cuda_driver_version(text: str) -> str | None:
    """The CUDA driver API version from nvidia-smi's banner ('CUDA Version: 12.4')."""
    match = re.search(r"CUDA Version:\s*([\d.]+)", text)
    return match.group(1) if match else None


def parse_nvidia_topology(text: str) -> list[list[str]]:
    """The GPU-to-GPU link matrix of ``nvidia-smi topo -m`` (X, NV#, PIX, PXB, PHB, NODE, SYS)."""
    lines = text.splitlines()
    if not lines:
        return []
    n_gpus = sum(1 for cell in lines[0].split() if re.fullmatch(r"GPU\d+", cell))
    return [
        line.split()[1 : 1 + n_gpus]
        for line in lines[1:]
        if line[:1].strip() and re.fullmatch(r"GPU\d+", line.split()[0])
    ]


def read_text(path: str) -> str:
    """A file's text, or "" when it cannot be read (a probe never fails the run)."""
    return _read(path)


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def gpus() -> list[dict]:
    """The GPUs ``nvidia-smi`` lists (empty without nvidia-smi or a driver)."""
    query = proc.capture(["nvidia-smi", f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"])
    return parse_nvidia_smi_query(query or "")


def hardware() -> dict:
    cpu = parse_cpuinfo(_read("/proc/cpuinfo"))
    cpu["caches"] = _cpu_caches()
    cpu["logical_cores"] = os.cpu_count()
    info = {"cpu": cpu, "memory_bytes": parse_meminfo(_read("/proc/meminfo")), "gpus": gpus()}
    if info["gpus"]:
        info["cuda_driver_version"] = parse_cuda_driver_version(proc.capture(["nvidia-smi"]) or "")
        info["gpu_topology"] = parse_nvidia_topology(proc.capture(["nvidia-smi", "topo", "-m"]) or "")
    return info


# ---------------------------------------------------------------- software
def parse_os_release(text: str) -> dict:
    values = dict(re.findall(r'^([A-Z_]+)="?([^"\n]*)"?$', text, re.M))
    return {"id": values.get("ID"), "version_id": values.get("VERSION_ID"), "name": values.get("PRETTY_NAME")}


def installed_distributions() -> list[str]:
    """``name==version`` of every installed distribution, sorted, names normalized: the one
    an import finds first where two versions are installed (a venv over shared site-packages).

    Read again only when a ``sys.path`` directory changed since the last call (an install or
    an uninstall adds or removes a ``.dist-info`` entry there): a job asks at its start, before
    each checkpoint and at its end, and reading every distribution's metadata takes a quarter
    of a second."""
    global _distributions_read
    state = _path_state()
    if _distributions_read is None or _distributions_read[0] != state:
        _distributions_read = (state, _read_distributions())
    return list(_distributions_read[1])


_distributions_read: tuple[tuple, list[str]] | None = None  # (the sys.path state it was read in, the list)


def _path_state() -> tuple:
    """``sys.path`` and the modification time of each directory of it."""
    state = []
    for entry in sys.path:
        try:
            state.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            state.append((entry, None))
    return tuple(state)


def _read_distributions() -> list[str]:
    found: dict[str, str] = {}
    for dist in metadata.distributions():  # in sys.path order
        name = dist.metadata["Name"]
        if name:
            found.setdefault(re.sub(r"[-_.]+", "-", name).lower(), dist.version)
    return sorted(f"{name}=={version}" for name, version in found.items())


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def distribution_version(name: str) -> str | None:
    """The installed version of distribution ``name`` (None when not installed), without importing it."""
    return _version(name)


def software() -> dict:
    packages = installed_distributions()
    return {
        "os": parse_os_release(_read("/etc/os-release")),
        "kernel": platform.release(),
        "libc": "-".join(platform.libc_ver()),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "tensorflow": _version("tensorflow-cpu") or _version("tensorflow"),
        "keras": _version("keras"),
        "numpy": _version("numpy"),
        "packages": packages,
        "packages_sha256": hashlib.sha256("\n".join(packages).encode()).hexdigest(),
        "container": None,
    }


def tensorflow_software() -> dict:
    """TensorFlow's build facts, read in the job process (which has TensorFlow loaded)."""
    import keras
    import numpy
    import tensorflow as tf

    build = {k: str(v) for k, v in sorted(tf.sysconfig.get_build_info().items())}
    return {"tensorflow": tf.__version__, "keras": keras.__version__, "numpy": numpy.__version__,
            "tf_build": build, "tf_gpus": tensorflow_gpus(tf)}  # fmt: skip


def tensorflow_gpus(tf) -> list[dict]:
    """The GPUs this TensorFlow can use: empty for a CPU build, no driver, or none visible.

    Listing physical devices does not start TensorFlow's runtime, so the user's code
    may still set memory growth afterwards.
    """
    found = []
    for device in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(device)
        cap = details.get("compute_capability")
        found.append({"device": device.name, "name": details.get("device_name"),
                      "compute_capability": ".".join(map(str, cap)) if cap else None})  # fmt: skip
    return found


# ---------------------------------------------------------------- code
def parse_git_status(text: str) -> bool:
    """Dirty when ``git status --porcelain`` lists anything."""
    return bool(text.strip())


def code(cwd: str, script: str | None = None, notebook: str | None = None) -> dict:
    """The launcher's version with its source hash, a script's hash, a notebook's code cells
    (``notebook_cells``, keyed) and whole file (``notebook_sha256``, what its snapshot keeps),
    and the git state of the launch directory (for reading: the modules the job imported are
    hashed by the job itself)."""
    from launcher.record.hashing import launcher_source_version

    info: dict = {"launcher_version": launcher_source_version(), "git_commit": None, "dirty": None,
                  "diff_sha256": None}  # fmt: skip
    commit = proc.capture(["git", "rev-parse", "HEAD"], cwd=cwd)
    if commit:
        status = proc.capture(["git", "status", "--porcelain"], cwd=cwd) or ""
        diff = proc.capture(["git", "diff", "HEAD", "--binary"], cwd=cwd) or ""
        info.update(
            git_commit=commit.strip(),
            dirty=parse_git_status(status),
            diff_sha256=hashlib.sha256((diff + status).encode()).hexdigest() if status.strip() else None,
        )
    if script:
        info["script_sha256"] = hashlib.sha256(Path(script).read_bytes()).hexdigest()
    if notebook:
        from launcher.record import notebooks

        info["notebook_sha256"] = hashlib.sha256(Path(notebook).read_bytes()).hexdigest()
        info["notebook_cells"] = notebooks.cells_key(notebooks.load(notebook))
    return info


