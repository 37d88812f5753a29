"""``--json``: one JSON document on stdout for ``runs``, ``compare``, ``verify``, ``replay`` and ``sweep replay``.

A script reads the verdict from the document, not from the text: the document is built from the
same result objects the text is rendered from (a ``Comparison``, a ``ReplayResult``, a ``Seal``, the
index's rows, a sweep's replay report), so the two never disagree. While such a command works,
everything it would print (notes, a replay's job output, progress) goes to stderr, the job's own
output included (``to_stderr`` moves file descriptor 1 too); stdout then holds the document alone,
and the exit code is the one the text would have ended with (the document's ``exit_code``).

A command that fails with ``--json`` still says why in one line on stderr, and prints an error
document on stdout (``error_document``), so ``launch compare A B --json | jq .verdict`` always reads
one document (``null`` then). The schemas: docs/json.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from launcher.errors import ExitCode

SCHEMA = 1  # of every document; a field is only ever added to a schema, never renamed or removed
FLAG = "--json"
# The subcommands that take --json: the word after `launch`, and the word after that one (sweep's action).
COMMANDS = {"runs": (), "compare": (), "verify": (), "replay": (), "sweep": ("replay", "verify")}
HELP = "print one JSON document on stdout (docs/json.md); notes and progress go to stderr"


def add_flag(p) -> None:
    """``--json`` on an argparse parser."""
    p.add_argument(FLAG, dest="json", action="store_true", help=HELP)


def asked(argv: Sequence[str]) -> str | None:
    """The command (``compare``, ``sweep replay``) whose document ``argv`` (the words after ``launch``)
    asks for with ``--json``; None when it asks for none."""
    words = list(argv)
    if not words or words[0] not in COMMANDS or FLAG not in words:
        return None
    actions = COMMANDS[words[0]]
    if not actions:
        return words[0]
    # sweep verify: the old word of sweep replay
    return f"{words[0]} {actions[0]}" if len(words) > 1 and words[1] in actions else None


@contextlib.contextmanager
def to_stderr() -> Iterator[None]:
    """While the block runs, what would go to stdout goes to stderr: Python's ``print`` and the
    output of every program started meanwhile (file descriptor 1 is stderr's). Stdout is back
    when the block ends, however it ends."""
    sys.stdout.flush()
    saved = _dup_stdout()
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


def _dup_stdout() -> int | None:
    """A copy of file descriptor 1, which now points where 2 does; None where there is no such
    descriptor to move (an embedding without one)."""
    try:
        saved = os.dup(1)
    except OSError:
        return None
    try:
        os.dup2(2, 1)
    except OSError:
        os.close(saved)
        return None
    return saved


def emit(document: Mapping) -> int:
    """Print ``document`` on stdout, one JSON document; its exit code."""
    print(json.dumps(document, indent=2, default=str), flush=True)
    return document["exit_code"]


def envelope(command: str, exit_code: int, **fields) -> dict:
    """What every document holds first: its schema, its command, whether it ended well and its exit code."""
    code = ExitCode(exit_code)
    return {"schema": SCHEMA, "command": command, "ok": code == ExitCode.OK, "exit_code": int(code), **fields}


def error_document(command: str, exit_code: int, kind: str, message: str) -> dict:
    """The document of a command that failed: ``kind`` is the error's class (``SealError``), or
    ``internal`` (a bug), or ``interrupted``; ``message`` is the line stderr has."""
    return envelope(command, exit_code, error={"type": kind, "message": message})


# ---------------------------------------------------------------- the parts the documents share
def signer(seal) -> dict | None:
    """Who sealed a run (a ``signing.Seal``), as a document says it; None where it was not checked."""
    if seal is None:
        return None
    from launcher.record.store import signing

    return {
        "state": seal.state,
        "principal": seal.principal,
        "key": seal.key,
        "why": seal.why,
        "text": signing.describe(seal),
    }


def run_entry(path: str | Path | None, weights_sha256: str | None = None, seal=None, **extra) -> dict | None:
    """One run of a document: its id (the directory's name), absolute path, weights hash and signer."""
    if path is None:
        return None
    absolute = Path(os.path.abspath(path))
    return {
        "id": absolute.name,
        "path": str(absolute),
        "weights_sha256": weights_sha256,
        "signer": signer(seal),
        **extra,
    }


def weights_of(run_dir: str | Path | None) -> str | None:
    """A run's ``weights_sha256`` as its ``result.json`` records it; None where it records none."""
    from launcher.record import layout
    from launcher.record.store import runs

    if run_dir is None:
        return None
    result = layout.RunPaths(Path(run_dir)).result
    return runs.read_json(result).get("weights_sha256") if result.is_file() else None


def differences(diffs: Sequence[Sequence]) -> list[dict]:
    """Key fields that differ: ``[{"field", "a", "b"}]``, each value as the run recorded it."""
    return [{"field": str(d[0]), "a": d[1], "b": d[2]} for d in diffs]


def comparison(c) -> dict:
    """What a ``compare.Comparison`` found, besides its verdict and differences: what was compared, where
    the bits split, its notes; for None (nothing was compared: a replay refused or failed), the same
    fields, empty."""
    if c is None:
        return {
            "compared": [],
            "equal": None,
            "first_differing_epoch": None,
            "differing_layers": [],
            "first_divergence": None,
            "common_traced_steps": None,
            "notes": [],
        }
    divergence = c.divergence
    return {
        "compared": list(c.compared),
        "equal": c.equal,
        "first_differing_epoch": c.first_differing_epoch,
        "differing_layers": list(c.differing_layers),
        "first_divergence": None
        if divergence is None or not divergence.split
        else {
            "step": divergence.step,
            "epoch": divergence.epoch,
            "last_equal_step": divergence.last_equal_step,
            "layers": list(divergence.layers),
            "loss": list(divergence.loss) if divergence.loss else None,
        },
        "common_traced_steps": None if divergence is None else divergence.common_steps,
        "notes": list(c.notes),
    }
