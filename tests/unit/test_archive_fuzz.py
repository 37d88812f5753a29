"""The archive reader under random input (issue 50), for a bounded time: random member trees (links,
hard links, fifos, climbing and long names, pax and GNU headers, sizes unlike the index's), and
random damage to a good archive. Whatever comes in, the import ends as the project's one-line error
or a checked import, nothing is written outside the destination, and memory stays bounded."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tracemalloc
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.errors import LauncherError
from launcher.share import archive_index
from launcher.share import unpack as unpacking
from tests.unit.test_archive import good_archive

RUN = "20261126-120000-abcdef"
FUZZ = settings(
    max_examples=120,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
MEMORY_BOUND = 16 << 20  # bytes held at most while one import of a small archive is read

component = st.one_of(
    st.sampled_from(["..", ".", "", "run", RUN, "objects", "wheels", "outputs", "x" * 300]),
    st.text(alphabet="abc/\\\x00é.-", min_size=1, max_size=12),
)
names = st.lists(component, min_size=1, max_size=6).map("/".join) | st.sampled_from(
    [f"run/{RUN}/config.yaml", f"run/{RUN}/outputs/f", "/etc/passwd", "../escape", f"run/{RUN}/" + "d/" * 40 + "f"]
)
kinds = st.sampled_from(
    [tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE, tarfile.CHRTYPE]
)
members = st.lists(st.tuples(names, kinds, st.binary(max_size=64), names, st.booleans()), max_size=12)


def _outside(tmp: Path) -> Path:
    out = tmp / "outside"
    out.mkdir(exist_ok=True)
    return out


def _import(path: Path, dest: Path) -> None:
    tracemalloc.start()
    try:
        try:
            unpacking.unpack(path, dest)
        except LauncherError as exc:
            assert "\n" not in str(exc)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MEMORY_BOUND, peak


def _written_outside(tmp: Path, before: set[str]) -> set[str]:
    now = {
        p.relative_to(tmp).as_posix()
        for p in tmp.rglob("*")
        if not p.relative_to(tmp).as_posix().startswith(("dest", "outside"))
    }
    return (now - before) | {p.name for p in (tmp / "outside").iterdir()}


@FUZZ
@given(
    tree=members,
    fmt=st.sampled_from([tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT]),
    declare=st.booleans(),
)
def test_random_member_trees_never_write_outside_and_end_in_one_line(tmp_path_factory, tree, fmt, declare):
    tmp = tmp_path_factory.mktemp("fuzz")
    outside = _outside(tmp)
    files = {name: content for name, kind, content, _, _ in tree if kind == tarfile.REGTYPE}
    run_files = {
        n.split("/", 2)[2]: {"sha256": hashlib.sha256(c).hexdigest(), "size": len(c)}
        for n, c in files.items()
        if n.startswith(f"run/{RUN}/") and n.count("/") >= 2
    }
    run_files.setdefault("manifest.json", {"sha256": "0" * 64, "size": 0})
    data = archive_index.index(RUN, run_files, {}, {}, {}, False, "0", "now") if declare else {"format": 1}
    path = tmp / "fuzz.tar"
    try:
        with tarfile.open(path, "w", format=fmt) as tar:
            raw = json.dumps(data).encode()
            info = tarfile.TarInfo(archive_index.NAME)
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
            for name, kind, content, link, absolute in tree:
                info = tarfile.TarInfo(name)
                info.type = kind
                info.linkname = str(outside / link) if absolute else link
                info.size = len(content) if kind == tarfile.REGTYPE else 0
                tar.addfile(info, io.BytesIO(content) if kind == tarfile.REGTYPE else None)
    except (ValueError, UnicodeError, tarfile.TarError):
        return  # a name tarfile itself cannot write in this format
    before = {p.relative_to(tmp).as_posix() for p in tmp.rglob("*")}
    _import(path, tmp / "dest")
    assert not _written_outside(tmp, before)


@FUZZ
@given(
    flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(min_value=1, max_value=255)), max_size=8),
    cut=st.one_of(st.none(), st.integers(min_value=0)),
)
def test_random_damage_to_a_good_archive_never_writes_outside_and_ends_in_one_line(tmp_path_factory, flips, cut):
    tmp = tmp_path_factory.mktemp("damage")
    _outside(tmp)
    path, _ = good_archive(tmp)
    raw = bytearray(path.read_bytes())
    for at, mask in flips:
        raw[at % len(raw)] ^= mask
    if cut is not None:
        raw = raw[: cut % len(raw)]
    damaged = tmp / "damaged.tar"
    damaged.write_bytes(bytes(raw))
    before = {p.relative_to(tmp).as_posix() for p in tmp.rglob("*")}
    _import(damaged, tmp / "dest")
    assert not _written_outside(tmp, before)
