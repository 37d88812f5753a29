"""A content hash of an installed file tree: ``python -m launcher.docker.treehash DIR``.

Runs inside images (standard library only) to hash what a build installed in
``/opt/launch``: every path, its kind, its permission bits, and the sha256 of its
content or link target. Timestamps and owners are left out: they differ between two
builds of the same inputs and never change what the code computes.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys


def tree_lines(root: str) -> list[str]:
    """One line per entry below ``root``, in a fixed walk order: ``kind mode path digest``."""
    lines = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            st = os.lstat(path)
            mode = f"{stat.S_IMODE(st.st_mode):04o}"
            if stat.S_ISLNK(st.st_mode):
                lines.append(f"l {mode} {rel} {os.readlink(path)}")
            elif stat.S_ISDIR(st.st_mode):
                lines.append(f"d {mode} {rel} -")
            elif stat.S_ISREG(st.st_mode):
                lines.append(f"f {mode} {rel} {_file_sha256(path)}")
            else:
                lines.append(f"o {mode} {rel} -")
    return lines


def tree_sha256(root: str) -> str:
    return hashlib.sha256("\n".join(tree_lines(root)).encode()).hexdigest()


def _file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2) or (len(argv) == 2 and argv[0] != "--lines"):
        print("usage: python -m launcher.docker.treehash [--lines] DIR", file=sys.stderr)
        return 2
    if argv[0] == "--lines":
        print("\n".join(tree_lines(argv[1])))
    else:
        print(tree_sha256(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
