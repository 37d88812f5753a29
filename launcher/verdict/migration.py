"""``launch compare A B --migration --tolerance RTOL,ATOL``: does a TF2 port compute what its TF1 model did?

Seed 004 (TensorFlow's guide to validating a TF1-to-TF2 migration) runs the TF1 model
and its port with the same seed and data, with stateful random ops seeded by their
count (``determinism.random_ops=num_random_ops``), then compares every variable and
every step's loss with explicit tolerances. Here both runs are ordinary sealed runs
that saved their trained variables (``train.save_weights=true``) and traced every step
(``determinism.trace_every=1``), so the check is a comparison of stored records:

- only code may differ between the runs (the script or entrypoint and what it
  imports, and the TF1 sessions' own configuration); any other key difference is
  REFUSED;
- variables are matched by order and shape, or by a mapping file of name pairs;
- each variable's largest absolute and relative error is shown against the tolerance
  (``|a - b| <= atol + rtol * |b|``, NumPy's ``allclose``), and so is each common
  traced step's loss;
- EQUIVALENT (0) when all are within tolerance, else NOT EQUIVALENT (1) naming the
  first variable, in order, or the first step out of tolerance.

It proves that the two runs, on this data and seed, for the steps run, computed the
same numbers within the tolerance. It does not prove that they agree on other data,
for more steps, or with other random draws (docs/tf1-migration.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from launcher.console import table
from launcher.errors import ConfigError, ExitCode

# Key fields a port may change: its code, and how its TF1 sessions were configured.
CODE_FIELDS = (
    "code.",
    "determinism.sessions",
    "config.train.script",
    "config.train.notebook",
    "config.train.entrypoint",
    "config.train.path",
    "config.train.name",
)


@dataclass
class VariableCheck:
    name_a: str
    name_b: str
    shape: tuple
    max_abs: float
    max_rel: float
    ok: bool


@dataclass
class Migration:
    verdict: str  # EQUIVALENT | NOT EQUIVALENT | REFUSED
    exit_code: int
    variables: list[VariableCheck] = field(default_factory=list)
    losses: list[tuple[int, float | None, float | None, bool]] = field(default_factory=list)  # step, a, b, ok
    problem: str | None = None  # the first variable or step out of tolerance, or why nothing matched
    differences: list[tuple[str, object, object]] = field(default_factory=list)


def blocking(differences: list[tuple[str, object, object]]) -> list[tuple[str, object, object]]:
    """The key differences a migration check refuses: everything but code."""
    return [d for d in differences if not d[0].startswith(CODE_FIELDS)]


def read_saved(run: Path, result: dict) -> list[tuple[str, np.ndarray]]:
    """(name, value) of a run's saved variables, in order; ConfigError when it saved none."""
    name = result.get("weights_file")
    if name != "weights.npz" or not (run / name).is_file():
        raise ConfigError(
            f"run {run.name} saved no variables to compare: run it with train.save_weights=true "
            "(and determinism.trace_every=1 to compare every step's loss)"
        )
    with np.load(run / name) as f:
        return [(key.split(" ", 1)[1], f[key]) for key in sorted(f.files)]


def read_mapping(path: str) -> list[tuple[str, str]]:
    """A mapping file: a JSON list of [name in run A, name in run B] pairs."""
    try:
        pairs = json.loads(Path(path).read_text())
        return [(str(a), str(b)) for a, b in pairs]
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"--mapping {path}: not a JSON list of [name_a, name_b] pairs ({exc})") from None


def check(
    a: list[tuple[str, np.ndarray]],
    b: list[tuple[str, np.ndarray]],
    losses_a: dict[int, float | None],
    losses_b: dict[int, float | None],
    rtol: float,
    atol: float,
    mapping: list[tuple[str, str]] | None = None,
) -> Migration:
    """The verdict over two runs' variables (in order) and traced losses (by step). Pure."""
    result = Migration("EQUIVALENT", ExitCode.OK)
    pairs = _pairs(a, b, mapping, result)
    for (name_a, x), (name_b, y) in pairs:
        if x.shape != y.shape:
            result.variables.append(VariableCheck(name_a, name_b, tuple(x.shape), float("inf"), float("inf"), False))
            result.problem = result.problem or f"variable {name_a} / {name_b}: shape {x.shape} vs {y.shape}"
            continue
        diff = np.abs(x.astype(np.float64) - y.astype(np.float64))
        scale = np.abs(y.astype(np.float64))
        max_abs = float(diff.max()) if diff.size else 0.0
        max_rel = float((diff / np.maximum(scale, np.finfo(np.float64).tiny)).max()) if diff.size else 0.0
        ok = bool(np.all(diff <= atol + rtol * scale))
        result.variables.append(VariableCheck(name_a, name_b, tuple(x.shape), max_abs, max_rel, ok))
        if not ok and result.problem is None:
            result.problem = f"variable {name_a} / {name_b}: max abs error {max_abs:.3g}, max rel error {max_rel:.3g}"
    for step in sorted(set(losses_a) & set(losses_b)):
        la, lb = losses_a[step], losses_b[step]
        if la is None and lb is None:
            continue
        ok = la is not None and lb is not None and abs(la - lb) <= atol + rtol * abs(lb)
        result.losses.append((step, la, lb, ok))
    bad_step = next((s for s, _, _, ok in result.losses if not ok), None)
    if bad_step is not None and result.problem is None:
        _, la, lb, _ = next(r for r in result.losses if r[0] == bad_step)
        result.problem = f"step {bad_step}: loss {la!r} vs {lb!r}"
    if result.problem is not None:
        result.verdict, result.exit_code = "NOT EQUIVALENT", ExitCode.FAILED
    return result


def _pairs(a, b, mapping, result: Migration) -> list:
    """Pairs of variables: by the mapping, else in order and shape (a variable with no counterpart
    of its shape, in order, is the problem: a missing bias, a layer too many)."""
    if mapping:
        by_a, by_b = dict(a), dict(b)
        missing = [n for n, _ in mapping if n not in by_a] + [n for _, n in mapping if n not in by_b]
        if missing:
            result.problem = f"the mapping names variables the runs do not have: {', '.join(missing[:4])}"
            return []
        return [((na, by_a[na]), (nb, by_b[nb])) for na, nb in mapping]
    if [x.shape for _, x in a] == [y.shape for _, y in b]:
        return list(zip(a, b, strict=True))
    pairs, j = [], 0
    for name, x in a:
        k = next((k for k in range(j, len(b)) if b[k][1].shape == x.shape), None)
        if k is None:
            result.problem = result.problem or f"variable {name} {tuple(x.shape)} has no counterpart of that shape"
            continue
        pairs.append(((name, x), b[k]))
        j = k + 1
    if result.problem is None and len(a) != len(b):
        result.problem = f"the runs trained {len(a)} and {len(b)} variables: give --mapping to pair them"
    return pairs


def render(m: Migration, rtol: float, atol: float, a: str, b: str) -> str:
    """The verdict line, the per-variable table and the losses' summary."""
    tol = f"rtol={rtol:g}, atol={atol:g}"
    if m.verdict == "EQUIVALENT":
        lines = [f"EQUIVALENT: {len(m.variables)} variables and {len(m.losses)} steps' losses within {tol}"]
    else:
        lines = [f"NOT EQUIVALENT ({tol}): {m.problem}"]
    if m.variables:
        head = (f"variable ({a} / {b})", "shape", "max abs err", "max rel err", "within")
        rows = [
            (f"{v.name_a} / {v.name_b}", str(v.shape), f"{v.max_abs:.3g}", f"{v.max_rel:.3g}", "yes" if v.ok else "NO")
            for v in m.variables
        ]
        lines += table(head, rows, indent="  ")
    if m.losses:
        worst = max(abs((la or 0) - (lb or 0)) for _, la, lb, _ in m.losses)
        bad = sum(1 for *_, ok in m.losses if not ok)
        lines.append(
            f"  losses at {len(m.losses)} common traced steps: max abs difference {worst:.3g}; {bad} out of tolerance"
        )
    else:
        lines.append("  no step's loss was compared (trace every step with determinism.trace_every=1)")
    return "\n".join(lines)


def compare_runs(
    a: str | Path,
    b: str | Path,
    rtol: float,
    atol: float,
    mapping: str | None = None,
    allow_mismatch: bool = False,
) -> tuple[Migration, str]:
    """Load and check two sealed runs; the verdict and its text (a refusal lists the fields)."""
    from launcher.verdict import compare

    ra, rb = compare.load(a), compare.load(b)
    refused = blocking(compare.key_differences(ra, rb))
    if refused and not allow_mismatch:
        text = [
            f"REFUSED: the runs differ in {len(refused)} field(s) besides code; --migration compares a port "
            "with its model, and admits differences in code only"
        ]
        text += compare.difference_table(refused, ra.path.name, rb.path.name)
        return Migration("REFUSED", ExitCode.REFUSED, differences=refused), "\n".join(text)
    losses_a = {p["step"]: p.get("loss") for p in ra.steps}
    losses_b = {p["step"]: p.get("loss") for p in rb.steps}
    pairs = read_mapping(mapping) if mapping else None
    m = check(read_saved(ra.path, ra.result), read_saved(rb.path, rb.result), losses_a, losses_b, rtol, atol, pairs)
    text = render(m, rtol, atol, ra.path.name, rb.path.name)
    if refused:  # forced
        text += "\n  forced: the runs also differ in " + ", ".join(d[0] for d in refused)
    return m, text
