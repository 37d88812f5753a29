"""Hydra's own command-line flags on ``launch`` and ``launch -m``, parsed by Hydra's parser.

``--cfg job|hydra|all`` (with ``--resolve``, ``--package``), ``--info``,
``--shell-completion`` and ``--hydra-help`` are handed to Hydra's entry point
(``hydra.main``), which prints and returns: nothing is composed into a run, nothing is
written. ``--config-dir/-cd DIR`` adds the user's config groups to the launcher's, for
a run and for every job of a sweep. ``-m/--multirun`` and ``--run`` keep their meaning.
``--config-path`` and ``--config-name`` are refused: the launcher's primary config is
its own ``launch`` (``pkg://launcher.configs``); a user's configs come in with ``-cd``.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence

from launcher.errors import ConfigError, ExitCode, UsageError

PROG = "launch"
USAGE = (
    "usage: launch [--cfg job|hydra|all [--resolve] [--package PKG]] [--info [WHAT]] [-cd DIR] [-m] "
    "[-sc install=bash] [OVERRIDES...]; see launch --help"
)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` parsed by Hydra's own parser (flags and overrides in any order).

    Its errors are ``UsageError`` (exit 2); the flags the launcher cannot honour are refused
    with what to use instead.
    """
    from hydra._internal.utils import get_args_parser

    parser = get_args_parser()
    parser.prog = PROG

    def error(message: str):
        raise UsageError(message, USAGE)

    parser.error = error  # type: ignore[method-assign]
    args = parser.parse_intermixed_args(list(argv))
    if args.config_path is not None or args.config_name is not None:
        raise ConfigError(
            "--config-path/--config-name cannot replace launch's primary config; add your config "
            "groups with --config-dir DIR (e.g. DIR/train/tiny.yaml, then train=tiny)"
        )
    commands = args.run + bool(args.cfg) + args.multirun + args.shell_completion + (args.info is not None)
    if commands > 1:  # Hydra's own rule and words
        raise ConfigError("Only one of --run, --multirun, --cfg, --info and --shell_completion can be specified")
    if args.resolve and not args.cfg:
        raise ConfigError("The --resolve flag can only be used in conjunction with --cfg or --help")
    if args.experimental_rerun is not None:
        raise ConfigError("--experimental-rerun is not supported; rerun a stored run with launch replay RUN")
    return args


def shows(args: argparse.Namespace) -> bool:
    """Whether ``args`` only ask Hydra to print something (no run)."""
    return bool(args.cfg or args.info is not None or args.shell_completion or args.hydra_help)


def hydra_argv(args: argparse.Namespace) -> list[str]:
    """The command line Hydra's entry point gets for ``args``: flags first, then the overrides."""
    argv = [PROG]
    if args.cfg:
        argv += ["--cfg", args.cfg]
    if args.resolve:
        argv.append("--resolve")
    if args.package is not None:
        argv += ["--package", args.package]
    if args.info is not None:
        argv += ["--info", args.info]
    if args.shell_completion:
        argv.append("--shell-completion")
    if args.hydra_help:
        argv.append("--hydra-help")
    if args.multirun:
        argv.append("--multirun")
    if args.config_dir is not None:
        argv += ["--config-dir", os.path.abspath(os.path.expanduser(args.config_dir))]
    return [*argv, *args.overrides]


def show(args: argparse.Namespace) -> int:
    """Let Hydra print what ``args`` ask for (``--cfg``, ``--info``, ...); 0, or ConfigError."""
    from launcher.run.composition import hydra_main

    if args.shell_completion and args.config_dir is None and "COMP_LINE" in os.environ:
        args.config_dir = completed_config_dir(os.environ["COMP_LINE"])  # complete DIR's groups too
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        hydra_main(hydra_argv(args), _never)
    except SystemExit as exc:  # Hydra's --hydra-help exits 0 when it has printed
        if exc.code not in (0, None):
            raise ConfigError(f"Hydra exited with status {exc.code}") from None
    finally:  # --info logs to the stdout of the moment, at DEBUG: not beyond this command
        root.handlers[:], root.level = handlers, level
    return ExitCode.OK


def completed_config_dir(line: str) -> str | None:
    """The ``--config-dir`` of a command line being completed, when it names a directory."""
    words = line.split()
    for flag, value in zip(words, words[1:], strict=False):
        if flag in ("-cd", "--config-dir") and os.path.isdir(os.path.expanduser(value)):
            return value
    return None


def _never(cfg) -> None:
    raise AssertionError("Hydra ran the task of a command that only prints")  # pragma: no cover
