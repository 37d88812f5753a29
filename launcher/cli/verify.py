"""``launch verify RUN|FILE``: check a run's seal and its signature, and say both."""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass
from pathlib import Path

from launcher.cli import jsonout, storeargs
from launcher.cli.args import parser
from launcher.errors import ExitCode


def build_parser():
    """``launch verify``'s parser (its store.* words are taken before it parses)."""
    p = parser("verify", "Check a run's (or an archive's) seal and signature; print who sealed it.")
    p.add_argument("target", metavar="RUN|FILE", help="a run directory, or an archive (launch pack's file)")
    jsonout.add_flag(p)
    storeargs.add_config_dir(p)
    return p


def main(argv: list[str]) -> int:
    from launcher.record.store import signing

    words, rest = storeargs.split(argv)
    args = build_parser().parse_args(rest)
    with jsonout.to_stderr() if args.json else contextlib.nullcontext():
        settings = storeargs.settings(words, args.config_dir)
        checked = check(args.target, settings, signing.trust_from(settings))
    if args.json:
        return jsonout.emit(document(checked))
    if checked.archive is not None:
        counts = checked.archive
        print(
            f"archive {checked.target}: {counts['run_files']} run files, {counts['objects']} object(s) and "
            f"{counts['wheels']} wheel(s) match their hashes"
        )
        print(f"seal: run {checked.run_id} intact")
    else:
        from launcher.record import layout

        print(f"seal: run {checked.run_id} intact ({checked.files} files match {layout.MANIFEST})")
    print(f"signature: {signing.describe(checked.seal)}")
    return ExitCode.OK


@dataclass(frozen=True)
class Checked:
    """What ``launch verify`` found, for its text and its document: the run's id and path (None for an
    archive's, checked in a store thrown away), how many files its seal lists, who sealed it (a
    ``signing.Seal``), its weights hash, and an archive's counts (None for a run)."""

    target: str
    run_id: str
    path: Path | None
    files: int
    seal: object
    weights_sha256: str | None
    archive: dict | None = None


def check(target: str, settings: dict, trust) -> Checked:
    """Check the seal and the signature of the run (or the archive) ``target``; what was found."""
    from launcher.record import layout
    from launcher.record.store import runs, signing
    from launcher.share import unpack as unpacking

    if unpacking.is_archive(target):  # checked whole, as unpack would, in a store of its own thrown away
        with tempfile.TemporaryDirectory(prefix="launch-verify-") as tmp:
            from launcher.share.archive_index import limits_from

            imported = unpacking.unpack(target, Path(tmp) / "store", trust, limits_from(settings))
            index = imported.index  # the archive's index: JSON fields, not the store's folders
            counts = {
                "run_files": len(index["run_files"]),
                "objects": len(index["objects"]),
                "wheels": len(index["wheels"]),
            }
            return Checked(
                target,
                imported.run_dir.name,
                None,
                counts["run_files"],
                imported.seal,
                jsonout.weights_of(imported.run_dir),
                counts,
            )
    run_dir = runs.verify_seal(target)
    listed = len(runs.read_json(layout.RunPaths(run_dir).manifest)["files"])
    seal = signing.check(run_dir, trust)
    return Checked(target, run_dir.name, run_dir, listed, seal, jsonout.weights_of(run_dir))


def document(checked: Checked) -> dict:
    """``launch verify --json``: the seal, who sealed the run, and an archive's counts (docs/json.md)."""
    run = jsonout.run_entry(checked.path or checked.run_id, checked.weights_sha256, checked.seal, files=checked.files)
    if checked.path is None:
        run["path"] = None  # an archive's run was checked in a store thrown away
    return jsonout.envelope(
        "verify",
        ExitCode.OK,
        seal="intact",
        runs=[run],
        archive=None if checked.archive is None else {"path": str(Path(checked.target).resolve()), **checked.archive},
    )
