"""``launch gc``: remove the objects of a store that no run references (``launcher.record.store.gc``)."""

from __future__ import annotations

from launcher.cli import storeargs
from launcher.cli.args import parser
from launcher.errors import ExitCode


def build_parser():
    """``launch gc``'s parser (its store.* words are taken before it parses)."""
    p = parser(
        "gc",
        "Remove the objects of a store that no run references (mark and sweep; "
        "safe while other launches write to the store).",
    )
    storeargs.add_store(p)
    p.add_argument("--dry-run", action="store_true", help="say what would be removed; remove nothing")
    storeargs.add_config_dir(p)
    return p


def main(argv: list[str]) -> int:
    """Mark and sweep the store's objects; each one removed (or, ``--dry-run``, that would be) is
    printed by its sha256, then the space freed. Exit 1 when an object could not be removed; 2
    (``StoreError``, nothing removed) when the store is missing, not a directory or a run
    directory, or busy, or the mark cannot tell what a run references (a directory it cannot
    list, a ``snapshot.json`` replay would refuse, a link to a run outside the store)."""
    from launcher.record.store import gc

    words, argv = storeargs.split(argv)  # store.root=DIR, as --store DIR
    args = build_parser().parse_args(argv)
    root = storeargs.root(words, args.config_dir, args.store)
    report = gc.collect(root, dry_run=args.dry_run, echo=lambda line: print(line, flush=True))
    print(gc.summary(report))
    return ExitCode.FAILED if report.failed else ExitCode.OK
