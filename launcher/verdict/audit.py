"""``launch audit``: which knobs change this job's bits, and where the bits first split.

The audit runs the job as configured ``audit.repeats`` times (the baseline), then
once for each value tried of every knob that can change bits, all with the same
seed and a step trace every ``audit.trace_every`` steps. Every run is an ordinary
sealed run of the store. Each run is compared bit for bit with the first baseline
run (``compare.bitwise``): did the bits change, and at which step and layer did
they first split. The table and the verdict are printed and saved with every run's
name in ``<store>/audits/<id>/audit.json`` and ``audit.txt``.

``trials`` (pure) decides what to run, ``audit_report`` (pure) judges and renders,
and ``run`` is the one function that starts jobs and writes files.
"""

from __future__ import annotations

import datetime as _dt
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from omegaconf import DictConfig, OmegaConf

from launcher import console
from launcher.errors import ConfigError
from launcher.record import layout
from launcher.record.store import runs
from launcher.run import composition, config
from launcher.verdict import audit_report, compare


@dataclass(frozen=True)
class Knob:
    """A setting that may change a job's bits, and where a run's fingerprint records it."""

    name: str
    recorded_in: str  # the fingerprint field(s) that pin it (all in the comparability key)
    tasks: tuple[str, ...] = ("mnist", "custom", "script", "notebook")  # tasks the launcher applies it for


KNOBS = {
    k.name: k
    for k in (
        Knob("intra_op_threads", "determinism.intra_op_threads"),
        Knob("inter_op_threads", "determinism.inter_op_threads"),
        Knob("onednn_opts", "environment.TF_ENABLE_ONEDNN_OPTS"),
        Knob("level", "determinism.level"),
        # The launcher compiles only the mnist model; user code calls compile() itself.
        Knob("xla", "determinism.jit_compile", ("mnist",)),
        Knob("input_pipeline", "config.train.data_parallel_calls, determinism.deterministic_data", ("mnist",)),
        # Another CPU, emulated (launcher.run.emulation): opt-in, each run takes half a minute or more.
        Knob("cpu", "hardware.cpu; determinism=portable caps the ISA and keys only its baseline"),
    )
}
OPT_IN = ("cpu",)  # knobs tried only when audit.knobs names them


@dataclass
class Options:
    """``audit.*`` overrides of ``launch audit``."""

    repeats: int = 2  # runs of the job as configured; >= 2, to judge whether repeats are bitwise stable
    trace_every: int = 1  # steps between trace points in every audit run; 1 finds the exact first step
    knobs: list[str] = field(default_factory=lambda: [k for k in KNOBS if k not in OPT_IN])  # to perturb
    cpus: list[str] = field(default_factory=lambda: ["Haswell"])  # the cpu knob's qemu CPU models


@dataclass(frozen=True)
class Trial:
    """One run of the audit: a knob's value, as overrides on top of the user's."""

    knob: str  # a KNOBS name, or "repeat" for the baseline
    value: str  # as shown in the table
    overrides: tuple[str, ...] = ()
    expect: tuple[tuple[str, object], ...] = ()  # fingerprint determinism fields the value must set
    skip: str | None = None  # why this knob does not apply to this job
    cpu: str | None = None  # the job runs under qemu-user as this CPU model (the cpu knob)


def parse_options(dotlist: Sequence[str]) -> Options:
    """``audit.key=value`` strings as Options; ConfigError names the bad one."""
    try:
        merged = OmegaConf.merge(
            OmegaConf.structured(Options), OmegaConf.from_dotlist([a.removeprefix("audit.") for a in dotlist])
        )
    except Exception as exc:  # omegaconf's ValidationError, ConfigKeyError, GrammarParseError
        first = str(exc).splitlines()[0]
        raise ConfigError(f"bad audit option: {first} (audit options: repeats, trace_every, knobs, cpus)") from None
    options = Options(**OmegaConf.to_container(merged))
    if options.repeats < 2:
        raise ConfigError(
            f"audit.repeats must be at least 2 (stability needs two runs to compare), got {options.repeats}"
        )
    if options.trace_every < 1:
        raise ConfigError(f"audit.trace_every must be at least 1, got {options.trace_every}")
    unknown = [k for k in options.knobs if k not in KNOBS]
    if unknown or not options.knobs:
        raise ConfigError(f"audit.knobs: unknown {unknown or 'empty list'}; choose from {', '.join(KNOBS)}")
    if "cpu" in options.knobs and not options.cpus:
        raise ConfigError("audit.cpus: name at least one CPU model for the cpu knob (e.g. [Haswell])")
    return options


def trials(cfg: DictConfig, cores: int, options: Options) -> list[Trial]:
    """The runs of an audit of the resolved config ``cfg``: baseline repeats, then each knob's values."""
    det, task = cfg.determinism, str(cfg.train.name)
    out = [Trial("repeat", f"{det.level} as configured, run {i + 1}") for i in range(options.repeats)]
    for name in options.knobs:
        if task not in KNOBS[name].tasks:
            out.append(Trial(name, "-", skip=f"train={task} does not take this setting from the launcher"))
        elif name == "cpu":
            out += _cpus(options.cpus)(cfg, cores)
        else:
            out += _KNOB_TRIALS[name](cfg, cores)
    return out


def _threads(key: str):
    def tried(cfg: DictConfig, cores: int) -> list[Trial]:
        current = cfg.determinism[key]
        effective = current if current is not None else cores  # TensorFlow's default: the core count
        candidates = (1, 2, 4, cores) if key == "intra_op_threads" else (1, 2)
        values = [v for v in sorted(set(candidates)) if v != effective][:2]
        return [
            Trial(key, f"{v} (was {_show(current, cores)})", (f"determinism.{key}={v}",), ((key, v),)) for v in values
        ]

    return tried


def _show(value: object, cores: int) -> str:
    return f"default={cores}" if value is None else str(value)


def _switch(knob: str, key: str, label: str, unset: str, check: bool):
    """An on/off setting: try each value it does not have (both when unset, as unset may be either)."""

    def tried(cfg: DictConfig, cores: int) -> list[Trial]:
        current = cfg.determinism[key]
        was = unset if current is None else str(current).lower()
        return [
            Trial(
                knob,
                f"{label}{str(v).lower()} (was {was})",
                (f"determinism.{key}={str(v).lower()}",),
                ((key, v),) if check else (),
            )
            for v in (False, True)
            if v != current
        ]

    return tried


def _level(cfg: DictConfig, cores: int) -> list[Trial]:
    from launcher.job.determinism import LEVELS

    current = cfg.determinism.level
    # portable is strict with ISA caps: the cpu knob asks what the CPU does to the bits.
    return [
        Trial("level", f"{lv} (was {current})", (f"determinism={lv}",), (("level", lv),))
        for lv in LEVELS
        if lv not in (current, "portable")
    ]


def _cpus(models: list[str]):
    def tried(cfg: DictConfig, cores: int) -> list[Trial]:
        return [Trial("cpu", f"{m}, emulated (was this CPU)", cpu=m) for m in models]

    return tried


def _input_pipeline(cfg: DictConfig, cores: int) -> list[Trial]:
    calls = cfg.train.data_parallel_calls
    other = "autotune" if calls == 1 else 1
    parallel = calls if calls != 1 else "autotune"
    out = [Trial("input_pipeline", f"parallel_calls={other} (was {calls})", (f"train.data_parallel_calls={other}",))]
    if cfg.determinism.deterministic_data is not False:
        unordered = (f"train.data_parallel_calls={parallel}", "determinism.deterministic_data=false")
        out.append(Trial("input_pipeline", f"parallel_calls={parallel}, deterministic=false", unordered))
    return out


_KNOB_TRIALS: dict[str, Callable[[DictConfig, int], list[Trial]]] = {
    "intra_op_threads": _threads("intra_op_threads"),
    "inter_op_threads": _threads("inter_op_threads"),
    # TF_ENABLE_ONEDNN_OPTS always reaches the job (verified by the bootstrap); Keras may refuse XLA: checked.
    "onednn_opts": _switch("onednn_opts", "onednn_opts", "", "unset", check=False),
    "level": _level,
    # Keras' auto is on with a GPU and off without one.
    "xla": _switch("xla", "jit_compile", "jit_compile=", "auto", check=True),
    "input_pipeline": _input_pipeline,
}


def with_overrides(base: Sequence[str], extra: Sequence[str]) -> list[str]:
    """``base`` with each of ``extra`` replacing any override of the same key (``+``/``++`` ignored)."""
    keys = {_key(o) for o in extra}
    return [o for o in base if _key(o) not in keys] + list(extra)


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


# ---------------------------------------------------------------- running (the only I/O)


_say = console.log.getChild("audit")  # the audit's notes: [audit] ..., on stderr (its report: stdout)


def run(argv: Sequence[str]) -> int:
    """``launch audit [OVERRIDES...] [audit.KEY=VALUE...]``: run the audit, print and save the report
    (each run's end noted on stderr as it comes)."""
    options = parse_options([a for a in argv if a.startswith("audit.")])
    user = [a for a in argv if not a.startswith("audit.")]
    base = config.resolve(composition.compose(user))
    fixed = [f"+seed={base.seed}", f"determinism.trace_every={options.trace_every}"]
    plan = trials(base, os.cpu_count() or 1, options)
    # Compose and check every run first: a bad override fails the audit before anything runs.
    cfgs = [None if t.skip else composition.compose(with_overrides(user, [*fixed, *t.overrides])) for t in plan]
    for cfg in cfgs:
        if cfg is not None:
            config.resolve(cfg)
    if any(t.cpu for t in plan):  # no qemu, or a model it does not know: refused before anything runs
        from launcher.run import emulation

        for model in dict.fromkeys(t.cpu for t in plan if t.cpu):
            emulation.check_model(model)
    audit_dir = runs.create(layout.StorePaths(str(base.store.root)).audits)
    header = {
        "schema": 1,
        "started": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "overrides": user,
        "options": asdict(options),
        "seed": int(base.seed),
        "level": str(base.determinism.level),
        "task": str(base.train.name),
        "cores": os.cpu_count(),
    }
    _say.info(
        "%d runs of train=%s determinism=%s seed=%s; report: %s",
        len([t for t in plan if not t.skip]),
        base.train.name,
        base.determinism.level,
        base.seed,
        audit_dir,
    )
    rows: list[audit_report.Row] = []
    causes: list[str] = []
    interrupted = True  # until the loop ends normally: whatever stops it, the report is written
    try:
        _run_trials(plan, cfgs, rows, causes)
        interrupted = bool(rows) and rows[-1].status == "interrupted"
    except KeyboardInterrupt:
        rows.append(audit_report.Row("-", "-", "interrupted"))
    finally:
        _set_costs(rows)
        verdict = audit_report.judge(rows, str(base.determinism.level), KNOBS, interrupted, causes)
        text = audit_report.render(rows, verdict)
        runs.write_bytes(audit_dir / "audit.txt", (text + "\n").encode())
        runs.write_json(
            audit_dir / "audit.json", {**header, "rows": [asdict(r) for r in rows], "verdict": asdict(verdict)}
        )
        runs.make_read_only(audit_dir)
    print(text, flush=True)
    _say.info("saved %s and audit.json", audit_dir / "audit.txt")
    return verdict.exit_code


def _run_trials(plan: list[Trial], cfgs: list, rows: list[audit_report.Row], causes: list[str]) -> None:
    """Run the planned trials in order, appending each one's row as it ends. Once the baseline
    repeats differ, stop, with the causes their runs recorded in ``causes``."""
    from launcher.run import pipeline

    reference: compare.RunRecord | None = None
    baseline: list[compare.RunRecord] = []
    for i, (t, cfg) in enumerate(zip(plan, cfgs, strict=True)):
        if t.knob != "repeat" and any(r.knob == "repeat" and r.status == "changed" for r in rows):
            causes += likely_causes(baseline)
            _say.info("the repeats differ: no knob can be judged until they agree; stopping")
            return
        if t.skip:
            rows.append(audit_report.Row(t.knob, t.value, "n/a", note=t.skip))
            continue
        outcome = pipeline.run(cfg, pipeline.Options(echo=False, cpu=t.cpu or None))  # cpu: emulated (the cpu knob)
        if outcome.status == "interrupted":
            rows.append(audit_report.Row(t.knob, t.value, "interrupted", run=outcome.run_dir.name))
            return
        row, record = _assess(t, outcome, reference)
        rows.append(row)
        if t.knob == "repeat" and record is not None:
            baseline.append(record)
        _say.info("%d/%d %s %s: %s", i + 1, len(plan), t.knob, t.value, audit_report.status_text(row))
        reference = reference or (record if row.status == "reference" else None)
        if reference is None:
            return  # the job fails, or records nothing, as configured: there is nothing to compare with


def likely_causes(records: list[compare.RunRecord]) -> list[str]:
    """What runs recorded that makes repeats differ: generators made without a seed, and reads
    that were not fully observed."""
    out: dict[str, None] = {}
    for r in records:
        for g in r.result.get("unseeded_generators") or []:
            out[f"a generator made without a seed: {g['call']} at {g['where']} (seed it from launcher.seed())"] = None
    for gap in compare.unobserved_reads(*records[:2]) if len(records) >= 2 else []:
        out[f"input the key may not hold: {gap}"] = None
    return list(out)


def _assess(t: Trial, outcome, ref: compare.RunRecord | None) -> tuple[audit_report.Row, compare.RunRecord | None]:
    """The row of one finished run, compared with the reference (the first baseline run), and its record."""
    row = audit_report.Row(t.knob, t.value, "failed", run=outcome.run_dir.name, note=outcome.error or "")
    if not outcome.ok:
        return row, None
    timings = outcome.result.get("timings", {})
    row.seconds = timings.get("job_s", 0.0) - timings.get("bootstrap_s", 0.0)
    record = compare.load(outcome.run_dir)
    set_by_job = {
        **((ref.fingerprint["determinism"].get("set_by_job") or {}) if ref else {}),
        **(record.fingerprint["determinism"].get("set_by_job") or {}),
    }  # the baseline's, or this run's
    by_job = {k: v for k, v in set_by_job.items() if k in dict(t.expect)}
    if by_job:
        row.status = "set by the job"
        row.note = "; ".join(
            f"the job's code sets {k}={v} itself: the value tried never reached it" for k, v in by_job.items()
        )
        return row, record
    stayed = [
        (k, record.fingerprint["determinism"].get(k))
        for k, v in t.expect
        if record.fingerprint["determinism"].get(k) != v
    ]
    if stayed:
        row.status = "not applied"
        row.note = "; ".join(f"{k} stayed {_json(got)}" for k, got in stayed)
        if any(k == "jit_compile" for k, _ in stayed):
            row.note += " (Keras turns XLA off when op determinism is on)"
        return row, record
    if not compare.recorded_anything(record):
        row.status = "not observed"
        row.note = "the run recorded no weights, metrics, output files or trace: nothing to compare"
        return row, (record if ref is None else None)
    if ref is None:
        row.status = "reference"
        return row, record
    equal, _, _, divergence = compare.bitwise(ref, record)
    row.status = "same" if equal else "changed"
    if divergence is not None and divergence.split:
        row.step, row.epoch, row.layer = divergence.step, divergence.epoch, divergence.layer
    return row, record


def _json(value: object) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _set_costs(rows: list[audit_report.Row]) -> None:
    """Each run's time in the task as a ratio to the baseline runs' median."""
    base = [r.seconds for r in rows if r.knob == "repeat" and r.seconds]
    if not base:
        return
    median = statistics.median(base)
    for r in rows:
        if r.seconds:
            r.cost = r.seconds / median
