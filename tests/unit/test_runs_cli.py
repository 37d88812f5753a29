"""``launch runs --key/--task``: filters over the index, on sealed run directories (no training)."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from launcher.cli import main as cli
from launcher.record.probe import key
from tests import factories
from tests.unit.test_fingerprint import _fp


def _sealed(store: Path, task: str, fp: dict, seed: int, minute: int) -> Path:
    return factories.sealed_run(
        store,
        config=f"seed: {seed}\ntrain:\n  name: {task}\ndeterminism:\n  level: strict\n",
        fingerprint=fp,
        result={"weights_sha256": f"{seed:02d}" * 32, "final_metrics": {"loss": 0.5}},
        now=_dt.datetime(2026, 11, 23, 12, minute),
    )


def _listed(capsys, *argv: str) -> list[str]:
    assert cli.main(["runs", *argv]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("id ") and out[-1] == f"{len(out) - 2} run(s)"
    return [line.split()[0] for line in out[1:-1]]


def test_runs_filters_by_key_prefix_and_task(tmp_path, capsys):
    other = _fp()
    other["determinism"]["intra_op_threads"] = 2
    a1 = _sealed(tmp_path, "mnist", _fp(), 1, 1)
    a2 = _sealed(tmp_path, "mnist", _fp(), 2, 2)
    b = _sealed(tmp_path, "mnist", other, 3, 3)
    custom = _sealed(tmp_path, "custom", _fp(), 4, 4)
    key_a, key_b = key.key_sha256(_fp()), key.key_sha256(other)
    assert key_a[:12] != key_b[:12]
    store = str(tmp_path)
    assert _listed(capsys, "--store", store) == [custom.name, b.name, a2.name, a1.name]  # newest first
    assert _listed(capsys, "--store", store, "--key", key_a[:12]) == [custom.name, a2.name, a1.name]
    assert _listed(capsys, "--store", store, "--key", key_b[:8]) == [b.name]
    assert _listed(capsys, "--store", store, "--key", key_a) == [custom.name, a2.name, a1.name]  # a whole hash
    assert _listed(capsys, "--store", store, "--key", "zz") == []
    assert _listed(capsys, "--store", store, "--task", "custom") == [custom.name]
    assert _listed(capsys, "--store", store, "--task", "mnist", "--key", key_a[:12]) == [a2.name, a1.name]
    assert _listed(capsys, "--store", store, "--task", "script") == []


def test_runs_shows_each_runs_key_and_weights_prefix(tmp_path, capsys):
    run = _sealed(tmp_path, "mnist", _fp(), 7, 1)
    assert cli.main(["runs", "--store", str(tmp_path)]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith(run.name)]
    fields = line.split()
    assert fields[2:6] == ["mnist", "strict", "7", "complete"]  # id, time, task, level, seed, status, ...
    assert fields[6] == key.key_sha256(_fp())[:12] and fields[7] == "07" * 6


def test_runs_of_a_store_that_does_not_exist_is_one_line(tmp_path, capsys):
    assert cli.main(["runs", "--store", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err == f"launch: error: store {str(tmp_path / 'nope')!r} does not exist\n"
