"""``launch compare RUN_A RUN_B``: the bitwise verdict over two sealed runs."""

from __future__ import annotations

from pathlib import Path

from launcher.cli import storeargs
from launcher.cli.args import old_spelling, parser
from launcher.errors import ConfigError


def main(argv: list[str]) -> int:
    from launcher.record.store import signing
    from launcher.verdict import compare

    words, argv = storeargs.split(argv)  # store.allowed_signers=F store.require_signed=true

    p = parser("compare", "Compare two sealed runs bit for bit (or within a tolerance).")
    p.add_argument("run_a", metavar="RUN_A")
    p.add_argument("run_b", metavar="RUN_B")
    p.add_argument(
        "--allow-mismatch",
        dest="allow_mismatch",
        action="store_true",
        help="compare even when the keys differ (labelled NOT COMPARABLE)",
    )
    old_spelling(p, "--force", "--allow-mismatch", "allow_mismatch")
    p.add_argument("--tolerance", metavar="RTOL,ATOL", help="equivalence within allclose tolerances")
    p.add_argument(
        "--migration",
        action="store_true",
        help="a TF2 port against its TF1 model: every variable and step's loss within --tolerance",
    )
    p.add_argument("--mapping", metavar="FILE", help="--migration: a JSON list of [name_a, name_b] variable pairs")
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        type=Path,
        help="draw both runs' traced loss by step and where they split (needs matplotlib)",
    )
    storeargs.add_config_dir(p)
    args = p.parse_args(argv)
    tolerance = compare.parse_tolerance(args.tolerance) if args.tolerance else None
    if args.plot:
        from launcher.verdict import plots

        if args.migration:
            raise ConfigError("--plot draws where two runs' bits split; it does not apply to --migration")
        plots.check_available()
    if args.migration or args.mapping:
        from launcher.verdict import migration

        if tolerance is None or not args.migration:
            raise ConfigError("--migration needs --tolerance RTOL,ATOL (and --mapping needs --migration)")
        result, text = migration.compare_runs(args.run_a, args.run_b, *tolerance, args.mapping, args.allow_mismatch)
        print(text)
        return result.exit_code
    sealed = compare.sealed_by([args.run_a, args.run_b], signing.trust_from(storeargs.settings(words, args.config_dir)))
    result = compare.compare_runs(args.run_a, args.run_b, allow_mismatch=args.allow_mismatch, tolerance=tolerance)
    print(compare.report(result, Path(args.run_a), Path(args.run_b)))
    print("; ".join(sealed))  # who sealed each run, on one line
    if Path(args.run_a).resolve() == Path(args.run_b).resolve():
        print(
            f"note: both arguments are the same run ({args.run_a}): a run is always identical to itself; "
            "compare it with another run, or replay it (launch replay RUN)"
        )
    if args.plot:
        from launcher.record import trace

        a, b = Path(args.run_a), Path(args.run_b)
        plots.draw_comparison(plots.comparison(trace.read(a), trace.read(b), f"A {a.name}", f"B {b.name}"), args.plot)
        print(f"plot: {args.plot}")
    return result.exit_code
