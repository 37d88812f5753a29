"""The audit's verdict and table (pure): which knobs must be pinned, are repeats stable.

A knob *must be pinned* when some value tried changed the bits; it is *free here*
when every value tried left them bitwise equal, on this machine, for this job
(not a guarantee elsewhere). Repeats are *stable* when every baseline run equals
the first, bit for bit: weights, every epoch's metrics, every traced step. When
they are not, the knobs' results cannot be trusted and the audit exits 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from launcher.console import table
from launcher.errors import ExitCode


@dataclass
class Row:
    """One run of the audit, compared with the first baseline run."""

    knob: str  # "repeat" for the baseline runs
    value: str
    status: str  # reference | same | changed | set by the job | not observed | failed | not applied | n/a | interrupted
    run: str | None = None  # the run's directory name in the store
    step: int | None = None  # first step at which the trace split from the reference
    epoch: int | None = None
    layer: str | None = None  # first layer in model order whose weights differ at that step
    seconds: float | None = None  # time in the task (training, checkpoints, traces; no interpreter start)
    cost: float | None = None  # seconds / the baseline runs' median
    note: str = ""


@dataclass
class Verdict:
    level: str
    completed_repeats: int
    stable: bool | None  # None: fewer than two baseline runs completed
    pin: list[str] = field(default_factory=list)  # knobs whose values changed the bits
    free: list[str] = field(default_factory=list)  # knobs varied with no bit change
    not_applied: list[str] = field(default_factory=list)
    not_observed: list[str] = field(default_factory=list)  # knobs whose runs recorded nothing
    failed: list[str] = field(default_factory=list)
    set_by_job: list[str] = field(default_factory=list)  # knobs the job's code sets itself: never varied
    recorded_in: dict[str, str] = field(default_factory=dict)
    causes: list[str] = field(default_factory=list)  # what the unstable repeats recorded as a likely cause
    interrupted: bool = False

    @property
    def exit_code(self) -> int:
        """130 interrupted; 0 repeats stable; 1 not stable, or the job failed as configured."""
        if self.interrupted:
            return ExitCode.INTERRUPTED
        return ExitCode.OK if self.stable else ExitCode.FAILED


def judge(
    rows: list[Row], level: str, knobs: Mapping, interrupted: bool = False, causes: list[str] | None = None
) -> Verdict:
    """The verdict over the audit's rows; ``knobs`` maps names to objects with ``recorded_in``;
    ``causes``: what the baseline runs recorded that makes runs differ (unseeded generators).

    Once the repeats differ, no knob is judged: a knob's run would differ anyway."""
    repeats = [r for r in rows if r.knob == "repeat" and r.status in ("reference", "same", "changed")]
    unobserved = any(r.knob == "repeat" and r.status == "not observed" for r in rows)
    stable = None if len(repeats) < 2 or unobserved else all(r.status != "changed" for r in repeats)
    v = Verdict(level, len(repeats), stable, interrupted=interrupted, causes=list(causes or []))
    if unobserved:
        v.not_observed.append("repeat")
    if stable is False:
        return v
    for name in dict.fromkeys(r.knob for r in rows if r.knob in knobs):
        statuses = {r.status for r in rows if r.knob == name}
        if "set by the job" in statuses:  # the values tried never reached the job: neither pinned nor free
            v.set_by_job.append(name)
        elif "changed" in statuses:
            v.pin.append(name)
            v.recorded_in[name] = knobs[name].recorded_in
        elif "same" in statuses:
            v.free.append(name)
        elif "not applied" in statuses:
            v.not_applied.append(name)
        elif "not observed" in statuses:
            v.not_observed.append(name)
        if "failed" in statuses:  # also beside pin or free: a value that could not run is never hidden
            v.failed.append(name)
    return v


def status_text(row: Row) -> str:
    """The bits column: what happened to the run, in one word or two."""
    return {"changed": "CHANGED", "reference": "reference"}.get(row.status, row.status)


def _split(row: Row) -> str:
    if row.step is None:
        return "-"
    return f"step {row.step} (epoch {row.epoch}) {row.layer or 'loss only'}"


def render(rows: list[Row], v: Verdict) -> str:
    """The table and the verdict, as printed and saved in audit.txt."""
    header = ("knob", "value tried", "bits", "first split (step, layer)", "cost", "run")
    cells = [
        (r.knob, r.value, status_text(r), _split(r), f"{r.cost:.2f}x" if r.cost else "-", r.run or "-") for r in rows
    ]
    lines = table(header, cells, rule=True)
    for r in rows:
        if r.note:
            lines.append(f"  note: {r.knob} {r.value}: {r.note}")
    lines.append("cost: time in the task relative to the median of the baseline runs (one run each: noisy)")
    return "\n".join([*lines, "", *verdict_lines(v)])


def verdict_lines(v: Verdict) -> list[str]:
    lines = ["VERDICT"]
    if v.interrupted:
        lines.append("  interrupted: the audit is incomplete")
    if "repeat" in v.not_observed:
        lines.append(
            "  the job records nothing to compare (no weights, metrics, output files or trace): "
            "stability NOT JUDGED; see docs/running-your-code.md for what is observed"
        )
    elif v.stable is None and v.completed_repeats == 0 and not v.interrupted:
        lines.append("  the job fails as configured (see the notes): fix it, then audit it")
    elif v.stable is None:
        lines.append(f"  repeats: only {v.completed_repeats} baseline run(s) completed; stability not judged")
    elif v.stable:
        lines.append(
            f"  repeats: {v.completed_repeats} runs under {v.level} are bitwise identical "
            "(weights, every epoch's metrics, every traced step): STABLE"
        )
    else:
        lines.append(
            f"  repeats: runs under {v.level} differ from each other: NOT STABLE (a determinism bug); "
            "no knob was judged: make the repeats agree first"
        )
        if v.causes:
            lines.append(f"  likely cause: {'; '.join(v.causes[:3])}")
    if v.pin:
        pinned = ", ".join(f"{k} ({v.recorded_in[k]})" for k in v.pin)
        lines.append(f"  must pin (they change the bits; the fingerprint field that records each): {pinned}")
    if v.free:
        lines.append(f"  free here (varied, bits unchanged on this machine for this job): {', '.join(v.free)}")
    if v.set_by_job:
        lines.append(
            "  set by the job itself, not varied (the launcher's value never reached it; the job's code "
            f"decides, and its value is recorded): {', '.join(v.set_by_job)}"
        )
    if v.not_applied:
        lines.append(f"  not applied at this level (see the notes): {', '.join(v.not_applied)}")
    knobs = [k for k in v.not_observed if k != "repeat"]
    if knobs:
        lines.append(f"  not observed (their runs recorded nothing to compare): {', '.join(knobs)}")
    if v.failed:
        lines.append(f"  some values failed to run (see the notes): {', '.join(v.failed)}")
    return lines
