"""``launch compare RUN_A RUN_B``: the bitwise verdict over two sealed runs."""

from __future__ import annotations

from pathlib import Path

from launcher.cli.args import parser


def main(argv: list[str]) -> int:
    from launcher.verdict import compare

    p = parser("compare", "Compare two sealed runs bit for bit (or within a tolerance).")
    p.add_argument("run_a")
    p.add_argument("run_b")
    p.add_argument("--force", action="store_true", help="compare even when the keys differ")
    p.add_argument("--tolerance", metavar="RTOL,ATOL", help="equivalence within allclose tolerances")
    args = p.parse_args(argv)
    tolerance = compare.parse_tolerance(args.tolerance) if args.tolerance else None
    result = compare.compare_runs(args.run_a, args.run_b, force=args.force, tolerance=tolerance)
    print(compare.report(result, Path(args.run_a), Path(args.run_b)))
    return result.exit_code
