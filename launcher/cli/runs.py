"""``launch runs``: the runs of a store, newest first, from its index (kept in step with the runs)."""

from __future__ import annotations

import sys
from pathlib import Path

from launcher.cli import storeargs
from launcher.cli.args import old_spelling, parser
from launcher.console import table
from launcher.errors import StoreError

STATES = ["running", "complete", "failed", "interrupted", "abandoned"]


def main(argv: list[str]) -> int:
    import sqlite3

    from launcher.record.store import index

    words, argv = storeargs.split(argv)  # store.root=DIR, as --store DIR
    p = parser("runs", "List the runs of a store from its index, newest first.")
    p.add_argument("--store", metavar="DIR", help="the store root: store.root (default ./runs)")
    p.add_argument("--task")
    p.add_argument("--status", choices=STATES, help="abandoned: it says running, but its launcher on this host is gone")
    p.add_argument("--key", help="comparability-key hash prefix")
    p.add_argument(
        "--reindex",
        action="store_true",
        help="recreate the index from the run directories (they are the truth), then list",
    )
    old_spelling(p, "--rebuild", "--reindex", "reindex")
    storeargs.add_config_dir(p)
    args = p.parse_args(argv)
    root = storeargs.root(words, args.config_dir, args.store)
    store = Path(root)
    if not store.is_dir():
        raise StoreError(f"store {root!r} does not exist")
    notes: list[str] = []
    if args.reindex:
        try:
            notes.append(index.reindex(store))
        except (OSError, sqlite3.Error) as exc:
            why = getattr(exc, "strerror", None) or exc
            raise StoreError(f"cannot rebuild the run index of {root!r}: {why}") from None
    rows = index.query(store, task=args.task, status=args.status, key=args.key, notes=notes)
    for note in notes:
        print(f"[launch] {note}", file=sys.stderr)
    header = ("id", "time", "task", "level", "seed", "status", "key", "weights", "metrics")
    lines = [
        (
            r.id,
            r.time,
            r.task,
            r.level,
            r.seed,
            r.status,
            (r.key_sha256 or "-")[:12],
            (r.weights_sha256 or "-")[:12],
            index.metrics_text(r),
        )
        for r in rows
    ]
    # The columns' least widths keep the listing's columns where they always were.
    for line in table(header, lines, sep=" ", widths=(23, 25, 7, 7, 10, 11, 12, 12), right={4}):
        print(line)
    print(f"{len(rows)} run(s)")
    return 0
