"""What a sweep came to, as data and as text: pure functions over the job records.

``summarize`` turns the ``jobs/NNN.json`` records into ``summary.json`` (per-job rows,
per-metric mean/std/min/max over the completed jobs, the number of distinct weight
hashes); ``render`` prints it as a table. ``replay_report`` and
``render_replay_report`` do the same for ``launch sweep replay``.
"""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path

from launcher.console import table
from launcher.errors import ExitCode

SUMMARY_SCHEMA = 1
HASH_CHARS = 16  # of the weights sha256 in the table; summary.json has all 64


def summarize(records: list[dict]) -> dict:
    """The summary of a sweep. ``ok`` only when every job completed."""
    done = [r for r in records if r["status"] == "complete"]
    names = sorted({name for r in done for name in r.get("final_metrics", {})})
    metrics = {}
    for name in names:
        values = [float(r["final_metrics"][name]) for r in done if name in r["final_metrics"]]
        metrics[name] = {
            "n": len(values),
            "mean": statistics.fmean(values),
            "std": statistics.stdev(values) if len(values) > 1 else 0.0,  # sample std
            "min": min(values),
            "max": max(values),
        }
    hashes = {r["weights_sha256"] for r in done if r.get("weights_sha256")}
    return {
        "schema": SUMMARY_SCHEMA,
        "jobs": [_row(r) for r in records],
        "counts": dict(sorted(Counter(r["status"] for r in records).items())),
        "metrics": metrics,
        "distinct_weights": len(hashes),
        "ok": bool(records) and len(done) == len(records),
    }


def _row(r: dict) -> dict:
    keys = ("num", "overrides", "seed", "status", "slot", "run_dir", "final_metrics", "weights_sha256", "error")
    return {k: r.get(k) for k in keys}


def render(summary: dict) -> str:
    """The table printed at the end of a sweep: a column per swept key besides the seed;
    for an optimizing sweeper, the best trial and whether the search is reproducible."""
    names = list(summary["metrics"])
    swept = [k for k in summary.get("swept", []) if k.lstrip("+~") != "seed"]
    head = ["job", "seed", *swept, "status", *names, "weights_sha256"]
    rows = []
    for r in summary["jobs"]:
        values = [_num(r["final_metrics"].get(n)) for n in names]
        chosen = [swept_value(r.get("overrides") or [], k) for k in swept]
        last = (r["weights_sha256"] or "")[:HASH_CHARS] or _short(r["error"] or "")
        rows.append([f"{r['num']:03d}", _text(r["seed"]), *chosen, r["status"], *values, last])
    blank = [""] * len(swept)
    for stat in ("mean", "std", "min", "max") if names else ():
        rows.append([stat, "", *blank, "", *[_num(summary["metrics"][n][stat]) for n in names], ""])
    total = len(summary["jobs"])
    complete = summary["counts"].get("complete", 0)
    lines = table(head, rows)
    lines.append(
        f"{complete} of {total} jobs complete; {summary['distinct_weights']} distinct weight "
        f"hash(es); summary: {Path(summary.get('sweep_dir', '.')) / 'summary.json'}"
    )
    note = seed_note(summary)
    if note:
        lines.append(note)
    search = summary.get("search")
    if search:
        found = search.get("best")
        if found:
            lines.append(f"best: job {found['num']:03d} ({found['objective']}={found['value']:.4f})")
        mark = "reproducible" if search["reproducible"] else "NOT REPRODUCIBLE"
        lines.append(f"{mark}: {search['note']}")
    return "\n".join(lines)


def swept_value(overrides: list[str], key: str) -> str:
    """The value a job's overrides give ``key`` (``+seed``, ``train.learning_rate``), or ''."""
    for line in overrides:
        name, _, value = line.partition("=")
        if name.lstrip("+~") == key.lstrip("+~"):
            return _short(value, 24)
    return ""


def verdict(record: dict, name: str, detail: str, new_run: Path | None = None, differences: list | tuple = ()) -> dict:
    """One job's line of a sweep's replay report; ``differences``: the key fields that differ (the run's
    value, then its replay's or this environment's), as ``[field, a, b]``."""
    return {
        "num": record["num"],
        "seed": record.get("seed"),
        "original": record.get("run_dir"),
        "new_run": str(new_run) if new_run else None,
        "verdict": name,
        "detail": detail,
        "differences": [[str(d[0]), d[1], d[2]] for d in differences],
    }


def replay_report(results: list[dict]) -> dict:
    """Counts and the exit code: 0 all reproduced; 3 only incomparable; else 1."""
    counts = Counter(r["verdict"] for r in results)
    reproduced = counts.get("REPRODUCED", 0)
    if results and reproduced == len(results):
        code = ExitCode.OK
    elif counts.get("NOT COMPARABLE", 0) + reproduced == len(results) and results:
        code = ExitCode.REFUSED
    else:
        code = ExitCode.FAILED
    return {
        "jobs": results,
        "counts": dict(sorted(counts.items())),
        "reproduced": reproduced,
        "total": len(results),
        "exit_code": code,
    }


def render_replay_report(report: dict) -> str:
    """The replay table; a refused job's detail is not shortened: it names the fields that differ."""
    rows = [
        [
            f"{r['num']:03d}",
            _text(r["seed"]),
            r["verdict"],
            _first_line(r["detail"], limit=None if (r["detail"] or "").startswith("refused, ") else 72),
        ]
        for r in report["jobs"]
    ]
    lines = table(["job", "seed", "verdict", "detail"], rows)
    lines.append(f"{report['reproduced']} of {report['total']} jobs reproduced bit for bit")
    return "\n".join(lines)


def _first_line(text: str | None, limit: int | None = 72) -> str:
    line = (text or "").strip().split("\n", 1)[0]
    return line if limit is None else _short(line, limit)


def _short(text: str, limit: int = 72) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _num(value: object) -> str:
    return "" if value is None else f"{float(value):.4f}"


def _text(value: object) -> str:
    return "" if value is None else str(value)


def seed_note(summary: dict) -> str | None:
    """Fewer distinct weights than completed jobs of different seeds, and the jobs seed
    themselves: the sweep's seed never reached them. Names the calls."""
    complete = [j for j in summary.get("jobs", []) if j.get("status") == "complete"]
    seeds = {j.get("seed") for j in complete}
    calls = summary.get("seeds_set_by_jobs") or []
    if not calls or len(seeds) < 2 or summary.get("distinct_weights", 0) >= len(complete):
        return None
    shown = ", ".join(f"{c['call']}({c['value']!r}) at {c['where']}" for c in calls[:3])
    return (
        f"note: {len(seeds)} seeds gave {summary['distinct_weights']} distinct weight hash(es): the seed did not "
        f"reach the jobs, which seed themselves ({shown}); use launcher.seed() there instead"
    )
