"""``launch unpack FILE [--store DIR]``: import an archive's run into a store, without running it."""

from __future__ import annotations

from launcher.cli.args import parser
from launcher.cli.pack import split_settings


def main(argv: list[str]) -> int:
    from launcher.record.store import signing
    from launcher.share import unpack as unpacking
    from launcher.share.manifest import limits_from

    words, rest = split_settings(argv)
    p = parser("unpack", "Import an archive (launch pack's file) into a store, checked, without running it.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--store", metavar="DIR", help="the store to import into (default: store.root, ./runs)")
    args = p.parse_args(rest)
    settings = signing.store_settings(words)
    imported = unpacking.unpack(
        args.file, args.store or str(settings["root"]), signing.trust_from(settings), limits_from(settings)
    )
    print(imported_line(imported))
    return 0


def imported_line(imported) -> str:
    """``unpacked run X into DIR; sealed by ...`` (and where the wheels went)."""
    how = "already in" if imported.already else "unpacked into"
    wheels = f"; its {len(imported.wheels)} wheel(s) in {imported.wheels[0].parent}" if imported.wheels else ""
    # the signature's verdict before anything else: `launch unpack` of an unsigned archive says so
    from launcher.record.store import signing

    return f"run {imported.run_dir.name} {how} {imported.run_dir.parent}; {signing.describe(imported.seal)}{wheels}"
