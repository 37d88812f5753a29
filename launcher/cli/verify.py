"""``launch verify RUN|FILE``: check a run's seal and its signature, and say both."""

from __future__ import annotations

import tempfile
from pathlib import Path

from launcher.cli import storeargs
from launcher.cli.args import parser


def main(argv: list[str]) -> int:
    from launcher.record import layout
    from launcher.record.store import runs, signing
    from launcher.share import unpack as unpacking

    words, rest = storeargs.split(argv)
    p = parser("verify", "Check a run's (or an archive's) seal and signature; print who sealed it.")
    p.add_argument("target", metavar="RUN|FILE")
    storeargs.add_config_dir(p)
    args = p.parse_args(rest)
    settings = storeargs.settings(words, args.config_dir)
    trust = signing.trust_from(settings)
    if unpacking.is_archive(args.target):  # checked whole, as unpack would, in a store of its own thrown away
        with tempfile.TemporaryDirectory(prefix="launch-verify-") as tmp:
            from launcher.share.archive_index import limits_from

            imported = unpacking.unpack(args.target, Path(tmp) / "store", trust, limits_from(settings))
            files = len(imported.index["run_files"])
            print(
                f"archive {args.target}: {files} run files, {len(imported.index['objects'])} object(s) and "
                f"{len(imported.index['wheels'])} wheel(s) match their hashes"
            )
            print(f"seal: run {imported.run_dir.name} intact")
            print(f"signature: {signing.describe(imported.seal)}")
        return 0
    run_dir = runs.verify_seal(args.target)
    listed = len(runs.read_json(layout.RunPaths(run_dir).manifest)["files"])
    print(f"seal: run {run_dir.name} intact ({listed} files match {layout.MANIFEST})")
    print(f"signature: {signing.describe(signing.check(run_dir, trust))}")
    return 0
