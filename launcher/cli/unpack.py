"""``launch unpack FILE [--store DIR]``: import an archive's run into a store, without running it."""

from __future__ import annotations

from launcher.cli import storeargs
from launcher.cli.args import parser
from launcher.errors import ExitCode


def build_parser():
    """``launch unpack``'s parser (its store.* words are taken before it parses)."""
    p = parser("unpack", "Import an archive (launch pack's file) into a store, checked, without running it.")
    p.add_argument("file", metavar="FILE", help="the archive, launch pack's file")
    storeargs.add_store(p, "the store to import into")
    storeargs.add_config_dir(p)
    return p


def main(argv: list[str]) -> int:
    from launcher.record.store import signing
    from launcher.share import unpack as unpacking
    from launcher.share.archive_index import limits_from

    words, rest = storeargs.split(argv)
    args = build_parser().parse_args(rest)
    settings = storeargs.settings(words, args.config_dir, root=args.store)
    imported = unpacking.unpack(args.file, str(settings["root"]), signing.trust_from(settings), limits_from(settings))
    print(imported_line(imported))
    return ExitCode.OK


def imported_line(imported) -> str:
    """``unpacked run X into DIR; sealed by ...`` (and where the wheels went)."""
    how = "already in" if imported.already else "unpacked into"
    wheels = f"; its {len(imported.wheels)} wheel(s) in {imported.wheels[0].parent}" if imported.wheels else ""
    # the signature's verdict before anything else: `launch unpack` of an unsigned archive says so
    from launcher.record.store import signing

    return f"run {imported.run_dir.name} {how} {imported.run_dir.parent}; {signing.describe(imported.seal)}{wheels}"
