"""``launch sweep replay SWEEP_DIR``: replay every job of a sweep; ``launch sweep plot SWEEP_DIR FILE.png``.

``launch sweep verify`` is the old word for ``replay`` (``verify`` checks a seal), kept one more release.
The module is ``sweeps``, not ``sweep``: no module is named like a package of the launcher
(``launcher.sweep``), so an import says which one it means.
"""

from __future__ import annotations

from pathlib import Path

from launcher.cli.args import parser, renamed
from launcher.errors import ConfigError


def main(argv: list[str]) -> int:

    p = parser("sweep", "Work with a sweep directory (<store>/sweeps/<id>).")
    p.add_argument(
        "action",
        choices=["replay", "plot", "verify"],
        metavar="{replay,plot}",
        help="replay: replay every job, serially; plot: each metric's spread across the jobs",
    )
    p.add_argument("sweep_dir", metavar="SWEEP_DIR", type=Path)
    p.add_argument("file", nargs="?", metavar="FILE.png", type=Path, help="plot: the PNG file to write")
    p.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="replay even where the environment's comparability key differs",
    )
    args = p.parse_args(argv)
    if args.action == "verify":
        renamed("sweep verify", "sweep replay")
        args.action = "replay"
    if args.action == "plot":
        return plot(args.sweep_dir, args.file)
    if args.file is not None:
        raise ConfigError(f"sweep replay takes one directory, got an extra argument {str(args.file)!r}")
    from launcher.sweep import replay

    return replay.replay(args.sweep_dir, allow_mismatch=args.allow_mismatch)


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
    return 0
