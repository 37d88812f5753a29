"""``launch sweep verify SWEEP_DIR``: replay every job of a sweep."""

from __future__ import annotations

from pathlib import Path

from launcher.cli.args import parser


def main(argv: list[str]) -> int:
    from launcher.sweep import multirun

    p = parser("sweep", "Work with a sweep directory (<store>/sweeps/<id>).")
    p.add_argument("action", choices=["verify"], help="verify: replay every job, serially")
    p.add_argument("sweep_dir", metavar="SWEEP_DIR", type=Path)
    p.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="replay even where the environment's comparability key differs",
    )
    args = p.parse_args(argv)
    return multirun.verify(args.sweep_dir, allow_mismatch=args.allow_mismatch)
