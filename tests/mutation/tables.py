"""Table mutants: remove one entry of a module-level table of the verdict core, run its unit tests.

mutmut mutates code inside functions only, and the verdict core keeps much of what it decides in
tables: which fields are in the comparability key (``key.KEY``), which words mark a secret
(``environment.SECRET_WORDS``), which variables are recorded, denied or left out of the key, which
key fields ``--tolerance`` admits, the exit code of NOTHING COMPARED, the width of a trace's layer
hash. Each mutant here removes one entry (or changes one constant) in a fresh pytest process
(``-p tests.mutation.tables``, the mutant named in ``LAUNCH_TABLE_MUTANT``) and must make a unit
test fail. Run from the project root: ``python tests/mutation/tables.py``; exit 1 if one survives.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

TESTS = {  # the unit tests of each module's tables
    "launcher.record.environment": ["tests/unit/test_environment.py", "tests/unit/test_fingerprint.py",
                                    "tests/unit/test_key_fields.py"],
    "launcher.record.key": ["tests/unit/test_key_fields.py", "tests/unit/test_fingerprint.py"],
    "launcher.verdict.compare": ["tests/unit/test_compare.py", "tests/unit/test_compare_report.py"],
    "launcher.run.trace": ["tests/unit/test_trace.py", "tests/unit/test_hashing.py"],
    "launcher.record.runs": ["tests/unit/test_runs.py"],
    "launcher.run.config": ["tests/unit/test_config_hash_keys.py", "tests/unit/test_config.py"],
    "launcher.record.usage": ["tests/unit/test_usage.py", "tests/unit/test_fswatch.py"],
    "launcher.verdict.audit": ["tests/unit/test_audit.py"],
}  # fmt: skip
CONSTANTS = [  # (module, name, mutated value)
    ("launcher.verdict.compare", "NOTHING_COMPARED", 7),
    ("launcher.run.trace", "LAYER_DIGITS", 15),
    ("launcher.run.trace", "LAYER_DIGITS", 17),
    ("launcher.record.runs", "MANIFEST_SCHEMA", 2),
]
TABLES = [  # (module, name): every entry removed in turn
    ("launcher.record.environment", "SECRET_WORDS"),
    ("launcher.record.environment", "ENV_DENY"),
    ("launcher.record.environment", "ENV_ALLOW"),
    ("launcher.record.environment", "NOT_IN_KEY"),
    ("launcher.record.key", "KEY"),
    ("launcher.verdict.compare", "MIGRATION_FIELDS"),
    # Judged by behaviour: a key dropped from the hash lets two configs that compute differently share
    # one hash (test_config_hash_keys); a directory dropped from these lets a system file or a tool's
    # cache be called data (test_usage); a knob dropped is never tried (test_audit).
    ("launcher.run.config", "NOT_IN_HASH"),
    ("launcher.record.usage", "SYSTEM_DIRS"),
    ("launcher.record.usage", "USER_DATA_IN_SYSTEM_DIRS"),
    ("launcher.record.usage", "TOOL_CACHES"),
    ("launcher.record.usage", "IGNORED_NAMES"),
    ("launcher.verdict.audit", "KNOBS"),
]
# Removing an entry that another one covers changes nothing; each such pair is named here.
EQUIVALENT = {
    ("launcher.record.environment", "ENV_DENY", "TF_TOKEN_*"):
        "every TF_TOKEN_* name has the secret word TOKEN: SECRET_WORDS drops it before ENV_DENY is read",
}  # fmt: skip


def mutants() -> list[dict]:
    import importlib

    out = []
    for module, name in TABLES:
        for entry in getattr(importlib.import_module(module), name):
            out.append({"module": module, "name": name, "remove": entry})
    out += [{"module": m, "name": n, "value": v} for m, n, v in CONSTANTS]
    return out


def label(m: dict) -> str:
    short = m["module"].rpartition(".")[2]
    return f"{short}.{m['name']} - {m['remove']!r}" if "remove" in m else f"{short}.{m['name']} = {m['value']!r}"


def run(m: dict) -> bool:
    """True when the mutant is killed (a unit test fails; for the control, when the tests fail)."""
    env = {**os.environ, "LAUNCH_TABLE_MUTANT": json.dumps(m), "PYTHONPATH": os.getcwd()}
    argv = [sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider",
            "-p", "tests.mutation.tables", *TESTS[m["module"]]]  # fmt: skip
    return subprocess.run(argv, env=env, capture_output=True).returncode != 0


def pytest_configure(config) -> None:
    """Apply the mutant named in LAUNCH_TABLE_MUTANT before any test runs (a pytest plugin hook)."""
    import importlib

    m = json.loads(os.environ["LAUNCH_TABLE_MUTANT"])
    if m["name"] is None:
        return  # the control run
    module = importlib.import_module(m["module"])
    table = getattr(module, m["name"])
    if "value" in m:
        setattr(module, m["name"], m["value"])
    elif isinstance(table, dict):
        del table[m["remove"]]  # in place: every holder of the dict sees it
    else:
        setattr(module, m["name"], tuple(e for e in table if e != m["remove"]))


def main() -> int:
    sys.path.insert(0, os.getcwd())
    for module in TESTS:  # the control: the plugin with nothing changed must pass, or every "kill" is noise
        if not run({"module": module, "name": None}):
            continue
        print(f"the unit tests of {module} fail without a mutant: fix them first")
        return 2
    todo = mutants()
    with ThreadPoolExecutor(max_workers=max(1, len(os.sched_getaffinity(0)))) as pool:
        killed = list(pool.map(run, todo))
    counts: dict[str, list[int]] = {}
    survivors = []
    for m, k in zip(todo, killed, strict=True):
        key = (m["module"], m["name"], m.get("remove"))
        c = counts.setdefault(f"{m['module'].rpartition('.')[2]}.{m['name']}", [0, 0, 0])
        c[0] += 1
        if k:
            c[1] += 1
        elif key in EQUIVALENT:
            c[2] += 1
        else:
            survivors.append(m)
    print(f"\n{'table mutants':<28} {'mutants':>7} {'killed':>7} {'equiv.':>7} {'survived':>8}")
    for name, (n, k, e) in counts.items():
        print(f"{name:<28} {n:>7} {k:>7} {e:>7} {n - k - e:>8}")
    total = [sum(c[i] for c in counts.values()) for i in range(3)]
    print(f"{'all':<28} {total[0]:>7} {total[1]:>7} {total[2]:>7} {total[0] - total[1] - total[2]:>8}")
    for m, k in zip(todo, killed, strict=True):
        why = EQUIVALENT.get((m["module"], m["name"], m.get("remove")))
        if why and not k:
            print(f"  equivalent: {label(m)}: {why}")
    for m in survivors:
        print(f"  SURVIVED: {label(m)}")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
