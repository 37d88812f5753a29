"""A tar archive read as input from anyone: a bounded, streaming reader in place of ``tarfile``'s.

``tarfile`` reads a pax or GNU long-name header whole before anyone can look at it (an 8 KB
archive asked for 816 MB), parses pax records with a regular expression (CVE-2024-6232), and
its ``data`` filter, on the Python versions this launcher supports, resolves links with a
``realpath`` that stops at PATH_MAX (CVE-2025-4517): a chain of links lands a file anywhere.
An archive of ``launch pack`` needs none of that, so this reader knows only what pack writes
and refuses the rest:

- ustar headers, with pax extended headers (``x``: only ``path`` and ``size`` are used) and GNU
  long names (``L``), each at most ``MAX_EXTENDED`` bytes, read only after their size is checked;
- regular files and directories; every other kind (links, devices, fifos, a global header) is
  named and refused by the caller (``Member.kind``);
- names of UTF-8, relative and normalised, at most ``MAX_NAME`` bytes, ``MAX_COMPONENT`` per
  component and ``MAX_DEPTH`` components (``name_problem``).

Nothing is held in memory but one header and ``CHUNK`` bytes of content at a time. The header
parsers (``parse_header``, ``parse_pax``, ``name_problem``) are pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from launcher.errors import ArchiveError

BLOCK = 512
CHUNK = 1 << 20  # bytes of a member's content read at a time
MAX_EXTENDED = 64 << 10  # bytes of a pax header or a GNU long name: pack writes a few hundred at most
MAX_NAME = 1024  # bytes of a member's name
MAX_COMPONENT = 255  # bytes of one component of it (NAME_MAX)
MAX_DEPTH = 32  # components of it
MAX_SIZE = 1 << 40  # bytes of one member: anything larger is not a run's

KINDS = {
    b"0": "file",
    b"\0": "file",
    b"7": "contiguous file",
    b"1": "hard link",
    b"2": "symbolic link",
    b"3": "character device",
    b"4": "block device",
    b"5": "directory",
    b"6": "fifo",
    b"x": "pax header",
    b"g": "pax global header",
    b"L": "GNU long name",
    b"K": "GNU long link name",
}
_CONTROL = re.compile(r"[\x00-\x1f\x7f\\]")


@dataclass(frozen=True)
class Header:
    """One 512-byte header block, parsed."""

    name: bytes
    mode: int
    size: int
    type: bytes
    linkname: bytes


@dataclass(frozen=True)
class Member:
    """A member as the archive declares it: ``kind`` is ``file``, ``directory`` or what else it is."""

    name: str
    kind: str
    size: int
    mode: int
    linkname: str


# ---------------------------------------------------------------- pure
def _number(field: bytes, what: str) -> int:
    """A header's numeric field: octal text, or base-256 when its first byte has the high bit."""
    if field and field[0] & 0x80:
        if field[0] != 0x80:
            raise ArchiveError(f"a header's {what} is negative or too large")
        return int.from_bytes(field[1:], "big")
    text = field.split(b"\0", 1)[0].strip(b" ")
    if not text:
        return 0
    if not re.fullmatch(rb"[0-7]{1,12}", text):
        raise ArchiveError(f"a header's {what} is not a number ({text[:16]!r})")
    return int(text, 8)


def parse_header(block: bytes) -> Header | None:
    """The header in ``block`` (512 bytes), or None for the end of the archive (a zero block).
    ``ArchiveError`` for a block that is not a tar header (its checksum)."""
    if len(block) != BLOCK:
        raise ArchiveError("it ends inside a header (truncated)")
    if block == bytes(BLOCK):
        return None
    stored = _number(block[148:156], "checksum")
    unsigned = sum(block[:148]) + 8 * 32 + sum(block[156:])
    signed = sum(b - 256 if b > 127 else b for b in block[:148] + block[156:]) + 8 * 32
    if stored not in (unsigned, signed):
        raise ArchiveError("a header's checksum does not match: not a tar archive, or corrupted")
    name = block[0:100].split(b"\0", 1)[0]
    if block[257:263] == b"ustar\x00":  # POSIX ustar: a prefix of the name (GNU uses these bytes otherwise)
        prefix = block[345:500].split(b"\0", 1)[0]
        if prefix:
            name = prefix + b"/" + name
    size = _number(block[124:136], "size")
    if size > MAX_SIZE:
        raise ArchiveError(f"a member declares {size} bytes, more than any run holds")
    return Header(name, _number(block[100:108], "mode"), size, block[156:157], block[157:257].split(b"\0", 1)[0])


def parse_pax(data: bytes) -> dict[str, str]:
    """The records of a pax extended header (``"%d %s=%s\\n"`` each), by length, never by pattern:
    ``ArchiveError`` for a record that does not parse."""
    out: dict[str, str] = {}
    at = 0
    while at < len(data):
        space = data.find(b" ", at, at + 8)
        digits = data[at:space] if space > at else b""
        if not digits.isdigit():
            raise ArchiveError("a pax header's record has no length")
        length = int(digits)
        record = data[at : at + length]
        if length <= len(digits) + 1 or len(record) != length or not record.endswith(b"\n"):
            raise ArchiveError("a pax header's record is not as long as it says")
        key, sep, value = record[len(digits) + 1 : -1].partition(b"=")
        if not sep:
            raise ArchiveError("a pax header's record has no '='")
        try:
            out[key.decode("utf-8")] = value.decode("utf-8")
        except UnicodeDecodeError:
            raise ArchiveError("a pax header's record is not UTF-8") from None
        at += length
    return out


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a member written below a directory, or None: relative, normalised
    (no empty, ``.`` or ``..`` component), no control character or backslash, within
    ``MAX_NAME`` bytes, ``MAX_COMPONENT`` per component and ``MAX_DEPTH`` components."""
    if not name:
        return "is empty"
    if name.startswith("/") or _CONTROL.search(name):
        return "is absolute or holds a control character or a backslash"
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "is not a normalised relative path (an empty, '.' or '..' component)"
    if len(name.encode()) > MAX_NAME or len(parts) > MAX_DEPTH:
        return f"is longer than {MAX_NAME} bytes or {MAX_DEPTH} components"
    if any(len(part.encode()) > MAX_COMPONENT for part in parts):
        return f"has a component longer than {MAX_COMPONENT} bytes"
    return None


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ArchiveError(f"a member's {what} is not UTF-8") from None


# ---------------------------------------------------------------- the stream
class Reader:
    """Members of the tar read from ``stream`` (already decompressed), one pass, bounded.

    ``next()`` gives the next member's declaration (or None at the end); its content is then read
    with ``chunks()`` (or passed over by the next ``next()``)."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._left = 0  # content bytes of the current member not yet read
        self._pad = 0  # padding after it

    def _read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            got = self._stream.read(min(n - len(out), CHUNK))
            if not got:
                raise ArchiveError("it ends inside a member (truncated)")
            out += got
        return bytes(out)

    def _skip_rest(self) -> None:
        while self._left:
            self._left -= len(self._read(min(self._left, CHUNK)))
        if self._pad:
            self._read(self._pad)
            self._pad = 0

    def _extended(self, header: Header) -> bytes:
        if header.size > MAX_EXTENDED:
            raise ArchiveError(
                f"a {KINDS[header.type]} of {header.size} bytes, over the {MAX_EXTENDED} a launch archive needs"
            )
        data = self._read(header.size)
        self._read(-header.size % BLOCK)
        return data

    def next(self) -> Member | None:
        """The next member, its pax or GNU name applied; None at the end of the archive."""
        self._skip_rest()
        header = parse_header(self._read_header())
        if header is None:
            return None
        pax: dict[str, str] | None = None
        long_name: bytes | None = None
        while header.type in (b"x", b"L"):
            if (header.type == b"x" and pax is not None) or (header.type == b"L" and long_name is not None):
                raise ArchiveError(f"two {KINDS[header.type]}s for one member")
            data = self._extended(header)
            if header.type == b"x":
                pax = parse_pax(data)
            else:
                long_name = data.split(b"\0", 1)[0]
            header = parse_header(self._read_header())
            if header is None:
                raise ArchiveError("it ends after an extended header (truncated)")
        pax = pax or {}
        name = pax.get("path") or _text(long_name if long_name is not None else header.name, "name")
        size = header.size
        if "size" in pax:
            if not pax["size"].isdigit() or int(pax["size"]) > MAX_SIZE:
                raise ArchiveError(f"a pax header gives member {name!r} the size {pax['size'][:20]!r}")
            size = int(pax["size"])
        kind = KINDS.get(header.type, f"member of unknown type {header.type!r}")
        # Only files and directories have content to pass over; any other kind is refused by the caller.
        self._left, self._pad = (size, -size % BLOCK) if kind in ("file", "directory") else (0, 0)
        return Member(name, kind, size, header.mode & 0o7777, _text(header.linkname, "link target"))

    def _read_header(self) -> bytes:
        block = self._stream.read(BLOCK)
        while block and len(block) < BLOCK:
            more = self._stream.read(BLOCK - len(block))
            if not more:
                break
            block += more
        if not block:
            raise ArchiveError("it ends without the end-of-archive blocks (truncated)")
        return block

    def chunks(self) -> Iterator[bytes]:
        """The current member's content, ``CHUNK`` bytes at a time."""
        while self._left:
            block = self._read(min(self._left, CHUNK))
            self._left -= len(block)
            yield block
        if self._pad:
            self._read(self._pad)
            self._pad = 0
