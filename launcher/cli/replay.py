"""``launch replay RUN|FILE``: rerun a stored run (or an archive's, imported into the store first) and say
whether it reproduced, bit for bit, and who sealed it."""

from __future__ import annotations

from launcher.cli import storeargs
from launcher.cli.rerun import refused, rerun_args
from launcher.errors import ConfigError, NotComparable


def main(argv: list[str]) -> int:
    from launcher.record.store import runs, signing
    from launcher.share import unpack as unpacking
    from launcher.verdict import replay

    words, rest = storeargs.split(argv)
    args = rerun_args(
        "replay",
        "Rerun a stored run (or the run of an archive, launch pack's file) from its snapshot, "
        "config and seed, and compare bit for bit.",
        rest,
        replay=True,
    )
    data = {}
    for item in args.data or []:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"--data takes NAME=PATH (the recorded data name, and a copy of it), got {item!r}")
        data[name] = path
    if args.cpu:  # no qemu here, or a model it does not know: refused before the run is even read
        from launcher.run import emulation

        emulation.check_model(args.cpu)
    settings = storeargs.settings(words, args.config_dir)
    trust = signing.trust_from(settings)
    run = args.run
    if unpacking.is_archive(run):  # checked whole and imported into store.root before anything runs
        from launcher.cli.unpack import imported_line
        from launcher.share.archive_index import limits_from

        imported = unpacking.unpack(run, str(settings["root"]), trust, limits_from(settings))
        print(imported_line(imported), flush=True)
        run, seal = imported.run_dir, imported.seal
    else:
        seal = signing.check(runs.verify_seal(run), trust)
    # who sealed it, said before the replay: the verdict and its detail stay the last lines
    print(f"the stored run {runs.require_run(run).name} is {signing.describe(seal)}", flush=True)
    try:
        result = replay.replay(
            run,
            allow_mismatch=args.allow_mismatch,
            data=data,
            rebuild=args.rebuild,
            cpu=args.cpu,
            store={"signing_key": settings["signing_key"]},
        )
    except NotComparable as exc:
        return refused(exc)
    emulated = f" (its job emulated as CPU {args.cpu} by qemu-x86_64)" if args.cpu else ""
    print(f"{result.verdict}: replay {result.new_run} of {result.original}{emulated}")
    print(result.detail)
    return result.exit_code
