"""The pictures of ``launch compare --plot`` and ``launch sweep plot``: their data (pure) and real PNGs."""

from __future__ import annotations

import json
import math
import struct
import sys
from pathlib import Path

import pytest

from launcher.cli import main as cli
from launcher.errors import ConfigError
from launcher.verdict import plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


LAYERS = (("conv1", "a"), ("conv2", "b"), ("dense", "c"))


def point(step: int, loss: float | None, weights: str = "w", layers=LAYERS, epoch=1):
    return {
        "step": step,
        "epoch": epoch,
        "loss": loss,
        "weights": f"{weights}{step}",
        "layers": [list(x) for x in layers],
    }


def split_traces() -> tuple[list[dict], list[dict]]:
    """Equal through step 10; at step 20 conv2 and dense differ (and, later, the loss)."""
    split = (("conv1", "a"), ("conv2", "X"), ("dense", "Y"))
    a = [point(0, None), point(10, 2.0), point(20, 1.5), point(30, 1.25)]
    b = [
        point(0, None),
        point(10, 2.0),
        point(20, 1.5, layers=split, weights="v"),
        point(30, 1.0, layers=split, weights="v"),
    ]
    return a, b


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


# ---------------------------------------------------------------- data
def test_comparison_marks_the_last_equal_and_first_differing_step_and_names_the_layer():
    a, b = split_traces()
    p = plots.comparison(a, b, "A run-a", "B run-b")
    assert (p.a.x, p.a.y) == ([10, 20, 30], [2.0, 1.5, 1.25])  # step 0 has no loss
    assert p.last_equal_step == 10 and p.first_split_step == 20
    assert p.split_note == "first differing layer: conv2"  # in model order, of conv2 and dense
    assert p.title == "first differing step 20 (epoch 1); first differing layer: conv2"
    assert (p.difference.x, p.difference.y) == ([30], [0.25])  # only where the losses differ
    assert p.equal_at == [0, 10] and p.differ_at == [20, 30]


def test_comparison_of_equal_and_of_unrelated_traces():
    a, _ = split_traces()
    same = plots.comparison(a, [dict(x) for x in a])
    assert same.title == "traces equal at all 4 common steps" and same.first_split_step is None
    assert same.difference.x == [] and same.differ_at == []
    apart = plots.comparison(a, [point(5, 1.0)])
    assert apart.title == "no traced step in common" and apart.last_equal_step is None
    nan = plots.comparison([point(10, math.nan)], [point(10, math.nan)])
    assert nan.difference.x == [] and nan.differ_at == []  # NaN equals NaN bitwise, as the verdict says


def test_spread_per_metric_over_jobs_and_epochs():
    jobs = [
        ("000 +seed=1", [{"epoch": 1, "loss": 2.0, "acc": 0.5}, {"epoch": 2, "loss": 1.0, "acc": 0.7}]),
        ("001 +seed=2", [{"epoch": 1, "loss": 4.0, "acc": 0.3}, {"epoch": 2, "loss": 3.0, "acc": 0.9}]),
        ("002 +seed=3", [{"epoch": 1, "loss": 3.0, "flag": True}]),
    ]
    acc, loss = plots.spread(jobs)
    assert acc.name == "acc" and [s.label for s in acc.jobs] == ["000 +seed=1", "001 +seed=2"]
    assert loss.epochs == [1] and loss.mean == [3.0]  # epoch 2: not every job has it
    assert loss.low == [2.0] and loss.high == [4.0]  # mean -+ the sample std (1.0)
    assert loss.final == {"000 +seed=1": 1.0, "001 +seed=2": 3.0, "002 +seed=3": 3.0}
    assert acc.mean == pytest.approx([0.4, 0.8])
    (single,) = plots.spread([("000", [{"epoch": 1, "loss": 2.0}])])
    assert single.low == single.high == [2.0]


# ---------------------------------------------------------------- drawing
def test_the_comparison_and_the_sweep_are_drawn_as_pngs(tmp_path):
    a, b = split_traces()
    plots.draw_comparison(plots.comparison(a, b), tmp_path / "split.png")
    plots.draw_comparison(plots.comparison(a, a), tmp_path / "same.png")
    jobs = [
        (f"00{i} +seed={i}", [{"epoch": e, "loss": 2.0 / e + i / 10, "acc": 0.5 + e / 10} for e in (1, 2, 3)])
        for i in range(3)
    ]
    plots.draw_spread(plots.spread(jobs), "sweep x", tmp_path / "sweep.png")
    for name in ("split.png", "same.png", "sweep.png"):
        width, height = png_size(tmp_path / name)
        assert 600 <= width <= 2000 and 300 <= height <= 2000
        assert 10_000 < (tmp_path / name).stat().st_size < 1_000_000


def test_nothing_to_plot_and_no_matplotlib_are_one_line_errors(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="nothing to plot"):
        plots.draw_spread([], "t", tmp_path / "x.png")
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # as if not installed
    with pytest.raises(ConfigError, match=r"plots need matplotlib: pip install 'tf-repro-launcher\[plot\]'"):
        plots.check_available()


def test_sweep_plot_command_line_errors(tmp_path, capsys):
    assert cli.main(["sweep", "plot", str(tmp_path)]) == 2
    assert "sweep plot needs a file" in capsys.readouterr().err
    assert cli.main(["sweep", "plot", str(tmp_path), str(tmp_path / "x.png")]) == 2
    assert "is not a sweep directory" in capsys.readouterr().err
    assert cli.main(["sweep", "replay", str(tmp_path), str(tmp_path / "x.png")]) == 2
    assert "extra argument" in capsys.readouterr().err


def test_sweep_plot_reads_the_jobs_metrics(tmp_path, capsys):
    sweep = tmp_path / "sweeps" / "s"
    (sweep / "jobs").mkdir(parents=True)
    (sweep / "sweep.json").write_text(json.dumps({"swept": ["+seed"]}))
    for num in range(2):
        run = tmp_path / f"run{num}"
        run.mkdir()
        (run / "metrics.jsonl").write_text("".join(json.dumps({"epoch": e, "loss": e + num}) + "\n" for e in (1, 2)))
        record = {"num": num, "overrides": [f"+seed={num}"], "status": "complete", "run_dir": str(run)}
        (sweep / "jobs" / f"{num:03d}.json").write_text(json.dumps(record))
    out = tmp_path / "sweep.png"
    assert cli.main(["sweep", "plot", str(sweep), str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"plot: {out}"
    assert png_size(out)[0] >= 500
