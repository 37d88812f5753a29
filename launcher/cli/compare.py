"""``launch compare RUN_A RUN_B``: the bitwise verdict over two sealed runs."""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

from launcher.cli import jsonout, storeargs
from launcher.cli.args import old_spelling, parser
from launcher.errors import ConfigError


def build_parser():
    """``launch compare``'s parser (its store.* words are taken before it parses)."""
    p = parser("compare", "Compare two sealed runs bit for bit (or within a tolerance).")
    p.add_argument("run_a", metavar="RUN_A", help="a sealed run's directory")
    p.add_argument("run_b", metavar="RUN_B", help="another sealed run's directory")
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
    jsonout.add_flag(p)
    storeargs.add_config_dir(p)
    return p


def main(argv: list[str]) -> int:
    from launcher.record.store import signing
    from launcher.verdict import compare

    words, argv = storeargs.split(argv)  # store.allowed_signers=F store.require_signed=true
    args = build_parser().parse_args(argv)
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
        with jsonout.to_stderr() if args.json else contextlib.nullcontext():
            result, text = migration.compare_runs(args.run_a, args.run_b, *tolerance, args.mapping, args.allow_mismatch)
        if args.json:
            return jsonout.emit(migration_document(result, Path(args.run_a), Path(args.run_b), tolerance))
        print(text)
        return result.exit_code
    a, b = Path(args.run_a), Path(args.run_b)
    with jsonout.to_stderr() if args.json else contextlib.nullcontext():
        sealed = compare.seals([a, b], signing.trust_from(storeargs.settings(words, args.config_dir)))
        result = compare.compare_runs(a, b, allow_mismatch=args.allow_mismatch, tolerance=tolerance)
        if args.json and args.plot:  # drawn before the document: a plot that cannot be written fails the command
            draw(a, b, args.plot)
    if args.json:
        return jsonout.emit(document(result, a, b, sealed, tolerance, args.plot))
    print(compare.report(result, a, b))
    print(compare.sealed_line([a, b], sealed))  # who sealed each run, on one line
    if same_run(a, b):
        print(
            f"note: both arguments are the same run ({args.run_a}): a run is always identical to itself; "
            "compare it with another run, or replay it (launch replay RUN)"
        )
    if args.plot:
        draw(a, b, args.plot)
        print(f"plot: {args.plot}")
    return result.exit_code


def same_run(a: Path, b: Path) -> bool:
    """Both arguments name one run (compare says so: a run is always identical to itself)."""
    return a.resolve() == b.resolve()


def draw(a: Path, b: Path, file: Path) -> None:
    """``--plot``: both runs' traced loss by step and where they split, into ``file``."""
    from launcher.record import trace
    from launcher.verdict import plots

    plots.draw_comparison(plots.comparison(trace.read(a), trace.read(b), f"A {a.name}", f"B {b.name}"), file)


def document(result, a: Path, b: Path, sealed: list, tolerance: tuple | None, plot: Path | None) -> dict:
    """``launch compare --json``: the verdict (a ``compare.Comparison``) and who sealed each run, as
    the text says them (docs/json.md)."""
    return jsonout.envelope(
        "compare",
        result.exit_code,
        verdict=result.verdict,
        runs=[
            jsonout.run_entry(path, weights, seal)
            for path, weights, seal in zip((a, b), result.weights, sealed, strict=True)
        ],
        differences=jsonout.differences(result.differences),
        **jsonout.comparison(result),
        same_run=same_run(a, b),
        tolerance=None if tolerance is None else {"rtol": tolerance[0], "atol": tolerance[1]},
        plot=None if plot is None else str(plot),
    )


def migration_document(result, a: Path, b: Path, tolerance: tuple) -> dict:
    """``launch compare --migration --json``: the verdict (a ``migration.Migration``), each variable and
    traced loss checked against the tolerance."""
    return jsonout.envelope(
        "compare",
        result.exit_code,
        verdict=result.verdict,
        runs=[jsonout.run_entry(a), jsonout.run_entry(b)],
        differences=jsonout.differences(result.differences),
        problem=result.problem,
        variables=[dataclasses.asdict(v) for v in result.variables],
        losses=[{"step": step, "a": x, "b": y, "ok": ok} for step, x, y, ok in result.losses],
        tolerance={"rtol": tolerance[0], "atol": tolerance[1]},
        migration=True,
    )
