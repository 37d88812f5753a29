"""The shape of the launcher's code, read with ``ast`` and the file tree (issue 48).

- **No function over 80 lines** (from its ``def`` to its last line, docstring included): a longer
  one does several things, and is split into parts that each say what they do (a dozen keywords
  passed on blind become a small dataclass, as ``pipeline.Options`` and ``usage.Observed``).
- **No module named like a package of the launcher**: a module ``launcher/X/Y.py`` whose stem is
  the name of a subpackage (``launcher/run/job.py`` beside ``launcher/job/``) makes an import
  (``from launcher.run import job``) read as the other one.

Each check is a function over a directory, so each is also shown to fail on a tree that breaks it.
"""

import ast
import textwrap
from pathlib import Path

from launcher.record import layout

PACKAGE = Path(layout.__file__).resolve().parents[1]
MAX_LINES = 80


def long_functions(package: Path, limit: int = MAX_LINES) -> list[tuple[str, str, int]]:
    """(path below ``package``, name, lines) of every function and method of ``package`` over ``limit`` lines."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append((path.relative_to(package).as_posix(), node.name, lines))
    return found


def package_named_modules(package: Path) -> list[str]:
    """The modules ``X/Y.py`` (at any depth below ``package``) whose stem is the name of one of its
    subpackages (a directory holding ``__init__.py``, at any depth)."""
    packages = {init.parent.name for init in package.rglob("__init__.py") if init.parent != package}
    return sorted(
        path.relative_to(package).as_posix()
        for path in package.rglob("*.py")
        if path.parent != package and path.stem in packages
    )


def test_no_function_of_the_launcher_is_over_80_lines():
    over = [f"{path}: {name} ({lines} lines)" for path, name, lines in long_functions(PACKAGE)]
    assert not over, f"split these into functions of at most {MAX_LINES} lines: {over}"


def test_no_module_of_the_launcher_is_named_like_one_of_its_packages():
    assert package_named_modules(PACKAGE) == []


# ---------------------------------------------------------------- each check fails when broken
def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    return root


def test_a_function_over_80_lines_is_found_with_its_length(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(79))
    method = f"class C:\n    async def method(self):\n{textwrap.indent(body, '    ')}        x = 1\n"
    pkg = _tree(
        tmp_path / "pkg",
        {"__init__.py": "", "run/__init__.py": "", "run/long.py": f"def fits():\n{body}\n\n{method}"},
    )
    # fits: def + 79 lines = 80; C.method: def + 80 lines = 81 (a method counts, async too)
    assert long_functions(pkg) == [("run/long.py", "method", 81)]
    assert long_functions(pkg, limit=79) == [("run/long.py", "fits", 80), ("run/long.py", "method", 81)]


def test_a_module_named_like_a_subpackage_is_found(tmp_path):
    pkg = _tree(
        tmp_path / "pkg",
        {
            "__init__.py": "",
            "job/__init__.py": "",
            "record/__init__.py": "",
            "record/store/__init__.py": "",
            "run/__init__.py": "",
            "run/job.py": "",  # the old launcher/run/job.py beside launcher/job/
            "cli/__init__.py": "",
            "cli/store.py": "",  # a nested package's name counts too
            "run/pipeline.py": "",
            "bootstrap.py": "",  # a top-level module is not X/Y.py
            "data/job.txt": "",  # not a module
        },
    )
    assert package_named_modules(pkg) == ["cli/store.py", "run/job.py"]
