"""``launch runs``: the runs of a store, newest first, from its index (kept in step with the runs)."""

from __future__ import annotations

import sys
from pathlib import Path

from launcher.cli.args import old_spelling, parser
from launcher.errors import StoreError

STATES = ["running", "complete", "failed", "interrupted", "abandoned"]


def main(argv: list[str]) -> int:
    import sqlite3

    from launcher.record.store import index

    p = parser("runs", "List the runs of a store from its index, newest first.")
    p.add_argument("--store", default="runs", help="the store root (default ./runs)")
    p.add_argument("--task")
    p.add_argument("--status", choices=STATES, help="abandoned: it says running, but its launcher on this host is gone")
    p.add_argument("--key", help="comparability-key hash prefix")
    p.add_argument(
        "--reindex",
        action="store_true",
        help="recreate the index from the run directories (they are the truth), then list",
    )
    old_spelling(p, "--rebuild", "--reindex", "reindex")
    args = p.parse_args(argv)
    store = Path(args.store)
    if not store.is_dir():
        raise StoreError(f"store {args.store!r} does not exist")
    notes: list[str] = []
    if args.reindex:
        try:
            notes.append(index.rebuild(store))
        except (OSError, sqlite3.Error) as exc:
            why = getattr(exc, "strerror", None) or exc
            raise StoreError(f"cannot rebuild the run index of {args.store!r}: {why}") from None
    rows = index.query(store, task=args.task, status=args.status, key=args.key, notes=notes)
    for note in notes:
        print(f"[launch] {note}", file=sys.stderr)
    header = (
        f"{'id':<23} {'time':<25} {'task':<7} {'level':<7} {'seed':>10} {'status':<11} {'key':<12} "
        f"{'weights':<12} metrics"
    )
    print(header)
    for r in rows:
        key, weights = (r.key_sha256 or "-")[:12], (r.weights_sha256 or "-")[:12]
        print(
            f"{r.id:<23} {r.time:<25} {r.task:<7} {r.level:<7} {r.seed!s:>10} {r.status:<11} "
            f"{key:<12} {weights:<12} {index.metrics_text(r)}"
        )
    print(f"{len(rows)} run(s)")
    return 0
