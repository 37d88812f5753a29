"""The store settings of the subcommands that read a store (compare, replay, resume, pack, unpack,
verify, gc, runs), composed by Hydra from the config a run uses.

``launch verify RUN -cd DIR store.require_signed=true`` takes launch.yaml's ``store`` block, then
the ``store/default.yaml`` of ``DIR`` (or, with ``store=NAME``, ``store/NAME.yaml``), then the
``store.KEY=VALUE`` words, each value checked by its type (``composition.compose_store``): the
settings ``launch -cd DIR`` would run with, read by no hand of ours. ``--store DIR``, where a
subcommand has it (runs, gc, unpack, replay), is ``store.root=DIR``: one setting with two spellings,
refused when both are given and disagree. Neither given, the root is the folder's, else launch.yaml's
``${oc.env:LAUNCH_STORE,./runs}``: ``$LAUNCH_STORE`` when it is set, else ``./runs`` (docs/store.md).
"""

from __future__ import annotations

import argparse

from launcher.errors import ConfigError

ROOT_WORD = "store.root="


def split(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the store words: ``store.KEY=VALUE`` and ``store=NAME``, the rest), each in its order: the
    words a subcommand takes after its arguments, as Hydra overrides."""
    words = [a for a in argv if a.startswith(("store.", "store=")) and "=" in a]
    return words, [a for a in argv if a not in words]


def add_config_dir(p: argparse.ArgumentParser) -> None:
    """``-cd/--config-dir DIR``: the user's config folder, as ``launch -cd DIR`` takes it."""
    p.add_argument(
        "-cd",
        "--config-dir",
        dest="config_dir",
        metavar="DIR",
        help="your config folder, as for a run: its store/default.yaml sets store.* (docs/hydra.md)",
    )


def add_store(p: argparse.ArgumentParser, what: str = "the store") -> None:
    """``--store DIR``: ``store.root=DIR``, as every subcommand that names a store takes it."""
    p.add_argument(
        "--store",
        metavar="DIR",
        help=f"{what}: the same as store.root=DIR (default: $LAUNCH_STORE, else ./runs; docs/store.md)",
    )


def given_root(words: list[str], store: str | None) -> str | None:
    """The store root the command line names: ``--store DIR`` (``store``) or a ``store.root=DIR`` word;
    None when neither. Both, naming different directories: ConfigError (one setting, two spellings)."""
    said = [w[len(ROOT_WORD) :] for w in words if w.startswith(ROOT_WORD)]
    if store is not None and any(s != store for s in said):
        raise ConfigError(
            f"--store {store} and store.root={said[-1]} name the same setting: give one of them (docs/store.md)"
        )
    return store


def root(words: list[str], config_dir: str | None, store: str | None) -> str:
    """``store.root`` alone, for the subcommands that read nothing else (gc, runs): ``store`` (``--store
    DIR``) as it is, over any folder or word, with nothing composed (Hydra not even imported: a gc
    run by another user of a shared store needs the store, not the launcher's configs); else the
    composed setting (``$LAUNCH_STORE`` where nothing names the root)."""
    store = given_root(words, store)
    return store if store is not None else str(settings(words, config_dir)["root"])


def settings(words: list[str], config_dir: str | None, root: str | None = None) -> dict:
    """The ``store`` settings composed from launch.yaml, ``config_dir`` and ``words``; ``root``
    (``--store DIR``), when given, is ``store.root``."""
    from launcher.run import composition

    root = given_root(words, root)
    store = composition.compose_store(words, config_dir=config_dir)
    if root is not None:
        store["root"] = root
    return store
