"""Archives from anyone (issue 50): each attack a reviewer made on `launch unpack`/`verify FILE`, made here.

Nothing is written outside the destination store, no header is held whole in memory, no member larger
than declared is written, no wheel the run's sealed record does not name gets in, no run takes a name
the store keeps for itself, a planted object is never trusted, and every refusal is one line, exit 2."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
import time
import tracemalloc
import zipfile
from pathlib import Path

import pytest

from launcher.cli.main import main
from launcher.errors import ArchiveError
from launcher.record.store import gc, objects, runs
from launcher.share import archive_index, tarstream
from launcher.share import pack as packing
from launcher.share import unpack as unpacking
from tests.unit.test_archive import good_archive, refused_in_one_line, rewrite, sealed_run, tree


def _members(path: Path) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    with tarfile.open(path) as tar:
        return [(m, tar.extractfile(m).read() if m.isreg() else None) for m in tar.getmembers()]


def _after_index(path: Path, target: Path, extra) -> Path:
    """``path`` rewritten with the members ``extra()`` yields right after its index."""

    def change(info, content):
        yield info, content
        if info.name == archive_index.NAME:
            yield from extra()

    return rewrite(path, target, change)


def test_a_chain_of_links_inside_the_run_writes_nothing_anywhere(tmp_path, capsys):
    """CVE-2025-4517's shape: links each textually inside the run, then a file below the chain. The
    archive format has no links: the first one is refused, before anything is written."""
    path, data = good_archive(tmp_path)
    top = f"run/{data['run']}/outputs"
    outside = tmp_path / "outside"
    outside.mkdir()

    def extra():
        name = top
        for n in range(20):
            link = tarfile.TarInfo(f"{name}/l{n}")
            link.type, link.linkname = tarfile.SYMTYPE, "." if n < 19 else str(outside)
            yield link, None
            name = f"{name}/l{n}"
        yield tarfile.TarInfo(f"{name}/authorized_keys"), b"ssh-ed25519 AAAA attacker\n"

    bad = _after_index(path, tmp_path / "chain.tar", extra)
    refused_in_one_line(capsys, tmp_path, bad, "is a symbolic link")
    assert list(outside.iterdir()) == []


def _raw_header(name: bytes, size: int, typeflag: bytes) -> bytes:
    block = bytearray(512)
    block[0 : len(name)] = name
    block[100:108] = b"0000644\0"
    block[108:116] = block[116:124] = b"0000000\0"
    block[124:136] = f"{size:011o}\0".encode()
    block[136:148] = b"00000000000\0"
    block[156:157] = typeflag
    block[257:263] = b"ustar\0"
    block[263:265] = b"00"
    block[148:156] = b" " * 8
    block[148:156] = f"{sum(block):06o}\0 ".encode()
    return bytes(block)


@pytest.mark.parametrize("typeflag", [b"x", b"L"])
def test_a_huge_pax_or_long_name_header_is_refused_without_being_read(tmp_path, capsys, typeflag):
    """An extended header declaring 64 MiB (gzip makes it 64 KiB on disk): tarfile reads it whole; the
    reader refuses it from its size, holding one block."""
    path, _ = good_archive(tmp_path)
    first = path.read_bytes()
    index_end = 512 + -(-_members(path)[0][0].size // 512) * 512  # the index's header and data
    size = 64 << 20
    bomb = tmp_path / "bomb.tar.gz"
    with gzip.open(bomb, "wb", compresslevel=1) as out:
        out.write(first[:index_end])
        out.write(_raw_header(b"run/x", size, typeflag))
        zeros = bytes(1 << 20)
        for _ in range(size >> 20):
            out.write(zeros)
    tracemalloc.start()
    try:
        err = refused_in_one_line(capsys, tmp_path, bomb, f"over the {tarstream.MAX_EXTENDED}")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{peak} bytes held to refuse it: {err}"


def test_a_member_larger_than_the_index_declares_is_refused_before_it_is_written(tmp_path, capsys):
    """A member whose header declares 1 GiB where the index says 6 bytes: refused from its header,
    nothing of it read or stored (it was stored whole, then hashed)."""
    path, data = good_archive(tmp_path)
    raw = bytearray(path.read_bytes())
    with tarfile.open(path) as tar:
        member = next(m for m in tar.getmembers() if m.name.startswith("objects/") and m.size == len(b"digits"))
    header = _raw_header(member.name.encode(), 1 << 30, b"0")
    raw[member.offset : member.offset + 512] = header
    bad = tmp_path / "big.tar"
    bad.write_bytes(bytes(raw))
    started = time.monotonic()
    refused_in_one_line(capsys, tmp_path, bad, f"declares {1 << 30} bytes, and the index 6")
    assert time.monotonic() - started < 5


def test_an_archive_beyond_the_stores_caps_or_its_disk_is_refused_before_any_member(tmp_path):
    path, data = good_archive(tmp_path)
    with pytest.raises(ArchiveError, match="over store.snapshot_max_files"):
        unpacking.unpack(path, tmp_path / "dest", limits=archive_index.Limits(max_objects=1))
    with pytest.raises(ArchiveError, match="over store.snapshot_max_total_mb"):
        unpacking.unpack(path, tmp_path / "dest", limits=archive_index.Limits(max_object_bytes=5))
    too_big = json.loads(json.dumps(data))
    too_big["objects"][next(iter(too_big["objects"]))] = 1 << 39
    with pytest.raises(ArchiveError, match="free"):
        archive_index.check_index(too_big, archive_index.Limits(None, None, free_bytes=1 << 30))
    assert not [p for p in (tmp_path / "dest").iterdir() if not p.name.startswith(".")]


@pytest.mark.parametrize("name", ["objects", "wheels", "index.sqlite", "sweeps", "audits", "my-run", ".gc.lock"])
def test_a_run_named_as_the_store_keeps_its_own_files_is_refused(tmp_path, capsys, name):
    """A run called ``objects`` became the store's objects folder; one called ``my-run`` vanished at reindex."""
    path, data = good_archive(tmp_path)

    def change(info, content):
        if info.name == archive_index.NAME:
            yield info, json.dumps({**json.loads(content), "run": name}).encode()
        else:
            yield info, content

    refused_in_one_line(capsys, tmp_path, rewrite(path, tmp_path / "reserved.tar", change), "not a run's id")


def test_packing_a_run_not_named_as_runs_are_is_refused(tmp_path):
    run = sealed_run(tmp_path / "runs")
    renamed = run.rename(run.parent / "my-run")
    with pytest.raises(ArchiveError, match="not named as runs are"):
        packing.pack(renamed, tmp_path / "x.tar")


def test_a_planted_object_is_replaced_not_trusted(tmp_path):
    """An object already in the store under the right name but with other bytes: the import (and any
    run's snapshot) stores the true content over it, instead of keeping the planted file."""
    path, data = good_archive(tmp_path)
    dest = tmp_path / "dest"
    digest = hashlib.sha256(b"digits").hexdigest()
    planted = objects.object_path(dest, digest)
    planted.parent.mkdir(parents=True)
    planted.write_bytes(b"import os; os.system('evil')\n")
    imported = unpacking.unpack(path, dest)
    assert planted.read_bytes() == b"digits" and objects.holds(dest, digest)
    runs.verify_seal(imported.run_dir)
    planted.chmod(0o644)
    planted.write_bytes(b"planted again")
    source = tmp_path / "digits"
    source.write_bytes(b"digits")
    assert objects.put(dest, str(source), digest) and planted.read_bytes() == b"digits"


def _resealed(tmp_path: Path, changes: dict[str, bytes]) -> Path:
    """A good archive whose run files ``changes`` replaces, the run's seal and the archive's index made
    again around them: what someone crafting an archive can do without any key."""
    path, data = good_archive(tmp_path)
    members = _members(path)
    files = {m.name.split("/", 2)[2]: c for m, c in members if m.isreg() and m.name.startswith("run/")}
    files.update(changes)
    seal = {"schema": 1, "files": {n: hashlib.sha256(c).hexdigest() for n, c in files.items() if n != "manifest.json"}}
    files["manifest.json"] = json.dumps(seal).encode()
    data["run_files"] = {n: {"sha256": hashlib.sha256(c).hexdigest(), "size": len(c)} for n, c in files.items()}
    out = tmp_path / "resealed.tar"
    entries = [(tarfile.TarInfo(archive_index.NAME), json.dumps(data).encode())]
    entries += [(tarfile.TarInfo(f"run/{data['run']}/{n}"), c) for n, c in files.items()]
    entries += [(m, c) for m, c in members if m.name.startswith("objects/") and m.isreg()]
    with tarfile.open(out, "w") as tar:
        for info, content in entries:
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return out


@pytest.mark.parametrize("file", ["fingerprint.json", "snapshot.json", "result.json", "metrics.jsonl"])
def test_json_nested_too_deeply_is_refused_before_the_run_is_imported(tmp_path, capsys, file):
    """``[`` x 200,000 in a run file: RecursionError (exit 70) once the run was already imported. Now one
    line, exit 2, nothing imported."""
    deep = ("[" * 200_000 + "]" * 200_000).encode()
    refused_in_one_line(capsys, tmp_path, _resealed(tmp_path, {file: deep}), "nested too deeply")


def _wheel(path: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """A real wheel file: ``files`` plus its METADATA, WHEEL and RECORD."""
    import base64

    info = f"{name.replace('-', '_')}-{version}.dist-info"
    files = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = (
        "".join(
            f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(c).digest()).rstrip(b'=').decode()},{len(c)}\n"
            for n, c in files.items()
        )
        + f"{info}/RECORD,,\n"
    )
    target = path / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(target, "w") as z:
        for n, c in {**files, f"{info}/RECORD": record.encode()}.items():
            z.writestr(n, c)
    return target


def _with_wheel(tmp_path: Path, wheel: Path, fp_software: dict) -> Path:
    """A signed-or-not archive whose sealed run records ``fp_software`` and which carries ``wheel``."""
    run = sealed_run(tmp_path / "src" / "runs")
    for p in [run, *run.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    fp = json.loads((run / "fingerprint.json").read_text())
    runs.write_json(run / "fingerprint.json", {**fp, "software": fp_software})
    (run / "manifest.json").unlink()
    runs.seal(run)
    packed = packing.pack(run, tmp_path / "plain.tar", compression="plain")
    data = packed.index
    content = wheel.read_bytes()
    name, version = archive_index.wheel_parts(wheel.name)
    data["wheels"] = {
        wheel.name: {
            "sha256": hashlib.sha256(content).hexdigest(),
            "size": len(content),
            "name": name,
            "version": version,
        }
    }

    def change(info, c):
        if info.name == archive_index.NAME:
            yield info, json.dumps(data).encode()
            yield tarfile.TarInfo(f"wheels/{wheel.name}"), content
        else:
            yield info, c

    return rewrite(packed.path, tmp_path / "with-wheel.tar", change)


def test_a_wheel_the_runs_record_does_not_name_is_refused_and_never_reaches_the_store(tmp_path, capsys):
    """A wheel carrying a ``.pth``, listed only in the archive's unsigned index: it ran in the rebuild of
    any run of the store. Now it must be named by the run's sealed record, or nothing is imported."""
    evil = _wheel(tmp_path, "helpful", "1.0", {"helpful.pth": b"import os; os.system('touch /tmp/owned')\n"})
    bad = _with_wheel(tmp_path, evil, {"packages": ["numpy==2.0.0"], "distributions": {}})
    refused_in_one_line(capsys, tmp_path, bad, "not one the run's sealed record names", "names no helpful 1.0")
    assert not (tmp_path / "dest" / "wheels").exists()


def test_a_wheel_of_a_used_distribution_with_other_files_is_refused(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    good = _wheel(tmp_path / "a", "toolz", "1.0", {"toolz/__init__.py": b"x = 1\n"})
    identity = archive_index.wheel_identity(zipfile.ZipFile(good).read("toolz-1.0.dist-info/RECORD").decode())
    evil = _wheel(tmp_path / "b", "toolz", "1.0", {"toolz/__init__.py": b"x = 1\n", "toolz.pth": b"import os\n"})
    software = {"packages": ["toolz==1.0"], "distributions": {"toolz": {"version": "1.0", "files_sha256": identity}}}
    refused_in_one_line(capsys, tmp_path, _with_wheel(tmp_path, evil, software), "installs other files")
    imported = unpacking.unpack(_with_wheel(tmp_path / "ok", good, software), tmp_path / "dest2")
    assert imported.wheels == [tmp_path / "dest2" / "wheels" / imported.run_dir.name / good.name]
    fp = runs.read_json(imported.run_dir / "fingerprint.json")
    checked = unpacking.checked_wheels(tmp_path / "dest2", imported.run_dir.name, fp)
    assert checked.hashes == {good.name: hashlib.sha256(good.read_bytes()).hexdigest()}


def test_a_wheel_planted_in_a_runs_folder_is_refused_before_pip_sees_it(tmp_path):
    """The rebuild of a run takes only the wheels of its own folder, and checks each again."""
    run = sealed_run(tmp_path / "runs")
    folder = unpacking.run_wheels(tmp_path / "runs", run.name)
    folder.mkdir(parents=True)
    _wheel(folder, "helpful", "1.0", {"helpful.pth": b"import os\n"})
    fp = runs.read_json(run / "fingerprint.json")
    with pytest.raises(ArchiveError, match="is not one run .* sealed record names"):
        unpacking.checked_wheels(tmp_path / "runs", run.name, fp)


def test_unpack_holds_the_gc_lock_and_refreshes_the_objects_it_reuses(tmp_path):
    """A gc racing an import removed the imported run's objects: the import holds ``.gc.lock`` shared
    while it stores objects and renames the run, and refreshes every object it reuses."""
    path, data = good_archive(tmp_path)
    dest = tmp_path / "dest"
    first = unpacking.unpack(path, tmp_path / "other")  # the same objects in another store first
    digest = next(iter(data["objects"]))
    src = objects.object_path(tmp_path / "other", digest)
    assert objects.put(dest, str(src), digest)
    old = time.time() - 3600
    os.utime(objects.object_path(dest, digest), (old, old))
    with gc.store_lock(dest, shared=False, wait_s=None):  # a gc in progress: the import must wait for it
        started = time.monotonic()
        unpacking.LOCK_WAIT_S, saved = 0.3, unpacking.LOCK_WAIT_S
        try:
            with pytest.raises(ArchiveError, match="busy"):
                unpacking.unpack(path, dest)
        finally:
            unpacking.LOCK_WAIT_S = saved
        assert time.monotonic() - started >= 0.3
    assert not (dest / first.run_dir.name).exists()
    imported = unpacking.unpack(path, dest)
    assert objects.object_path(dest, digest).stat().st_mtime > old + 3000  # refreshed: a gc marking now keeps it
    report = gc.collect(dest)
    assert report.removed == [] and runs.verify_seal(imported.run_dir)


def test_pack_writes_the_archive_no_wider_than_the_most_private_file_it_holds(tmp_path, capsys):
    run = sealed_run(tmp_path / "runs")
    packed = packing.pack(run, tmp_path / "wide.tar")
    assert packed.mode == 0o644 and (packed.path.stat().st_mode & 0o777) == 0o644
    digest = hashlib.sha256(b"digits").hexdigest()
    objects.object_path(tmp_path / "runs", digest).chmod(0o400)  # the data file was 0600
    assert main(["pack", str(run), "-o", str(tmp_path / "private.tar")]) == 0
    assert (tmp_path / "private.tar").stat().st_mode & 0o777 == 0o600
    assert "is mode 0600" in capsys.readouterr().err
    assert main(["pack", str(run), "-o", str(tmp_path / "widened.tar"), "--mode", "644"]) == 0
    assert (tmp_path / "widened.tar").stat().st_mode & 0o777 == 0o644


def test_a_store_that_is_a_file_is_named_as_such(tmp_path):
    path, _ = good_archive(tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ArchiveError, match="is not a directory"):
        unpacking.unpack(path, tmp_path / "file")
    assert tree(tmp_path / "src")  # untouched
