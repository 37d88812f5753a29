"""``launch audit [OVERRIDES...]``: which knobs change this job's bits, and where."""

from __future__ import annotations

import argparse

from launcher.cli.args import parser

# The synopsis argparse would write as [OVERRIDES ...], with the audit's own keys; wrapped as argparse wraps.
USAGE = (
    "launch audit [-h] [OVERRIDES...] [audit.repeats=N] [audit.trace_every=N]\n"
    + " " * len("usage: launch audit ")
    + "[audit.knobs=[a,b]] [audit.cpus=[Haswell,EPYC]]"
)
EPILOG = """\
Runs the job as configured audit.repeats times (default 2), then once per value tried of
each knob that can change its bits, and prints which knobs change them, the first step
and layer where the bits split, and the cost. Knobs: intra_op_threads, inter_op_threads,
onednn_opts, level, xla, input_pipeline, and cpu (only when named in audit.knobs: the job
under qemu-user as each of audit.cpus, default Haswell; needs apt-get install qemu-user).
Exit 0: repeats are bitwise stable; 1: they are not, or the job fails as configured; 2: bad
input. The report is saved in <store>/audits/."""


def build_parser() -> argparse.ArgumentParser:
    """``launch audit``'s parser: the job's overrides and the audit's own ``audit.KEY=VALUE``."""
    p = parser(
        "audit",
        "Which knobs change this job's bits, and where: the job run again with each knob changed.",
        usage=USAGE,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="OVERRIDES",
        help="the job's config overrides, as for launch, and audit.KEY=VALUE (repeats, trace_every, knobs, cpus)",
    )
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)  # -h: the help; an option it does not take: one line, exit 2
    from launcher.verdict import audit

    return audit.run(args.overrides)
