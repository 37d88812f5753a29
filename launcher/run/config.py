"""Checks and resolves a composed launch config, in one place.

Hydra composes the YAML groups in ``launcher/configs``; this module enforces the
cross-field rules (allowed values named in each message), resolves what must be
fixed once at launch (the seed, ``auto`` thread counts) and hashes the parts of
the config that can change a result.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from launcher.errors import ConfigError, LauncherError
from launcher.run import determinism

CONFIG_MODULE = "launcher.configs"
PRIMARY = "launch"
USER_PROVIDER = "command-line"  # the search-path provider Hydra names a --config-dir

TASKS = ("mnist", "custom", "script", "notebook")
RUNTIMES = ("local", "docker")
TRACKERS = ("none", "mlflow")  # the tracking config group (launcher.record.tracking)
# Fields that cannot change a result: left out of the config hash (dotted paths).
NOT_IN_HASH = (
    "store",  # where runs are written
    "sweep",  # what an optimizing sweeper optimizes, never what a run computes
    "config_dir",  # where the user's config files are: their values are in the config, their hashes in the fingerprint
    "runtime.slots",  # where a sweep job runs, never what it computes
    "determinism.trace_every",  # the trace reads weights, never changes them
    "train.observe",  # observation reads weights, never changes them (tested bit for bit)
    "train.save_weights",  # a copy of the final weights, written after training
    "train.save_weights_max_mb",  # how large that copy may be
    "tracking",  # MLflow logging reads the sealed run, after it ended (tested bit for bit)
)
# Hydra plugins the launcher works with, by the config they add: the extra that installs them.
PLUGIN_EXTRAS = {
    "hydra/sweeper/optuna": "optuna",
    "hydra/launcher/submitit_slurm": "slurm",
    "hydra/launcher/submitit_local": "slurm",
}
# How alike a mistyped key must be to an existing one to be suggested (difflib's ratio):
# train.epoch -> train.epochs is 0.96, train.nope -> train.name only 0.8.
SUGGEST_CUTOFF = 0.85
NOT_IN_HASH_DOCKER = ("image.ca_bundle", "image.index_url", "image.wheelhouse",  # where wheels come from
                      "runtime.stop_timeout_s", "runtime.tmpfs_mb",  # how a job is stopped, its /tmp
                      "runtime.mounts")  # where data is visible; what the job reads is hashed by content  # fmt: skip


def _positive_int(value: object, name: str, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")


def _positive_number(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(f"{name} must be a positive number, got {value!r}")


# The config's sections: each a mapping of settings (a group, or a block of launch.yaml).
SECTIONS = ("train", "determinism", "runtime", "image", "tracking", "store", "sweep")


def _section_keys(section: str) -> list[str]:
    """The settings of a block of launch.yaml (``store``: root, snapshot_max_mb), for the error."""
    from importlib import resources

    primary = OmegaConf.create(resources.files("launcher.configs").joinpath("launch.yaml").read_text())
    block = primary.get(section)
    return [str(k) for k in block] if OmegaConf.is_dict(block) else []


def validate(cfg: DictConfig) -> None:
    """Raise ``ConfigError`` for the first invalid value, naming what is allowed."""
    for section in SECTIONS:  # `store=DIR` replaces the mapping with a string; Hydra lets it
        value = cfg.get(section)
        if value is not None and not OmegaConf.is_dict(value):
            keys = ", ".join(f"{section}.{k}" for k in _section_keys(section)) or f"{section}.KEY"
            raise ConfigError(f"{section} is a set of settings, not a value ({section}={value!r}); "
                              f"set one of them: {keys}")  # fmt: skip
    train, det = cfg.train, cfg.determinism
    if train.name not in TASKS:
        raise ConfigError(f"train={train.name!r} is unknown; choose one of {', '.join(TASKS)}")
    if det.level not in determinism.LEVELS:
        raise ConfigError(
            f"determinism={det.level!r} is unknown; choose one of {', '.join(determinism.LEVELS)}"
        )
    if cfg.runtime.name not in RUNTIMES:
        raise ConfigError(f"runtime={cfg.runtime.name!r} is unknown; choose one of {', '.join(RUNTIMES)}")
    if "seed" in cfg and cfg.seed is not None:
        seed = cfg.seed
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
            raise ConfigError(f"seed must be an integer in [0, 2**32), got {seed!r}")
    if det.seed is not None and (not isinstance(det.seed, int) or det.seed < 0):
        raise ConfigError(f"determinism.seed must be a non-negative integer, got {det.seed!r}")
    for key in ("intra_op_threads", "inter_op_threads"):
        value = det[key]
        if det.level in ("strict", "portable") and value is None:
            raise ConfigError(f"determinism.{key} must be set in {det.level} mode (an integer or auto)")
        try:
            determinism.resolve_threads(value, 1)
        except LauncherError as exc:
            raise ConfigError(f"determinism.{key}: {exc}") from None
    if det.level == "portable" and det.get("isa_baseline") not in determinism.ISA_BASELINES:
        raise ConfigError(f"determinism.isa_baseline must be one of {', '.join(determinism.ISA_BASELINES)}, "
                          f"got {det.get('isa_baseline')!r}")  # fmt: skip
    if det.get("random_ops") not in determinism.RANDOM_OPS:
        raise ConfigError("determinism.random_ops must be null, num_random_ops or constant, "
                          f"got {det.get('random_ops')!r}")  # fmt: skip
    for key in ("onednn_opts", "jit_compile", "deterministic_data"):
        if det.get(key) is not None and not isinstance(det.get(key), bool):
            raise ConfigError(f"determinism.{key} must be true, false or null, got {det.get(key)!r}")
    if det.get("jit_compile") and train.name != "mnist":
        raise ConfigError(f"determinism.jit_compile applies to train=mnist; train={train.name} code passes "
                          "jit_compile to its own model.compile()")  # fmt: skip
    trace_every = det.get("trace_every", 0)
    if isinstance(trace_every, bool) or not isinstance(trace_every, int) or trace_every < 0:
        raise ConfigError(f"determinism.trace_every must be an integer >= 0 (0 = no trace), got {trace_every!r}")
    if "checkpoint_keep" in train:
        _positive_int(train.checkpoint_keep, "train.checkpoint_keep")
    if "checkpoint_every" in train and (isinstance(train.checkpoint_every, bool)
                                        or not isinstance(train.checkpoint_every, int) or train.checkpoint_every < 0):
        raise ConfigError(f"train.checkpoint_every must be an integer >= 0, got {train.checkpoint_every!r}")
    if train.name == "mnist":
        _positive_int(train.epochs, "train.epochs")
        _positive_int(train.batch_size, "train.batch_size")
        _positive_int(train.max_samples, "train.max_samples", allow_none=True)
        _positive_number(train.learning_rate, "train.learning_rate")
        if not isinstance(train.data, str) or not train.data:
            raise ConfigError("train.data must be sample, full, or a path to an .npz file or IDX directory")
        if train.data not in ("sample", "full") and not os.path.exists(os.path.expanduser(train.data)):
            raise ConfigError(f"train.data {train.data!r} does not exist (use sample, full, or a path)")
        from launcher.run import data  # numpy, only now

        data.check(train.data, in_container=cfg.runtime.name == "docker")
        calls = train.get("data_parallel_calls", 1)
        if calls != "autotune":
            _positive_int(calls, "train.data_parallel_calls (or autotune)")
    elif train.name == "custom":
        if OmegaConf.is_missing(train, "entrypoint") or ":" not in str(train.entrypoint):
            raise ConfigError("train=custom needs train.entrypoint=package.module:function")
    elif train.name == "script":
        if OmegaConf.is_missing(train, "script"):
            raise ConfigError("train=script needs train.script=path/to/train.py")
        if not os.path.isfile(str(train.script)):
            raise ConfigError(f"train.script {train.script!r} is not a file")
    elif train.name == "notebook":
        _check_notebook(train)
    tracking = cfg.get("tracking")
    if tracking is not None and tracking.get("name") not in TRACKERS:
        raise ConfigError(f"tracking={tracking.get('name')!r} is unknown; choose one of {', '.join(TRACKERS)}")
    if tracking is not None and tracking.get("name") == "mlflow":
        import importlib.util

        if importlib.util.find_spec("mlflow") is None:  # before training, not a warning after it
            raise ConfigError("tracking=mlflow needs mlflow: pip install 'tf-repro-launcher[mlflow]'")
    if not str(cfg.store.root):
        raise ConfigError("store.root must be a directory path")


def check_entrypoint(cfg: DictConfig, cwd: str) -> None:
    """train=custom on this machine: the entrypoint's module can be found where the job will
    look (``train.path``, else ``cwd``, then ``sys.path``), so a typo is bad input (exit 2,
    no run) rather than a failed run. Found without importing it: no user code runs here."""
    import importlib.machinery
    import importlib.util
    import sys

    train = cfg.train
    if train.name != "custom" or cfg.runtime.name != "local" or ":" not in str(train.get("entrypoint", "")):
        return
    module = str(train.entrypoint).partition(":")[0]
    first = os.path.join(cwd, os.path.expanduser(str(train.path))) if train.get("path") else cwd
    top, *rest = module.split(".")
    if top in sys.modules:
        spec = sys.modules[top].__spec__
    else:
        saved = list(sys.path)
        sys.path.insert(0, first)
        try:  # a top-level name: finding it runs no code (editable installs have finders of their own)
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            spec = None
        finally:
            sys.path[:] = saved
    found = top
    for part in rest:
        if spec is None:
            break
        locations = spec.submodule_search_locations
        spec = importlib.machinery.PathFinder.find_spec(part, list(locations)) if locations else None
        if spec is None:
            raise ConfigError(f"train.entrypoint {str(train.entrypoint)!r}: {found} has no module {part!r}")
        found = f"{found}.{part}"
    if spec is None:
        raise ConfigError(f"train.entrypoint {str(train.entrypoint)!r}: no module {top!r} in {first} or on "
                          "sys.path; set train.path=DIR to where it lives")  # fmt: skip


def _check_notebook(train: DictConfig) -> None:
    """train=notebook: a notebook file, parameters by name, and the extra that runs it installed."""
    import importlib.util

    from launcher.record import notebooks

    if OmegaConf.is_missing(train, "notebook"):
        raise ConfigError("train=notebook needs train.notebook=path/to/NB.ipynb")
    if not os.path.isfile(str(train.notebook)):
        raise ConfigError(f"train.notebook {train.notebook!r} is not a file")
    notebooks.load(str(train.notebook))
    params = train.get("params")
    if params is not None and not isinstance(params, DictConfig):
        raise ConfigError(f"train.params must be a mapping of names to values ('train.params={{lr: 0.01}}'), "
                          f"got {params!r}")  # fmt: skip
    notebooks.render_parameters(OmegaConf.to_container(params) if params is not None else {})
    missing = [m for m in ("IPython", "nbformat") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(f"train=notebook needs {' and '.join(missing)}: {notebooks.EXTRA}")


def resolve(cfg: DictConfig, cpu_count: int | None = None) -> DictConfig:
    """A copy of ``cfg`` with everything fixed that must not change on replay.

    The seed becomes a top-level ``seed`` (from ``+seed``, else the level's default,
    else drawn from the OS and recorded); ``auto`` thread counts become numbers; a
    script path becomes absolute. Resolving a resolved config changes nothing.
    """
    validate(cfg)
    out = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    OmegaConf.set_struct(out, False)
    seed = cfg.get("seed")
    if seed is None:
        seed = cfg.determinism.seed
    if seed is None:
        seed = determinism.draw_seed()
    out.seed = int(seed)
    cores = cpu_count if cpu_count is not None else os.cpu_count()
    for key in ("intra_op_threads", "inter_op_threads"):
        out.determinism[key] = determinism.resolve_threads(cfg.determinism[key], cores)
    if out.train.name == "script":
        out.train.script = os.path.abspath(str(out.train.script))
    if out.train.name == "notebook":
        out.train.notebook = os.path.abspath(str(out.train.notebook))
    if out.train.name == "mnist" and out.train.data not in ("sample", "full"):
        out.train.data = os.path.abspath(os.path.expanduser(str(out.train.data)))
    OmegaConf.set_struct(out, True)
    return out


def hashed_part(cfg: DictConfig | dict) -> dict:
    """The config without the fields that cannot change a result: what ``config_hash`` hashes."""
    data = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else json.loads(json.dumps(cfg))
    local = data.get("runtime", {}).get("name", "local") == "local"
    # The image settings do not reach a local run.
    for path in (*NOT_IN_HASH, *(("image",) if local else NOT_IN_HASH_DOCKER)):
        *parents, leaf = path.split(".")
        node = data
        for name in parents:
            node = node.get(name) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(leaf, None)
    return data


def config_hash(cfg: DictConfig | dict) -> str:
    """sha256 of the canonical JSON of the config without fields that cannot affect results."""
    canonical = json.dumps(hashed_part(cfg), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def compose(overrides: Sequence[str], config_dir: str | None = None):
    """Compose the launch config with ``overrides``; Hydra's errors become ConfigError.

    ``config_dir`` (``launch --config-dir DIR``) adds the user's config groups and options
    to the launcher's, where Hydra's own ``--config-dir`` puts them: after the launcher's
    configs, so a user's option adds to a group and never replaces a launcher option of
    the same name. A config composed from the user's files names them in its
    ``config_dir`` node (``path``, ``files``), so the fingerprint can hash them.
    """
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        cfg = _compose(overrides, config_dir=config_dir)
        return with_config_files(cfg, overrides, config_dir) if config_dir else cfg
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        # ``from exc``: LAUNCH_FULL_ERROR=1 prints Hydra's whole message as well.
        raise ConfigError(hydra_message(exc, overrides, config_dir)) from exc


def compose_hydra(overrides: Sequence[str], config_dir: str | None = None) -> DictConfig:
    """The ``hydra`` node Hydra composes for ``overrides`` (its sweeper, launcher, ...)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        return _compose(overrides, return_hydra_config=True, config_dir=config_dir).hydra
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        raise ConfigError(hydra_message(exc, overrides, config_dir)) from exc


def with_config_files(cfg: DictConfig, overrides: Sequence[str], config_dir: str) -> DictConfig:
    """``cfg`` with a ``config_dir`` node naming the files of ``config_dir`` it was composed from."""
    files = user_config_files(overrides, config_dir)
    if not files:
        return cfg
    out = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    out.config_dir = {"path": os.path.abspath(config_dir), "files": files}
    OmegaConf.set_struct(out, True)
    return out


def user_config_files(overrides: Sequence[str], config_dir: str) -> list[str]:
    """The files of ``config_dir`` that composing ``overrides`` reads (``train/tiny.yaml``),
    in the order of Hydra's defaults list: each config is looked up as Hydra looks it up."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    files: list[str] = []
    with _hydra(config_dir):
        loader = GlobalHydra.instance().hydra.config_loader
        defaults = loader.compute_defaults_list(config_name=PRIMARY, overrides=list(overrides), run_mode=RunMode.RUN)
        for element in defaults.defaults:
            name = f"{element.config_path}.yaml"
            if element.config_path is None or name in files:
                continue
            found = loader.repository.load_config(element.config_path)
            if found is not None and found.provider == USER_PROVIDER:
                files.append(name)
    return files


def _compose(overrides: Sequence[str], return_hydra_config: bool = False, config_dir: str | None = None):
    from hydra import compose as hydra_compose

    with _hydra(config_dir):
        return hydra_compose(config_name=PRIMARY, overrides=list(overrides),
                             return_hydra_config=return_hydra_config)  # fmt: skip


@contextmanager
def _hydra(config_dir: str | None) -> Iterator[None]:
    """Hydra initialized with the launcher's configs (and ``config_dir``), as ``hydra.main`` would;
    whatever Hydra state there was before (a sweep worker's) is restored after."""
    if config_dir is None:
        from hydra import initialize_config_module

        with initialize_config_module(config_module=CONFIG_MODULE, version_base=None):
            yield
        return
    from hydra import version
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.errors import SearchPathException
    from hydra.initialize import get_gh_backup, restore_gh_from_backup

    directory = os.path.abspath(os.path.expanduser(config_dir))
    if not os.path.isdir(directory):  # Hydra's own words for --config-dir
        raise SearchPathException(f"Additional config directory '{directory}' not found")
    search_path = create_config_search_path(f"pkg://{CONFIG_MODULE}")
    # Where hydra._internal.utils._run_hydra puts --config-dir: after the main configs.
    search_path.prepend(provider=USER_PROVIDER, path=f"file://{directory}", anchor=SearchPathQuery(provider="schema"))
    backup = get_gh_backup()
    version.setbase(None)
    try:
        from hydra.core.global_hydra import GlobalHydra

        GlobalHydra.instance().clear()
        Hydra.create_main_hydra2(task_name=PRIMARY, config_search_path=search_path)
        yield
    finally:
        restore_gh_from_backup(backup)


def hydra_message(exc: BaseException, overrides: Sequence[str] | None = None, config_dir: str | None = None) -> str:
    """Hydra's multi-line error as one line that keeps what Hydra knows and adds the fix.

    A missing group option keeps Hydra's list of available options; a key that is not
    in the config names the closest existing key (``train.epoch`` -> ``train.epochs``)
    or else ``+key=value`` to add it; a parse error names the override. ``overrides``
    (the whole command line) lets the closest key be looked up in the config they compose.
    """
    from hydra.errors import MissingConfigException, OverrideParseException

    if isinstance(exc, MissingConfigException) and exc.options and exc.missing_cfg_file:
        return _missing_option(exc.missing_cfg_file, list(exc.options), _first_line(exc))
    if isinstance(exc, OverrideParseException):
        return _parse_error(exc.override, exc.message)
    full_key = getattr(exc.__cause__, "full_key", None)
    head = _first_line(exc)
    if full_key and str(exc).startswith("Could not override"):
        return _unknown_key(head, str(full_key), str(exc), overrides, config_dir)
    return _joined(exc)


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def _joined(exc: BaseException) -> str:
    """Every line of Hydra's message but its search path and links, with the cause's reason."""
    kept = []
    for line in (line.strip() for line in str(exc).splitlines()):
        if line.startswith(("Config search path", "provider=", "See https://", "Set the environment variable")):
            continue
        if line:
            kept.append(line)
    head = " ".join(kept) or type(exc).__name__
    cause = exc.__cause__
    if cause is not None and str(cause).strip():
        reason = str(cause).strip().splitlines()[0]
        if reason not in head:
            head = f"{head} {reason}"
    return head


def _missing_option(missing: str, options: list[str], head: str) -> str:
    import difflib

    group, _, wrong = missing.rpartition("/")
    head = re.sub(r"^In '[^']*': ", "", head)  # Hydra's name of the config that asked for it
    message = f"{head}. Available options in '{group}': {' '.join(options)}"
    extra = PLUGIN_EXTRAS.get(missing)
    if extra:  # a Hydra plugin the launcher knows, not installed
        return f"{message} (install the plugin: pip install 'tf-repro-launcher[{extra}]')"
    close = difflib.get_close_matches(wrong, options, n=1)
    return f"{message} (did you mean {group}={close[0]}?)" if close else message


def _parse_error(override: str, message: str) -> str:
    lines = [line.strip() for line in message.splitlines() if line.strip() and not line.startswith("See https://")]
    if lines and lines[0].startswith("Error parsing override"):
        lines = lines[1:]
    reason = lines[0] if lines else ""
    text = f"Error parsing override {override!r}" + (f": {reason}" if reason else "")
    if "=" in override:
        text += " (quote values with quotes or special characters: key='it\\'s')"
    else:
        text += " (an override is KEY=VALUE, +KEY=VALUE to add a key, ~KEY to delete one)"
    return text


def _unknown_key(
    head: str, full_key: str, message: str, overrides: Sequence[str] | None, config_dir: str | None
) -> str:
    import difflib

    key = head.removeprefix("Could not override ").strip("'.")
    append = next((line.strip().removeprefix("To append to your config use ") for line in message.splitlines()
                   if line.strip().startswith("To append")), None)  # fmt: skip
    missing = "no such key in the config" if full_key == key else f"{full_key!r} is not in the config"
    text = f"Could not override {key!r}: {missing}"
    group = _group_with_key(key, overrides, config_dir)
    if group:  # train.script=x.py without train=script: never a silent +train.script on mnist
        value = next((o.partition("=")[2] for o in overrides or [] if o.partition("=")[0].lstrip("+~") == key), "...")
        others = [o for o in overrides or [] if o.partition("=")[0].lstrip("+~") not in (key, group.partition("=")[0])]
        return f"{text}; it belongs to {group}: launch {' '.join([group, *others, f'{key}={value}'])}"
    close = difflib.get_close_matches(key, _known_keys(key, overrides, config_dir), n=1, cutoff=SUGGEST_CUTOFF)
    if close:
        text += f"; did you mean {close[0]}?"
        return text + (f" (to add a new key, use {append})" if append else "")
    return text + (f"; to add it, use {append}" if append else "")


def _group_with_key(key: str, overrides: Sequence[str] | None, config_dir: str | None) -> str | None:
    """``train=script`` when ``key`` (``train.script``) is a key of that option of its config
    group and not of the one chosen; None otherwise."""
    group, _, leaf = key.partition(".")
    if not leaf or "." in leaf:
        return None
    options = sorted({p.stem for d in _group_dirs(group, config_dir) for p in d.glob("*.yaml")})
    chosen = next((o.partition("=")[2] for o in overrides or [] if o.partition("=")[0].lstrip("+~") == group), None)
    for option in options:
        if option == chosen:
            continue
        for path in (d / f"{option}.yaml" for d in _group_dirs(group, config_dir)):
            if path.is_file() and leaf in list((OmegaConf.load(path) or {}).keys()):
                return f"{group}={option}"
    return None


def _group_dirs(group: str, config_dir: str | None) -> list[Path]:
    from importlib import resources

    dirs = [Path(str(resources.files("launcher").joinpath("configs", group)))]
    if config_dir:
        dirs.append(Path(config_dir) / group)
    return [d for d in dirs if d.is_dir()]


def _known_keys(key: str, overrides: Sequence[str] | None, config_dir: str | None) -> list[str]:
    """Every dotted key of the config the other overrides compose (nodes and leaves)."""
    others = [o for o in overrides or [] if o.partition("=")[0].lstrip("+~") != key]
    try:
        cfg = _compose(others, return_hydra_config=key.startswith("hydra."), config_dir=config_dir)
    except Exception:  # noqa: BLE001 - another override is broken too: no suggestion
        return []
    container = OmegaConf.to_container(cfg, resolve=False)
    keys: list[str] = []

    def walk(node: object, prefix: str) -> None:
        if isinstance(node, dict):
            for name, child in node.items():
                path = f"{prefix}{name}"
                keys.append(path)
                walk(child, f"{path}.")

    walk(container, "")
    return keys


def hydra_main(argv: list[str], task) -> None:
    """Hydra's own entry point (``hydra.main``) over ``argv`` with the launcher's config.

    Hydra parses ``argv`` itself (``--cfg``, ``--info``, ``--config-dir``, ``-m``, ...);
    its errors are raised as ``ConfigError``, never printed followed by ``sys.exit``.
    """
    import sys

    import hydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    overrides = [a for a in argv[1:] if "=" in a and not a.startswith("-")]
    config_dir = argv[argv.index("--config-dir") + 1] if "--config-dir" in argv else None
    saved_argv, saved_full = sys.argv, os.environ.get("HYDRA_FULL_ERROR")
    sys.argv, os.environ["HYDRA_FULL_ERROR"] = argv, "1"  # raise, never print and sys.exit
    try:
        hydra.main(config_path=f"pkg://{CONFIG_MODULE}", config_name=PRIMARY, version_base=None)(task)()
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(hydra_message(exc, overrides, config_dir)) from exc
    finally:
        sys.argv = saved_argv
        if saved_full is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = saved_full
