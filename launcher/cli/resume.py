"""``launch resume RUN [-cd DIR] [store.KEY=VALUE ...]``: continue an interrupted run from its newest complete
checkpoint, with the resumer's own trust settings (``store.signing_key``, ``store.require_signed``;
``store.allowed_signers`` is taken, as replay takes it, and an interrupted run has no seal for it), composed
as a run's are (``storeargs``). The run continues in its own store, whatever store.root says."""

from __future__ import annotations

from launcher.cli import storeargs
from launcher.cli.rerun import refused, rerun_parser
from launcher.errors import ConfigError, ExitCode, NotComparable


def build_parser():
    """``launch resume``'s parser (its store.* words are taken before it parses)."""
    return rerun_parser("resume", "Continue an interrupted run from its newest complete checkpoint.")


def main(argv: list[str]) -> int:
    from launcher.cli.main import resume_hint
    from launcher.run import pipeline, resume

    words, rest = storeargs.split(argv)
    args = build_parser().parse_args(rest)
    if any(word.startswith("store.root=") for word in words):
        raise ConfigError("launch resume continues a run in the store it is in: store.root cannot be given")
    try:
        outcome, _ = resume.resume(
            args.run, allow_mismatch=args.allow_mismatch, store=storeargs.settings(words, args.config_dir)
        )
    except NotComparable as exc:
        return refused(exc)
    # the notes (an abandoned run, a checkpoint skipped) were said as the resume began, before the job's output
    refusal = outcome.status == "interrupted" and (outcome.error or "").startswith(resume.REFUSED_BY_JOB)
    print(pipeline.summary_line(outcome) + ("" if refusal else resume_hint(outcome)))
    if outcome.ok:
        return ExitCode.OK
    return ExitCode.INTERRUPTED if outcome.status == "interrupted" else ExitCode.FAILED
