"""One exit-code table, one source (issue 47): ``launcher.errors.ExitCode`` names every exit code of
``launch``; every error class and every command's ``return`` takes its code from it, and
docs/errors.md's "All exit codes" table is the enum, row for row."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from launcher.cli import main as cli
from launcher.errors import ExitCode

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _docs_table() -> list[tuple[int, str]]:
    """(code, name) of each row of docs/errors.md's "All exit codes" table, in order."""
    text = (DOCS / "errors.md").read_text().split("## All exit codes", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in text.splitlines() if re.match(r"\| \d+ \|", line)]
    return [(int(cells[1]), cells[2].strip("`")) for cells in (re.split(r"\s*\|\s*", row) for row in rows)]


def test_the_docs_exit_code_table_is_the_enum_row_for_row():
    assert _docs_table() == [(code.value, code.name) for code in ExitCode]
    assert (ExitCode.NOTHING_COMPARED, ExitCode.SIGNATURE, ExitCode.ENVIRONMENT) == (6, 7, 8)
    assert len(set(ExitCode)) == len(ExitCode.__members__)  # no number named twice


def test_every_error_names_its_exit_code_from_the_enum():
    from launcher import errors

    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.LauncherError)]
    assert all(isinstance(c.exit_code, ExitCode) for c in classes), [
        c for c in classes if not isinstance(c.exit_code, ExitCode)
    ]
    environment = {c.__name__ for c in classes if c.exit_code == ExitCode.ENVIRONMENT}
    assert {"DockerUnavailable", "BuildFailed", "StoreError", "GpuUnavailable", "RebuildError"} <= environment
    assert errors.SignatureError.exit_code == ExitCode.SIGNATURE and errors.NotAStore.exit_code == ExitCode.USAGE


def test_no_command_returns_a_bare_number():
    """Every ``return`` of launcher/cli/ that ends a command with a number names it from ``ExitCode``."""

    def number(node: ast.expr | None) -> bool:  # 0, 1 if x else 0, 128 + n
        if isinstance(node, ast.Constant):
            return type(node.value) is int
        if isinstance(node, ast.IfExp):
            return number(node.body) or number(node.orelse)
        return isinstance(node, ast.BinOp) and (number(node.left) or number(node.right))

    folder = Path(cli.__file__).parent
    bare = [
        f"{path.name}:{node.lineno}"
        for path in sorted(folder.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Return) and number(node.value)
    ]
    assert not bare, f"return with a bare number (use launcher.errors.ExitCode): {bare}"
    assert number(ast.parse("1 if x else 0", mode="eval").body) and not number(ast.parse("w[0]", mode="eval").body)
