"""Summarize a ``mutmut run`` of the verdict core: the score per module and every survivor.

Run from the project root after ``mutmut run`` (``nox -s mutation`` does both). A survivor is
listed with its reason when ``equivalent.py`` has one. mutmut switches mutants on inside the
functions it mutated, at call time; code that runs once at import (the comparability key's
``_since_schema_2`` builds its getters when ``KEY`` is defined) never sees the switch, so every
other survivor is checked once more by writing the mutant into a copy of the tree and running the
unit tests there ("killed when applied"). Exit 1 when a mutant survives both without a reason.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, os.getcwd())

from tests.mutation.equivalent import EQUIVALENT  # noqa: E402
from tests.mutation.scope import DESELECT, SCOPE, UNIT_TESTS  # noqa: E402


def _status(code: int | None) -> str:
    from mutmut.stats import status_by_exit_code

    return status_by_exit_code[code]


def _in_scope(name: str) -> bool:
    function = name.rsplit("__mutmut_", 1)[0]
    module, _, func = function.rpartition(".")
    return any(fnmatch.fnmatch(func, pattern) for pattern in SCOPE.get(module, ()))


def mutants() -> dict[str, tuple[str, str]]:
    """Every mutant in scope: name -> (status, source path)."""
    out = {}
    for meta in sorted(Path("mutants").rglob("*.py.meta")):
        source = meta.relative_to("mutants").as_posix().removesuffix(".meta")
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            if _in_scope(name):
                out[name] = (_status(code), source)
    return out


def mutated_lines(name: str, source: str) -> list[str]:
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    diff = get_diff_for_mutant(name, path=source)
    return [line for line in diff.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def killed_when_applied(names: list[str]) -> set[str]:
    """The mutants whose unit tests fail when the mutant is written into a copy of the tree."""
    from mutmut.__main__ import apply_mutant

    killed: set[str] = set()
    if not names:
        return killed
    home = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="mutation-") as tmp:
        os.chmod(tmp, 0o755)  # a launch directory a job container's user can enter, as the tests' own are
        for item in ("launcher", "tests", "benchmarks", "images", "lockfiles", "pyproject.toml", "mutants"):
            src = Path(home) / item
            (shutil.copytree if src.is_dir() else shutil.copy)(src, Path(tmp) / item)
        os.chdir(tmp)
        deselect = [arg for test in DESELECT for arg in ("--deselect", test)]
        base = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *deselect]
        argv = [*base, "tests/unit"]
        try:
            control = subprocess.run(argv, capture_output=True, text=True)
            if control.returncode != 0:  # without a mutant they must pass, or a failure proves nothing
                raise SystemExit("unit tests fail in a copy of the tree without a mutant:\n" + control.stdout[-3000:])
            for name in names:
                source = mutants_source(name)
                original = Path(source).read_text()
                apply_mutant(name)
                own = [f"tests/unit/{f}" for f in UNIT_TESTS.get(source.removesuffix(".py").replace("/", "."), ())]
                # The module's own test files first (quick), then the whole of tests/unit.
                for selection in ([*base, "-n", "0", *own], argv) if own else (argv,):
                    if subprocess.run(selection, capture_output=True).returncode != 0:
                        killed.add(name)
                        break
                Path(source).write_text(original)
        finally:
            os.chdir(home)
    return killed


def mutants_source(name: str) -> str:
    module = name.rsplit("__mutmut_", 1)[0].rpartition(".")[0]
    return module.replace(".", "/") + ".py"


def main() -> int:
    found = mutants()
    if not found:
        print("no mutants in scope: run `mutmut run` first (nox -s mutation)")
        return 1
    # A run stopped before the end leaves mutants unchecked: they are not judged, only counted.
    not_run = Counter(
        name.rsplit("__mutmut_", 1)[0].rpartition(".")[0]
        for name, (status, _) in found.items()
        if status == "not checked"
    )
    found = {name: found[name] for name in found if found[name][0] != "not checked"}
    reasons: dict[str, str] = {}
    for name, (status, source) in found.items():
        if status == "survived":
            function = name.rsplit("__mutmut_", 1)[0]
            plus = [line[1:].strip() for line in mutated_lines(name, source) if line.startswith("+")]
            for line in plus:
                if (function, line) in EQUIVALENT:
                    reasons[name] = EQUIVALENT[(function, line)]
    pending = [n for n, (status, _) in found.items() if status in ("survived", "no tests") and n not in reasons]
    applied = killed_when_applied(pending)
    rows: dict[str, Counter] = {}
    unexplained = []
    for name, (status, _) in sorted(found.items()):
        module = name.rsplit("__mutmut_", 1)[0].rpartition(".")[0]
        if name in reasons:
            status = "equivalent"
        elif name in applied:
            status = "killed when applied"
        elif status in ("survived", "no tests", "suspicious", "skipped", "not checked"):
            unexplained.append((name, status))
            status = "survived"
        elif status == "timeout":
            status = "killed"  # an endless loop is a failing test (mutmut counts it so)
        rows.setdefault(module, Counter())[status] += 1
    print(f"{'module':<28} {'mutants':>7} {'killed':>7} {'applied':>7} {'equiv.':>7} {'survived':>8} {'score':>7}")
    total = Counter()
    for module, c in rows.items():
        total.update(c)
        print(_row(module, c))
    print(_row("all", total))
    if reasons:
        print("\nequivalent mutants (alive, and no test can tell them apart):")
        for name in sorted(reasons):
            lines = mutated_lines(name, found[name][1])
            print(f"  {name}: {reasons[name]}\n      " + "\n      ".join(lines))
    if applied:
        print("\nkilled when applied (the mutated code runs at import, where mutmut cannot switch it on):")
        for name in sorted(applied):
            print(f"  {name}: " + " | ".join(line for line in mutated_lines(name, found[name][1]) if line[0] == "+"))
    if not_run:
        print("\nNOT RUN (mutmut stopped before them): " + ", ".join(f"{m} {n}" for m, n in sorted(not_run.items())))
    if unexplained:
        print("\nSURVIVED without a reason: write the test that kills each, or record why it is equivalent:")
        for name, status in unexplained:
            print(f"  {name} ({status})\n      " + "\n      ".join(mutated_lines(name, found[name][1])))
        return 1
    return 1 if not_run else 0


def _row(module: str, c: Counter) -> str:
    n = sum(c.values())
    killed = c["killed"] + c["killed when applied"]
    judged = n - c["equivalent"]
    score = f"{100 * killed / judged:.1f}%" if judged else "-"
    return (
        f"{module:<28} {n:>7} {c['killed']:>7} {c['killed when applied']:>7} {c['equivalent']:>7} "
        f"{c['survived']:>8} {score:>7}"
    )


if __name__ == "__main__":
    sys.exit(main())
