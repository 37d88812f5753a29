"""The subcommands of ``launch``: thin argument parsing over the modules that do the work."""

from __future__ import annotations

from pathlib import Path

from launcher.cli import parser, subcommand


@subcommand("compare", "RUN_A RUN_B [--force] [--tolerance RTOL,ATOL]: bitwise verdict")
def compare_command(argv: list[str]) -> int:
    from launcher import compare

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


def _rerun_args(name: str, description: str, argv: list[str]):
    """The arguments shared by replay and resume: a run, and --allow-mismatch."""
    p = parser(name, description)
    p.add_argument("run")
    p.add_argument("--allow-mismatch", action="store_true", help="run even when the environment differs")
    return p.parse_args(argv)


def _refused(exc) -> int:
    """Print a comparability refusal of the environment, field by field."""
    from launcher import compare

    print(f"REFUSED: {exc}")
    print("\n".join(compare.difference_table(exc.differences, "stored run", "here, now")))
    return exc.exit_code


@subcommand("replay", "RUN [--allow-mismatch]: rerun a stored run, say if it reproduced")
def replay_command(argv: list[str]) -> int:
    from launcher import replay
    from launcher.errors import NotComparable

    args = _rerun_args("replay", "Rerun a stored run from its config and seed and compare bit for bit.", argv)
    try:
        result = replay.replay(args.run, allow_mismatch=args.allow_mismatch)
    except NotComparable as exc:
        return _refused(exc)
    print(f"{result.verdict}: replay {result.new_run} of {result.original}")
    print(result.detail)
    return result.exit_code


@subcommand("resume", "RUN [--allow-mismatch]: continue an interrupted run from its last checkpoint")
def resume_command(argv: list[str]) -> int:
    from launcher import job, resume
    from launcher.errors import NotComparable

    args = _rerun_args("resume", "Continue an interrupted run from its newest complete checkpoint.", argv)
    try:
        outcome, notes = resume.resume(args.run, allow_mismatch=args.allow_mismatch)
    except NotComparable as exc:
        return _refused(exc)
    for note in notes:
        print(f"[launch] {note}")
    print(job.summary_line(outcome))
    return 0 if outcome.ok else (130 if outcome.status == "interrupted" else 1)


@subcommand("runs", "[--store DIR] [--task T] [--status S] [--key PREFIX]: list runs, newest first")
def runs_command(argv: list[str]) -> int:
    from launcher import index

    p = parser("runs", "List the runs of a store from its index, newest first.")
    p.add_argument("--store", default="runs", help="the store root (default ./runs)")
    p.add_argument("--task")
    p.add_argument("--status", choices=["running", "complete", "failed", "interrupted"])
    p.add_argument("--key", help="comparability-key hash prefix")
    args = p.parse_args(argv)
    store = Path(args.store)
    if not store.is_dir():
        from launcher.errors import StoreError

        raise StoreError(f"store {args.store!r} does not exist")
    rows = index.query(store, task=args.task, status=args.status, key=args.key)
    header = f"{'id':<23} {'time':<25} {'task':<7} {'level':<7} {'seed':>10} {'status':<11} {'key':<12} " \
             f"{'weights':<12} metrics"  # fmt: skip
    print(header)
    for r in rows:
        key, weights = (r.key_sha256 or "-")[:12], (r.weights_sha256 or "-")[:12]
        print(f"{r.id:<23} {r.time:<25} {r.task:<7} {r.level:<7} {r.seed!s:>10} {r.status:<11} "
              f"{key:<12} {weights:<12} {index.metrics_text(r)}")  # fmt: skip
    print(f"{len(rows)} run(s)")
    return 0


@subcommand("audit", "[OVERRIDES...] [audit.repeats=N]: which knobs change the bits, and where")
def audit_command(argv: list[str]) -> int:
    from launcher import audit
    from launcher.errors import ConfigError

    if any(a in ("-h", "--help") for a in argv):
        print(audit.USAGE)
        return 0
    if any(a.startswith("-") for a in argv):
        raise ConfigError(f"launch audit: unknown option {next(a for a in argv if a.startswith('-'))!r}; "
                          "it takes overrides and audit.KEY=VALUE (see launch audit --help)")  # fmt: skip
    return audit.run(argv)


# Modules that register their own subcommands (imported last: they import this CLI).
from launcher import image_commands, sweep  # noqa: E402,F401,I001
