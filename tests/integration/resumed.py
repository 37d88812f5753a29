"""What the resume tests share: a launch directory with its data, the launch's environment, the one
run of a store, and what a resumed run must equal bit for bit in an uninterrupted one."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from tests.conftest import DATA, REPO, is_run

NPZ = DATA / "mnist-small" / "mnist-small.npz"


def env() -> dict:
    """The environment of a launch started by hand (Popen): this tree's launcher first."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def work_dir(parent: Path, name: str) -> Path:
    """A launch directory with its own copy of the data (the scripts read data.npz, relatively)."""
    work = parent / name
    work.mkdir()
    shutil.copy(NPZ, work / "data.npz")
    return work


def run_of(store: Path) -> Path:
    """The one run of ``store``."""
    (run,) = [p for p in store.iterdir() if is_run(p)]
    return run


def record(run: Path, work: Path) -> dict:
    """What must be bitwise equal: weights, layers, outputs by meaning, every epoch's metrics, the
    trace, the final metrics, and the history the script wrote into its launch directory."""
    result = json.loads((run / "result.json").read_text())
    return {"weights": result["weights_sha256"], "layers": result["layer_sha256"],
            "outputs": result["outputs_content"], "metrics": (run / "metrics.jsonl").read_text(),
            "trace": (run / "trace.jsonl").read_text(), "final": result["final_metrics"],
            "history": (work / "outputs" / "history.json").read_text()}  # fmt: skip
