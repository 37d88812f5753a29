"""``launch runs``: the runs of a store, newest first, from its index (kept in step with the runs)."""

from __future__ import annotations

import sys
from pathlib import Path

from launcher.cli import jsonout, storeargs
from launcher.cli.args import old_spelling, parser
from launcher.console import table
from launcher.errors import ExitCode, NotAStore, StoreError

STATES = ["running", "complete", "failed", "interrupted", "abandoned"]


def build_parser():
    """``launch runs``'s parser (its store.* words are taken before it parses)."""
    p = parser("runs", "List the runs of a store from its index, newest first.")
    storeargs.add_store(p)
    p.add_argument("--task", help="only the runs of this task (train.name: mnist, custom, script, notebook)")
    p.add_argument(
        "--status",
        choices=STATES,
        help="only the runs in this state (abandoned: it says running, but its launcher on this host is gone)",
    )
    p.add_argument("--key", help="comparability-key hash prefix")
    p.add_argument(
        "--reindex",
        action="store_true",
        help="recreate the index from the run directories (they are the truth), then list",
    )
    old_spelling(p, "--rebuild", "--reindex", "reindex")
    jsonout.add_flag(p)
    storeargs.add_config_dir(p)
    return p


def main(argv: list[str]) -> int:
    import sqlite3

    from launcher.record.store import index

    words, argv = storeargs.split(argv)  # store.root=DIR, as --store DIR
    args = build_parser().parse_args(argv)
    root = storeargs.root(words, args.config_dir, args.store)
    store = Path(root)
    if not store.is_dir():
        raise NotAStore(f"store {root!r} does not exist")
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
    if args.json:
        return jsonout.emit(document(store, rows))
    return listing(rows)


def document(store: Path, rows: list) -> dict:
    """``launch runs --json``: the index's rows (``index.Row``), every field, the metrics as numbers."""
    import dataclasses
    import json

    runs = [{**dataclasses.asdict(r), "metrics": json.loads(r.metrics or "{}")} for r in rows]
    return jsonout.envelope("runs", ExitCode.OK, store=str(store.resolve()), count=len(runs), runs=runs)


def listing(rows: list) -> int:
    """The table of ``launch runs``, one line a run, and how many."""
    from launcher.record.store import index

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
    return ExitCode.OK
