"""Each kind of code has one owner (issue 48), checked by reading every module of launcher/ with ``ast``:

- the exception classes: ``launcher/errors.py``, one place to read what can go wrong;
- running a program (``subprocess``, ``os.system``, ``os.popen``, ``os.exec*``, ``os.spawn*``,
  ``os.posix_spawn*``, ``os.fork*``, ``pty``): ``launcher/proc.py``;
- hashing a file's content: ``launcher.record.hashing.file_sha256``, which streams it (a wheel of
  TensorFlow is 0.5-1 GB), so no other module reads a file whole into a hash, loops over a file's
  blocks into a hash, or defines a ``*file*sha256*`` helper. Hashing bytes already in memory, a file
  descriptor (``os.read``), or the blocks of a file while copying them, stays where it is;
- the internal ``python -m`` entry points: ``launcher/entrypoints.py`` lists every module with a
  ``__main__`` block, and no command line elsewhere spells ``-m launcher.…``; the job process never
  imports that list.

Each check is a function over a source text, and is shown to catch what it refuses.
"""

from __future__ import annotations

import ast
import builtins
import itertools
import re
import subprocess
import sys
from pathlib import Path

import pytest

from launcher import entrypoints

PACKAGE = Path(entrypoints.__file__).resolve().parent
ERRORS = "errors.py"
PROC = "proc.py"
HASHING = "record/hashing.py"
ENTRYPOINTS = "entrypoints.py"

# Modules allowed to hash a file themselves, and why.
HASHES_FILES_ITSELF = {
    "docker/treehash.py": (
        "runs inside images (`python -m launcher.docker.treehash DIR`, standard library only): "
        "launcher.record.hashing imports numpy"
    ),
}

# Modules allowed to run programs besides proc.py, and why: none.
RUNS_PROGRAMS = {PROC: "the one place that runs programs (no shell)"}

_BUILTIN_EXCEPTIONS = frozenset(
    name
    for name in dir(builtins)
    if isinstance(getattr(builtins, name), type) and issubclass(getattr(builtins, name), BaseException)
)
_OS_RUNS = re.compile(r"^(system|popen|exec\w*|spawn\w*|posix_spawn\w*|fork\w*)$")
_RUNNING_MODULES = frozenset({"subprocess", "pty"})


def _modules() -> list[tuple[str, str]]:
    """(path relative to the package, source) of every module of launcher/."""
    return [(p.relative_to(PACKAGE).as_posix(), p.read_text()) for p in sorted(PACKAGE.rglob("*.py"))]


def _name(node: ast.expr) -> str:
    """The dotted name an expression spells (``a.b.c``), or "" for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _name(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


# ---------------------------------------------------------------- the checks, one source text at a time
def exception_classes(source: str, known: frozenset[str] = frozenset()) -> list[str]:
    """The classes ``source`` defines that are exceptions: a base that is a builtin exception, one
    named like one (``...Error``, ``...Exception``, ``...Warning``), one of ``known`` (the project's,
    from errors.py), or another exception class of the same source."""
    found: dict[str, bool] = {}
    exceptions = set(_BUILTIN_EXCEPTIONS) | set(known)
    classes = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)]
    changed = True
    while changed:
        changed = False
        for cls in classes:
            if cls.name in found:
                continue
            for base in cls.bases:
                last = _name(base).rsplit(".", 1)[-1]
                if last in exceptions or re.search(r"(Error|Exception|Warning)$", last):
                    found[cls.name] = True
                    exceptions.add(cls.name)
                    changed = True
                    break
    return sorted(found)


def programs_run(source: str) -> list[str]:
    """How ``source`` runs programs itself: ``subprocess`` or ``pty`` imported, ``os.system``,
    ``os.popen``, ``os.exec*``, ``os.spawn*``, ``os.posix_spawn*`` or ``os.fork*`` called or imported,
    ``asyncio.create_subprocess_*``. Strings that name them (an audit hook's event names) are not."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.split(".")[0] in _RUNNING_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in _RUNNING_MODULES:
                found.append(f"from {node.module} import ...")
            elif node.module == "os":
                found += [f"from os import {a.name}" for a in node.names if _OS_RUNS.match(a.name)]
        elif isinstance(node, ast.Attribute):
            name = _name(node)
            if (name.startswith("os.") and _OS_RUNS.match(node.attr)) or name.startswith("asyncio.create_subprocess"):
                found.append(name)
    return sorted(set(found))


def _reads_a_file(node: ast.AST, whole: bool = False) -> bool:
    """Does ``node`` hold a call of a file object's ``read``/``read_bytes``/``readinto`` (not ``os.read``
    of a descriptor)? ``whole``: one that reads the whole file (``read_bytes()``, ``read()``), not
    ``read(N)`` (a zip member by its name, a bounded read)."""
    return any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr in ("read", "read_bytes", "readinto")
        and _name(n.func) != "os.read"
        and not (whole and (n.args or n.keywords))
        for n in ast.walk(node)
    )


def file_hashing(source: str) -> list[str]:
    """How ``source`` hashes a file itself: a hash of a whole file read (``hashlib.sha256(p.read_bytes())``),
    a loop over a file's blocks that only feeds a hash (``for block in iter(lambda: f.read(N), b""):
    h.update(block)``), ``hashlib.file_digest``, or a function named like a file-hash helper."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and _name(node.func).startswith("hashlib."):
            if _name(node.func) == "hashlib.file_digest" or any(_reads_a_file(a, whole=True) for a in node.args):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, (ast.For, ast.While)):
            only_updates = all(
                isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and _name(s.value.func).endswith(".update")
                for s in node.body
            )
            head = node.iter if isinstance(node, ast.For) else node.test
            if only_updates and _reads_a_file(head):
                found.append(f"line {node.lineno}: a loop of reads into a hash")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            parts = node.name.lower().split("_")
            if "sha256" in parts and "file" in parts:
                found.append(f"line {node.lineno}: def {node.name}")
    return found


def main_blocks(source: str) -> bool:
    """Does ``source`` have an ``if __name__ == "__main__":`` block?"""
    return any(
        isinstance(n, ast.If)
        and isinstance(n.test, ast.Compare)
        and _name(n.test.left) == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in n.test.comparators)
        for n in ast.walk(ast.parse(source))
    )


def spelled_entry_points(source: str) -> list[str]:
    """The command lines ``source`` spells with ``-m launcher…`` (a list or tuple holding ``"-m"``
    then a constant module name of the launcher) instead of taking the name from entrypoints."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.List, ast.Tuple)):
            for first, second in itertools.pairwise(node.elts):
                if (
                    isinstance(first, ast.Constant)
                    and first.value == "-m"
                    and isinstance(second, ast.Constant)
                    and isinstance(second.value, str)
                    and (second.value == "launcher" or second.value.startswith("launcher."))
                ):
                    found.append(f"line {node.lineno}: -m {second.value}")
    return found


def _module_name(rel: str) -> str:
    parts = rel.removesuffix(".py").split("/")
    if parts[-1] in ("__init__", "__main__"):
        parts.pop()
    return ".".join(["launcher", *parts])


# ---------------------------------------------------------------- the package
def test_exception_classes_are_defined_only_in_errors():
    known = frozenset(exception_classes((PACKAGE / ERRORS).read_text()))
    assert {"LauncherError", "UsageError", "SnapshotError", "StoreBusy", "CellError", "IndexUnreadable"} <= known
    elsewhere = {rel: found for rel, text in _modules() if rel != ERRORS and (found := exception_classes(text, known))}
    assert not elsewhere, f"exception classes outside launcher/errors.py (move them there): {elsewhere}"


def test_programs_are_run_only_through_proc():
    elsewhere = {rel: found for rel, text in _modules() if rel not in RUNS_PROGRAMS and (found := programs_run(text))}
    assert not elsewhere, f"programs run outside launcher/proc.py (use a function of proc): {elsewhere}"
    assert programs_run((PACKAGE / PROC).read_text())  # the check reads proc.py as it is


def test_files_are_hashed_only_by_hashing_file_sha256():
    elsewhere = {
        rel: found
        for rel, text in _modules()
        if rel != HASHING and rel not in HASHES_FILES_ITSELF and (found := file_hashing(text))
    }
    assert not elsewhere, f"files hashed outside launcher.record.hashing (use hashing.file_sha256): {elsewhere}"
    for rel in HASHES_FILES_ITSELF:  # an exception that no longer hashes a file is an exception no more
        assert file_hashing((PACKAGE / rel).read_text()), f"{rel} hashes no file itself: drop it from the list"
    assert file_hashing((PACKAGE / HASHING).read_text())  # the helper itself is seen


def test_every_internal_entry_point_is_listed_in_entrypoints():
    listed = {e.module for e in entrypoints.ALL}
    with_main = {_module_name(rel) for rel, text in _modules() if main_blocks(text) or rel == "__main__.py"}
    assert with_main == listed, (
        f"not in launcher/entrypoints.py: {sorted(with_main - listed)}; listed without a __main__ block: "
        f"{sorted(listed - with_main)}"
    )
    assert all(e.what for e in entrypoints.ALL)


def test_command_lines_take_the_entry_points_module_from_entrypoints():
    elsewhere = {rel: found for rel, text in _modules() if rel != ENTRYPOINTS and (found := spelled_entry_points(text))}
    assert not elsewhere, f"`-m launcher...` spelled outside launcher/entrypoints.py: {elsewhere}"


def test_the_job_process_never_imports_the_entry_point_list():
    """A change to the list must refuse no run: the job's imports are in its comparability key. The job
    imports only record, errors, version, console (and proc, through record's probes)."""
    job = [rel for rel, text in _modules() if rel.startswith("job/") and "launcher.entrypoints" in text]
    job += [
        rel
        for rel, text in _modules()
        if rel.startswith("job/") and re.search(r"from launcher import .*\bentrypoints\b", text)
    ]
    assert not job, f"the job process imports launcher.entrypoints: {job}"
    code = (
        "import importlib, pkgutil, sys, launcher.record as r\n"
        "names = ['launcher.bootstrap', 'launcher.proc', 'launcher.console', 'launcher.errors', 'launcher.version']\n"
        "names += [m.name for m in pkgutil.walk_packages(r.__path__, 'launcher.record.')]\n"
        "for name in names: importlib.import_module(name)\n"
        "print('launcher.entrypoints' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"


# ---------------------------------------------------------------- each check catches what it refuses
def test_the_exception_check_sees_a_class_of_any_exception_base():
    source = (
        "import argparse\nfrom launcher.errors import StoreError\n"
        "class A(Exception): pass\nclass B(A): pass\nclass C(StoreError): pass\n"
        "class D(argparse.ArgumentError): pass\nclass E(KeyError, dict): pass\nclass F(dict): pass\n"
    )
    assert exception_classes(source, frozenset({"StoreError"})) == ["A", "B", "C", "D", "E"]
    assert exception_classes("class Plain:\n    pass\n") == []


@pytest.mark.parametrize(
    "source",
    [
        "import subprocess\n",
        "from subprocess import run\n",
        "import os\nos.system('ls')\n",
        "import os\nos.execvp('ls', ['ls'])\n",
        "from os import popen\n",
        "import os\nos.posix_spawnp('ls', ['ls'], {})\n",
        "import pty\n",
        "import asyncio\nasyncio.create_subprocess_exec('ls')\n",
    ],
)
def test_the_program_check_sees_every_way_to_run_one(source):
    assert programs_run(source)


def test_the_program_check_leaves_names_in_strings_alone():
    assert programs_run('EVENTS = ("subprocess.Popen", "os.system", "os.exec")\nimport os\nos.path.join("a")\n') == []


@pytest.mark.parametrize(
    "source",
    [
        "import hashlib\ndef f(p):\n    return hashlib.sha256(p.read_bytes()).hexdigest()\n",
        "import hashlib\ndef f(p):\n    return hashlib.sha256(open(p, 'rb').read()).hexdigest()\n",
        "import hashlib\ndef f(f):\n    return hashlib.md5(f.read()).hexdigest()\n",
        "import hashlib\ndef f(p):\n    h = hashlib.sha256()\n    with open(p, 'rb') as f:\n"
        "        for block in iter(lambda: f.read(1 << 20), b''):\n            h.update(block)\n"
        "    return h.hexdigest()\n",
        "import hashlib\ndef f(p):\n    h = hashlib.sha256()\n    with open(p, 'rb') as f:\n"
        "        while block := f.read(65536):\n            h.update(block)\n    return h.hexdigest()\n",
        "import hashlib\ndef f(f):\n    return hashlib.file_digest(f, 'sha256').hexdigest()\n",
        "def sha256_file(p):\n    ...\n",
        "def _file_sha256(p):\n    ...\n",
    ],
)
def test_the_hash_check_sees_a_file_hashed_outside_hashing(source):
    assert file_hashing(source)


def test_the_hash_check_leaves_bytes_descriptors_and_copies_alone():
    source = (
        "import hashlib, os\n"
        "def text(s):\n    return hashlib.sha256(s.encode()).hexdigest()\n"
        "def fd(fd):\n    h = hashlib.sha256()\n    for block in iter(lambda: os.read(fd, 1 << 20), b''):\n"
        "        h.update(block)\n    return h.hexdigest()\n"
        "def copy(src, dst):\n    h = hashlib.sha256()\n    for block in iter(lambda: src.read(1 << 20), b''):\n"
        "        h.update(block)\n        dst.write(block)\n    return h.hexdigest()\n"
        "def files_sha256(entries):\n    return hashlib.sha256(repr(entries).encode()).hexdigest()\n"
        "def member(z, name):\n    return hashlib.sha256(z.read(name)).hexdigest()\n"
    )
    assert file_hashing(source) == []


def test_the_entry_point_checks_see_a_main_block_and_a_spelled_module():
    assert main_blocks('import sys\nif __name__ == "__main__":\n    sys.exit(0)\n')
    assert not main_blocks('NAME = "__main__"\n')
    assert spelled_entry_points('argv = [python, "-P", "-m", "launcher.proc", "place"]\n')
    assert spelled_entry_points('argv = (python, "-m", "launcher")\n')
    assert spelled_entry_points('argv = [python, "-m", "venv", str(path)]\n') == []
    assert spelled_entry_points("argv = entrypoints.argv(python, entrypoints.PLACE)\n") == []
