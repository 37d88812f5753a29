"""The step trace as stored, and the divergence locator: the loss and the weights' hashes every N steps.

Final weights say *that* two runs split; a trace says *where*. Every
``trace_every`` optimizer steps, at step 0 and at the end of every epoch, the job
appends one JSON line to ``trace.jsonl``: the step, the epoch, the training loss
as Keras reports it (the epoch's running mean, an exact float), the sha256 over
all weights (the same digest as ``weights_sha256``) and a short hash of each
layer's weights, in model order.

``first_divergence`` (pure) compares two traces at the steps both recorded and
names the first step at which they differ and, at that step, the first layer in
model order whose weights differ. Recording reads weights and never changes them,
so a trace cannot change a run's bits; it is therefore left out of the config hash.

The job records it (``launcher.job.training.trace``); verdicts and resume read it here.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from launcher.record import layout
from launcher.record.hashing import weights_digest

LAYER_DIGITS = 16  # 64 bits per layer: enough to tell "differs" with a 2**-64 false-equal chance


def point(step: int, epoch: int, loss: float | None, named_arrays: list) -> dict:
    """One trace line from ``(layer, weight path, array)`` triples in model order."""
    total, per_layer = weights_digest(named_arrays)
    return {
        "step": step,
        "epoch": epoch,
        "loss": loss,
        "weights": total,
        "layers": [[name, digest[:LAYER_DIGITS]] for name, digest in per_layer.items()],
    }


def read(run_dir: Path) -> list[dict]:
    """The run's trace points in the order written ([] when the run has no trace).

    A line that does not parse ends the trace: only the tail written after the last
    epoch's fsync can be torn (a crash), and resume drops that part anyway.
    """
    path = layout.RunPaths(run_dir).trace
    if not path.is_file():
        return []
    points = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            points.append(json.loads(line))
        except (ValueError, RecursionError):
            break
    return points


def count(run_dir: Path) -> int:
    """How many points the run's trace holds (its complete lines): what a checkpoint counts, read
    without parsing them, as it is read at every checkpoint."""
    path = layout.RunPaths(run_dir).trace
    if not path.is_file():
        return 0
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def keep_through(run_dir: Path, epoch: int, points: int | None = None) -> None:
    """Keep what was recorded by the checkpoint a resume continues from: its first ``points``
    points, or where the checkpoint did not count them, the points of epochs up to ``epoch``.

    The count is what holds: a script that catches the stop and ends normally records its
    last step, labelled with the epochs it had finished, after the last checkpoint; kept, it
    would number the retrained steps after it."""
    from launcher.record.store import runs

    path = layout.RunPaths(run_dir).trace
    if path.exists():
        recorded = read(run_dir)
        kept = recorded[:points] if points is not None else [p for p in recorded if (p.get("epoch") or 0) <= epoch]
        runs.write_bytes(path, "".join(_line(p) for p in kept).encode())


def _line(p: dict) -> str:
    return json.dumps(p, sort_keys=True) + "\n"


def append(run_dir: Path, p: dict, sync: bool = False) -> None:
    """Append one point to the run's trace (``sync``: make it durable now, as at an epoch's end)."""
    with open(layout.RunPaths(run_dir).trace, "a", encoding="utf-8") as f:
        f.write(_line(p))
        f.flush()
        if sync:
            os.fsync(f.fileno())


@dataclass
class Divergence:
    """Where two traces first differ, at the resolution both recorded."""

    common_steps: int  # how many steps both traces recorded
    step: int | None = None  # first common step that differs; None: equal at every common step
    epoch: int | None = None
    last_equal_step: int | None = None  # the split lies after this step and at or before ``step``
    layers: list[str] = field(default_factory=list)  # layers whose weights differ at ``step``, model order
    loss: tuple[float | None, float | None] | None = None  # both losses at ``step`` when they differ

    @property
    def split(self) -> bool:
        return self.step is not None

    @property
    def layer(self) -> str | None:
        """The first layer in model order whose weights differ at ``step``."""
        return self.layers[0] if self.layers else None


def first_divergence(a: list[dict], b: list[dict]) -> Divergence | None:
    """The first common step at which ``a`` and ``b`` differ; None when they share no step."""
    by_step = {p["step"]: p for p in b}
    common = [p for p in a if p["step"] in by_step]
    if not common:
        return None
    last_equal = None
    for pa in common:
        pb = by_step[pa["step"]]
        layers = _differing_layers(pa["layers"], pb["layers"])
        same_loss = repr(pa["loss"]) == repr(pb["loss"])  # bitwise: nan equals nan, -0.0 is not 0.0
        if layers or pa["weights"] != pb["weights"] or not same_loss:
            loss = None if same_loss else (pa["loss"], pb["loss"])
            return Divergence(len(common), pa["step"], pa["epoch"], last_equal, layers, loss)
        last_equal = pa["step"]
    return Divergence(len(common))


def _differing_layers(a: list, b: list) -> list[str]:
    """Layers whose hashes differ, in ``a``'s (model) order, then any only ``b`` has."""
    ha, hb = dict(map(tuple, a)), dict(map(tuple, b))
    names = [name for name, _ in a] + [name for name, _ in b if name not in ha]
    return [name for name in names if ha.get(name) != hb.get(name)]


def describe(d: Divergence | None) -> str:
    """One line for compare, replay and audit reports."""
    if d is None:
        return "no step trace in common (a run has no trace.jsonl, or they recorded no common step)"
    if not d.split:
        return f"step traces equal at all {d.common_steps} common steps"
    if d.step == 0:
        text = "first diverging step: 0, before any training (the initial weights differ: a seeding problem)"
    else:
        text = f"first diverging step: {d.step}" + (f" (epoch {d.epoch})" if d.epoch is not None else "")
        if d.last_equal_step is not None and d.step - d.last_equal_step > 1:
            text += f", equal at step {d.last_equal_step}: the bits split in steps {d.last_equal_step + 1}-{d.step}"
    if d.layers:
        text += f"; first differing layer in model order: {d.layer}"
        if len(d.layers) > 1:
            text += f" (also {', '.join(d.layers[1:])})"
    elif d.loss:
        text += "; weights equal there, the loss differs"
    if d.loss:
        text += f"; loss {d.loss[0]!r} vs {d.loss[1]!r}"
    return text
