"""Probes of what a run ran on: hardware, software, code.

Each *probe* (reads a file or runs a program) is kept apart from its *parser* (pure,
tested on recorded output); nothing is mutated while probing. The launcher process
never imports TensorFlow: ``tensorflow_software`` runs in the job process. The GPUs are
read through NVML (``launcher.record.probe.nvml``) and, where NVML is missing, from
``nvidia-smi``'s output; the record says which (``gpu_facts``).
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import platform
import re
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path

from launcher import proc
from launcher.record.hashing import file_sha256
from launcher.record.probe import cpuid, nvml

# ---------------------------------------------------------------- hardware
# Instruction-set features that select oneDNN/Eigen/XLA kernels on x86 and ARM.
ISA_PATTERNS = (
    "sse4_1",
    "sse4_2",
    "avx",
    "avx2",
    "avx512*",
    "amx*",
    "fma",
    "f16c",
    "avx_vnni*",
    "asimd*",
    "sve*",
    "bf16",
    "i8mm",
)


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
# ECMA-48 control sequences: `nvidia-smi topo -m` underlines its header (ESC[4m ... ESC[0m)
# even when its output is a pipe.
ANSI_ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def strip_ansi(text: str) -> str:
    """``text`` without terminal escape sequences (colours, underline)."""
    return ANSI_ESCAPE.sub("", text)


def parse_nvidia_smi_query(text: str) -> list[dict]:
    """Rows of ``nvidia-smi --query-gpu=GPU_QUERY --format=csv,noheader,nounits``."""
    gpus = []
    for line in strip_ansi(text).strip().splitlines():
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
    match = re.search(r"CUDA Version:\s*([\d.]+)", strip_ansi(text))
    return match.group(1) if match else None


def parse_nvidia_topology(text: str) -> list[list[str]]:
    """The GPU-to-GPU link matrix of ``nvidia-smi topo -m`` (X, NV#, PIX, PXB, PHB, NODE, SYS):
    one row per GPU, NIC columns and the affinity columns dropped."""
    lines = strip_ansi(text).splitlines()
    header = next((line for line in lines if any(re.fullmatch(r"GPU\d+", c) for c in line.split())), None)
    if header is None:
        return []
    n_gpus = sum(1 for cell in header.split() if re.fullmatch(r"GPU\d+", cell))
    return [
        line.split()[1 : 1 + n_gpus]
        for line in lines[lines.index(header) + 1 :]
        if line[:1].strip() and re.fullmatch(r"GPU\d+", line.split()[0])
    ]


GPU_SOURCES = ("nvml", "nvidia-smi")  # hardware.gpu_source: the one that answered, or None


def gpu_record(
    source: str | None,
    gpus: list[dict],
    cuda_driver_version: str | None = None,
    topology: list[list[str]] | None = None,
    note: str | None = None,
) -> dict:
    """The GPU part of ``hardware``, one form whichever source answered: ``gpus``,
    ``gpu_source`` (``nvml``, ``nvidia-smi`` or None), ``gpu_source_note`` (why NVML was not
    used; None when it was), and, with GPUs, ``cuda_driver_version`` and ``gpu_topology``."""
    record: dict = {"gpus": gpus, "gpu_source": source, "gpu_source_note": note}
    if gpus:
        record["cuda_driver_version"] = cuda_driver_version
        record["gpu_topology"] = topology if topology is not None else []
    return record


def read_text(path: str) -> str:
    """A file's text, or "" when it cannot be read (a probe never fails the run)."""
    return _read(path)


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def gpu_facts(topology: bool = True) -> dict:
    """The GPUs of this machine (``gpu_record``): through NVML where it answers, as
    ``nvidia-smi`` itself does, else from ``nvidia-smi``'s output; never raises.

    ``topology=False`` spares the fallback its ``nvidia-smi`` banner and ``topo -m`` calls
    (a GPU request check needs only the list)."""
    facts, why_not = nvml.probe()
    if facts is not None:
        return gpu_record("nvml", facts["gpus"], facts["cuda_driver_version"], facts["gpu_topology"])
    query = proc.capture(["nvidia-smi", f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"])
    if query is None:
        return gpu_record(None, [], note=f"{why_not}; nvidia-smi not found, or it failed")
    found = parse_nvidia_smi_query(query)
    if not found or not topology:
        return gpu_record("nvidia-smi", found, note=why_not)
    banner = proc.capture(["nvidia-smi"]) or ""
    topo = proc.capture(["nvidia-smi", "topo", "-m"]) or ""
    return gpu_record("nvidia-smi", found, parse_cuda_driver_version(banner), parse_nvidia_topology(topo), why_not)


def gpus() -> list[dict]:
    """The GPUs NVML (else ``nvidia-smi``) lists: empty without either, or without a driver."""
    return gpu_facts(topology=False)["gpus"]


def hardware() -> dict:
    """The CPU, memory and GPUs of this machine, for the launcher side of the fingerprint."""
    cpu = parse_cpuinfo(_read("/proc/cpuinfo"))
    cpu["caches"] = _cpu_caches()
    cpu["logical_cores"] = os.cpu_count()
    return {"cpu": cpu, "memory_bytes": parse_meminfo(_read("/proc/meminfo")), **gpu_facts()}


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
        name, version = name_and_version(dist.read_text("METADATA") or dist.read_text("PKG-INFO") or "")
        if name:
            found.setdefault(re.sub(r"[-_.]+", "-", name).lower(), version)
    return sorted(f"{name}=={version}" for name, version in found.items())


_HEADER = re.compile(r"^(Name|Version):[ \t]*(.*)$", re.M)


def name_and_version(text: str) -> tuple[str | None, str | None]:
    """The ``Name`` and ``Version`` of a distribution's ``METADATA``, read from its headers alone:
    ``dist.metadata`` parses the whole file, long description included (a job reads every installed
    distribution's: a fifth of a second, most of it in descriptions)."""
    header = text.split("\n\n", 1)[0]
    found: dict[str, str] = {}
    for key, value in _HEADER.findall(header):
        found.setdefault(key, value)
    return found.get("Name") or None, found.get("Version")


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
    return {
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "numpy": numpy.__version__,
        "tf_build": build,
        "tf_gpus": tensorflow_gpus(tf),
    }


def tensorflow_gpus(tf) -> list[dict]:
    """The GPUs this TensorFlow can use: empty for a CPU build, no driver, or none visible.

    Listing physical devices does not start TensorFlow's runtime, so the user's code
    may still set memory growth afterwards.
    """
    found = []
    for device in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(device)
        cap = details.get("compute_capability")
        found.append(
            {
                "device": device.name,
                "name": details.get("device_name"),
                "compute_capability": ".".join(map(str, cap)) if cap else None,
            }
        )
    return found


def named_devices(value: str | None) -> list[str]:
    """The devices ``CUDA_VISIBLE_DEVICES`` names, as CUDA reads it.

    Comma-separated indices or ``GPU-``/``MIG-`` UUID prefixes; CUDA stops at the first
    negative index, so ``-1`` (or an empty value) names none: the usual way to hide GPUs.
    """
    devices = []
    for token in (value or "").split(","):
        token = token.strip()
        if not token:
            continue
        if token.lstrip("-").isdigit() and int(token) < 0:
            break
        devices.append(token)
    return devices


SOURCE_NAMES = {"nvml": "NVML", "nvidia-smi": "nvidia-smi", None: "the launcher's probe"}


def tensorflow_gpu_notes(
    hardware: Mapping, tf_gpus: Sequence[Mapping] | None, environment: Mapping[str, str]
) -> list[str]:
    """Where the GPUs TensorFlow saw in the job (``software.tf_gpus``) disagree with the GPUs
    the launcher listed (``hardware.gpus``, from NVML or nvidia-smi), one sentence each:
    ``TensorFlow sees GPU0 as compute capability 8.0, NVML says 9.0``. Empty when they agree.

    TensorFlow's GPU k is the k-th device ``CUDA_VISIBLE_DEVICES`` names (in ``environment``,
    the job's recorded variables), or the k-th listed GPU when it is unset. Unset, CUDA
    numbers the fastest GPU first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``: on a machine of
    unlike GPUs each device is then only looked for among all of them. A ``MIG-`` device is
    an instance of some GPU, not compared. Recorded for reading, out of the key: the
    keyed GPU facts are the launcher's.
    """
    listed = list(hardware.get("gpus") or [])
    seen = list(tf_gpus or [])
    source = SOURCE_NAMES.get(hardware.get("gpu_source"), "the launcher's probe")
    cuda_visible = environment.get("CUDA_VISIBLE_DEVICES")
    if cuda_visible is None:
        expected: list[Mapping | None] = listed
        ordered = environment.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID" or len({_kind(g) for g in listed}) <= 1
    else:
        expected = [_named_gpu(token, listed) for token in named_devices(cuda_visible)]
        ordered = True
    notes = []
    if len(seen) != len(expected):
        named = f" (CUDA_VISIBLE_DEVICES={cuda_visible} names {len(expected)})" if cuda_visible is not None else ""
        notes.append(f"TensorFlow sees {_count(seen)}, {source} lists {_count(listed)}{named}")
    for k, device in enumerate(seen):
        what = _kind(device)
        if not ordered:
            if what not in {_kind(g) for g in listed}:
                notes.append(
                    f"TensorFlow sees GPU{k} as {what[0]}, compute capability {what[1]}; {source} lists no such GPU"
                )
            continue
        gpu = expected[k] if k < len(expected) else None
        if gpu is None:
            continue  # a MIG instance, or more devices than named (said above)
        label = f"GPU{k}" + (f" ({source}'s GPU {gpu.get('index')})" if gpu.get("index", k) != k else "")
        if what[0] != gpu.get("name"):
            notes.append(f"TensorFlow sees {label} as {what[0]}, {source} says {gpu.get('name')}")
        if what[1] != gpu.get("compute_capability"):
            notes.append(
                f"TensorFlow sees {label} as compute capability {what[1]}, "
                f"{source} says {gpu.get('compute_capability')}"
            )
    return notes


def _kind(gpu: Mapping) -> tuple[str | None, str | None]:
    return gpu.get("name"), gpu.get("compute_capability")


def _count(gpus: Sequence) -> str:
    return "no GPU" if not gpus else f"{len(gpus)} GPU" + ("s" if len(gpus) > 1 else "")


def _named_gpu(token: str, listed: Sequence[Mapping]) -> Mapping | None:
    """The listed GPU a ``CUDA_VISIBLE_DEVICES`` entry names: by index or UUID prefix; None
    for a MIG instance or a GPU not listed."""
    for i, gpu in enumerate(listed):
        if token.isdigit() and int(token) == int(gpu.get("index", i)):
            return gpu
        if not token.isdigit() and str(gpu.get("uuid", "")).upper().startswith(token.upper()):
            return gpu
    return None


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

    info: dict = {"launcher_version": launcher_source_version(), "git_commit": None, "dirty": None, "diff_sha256": None}
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
        info["script_sha256"] = file_sha256(script)
    if notebook:
        from launcher.record import notebooks

        info["notebook_sha256"] = file_sha256(notebook)
        info["notebook_cells"] = notebooks.cells_key(notebooks.load(notebook))
    return info
