"""Hydra composition: the launch config from ``launcher/configs`` (and a ``--config-dir``) with the
overrides, and Hydra's errors turned into one line that names the fix.

The project's own rules over the composed config are ``launcher.run.config``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from launcher.errors import ConfigError

CONFIG_MODULE = "launcher.configs"
PRIMARY = "launch"
USER_PROVIDER = "command-line"  # the search-path provider Hydra names a --config-dir
# The group of a user's store settings: launch.yaml's optional `store: default`, after its own
# store block, so DIR/store/default.yaml (or store=NAME's file) of a --config-dir DIR wins over it.
STORE_GROUP = "store"
# Hydra plugins the launcher works with, by the config they add: the extra that installs them.
PLUGIN_EXTRAS = {
    "hydra/sweeper/optuna": "optuna",
    "hydra/launcher/submitit_slurm": "slurm",
    "hydra/launcher/submitit_local": "slurm",
}
# How alike a mistyped key must be to an existing one to be suggested (difflib's ratio):
# train.epoch -> train.epochs is 0.96, train.nope -> train.name only 0.8.
SUGGEST_CUTOFF = 0.85


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

    from launcher.run import schema

    try:
        cfg = _compose(overrides, config_dir=config_dir)
        cfg = with_config_files(cfg, overrides, config_dir) if config_dir else cfg
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        # ``from exc``: LAUNCH_FULL_ERROR=1 prints Hydra's whole message as well.
        raise ConfigError(hydra_message(exc, overrides, config_dir)) from exc
    schema.check(cfg)  # a value its type does not take is refused here, as Hydra refuses a bad override
    return cfg


def compose_store(overrides: Sequence[str], config_dir: str | None = None) -> dict:
    """The ``store`` settings of the config a run composes with the same ``config_dir`` and
    ``overrides``: launch.yaml's, then the user's ``store/default.yaml`` (or ``store=NAME``'s) in
    ``config_dir``, then the ``store.KEY=VALUE`` words, each value checked by its type.

    What every subcommand that reads a store (compare, replay, resume, pack, unpack, verify, gc,
    runs) takes its settings from: where the store is, and whose signatures it trusts, are the
    same for ``launch -cd DIR`` and ``launch verify RUN -cd DIR``.

    Raises:
        ConfigError: Hydra's error as one line (a ``store.KEY`` the store has not, a ``store=NAME``
            the folder has not, a missing folder), or a value its type does not take (exit 2).
    """
    return OmegaConf.to_container(compose(overrides, config_dir=config_dir).store, resolve=True)


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
    in the order of Hydra's defaults list: each config is looked up as Hydra looks it up.

    The ``store`` group's files are left out, as the ``store`` node is left out of the config
    hash: where runs are written and whose signatures count never change what a run computes,
    and the fingerprint hashes these files into the comparability key."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    files: list[str] = []
    with _hydra(config_dir):
        loader = GlobalHydra.instance().hydra.config_loader
        defaults = loader.compute_defaults_list(config_name=PRIMARY, overrides=list(overrides), run_mode=RunMode.RUN)
        for element in defaults.defaults:
            name = f"{element.config_path}.yaml"
            if element.config_path is None or name in files or name.startswith(f"{STORE_GROUP}/"):
                continue
            found = loader.repository.load_config(element.config_path)
            if found is not None and found.provider == USER_PROVIDER:
                files.append(name)
    return files


def _compose(overrides: Sequence[str], return_hydra_config: bool = False, config_dir: str | None = None):
    from hydra import compose as hydra_compose

    with _hydra(config_dir):
        _check_store_option(overrides)
        return hydra_compose(config_name=PRIMARY, overrides=list(overrides), return_hydra_config=return_hydra_config)


def _check_store_option(overrides: Sequence[str]) -> None:
    """``store=NAME`` names an option of a ``store`` group of the user's config folder: Hydra skips an
    optional default whose option is missing, which would put runs silently where NAME's did not
    say. Without such a group, ``store=VALUE`` replaces the settings, and the schema says so."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import MissingConfigException

    chosen = [o.partition("=")[2] for o in overrides if o.partition("=")[0] == STORE_GROUP]
    repository = GlobalHydra.instance().hydra.config_loader.repository
    if not chosen or not repository.group_exists(STORE_GROUP):
        return
    options = repository.get_group_options(STORE_GROUP)
    if chosen[-1] not in options:
        missing = f"{STORE_GROUP}/{chosen[-1]}"
        raise MissingConfigException(f"Could not find '{missing}'", missing_cfg_file=missing, options=options)


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
    append = next(
        (
            line.strip().removeprefix("To append to your config use ")
            for line in message.splitlines()
            if line.strip().startswith("To append")
        ),
        None,
    )
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
