"""Argument parsing for the subcommands: argparse whose errors are the project's."""

from __future__ import annotations

import argparse

from launcher.errors import ConfigError


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    """An argparse parser whose errors are ConfigError (one line, exit 2), not SystemExit."""

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str):  # noqa: D401 - argparse API
            raise ConfigError(f"{self.prog}: {message}")

    return _Parser(prog=f"launch {prog}", description=description)
