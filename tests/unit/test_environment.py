"""The environment allowlist, word by word and pattern by pattern (issue 17).

Secrets must never reach a fingerprint (run directories get shared), and each table
of ``launcher.record.probe.environment`` is checked entry by entry against literal lists
here, so dropping one entry (``CREDENTIAL`` from ``SECRET_WORDS``, a pattern from
``ENV_ALLOW`` or ``ENV_DENY``, a name from ``NOT_IN_KEY``) fails a test.
"""

from __future__ import annotations

import pytest

from launcher.record.probe import environment

SECRETS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")


@pytest.mark.parametrize("word", SECRETS)
def test_a_name_with_a_secret_word_is_never_recorded(word):
    names = [f"TF_{word}", f"TF_MY_{word}_FILE", f"CUDA_{word}S", f"tf_{word.lower()}", f"KERAS_X{word}Y"]
    env = dict.fromkeys(names, "hunter2") | {"TF_DETERMINISTIC_OPS": "1"}  # every name is on the allowlist
    assert environment.allowed_env(env) == {"TF_DETERMINISTIC_OPS": "1"}


def test_the_secret_words_are_exactly_these():
    assert set(environment.SECRET_WORDS) == set(SECRETS)


DENIED = {  # Terraform's variables share the TF_ prefix: an example name for every ENV_DENY pattern
    "TF_VAR_*": "TF_VAR_db_host",
    "TF_CLI_*": "TF_CLI_CONFIG_FILE",
    "TF_TOKEN_*": "TF_TOKEN_app_terraform_io",  # also has a secret word: denied twice over
    "TF_LOG*": "TF_LOG_PATH",
    "TF_WORKSPACE": "TF_WORKSPACE",
    "TF_DATA_DIR": "TF_DATA_DIR",
    "TF_INPUT": "TF_INPUT",
    "TF_IN_AUTOMATION": "TF_IN_AUTOMATION",
    "TF_PLUGIN_CACHE_DIR": "TF_PLUGIN_CACHE_DIR",
    "TF_REGISTRY_*": "TF_REGISTRY_DISCOVERY_RETRY",
}


def test_every_deny_pattern_has_an_example():
    assert set(DENIED) == set(environment.ENV_DENY)


@pytest.mark.parametrize("pattern", list(DENIED))
def test_terraforms_variables_never_enter(pattern):
    name = DENIED[pattern]
    env = {name: "x", name.lower(): "x", "TF_LOG": "x", "TF_DETERMINISTIC_OPS": "1"}  # a denied name ends no scan
    assert environment.allowed_env(env) == {"TF_DETERMINISTIC_OPS": "1"}


ALLOWED = {  # an example name for every ENV_ALLOW pattern: recorded
    "TF_*": "TF_ENABLE_ONEDNN_OPTS",
    "XLA_FLAGS": "XLA_FLAGS",
    "ONEDNN_*": "ONEDNN_MAX_CPU_ISA",
    "DNNL_*": "DNNL_MAX_CPU_ISA",
    "MKLDNN_*": "MKLDNN_VERBOSE",
    "MKL_*": "MKL_NUM_THREADS",
    "OPENBLAS_*": "OPENBLAS_NUM_THREADS",
    "GOTO*": "GOTO_NUM_THREADS",
    "BLIS_*": "BLIS_NUM_THREADS",
    "OMP_*": "OMP_NUM_THREADS",
    "GOMP_*": "GOMP_SPINCOUNT",
    "KMP_*": "KMP_AFFINITY",
    "CUDA_*": "CUDA_VISIBLE_DEVICES",
    "CUDNN_*": "CUDNN_LOGINFO_DBG",
    "CUBLAS_*": "CUBLAS_WORKSPACE_CONFIG",
    "CUBLASLT_*": "CUBLASLT_LOG_LEVEL",
    "NCCL_*": "NCCL_ALGO",
    "NVIDIA_*": "NVIDIA_TF32_OVERRIDE",
    "KERAS_*": "KERAS_BACKEND",
    "NPY_*": "NPY_DISABLE_CPU_FEATURES",
    "PYTHONHASHSEED": "PYTHONHASHSEED",
    "LD_PRELOAD": "LD_PRELOAD",
    "LD_LIBRARY_PATH": "LD_LIBRARY_PATH",
    "PYTHONPATH": "PYTHONPATH",
}


def test_every_allow_pattern_has_an_example():
    assert set(ALLOWED) == set(environment.ENV_ALLOW)


@pytest.mark.parametrize("pattern", list(ALLOWED))
def test_what_the_numerics_libraries_read_is_recorded(pattern):
    name = ALLOWED[pattern]
    assert environment.allowed_env({name: "v", "HOME": "/root", "PATH": "/bin"}) == {name: "v"}


def test_anything_else_is_not_recorded_and_the_result_is_sorted():
    env = {
        "HOME": "/root",
        "PATH": "/bin",
        "XLA_FLAGS_EXTRA": "1",
        "PYTHONHASHSEEDS": "1",
        "MY_TF_X": "1",
        "OMP_NUM_THREADS": "2",
        "TF_DETERMINISTIC_OPS": "1",
        "tf_lower": "keeps its own name",
    }
    got = environment.allowed_env(env)
    assert got == {"OMP_NUM_THREADS": "2", "TF_DETERMINISTIC_OPS": "1", "tf_lower": "keeps its own name"}
    assert list(got) == sorted(got)


NOT_KEYED = (
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
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "PYTHONPATH",
)


def test_the_names_out_of_the_key_are_exactly_these_each_with_a_reason():
    assert set(environment.NOT_IN_KEY) == set(NOT_KEYED)
    assert all(isinstance(why, str) and len(why) > 10 for why in environment.NOT_IN_KEY.values())


@pytest.mark.parametrize("name", NOT_KEYED)
def test_recorded_but_not_keyed(name):
    recorded = {name: "1", name.lower(): "1", "OMP_NUM_THREADS": "2", "TF_ENABLE_ONEDNN_OPTS": "0"}
    assert environment.keyed_env(recorded) == {"OMP_NUM_THREADS": "2", "TF_ENABLE_ONEDNN_OPTS": "0"}


def test_keyed_env_is_sorted():
    assert list(environment.keyed_env({"Z_X": "1", "A_Y": "2", "M": "3"})) == ["A_Y", "M", "Z_X"]


def test_a_variable_the_job_read_is_recorded_by_value_and_a_secret_only_by_hash():
    from launcher.record.probe.environment import as_read

    assert as_read("LR", "0.01") == "0.01" and as_read("BATCH_SIZE", None) is None
    hashed = as_read("WANDB_API_KEY", "s3cr3t")
    assert hashed.startswith("sha256:") and "s3cr3t" not in hashed and hashed == as_read("WANDB_API_KEY", "s3cr3t")
