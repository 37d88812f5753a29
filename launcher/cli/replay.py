"""``launch replay RUN``: rerun a stored run and say whether it reproduced, bit for bit."""

from __future__ import annotations

from launcher.cli.rerun import refused, rerun_args
from launcher.errors import ConfigError, NotComparable


def main(argv: list[str]) -> int:
    from launcher.verdict import replay

    args = rerun_args("replay", "Rerun a stored run from its snapshot, config and seed, and compare bit for bit.",
                      argv, replay=True)  # fmt: skip
    data = {}
    for item in args.data or []:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"--data takes NAME=PATH (the recorded data name, and a copy of it), got {item!r}")
        data[name] = path
    try:
        result = replay.replay(args.run, allow_mismatch=args.allow_mismatch, data=data, rebuild=args.rebuild,
                               cpu=args.cpu)
    except NotComparable as exc:
        return refused(exc)
    emulated = f" (its job emulated as CPU {args.cpu} by qemu-x86_64)" if args.cpu else ""
    print(f"{result.verdict}: replay {result.new_run} of {result.original}{emulated}")
    print(result.detail)
    return result.exit_code
