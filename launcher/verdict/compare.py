"""``launch compare``: are two runs identical, bit for bit, and does asking mean anything?

The verdict comes from pure functions over what the runs stored (fingerprints,
configs, metrics, result hashes); ``compare_runs`` only loads files and verifies
the seals first. Verdicts and exit codes:

========================  ====  =====================================================
IDENTICAL                  0    keys match; everything both runs recorded is equal
DIFFERENT                  1    keys match, results differ: a determinism bug
REFUSED                    3    keys differ: the comparison would mean nothing
NOT COMPARABLE             3    keys differ, compared anyway with ``--allow-mismatch``
NOTHING COMPARED           6    keys match, but neither run recorded any result
EQUIVALENT                 0    ``--tolerance``: allclose on weights and metrics
NOT EQUIVALENT             1    ``--tolerance``: not allclose
========================  ====  =====================================================

A verdict is only ever about what was really compared: IDENTICAL names what it
compared (weights, epochs' metrics, output files, final metrics, traced steps), and
two runs that recorded none of these are NOTHING COMPARED, never IDENTICAL.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from launcher.console import table
from launcher.errors import ConfigError, ExitCode, LauncherError, SealError
from launcher.record import hashing, layout, notebooks, outputs, trace

# With --tolerance, runs may differ only in these key fields (a software migration).
from launcher.record.probe import fingerprint
from launcher.record.probe import key as comparability
from launcher.record.store import objects, runs
from launcher.run import config

MIGRATION_FIELDS = ("software.", "code.launcher")


@dataclass
class RunRecord:
    """What comparison reads from one sealed run."""

    path: Path
    fingerprint: dict
    config: dict
    metrics: list[dict]
    result: dict
    steps: list[dict] = field(default_factory=list)  # the divergence trace (trace.jsonl)
    resumed: dict | None = None  # job.json's "resume": the run was continued from a checkpoint


@dataclass
class Comparison:
    verdict: str
    exit_code: int
    differences: list[tuple[str, object, object]] = field(default_factory=list)
    first_differing_epoch: int | None = None
    differing_layers: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    divergence: trace.Divergence | None = None  # where the step traces first differ
    equal: bool | None = None  # results bitwise equal (None: not compared)
    compared: list[str] = field(default_factory=list)  # what both runs recorded and was compared
    weights: tuple[str | None, str | None] = (None, None)  # each run's weights_sha256, as it recorded it
    shown: dict[str, tuple[object, object]] = field(default_factory=dict)  # text of a differing field (``shown``)


NOTHING_COMPARED = ExitCode.NOTHING_COMPARED


def compared_items(a: RunRecord, b: RunRecord) -> list[str]:
    """What two runs both recorded, as a reader would name it: ``weights``, ``2 epochs' metrics``..."""
    items = []
    if a.result.get("weights_sha256") and b.result.get("weights_sha256"):
        items.append("weights")
    epochs = min(len(a.metrics), len(b.metrics))
    if epochs:
        items.append(f"{epochs} epochs' metrics" if epochs > 1 else "1 epoch's metrics")
    outputs = len(set(a.result.get("outputs") or {}) & set(b.result.get("outputs") or {}))
    if outputs:
        items.append(f"{outputs} output file{'s' if outputs > 1 else ''}")
    if a.result.get("final_metrics") and b.result.get("final_metrics") and not epochs:
        items.append("final metrics")
    common = len({p["step"] for p in a.steps} & {p["step"] for p in b.steps})
    if common:
        items.append(f"{common} traced step{'s' if common > 1 else ''}")
    return items


def recorded_anything(r: RunRecord) -> bool:
    """Did the run record any result at all (weights, metrics, output files, a trace)?"""
    return bool(
        r.result.get("weights_sha256")
        or r.metrics
        or r.result.get("outputs")
        or r.result.get("final_metrics")
        or r.steps
    )


def verified(path: str | Path) -> Path:
    """The run at ``path``, its seal verified (``runs.verify_seal``). A run that did not complete
    is refused (``SealError``, exit 4) saying what can be done with it (``resume_advice``)."""
    run_dir = runs.require_run(path)
    runs.refuse_links_out(run_dir)
    if not layout.RunPaths(run_dir).manifest.exists():
        state = runs.describe_state(run_dir)
        advice = f"; {resume_advice(run_dir)}" if state.startswith(("abandoned", "interrupted")) else ""
        raise SealError(f"run {run_dir.name} is not complete (state: {state}; no {layout.MANIFEST}){advice}")
    return runs.verify_seal(run_dir)


def load(path: str | Path) -> RunRecord:
    """Read a run for comparison, after verifying its seal (``verified``) and fingerprint schema."""
    run_dir = verified(path)
    paths = layout.RunPaths(run_dir)
    fp = runs.read_json(paths.fingerprint)
    fingerprint.check_schema(fp, str(run_dir))
    cfg = OmegaConf.to_container(OmegaConf.load(paths.config), resolve=True)
    metrics = [json.loads(line) for line in paths.metrics.read_text().splitlines()] if paths.metrics.exists() else []
    job = runs.read_json(paths.job) if paths.job.exists() else {}
    return RunRecord(run_dir, fp, cfg, metrics, runs.read_json(paths.result), trace.read(run_dir), job.get("resume"))


def resume_advice(run_dir: Path) -> str:
    """What to do with a run that did not complete, in one clause: ``launch resume RUN`` only
    where resume would accept it (``launcher.run.resume.check_resumable``), else why it cannot
    be resumed (a custom loop with no checkpoints, a fit with ``steps_per_epoch``)."""
    from launcher.run import resume

    try:
        resume.check_resumable(run_dir)
    except LauncherError as exc:
        why = str(exc).removeprefix(f"run {run_dir.name} cannot be resumed: ")
        return f"launch resume would refuse it: {why}"
    return f"continue it with: launch resume {run_dir}"


def key_differences(a: RunRecord, b: RunRecord) -> list[tuple[str, object, object]]:
    """Differing key fields; a differing config hash is shown as the config fields that differ."""
    diffs = comparability.key_differences(a.fingerprint, b.fingerprint)
    if any(name == "config_sha256" for name, _, _ in diffs):
        # each as its hash was taken: paths inside its project relative to it (schema 5), else absolute
        config_diffs = config_differences(
            config.hashed_part(a.config, a.fingerprint.get("launch_dir")),
            config.hashed_part(b.config, b.fingerprint.get("launch_dir")),
        )
        if config_diffs:
            diffs = [d for d in diffs if d[0] != "config_sha256"] + config_diffs
    return diffs


def config_differences(a: dict, b: dict, prefix: str = "config") -> list[tuple[str, object, object]]:
    out: list[tuple[str, object, object]] = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if isinstance(x, dict) and isinstance(y, dict):
            out += config_differences(x, y, f"{prefix}.{key}")
        elif x != y:
            out.append((f"{prefix}.{key}", x, y))
    return out


def bitwise(a: RunRecord, b: RunRecord) -> tuple[bool, int | None, list[str], trace.Divergence | None]:
    """(equal, first differing epoch, layers whose final hashes differ, where the traces split)."""
    first_epoch = None
    for i in range(max(len(a.metrics), len(b.metrics))):
        ma = a.metrics[i] if i < len(a.metrics) else None
        mb = b.metrics[i] if i < len(b.metrics) else None
        if _bits(ma) != _bits(mb):
            first_epoch = (ma or mb or {}).get("epoch", i + 1)
            break
    la, lb = a.result.get("layer_sha256") or {}, b.result.get("layer_sha256") or {}
    order = [name for name, _ in a.steps[-1]["layers"]] if a.steps else []
    rank = {name: i for i, name in enumerate(order)}
    layers = sorted((k for k in set(la) | set(lb) if la.get(k) != lb.get(k)), key=lambda k: (rank.get(k, len(rank)), k))
    divergence = trace.first_divergence(a.steps, b.steps)
    same_weights = a.result.get("weights_sha256") == b.result.get("weights_sha256")
    same_outputs = not output_differences(a, b)
    same_final = _bits(a.result.get("final_metrics")) == _bits(b.result.get("final_metrics"))
    same_steps = divergence is None or not divergence.split
    equal = same_weights and same_outputs and same_final and same_steps and first_epoch is None and not layers
    return equal, first_epoch, layers, divergence


def output_differences(a: RunRecord, b: RunRecord) -> list[str]:
    """The output files that differ, by meaning where both runs recorded it (a Keras archive's
    weights and config, TensorBoard's (tag, step, value) records; ``launcher.record.outputs``),
    else by bytes."""
    ca, cb = a.result.get("outputs_content"), b.result.get("outputs_content")
    if ca is not None and cb is not None:
        return outputs.differences(ca, cb)
    ra, rb = a.result.get("outputs") or {}, b.result.get("outputs") or {}
    return [f"outputs/{name}" for name in sorted(set(ra) | set(rb)) if ra.get(name) != rb.get(name)]


def _bits(value: object) -> str:
    """Canonical JSON: floats by repr, which round-trips exactly, so nan equals nan and -0.0 is not 0.0."""
    return json.dumps(value, sort_keys=True)


def decide(a: RunRecord, b: RunRecord, allow_mismatch: bool = False) -> Comparison:
    """The bitwise verdict for two loaded runs."""
    task_a, task_b = a.config["train"]["name"], b.config["train"]["name"]
    if task_a != task_b:
        raise ConfigError(f"runs of different tasks cannot be compared ({task_a} vs {task_b})")
    diffs = key_differences(a, b)
    if diffs and not allow_mismatch:
        return Comparison("REFUSED", ExitCode.REFUSED, diffs)
    equal, epoch, layers, divergence = bitwise(a, b)
    compared = compared_items(a, b)
    nothing = not recorded_anything(a) and not recorded_anything(b)
    if diffs:
        note = (
            "neither run recorded any result" if nothing else "results are bitwise equal" if equal else "results differ"
        )
        return Comparison(
            "NOT COMPARABLE", ExitCode.REFUSED, diffs, epoch, layers, [f"forced: {note}"], divergence, equal, compared
        )
    if nothing:
        why = [
            "neither run recorded weights, metrics, output files or a step trace: there is nothing to compare",
            "let the launcher observe your training (train.observe=true, the default), call "
            "launcher.record_model(model), or save results under launcher.output_dir()",
        ]
        return Comparison("NOTHING COMPARED", NOTHING_COMPARED, notes=why, equal=None)
    notes = [] if a.result.get("weights_sha256") else ["no weights were recorded: compared what is listed above"]
    unknown = comparability.unknown_on_both(a.fingerprint, b.fingerprint)
    if unknown:
        notes.append(f"neither run recorded {', '.join(unknown)} (an older launcher)")
    if equal:
        return Comparison("IDENTICAL", ExitCode.OK, notes=notes, divergence=divergence, equal=True, compared=compared)
    unclaimed = _no_bug_claimed(a, b, unknown)
    if unclaimed is not None:
        return Comparison(
            "NOT COMPARABLE",
            ExitCode.REFUSED,
            [],
            epoch,
            layers,
            [*notes, unclaimed],
            divergence,
            equal=False,
            compared=compared,
        )
    files = output_differences(a, b)
    if files and trained_alike(a, b, epoch, layers, divergence):
        notes = [f"{ONLY_OUTPUTS}: {', '.join(files[:5])}{' and more' if len(files) > 5 else ''}", *notes]
    causes = {f"{g['call']} at {g['where']}": None for r in (a, b) for g in r.result.get("unseeded_generators") or []}
    if causes:
        notes.append(
            f"likely cause: a generator made without a seed: {', '.join(list(causes)[:3])} "
            "(seed it from launcher.seed())"
        )
    return Comparison(
        "DIFFERENT", ExitCode.FAILED, [], epoch, layers, notes, divergence, equal=False, compared=compared
    )


def _no_bug_claimed(a: RunRecord, b: RunRecord, unknown: list[str]) -> str | None:
    """Why two runs of one key whose results differ are not called a determinism bug (the note that
    says so), or None when they are: what neither run recorded (``unknown``) may be what differs;
    so may input the key does not hold (reads not fully observed), or what a checkpoint does not
    hold after a resume."""
    if unknown:
        return "results differ"
    gaps = unobserved_reads(a, b)
    if gaps:
        more = f" (and {len(gaps) - 1} more)" if len(gaps) > 1 else ""
        return f"results differ, and the runs' reads were not fully observed: {gaps[0]}{more}"
    resumed = [r.path.name for r in (a, b) if r.resumed]
    if resumed:
        said = [f"{o['op']} at {o['where']}" for r in (a, b) for o in _not_bitwise(r)]
        why = f"; its resume said it would not be bitwise: {', '.join(said[:3])}" if said else ""
        return f"results differ, and {' and '.join(resumed)} {RESUMED}{why}"
    return None


ONLY_OUTPUTS = "only output files differ"
RESUMED = (
    "continued from a checkpoint (launch resume): what a checkpoint neither holds nor reads again (a file "
    "the job appends to, an object a callback changes in place, a random generator made during a fit or "
    "without a seed) can differ after a resume"
)


def _not_bitwise(r: RunRecord) -> list[dict]:
    """The random ops a resumed run's job found that no checkpoint keeps (``observed.resume_not_bitwise``)."""
    found = (r.result.get("observed") or {}).get("resume_not_bitwise") if r.resumed else None
    return [o for o in found or [] if isinstance(o, dict) and {"op", "where"} <= o.keys()]


def unobserved_reads(a: RunRecord, b: RunRecord) -> list[str]:
    """Why the runs' reads may not all be in their keys (a program the job started, a lost
    event): the fingerprints' ``observation.gaps``, each once."""
    gaps = [g for r in (a, b) for g in ((r.fingerprint.get("observation") or {}).get("gaps") or [])]
    return list(dict.fromkeys(gaps))


def trained_alike(a: RunRecord, b: RunRecord, epoch, layers, divergence) -> bool:
    """Weights, every epoch's metrics, final metrics and the step trace all bitwise equal."""
    return (
        a.result.get("weights_sha256") == b.result.get("weights_sha256")
        and epoch is None
        and not layers
        and (divergence is None or not divergence.split)
        and _bits(a.result.get("final_metrics")) == _bits(b.result.get("final_metrics"))
    )


def decide_equivalent(a: RunRecord, b: RunRecord, rtol: float, atol: float, allow_mismatch: bool = False) -> Comparison:
    """``--tolerance``: allclose on weights and per-epoch metrics, for runs that differ in software only."""
    diffs = key_differences(a, b)
    blocking = [d for d in diffs if not d[0].startswith(MIGRATION_FIELDS)]
    if blocking and not allow_mismatch:
        return Comparison(
            "REFUSED", ExitCode.REFUSED, blocking, notes=["--tolerance admits differences in software only"]
        )
    problems = allclose_problems(a, b, rtol, atol)
    verdict = ("NOT EQUIVALENT", ExitCode.FAILED) if problems else ("EQUIVALENT", ExitCode.OK)
    return Comparison(*verdict, diffs, notes=problems[:10])


def _unjudged(a: RunRecord, b: RunRecord, wa: dict, wb: dict) -> list[str]:
    """Why a tolerance check could not vouch for the runs: no values to compare at all, or
    weights known only by their hashes (which differ, or equal ones would say so)."""
    problems = []
    if not wa and not wb and not a.metrics and not b.metrics:
        problems.append("neither run kept weight values or per-epoch metrics: nothing to compare within a tolerance")
    hashes = a.result.get("weights_sha256"), b.result.get("weights_sha256")
    if not (wa and wb) and all(hashes) and hashes[0] != hashes[1]:
        problems.append(
            "the weights differ by hash and their values were not kept (train.save_weights=true keeps "
            "them): they cannot be compared within a tolerance"
        )
    return problems


def allclose_problems(a: RunRecord, b: RunRecord, rtol: float, atol: float) -> list[str]:
    problems = []
    if len(a.metrics) != len(b.metrics):
        problems.append(f"epoch counts differ: {len(a.metrics)} vs {len(b.metrics)}")
    for ma, mb in zip(a.metrics, b.metrics, strict=False):
        for key in sorted(set(ma) | set(mb)):
            x, y = ma.get(key), mb.get(key)
            if x is None or y is None or not np.allclose(x, y, rtol=rtol, atol=atol):
                problems.append(f"epoch {ma.get('epoch')}: {key} {x} vs {y}")
    wa, wb = read_weights(a), read_weights(b)
    problems += _unjudged(a, b, wa, wb)
    if set(wa) != set(wb):
        problems.append("the runs' weights have different names")
    for name in sorted(set(wa) & set(wb)):
        if wa[name].shape != wb[name].shape:
            problems.append(f"weight {name}: shape {wa[name].shape} vs {wb[name].shape}")
        elif not np.allclose(wa[name], wb[name], rtol=rtol, atol=atol):
            worst = float(np.max(np.abs(wa[name].astype(np.float64) - wb[name])))
            problems.append(f"weight {name}: max abs difference {worst:.3g}")
    return problems


def read_weights(record: RunRecord) -> dict[str, np.ndarray]:
    """Every array of the run's saved Keras weights file, by its path in the file."""
    name = record.result.get("weights_file")
    if not name or not (record.path / name).is_file():
        return {}
    if name.endswith(".npz"):  # a script's trained variables (launcher.job.tasks.user.save_weights)
        with np.load(record.path / name) as f:
            return {key.split(" ", 1)[-1]: f[key] for key in sorted(f.files)}
    import h5py

    out: dict[str, np.ndarray] = {}
    with h5py.File(record.path / name, "r") as f:
        f.visititems(lambda key, obj: out.__setitem__(key, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return out


def compare_runs(
    a: str | Path, b: str | Path, allow_mismatch: bool = False, tolerance: tuple[float, float] | None = None
) -> Comparison:
    """The verdict on the sealed runs ``a`` and ``b``: bit for bit (``decide``), or within ``tolerance``
    (rtol, atol: ``decide_equivalent``). Where their comparability keys differ the verdict is
    REFUSED, unless ``allow_mismatch`` (then NOT COMPARABLE, with what was found).

    Raises:
        RunNotFound: a path does not exist or is not a run directory (exit 2).
        UnsafeRun: a run holds a link pointing outside it (exit 2).
        SealError: a run is not sealed, or was changed after sealing (exit 4).
        SchemaError: a run's fingerprint is of a schema this launcher cannot read (exit 5).
        ConfigError: the runs are of different tasks (exit 2).
    """
    ra, rb = load(a), load(b)
    if tolerance is not None:
        c = decide_equivalent(ra, rb, *tolerance, allow_mismatch=allow_mismatch)
    else:
        c = decide(ra, rb, allow_mismatch=allow_mismatch)
    return replace(
        c,
        weights=(ra.result.get("weights_sha256"), rb.result.get("weights_sha256")),
        shown=shown(c.differences, ra, rb),
    )


NOT_READ = "not read by this run"
# What a key entry that only one run has means, by the field it is under (else: NOT_RECORDED).
ABSENT = {
    "data": NOT_READ,
    "software.distributions": NOT_READ,
    "software.libraries": NOT_READ,
    "code.modules": NOT_READ,
    "environment_read": NOT_READ,
    "config_files": NOT_READ,
    "code.notebook_cells": "no such code cell in this run",
    "environment": "not set in this run",
}
NOT_RECORDED = "not recorded by this run"


def shown(diffs: list[tuple[str, object, object]], a: RunRecord, b: RunRecord) -> dict[str, tuple[object, object]]:
    """How the text table shows the differing fields that raw values would not tell apart, field ->
    (run a's cell, run b's cell), a cell being text, lines, or None for the value as it is: an entry
    of the key only one run has (``absent_words``: "not read by this run", not ``null``), and a
    changed notebook cell where it differs, with its hash (``changed_cell``: the cell's source as the
    run's snapshot kept it, when its store still holds it)."""
    out = absent_words(
        diffs, comparability.comparability_key(a.fingerprint), comparability.comparability_key(b.fingerprint)
    )
    changed = [(n, x, y) for n, x, y in diffs if n.startswith(CELLS) and isinstance(x, str) and isinstance(y, str)]
    if changed:
        sources = notebook_sources(a), notebook_sources(b)
        for name, x, y in changed:
            cell = name[len(CELLS) :]
            out[name] = changed_cell(x, y, (sources[0] or {}).get(cell), (sources[1] or {}).get(cell))
    return out


CELLS = "code.notebook_cells."


def absent_words(
    diffs: list[tuple[str, object, object]], key_a: dict, key_b: dict
) -> dict[str, tuple[str | None, str | None]]:
    """For each differing field that one run's comparability key (``key_a``, ``key_b``) does not hold
    at all (a file only one run read: ``None`` in ``diffs``, as in ``--json``'s null), what that side's
    cell says instead (``ABSENT``); None where the run recorded the value."""
    out = {}
    for name, x, y in diffs:
        words = tuple(
            _absent(name) if value is None and _lacks(key, name) else None for value, key in ((x, key_a), (y, key_b))
        )
        if any(words):
            out[name] = words
    return out


NOT_INSTALLED = "not installed here"
INSTALLED = ("software.distributions.", "software.tensorflow", "software.keras", "software.numpy")


def here_words(diffs: list[tuple[str, object, object]]) -> dict[str, tuple[str | None, str | None]]:
    """``shown`` for a refusal of a stored run against this environment, before anything ran here
    (``launch replay``, ``launch resume``): a distribution the run used that this environment does
    not have is ``not installed here``, not ``null``."""
    return {
        name: (None, NOT_INSTALLED)
        for name, x, y in diffs
        if y is None and x is not None and name.startswith(INSTALLED)
    }


def _absent(name: str) -> str:
    top = max((f for f in ABSENT if name.startswith(f + ".")), key=len, default=None)
    return ABSENT[top] if top else NOT_RECORDED


def _lacks(key: dict, name: str) -> bool:
    """Whether the key has no entry at the dotted ``name`` below one of its fields (names hold dots too)."""
    top = max((f for f in key if name.startswith(f + ".")), key=len, default=None)
    return top is not None and not _holds(key[top], name[len(top) + 1 :])


def _holds(value: object, rest: str) -> bool:
    if not isinstance(value, dict):
        return False
    if rest in value:
        return True
    return any(rest.startswith(f"{k}.") and _holds(v, rest[len(k) + 1 :]) for k, v in value.items())


def notebook_sources(record: RunRecord) -> dict[str, str] | None:
    """The code cells' sources (``notebooks.cell_sources``) of a notebook run, from the notebook its
    snapshot kept in its store, checked against its hash; None when the run ran no notebook or its
    store no longer holds it intact."""
    digest = (record.fingerprint.get("code") or {}).get("notebook_sha256")
    if not objects.is_sha256(digest):
        return None
    path = objects.object_path(record.path.parent, digest)
    try:
        if hashing.file_sha256(path) != digest:
            return None
        return notebooks.cell_sources(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError, AttributeError, TypeError):
        return None


def changed_cell(x: str, y: str, source_x: str | None, source_y: str | None, width: int = 44) -> tuple[object, object]:
    """Both cells of a changed notebook cell: where the two differ, as a window around the first
    differing character of each side (the first differing line of the sources, ``line N: …``, when
    both are given and match their keys' hashes; else of the keys' first lines), then its sha256."""
    (line_x, sha_x), (line_y, sha_y) = notebooks.key_parts(x), notebooks.key_parts(y)
    if sha_x is None or sha_y is None:
        return None, None
    first = None
    if _is_cell(source_x, sha_x) and _is_cell(source_y, sha_y):
        where = _first_differing_line(source_x, source_y)
        if where is not None:
            number, in_x, in_y = where
            indent = len(in_x) - len(in_x.lstrip())
            if in_y[:indent] == in_x[:indent]:  # the indentation both share says nothing
                in_x, in_y = in_x[indent:], in_y[indent:]
            label = f"line {number}: "
            first = tuple(label + w for w in windows(in_x, in_y, width - len(label)))
    first = first or windows(line_x, line_y, width)
    return (first[0], f"[sha256 {sha_x}]"), (first[1], f"[sha256 {sha_y}]")


def _is_cell(source: str | None, sha: str) -> bool:
    import hashlib

    return source is not None and hashlib.sha256(source.encode()).hexdigest()[: len(sha)] == sha


def _first_differing_line(x: str, y: str) -> tuple[int, str, str] | None:
    """(line number from 1, that line of x, of y) of the first line that differs; a line one side
    lacks is ``(no such line)``; None when every line is equal (only line endings differ)."""
    lx, ly = x.splitlines(), y.splitlines()
    for i in range(max(len(lx), len(ly))):
        a = lx[i] if i < len(lx) else None
        b = ly[i] if i < len(ly) else None
        if a != b:
            return i + 1, "(no such line)" if a is None else a, "(no such line)" if b is None else b
    return None


def windows(x: str, y: str, width: int = 44) -> tuple[str, str]:
    """Two differing texts, each cut to ``width`` characters around the first character where they
    differ (a ``…`` where text is left out), so that a long value never shows only what both share."""
    at = next((i for i, (c, d) in enumerate(zip(x, y, strict=False)) if c != d), min(len(x), len(y)))
    if at < width - 1 or (len(x) <= width and len(y) <= width):
        return _short(x, width), _short(y, width)
    start = at - width // 3
    return _window(x, start, width), _window(y, start, width)


def _window(text: str, start: int, width: int) -> str:
    body = text[start + 1 : start + width - 1]  # a … before it
    return "…" + body + ("…" if start + width - 1 < len(text) else "")


def seals(paths: list[str | Path], trust=None) -> list:
    """Who sealed each run (a ``signing.Seal`` each), each seal verified first; a signature that does
    not verify, or a run ``trust.require_signed`` refuses, raises ``SignatureError`` (exit 7) naming
    the run."""
    from launcher.record.store import signing

    trust = trust or signing.NO_TRUST
    return [signing.check(verified(p), trust) for p in paths]


def sealed_line(paths: list[str | Path], sealed: list) -> str:
    """Who sealed each run, on one line: ``run X: sealed by alice@lab (trusted); run Y: unsigned``."""
    from launcher.record.store import signing

    return "; ".join(f"run {Path(p).name}: {signing.describe(s)}" for p, s in zip(paths, sealed, strict=True))


def parse_tolerance(text: str) -> tuple[float, float]:
    try:
        rtol, atol = (float(x) for x in text.split(","))
    except ValueError:
        raise ConfigError(f"--tolerance takes RTOL,ATOL (e.g. 1e-5,1e-8), got {text!r}") from None
    if rtol < 0 or atol < 0:
        raise ConfigError("--tolerance values must be non-negative")
    return rtol, atol


def _short(value: object, width: int = 44) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def item_differences(x: object, y: object, a: str = "run A", b: str = "run B") -> str | None:
    """What tells two lists (or mappings) apart, item by item: ``only in run A: avx512_vnni;
    only in run B: amx_tile`` (mappings: ``changed: k``); None for other values."""
    if isinstance(x, dict) and isinstance(y, dict):
        changed = sorted(str(k) for k in set(x) & set(y) if x[k] != y[k])
        parts = [
            f"only in {a}: {', '.join(sorted(map(str, set(x) - set(y))))}" if set(x) - set(y) else "",
            f"only in {b}: {', '.join(sorted(map(str, set(y) - set(x))))}" if set(y) - set(x) else "",
            f"changed: {', '.join(changed)}" if changed else "",
        ]
    elif isinstance(x, list) and isinstance(y, list):
        sx = [json.dumps(v, sort_keys=True, default=str) for v in x]
        sy = [json.dumps(v, sort_keys=True, default=str) for v in y]  # both canonical: key order is no difference
        only_a, only_b = [v for v in sx if v not in sy], [v for v in sy if v not in sx]
        parts = [
            f"only in {a}: {', '.join(v.strip(chr(34)) for v in only_a)}" if only_a else "",
            f"only in {b}: {', '.join(v.strip(chr(34)) for v in only_b)}" if only_b else "",
        ]
        if not only_a and not only_b:
            parts = ["the same items in another order"]
    else:
        return None
    return "; ".join(p for p in parts if p)


def difference_table(
    diffs: list[tuple[str, object, object]],
    a: str = "run A",
    b: str = "run B",
    shown: dict[str, tuple[object, object]] | None = None,
) -> list[str]:
    """One row per differing key field with both values; a list or mapping is shown by the
    items that differ, a long text around its first difference (``windows``): never a truncated
    value that hides them; wrapped onto following lines. ``shown``: a field's cells where the
    values do not say it (``shown``: "not read by this run", a notebook cell's lines)."""
    rows: list[tuple[str, ...]] = []
    for name, x, y in diffs:
        cells = (shown or {}).get(name, (None, None))
        if cells != (None, None):
            default = windows(x, y) if isinstance(x, str) and isinstance(y, str) else (_short(x), _short(y))
            sides = [[c] if isinstance(c, str) else list(c or [default[i]]) for i, c in enumerate(cells)]
            for i in range(max(map(len, sides))):
                rows.append((name if i == 0 else "", *(s[i] if i < len(s) else "" for s in sides)))
            continue
        items = item_differences(x, y, a, b)
        if items is None:
            rows.append(
                (name, *(windows(x, y) if isinstance(x, str) and isinstance(y, str) else (_short(x), _short(y))))
            )
        else:  # rows of two cells: the items span both values' columns
            rows += [(name if i == 0 else "", chunk) for i, chunk in enumerate(_wrap(items, 88))]
    return table(("field", a, b), rows, indent="  ", widths=(0, 44))


def _wrap(text: str, width: int) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width, break_on_hyphens=False) or [text]


def _where_they_split(c: Comparison) -> list[str]:
    lines = [f"  {trace.describe(c.divergence)}"]
    if c.first_differing_epoch:
        lines.append(f"  first differing epoch: {c.first_differing_epoch} (metrics.jsonl)")
    if c.differing_layers:
        lines.append(f"  layers whose final weights differ (model order): {', '.join(c.differing_layers)}")
    return lines


def _listing(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def report(c: Comparison, a: Path, b: Path) -> str:
    """The human-readable answer, first line = verdict."""
    lines = []
    if c.verdict == "REFUSED":
        lines.append(
            f"REFUSED: the runs differ in {len(c.differences)} field(s) that decide comparability;"
            " a bitwise comparison would mean nothing"
        )
    elif c.verdict == "NOT COMPARABLE":
        lines.append(f"NOT COMPARABLE ({'; '.join(c.notes)})")
        if c.equal is False:
            lines += _where_they_split(c)
    elif c.verdict == "IDENTICAL":
        singular = c.compared in (["1 output file"], ["1 traced step"])  # "weights", "metrics": plural
        lines.append(f"IDENTICAL: {_listing(c.compared)} {'is' if singular else 'are'} bitwise equal")
    elif c.verdict == "NOTHING COMPARED":
        lines.append("NOTHING COMPARED: neither run recorded a result")
    elif c.verdict == "DIFFERENT" and c.notes and c.notes[0].startswith(ONLY_OUTPUTS):
        lines.append(
            "DIFFERENT: same comparability key; weights, metrics and trace are bitwise equal, "
            "but output files your code wrote differ (what else did it write into them?)"
        )
    elif c.verdict == "DIFFERENT":
        lines.append("DIFFERENT: same comparability key, different results — a determinism bug")
        lines += _where_they_split(c)
    else:
        lines.append(c.verdict)
    if c.differences:
        lines += difference_table(c.differences, a.name, b.name, c.shown)
    if c.verdict == "REFUSED" and (words := comparability.launcher_modules_changed(c.differences)):
        lines.append(words)
    if c.verdict == "REFUSED" and not c.notes:
        lines.append("use --allow-mismatch to compare anyway (labelled NOT COMPARABLE)")
    lines += [f"  {note}" for note in c.notes if c.verdict != "NOT COMPARABLE"]
    return "\n".join(lines)
