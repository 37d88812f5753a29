"""Which environment variables a run records, and which of them can change its numbers.

Run directories get shared and secrets live in environment variables, so the
fingerprint records a variable only when its name matches ``ENV_ALLOW`` and does not
look like a secret (``SECRET_WORDS``) or belong to Terraform, which shares the
``TF_`` prefix (``ENV_DENY``).

``ENV_ALLOW`` names what TensorFlow, Keras and the numerics libraries they load read
for computation: oneDNN/DNNL, BLAS (OpenBLAS, MKL, BLIS), OpenMP (GNU and Intel),
CUDA, cuDNN, cuBLAS, NCCL, XLA, Keras' backend, and the dynamic linker. Every recorded
variable is in the comparability key except those in ``NOT_IN_KEY``: they only change
logging or display, name a device slot, or act only through files and libraries that
the fingerprint hashes by content.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping

ENV_ALLOW = (
    "TF_*",  # TensorFlow: TF_ENABLE_ONEDNN_OPTS, TF_DETERMINISTIC_OPS, TF_CUDNN_*, TF_GPU_*, TF_XLA_FLAGS, ...
    "XLA_FLAGS",  # XLA's compiler options
    "ONEDNN_*",
    "DNNL_*",
    "MKLDNN_*",  # oneDNN: ONEDNN_MAX_CPU_ISA, ONEDNN_DEFAULT_FPMATH_MODE, ...
    "MKL_*",
    "OPENBLAS_*",
    "GOTO*",
    "BLIS_*",  # BLAS libraries: ISA dispatch, thread counts
    "OMP_*",
    "GOMP_*",
    "KMP_*",  # OpenMP runtimes (GNU, Intel): thread counts, schedules, affinity
    "CUDA_*",
    "CUDNN_*",
    "CUBLAS_*",
    "CUBLASLT_*",
    "NCCL_*",
    "NVIDIA_*",  # GPU libraries
    "KERAS_*",  # KERAS_BACKEND and friends
    "NPY_*",  # NumPy: NPY_DISABLE_CPU_FEATURES, NPY_ENABLE_CPU_FEATURES (its SIMD dispatch)
    "PYTHONHASHSEED",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",  # which libraries and modules load
)
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
# Terraform shares the TF_ prefix; its variables (TF_VAR_* may hold secrets) never enter.
ENV_DENY = (
    "TF_VAR_*",
    "TF_CLI_*",
    "TF_TOKEN_*",
    "TF_LOG*",
    "TF_WORKSPACE",
    "TF_DATA_DIR",
    "TF_INPUT",
    "TF_IN_AUTOMATION",
    "TF_PLUGIN_CACHE_DIR",
    "TF_REGISTRY_*",
)

# Recorded for reading, kept out of the comparability key, each with its reason.
NOT_IN_KEY: dict[str, str] = {
    **dict.fromkeys(
        (
            "TF_CPP_MIN_LOG_LEVEL",
            "TF_CPP_MAX_VLOG_LEVEL",
            "TF_CPP_MIN_VLOG_LEVEL",
            "TF_CPP_VMODULE",
            "TF_CPP_LOG_THREAD_ID",
            "TF_CPP_MAX_LOG_LEVEL",
            "AUTOGRAPH_VERBOSITY",
            "KMP_WARNINGS",
            "KMP_SETTINGS",
            "OMP_DISPLAY_ENV",
            "OMP_DISPLAY_AFFINITY",
            "ONEDNN_VERBOSE",
            "DNNL_VERBOSE",
            "MKLDNN_VERBOSE",
            "MKL_VERBOSE",
            "NCCL_DEBUG",
            "NCCL_DEBUG_SUBSYS",
            "NCCL_DEBUG_FILE",
            "KERAS_HOME",
        ),
        "logging or display only",
    ),
    "CUDA_VISIBLE_DEVICES": "names a device slot, not a kind of device (the GPUs are in hardware.gpus)",
    "NVIDIA_VISIBLE_DEVICES": "names a device slot, not a kind of device",
    "NVIDIA_DRIVER_CAPABILITIES": "which driver libraries a container sees; the loaded ones are hashed",
    "LD_LIBRARY_PATH": "acts through the shared libraries loaded, which are hashed (software.libraries)",
    "LD_PRELOAD": "acts through the shared libraries loaded, which are hashed (software.libraries)",
    "PYTHONPATH": "acts through the modules imported, which are hashed (code.modules, software.distributions)",
}


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


def keyed_env(recorded: Mapping[str, str]) -> dict[str, str]:
    """The recorded variables that can change a run's numbers: all but ``NOT_IN_KEY``."""
    return {name: value for name, value in sorted(recorded.items()) if name.upper() not in NOT_IN_KEY}


def as_read(name: str, value: str | None) -> str | None:
    """How a variable the job's code read is recorded: its value (None: it was unset), or for a
    name that looks like a secret, only the sha256 of its value (never the value itself)."""
    if value is None or not any(word in name.upper() for word in SECRET_WORDS):
        return value
    import hashlib

    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()
