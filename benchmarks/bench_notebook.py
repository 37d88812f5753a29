"""The cost of running a notebook (``train=notebook``) against the same code as a script.

The tests' notebook (``tests/integration/notebooks/train.ipynb``: load the small MNIST
subset, a Keras CNN, ``fit`` over 2 epochs) is run with ``train=notebook``, and its code
cells, joined in order with the same parameters, with ``train=script``. Interleaved, N
times each, strict determinism, in one store.

Printed: the median whole-launch wall time and the median job time (``timings.job_s``:
the job process from its bootstrap to its result) of each, the notebook's extra seconds
and ratio, the median start of the notebook's IPython shell (``timings.notebook_start_s``),
and whether the notebook and the script gave the same weights (the same code under the same
bootstrap must). Goal: the notebook's extra job time under 2 s.

    python benchmarks/bench_notebook.py [N]
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

from common import REPO, launch

N = int(sys.argv[1]) if len(sys.argv) > 1 else 3
NOTEBOOK = REPO / "tests" / "integration" / "notebooks" / "train.ipynb"
NPZ = REPO / "tests" / "data" / "mnist-small" / "mnist-small.npz"


def as_script(notebook: Path, params: dict) -> str:
    """The notebook's code cells as one script, the parameters set after the parameters cell."""
    cells = json.loads(notebook.read_text())["cells"]
    parts = []
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        parts.append("".join(cell["source"]))
        if "parameters" in cell["metadata"].get("tags", []):
            parts.append("\n".join(f"{k} = {v!r}" for k, v in params.items()))
    return "\n\n".join(parts) + "\n"


def main() -> None:
    params = {"data": str(NPZ)}
    walls: dict[str, list[float]] = {"notebook": [], "script": []}
    jobs: dict[str, list[float]] = {"notebook": [], "script": []}
    starts: list[float] = []
    weights: dict[str, set[str]] = {"notebook": set(), "script": set()}
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "train.py"
        script.write_text(as_script(NOTEBOOK, params))
        store = Path(tmp) / "runs"
        how = {
            "notebook": ("train=notebook", f"train.notebook={NOTEBOOK}", f"train.params={{data: '{NPZ}'}}"),
            "script": ("train=script", f"train.script={script}"),
        }
        for _ in range(N):  # interleaved, so drift on a noisy machine hits both alike
            for mode, overrides in how.items():
                wall, result = launch(store, *overrides, "determinism=strict")
                walls[mode].append(wall)
                jobs[mode].append(result["timings"]["job_s"])
                weights[mode].add(result["weights_sha256"])
                if mode == "notebook":
                    starts.append(result["timings"]["notebook_start_s"])
    print(f"notebook benchmark: the tests' notebook (2 epochs, 600 images) vs its cells as a script, {N} runs each")
    for mode in walls:
        print(
            f"  {mode:<9} median launch {statistics.median(walls[mode]):.2f} s   "
            f"median job {statistics.median(jobs[mode]):.2f} s"
        )
    extra = statistics.median(jobs["notebook"]) - statistics.median(jobs["script"])
    ratio = statistics.median(walls["notebook"]) / statistics.median(walls["script"])
    print(
        f"notebook / script launch time: {ratio:.3f}; the notebook's extra job time {extra:+.2f} s "
        f"(goal < 2 s): {'OK' if extra < 2 else 'OVER'}"
    )
    print(f"  of which the IPython shell's start: median {statistics.median(starts):.2f} s")
    same = weights["notebook"] == weights["script"] and len(weights["notebook"]) == 1
    print(f"same weights as notebook and as script, every run: {'yes' if same else 'NO'}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
