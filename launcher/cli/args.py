"""Argument parsing for the subcommands: argparse whose errors are the project's."""

from __future__ import annotations

import argparse

from launcher.errors import ConfigError


class UsageError(ConfigError):
    """Bad command-line usage: the one-line error, then ``hint`` (a usage line) below it."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    """An argparse parser whose errors are UsageError (the error and the usage line, exit 2)."""

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str):  # noqa: D401 - argparse API
            raise UsageError(f"{self.prog}: {message}", " ".join(self.format_usage().split()))

    return _Parser(prog=f"launch {prog}", description=description)
