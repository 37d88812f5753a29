"""Argument parsing for the subcommands: argparse whose errors are the project's."""

from __future__ import annotations

import argparse
import sys

from launcher.errors import UsageError


def parser(prog: str, description: str, **kwargs) -> argparse.ArgumentParser:
    """An argparse parser whose errors are UsageError (the error and the usage line, exit 2).

    ``description``, a sentence, is what ``launch --help`` lists under the subcommand's usage line
    (``main.synopsis``); ``kwargs`` (``usage``, ``epilog``, ``formatter_class``) go to argparse."""

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str):  # noqa: D401 - argparse API
            raise UsageError(f"{self.prog}: {message}", " ".join(self.format_usage().split()))

    return _Parser(prog=f"launch {prog}", description=description, **kwargs)


def renamed(old: str, new: str) -> None:
    """Say on stderr that ``old`` (an option or a word of a subcommand) is now ``new``: the old
    spelling still works for one more release (docs/errors.md)."""
    print(f"[launch] note: {old} is now {new} (the old spelling goes in the next release)", file=sys.stderr)


def old_spelling(p: argparse.ArgumentParser, old: str, new: str, dest: str) -> None:
    """``old`` as a hidden alias of the store_true option ``new`` (dest ``dest``), noting the rename
    on stderr when used: one word, one meaning on the command line (docs/errors.md)."""

    class _Renamed(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            renamed(option_string, new)
            setattr(namespace, self.dest, True)

    p.add_argument(old, dest=dest, nargs=0, action=_Renamed, help=argparse.SUPPRESS)
