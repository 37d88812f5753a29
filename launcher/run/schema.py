"""The typed schemas of the launch config's sections ``train``, ``determinism``, ``runtime`` and ``store``:
the type of each setting, and what a type cannot say (``epochs`` above 0), one dataclass per option.

They are registered in Hydra's ConfigStore (``schema/train/mnist``, ..., ``schema/store``), so a
user's own option can put one under its values (``defaults: [/schema/train/custom@_here_, custom]``),
and they check every config the launcher composes (``composition.compose``) or reads back
(``config.validate``: a stored run's, on replay and resume).

They check a config; they never shape it. A composed config stays exactly what its YAML files and
overrides say, keys, order, values and types, because the config hash of every stored run is taken
over it: as the base of the launcher's options a schema would turn ``learning_rate=1`` into ``1.0``,
refuse the keys a user's option adds to ``train=custom``, and hold Enum members where the config
holds strings. So a section is merged into its schema, open to keys the schema does not name, and a
value is valid only when its type takes it as it is: ``epochs=abc`` is refused in OmegaConf's own
words, and ``observe=yes``, which OmegaConf would take as true, is refused too, rather than left in the
config as a string the job reads as true whatever it says.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from importlib import resources
from typing import Any, get_args, get_origin, get_type_hints

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from launcher.errors import ConfigError
from launcher.job import determinism

# The config's sections: each a mapping of settings (a group, or a block of launch.yaml).
SECTIONS = ("train", "determinism", "runtime", "image", "tracking", "store", "sweep")
# The choices of a setting, as OmegaConf checks them (an Enum field): the config keeps the string.
RandomOps = enum.Enum("RandomOps", [(name, name) for name in determinism.RANDOM_OPS if name])
IsaBaseline = enum.Enum("IsaBaseline", [(name, name) for name in determinism.ISA_BASELINES])


def _limit(test: Callable[[Any], bool], allowed: str) -> Any:
    """A field whose value must also pass ``test`` (``allowed`` says what it may be, for the error)."""
    return field(metadata={"test": test, "allowed": allowed})


def _whole(low: int, null: bool = False) -> Callable[[Any], bool]:
    """An integer, never a bool, of at least ``low`` (or None, when ``null``)."""
    return lambda value: (null and value is None) or (type(value) is int and value >= low)


def _threads(value: Any) -> bool:
    return value is None or value == "auto" or _whole(1)(value)


# Limits shared by several fields, each one a new field: (test, what is allowed).
POSITIVE = (_whole(1), "a positive integer")
AT_LEAST_0 = (_whole(0), "an integer >= 0")
THREADS = (_threads, "an integer >= 1 or auto")
WHOLE = "a whole number, 0 or more"


# One dataclass per option, its fields in the order of the option's YAML (tests hold them to it).
# ---------------------------------------------------------------- train
@dataclass
class MnistTrain:
    name: str
    data: str = _limit(bool, "sample, full, or a path to an .npz file or IDX directory")
    epochs: int = _limit(*POSITIVE)
    batch_size: int = _limit(*POSITIVE)
    learning_rate: Any = _limit(lambda v: type(v) in (int, float) and v > 0, "a positive number")  # 1 stays 1
    max_samples: int | None = _limit(_whole(1, null=True), "a positive integer")
    data_parallel_calls: Any = _limit(lambda v: v == "autotune" or _whole(1)(v), "a positive integer or autotune")
    checkpoint_every: int = _limit(*AT_LEAST_0)
    checkpoint_keep: int = _limit(*POSITIVE)


@dataclass
class CustomTrain:
    name: str
    entrypoint: str
    path: str | None
    observe: bool
    save_weights: bool
    save_weights_max_mb: int
    checkpoint_every: int = _limit(*AT_LEAST_0)
    checkpoint_keep: int = _limit(*POSITIVE)


@dataclass
class ScriptTrain:
    name: str
    script: str
    args: list[Any]  # 3 in [--epochs,3] stays a number: the config keeps what Hydra parsed
    observe: bool
    save_weights: bool
    save_weights_max_mb: int
    checkpoint_every: int = _limit(*AT_LEAST_0)
    checkpoint_keep: int = _limit(*POSITIVE)


@dataclass
class NotebookTrain:
    name: str
    notebook: str
    params: Any  # a mapping or null: validate says which
    observe: bool
    save_weights: bool
    save_weights_max_mb: int


# ---------------------------------------------------------------- determinism
@dataclass
class Determinism:
    level: str
    seed: int | None = _limit(_whole(0, null=True), "a non-negative integer")
    intra_op_threads: Any = _limit(*THREADS)
    inter_op_threads: Any = _limit(*THREADS)
    onednn_opts: bool | None
    jit_compile: bool | None
    deterministic_data: bool | None
    trace_every: int = _limit(_whole(0), "an integer >= 0 (0 = no trace)")
    random_ops: RandomOps | None


@dataclass
class PortableDeterminism:
    level: str
    seed: int | None = _limit(_whole(0, null=True), "a non-negative integer")
    isa_baseline: IsaBaseline
    intra_op_threads: Any = _limit(*THREADS)
    inter_op_threads: Any = _limit(*THREADS)
    onednn_opts: bool | None
    jit_compile: bool | None
    deterministic_data: bool | None
    trace_every: int = _limit(_whole(0), "an integer >= 0 (0 = no trace)")
    random_ops: RandomOps | None


# ---------------------------------------------------------------- runtime, store
@dataclass
class LocalRuntime:
    name: str
    slots: Any  # auto or an integer: checked against the devices when a sweep plans its slots


@dataclass
class DockerRuntime:
    name: str
    slots: Any
    tmpfs_mb: int
    stop_timeout_s: int
    mounts: list[str]


@dataclass
class StoreSettings:
    root: Any = _limit(lambda v: v is not None and str(v) != "", "a directory path")  # 2024 names one too
    snapshot_max_mb: int = _limit(_whole(0), WHOLE)
    snapshot_max_files: int | None = _limit(_whole(0, null=True), f"{WHOLE} (null: no cap)")
    snapshot_max_total_mb: int | None = _limit(_whole(0, null=True), f"{WHOLE} (null: no cap)")
    signing_key: str | None
    allowed_signers: str | None
    require_signed: bool


# section -> (the setting that names its option, that option's schema by name); store has one
SCHEMAS: dict[str, tuple[str | None, dict[str | None, type]]] = {
    "train": (
        "name",
        {"mnist": MnistTrain, "custom": CustomTrain, "script": ScriptTrain, "notebook": NotebookTrain},
    ),
    "determinism": (
        "level",
        {"off": Determinism, "seeded": Determinism, "strict": Determinism, "portable": PortableDeterminism},
    ),
    "runtime": ("name", {"local": LocalRuntime, "docker": DockerRuntime}),
    "store": (None, {None: StoreSettings}),
}
# How an error names what a field's type takes, for the value it would have taken as another.
WORDS: dict[object, list[str]] = {bool: ["true", "false"], int: ["an integer"], str: ["a string"]}


def register() -> None:
    """Store each schema in Hydra's ConfigStore: ``schema/<section>/<option>``, and ``schema/store``."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for section, (_, options) in SCHEMAS.items():
        for name, node in options.items():
            if name is None:
                store.store(group="schema", name=section, node=node)
            else:
                store.store(group=f"schema/{section}", name=name, node=node)


register()


def check(cfg: DictConfig) -> None:
    """Raise ``ConfigError`` for the first section that is not a mapping, or setting whose value its
    schema does not take as it is (its type, then its limit). A section whose option no schema
    names (``train.name=nope``) is left to ``config.validate``, which names the options.

    Raises:
        ConfigError: the key, and what it takes: OmegaConf's words for a value its type refuses (exit 2).
    """
    for section in SECTIONS:  # `store=DIR` replaces the mapping with a string; Hydra lets it
        value = cfg.get(section)
        if value is not None and not OmegaConf.is_dict(value):
            keys = ", ".join(f"{section}.{k}" for k in _section_keys(section)) or f"{section}.KEY"
            raise ConfigError(
                f"{section} is a set of settings, not a value ({section}={value!r}); set one of them: {keys}"
            )
    seed = cfg.get("seed")  # +seed=N: the top level has no schema
    if seed is not None and not (_whole(0)(seed) and seed < 2**32):
        raise ConfigError(f"seed must be an integer in [0, 2**32), got {seed!r}")
    for section, (named_by, options) in SCHEMAS.items():
        node = cfg.get(section)
        schema = options.get(node.get(named_by) if named_by else None) if node is not None else None
        if schema is not None:
            _check_section(section, schema, node)


def _check_section(section: str, schema: type, node: DictConfig) -> None:
    """``node`` (the config's ``section``) merged into ``schema``: OmegaConf's refusal, a value its type
    would take as another, or a value outside its field's limit is ``ConfigError``, naming the key."""
    try:
        given = OmegaConf.to_container(node, resolve=True)
        typed = OmegaConf.structured(schema, flags={"struct": False})  # open: a user's own keys pass
        typed.merge_with(given)
    except OmegaConfBaseException as exc:  # Value 'abc' of type 'str' could not be converted to Integer
        key = getattr(exc, "full_key", None)
        raise ConfigError(f"{section}.{key}: {_first_line(exc)}" if key else f"{section}: {_first_line(exc)}") from exc
    taken = OmegaConf.to_container(typed, enum_to_str=True)
    for spec in fields(schema):
        if spec.name not in given or given[spec.name] == "???":  # absent (an older run's), or required: validate
            continue
        value, path = given[spec.name], f"{section}.{spec.name}"
        if not _same(value, taken[spec.name]):  # taken as another value: 'yes' as true, '3' as 3
            raise ConfigError(f"{path} must be {_kind(get_type_hints(schema)[spec.name])}, got {value!r}")
        test = spec.metadata.get("test")
        if test is not None and not test(value):
            raise ConfigError(f"{path} must be {spec.metadata['allowed']}, got {value!r}")


def _kind(hint: Any) -> str:
    """What a type hint takes, in words: ``bool | None`` is "true, false or null"."""
    args = get_args(hint)
    if get_origin(hint) is list:
        return f"a list of {_kind(args[0]).removeprefix('a ')}s"
    words: list[str] = []
    for arg in args or (hint,):
        if isinstance(arg, type) and issubclass(arg, enum.Enum):
            words += [member.name for member in arg]
        else:
            words += ["null"] if arg is type(None) else WORDS.get(arg, [])
    if len(words) < 2:
        return words[0] if words else "of its type"
    return ", ".join(words[:-1]) + f" or {words[-1]}"


def _same(given: Any, taken: Any) -> bool:
    """Is ``taken`` (what the schema made of ``given``) ``given`` itself: equal, and of the same types?"""
    if type(given) is not type(taken):
        return False
    if isinstance(given, list):
        return len(given) == len(taken) and all(map(_same, given, taken))
    if isinstance(given, dict):
        return given.keys() == taken.keys() and all(_same(given[k], taken[k]) for k in given)
    return given == taken


def _first_line(exc: BaseException) -> str:
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)


def _section_keys(section: str) -> list[str]:
    """The settings of a block of launch.yaml (``store``: root, snapshot_max_mb), for the error."""
    primary = OmegaConf.create(resources.files("launcher.configs").joinpath("launch.yaml").read_text())
    block = primary.get(section)
    return [str(k) for k in block] if OmegaConf.is_dict(block) else []
