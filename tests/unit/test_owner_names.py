"""The names of a run's and a store's files have one owner: launcher/record/layout.py.

Every other module takes a path from ``layout.RunPaths``/``layout.StorePaths`` or a name from
layout's constants; a name spelled again would drift from the owner's the day one is renamed.
This reads every module of launcher/ with ``ast`` and refuses a string constant equal to one of
layout's names. Allowed: docstrings (prose), a mapping's key (``result["outputs"]``,
``{"objects": ...}``, ``data.get("wheels")``: a JSON field, not a file), and a line marked
``# not layout's: <why>`` (a folder of the same name that is no run's or store's).
"""

import ast
from pathlib import Path

import pytest

from launcher.record import layout

PACKAGE = Path(layout.__file__).resolve().parents[1]
OWNER = Path(layout.__file__).resolve()
NAMES = layout.RUN_NAMES | layout.STORE_RESERVED
MARK = "# not layout's:"
KEY_METHODS = frozenset({"get", "pop", "setdefault"})


def _allowed_nodes(tree: ast.AST) -> set[int]:
    """The ids of the constants that are docstrings or a mapping's keys."""
    allowed: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
                allowed.add(id(node.body[0].value))
        elif isinstance(node, ast.Subscript):
            allowed.add(id(node.slice))
        elif isinstance(node, ast.Dict):
            allowed.update(id(k) for k in node.keys if k is not None)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in KEY_METHODS
            and node.args
        ):
            allowed.add(id(node.args[0]))
    return allowed


def spelled_names(source: str) -> list[tuple[int, str]]:
    """The (line, name) of every string constant in ``source`` equal to one of layout's names, less
    the allowed ones."""
    tree = ast.parse(source)
    allowed = _allowed_nodes(tree)
    lines = source.splitlines()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in NAMES:
            if id(node) in allowed or MARK in lines[node.lineno - 1]:
                continue
            found.append((node.lineno, node.value))
    return sorted(found)


def test_the_paths_are_layouts_names_one_property_each():
    # The list this test forbids is layout's own, and the classes give a path for each of its names
    # (rebuild.json lies in a rebuilt environment, not in a run: no RunPaths property).
    run, store = layout.RunPaths("r"), layout.StorePaths("s")
    run_props = [n for n, v in vars(layout.RunPaths).items() if isinstance(v, property)]
    store_props = [n for n, v in vars(layout.StorePaths).items() if isinstance(v, property)]
    assert sorted(getattr(run, n).name for n in run_props) == sorted(layout.RUN_NAMES - {layout.REBUILD})
    assert all(getattr(run, n).parent == Path("r") for n in run_props)
    assert sorted(getattr(store, n).name for n in store_props) == sorted(layout.STORE_RESERVED)
    assert store.run("20260101-000000-abcdef") == layout.RunPaths(Path("s") / "20260101-000000-abcdef")
    assert store.run_wheels("20260101-000000-abcdef") == Path("s", layout.WHEELS, "20260101-000000-abcdef")
    assert layout.RunPaths("r").config == Path("r", "config.yaml")  # a str is taken as a path


def test_no_module_spells_a_run_or_store_file_name():
    modules = sorted(p for p in PACKAGE.rglob("*.py") if p.resolve() != OWNER)
    assert len(modules) > 50
    spelled = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {name!r}"
        for path in modules
        for line, name in spelled_names(path.read_text(encoding="utf-8"))
    ]
    assert not spelled, "spell these through launcher.record.layout (RunPaths, StorePaths or its names):\n" + "\n".join(
        spelled
    )


@pytest.mark.parametrize(
    "source, found",
    [
        ('path = run_dir / "config.yaml"\n', [(1, "config.yaml")]),
        ('FILES = ("fingerprint.json", "result.json")\n', [(1, "fingerprint.json"), (1, "result.json")]),
        ('os.path.join(root, ".gc.lock")\n', [(1, ".gc.lock")]),
        ('def f():\n    """Reads config.yaml."""\n    return "manifest.json"\n', [(3, "manifest.json")]),
        ('"""objects"""\nx = result["outputs"] or {"objects": 1} or d.get("wheels")\n', []),
        ('cache = cache_dir("wheels")  # not layout\'s: the build cache\n', []),
        ("note = f\"see {run_dir / 'log.txt'}\"\n", [(1, "log.txt")]),
    ],
)
def test_the_check_finds_a_name_put_back(source, found):
    assert spelled_names(source) == found
