"""What ``launch replay`` and ``launch resume`` share: their arguments and the refusal table."""

from __future__ import annotations

import argparse

from launcher.cli import jsonout, storeargs
from launcher.cli.args import old_spelling, parser
from launcher.errors import NotComparable


def rerun_parser(name: str, description: str, replay: bool = False) -> argparse.ArgumentParser:
    """The parser of replay or resume: a run, --allow-mismatch and -cd DIR (replay: an archive too, --data,
    --rebuild, --cpu, --json, and --store DIR, where an archive's run is imported)."""
    p = parser(name, description)
    if replay:
        p.add_argument("run", metavar="RUN|FILE", help="a sealed run's directory, or an archive (launch pack's file)")
    else:
        p.add_argument("run", metavar="RUN", help="an interrupted run's directory")
    p.add_argument(
        "--allow-mismatch",
        dest="allow_mismatch",
        action="store_true",
        help="run even when the environment differs (recorded as not comparable)",
    )
    old_spelling(p, "--force", "--allow-mismatch", "allow_mismatch")
    if replay:
        p.add_argument(
            "--data",
            action="append",
            metavar="NAME=PATH",
            help="a copy of a data file the run read but did not keep (checked by its recorded hash)",
        )
        p.add_argument(
            "--rebuild",
            action="store_true",
            help="replay in a Python environment with the run's recorded package versions (cached)",
        )
        p.add_argument(
            "--cpu",
            metavar="MODEL",
            help="run the replay's job under qemu-user as this x86-64 CPU model (Haswell, EPYC, ...)",
        )
        jsonout.add_flag(p)
        storeargs.add_store(p, "the store an archive's run is imported into, and replayed in")
    storeargs.add_config_dir(p)
    return p


def refused(exc: NotComparable) -> int:
    """Print a comparability refusal of the environment, field by field; its exit code."""
    from launcher.verdict import compare

    print(f"REFUSED: {exc}")
    diffs = exc.differences
    print("\n".join(compare.difference_table(diffs, "stored run", "here, now", compare.here_words(diffs))))
    return exc.exit_code
