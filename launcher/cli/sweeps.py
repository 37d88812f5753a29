"""``launch sweep replay SWEEP_DIR``: replay every job of a sweep; ``launch sweep plot SWEEP_DIR FILE.png``.

``launch sweep verify`` is the old word for ``replay`` (``verify`` checks a seal), kept one more release.
The module is ``sweeps``, not ``sweep``: no module is named like a package of the launcher
(``launcher.sweep``), so an import says which one it means.
"""

from __future__ import annotations

from pathlib import Path

from launcher.cli import jsonout
from launcher.cli.args import parser, renamed
from launcher.errors import ConfigError, ExitCode


def build_parser():
    """``launch sweep``'s parser (``sweep verify``, the old word, is taken before it parses)."""
    p = parser("sweep", "Work with a sweep directory (<store>/sweeps/<id>).")
    p.add_argument(
        "action",
        choices=["replay", "plot"],
        metavar="{replay,plot}",
        help="replay: replay every job, serially; plot: each metric's spread across the jobs",
    )
    p.add_argument("sweep_dir", metavar="SWEEP_DIR", type=Path, help="the sweep's directory, <store>/sweeps/<id>")
    p.add_argument("file", nargs="?", metavar="FILE.png", type=Path, help="plot: the PNG file to write")
    p.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="replay even where the environment's comparability key differs",
    )
    jsonout.add_flag(p)
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(new_word(argv))
    if args.action == "plot":
        if args.json:
            raise ConfigError("--json is for sweep replay; sweep plot writes a picture")
        return plot(args.sweep_dir, args.file)
    if args.file is not None:
        raise ConfigError(f"sweep replay takes one directory, got an extra argument {str(args.file)!r}")
    from launcher.sweep import replay

    if not args.json:
        return replay.replay(args.sweep_dir, allow_mismatch=args.allow_mismatch)
    with jsonout.to_stderr():  # each job's progress line
        report = replay.judge(args.sweep_dir, allow_mismatch=args.allow_mismatch)
    return jsonout.emit(document(report))


def new_word(argv: list[str]) -> list[str]:
    """``argv`` with ``verify``, the old word of the action ``replay``, as ``replay`` (said on stderr)."""
    words = list(argv)
    first = next((i for i, word in enumerate(words) if not word.startswith("-")), None)
    if first is not None and words[first] == "verify":
        renamed("sweep verify", "sweep replay")
        words[first] = "replay"
    return words


def document(report: dict) -> dict:
    """``launch sweep replay --json``: the sweep's replay report (``sweep.replay.judge``), each job with
    its verdict, its runs and the key fields that differ (docs/json.md)."""
    jobs = [
        {
            "num": job["num"],
            "seed": job["seed"],
            "verdict": job["verdict"],
            "runs": [
                jsonout.run_entry(path, jsonout.weights_of(path)) for path in (job["original"], job["new_run"]) if path
            ],
            "differences": jsonout.differences(job["differences"]),
            "detail": job["detail"],
        }
        for job in report["jobs"]
    ]
    return jsonout.envelope(
        "sweep replay",
        report["exit_code"],
        sweep=report["sweep_dir"],
        report=report["path"],
        reproduced=report["reproduced"],
        total=report["total"],
        counts=report["counts"],
        jobs=jobs,
    )


def plot(sweep_dir: Path, file: Path | None) -> int:
    """Draw each metric's per-epoch spread across the sweep's completed jobs into ``file``."""
    from launcher.record.store import runs
    from launcher.sweep import multirun
    from launcher.verdict import plots

    if file is None:
        raise ConfigError("sweep plot needs a file: launch sweep plot SWEEP_DIR FILE.png")
    if not (sweep_dir / multirun.SWEEP).is_file():
        raise ConfigError(f"{str(sweep_dir)!r} is not a sweep directory (no {multirun.SWEEP})")
    plots.check_available()
    meta = runs.read_json(sweep_dir / multirun.SWEEP)
    jobs = []
    for r in multirun.read_records(sweep_dir):
        if r["status"] == "complete" and r.get("run_dir"):
            name = f"{r['num']:03d} {multirun.label(r['overrides'], meta.get('swept', []))}"
            jobs.append((name, plots.read_metrics(Path(r["run_dir"]))))
    done = len(jobs)
    title = f"sweep {sweep_dir.name}: {done} completed job{'s' if done != 1 else ''}; mean ± sample std across jobs"
    plots.draw_spread(plots.spread(jobs), title, file)
    print(f"plot: {file}")
    return ExitCode.OK
