"""The determinism bootstrap: plan in the parent, apply in the job process.

``plan()`` is pure: from the determinism level and its settings it decides the
environment variables the job process must start with (``PYTHONHASHSEED`` only
works when set before the interpreter starts) and the calls to make inside it.
``apply()`` runs those calls in the job process before any task code, in the one
order TensorFlow accepts (thread counts before anything initializes the runtime).
``read_back()`` asks TensorFlow and the process environment what actually took
effect, and ``verify()`` fails the run when something did not.

The same module serves the local runtime and, later, a container entrypoint.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field

from launcher.errors import DeterminismError
from launcher.job.training import tf1

LEVELS = ("off", "seeded", "strict", "portable")
RANDOM_OPS = (None, "num_random_ops", "constant")
ISA_BASELINES = ("x86-64-v3",)  # the caps below are measured for these (docs/determinism.md)
# NumPy's dispatch targets above x86-64-v3, as NPY_DISABLE_CPU_FEATURES names them: NumPy 2.4
# groups AVX-512 as X86_V4 (plus two extensions), earlier releases named each AVX-512 set.
_NPY_ABOVE_V3 = {
    "2.4": "X86_V4 AVX512_ICL AVX512_SPR",
    "old": "AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR",
}
_NPY_ABOVE_V3_PREFIXES = ("AVX512", "X86_V4", "AVX10", "AMX")
# Grappler passes strict turns off (tf.config.optimizer.set_experimental_options). The dependency
# optimizer, by removing the Identity a scalar ``sum`` becomes, lets the arithmetic optimizer fold
# ``total + (a + b)`` into one AddN that rounds as ``(total + a) + b``, in some processes and not in
# others: a Keras metric of a sum (keras-io's VAE) then differs in its last bits from run to run.
# Off, the VAE's runs all computed it as written (measured: docs/determinism.md, "A metric's last bits").
# TF1 sessions keep their own ConfigProto's graph options: this is the eager context's.
STRICT_GRAPH_REWRITES = {"dependency_optimization": False}


@dataclass(frozen=True)
class Plan:
    """What the bootstrap does for one job. Serializable: it travels in job.json."""

    level: str
    seed: int
    env: dict[str, str] = field(default_factory=dict)  # set before the interpreter starts
    seed_everything: bool = False  # random, NumPy, TF global seed, Keras, TF global Generator
    op_determinism: bool = False  # tf.config.experimental.enable_op_determinism()
    intra_op_threads: int | None = None  # None: TensorFlow's default (the core count)
    inter_op_threads: int | None = None
    deterministic_data: bool | None = None  # tf.data Options.deterministic; None: tf.data's default
    jit_compile: bool | None = None  # Keras' jit_compile (XLA); None: Keras' "auto"; strict: False
    # Stateful random ops seeded by their count (seed 004's DeterministicRandomTestTool), so a TF1
    # graph and its TF2 port draw the same numbers: None, "num_random_ops" or "constant".
    random_ops: str | None = None
    # portable: the x86-64 level every runtime ISA dispatch is capped at (its caps are in env)
    isa_baseline: str | None = None
    # grappler passes set for the job (tf.config.optimizer.set_experimental_options); None: TensorFlow's
    graph_rewrites: dict[str, bool] | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Plan:
        return cls(**data)


def plan(
    level: str,
    seed: int,
    intra_op_threads: int | None = None,
    inter_op_threads: int | None = None,
    onednn_opts: bool | None = None,
    *,
    jit_compile: bool | None = None,
    deterministic_data: bool | None = None,
    random_ops: str | None = None,
    isa_baseline: str | None = None,
    numpy_version: str | None = None,
) -> Plan:
    """Decide the bootstrap for ``level``; thread counts must already be resolved numbers.

    ``jit_compile`` and ``deterministic_data`` left at None take the level's default:
    strict turns XLA off and tf.data's order on; the other levels leave both to Keras
    and tf.data. ``portable`` is strict plus ``isa_caps(isa_baseline, numpy_version)`` in the
    job's environment (``numpy_version``: the NumPy the job imports, whose dispatch names differ).
    """
    if level not in LEVELS:
        raise DeterminismError(f"unknown determinism level {level!r}; choose one of {', '.join(LEVELS)}")
    env: dict[str, str] = {}
    if onednn_opts is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = "1" if onednn_opts else "0"
    if random_ops not in RANDOM_OPS:
        raise DeterminismError(
            f"determinism.random_ops must be one of {', '.join(map(str, RANDOM_OPS))}, got {random_ops!r}"
        )
    chosen = {"jit_compile": jit_compile, "deterministic_data": deterministic_data, "random_ops": random_ops}
    if level == "off":
        return Plan(level=level, seed=seed, env=env, **chosen)
    env["PYTHONHASHSEED"] = str(seed)
    if level == "seeded":
        return Plan(
            level=level,
            seed=seed,
            env=env,
            seed_everything=True,
            intra_op_threads=intra_op_threads,
            inter_op_threads=inter_op_threads,
            **chosen,
        )
    if intra_op_threads is None or inter_op_threads is None:
        raise DeterminismError(f"{level} determinism needs fixed intra_op_threads and inter_op_threads")
    env.update(
        {
            # Deprecated since TF 2.8 in favour of enable_op_determinism(); set for older
            # code paths and readers of the environment, but the call is what we rely on.
            "TF_DETERMINISTIC_OPS": "1",
            "TF_CUDNN_DETERMINISTIC": "1",
            "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
        }
    )
    if level == "portable":
        env.update(isa_caps(isa_baseline or ISA_BASELINES[0], numpy_version))
    return Plan(
        level=level,
        seed=seed,
        env=env,
        seed_everything=True,
        op_determinism=True,
        intra_op_threads=intra_op_threads,
        inter_op_threads=inter_op_threads,
        deterministic_data=True if deterministic_data is None else deterministic_data,
        jit_compile=False if jit_compile is None else jit_compile,
        random_ops=random_ops,
        isa_baseline=(isa_baseline or ISA_BASELINES[0]) if level == "portable" else None,
        graph_rewrites=dict(STRICT_GRAPH_REWRITES),
    )


def isa_caps(baseline: str, numpy_version: str | None = None) -> dict[str, str]:
    """The environment that caps every runtime ISA dispatch of the job's numerics at ``baseline``.

    Each cap is read once, when its library loads or first dispatches (so it must be in the
    job's environment from the start): oneDNN's kernels, including the sgemm TensorFlow's
    Eigen contractions call with oneDNN's ops off (``ONEDNN_MAX_CPU_ISA``); OpenBLAS under
    NumPy and SciPy (``OPENBLAS_CORETYPE``); NumPy's own SIMD loops
    (``NPY_DISABLE_CPU_FEATURES``); MKL where a job loads it (``MKL_CBWR``); and XLA's CPU
    code generation where a job compiles with XLA (``XLA_FLAGS``). Measured effects are in
    docs/determinism.md.
    """
    if baseline not in ISA_BASELINES:
        raise DeterminismError(f"determinism.isa_baseline must be one of {', '.join(ISA_BASELINES)}, got {baseline!r}")
    return {
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "OPENBLAS_CORETYPE": "Haswell",
        "NPY_DISABLE_CPU_FEATURES": _NPY_ABOVE_V3["2.4" if _numpy_at_least(numpy_version, (2, 4)) else "old"],
        "MKL_CBWR": "AVX2",
        "XLA_FLAGS": "--xla_cpu_max_isa=AVX2",
    }


def _numpy_at_least(version: str | None, wanted: tuple[int, int]) -> bool:
    """Whether a NumPy version string is at least ``wanted``; True when unknown (the newest names)."""
    if not version:
        return True
    parts = [int(p) for p in re.findall(r"\d+", version)[:2]]
    return tuple(parts) >= wanted


def apply(p: Plan) -> None:
    """Apply ``p`` in the job process. Must run before any task code touches TensorFlow."""
    import tensorflow as tf

    # Thread counts first: they raise once anything has initialized the runtime.
    if p.intra_op_threads is not None:
        tf.config.threading.set_intra_op_parallelism_threads(p.intra_op_threads)
    if p.inter_op_threads is not None:
        tf.config.threading.set_inter_op_parallelism_threads(p.inter_op_threads)
    if p.op_determinism:
        tf.config.experimental.enable_op_determinism()
    if p.jit_compile is False:  # XLA off: TensorFlow's own auto-clustering too, not only Keras' per model
        tf.config.optimizer.set_jit(False)
    if p.graph_rewrites:
        tf.config.optimizer.set_experimental_options(dict(p.graph_rewrites))
    if p.seed_everything:
        import keras

        # random, NumPy's global RandomState, tf.random.set_seed, Keras' seed generators.
        keras.utils.set_random_seed(p.seed)
        seed_global_generator(tf, p.seed)
        tf1.seed_graphs(p.seed)  # graphs built after tf.compat.v1.disable_eager_execution()
    # TF1 sessions: record each one's threads; pin what its config leaves unset (strict, seeded with counts).
    tf1.pin_sessions(p.intra_op_threads, p.inter_op_threads)
    if p.random_ops:
        tf1.count_random_ops(p.seed, p.random_ops)


def seed_global_generator(tf, seed: int) -> None:
    """Make TensorFlow's global ``tf.random.Generator`` start from ``seed`` when first used.

    ``keras.utils.set_random_seed`` does not reach it: TensorFlow creates it from
    non-deterministic state on first use (measured: different every run), and refuses
    to create it at all under op determinism. Creating it here would start TensorFlow's
    runtime (it holds a variable), after which user code can no longer configure its
    devices (``set_logical_device_configuration``, ``set_memory_growth``). So the getter
    is replaced by one that creates the generator from ``seed`` on first use; a
    generator the user sets with ``tf.random.set_global_generator`` still wins.
    """
    from tensorflow.python.framework import ops
    from tensorflow.python.ops import stateful_random_ops as srng

    def get_global_generator():
        if srng.global_generator is None:
            with ops.init_scope():
                srng.global_generator = srng.Generator.from_seed(seed)
        return srng.global_generator

    srng.get_global_generator = get_global_generator
    tf.random.get_global_generator = get_global_generator
    tf.random.experimental.get_global_generator = get_global_generator


def read_back(p: Plan) -> dict:
    """The effective settings, read from TensorFlow and this process' environment."""

    import tensorflow as tf

    effective = {
        "level": p.level,
        "seed": p.seed,
        "op_determinism": _op_determinism_enabled(tf),
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        "deterministic_data": data_order(tf, p.deterministic_data),
        "jit_compile": xla(tf, p.jit_compile),
        "env": {name: os.environ.get(name) for name in sorted(set(_PLANNED_ENV_NAMES) | set(p.env))},
        "keras": keras_config(),
        "sessions": tf1.sessions(),
        "random_ops": p.random_ops,
    }
    if p.isa_baseline:
        effective["isa_baseline"] = isa_read_back(p.isa_baseline)
    if p.graph_rewrites:
        effective["graph_rewrites"] = graph_rewrites(tf, p.graph_rewrites)
    return effective


def graph_rewrites(tf, planned: dict[str, bool]) -> dict[str, bool | None]:
    """Each planned grappler pass as TensorFlow's context holds it (None: TensorFlow's default, on).

    Read from the context's own options rather than ``tf.config.optimizer.get_experimental_options()``,
    which builds the whole ConfigProto and so lists the physical devices before the task runs."""
    from tensorflow.python.eager import context

    options = getattr(context.context(), "_optimizer_experimental_options", None)
    if options is None:
        options = tf.config.optimizer.get_experimental_options()
    return {name: options.get(name) for name in planned}


def isa_read_back(baseline: str) -> dict:
    """What the ISA caps did, where a library tells: NumPy's dispatch targets (each on or off),
    the core each loaded OpenBLAS chose, and whether this process' CPU (by CPUID, which an
    emulator answers too) supports the baseline. oneDNN, MKL and XLA expose no query of their
    effective ISA to Python: their caps are read back from the environment (``env``)."""
    from launcher.record.probe import cpuid

    seen = cpuid.read()
    return {
        "name": baseline,
        "numpy_dispatch": numpy_dispatch(),
        "openblas_cores": openblas_cores(),
        "supported_by_cpu": None if seen is None else cpuid.supports(seen["flags"], baseline),
    }


def numpy_dispatch() -> dict[str, bool] | None:
    """NumPy's runtime dispatch targets, each enabled or not on this CPU under the caps."""
    try:
        from numpy._core import _multiarray_umath as umath
    except ImportError:
        try:
            from numpy.core import _multiarray_umath as umath
        except ImportError:
            return None
    features = umath.__cpu_features__
    return {name: bool(features.get(name)) for name in umath.__cpu_dispatch__}


_OPENBLAS_CORENAME = (
    "openblas_get_corename",
    "openblas_get_corename64_",
    "scipy_openblas_get_corename64_",
    "scipy_openblas_get_corename",
)


def openblas_cores() -> dict[str, str]:
    """{library file name: the OpenBLAS core it runs} for every OpenBLAS mapped into this process."""
    import ctypes

    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if "openblas" in line.rsplit("/", 1)[-1].lower()})
    except OSError:
        return {}
    out = {}
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for symbol in _OPENBLAS_CORENAME:
            function = getattr(lib, symbol, None)
            if function is not None:
                function.restype = ctypes.c_char_p
                out[os.path.basename(path)] = function().decode()
                break
    return out


def data_order(tf, planned: bool | None) -> bool | None:
    """Whether tf.data keeps its elements in order, as TensorFlow decides it.

    Op determinism forces order whatever a dataset's options say (TensorFlow's documentation
    of ``enable_op_determinism``), so it is read first; otherwise a dataset keeps the
    ``tf.data.Options.deterministic`` the task gives it (``planned``; None: tf.data's default).
    """
    if _op_determinism_enabled(tf):
        return True
    options = tf.data.Options()
    if planned is not None:
        options.deterministic = planned
    return options.deterministic


def xla(tf, planned: bool | None) -> bool | None:
    """Whether XLA compiles the job's functions, as far as TensorFlow tells before a model
    exists: its global auto-clustering (``tf.config.optimizer.get_jit()``, which user code or
    a wrapper may have turned on) compiles every function; otherwise it is each Keras model's
    ``jit_compile`` (``planned``), which the mnist task reads back from its model once built."""
    if tf.config.optimizer.get_jit():
        return True
    return planned


def keras_config() -> dict:
    """The Keras settings that change numbers (from ``~/.keras/keras.json`` or the code)."""
    import keras

    return {
        "backend": keras.config.backend(),
        "floatx": keras.config.floatx(),
        "epsilon": keras.config.epsilon(),
        "image_data_format": keras.config.image_data_format(),
    }


def _op_determinism_enabled(tf) -> bool:
    # Public in some releases; in TF 2.21 only tensorflow.python.framework.config has it.
    getter = getattr(tf.config.experimental, "is_op_determinism_enabled", None)
    if getter is None:
        from tensorflow.python.framework import config as tf_config

        getter = tf_config.is_op_determinism_enabled
    return bool(getter())


_PLANNED_ENV_NAMES = (
    "PYTHONHASHSEED",
    "TF_DETERMINISTIC_OPS",
    "TF_CUDNN_DETERMINISTIC",
    "CUBLAS_WORKSPACE_CONFIG",
    "TF_ENABLE_ONEDNN_OPTS",
)  # and whatever else the plan sets (portable's ISA caps): a strict run's record stays as it was


def verify(p: Plan, effective: dict) -> None:
    """Raise ``DeterminismError`` naming every planned setting that did not take effect."""
    problems = []
    for name, value in p.env.items():
        got = effective["env"].get(name)
        if got != value:
            problems.append(f"{name}={got!r} (planned {value!r})")
    if p.op_determinism and not effective["op_determinism"]:
        problems.append("op determinism is not enabled")
    for key in ("intra_op_threads", "inter_op_threads", "deterministic_data", "jit_compile"):
        planned = getattr(p, key)
        if planned is not None and effective.get(key, planned) != planned and not _stricter(key, planned, effective):
            problems.append(f"{key}={effective[key]} (planned {planned})")
    for name, value in (p.graph_rewrites or {}).items():
        got = effective.get("graph_rewrites", p.graph_rewrites).get(name)  # as for the keys above: unread, unjudged
        if got != value:
            problems.append(f"graph rewrite {name}={got} (planned {value})")
    if p.isa_baseline:
        problems += isa_problems(p, effective.get("isa_baseline") or {})
    if problems:
        raise DeterminismError("determinism settings did not take effect: " + "; ".join(problems), problems)


def isa_problems(p: Plan, isa: dict) -> list[str]:
    """The ISA caps that did not take effect: a NumPy dispatch target above the baseline still
    on, an OpenBLAS on another core than the planned one, a CPU below the baseline."""
    problems = []
    if isa.get("supported_by_cpu") is False:
        problems.append(f"this CPU does not support {p.isa_baseline}")
    above = [
        name for name, on in (isa.get("numpy_dispatch") or {}).items() if on and name.startswith(_NPY_ABOVE_V3_PREFIXES)
    ]
    if above:
        problems.append(f"NumPy still dispatches {', '.join(above)} above {p.isa_baseline}")
    planned = p.env.get("OPENBLAS_CORETYPE", "").lower()
    for lib, core in (isa.get("openblas_cores") or {}).items():
        if planned and core.lower() != planned:
            problems.append(f"{lib} runs OpenBLAS core {core} (planned {p.env['OPENBLAS_CORETYPE']})")
    return problems


def _stricter(key: str, planned, effective: dict) -> bool:
    """tf.data kept its order though a dataset asked for none: op determinism overrides it."""
    return key == "deterministic_data" and planned is False and effective[key] is True


def resolve_threads(value: object, cpu_count: int | None) -> int | None:
    """Turn a configured thread count into a number: ``auto`` means this machine's cores.

    Resolved once at launch; the run records the number, so replays and sweeps reuse it.
    """
    if value is None:
        return None
    if value == "auto":
        return max(1, cpu_count or 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DeterminismError(f"thread count must be an integer >= 1 or 'auto', got {value!r}")
    return value


IDLE_CORES = 8  # a machine this big, with a strict run using at most a quarter of it, gets a note


def idle_note(level: str, intra_op_threads: object, cores: int) -> str | None:
    """One line when a strict run leaves most of the machine idle, with the override and its price."""
    if level != "strict" or not isinstance(intra_op_threads, int) or isinstance(intra_op_threads, bool):
        return None
    if cores < IDLE_CORES or intra_op_threads * 4 > cores:
        return None
    return (
        f"[launch] note: strict pins {intra_op_threads} intra-op thread(s) on this {cores}-core machine, so most "
        "of it idles; determinism.intra_op_threads=auto uses every core (the count is recorded, and runs "
        "with another count are refused as not comparable)"
    )


def draw_seed() -> int:
    """A fresh seed from the OS, for `off` runs (recorded so the run can be re-run)."""
    return int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF
