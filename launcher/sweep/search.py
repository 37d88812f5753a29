"""Optimizing sweepers (``hydra/sweeper=optuna``): checked and seeded before the first trial.

A basic sweep's jobs are known before it starts. An optimizing sweeper proposes its
trials a batch at a time from the results so far, so the launcher checks the search
space at its representative values (every choice, both bounds of an interval), seeds
the sampler from the sweep's seed (recorded in ``sweep.json``) so that the same sweep
proposes the same trials in the same order, and each trial hands its objective metric
back to the sweeper. Where a sweeper cannot be made reproducible, ``note`` says why: the
sweep prints it at the start and the summary carries it. Pure functions, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

BASIC = "basic"
OPTUNA = "optuna"
MNIST_METRICS = ("accuracy", "loss", "val_accuracy", "val_loss")


@dataclass(frozen=True)
class Search:
    """How an optimizing sweeper searches, and whether the same sweep searches the same way."""

    sweeper: str  # "optuna", or another sweeper's _target_
    trials: int | None  # hydra.sweeper.n_trials, when the sweeper has one
    batch: int | None  # hydra.sweeper.n_jobs: trials proposed, and run, at once
    objective: str  # the final metric each trial reports (sweep.objective)
    direction: object  # hydra.sweeper.direction: minimize | maximize (or a list)
    sampler: str | None  # the sampler's class, e.g. TPESampler
    seed: int | None  # the sampler's seed
    seed_override: str | None  # the Hydra override that sets it, when the user did not
    reproducible: bool
    note: str  # why the same sweep does (or does not) propose the same trials

    def to_dict(self) -> dict:
        return asdict(self)


def kind(sweeper_target: str) -> str:
    """``basic``, ``optuna``, or the sweeper's ``_target_`` for any other sweeper plugin."""
    if sweeper_target.endswith("BasicSweeper"):
        return BASIC
    if "optuna" in sweeper_target.lower():
        return OPTUNA
    return sweeper_target


def representatives(override) -> list[str]:
    """The values of a Hydra override that stand for all it can take: itself, every
    value of a list, ``range()`` or ``choice()``, both bounds of an ``interval()``."""
    if not override.is_sweep_override():
        return [override.input_line.partition("=")[2]]
    if override.is_discrete_sweep():
        return list(override.sweep_string_iterator())
    value = override.value()  # an IntervalSweep
    return [str(value.start), str(value.end)]


def check_jobs(fixed: list[str], space: list) -> list[list[str]]:
    """The configs that stand for a search space, to compose and validate before any trial:
    each parameter at each of its representative values, the others at their first."""
    first = {o.get_key_element(): representatives(o)[0] for o in space}
    jobs = []
    for o in space:
        key = o.get_key_element()
        for value in representatives(o):
            job = {**first, key: value}
            jobs.append([*fixed, *(f"{k}={v}" for k, v in job.items())])
    return jobs or [list(fixed)]


def plan(sweeper: Mapping, target: str, sweep_seed: int, level: str, objective: str) -> Search:
    """How ``sweeper`` (the composed ``hydra.sweeper``) searches, seeded from ``sweep_seed``."""
    name = kind(target)
    trials, batch = sweeper.get("n_trials"), sweeper.get("n_jobs")
    direction = sweeper.get("direction", "minimize")
    if name != OPTUNA:
        note = f"hydra/sweeper {target}: launch cannot seed this sweeper, so the same sweep may propose other trials"
        return Search(name, trials, batch, objective, direction, None, None, None, False, note)
    sampler = dict(sweeper.get("sampler") or {})
    sampler_name = str(sampler.get("_target_", "")).rsplit(".", 1)[-1] or None
    seed, override = None, None
    if "seed" in sampler:
        seed = sampler["seed"]
        if seed is None:
            seed, override = sweep_seed, f"hydra.sweeper.sampler.seed={sweep_seed}"
        note = f"{sampler_name} seeded with {seed}: the same sweep proposes the same trials in the same order"
        reproducible = True
    else:
        note = (
            f"{sampler_name} takes no seed and picks the next point at random: the same sweep "
            "may run its trials in another order"
        )
        reproducible = False
    if sweeper.get("storage"):
        note = "hydra.sweeper.storage is set: a second sweep continues the stored study, so it proposes other trials"
        reproducible = False
    elif reproducible and level == "off":
        note = "determinism=off: trials' results differ from run to run, and so do the trials proposed from them"
        reproducible = False
    return Search(name, trials, batch, objective, direction, sampler_name, seed, override, reproducible, note)


def objective_value(record: Mapping, objective: str) -> float | None:
    """What a trial reports to the sweeper: its final ``objective`` metric, or None (the
    sweeper marks the trial failed) when the job did not complete or has no such metric."""
    if record.get("status") != "complete":
        return None
    value = (record.get("final_metrics") or {}).get(objective)
    if value is None or not math.isfinite(float(value)):
        return None
    return float(value)


def best(records: list[dict], objective: str, direction: object) -> dict | None:
    """The completed trial with the best ``objective`` (the first of equals), or None."""
    scored = [(objective_value(r, objective), r) for r in records]
    scored = [(v, r) for v, r in scored if v is not None]
    if not scored or not isinstance(direction, str):
        return None
    sign = -1.0 if direction == "maximize" else 1.0
    value, record = min(scored, key=lambda vr: (sign * vr[0], vr[1]["num"]))
    return {"num": record["num"], "objective": objective, "value": value}
