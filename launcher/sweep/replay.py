"""``launch sweep replay SWEEP_DIR``: every completed job of a sweep replayed, one after another,
and a verdict for each; the report kept in ``<sweep>/verify/`` (the directory's name kept from
when the command was ``sweep verify``, so old sweeps and new ones keep their reports in one place).
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from launcher import console
from launcher.errors import ConfigError, ExitCode, LauncherError
from launcher.record import tracking
from launcher.record.store import runs
from launcher.sweep.multirun import SWEEP, read_records


def replay(sweep_dir: Path, allow_mismatch: bool = False) -> int:
    """Replay every job of a sweep, one after another, and print the report's table (``judge``); 0 when
    every job reproduced, 3 when the only problem is a comparability key that differs here, else 1.

    Raises:
        ConfigError: ``sweep_dir`` is not a sweep directory (it has no ``sweep.json``).
    """
    from launcher.sweep import report as sweep_report

    report = judge(sweep_dir, allow_mismatch)
    print(sweep_report.render_replay_report(report), flush=True)
    return report["exit_code"]


def judge(sweep_dir: Path, allow_mismatch: bool = False) -> dict:
    """Replay every job of a sweep, one after another: the report (``report.replay_report``: each job's
    verdict, the counts, the exit code), kept in ``<sweep>/verify/<time>.json``, whose path it names
    (``path``), as it names the sweep (``sweep_dir``). The table (``replay``) and ``launch sweep replay
    --json``'s document are both made from it.

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
        console.log.getChild("sweep").info("replay job %03d: replaying %s", record["num"], record["run_dir"])
        try:
            r = verdict_replay.replay(Path(record["run_dir"]), allow_mismatch=allow_mismatch, echo=False)
            found = r.comparison.differences if r.comparison is not None else []
            results.append(sweep_report.verdict(record, r.verdict, r.detail, r.new_run, found))
        except LauncherError as exc:
            name = "NOT COMPARABLE" if exc.exit_code == ExitCode.REFUSED else "FAILED"
            found = getattr(exc, "differences", None) or []
            fields = [d[0] for d in found]
            detail = f"refused, these differ here: {', '.join(fields)}\n{exc}" if fields else str(exc)
            results.append(sweep_report.verdict(record, name, detail, differences=found))
    report = sweep_report.replay_report(results)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    (sweep_dir / "verify").mkdir(exist_ok=True)
    path = sweep_dir / "verify" / f"{stamp}.json"
    runs.write_json(path, report)
    judged = next((Path(r["original"]) for r in results if r.get("original")), None)
    tracking.tag_sweep(sweep_dir, judged, {"verify": f"{report['reproduced']} of {report['total']} jobs reproduced"})
    return {**report, "sweep_dir": str(sweep_dir.resolve()), "path": str(path.resolve())}
