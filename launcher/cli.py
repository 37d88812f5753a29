"""The ``launch`` command: Hydra overrides for a training run, or a subcommand.

``launch [OVERRIDES...]`` composes the config and runs one job; ``launch -m ...``
hands the composed sweep to Hydra's multirun (see ``launcher.sweep``); the words
below are subcommands. Errors are reported here, once, as one line: the project's
errors by message and exit code, anything unexpected by a short traceback (the
whole one with ``LAUNCH_FULL_ERROR=1``).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence

from launcher.errors import ConfigError, LauncherError

CONFIG_MODULE = "launcher.configs"
PRIMARY = "launch"

SUBCOMMANDS: dict[str, tuple[str, Callable[[list[str]], int]]] = {}


def subcommand(name: str, help: str):
    def register(func: Callable[[list[str]], int]):
        SUBCOMMANDS[name] = (help, func)
        return func

    return register


def compose(overrides: Sequence[str]):
    """Compose the launch config with ``overrides``; Hydra's errors become ConfigError."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_module(config_module=CONFIG_MODULE, version_base=None):
            return hydra_compose(config_name=PRIMARY, overrides=list(overrides))
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        raise ConfigError(hydra_message(exc)) from None


def hydra_message(exc: BaseException) -> str:
    """Hydra's multi-line error reduced to one line: what failed, and why."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    head = lines[0] if lines else type(exc).__name__
    cause = exc.__cause__
    if cause is not None and str(cause).strip():
        reason = str(cause).strip().splitlines()[0]
        if reason not in head:
            head = f"{head} {reason}"
    if head.startswith("Error parsing override"):
        head += " (quote values with quotes or special characters: key='it\\'s')"
    return head


def run_single(overrides: list[str]) -> int:
    from launcher import job

    outcome = job.run(compose(overrides))
    print(job.summary_line(outcome), flush=True)
    if outcome.status == "interrupted":
        return 130
    return 0 if outcome.ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and args[0] in SUBCOMMANDS:
            return SUBCOMMANDS[args[0]][1](args[1:])
        if args and args[0] in ("-h", "--help", "help"):
            print(usage())
            return 0
        if any(a in ("-m", "--multirun") for a in args):
            from launcher import sweep

            return sweep.run_multirun([a for a in args if a not in ("-m", "--multirun")])
        if any(a.startswith("-") for a in args):
            raise ConfigError(
                f"unknown option {next(a for a in args if a.startswith('-'))!r}; see launch --help"
            )
        return run_single(args)
    except LauncherError as exc:
        print(f"launch: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("launch: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # an unexpected error: a bug, reported briefly
        if os.environ.get("LAUNCH_FULL_ERROR"):
            traceback.print_exc()
        else:
            frames = traceback.extract_tb(exc.__traceback__)[-3:]
            print("".join(traceback.format_list(frames)).rstrip(), file=sys.stderr)
            print(f"launch: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
            print("launch: set LAUNCH_FULL_ERROR=1 for the full traceback", file=sys.stderr)
        return 70


def usage() -> str:
    lines = [
        "usage: launch [OVERRIDES...]            run one training job (Hydra overrides)",
        "       launch -m [OVERRIDES...]         sweep, e.g. -m train=mnist '+seed=range(10)'",
    ]
    for name, (help_text, _) in SUBCOMMANDS.items():
        lines.append(f"       launch {name:<9} {help_text}")
    lines += [
        "",
        "config groups: train=mnist|custom|script  determinism=off|seeded|strict  runtime=local|docker",
        "  image=tf-cpu|tf-gpu (runtime=docker)",
        "common overrides: +seed=N train.data=sample|full|PATH train.epochs=N store.root=DIR",
        "  determinism.intra_op_threads=N|auto determinism.inter_op_threads=N|auto",
        "  determinism.trace_every=N (steps between trace points; 0 = none)",
    ]
    return "\n".join(lines)


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    """An argparse parser whose errors are ConfigError (one line, exit 2), not SystemExit."""

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str):  # noqa: D401 - argparse API
            raise ConfigError(f"{self.prog}: {message}")

    return _Parser(prog=f"launch {prog}", description=description)


# Subcommands register themselves on import.
from launcher import commands  # noqa: E402,F401

if __name__ == "__main__":
    sys.exit(main())
