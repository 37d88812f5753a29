"""A notebook as code (launcher.record.notebooks): its key, its parameters, its executed copy's meaning."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from launcher.errors import CellError, ConfigError
from launcher.record import notebooks, outputs
from launcher.run import composition, config


def _nb() -> dict:
    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3"}},
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": "# Title"},
            {
                "cell_type": "code",
                "metadata": {"tags": ["parameters"]},
                "execution_count": 1,
                "outputs": [],
                "source": ["lr = 0.001\n", "epochs = 2"],
            },
            {
                "cell_type": "code",
                "metadata": {},
                "execution_count": 2,
                "outputs": [],
                "source": "\n\nmodel = build(lr)\n",
            },
        ],
    }


def test_the_key_holds_code_cells_by_number_and_first_line_only():
    key = notebooks.cells_key(_nb())
    assert list(key) == ["code cell 1", "code cell 2"]
    assert key["code cell 1"].startswith("lr = 0.001  [sha256 ") and key["code cell 2"].startswith("model = build(lr)")
    prose = _nb()
    prose["cells"][0]["source"] = "# Another title"
    prose["cells"][2].update(execution_count=9, outputs=[{"output_type": "stream", "name": "stdout", "text": "x"}])
    prose["cells"][2]["metadata"] = {"collapsed": True}
    prose["metadata"]["language_info"] = {"version": "3.11"}
    assert notebooks.cells_key(prose) == key  # prose, outputs, counts, metadata: not code
    code = _nb()
    code["cells"][2]["source"] = "model = build(lr * 2)\n"
    assert [k for k in key if notebooks.cells_key(code)[k] != key[k]] == ["code cell 2"]


def test_parameters_are_injected_after_the_tagged_cell_as_papermill_does():
    nb, at = notebooks.inject(_nb(), {"lr": 0.01, "name": "it's"})
    assert at == 2 and nb["cells"][2]["metadata"]["tags"] == ["injected-parameters"]
    assert 'lr = 0.01\nname = "it\'s"\n' in nb["cells"][2]["source"]
    again, at2 = notebooks.inject(nb, {"lr": 0.1})  # an earlier injected cell is replaced, not kept
    assert at2 == 2 and len(again["cells"]) == 4 and "lr = 0.1" in again["cells"][2]["source"]
    assert notebooks.cells_key(nb) == notebooks.cells_key(_nb())  # the injected values are the config's
    untagged = _nb()
    untagged["cells"][1]["metadata"] = {}
    assert notebooks.inject(untagged, {"lr": 0.01})[1] == 0  # no parameters cell: first
    assert notebooks.inject(_nb(), {})[1] is None
    with pytest.raises(ConfigError, match="'my-lr' is not a Python variable name"):
        notebooks.render_parameters({"my-lr": 1})


def test_an_executed_notebook_is_compared_by_meaning(tmp_path):
    def executed(count: int, address: str, printed: str) -> dict:
        nb = copy.deepcopy(_nb())
        nb["metadata"]["launch"] = {"started": count}
        nb["cells"][2].update(
            execution_count=count,
            outputs=[
                {"output_type": "stream", "name": "stdout", "text": printed},
                {
                    "output_type": "execute_result",
                    "execution_count": count,
                    "metadata": {},
                    "data": {"text/plain": f"<History at {address}>"},
                },
            ],
        )
        return nb

    a = notebooks.output_parts(executed(2, "0x7f00aa", "6/6 - 2s - 269ms/step"))
    b = notebooks.output_parts(executed(5, "0x7f11bb", "6/6 - 1s - 30ms/step"))
    assert a == b  # counts, metadata, addresses and printed times are not what was computed
    other = executed(2, "0x7f00aa", "")
    other["cells"][2]["outputs"][1]["data"]["text/plain"] = "0.25"
    assert [k for k in a if notebooks.output_parts(other)[k] != a[k]] == ["code cell 2"]
    (tmp_path / "nb.ipynb").write_text(json.dumps(executed(2, "0x1", "x")))
    (tmp_path / "other.ipynb").write_text(json.dumps(other))
    digests = outputs.digests(tmp_path)
    assert digests["nb.ipynb"]["kind"] == "notebook"
    assert outputs.differences({"x.ipynb": digests["nb.ipynb"]}, {"x.ipynb": digests["other.ipynb"]}) == [
        "outputs/x.ipynb (notebook: code cell 2)"
    ]


def test_what_is_not_a_notebook_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "nb.ipynb"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="is not a readable notebook"):
        notebooks.load(bad)
    bad.write_text(json.dumps({"worksheets": []}))
    with pytest.raises(ConfigError, match="is not a Jupyter notebook"):
        notebooks.load(bad)


NOTEBOOK = Path(__file__).parents[1] / "integration" / "notebooks" / "train.ipynb"


def test_train_params_are_in_the_config_and_its_hash():
    base = config.resolve(composition.compose(["train=notebook", f"train.notebook={NOTEBOOK}"]))
    lr = config.resolve(
        composition.compose(["train=notebook", f"train.notebook={NOTEBOOK}", "train.params={lr: 0.01}"])
    )
    assert base.train.params is None and lr.train.params.lr == 0.01
    assert base.train.notebook == str(NOTEBOOK.resolve())
    assert config.config_hash(base) != config.config_hash(lr)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["train=notebook"], "train=notebook needs train.notebook=path/to/NB.ipynb"),
        (["train=notebook", "train.notebook=/nonexistent.ipynb"], "is not a file"),
        (["train=notebook", f"train.notebook={NOTEBOOK}", "train.params=[1,2]"], "train.params must be a mapping"),
        (["train=notebook", f"train.notebook={NOTEBOOK}", "train.params={2lr: 1}"], "is not a Python variable name"),
    ],
)
def test_a_bad_notebook_config_is_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message):
        config.validate(composition.compose(overrides))


def test_without_the_extra_the_error_names_the_install_command(monkeypatch):
    """This environment has IPython; its absence is simulated where the check looks for it."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "IPython" else real(name, *a))
    with pytest.raises(ConfigError, match=r"needs IPython: pip install 'tf-repro-launcher\[notebook\]'"):
        config.validate(composition.compose(["train=notebook", f"train.notebook={NOTEBOOK}"]))


def _execute(tmp_path, monkeypatch, *sources: str, params: dict | None = None) -> tuple[dict, str | None]:
    """Run a notebook of ``sources`` with the real executor, in this process (no bootstrap):
    the executed copy, and the one-line error (None when it ran through)."""
    from launcher.job import notebook

    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setattr(sys, "path", list(sys.path))
    cells = [
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": s} for s in sources
    ]
    path, executed = tmp_path / "nb.ipynb", tmp_path / "out.ipynb"
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}))
    try:
        notebook.execute(str(path), params or {}, executed)
        error = None
    except CellError as exc:
        error = str(exc)
    return json.loads(executed.read_text()), error


def test_cells_run_as_in_jupyter_and_their_outputs_are_kept(tmp_path, monkeypatch):
    nb, error = _execute(
        tmp_path,
        monkeypatch,
        "x = 6 * 7\nprint('printed')\nx",
        "from IPython.display import HTML, display\ndisplay(HTML('<b>b</b>'))",
        "!echo from the shell\n%time y = x + 1",
        params={"x": 1},
    )
    assert error is None
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert "".join(code[0]["source"]).endswith("x = 1\n")  # the injected parameters, first: no cell is tagged
    assert [c["execution_count"] for c in code] == [1, 2, 3, 4]
    assert [o["output_type"] for o in code[1]["outputs"]] == ["stream", "execute_result"]
    assert "".join(code[1]["outputs"][1]["data"]["text/plain"]) == "42"
    assert "".join(code[2]["outputs"][0]["data"]["text/html"]) == "<b>b</b>"
    printed = "".join("".join(o.get("text", "")) for o in code[3]["outputs"])
    assert "from the shell" in printed and "Wall time" in printed


def test_a_failing_cell_is_named_with_its_line_and_the_copy_ends_there(tmp_path, monkeypatch):
    nb, error = _execute(tmp_path, monkeypatch, "a = 1", "%time b = 2\nc = 1 / 0\n", "d = 4")
    assert error == (
        "code cell 2 raised ZeroDivisionError: division by zero (line 2: c = 1 / 0); "
        "the executed notebook up to it is in outputs/out.ipynb"
    )
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code[1]["outputs"][-1]["output_type"] == "error" and code[2]["execution_count"] is None


def test_input_fails_at_once_and_sys_exit_0_ends_the_notebook(tmp_path, monkeypatch):
    _, error = _execute(tmp_path, monkeypatch, "name = input('your name? ')")
    assert error.startswith("code cell 1 raised StdinNotImplementedError: a notebook run by launch is headless")
    _, error = _execute(tmp_path, monkeypatch, "import sys\nsys.stdin.readline()")
    assert error.startswith("code cell 1 raised StdinNotImplementedError")
    nb, error = _execute(tmp_path, monkeypatch, "import sys\nsys.exit(0)", "never = 1")
    assert error is None and nb["cells"][1]["execution_count"] is None
