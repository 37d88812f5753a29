"""``launch replay RUN|FILE``: rerun a stored run (or an archive's, imported into the store first) and say
whether it reproduced, bit for bit, and who sealed it."""

from __future__ import annotations

import contextlib
from pathlib import Path

from launcher.cli import jsonout, storeargs
from launcher.cli.rerun import refused, rerun_parser
from launcher.errors import ConfigError, NotComparable


def build_parser():
    """``launch replay``'s parser (its store.* words are taken before it parses)."""
    return rerun_parser(
        "replay",
        "Rerun a stored run (or the run of an archive, launch pack's file) from its snapshot, "
        "config and seed, and compare bit for bit.",
        replay=True,
    )


def main(argv: list[str]) -> int:
    from launcher.record.store import runs, signing
    from launcher.share import unpack as unpacking
    from launcher.verdict import replay

    words, rest = storeargs.split(argv)
    args = build_parser().parse_args(rest)
    data = {}
    for item in args.data or []:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"--data takes NAME=PATH (the recorded data name, and a copy of it), got {item!r}")
        data[name] = path
    if args.cpu:  # no qemu here, or a model it does not know: refused before the run is even read
        from launcher.run import emulation

        emulation.check_model(args.cpu)
    result = refusal = archive = None
    with jsonout.to_stderr() if args.json else contextlib.nullcontext():  # --json: the job's output too
        settings = storeargs.settings(words, args.config_dir, root=args.store)
        trust = signing.trust_from(settings)
        run = args.run
        if unpacking.is_archive(run):  # checked whole and imported into store.root before anything runs
            from launcher.cli.unpack import imported_line
            from launcher.share.archive_index import limits_from

            imported = unpacking.unpack(run, str(settings["root"]), trust, limits_from(settings))
            print(imported_line(imported), flush=True)
            run, seal, archive = imported.run_dir, imported.seal, str(Path(args.run).resolve())
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
            if not args.json:
                return refused(exc)
            refusal = exc
    if args.json:
        return jsonout.emit(document(Path(run), seal, result, refusal, args, archive))
    emulated = f" (its job emulated as CPU {args.cpu} by qemu-x86_64)" if args.cpu else ""
    print(f"{result.verdict}: replay {result.new_run} of {result.original}{emulated}")
    print(result.detail)
    return result.exit_code


def document(run: Path, seal, result, refusal: NotComparable | None, args, archive: str | None) -> dict:
    """``launch replay --json``: the verdict (a ``replay.ReplayResult``, or the ``NotComparable`` that
    refused it before anything ran), the stored run and who sealed it, its replay (docs/json.md)."""
    c = result.comparison if result is not None else None
    weights = c.weights if c is not None else (jsonout.weights_of(run), None)
    runs = [jsonout.run_entry(run, weights[0], seal)]
    if result is not None and result.new_run is not None:
        runs.append(
            jsonout.run_entry(result.new_run, weights[1] if c is not None else jsonout.weights_of(result.new_run))
        )
    if refusal is not None:
        verdict, code, diffs, reason = "REFUSED", refusal.exit_code, refusal.differences, str(refusal)
    else:
        verdict, code = result.verdict, result.exit_code
        diffs = c.differences if c is not None else []
        reason = result.detail if c is None else None  # FAILED: how the replay's run ended
    return jsonout.envelope(
        "replay",
        code,
        verdict=verdict,
        runs=runs,
        differences=jsonout.differences(diffs),
        **jsonout.comparison(c),
        reason=reason,
        archive=archive,
        rebuild=bool(args.rebuild),
        emulated_cpu=args.cpu,
    )
