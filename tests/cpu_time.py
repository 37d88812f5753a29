"""``--cpu-time=N``: the N tests that spent the most CPU, their launches and jobs included, and
the N that waited most (wall time less CPU time).

Under xdist, ``--durations`` gives wall times, which depend on what ran beside a test. What a
test costs the suite is the CPU it and every process it waited for used (``RUSAGE_SELF`` plus
``RUSAGE_CHILDREN`` around its setup, call and teardown). A session fixture's training counts
for the first test that asked for it. Each worker appends its tests to one file; the controller
sums them at the end, per test and per module. Registered by ``tests/conftest.py``.
"""

from __future__ import annotations

import json
import os
import resource
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

LOG_ENV = "LAUNCH_TEST_CPU_LOG"  # set by the controller before its workers start, so they inherit it


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--cpu-time",
        type=int,
        default=0,
        metavar="N",
        help="list the N tests that used the most CPU (with the processes they started)",
    )


def pytest_configure(config) -> None:
    if config.getoption("cpu_time") and not os.environ.get("PYTEST_XDIST_WORKER"):
        fd, path = tempfile.mkstemp(prefix="launch-test-cpu-", suffix=".jsonl")
        os.close(fd)
        os.environ[LOG_ENV] = path


def _cpu_s() -> float:
    own, waited = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + waited.ru_utime + waited.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    log = os.environ.get(LOG_ENV) if item.config.getoption("cpu_time") else None
    before, started = (_cpu_s(), time.monotonic()) if log else (0.0, 0.0)
    yield
    if log:
        row = {
            "test": item.nodeid,
            "cpu_s": round(_cpu_s() - before, 2),
            "wall_s": round(time.monotonic() - started, 2),
        }
        with open(log, "a") as out:  # one short line per write: appends from two workers do not interleave
            out.write(json.dumps(row) + "\n")


def pytest_terminal_summary(terminalreporter, config) -> None:
    count, log = config.getoption("cpu_time"), os.environ.get(LOG_ENV)
    if not count or not log or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    rows = [json.loads(line) for line in Path(log).read_text().splitlines()]
    Path(log).unlink()
    by_module = Counter()
    for row in rows:
        by_module[row["test"].split("::")[0]] += row["cpu_s"]
    write = terminalreporter.write_line
    terminalreporter.section(f"CPU time: {sum(by_module.values()):,.0f} s over {len(rows)} tests")
    for row in sorted(rows, key=lambda r: -r["cpu_s"])[:count]:
        write(f"{row['cpu_s']:8.1f} s  {row['test']}")
    write("by module:")
    for module, seconds in by_module.most_common(count):
        write(f"{seconds:8.1f} s  {module}")
    # A test whose wall time exceeds its CPU time waited: on a daemon (Docker, Slurm: their CPU is
    # not the test's), a sleep, a timeout, or a core busy with the other worker's test.
    waited = sorted(rows, key=lambda r: r["cpu_s"] - r.get("wall_s", 0.0))[:count]
    write(f"waited most (wall - CPU; all tests: {sum(r.get('wall_s', 0.0) - r['cpu_s'] for r in rows):,.0f} s):")
    for row in waited:
        write(f"{row.get('wall_s', 0.0) - row['cpu_s']:8.1f} s  {row['test']}")
