"""``launch resume RUN [-cd DIR] [store.KEY=VALUE ...]``: continue an interrupted run from its newest complete
checkpoint, with the resumer's own trust settings (``store.signing_key``, ``store.require_signed``;
``store.allowed_signers`` is taken, as replay takes it, and an interrupted run has no seal for it), composed
as a run's are (``storeargs``). The run continues in its own store, whatever store.root says."""

from __future__ import annotations

from launcher.cli import storeargs
from launcher.cli.rerun import refused, rerun_args
from launcher.errors import ConfigError, NotComparable


def main(argv: list[str]) -> int:
    from launcher.cli.main import resume_hint
    from launcher.run import pipeline, resume

    words, rest = storeargs.split(argv)
    args = rerun_args("resume", "Continue an interrupted run from its newest complete checkpoint.", rest)
    if any(word.startswith("store.root=") for word in words):
        raise ConfigError("launch resume continues a run in the store it is in: store.root cannot be given")
    try:
        outcome, notes = resume.resume(
            args.run, allow_mismatch=args.allow_mismatch, store=storeargs.settings(words, args.config_dir)
        )
    except NotComparable as exc:
        return refused(exc)
    for note in notes:
        print(f"[launch] {note}")
    print(pipeline.summary_line(outcome) + resume_hint(outcome))
    return 0 if outcome.ok else (130 if outcome.status == "interrupted" else 1)
