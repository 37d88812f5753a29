"""Pictures of judgments: where two runs split (``launch compare --plot``), a sweep's spread (``launch sweep plot``).

The data of each picture is prepared by pure functions (``comparison``, ``spread``),
tested without drawing; ``draw_comparison`` and ``draw_spread`` only draw it, with
matplotlib (the optional extra ``[plot]``) on its Agg canvas: headless, no pyplot state.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from launcher.errors import ConfigError
from launcher.record import layout, trace

INSTALL = "pip install 'tf-repro-launcher[plot]'"


@dataclass
class Series:
    """One line: a label and its (x, y) points."""

    label: str
    x: list[int] = field(default_factory=list)
    y: list[float] = field(default_factory=list)


@dataclass
class ComparisonPlot:
    """Both runs' traced loss by step, their difference, and where they split."""

    title: str
    a: Series
    b: Series
    difference: Series  # |loss A - loss B| at the common steps where both losses are known and differ
    equal_at: list[int]  # common steps where the weights' hash and the loss are bitwise equal
    differ_at: list[int]  # common steps where the weights or the loss differ
    last_equal_step: int | None  # the last common step where everything traced was equal
    first_split_step: int | None  # the first common step where something differs
    split_note: str  # what differs at the split: the first differing layer, or the loss only


@dataclass
class MetricSpread:
    """One metric over the epochs of every job of a sweep, and its spread across the jobs."""

    name: str
    jobs: list[Series]
    epochs: list[int]  # the epochs every job recorded
    mean: list[float]
    low: list[float]  # mean - sample std (= mean with a single job)
    high: list[float]
    final: dict[str, float] = field(default_factory=dict)  # label -> the job's last value


# ---------------------------------------------------------------- pure data
def loss_series(label: str, points: list[dict]) -> Series:
    """The traced loss of a run by step (points without a loss, such as step 0, are skipped)."""
    s = Series(label)
    for p in points:
        loss = p.get("loss")
        if isinstance(loss, (int, float)) and not isinstance(loss, bool):
            s.x.append(int(p["step"]))
            s.y.append(float(loss))
    return s


def comparison(a: list[dict], b: list[dict], label_a: str = "A", label_b: str = "B") -> ComparisonPlot:
    """What ``launch compare --plot`` draws, from two runs' trace points (``trace.read``)."""
    sa, sb = loss_series(label_a, a), loss_series(label_b, b)
    d = trace.first_divergence(a, b)
    loss_b = dict(zip(sb.x, sb.y, strict=True))
    diff = Series("|loss A - loss B|")
    for step, value in zip(sa.x, sa.y, strict=True):
        if step in loss_b and value != loss_b[step] and not (math.isnan(value) and math.isnan(loss_b[step])):
            diff.x.append(step)
            diff.y.append(abs(value - loss_b[step]))
    by_step = {p["step"]: p for p in b}
    equal_at, differ_at = [], []
    for p in a:
        q = by_step.get(p["step"])
        if q is not None:
            same = p["weights"] == q["weights"] and repr(p["loss"]) == repr(q["loss"])
            (equal_at if same else differ_at).append(p["step"])
    if d is None:
        title, note = "no traced step in common", ""
    elif not d.split:
        title, note = f"traces equal at all {d.common_steps} common steps", ""
    else:
        where = f"first differing step {d.step}" + (f" (epoch {d.epoch})" if d.epoch is not None else "")
        if d.layer:
            note = f"first differing layer: {d.layer}"
        elif d.loss:
            note = "weights equal there, the loss differs"
        else:
            note = "the weights differ"
        title = f"{where}; {note}"
    return ComparisonPlot(
        title=title,
        a=sa,
        b=sb,
        difference=diff,
        equal_at=equal_at,
        differ_at=differ_at,
        last_equal_step=d.last_equal_step if d else None,
        first_split_step=d.step if d and d.split else None,
        split_note=note,
    )


def spread(jobs: list[tuple[str, list[dict]]]) -> list[MetricSpread]:
    """Each metric's per-epoch values in every job (``(label, metrics.jsonl lines)``) and their spread."""
    names = sorted({k for _, lines in jobs for line in lines for k, v in line.items() if k != "epoch" and _number(v)})
    out = []
    for name in names:
        series = []
        for label, lines in jobs:
            s = Series(label)
            for line in lines:
                if isinstance(line.get("epoch"), int) and _number(line.get(name)):
                    s.x.append(line["epoch"])
                    s.y.append(float(line[name]))
            if s.x:
                series.append(s)
        common = sorted(set.intersection(*(set(s.x) for s in series))) if series else []
        mean, low, high = [], [], []
        for epoch in common:
            values = [s.y[s.x.index(epoch)] for s in series]
            m = statistics.fmean(values)
            sd = statistics.stdev(values) if len(values) > 1 else 0.0
            mean.append(m)
            low.append(m - sd)
            high.append(m + sd)
        final = {s.label: s.y[-1] for s in series}
        out.append(MetricSpread(name, series, common, mean, low, high, final))
    return out


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def read_metrics(run_dir: Path) -> list[dict]:
    """A run's metrics.jsonl lines ([] when it has none)."""
    path = layout.RunPaths(run_dir).metrics
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            break
    return out


# ---------------------------------------------------------------- drawing
def _figure(rows: int, cols: int, width: float, height: float):
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError(f"plots need matplotlib: {INSTALL}") from None
    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    return fig, fig.subplots(rows, cols, squeeze=False)


def check_available() -> None:
    """Raise ``ConfigError`` now, before any work, when matplotlib is missing."""
    _figure(1, 1, 1, 1)


def draw_comparison(plot: ComparisonPlot, path: Path) -> None:
    """Two panels over the optimizer step: both traced losses (B dashed, so equal runs show
    both), then |loss A - loss B| on a log scale above a strip of the common steps, green
    where the traced bits are equal, red where the weights or the loss differ."""
    from matplotlib.transforms import blended_transform_factory

    fig, axes = _figure(2, 1, 9, 6.5)
    top, bottom = axes[0][0], axes[1][0]
    bottom.sharex(top)
    fig.suptitle(plot.title, fontsize=11)
    top.plot(plot.a.x, plot.a.y, color="tab:blue", linewidth=1.6, label=plot.a.label)
    top.plot(plot.b.x, plot.b.y, color="tab:orange", linewidth=1.2, linestyle="--", label=plot.b.label)
    if not plot.a.x and not plot.b.x:
        top.text(0.5, 0.5, "no traced loss in either run (trace.jsonl)", ha="center", transform=top.transAxes)
    for ax in (top, bottom):
        if plot.last_equal_step is not None:
            ax.axvline(
                plot.last_equal_step,
                color="tab:green",
                linestyle=":",
                linewidth=1.5,
                label=f"last equal step: {plot.last_equal_step}" if ax is top else None,
            )
        if plot.first_split_step is not None:
            note = f" ({plot.split_note})" if plot.split_note else ""
            label = f"first differing step: {plot.first_split_step}{note}"
            ax.axvline(plot.first_split_step, color="tab:red", linewidth=1.5, label=label if ax is top else None)
    top.set_ylabel("traced training loss")
    top.legend(fontsize=8, loc="upper right")
    top.grid(alpha=0.3)
    if plot.difference.x:
        bottom.semilogy(
            plot.difference.x,
            plot.difference.y,
            linestyle="none",
            marker="o",
            markersize=4,
            color="tab:red",
            label="|loss A - loss B| where it is not 0",
        )
        bottom.set_ylim(min(plot.difference.y) / 4, max(plot.difference.y) * 2)  # room for the strip below
    else:
        bottom.set_yticks([])
        bottom.text(
            0.5,
            0.55,
            "the traced losses are bitwise equal at every common step",
            ha="center",
            transform=bottom.transAxes,
        )
    strip = blended_transform_factory(bottom.transData, bottom.transAxes)
    for steps, color, what in ((plot.equal_at, "tab:green", "equal"), (plot.differ_at, "tab:red", "differ")):
        if steps:
            bottom.scatter(
                steps,
                [0.04] * len(steps),
                marker="|",
                s=120,
                color=color,
                transform=strip,
                label=f"traced step where the bits {what}",
            )
    bottom.legend(fontsize=8, loc="upper left")
    bottom.set_ylabel("|loss A - loss B|")
    bottom.set_xlabel("optimizer step")
    bottom.grid(alpha=0.3)
    _save(fig, path)


def draw_spread(spreads: list[MetricSpread], title: str, path: Path) -> None:
    """One panel per metric: each job's curve, the mean and a mean ± std band across jobs."""
    if not spreads:
        raise ConfigError("nothing to plot: no completed job of the sweep recorded metrics")
    cols = 2 if len(spreads) > 1 else 1
    rows = math.ceil(len(spreads) / cols)
    fig, axes = _figure(rows, cols, 5.2 * cols, 3.6 * rows)
    fig.suptitle(title, fontsize=11)
    for i, ax in enumerate(ax for row in axes for ax in row):
        if i >= len(spreads):
            ax.set_visible(False)
            continue
        s = spreads[i]
        for job in s.jobs:
            ax.plot(job.x, job.y, marker="o", markersize=3, linewidth=1, alpha=0.7, label=job.label)
        if s.epochs:
            ax.fill_between(s.epochs, s.low, s.high, color="grey", alpha=0.25, label="mean ± std")
            ax.plot(s.epochs, s.mean, color="black", linewidth=2, label="mean")
        ax.set_title(s.name, fontsize=10)
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
        if s.epochs:
            ax.set_xticks(s.epochs if len(s.epochs) <= 12 else s.epochs[:: math.ceil(len(s.epochs) / 12)])
        if i == 0:
            ax.legend(fontsize=7, loc="best")
    _save(fig, path)


def _save(fig, path: Path) -> None:
    try:
        fig.savefig(Path(path), format="png")
    except OSError as exc:
        raise ConfigError(f"cannot write plot {str(path)!r}: {exc.strerror or exc}") from None
