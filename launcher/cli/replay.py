"""``launch replay RUN``: rerun a stored run and say whether it reproduced, bit for bit."""

from __future__ import annotations

from launcher.cli.rerun import refused, rerun_args
from launcher.errors import NotComparable


def main(argv: list[str]) -> int:
    from launcher.verdict import replay

    args = rerun_args("replay", "Rerun a stored run from its config and seed and compare bit for bit.", argv)
    try:
        result = replay.replay(args.run, allow_mismatch=args.allow_mismatch)
    except NotComparable as exc:
        return refused(exc)
    print(f"{result.verdict}: replay {result.new_run} of {result.original}")
    print(result.detail)
    return result.exit_code
