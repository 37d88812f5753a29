"""``train=notebook``: an ordinary Jupyter notebook, run unmodified under the bootstrap (real training).

``notebooks/train.ipynb`` loads the small MNIST subset, builds a Keras CNN and fits it for
2 epochs; its ``parameters`` cell holds the data path, the learning rate and the epochs.
The module's runs are made once (``runs``) and judged by several tests.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from launcher.sweep.multirun import hydra_quote
from tests.conftest import DATA, q, run_dir_of, run_launch

pytestmark = pytest.mark.slow

NOTEBOOK = Path(__file__).parent / "notebooks" / "train.ipynb"
NPZ = DATA / "mnist-small" / "mnist-small.npz"


def _launch_notebook(store: Path, notebook: Path, *overrides: str, params: str = ""):
    return run_launch(
        "train=notebook",
        f"train.notebook={q(notebook)}",
        "determinism=strict",
        f"train.params={{data: {q(NPZ)}{', ' + params if params else ''}}}",
        f"store.root={q(store)}",
        *overrides,
    )


def _run(store: Path, notebook: Path, params: str = "") -> Path:
    done = _launch_notebook(store, notebook, params=params)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return run_dir_of(done)


def _edit(notebook: Path, change) -> None:
    nb = json.loads(notebook.read_text())
    change(nb["cells"])
    notebook.write_text(json.dumps(nb, indent=1))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """A: the notebook; C: the same with another learning rate; B: the notebook after its
    markdown was edited and outputs and counts were filled in as Jupyter would; D: after a
    code cell changed. The notebook ends as D ran it."""
    root = tmp_path_factory.mktemp("notebook runs")
    store, notebook = root / "run store", root / "my notebook.ipynb"
    store.mkdir()
    shutil.copyfile(NOTEBOOK, notebook)
    out = {"store": store, "notebook": notebook, "A": _run(store, notebook)}
    out["C"] = _run(store, notebook, params="lr: 0.01")

    def prose_and_outputs(cells):
        cells[0]["source"] = "# A small CNN on MNIST, reworded\nNothing but prose changed."
        for n, cell in enumerate(c for c in cells if c["cell_type"] == "code"):
            cell["execution_count"] = n + 7
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "from an earlier session\n"}]
            cell["metadata"]["collapsed"] = True

    _edit(notebook, prose_and_outputs)
    out["B"] = _run(store, notebook)

    def code(cells):  # code cell 3 (the model): a narrower convolution
        cells[4]["source"] = (
            cells[4]["source"].replace("Conv2D(8, 3", "Conv2D(4, 3")
            if isinstance(cells[4]["source"], str)
            else [s.replace("Conv2D(8, 3", "Conv2D(4, 3") for s in cells[4]["source"]]
        )

    _edit(notebook, code)
    out["D"] = _run(store, notebook)
    return out


def _result(run: Path) -> dict:
    return json.loads((run / "result.json").read_text())


def test_a_notebook_twice_is_identical_and_prose_or_outputs_do_not_refuse(runs):
    a, b = runs["A"], runs["B"]
    ra = _result(a)
    assert ra["weights_sha256"] and ra["weights_sha256"] == _result(b)["weights_sha256"]
    assert ra["observed"]["fits"] == 1 and ra["observed"]["models"] == ["sequential"]
    metrics = [json.loads(line) for line in (a / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == [1, 2] and {"loss", "accuracy"} <= set(metrics[0])
    fp = json.loads((a / "fingerprint.json").read_text())
    assert list(fp["code"]["notebook_cells"]) == [f"code cell {n}" for n in (1, 2, 3, 4)]
    assert str(NPZ) in fp["data"] and not any(name.endswith(".ipynb") for name in fp["data"])  # code, not data
    executed = json.loads((a / "outputs" / "my notebook.ipynb").read_text())  # the executed copy, with outputs
    last = [c for c in executed["cells"] if c["cell_type"] == "code"][-1]
    assert last["execution_count"] == 5  # 4 cells and the injected parameters
    assert any(o["output_type"] == "execute_result" for o in last["outputs"])
    assert ra["outputs_content"]["my notebook.ipynb"]["kind"] == "notebook"
    done = run_launch("compare", a, b)
    assert done.returncode == 0, done.stdout
    assert done.stdout.startswith("IDENTICAL: weights, 2 epochs' metrics"), done.stdout
    assert "1 output file" in done.stdout.splitlines()[0]  # the executed notebooks, by meaning


def test_a_changed_code_cell_is_refused_by_name_and_shown_where_it_differs_with_its_sha256(runs):
    """Its first line did not change: the table shows the first line that did, from each run's kept
    notebook, cut around the difference on both sides, and each version's sha256 (issue 46)."""
    done = run_launch("compare", runs["A"], runs["D"])
    assert done.returncode == 3, done.stdout
    assert done.stdout.startswith("REFUSED"), done.stdout
    lines = done.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  code.notebook_cells.code cell 3  "))
    column = lines[1].index(runs["D"].name)
    first, second = lines[at], lines[at + 1]
    assert first[:column].rstrip().endswith("line 3: keras.layers.Conv2D(8, 3, activatio…"), done.stdout
    assert first[column:] == "line 3: keras.layers.Conv2D(4, 3, activatio…", done.stdout
    shas = [
        json.loads((runs[r] / "fingerprint.json").read_text())["code"]["notebook_cells"]["code cell 3"][-13:-1]
        for r in ("A", "D")
    ]
    assert shas[0] != shas[1] and second[:column].strip() == f"[sha256 {shas[0]}]", done.stdout
    assert second[column:] == f"[sha256 {shas[1]}]", done.stdout
    assert "code cell 2" not in done.stdout and "code cell 4" not in done.stdout


def test_another_learning_rate_is_refused(runs):
    executed = json.loads((runs["C"] / "outputs" / "my notebook.ipynb").read_text())
    injected = executed["cells"][2]  # papermill's place: right after the parameters cell
    assert injected["metadata"]["tags"] == ["injected-parameters"] and "lr = 0.01" in "".join(injected["source"])
    done = run_launch("compare", runs["A"], runs["C"])
    assert done.returncode == 3 and done.stdout.startswith("REFUSED"), done.stdout
    assert "config.train.params.lr" in done.stdout and "code.notebook_cells" not in done.stdout


def test_replay_after_the_notebook_was_edited_reproduces(runs):
    assert "Conv2D(4, 3" in runs["notebook"].read_text()  # edited since run A
    done = run_launch("replay", runs["A"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "REPRODUCED: " in done.stdout, done.stdout[-3000:]


def test_a_two_seed_sweep(tmp_path):
    store = tmp_path / "run store"
    done = run_launch(
        "-m",
        "train=notebook",
        f"train.notebook={NOTEBOOK}",
        "determinism=strict",
        f"train.params={{data: {hydra_quote(str(NPZ))}, epochs: 1}}",
        f"store.root={hydra_quote(str(store))}",
        "+seed=range(2)",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sweep,) = (store / "sweeps").iterdir()
    summary = json.loads((sweep / "summary.json").read_text())
    assert summary["ok"] and summary["counts"] == {"complete": 2} and summary["distinct_weights"] == 2
    for job in summary["jobs"]:
        assert (Path(job["run_dir"]) / "manifest.json").exists()  # sealed
    assert "2 of 2 jobs complete" in done.stdout


def test_a_failing_cell_fails_the_run_named_in_one_line(tmp_path):
    """(input() failing at once, and the executor's other endings: tests/unit/test_notebooks.py.)"""
    store = tmp_path / "run store"
    store.mkdir()
    notebook = tmp_path / "broken.ipynb"
    shutil.copyfile(NOTEBOOK, notebook)
    _edit(
        notebook,
        lambda cells: cells.__setitem__(
            2,
            {
                "cell_type": "code",
                "execution_count": None,
                "metadata": {},
                "outputs": [],
                "source": "print('before')\nratio = 1 / 0\n",
            },
        ),
    )
    done = _launch_notebook(store, notebook)
    assert done.returncode == 1, done.stdout[-2000:]
    last = done.stdout.strip().splitlines()[-1]
    assert " FAILED: code cell 2 raised ZeroDivisionError: division by zero (line 2: ratio = 1 / 0)" in last, last
    (run,) = [p for p in store.iterdir() if p.is_dir() and p.name not in ("sweeps", "audits")]
    assert json.loads((run / "status.json").read_text())["state"] == "failed"
    executed = json.loads((run / "outputs" / "broken.ipynb").read_text())  # kept up to the failing cell
    code = [c for c in executed["cells"] if c["cell_type"] == "code"]
    assert [o["output_type"] for o in code[2]["outputs"]] == ["stream", "error"]
    assert code[3]["execution_count"] is None and code[3]["outputs"] == []
