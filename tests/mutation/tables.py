"""Table mutants: remove one entry of a module-level table of the verdict core, run its unit tests.

mutmut mutates code inside functions only, and the verdict core keeps much of what it decides in
tables: which fields are in the comparability key (``key.KEY``), which words mark a secret
(``environment.SECRET_WORDS``), which variables are recorded, denied or left out of the key, which
key fields ``--tolerance`` admits, the exit code of NOTHING COMPARED, the width of a trace's layer
hash. Each mutant here removes one entry (or changes one constant) in a fresh pytest process
(``-p tests.mutation.tables``, the mutant named in ``LAUNCH_TABLE_MUTANT``) and must make a unit
test fail. Run from the project root: ``python tests/mutation/tables.py [MODULE ...]`` (only the
tables of those modules, when named); exit 1 if one survives.

A mutant is judged by behaviour: the tests that compare a table with a literal copy of it
(``LITERAL``) are left out of its run, so an entry only counts as tested when dropping it changes
what the launcher does (a run whose field was dropped from the key is not refused, a secret is
recorded, a config that computes differently keeps its hash).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

TESTS = {  # the unit tests of each module's tables
    "launcher.record.probe.environment": [
        "tests/unit/test_environment.py",
        "tests/unit/test_fingerprint.py",
        "tests/unit/test_key_fields.py",
    ],
    "launcher.record.probe.key": ["tests/unit/test_key_fields.py", "tests/unit/test_fingerprint.py"],
    "launcher.verdict.compare": ["tests/unit/test_compare.py", "tests/unit/test_compare_report.py"],
    "launcher.record.trace": ["tests/unit/test_trace.py", "tests/unit/test_hashing.py"],
    "launcher.record.store.runs": ["tests/unit/test_runs.py"],
    "launcher.run.config": ["tests/unit/test_config_hash_keys.py", "tests/unit/test_config.py"],
    "launcher.record.probe.usage": ["tests/unit/test_usage.py", "tests/unit/test_fswatch.py"],
    "launcher.verdict.audit": ["tests/unit/test_audit.py"],
    "launcher.run.precheck": ["tests/unit/test_precheck.py", "tests/unit/test_rebuild.py"],
    "launcher.job.determinism": [
        "tests/unit/test_determinism.py",
        "tests/unit/test_portable.py",
        "tests/unit/test_config.py",
        "tests/unit/test_config_hash_keys.py",
    ],
    "launcher.job.observe.reads": [
        "tests/unit/test_reads.py",
        "tests/unit/test_fswatch.py",
        "tests/unit/test_usage.py",
    ],
    "launcher.record.probe.probes": ["tests/unit/test_fingerprint.py", "tests/unit/test_portable.py"],
    "launcher.verdict.replay": ["tests/unit/test_replay.py"],
}
# Tests that compare a table with a literal copy of it: they notice that a table changed, not what
# the change does, so table mutants are judged without them (each entry's behaviour has its own test).
LITERAL = (
    "tests/unit/test_environment.py::test_the_secret_words_are_exactly_these",
    "tests/unit/test_environment.py::test_every_deny_pattern_has_an_example",
    "tests/unit/test_environment.py::test_every_allow_pattern_has_an_example",
    "tests/unit/test_environment.py::test_the_names_out_of_the_key_are_exactly_these_each_with_a_reason",
    "tests/unit/test_key_fields.py::test_every_key_field_has_a_case_here",
    "tests/unit/test_config_hash_keys.py::test_the_not_result_changing_keys_are_exactly_the_train_keys_left_out_of_the_hash",
)
CONSTANTS = [  # (module, name, mutated value)
    ("launcher.verdict.compare", "NOTHING_COMPARED", 7),
    ("launcher.record.trace", "LAYER_DIGITS", 15),
    ("launcher.record.trace", "LAYER_DIGITS", 17),
    ("launcher.record.store.runs", "MANIFEST_SCHEMA", 2),
]
TABLES = [  # (module, name): every entry removed in turn
    ("launcher.record.probe.environment", "SECRET_WORDS"),
    ("launcher.record.probe.environment", "ENV_DENY"),
    ("launcher.record.probe.environment", "ENV_ALLOW"),
    ("launcher.record.probe.environment", "NOT_IN_KEY"),
    ("launcher.record.probe.key", "KEY"),
    ("launcher.verdict.compare", "MIGRATION_FIELDS"),
    # Judged by behaviour: a key dropped from the hash lets two configs that compute differently share
    # one hash (test_config_hash_keys); a directory dropped from these lets a system file or a tool's
    # cache be called data (test_usage); a knob dropped is never tried (test_audit).
    ("launcher.run.config", "NOT_IN_HASH"),
    ("launcher.record.probe.usage", "SYSTEM_DIRS"),
    ("launcher.record.probe.usage", "USER_DATA_IN_SYSTEM_DIRS"),
    ("launcher.record.probe.usage", "TOOL_CACHES"),
    ("launcher.record.probe.usage", "IGNORED_NAMES"),
    ("launcher.verdict.audit", "KNOBS"),
    # A key field the job measures, no longer taken from the stored run, refuses every rerun of a run
    # (test_precheck); a docker-only setting dropped from the list changes a docker run's hash.
    ("launcher.run.precheck", "MEASURED_IN_JOB"),
    ("launcher.run.config", "NOT_IN_HASH_DOCKER"),
    ("launcher.run.config", "TASKS"),
    ("launcher.run.config", "RUNTIMES"),
    ("launcher.run.config", "TRACKERS"),
    ("launcher.job.determinism", "LEVELS"),
    ("launcher.job.determinism", "RANDOM_OPS"),
    ("launcher.job.determinism", "ISA_BASELINES"),
    ("launcher.job.determinism", "_NPY_ABOVE_V3"),
    ("launcher.job.determinism", "_NPY_ABOVE_V3_PREFIXES"),
    ("launcher.record.probe.usage", "RUN_MARKERS"),
    ("launcher.record.probe.usage", "_INSTALL_MARKERS"),
    ("launcher.job.observe.reads", "_CODE"),
    ("launcher.job.observe.reads", "_SKIP"),
    ("launcher.job.observe.reads", "SHELLS"),
    ("launcher.record.probe.probes", "ISA_PATTERNS"),
    ("launcher.verdict.replay", "REBUILDABLE"),
    ("launcher.verdict.audit", "OPT_IN"),
]
# Removing an entry that another one covers changes nothing; each such pair is named here.
EQUIVALENT = {
    (
        "launcher.record.probe.environment",
        "ENV_DENY",
        "TF_TOKEN_*",
    ): "every TF_TOKEN_* name has the secret word TOKEN: SECRET_WORDS drops it before ENV_DENY is read",
}


def mutants(modules: list[str] | None = None) -> list[dict]:
    import importlib

    out = []
    for module, name in TABLES:
        if not modules or module in modules:
            for entry in getattr(importlib.import_module(module), name):
                out.append({"module": module, "name": name, "remove": entry})
    out += [{"module": m, "name": n, "value": v} for m, n, v in CONSTANTS if not modules or m in modules]
    return out


def label(m: dict) -> str:
    short = m["module"].rpartition(".")[2]
    return f"{short}.{m['name']} - {m['remove']!r}" if "remove" in m else f"{short}.{m['name']} = {m['value']!r}"


def run(m: dict) -> bool:
    """True when the mutant is killed (a unit test fails; for the control, when the tests fail)."""
    env = {**os.environ, "LAUNCH_TABLE_MUTANT": json.dumps(m), "PYTHONPATH": os.getcwd()}
    deselect = [arg for test in LITERAL for arg in ("--deselect", test)]
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-x",
        "-q",
        "-n",
        "0",
        "-p",
        "no:cacheprovider",
        "-p",
        "tests.mutation.tables",
        *deselect,
        *TESTS[m["module"]],
    ]
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


def main(modules: list[str]) -> int:
    sys.path.insert(0, os.getcwd())
    unknown = [m for m in modules if m not in TESTS]
    if unknown:
        print(f"no tables of {', '.join(unknown)}; modules: {', '.join(TESTS)}")
        return 2
    listed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            *sorted({test.partition("::")[0] for test in LITERAL}),
        ],
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    stale = [test for test in LITERAL if test not in listed]
    if stale:  # --deselect of a test that is gone deselects nothing: say so
        print(f"LITERAL names tests that do not exist: {', '.join(stale)}")
        return 2
    for module in modules or TESTS:  # the control: the plugin with nothing changed must pass, or every "kill" is noise
        if not run({"module": module, "name": None}):
            continue
        print(f"the unit tests of {module} fail without a mutant: fix them first")
        return 2
    todo = mutants(modules)
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
    sys.exit(main(sys.argv[1:]))
