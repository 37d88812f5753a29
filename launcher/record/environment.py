"""Which environment variables a run records: an allowlist, and never a secret.

Run directories get shared and secrets live in environment variables, so the
fingerprint records a variable only when its name matches ``ENV_ALLOW`` and does not
look like a secret (``SECRET_WORDS``) or belong to Terraform, which shares the
``TF_`` prefix (``ENV_DENY``).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping

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


