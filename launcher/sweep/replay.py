"""``launch sweep replay SWEEP_DIR``: every completed job of a sweep replayed, one after another,
and a verdict for each; the report kept in ``<sweep>/verify/`` (the directory's name kept from
when the command was ``sweep verify``, so old sweeps and new ones keep their reports in one place).
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from launcher.errors import ConfigError, LauncherError
from launcher.record import tracking
from launcher.record.store import runs
from launcher.sweep.multirun import SWEEP, read_records


def replay(sweep_dir: Path, allow_mismatch: bool = False) -> int:
    """Replay every job of a sweep, one after another; 0 when every job reproduced, 3 when the only
    problem is a comparability key that differs here, else 1.

    Raises:
        ConfigError: ``sweep_dir`` is not a sweep directory (it has no ``sweep.json``).
    """
    from launcher.sweep import report as sweep_report
    from launcher.verdict import replay as verdict_replay

    if not (sweep_dir / SWEEP).is_file():
        raise ConfigError(f"{str(sweep_dir)!r} is not a sweep directory (no {SWEEP})")
    results = []
    for record in read_records(sweep_dir):
        if record["status"] != "complete" or not record.get("run_dir"):
            results.append(sweep_report.verdict(record, "NOT RUN", f"job {record['status']}"))
            continue
        print(f"[sweep] replay job {record['num']:03d}: replaying {record['run_dir']}", flush=True)
        try:
            r = verdict_replay.replay(Path(record["run_dir"]), allow_mismatch=allow_mismatch, echo=False)
            results.append(sweep_report.verdict(record, r.verdict, r.detail, r.new_run))
        except LauncherError as exc:
            name = "NOT COMPARABLE" if exc.exit_code == 3 else "FAILED"
            fields = [d[0] for d in getattr(exc, "differences", None) or []]
            detail = f"refused, these differ here: {', '.join(fields)}\n{exc}" if fields else str(exc)
            results.append(sweep_report.verdict(record, name, detail))
    report = sweep_report.replay_report(results)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    (sweep_dir / "verify").mkdir(exist_ok=True)
    runs.write_json(sweep_dir / "verify" / f"{stamp}.json", report)
    print(sweep_report.render_replay_report(report), flush=True)
    judged = next((Path(r["original"]) for r in results if r.get("original")), None)
    tracking.tag_sweep(sweep_dir, judged, {"verify": f"{report['reproduced']} of {report['total']} jobs reproduced"})
    return report["exit_code"]
