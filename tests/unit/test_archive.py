"""launch pack / unpack: a sealed run and its objects in one file; bad archives refused in one line, exit 2,
with nothing written outside the destination (issue 41). Runs are made here by hand and sealed: no training."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from launcher.cli.main import main
from launcher.errors import ArchiveError, SnapshotError
from launcher.record.store import objects, runs, snapshot
from launcher.share import archive_index
from launcher.share import pack as packing
from launcher.share import unpack as unpacking
from tests import factories


def sealed_run(store: Path, name: str = "20261126-120000-abcdef", data: bytes = b"digits", **over) -> Path:
    """A sealed run of ``store`` whose snapshot keeps a script and a data file (two objects), and
    leaves a third out. ``over``: ``factories.sealed_run``'s other arguments (a config, a key)."""
    project = store.parent / "project"
    project.mkdir(parents=True, exist_ok=True)
    (project / "train.py").write_text("print('train')\n")
    (project / "digits.npz").write_bytes(data)
    made = {
        "config": "train:\n  name: script\nstore:\n  root: runs\n",
        "kept": {project / "train.py": "script", project / "digits.npz": "data"},
        "launch_dir": project,
        "left_out": {str(project / "big.npz"): "over store.snapshot_max_mb"},
        "fingerprint": {"data": {"digits.npz": hashlib.sha256(data).hexdigest(), "big.npz": "b" * 64}},
        "result": {"weights_sha256": "0" * 64},
        "outputs": {},
    }
    return factories.sealed_run(store, name, **{**made, **over})


def tree(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


@pytest.mark.parametrize("compression", ["gzip", "plain"])
def test_pack_and_unpack_carry_the_run_and_its_objects_to_another_store(tmp_path, compression):
    run = sealed_run(tmp_path / "a" / "runs")
    packed = packing.pack(run, tmp_path / "run.launch.tar", compression=compression)
    with open(packed.path, "rb") as f:
        assert archive_index.compression_of(f.read(4)) == compression
    with tarfile.open(packed.path) as tar:
        names = tar.getnames()
    assert names[0] == archive_index.NAME  # the index comes first
    assert f"run/{run.name}/manifest.json" in names and len([n for n in names if n.startswith("objects/")]) == 2
    data = packed.index
    assert data["run"] == run.name and len(data["objects"]) == 2 and data["signed"] is False
    big = str(tmp_path / "a" / "project" / "big.npz")
    assert data["left_out"] == {big: {"name": "big.npz", "sha256": "b" * 64, "why": "over store.snapshot_max_mb"}}

    imported = unpacking.unpack(packed.path, tmp_path / "b" / "runs")
    assert imported.run_dir == tmp_path / "b" / "runs" / run.name and not imported.already
    runs.verify_seal(imported.run_dir)  # sealed as it was
    assert not os.access(imported.run_dir / "config.yaml", os.W_OK) or os.geteuid() == 0
    assert (imported.run_dir / "config.yaml").stat().st_mode & 0o222 == 0  # read-only, as a sealed run
    snap = snapshot.read(imported.run_dir)
    for entry in snap["files"].values():  # every object the snapshot names, with its content
        obj = objects.object_path(tmp_path / "b" / "runs", entry["sha256"])
        assert hashlib.sha256(obj.read_bytes()).hexdigest() == entry["sha256"]
    assert not [p for p in (tmp_path / "b" / "runs").iterdir() if p.name.startswith(".unpack-")]
    again = unpacking.unpack(packed.path, tmp_path / "b" / "runs")  # the same run again: found, not copied
    assert again.already


def test_zstd_archives_are_written_and_read_when_zstandard_is_installed(tmp_path):
    pytest.importorskip("zstandard")
    run = sealed_run(tmp_path / "a" / "runs")
    packed = packing.pack(run, tmp_path / "run.tar.zst", compression="zstd")
    assert packed.path.read_bytes()[:4] == b"\x28\xb5\x2f\xfd"
    assert unpacking.unpack(packed.path, tmp_path / "b").run_dir.name == run.name


def test_a_zstd_archive_without_zstandard_is_refused_naming_the_package(tmp_path, monkeypatch):
    import sys

    path = tmp_path / "x.tar.zst"
    path.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 100)
    monkeypatch.setitem(sys.modules, "zstandard", None)
    with pytest.raises(ArchiveError, match="zstandard"):
        unpacking.unpack(path, tmp_path / "store")


def test_packing_refuses_a_run_that_is_not_sealed_naming_why(tmp_path, capsys):
    run = tmp_path / "runs" / "20261126-120000-abcdef"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("train: {name: mnist}\n")
    runs.set_status(run, "interrupted", error="Ctrl-C")
    assert main(["pack", str(run), "-o", str(tmp_path / "x.tar.gz")]) == 4
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "is not complete (state: interrupted" in err and "launch resume" in err
    assert not (tmp_path / "x.tar.gz").exists()


def test_packing_into_a_directory_that_does_not_exist_is_one_line(tmp_path, capsys):
    run = sealed_run(tmp_path / "runs")
    assert main(["pack", str(run), "-o", str(tmp_path / "no" / "such" / "x.tar.gz")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("launch: error: cannot write ") and "No such file" in err


def test_packing_refuses_a_run_whose_object_is_gone_from_the_store(tmp_path):
    run = sealed_run(tmp_path / "runs")
    digest = next(iter(snapshot.read(run)["files"].values()))["sha256"]
    objects.object_path(tmp_path / "runs", digest).unlink()
    with pytest.raises(SnapshotError, match="missing from the store"):
        packing.pack(run, tmp_path / "x.tar.gz")


# ---------------------------------------------------------------- bad archives
def good_archive(tmp_path: Path) -> tuple[Path, dict]:
    run = sealed_run(tmp_path / "src" / "runs")
    packed = packing.pack(run, tmp_path / "good.tar", compression="plain")
    return packed.path, packed.index


def rewrite(source: Path, target: Path, change) -> Path:
    """A copy of the plain tar ``source`` with its members passed through ``change(info, data) ->
    [(info, data), ...]`` (the index too), written as it is: what a hostile archive could hold."""
    with tarfile.open(source) as tar:
        members = [(m, tar.extractfile(m).read() if m.isreg() else None) for m in tar.getmembers()]
    with tarfile.open(target, "w") as out:
        for info, data in members:
            for new_info, new_data in change(info, data):
                if new_data is not None:
                    new_info.size = len(new_data)
                out.addfile(new_info, io.BytesIO(new_data) if new_data is not None else None)
    return target


def with_index(data: dict) -> bytes:
    return json.dumps(data).encode()


def refused_in_one_line(capsys, tmp_path: Path, path: Path, *words: str) -> str:
    """`launch unpack PATH` into tmp_path/dest: exit 2, one line naming ``words``, and nothing written
    outside tmp_path/dest nor any run or object inside it."""
    before = tree(tmp_path) - {p for p in tree(tmp_path) if p.startswith("dest")}
    code = main(["unpack", str(path), "--store", str(tmp_path / "dest")])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith("launch: error: ") and "\n" not in err, err
    for word in words:
        assert word in err, err
    after = tree(tmp_path)
    assert {p for p in after if not p.startswith("dest")} == before  # nothing outside the destination
    inside = {p for p in after if p.startswith("dest/")}
    assert not [p for p in inside if "/objects/" in p or p.count("/") == 1 and p[5:].startswith("2026")], inside
    assert not [p for p in inside if ".unpack-" in p], inside  # the temporary directory is gone
    return err


def test_a_truncated_archive_is_refused(tmp_path, capsys):
    path, _ = good_archive(tmp_path)
    with tarfile.open(path) as tar:
        members = tar.getmembers()
    end = max(m.offset_data + m.size for m in members)  # past it: the end blocks and padding only
    for cut in (members[0].offset_data + 10, end // 2, end - 1):
        short = tmp_path / f"short-{cut}.tar"
        short.write_bytes(path.read_bytes()[:cut])
        refused_in_one_line(capsys, tmp_path, short)
    gz = packing.pack(sealed_run(tmp_path / "g" / "runs"), tmp_path / "g.tar.gz", compression="gzip").path
    short = tmp_path / "short.tar.gz"
    short.write_bytes(gz.read_bytes()[: gz.stat().st_size // 2])
    refused_in_one_line(capsys, tmp_path, short, "truncated or corrupted")


def test_a_corrupted_gzip_archive_is_refused(tmp_path, capsys):
    gz = packing.pack(sealed_run(tmp_path / "g" / "runs"), tmp_path / "g.tar.gz", compression="gzip").path
    data = bytearray(gz.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(b ^ 0xFF for b in data[middle : middle + 64])
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(bytes(data))
    refused_in_one_line(capsys, tmp_path, bad)


def test_a_file_that_is_no_archive_is_refused(tmp_path, capsys):
    path = tmp_path / "notes.txt"
    path.write_text("hello\n" * 200)
    refused_in_one_line(capsys, tmp_path, path)


@pytest.mark.parametrize("name", ["../escaped.txt", "run/../../escaped.txt", "/tmp/escaped-launch-test.txt"])
def test_a_climbing_or_absolute_member_is_refused(tmp_path, capsys, name):
    path, data = good_archive(tmp_path)

    def change(info, content):
        yield info, content
        if info.name == archive_index.NAME:
            evil = tarfile.TarInfo(name)
            yield evil, b"owned\n"

    bad = rewrite(path, tmp_path / "climb.tar", change)
    refused_in_one_line(capsys, tmp_path, bad, repr(name))
    assert not (tmp_path.parent / "escaped.txt").exists() and not Path("/tmp/escaped-launch-test.txt").exists()


def test_a_link_pointing_out_of_the_run_is_refused(tmp_path, capsys):
    path, data = good_archive(tmp_path)

    def change(info, content):
        yield info, content
        if info.name == archive_index.NAME:
            link = tarfile.TarInfo(f"run/{data['run']}/outputs/passwd")
            link.type, link.linkname = tarfile.SYMTYPE, "../../../../etc/passwd"
            yield link, None

    err = refused_in_one_line(capsys, tmp_path, rewrite(path, tmp_path / "link.tar", change), "is a symbolic link")
    assert "outputs/passwd" in err


@pytest.mark.parametrize(
    ("kind", "called"),
    [
        (tarfile.LNKTYPE, "a hard link"),
        (tarfile.CHRTYPE, "a character device"),
        (tarfile.FIFOTYPE, "a fifo"),
        (tarfile.SYMTYPE, "a symbolic link"),
    ],
)
def test_links_devices_and_fifos_are_refused_each_by_its_name(tmp_path, capsys, kind, called):
    path, data = good_archive(tmp_path)

    def change(info, content):
        yield info, content
        if info.name == archive_index.NAME:
            odd = tarfile.TarInfo(f"run/{data['run']}/outputs/odd")
            odd.type, odd.linkname = kind, f"run/{data['run']}/config.yaml"
            yield odd, None

    refused_in_one_line(
        capsys,
        tmp_path,
        rewrite(path, tmp_path / "odd.tar", change),
        f"is {called}:",
        "holds files and directories only",
    )


def test_an_object_whose_content_does_not_match_its_name_is_refused(tmp_path, capsys):
    path, _ = good_archive(tmp_path)

    def change(info, content):
        if info.name.startswith("objects/") and content == b"digits":
            yield info, b"DIGITS"  # same size, other bytes: the name no longer says what it holds
        else:
            yield info, content

    refused_in_one_line(capsys, tmp_path, rewrite(path, tmp_path / "obj.tar", change), "does not match its name")


def test_an_index_naming_files_the_archive_lacks_is_refused(tmp_path, capsys):
    path, data = good_archive(tmp_path)
    gone = f"run/{data['run']}/result.json"

    def change(info, content):
        if info.name != gone:
            yield info, content

    refused_in_one_line(capsys, tmp_path, rewrite(path, tmp_path / "lacks.tar", change), gone, "lacks")


def test_a_member_the_index_does_not_name_is_refused(tmp_path, capsys):
    path, data = good_archive(tmp_path)

    def change(info, content):
        yield info, content
        if info.name == archive_index.NAME:
            yield tarfile.TarInfo(f"run/{data['run']}/extra.py"), b"import os\n"

    refused_in_one_line(capsys, tmp_path, rewrite(path, tmp_path / "extra.tar", change), "not named by")


def test_a_run_edited_and_relisted_in_the_index_is_refused_by_its_seal(tmp_path, capsys):
    """The archive's index is not the seal: a run file changed and listed anew there still fails the
    run's own manifest.json."""
    path, data = good_archive(tmp_path)
    forged = b'{"weights_sha256": "' + b"1" * 64 + b'"}\n'
    name = f"run/{data['run']}/result.json"

    def change(info, content):
        if info.name == archive_index.NAME:
            relisted = json.loads(content)
            relisted["run_files"]["result.json"] = {"sha256": hashlib.sha256(forged).hexdigest(), "size": len(forged)}
            yield info, with_index(relisted)
        elif info.name == name:
            yield info, forged
        else:
            yield info, content

    refused_in_one_line(capsys, tmp_path, rewrite(path, tmp_path / "forged.tar", change), "changed after sealing")


def test_an_index_naming_a_climbing_run_is_refused_before_any_member_is_read(tmp_path, capsys):
    path, _ = good_archive(tmp_path)

    def change(info, content):
        if info.name == archive_index.NAME:
            data = json.loads(content)
            data["run"] = ".."
            yield info, with_index(data)
        else:
            yield info, content

    refused_in_one_line(capsys, tmp_path, rewrite(path, tmp_path / "dots.tar", change), "not a run's id")


def test_another_run_of_the_same_name_in_the_store_is_refused(tmp_path, capsys):
    path, data = good_archive(tmp_path)
    sealed_run(tmp_path / "dest", data["run"], data=b"other digits")
    code = main(["unpack", str(path), "--store", str(tmp_path / "dest")])
    assert code == 2 and "already holds another run named" in capsys.readouterr().err


# ---------------------------------------------------------------- pure
@pytest.mark.parametrize(
    ("name", "kind", "why"),
    [
        ("run/R/config.yaml", "file", None),
        ("run/R/outputs/", "directory", None),
        ("objects/ab", "directory", None),
        ("run/R/x", "file", "is not named by the archive's index"),
        ("run/R/../R/config.yaml", "file", "not a normalised relative path"),
        ("/run/R/config.yaml", "file", "absolute"),
        ("run\\R", "file", "backslash"),
        ("run/R/latest", "symbolic link", "is a symbolic link: a launch archive holds files and directories only"),
        ("run/R/dev", "block device", "is a block device"),
        ("run/R/pipe", "fifo", "is a fifo"),
        ("wheels", "directory", "do not need"),
        ("run/R/" + "d/" * 40 + "x", "file", "components"),
        ("run/R/" + "x" * 300, "file", "longer than 255"),
    ],
)
def test_member_problem(name, kind, why):
    expected = {"run/R/config.yaml": ("a" * 64, 1), "objects/ab/" + "ab" * 32: ("ab" * 32, 1)}
    problem = archive_index.member_problem(name, kind, "R", expected, archive_index.directories(expected))
    assert (problem is None) if why is None else (why in problem), problem


RUN_ID = "20261126-120000-abcdef"


def test_check_index_refuses_names_that_would_become_paths_elsewhere():
    entry = {"sha256": "a" * 64, "size": 1}
    good = archive_index.index(RUN_ID, {"manifest.json": entry}, {"b" * 64: 3}, {}, {}, False, "0", "now")
    assert archive_index.check_index(good) is good
    for change, words in (
        ({"run": "../x"}, "not a run's id"),
        ({"run": "a/b"}, "not a run's id"),
        ({"run_files": {"../x": entry, "manifest.json": entry}}, "normalised"),
        ({"run_files": {"config.yaml": entry}}, "no manifest.json"),
        ({"run_files": {"manifest.json": "a" * 64}}, "no sha256"),
        ({"run_files": {"manifest.json": {"sha256": "a" * 64, "size": -1}}}, "not a number"),
        ({"objects": {"../../etc": 1}}, "64 lowercase"),
        ({"objects": {"b" * 64: "3"}}, "not a number"),
        ({"wheels": {"../x.whl": {"sha256": "a" * 64, "size": 1}}}, "not a wheel's file name"),
        ({"version": 1}, "version"),
        ({"format": "zip"}, "not a launch archive"),
    ):
        with pytest.raises(ArchiveError, match=words):
            archive_index.check_index({**good, **change})


def test_wheel_identity_is_the_installed_distributions_files_sha256():
    """A wheel's RECORD, its .data/purelib files moved into site-packages and its scripts left out,
    gives what distributions.files_sha256 gives for the same distribution installed."""
    from launcher.record.probe import distributions

    wheel = (
        "pkg/__init__.py,sha256=AAA,3\npkg-1.0.data/purelib/extra.py,sha256=BBB,3\n"
        "pkg-1.0.data/scripts/tool,sha256=CCC,3\npkg-1.0.dist-info/METADATA,sha256=DDD,3\n"
        "pkg-1.0.dist-info/RECORD,,\n"
    )
    installed = (
        "pkg/__init__.py,sha256=AAA,3\nextra.py,sha256=BBB,3\n../../../bin/tool,sha256=EEE,3\n"
        "pkg-1.0.dist-info/METADATA,sha256=DDD,3\npkg-1.0.dist-info/INSTALLER,sha256=FFF,4\n"
        "pkg/__pycache__/__init__.cpython-311.pyc,,\npkg-1.0.dist-info/RECORD,,\n"
    )
    assert archive_index.wheel_identity(wheel) == distributions.files_sha256(distributions.parse_record(installed))
    assert archive_index.wheel_identity(wheel.replace("BBB", "XXX")) != distributions.files_sha256(
        distributions.parse_record(installed)
    )


def test_requirement_closure_follows_this_platforms_requirements_only():
    requires = {
        "tf-repro-launcher": [
            "hydra-core>=1.3",
            "tensorflow>=2.16; platform_machine != 'x86_64'",
            "tensorflow-cpu>=2.16; platform_machine == 'x86_64'",
            "mlflow; extra == 'mlflow'",
        ],
        "hydra-core": ["omegaconf<2.4,>=2.2", "antlr4-python3-runtime==4.9.*"],
        "omegaconf": ["PyYAML>=5.1.0"],
        "tensorflow-cpu": ["numpy>=1.26"],
    }
    import platform

    closure = archive_index.requirement_closure("tf-repro-launcher", requires)
    assert {"tf-repro-launcher", "hydra-core", "omegaconf", "antlr4-python3-runtime", "pyyaml"} <= closure
    assert "mlflow" not in closure
    if platform.machine() == "x86_64":
        assert {"tensorflow-cpu", "numpy"} <= closure and "tensorflow" not in closure


def test_wheel_plan_is_what_the_job_used_and_what_the_launcher_needs_at_the_recorded_versions():
    fp = {
        "software": {
            "packages": ["numpy==2.4.6", "PyYAML==6.0.3", "tf-repro-launcher==0.1.0", "rich==15.0"],
            "distributions": {"numpy": {"version": "2.4.6"}, "tf-repro-launcher": {"version": "0.1.0"}, "gone": None},
        }
    }
    plan = archive_index.wheel_plan(fp, {"pyyaml", "tf-repro-launcher", "nvidia-ml-py"}, {"nvidia-ml-py": "13.6"})
    assert plan == {"numpy": "2.4.6", "nvidia-ml-py": "13.6", "pyyaml": "6.0.3"}  # nvidia-ml-py: installed after
    with pytest.raises(ArchiveError, match="needs not-installed"):
        archive_index.wheel_plan(fp, {"not-installed"}, {})


def test_the_output_name_chooses_the_compression(tmp_path):
    run = sealed_run(tmp_path / "runs")
    compression_for = archive_index.compression_for
    assert compression_for("x.tar.gz") == "gzip" and compression_for("x.tar") == "plain"
    assert compression_for("x.tar.zst") == "zstd" and compression_for("x.bin") is None
    with open(packing.pack(run, tmp_path / "a.tar.gz").path, "rb") as f:
        assert archive_index.compression_of(f.read(4)) == "gzip"


def test_compression_of():
    assert archive_index.compression_of(b"\x1f\x8b\x08\x00") == "gzip"
    assert archive_index.compression_of(b"\x28\xb5\x2f\xfd") == "zstd"
    assert archive_index.compression_of(b"laun") == "plain"


def _installed(site: Path, files: dict[str, bytes]) -> str:
    """A distribution ``fake`` 1.0 installed from a wheel into ``site``: its files, METADATA, WHEEL,
    an INSTALLER marker and a RECORD of them all; returns its identity (files_sha256)."""
    import base64

    from launcher.record.probe import distributions

    info = site / "fake-1.0.dist-info"
    content = {
        **files,
        f"{info.name}/METADATA": b"Metadata-Version: 2.1\nName: fake\nVersion: 1.0\n",
        f"{info.name}/WHEEL": b"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info.name}/INSTALLER": b"pip\n",
    }
    lines = []
    for path, data in content.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_bytes(data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{path},sha256={digest},{len(data)}\n")
    record = "".join(lines) + f"{info.name}/RECORD,,\n"
    (info / "RECORD").write_text(record)
    return distributions.files_sha256(distributions.parse_record(record))


def test_a_distribution_is_packed_from_its_installed_files_when_they_are_the_runs(tmp_path):
    """What pip's cache or the index cannot give again (an sdist rebuilt with today's tools installs
    other files): the wheel packed from the installed files has the run's identity, the same bytes
    each time, and installs them; a file changed since the install, or another version, packs nothing."""
    import zipfile

    from launcher.share import wheels

    site, dest = tmp_path / "site", tmp_path / "wheels"
    site.mkdir(), dest.mkdir()
    identity = _installed(site, {"fake/__init__.py": b"x = 1\n", "fake/data.txt": b"digits\n"})
    wheel = wheels.installed_wheel("fake", "1.0", identity, dest, path=[str(site)])
    assert wheel is not None and wheel.name == "fake-1.0-py3-none-any.whl"
    assert wheels._wheel_record_identity(wheel) == identity
    with zipfile.ZipFile(wheel) as z:
        assert z.read("fake/data.txt") == b"digits\n" and "fake-1.0.dist-info/INSTALLER" not in z.namelist()
    first = wheel.read_bytes()
    assert wheels.installed_wheel("fake", "1.0", identity, dest, path=[str(site)]).read_bytes() == first
    assert [p.name for p in dest.iterdir()] == [wheel.name]
    assert wheels.installed_wheel("fake", "2.0", identity, dest, path=[str(site)]) is None
    assert wheels.installed_wheel("fake", "1.0", "0" * 64, dest, path=[str(site)]) is None  # not the run's files
    (site / "fake" / "data.txt").write_bytes(b"edited\n")  # RECORD unchanged: the file is not what it says
    assert wheels.installed_wheel("fake", "1.0", identity, dest, path=[str(site)]) is None
