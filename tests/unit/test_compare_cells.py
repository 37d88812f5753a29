"""What a REFUSED table shows where raw values would not tell two runs apart (issue 46): a changed
notebook cell where it differs, with its sha256 (not both columns cut before the difference), and
a key entry only one run has as "not read by this run" (not ``null``; ``--json`` keeps null, as
docs/json.md says). Sealed run directories, a real notebook kept in the store's objects."""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import stat
from pathlib import Path

from launcher.cli import jsonout
from launcher.record import notebooks
from launcher.record.store import objects
from launcher.verdict import compare
from tests import factories
from tests.unit.test_fingerprint import _fp

NOTEBOOK = Path(__file__).parent.parent / "integration" / "notebooks" / "train.ipynb"
CELL = "code.notebook_cells.code cell 3"


def _notebook_run(store: Path, name: str, notebook: Path) -> Path:
    fp = _fp()
    nb = json.loads(notebook.read_text())
    fp["code"]["notebook_cells"] = notebooks.cells_key(nb)
    fp["code"]["notebook_sha256"] = hashlib.sha256(notebook.read_bytes()).hexdigest()
    return factories.sealed_run(
        store,
        name,
        config="seed: 0\ntrain:\n  name: notebook\n",
        fingerprint=fp,
        result={"weights_sha256": "w", "outputs": {}},
        kept={notebook: "notebook"},
    )


def _two_notebook_runs(tmp_path: Path) -> tuple[Path, Path, dict]:
    """A: the tests' notebook; B: the same after line 3 of code cell 3 changed (its first line did not)."""
    store, project = tmp_path / "store", tmp_path / "project"
    project.mkdir()
    notebook = project / "train.ipynb"
    shutil.copyfile(NOTEBOOK, notebook)
    a = _notebook_run(store, "20261125-022046-9573fc", notebook)
    nb = json.loads(notebook.read_text())
    cell = next(c for c in nb["cells"] if "Conv2D(8, 3" in notebooks.source(c))
    cell["source"] = notebooks.source(cell).replace("Conv2D(8, 3", "Conv2D(4, 3")
    notebook.write_text(json.dumps(nb, indent=1))
    b = _notebook_run(store, "20261125-023129-05c3ae", notebook)
    return a, b, {r: json.loads((r / "fingerprint.json").read_text())["code"]["notebook_cells"] for r in (a, b)}


def _row(report: str, field: str) -> list[str]:
    """The lines of one field's row in a report's table: the field's line and those under it."""
    lines = report.splitlines()
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith(field))
    out = [lines[at]]
    for line in lines[at + 1 :]:
        if not line.startswith(" " * (2 + len(field) + 2)) or not line.strip():
            break
        out.append(line)
    return out


def _halves(line: str, b_name: str, header: str) -> tuple[str, str]:
    """A table line cut at the column of run B (found in the header)."""
    column = header.index(b_name)
    return line[:column].strip(), line[column:].strip()


def test_a_changed_notebook_cell_is_shown_where_it_differs_with_its_sha256(tmp_path):
    a, b, cells = _two_notebook_runs(tmp_path)
    first_a, sha_a = notebooks.key_parts(cells[a]["code cell 3"])
    first_b, sha_b = notebooks.key_parts(cells[b]["code cell 3"])
    assert first_a == first_b == "model = keras.Sequential([" and sha_a != sha_b  # the key tells only by hash
    c = compare.compare_runs(a, b)
    assert c.verdict == "REFUSED" and [d[0] for d in c.differences] == [CELL]
    report = compare.report(c, a, b)
    header = report.splitlines()[1]
    row = _row(report, CELL)
    assert len(row) == 2, report
    first = _halves(row[0].replace(CELL, " " * len(CELL), 1), b.name, header)
    assert first[0].startswith("line 3: keras.layers.Conv2D(8, 3") and first[1].startswith(
        "line 3: keras.layers.Conv2D(4, 3"
    ), report
    assert _halves(row[1], b.name, header) == (f"[sha256 {sha_a}]", f"[sha256 {sha_b}]"), report
    assert jsonout.differences(c.differences) == [
        {"field": CELL, "a": cells[a]["code cell 3"], "b": cells[b]["code cell 3"]}
    ]


def test_a_changed_cell_whose_notebook_the_store_lost_is_shown_by_its_key_with_its_sha256(tmp_path):
    a, b, cells = _two_notebook_runs(tmp_path)
    digest = json.loads((a / "fingerprint.json").read_text())["code"]["notebook_sha256"]
    kept = objects.object_path(a.parent, digest)
    kept.parent.chmod(kept.parent.stat().st_mode | stat.S_IWUSR)
    kept.unlink()  # gc'd, or a run copied without its store: the key is all there is
    c = compare.compare_runs(a, b)
    report = compare.report(c, a, b)
    header = report.splitlines()[1]
    row = _row(report, CELL)
    sha_a, sha_b = (notebooks.key_parts(cells[r]["code cell 3"])[1] for r in (a, b))
    assert "model = keras.Sequential([" in row[0] and "line 3" not in report
    assert _halves(row[1], b.name, header) == (f"[sha256 {sha_a}]", f"[sha256 {sha_b}]"), report


def test_a_changed_cell_is_shown_from_its_source_only_when_the_source_is_the_keyed_one():
    x = "model = Sequential([\n    Dense(8),\n])"
    y = "model = Sequential([\n    Dense(4),\n])"
    kx, ky = (f"model = Sequential([  [sha256 {hashlib.sha256(s.encode()).hexdigest()[:12]}]" for s in (x, y))
    assert compare.changed_cell(kx, ky, x, y)[0] == ("line 2: Dense(8),", f"[sha256 {kx[-13:-1]}]")
    assert compare.changed_cell(kx, ky, x, y)[1][0] == "line 2: Dense(4),"
    # a source that is not the cell the key hashed (another notebook under that hash): the key alone
    assert compare.changed_cell(kx, ky, y, x)[0][0] == "model = Sequential(["
    assert compare.changed_cell(kx, ky, x, x + "\nmore")[0][0] == "model = Sequential(["
    longer = y + "\nprint(model)"
    kl = f"model = Sequential([  [sha256 {hashlib.sha256(longer.encode()).hexdigest()[:12]}]"
    assert compare.changed_cell(ky, kl, y, longer)[0][0] == "line 4: (no such line)"
    assert compare.changed_cell(ky, kl, y, longer)[1][0] == "line 4: print(model)"


def test_long_texts_are_cut_around_their_first_difference_not_before_it():
    x = "/home/me/project/data/shards/2026-11-25/part-0000" + "1" + "-of-00008.npz"
    y = x.replace("part-00001", "part-00002")
    assert compare._short(x) == compare._short(y)  # what the table used to show: both the same
    wx, wy = compare.windows(x, y)
    assert wx != wy and "part-00001" in wx and "part-00002" in wy and len(wx) <= 44 and wx.startswith("…")
    table = "\n".join(compare.difference_table([("environment.DATA", x, y)], "A", "B"))
    assert "part-00001" in table and "part-00002" in table
    assert compare.windows("short", "shorter") == ("short", "shorter")


def test_a_key_entry_only_one_run_has_says_not_read_by_this_run_and_json_keeps_null(tmp_path):
    fa, fb = _fp(), copy.deepcopy(_fp())
    fb["data"] = {**fa.get("data", {}), "/data/extra.npz": "e" * 64}
    fb["software"]["distributions"]["matplotlib"] = {"version": "3.10.0", "files_sha256": "m"}
    fb["environment"]["OMP_NUM_THREADS"] = "4"
    del fb["environment_read"]["LR"]
    fa["software"]["distributions"]["gone"] = None  # recorded, as not installed: a value, not an absence
    fb["software"]["distributions"]["gone"] = {"version": "1.0", "files_sha256": "g"}
    a, b = (
        factories.sealed_run(tmp_path / "store", name, fingerprint=fp, result={"weights_sha256": "w", "outputs": {}})
        for name, fp in (("20261125-022046-9573fc", fa), ("20261125-023129-05c3ae", fb))
    )
    c = compare.compare_runs(a, b)
    report = compare.report(c, a, b)
    header = report.splitlines()[1]
    cells = {
        d[0]: _halves(_row(report, d[0])[0].replace(d[0], " " * len(d[0]), 1), b.name, header) for d in c.differences
    }
    assert cells["data./data/extra.npz"] == ("not read by this run", "e" * 43 + "…")
    assert cells["software.distributions.matplotlib"][0] == "not read by this run"
    assert cells["environment_read.LR"] == ("0.01", "not read by this run")
    assert cells["software.distributions.gone"][0] == "null"
    assert cells["environment.OMP_NUM_THREADS"] == ("not set in this run", "4")
    assert report.count("null") == 1, report
    as_json = {d["field"]: (d["a"], d["b"]) for d in jsonout.differences(c.differences)}
    assert as_json["data./data/extra.npz"] == (None, "e" * 64) and as_json["environment_read.LR"] == ("0.01", None)


def test_a_replay_refused_for_a_distribution_not_installed_here_says_so(capsys):
    from launcher.cli import rerun
    from launcher.errors import NotComparable

    used = {"version": "3.10.0", "files_sha256": "m" * 64}
    diffs = [("software.distributions.matplotlib", used, None), ("software.keras", "3.15.1", None)]
    assert rerun.refused(NotComparable("cannot replay 20261125-022046-9573fc here", diffs)) == 3
    table = capsys.readouterr().out.splitlines()[2:]
    assert [line.split("  ")[-1] for line in table] == ["not installed here"] * 2, table
    assert "null" not in "\n".join(table)
