"""``launch pack RUN [-o FILE] [--with-env]``: one file that carries a sealed run and what its replay needs."""

from __future__ import annotations

import argparse

from launcher import console
from launcher.cli import storeargs
from launcher.cli.args import parser
from launcher.errors import ExitCode


def build_parser():
    """``launch pack``'s parser (its store.* words are taken before it parses)."""
    p = parser("pack", "Write a sealed run, its code and data (and with --with-env its wheels) into one file.")
    p.add_argument("run", metavar="RUN", help="a sealed run's directory")
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="the archive to write (default: RUN_NAME.launch.tar.gz or .tar.zst, here)",
    )
    p.add_argument(
        "--with-env",
        dest="with_wheels",
        action="store_true",
        help="also the wheels of the run's Python environment: every distribution the job used and the "
        "launcher (a folder wheels/)",
    )
    p.add_argument(
        "--compression",
        choices=("zstd", "gzip", "none"),
        help="default: zstd when the zstandard package is installed, else gzip",
    )
    p.add_argument(
        "--mode",
        metavar="OCTAL",
        type=_octal,
        help="the archive file's mode (default: the most private of the files it holds, 600 or 644)",
    )
    storeargs.add_config_dir(p)
    return p


def main(argv: list[str]) -> int:
    from launcher.record.store import signing
    from launcher.share import pack as packing

    words, rest = storeargs.split(argv)
    args = build_parser().parse_args(rest)
    trust = signing.trust_from(storeargs.settings(words, args.config_dir))
    compression = "plain" if args.compression == "none" else args.compression
    packed = packing.pack(
        args.run, args.output, with_wheels=args.with_wheels, compression=compression, trust=trust, mode=args.mode
    )
    data = packed.index
    wheels = f", {len(data['wheels'])} wheel(s)" if data["wheels"] else ""
    left = f"; {len(data['left_out'])} data file(s) left out (listed with their hashes)" if data["left_out"] else ""
    print(
        f"packed run {data['run']} into {packed.path} ({len(data['run_files'])} run files, "
        f"{len(data['objects'])} object(s){wheels}, {packed.size / (1 << 20):.1f} MiB){left}; "
        f"{signing.describe(packed.seal)}"
    )
    if packed.mode & 0o044 != 0o044 and args.mode is None:
        console.log.info(
            "%s is mode %04o: it holds files only their owner may read (--mode 644 to widen)", packed.path, packed.mode
        )
    return ExitCode.OK


def _octal(text: str) -> int:
    try:
        mode = int(text, 8)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an octal mode such as 600 or 644") from None
    if not 0 <= mode <= 0o777:
        raise argparse.ArgumentTypeError(f"{text!r} is not a file mode (000 to 777)")
    return mode
