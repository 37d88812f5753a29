"""The comparability key: the one definition of which fingerprint fields must match.

Two runs are compared bit for bit only when their keys are equal; otherwise the
comparison is REFUSED with the differing fields named. Each entry of ``KEY`` says
why it is in; the comments say what is deliberately out.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

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
