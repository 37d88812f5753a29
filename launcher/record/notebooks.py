"""Jupyter notebooks as code: their cells, their parameters, their executed copy's meaning.

A notebook file holds code, prose and the results of its last execution together. Only
the code decides what a run computes, so the comparability key holds the **code cells'
sources** (``cells_key``): a changed markdown cell, cleared outputs, new execution
counts or metadata change the file but not the key. A changed code cell changes the
key under its own name (``code cell 3``, counting code cells from 1 as a fresh "Run
All" numbers them) with its first line, so a refusal says which cell.

Parameters follow papermill's convention: the values of ``train.params`` become a new
code cell tagged ``injected-parameters`` right after the cell tagged ``parameters``
(at the top when there is none), replacing an earlier injected cell.

The executed copy is an output of the run: ``output_parts`` digests it by meaning, cell
by cell: each code cell's source and its results (``execute_result``, ``display_data``,
errors), without execution counts, metadata, cell ids, and with memory addresses
(``<History at 0x7f…>``) blanked. Printed text (stdout/stderr streams) is left out: it is
the log of the run (Keras prints times per step there), kept in the file and in log.txt.

Pure: dictionaries in the nbformat 4 layout (plain JSON), no nbformat import.
"""

from __future__ import annotations

import hashlib
import json
import keyword
import re
from collections.abc import Mapping
from pathlib import Path

from launcher.errors import ConfigError

PARAMETERS = "parameters"  # papermill's tag of the cell whose values are defaults
INJECTED = "injected-parameters"  # papermill's tag of the cell it adds after it
EXTRA = "pip install 'tf-repro-launcher[notebook]'"  # the optional extra train=notebook needs
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def load(path: str | Path) -> dict:
    """The notebook at ``path`` as a dict, or ConfigError saying why it is not one."""
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"train.notebook {str(path)!r} is not a readable notebook: {exc}") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise ConfigError(f"train.notebook {str(path)!r} is not a Jupyter notebook (no cells list)")
    if int(nb.get("nbformat", 4)) < 4:
        raise ConfigError(
            f"train.notebook {str(path)!r} is nbformat {nb.get('nbformat')}; save it with "
            "Jupyter 4 or later (nbformat 4)"
        )
    return nb


def source(cell: Mapping) -> str:
    """A cell's source as one string (nbformat stores a string or a list of lines)."""
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else str(text)


def code_cells(nb: Mapping) -> list[tuple[int, dict]]:
    """(position in the notebook, cell) of every code cell, in order."""
    return [(i, c) for i, c in enumerate(nb.get("cells", [])) if c.get("cell_type") == "code"]


def cell_name(number: int) -> str:
    """``code cell N``: the N-th code cell, from 1 (what ``In [N]`` says after Run All)."""
    return f"code cell {number}"


def first_line(text: str) -> str:
    """The first non-blank line of a cell, shortened: how a person finds the cell."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "(empty)")
    return line if len(line) <= 60 else line[:57] + "..."


def cell_sources(nb: Mapping) -> dict[str, str]:
    """``{"code cell N": source}`` over the code cells the user wrote (an injected-parameters cell
    is the config's, not code), numbered as the key numbers them."""
    written = [source(cell) for _, cell in code_cells(nb) if INJECTED not in tags(cell)]
    return {cell_name(number): text for number, text in enumerate(written, 1)}


SHA256_MARK = "  [sha256 "  # what separates a key value's first line from its cell's hash


def cells_key(nb: Mapping) -> dict[str, str]:
    """``{"code cell N": "<first line>  [sha256 <12 hex>]"}`` (``cell_sources``): what the key compares."""
    return {
        name: f"{first_line(text)}{SHA256_MARK}{hashlib.sha256(text.encode()).hexdigest()[:12]}]"
        for name, text in cell_sources(nb).items()
    }


def key_parts(value: str) -> tuple[str, str | None]:
    """A ``cells_key`` value split into its first line and its hash (12 hex; None when it has none)."""
    line, sep, rest = value.rpartition(SHA256_MARK)
    if not sep or not rest.endswith("]"):
        return value, None
    return line, rest[:-1]


def tags(cell: Mapping) -> list[str]:
    return list((cell.get("metadata") or {}).get("tags") or [])


def render_parameters(params: Mapping[str, object]) -> str:
    """The injected cell's source: one ``name = value`` per parameter (Python literals), as
    papermill writes it; ConfigError for a name that is not a Python identifier."""
    lines = ["# Parameters (train.params, injected by launch)"]
    for name, value in params.items():
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise ConfigError(f"train.params: {name!r} is not a Python variable name")
        lines.append(f"{name} = {value!r}")
    return "\n".join(lines) + "\n"


def inject(nb: Mapping, params: Mapping[str, object]) -> tuple[dict, int | None]:
    """A copy of ``nb`` with ``params`` in a new cell after the ``parameters`` cell (papermill's
    convention; at the top when no cell is tagged), an earlier injected cell removed; and the
    injected cell's position (None without parameters)."""
    out = json.loads(json.dumps(nb))
    out["cells"] = [c for c in out["cells"] if INJECTED not in tags(c)]
    if not params:
        return out, None
    at = next((i + 1 for i, c in enumerate(out["cells"]) if PARAMETERS in tags(c)), 0)
    cell = {
        "cell_type": "code",
        "execution_count": None,
        "metadata": {"tags": [INJECTED]},
        "outputs": [],
        "source": render_parameters(params),
    }
    out["cells"].insert(at, cell)
    return out, at


def has_parameters_cell(nb: Mapping) -> bool:
    return any(PARAMETERS in tags(c) for c in nb.get("cells", []))


def output_parts(nb: Mapping) -> dict[str, str]:
    """``"code cell N"`` -> digest of its source and results, for an executed notebook
    (``launcher.record.outputs``): the same computation gives the same parts."""
    parts = {}
    for number, (_, cell) in enumerate(code_cells(nb), 1):
        results = [_meaning(o) for o in cell.get("outputs") or [] if o.get("output_type") != "stream"]
        text = json.dumps({"source": source(cell), "outputs": results}, sort_keys=True)
        parts[cell_name(number)] = hashlib.sha256(text.encode()).hexdigest()
    return parts


def _meaning(output: Mapping) -> dict:
    kind = output.get("output_type")
    if kind == "error":
        return {"error": output.get("ename"), "value": _ADDRESS.sub(" at 0x…", str(output.get("evalue")))}
    data = {}
    for mime, value in (output.get("data") or {}).items():
        text = "".join(value) if isinstance(value, list) else value
        data[mime] = _ADDRESS.sub(" at 0x…", text) if isinstance(text, str) else text
    return {"kind": kind, "data": data}
