"""``launch resume RUN``: continue an interrupted run from its newest complete checkpoint."""

from __future__ import annotations

from launcher.cli.rerun import refused, rerun_args
from launcher.errors import NotComparable


def main(argv: list[str]) -> int:
    from launcher.cli.main import resume_hint
    from launcher.run import job, resume
    args = rerun_args("resume", "Continue an interrupted run from its newest complete checkpoint.", argv)
    try:
        outcome, notes = resume.resume(args.run, allow_mismatch=args.allow_mismatch)
    except NotComparable as exc:
        return refused(exc)
    for note in notes:
        print(f"[launch] {note}")
    print(job.summary_line(outcome) + resume_hint(outcome))
    return 0 if outcome.ok else (130 if outcome.status == "interrupted" else 1)
