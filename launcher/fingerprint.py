"""What a run ran on: hardware, software, environment, code, data, config.

Gatherers are small functions (``hardware``, ``software``, ``code``); each *probe* (reads a file or
runs a program) is kept apart from its *parser* (pure, tested on recorded output).
Nothing is mutated while probing. The launcher process never imports TensorFlow:
the job process adds TensorFlow's facts and the effective determinism settings
(``tensorflow_software``, called from the bootstrap).

``KEY`` below is the one definition of the comparability key: the fields that must
match for a bitwise comparison of two runs to mean anything.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import platform
import re
import socket
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path

from launcher import proc
from launcher.errors import SchemaError

SCHEMA = 1
READABLE_SCHEMAS = (1,)

# ---------------------------------------------------------------- environment
# Recorded by allowlist only: run directories get shared, secrets live in env vars.
ENV_ALLOW = (
    "TF_*", "CUDA_*", "XLA_FLAGS", "OMP_*", "MKL_*", "KMP_*", "OPENBLAS_*", "NVIDIA_*",
    "PYTHONHASHSEED", "CUBLAS_WORKSPACE_CONFIG", "TF_ENABLE_ONEDNN_OPTS", "LD_PRELOAD",
)  # fmt: skip
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
# Terraform shares the TF_ prefix; its variables (TF_VAR_* may hold secrets) never enter.
ENV_DENY = ("TF_VAR_*", "TF_CLI_*", "TF_TOKEN_*", "TF_LOG*", "TF_WORKSPACE", "TF_DATA_DIR",
            "TF_INPUT", "TF_IN_AUTOMATION", "TF_PLUGIN_CACHE_DIR", "TF_REGISTRY_*")  # fmt: skip


def allowed_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``env`` on the allowlist, never one whose name looks like a secret."""
    out = {}
    for name, value in env.items():
        upper = name.upper()
        if any(word in upper for word in SECRET_WORDS):
            continue
        if any(fnmatch.fnmatchcase(upper, pattern) for pattern in ENV_DENY):
            continue
        if any(fnmatch.fnmatchcase(upper, pattern) for pattern in ENV_ALLOW):
            out[name] = value
    return dict(sorted(out.items()))


# ---------------------------------------------------------------- hardware
# Instruction-set features that select oneDNN/Eigen/XLA kernels on x86 and ARM.
ISA_PATTERNS = ("sse4_1", "sse4_2", "avx", "avx2", "avx512*", "amx*", "fma", "f16c", "avx_vnni*",
                "asimd*", "sve*", "bf16", "i8mm")  # fmt: skip


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
    isa = sorted({f for f in flags if any(fnmatch.fnmatchcase(f, p) for p in ISA_PATTERNS)})
    return {
        "vendor": fields.get("vendor_id") or fields.get("CPU implementer"),
        "model": fields.get("model name") or fields.get("CPU part"),
        "isa": isa,
    }


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


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def hardware() -> dict:
    cpu = parse_cpuinfo(_read("/proc/cpuinfo"))
    cpu["logical_cores"] = os.cpu_count()
    info = {"cpu": cpu, "memory_bytes": parse_meminfo(_read("/proc/meminfo")), "gpus": []}
    query = proc.capture(["nvidia-smi", f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"])
    if query:
        info["gpus"] = parse_nvidia_smi_query(query)
        info["cuda_driver_version"] = parse_cuda_driver_version(proc.capture(["nvidia-smi"]) or "")
        info["gpu_topology"] = parse_nvidia_topology(proc.capture(["nvidia-smi", "topo", "-m"]) or "")
    return info


# ---------------------------------------------------------------- software
def parse_os_release(text: str) -> dict:
    values = dict(re.findall(r'^([A-Z_]+)="?([^"\n]*)"?$', text, re.M))
    return {"id": values.get("ID"), "version_id": values.get("VERSION_ID"), "name": values.get("PRETTY_NAME")}


def installed_distributions() -> list[str]:
    """``name==version`` of every installed distribution, sorted, names normalized."""
    found = set()
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.add(f"{re.sub(r'[-_.]+', '-', name).lower()}=={dist.version}")
    return sorted(found)


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


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
            "tf_build": build}  # fmt: skip


# ---------------------------------------------------------------- code
def parse_git_status(text: str) -> bool:
    """Dirty when ``git status --porcelain`` lists anything."""
    return bool(text.strip())


def code(cwd: str, script: str | None = None) -> dict:
    """The git state of the user's working directory, and the launcher's version."""
    from launcher import __version__

    info: dict = {"launcher_version": __version__, "git_commit": None, "dirty": None, "diff_sha256": None}
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
    return info


# ---------------------------------------------------------------- assembly
def collect(env: Mapping[str, str], cwd: str, config_sha256: str, script: str | None = None) -> dict:
    """The launcher-side fingerprint of a job about to start with environment ``env``.

    ``software``, ``determinism`` and ``data`` are filled in by the job process
    (``job_facts``), since a container's software is not the host's.
    """
    return {
        "schema": SCHEMA,
        "hardware": hardware(),
        "software": None,
        "environment": allowed_env(env),
        "code": code(cwd, script),
        "config_sha256": config_sha256,
        "host": {"hostname": socket.gethostname()},
        "determinism": None,
        "data": None,
    }


def job_facts(effective: dict, data_files: dict[str, str]) -> dict:
    """What the job process measures: its software (with TensorFlow's build), effective
    determinism settings and the data it read. Called in the job process."""
    sw = software()
    sw.update(tensorflow_software())
    return {"software": sw, "determinism": effective, "data": dict(sorted(data_files.items()))}


def merge_job_facts(fp: dict, facts: dict, container: dict | None = None) -> dict:
    """The complete fingerprint: launcher side, job side, and the container if there was one."""
    out = json.loads(json.dumps(fp))
    out.update(software=facts["software"], determinism=facts["determinism"], data=facts["data"])
    out["software"]["container"] = container
    return out


def check_schema(fp: dict, where: str) -> None:
    if fp.get("schema") not in READABLE_SCHEMAS:
        raise SchemaError(
            f"{where}: fingerprint schema {fp.get('schema')!r} is not readable by this launcher "
            f"(reads {', '.join(map(str, READABLE_SCHEMAS))})"
        )


# ---------------------------------------------------------------- comparability key
# The fields that must match for "same bits" to be a meaningful question.
# In:  anything that can change the floating-point result.
# Out: what cannot, or what differs between otherwise identical runs.
KEY: dict[str, Callable[[dict], object]] = {
    # CPU vendor/model/ISA choose oneDNN and Eigen kernels (FIELD-NOTES: AVX2/AVX-512/AMX).
    "hardware.cpu.vendor": lambda fp: fp["hardware"]["cpu"]["vendor"],
    "hardware.cpu.model": lambda fp: fp["hardware"]["cpu"]["model"],
    "hardware.cpu.isa": lambda fp: fp["hardware"]["cpu"]["isa"],
    # GPU model, compute capability and driver pick cuDNN/cuBLAS algorithms. Out: index,
    # UUID (a serial number) and MIG/memory, which do not change kernels.
    "hardware.gpus": lambda fp: [
        (g["name"], g["compute_capability"], g["driver_version"]) for g in fp["hardware"]["gpus"]
    ],
    # Out: logical cores and memory: thread counts are pinned and recorded in determinism.
    # Out: hostname, times, paths.
    # Every library version: the math itself. libc carries libm.
    "software.os": lambda fp: [fp["software"]["os"].get("id"), fp["software"]["os"].get("version_id")],
    "software.libc": lambda fp: fp["software"]["libc"],
    "software.python": lambda fp: fp["software"]["python"],
    "software.machine": lambda fp: fp["software"]["machine"],
    "software.tensorflow": lambda fp: fp["software"]["tensorflow"],
    "software.tf_build": lambda fp: fp["software"].get("tf_build"),
    "software.keras": lambda fp: fp["software"]["keras"],
    "software.numpy": lambda fp: fp["software"]["numpy"],
    "software.packages_sha256": lambda fp: fp["software"]["packages_sha256"],
    # The image a containerized run used (None for local runs): a different image is
    # different software even when versions agree. Out: the kernel (no effect on math).
    "software.container": lambda fp: _container_key(fp["software"].get("container")),
    # Numerics-relevant variables. Out: CUDA_VISIBLE_DEVICES, which names a slot, not a kind.
    "environment": lambda fp: {
        k: v for k, v in fp["environment"].items() if k not in ("CUDA_VISIBLE_DEVICES",)
    },
    # Effective settings, read back in the job: seed, op determinism, thread counts.
    "determinism": lambda fp: fp["determinism"],
    # The resolved config without store paths.
    "config_sha256": lambda fp: fp["config_sha256"],
    # The code that ran: user's commit and uncommitted changes, the launcher's version.
    "code.git_commit": lambda fp: fp["code"]["git_commit"],
    "code.diff_sha256": lambda fp: fp["code"]["diff_sha256"],
    "code.script_sha256": lambda fp: fp["code"].get("script_sha256"),
    "code.launcher_version": lambda fp: fp["code"]["launcher_version"],
    # The data read, by content (paths out: the same file may live elsewhere).
    "data": lambda fp: sorted((fp.get("data") or {}).values()),
}


def _container_key(container: dict | None) -> object:
    if not container:
        return None
    # Out: image_id. A verified rebuild (same inputs, same installed-tree hash) has a new id
    # only because Docker records creation times; the tag and the tree hash say what ran.
    return {k: container.get(k) for k in ("content_tag", "packages_sha256", "uid")}


def comparability_key(fp: dict) -> dict[str, object]:
    """The fields of ``fp`` that decide comparability, flattened, in a fixed order."""
    return {name: getter(fp) for name, getter in KEY.items()}


def key_sha256(fp: dict) -> str:
    canonical = json.dumps(comparability_key(fp), sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def key_differences(a: dict, b: dict) -> list[tuple[str, object, object]]:
    """(field, value in a, value in b) for every key field that differs, nested fields expanded."""
    out: list[tuple[str, object, object]] = []
    for name in KEY:
        _diff(name, KEY[name](a), KEY[name](b), out)
    return out


def _diff(name: str, x: object, y: object, out: list) -> None:
    if x == y:
        return
    if isinstance(x, dict) and isinstance(y, dict):
        for k in sorted(set(x) | set(y)):
            _diff(f"{name}.{k}", x.get(k), y.get(k), out)
        return
    out.append((name, x, y))
