"""What a job used: the pure classification of paths, and what the job process records."""

from __future__ import annotations

import csv
import hashlib
import os
import sys
import tempfile
import time
import types
from pathlib import Path

import pytest

from launcher.job.observe import reads
from launcher.record.probe import distributions, places, usage

ROOTS = places.Roots(
    site=("/py/lib/python3.11/site-packages",),
    python=("/py",),
    launcher="/src/launcher",
    ignored=("/store/run-1",),
)


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/src/launcher/run/job.py", "launcher"),
        ("/py/lib/python3.11/site-packages/keras/__init__.py", "site"),
        ("/py/lib/python3.11/json/__init__.py", "python"),
        ("/home/me/project/helper.py", "user"),
        ("/pyx/thing.py", "user"),  # a sibling whose name starts like a root is not under it
    ],
)
def test_classify(path, kind):
    assert places.classify(path, ROOTS) == kind


def test_real_paths_resolve_as_realpath_does_through_linked_directories_and_files(tmp_path):
    (tmp_path / "real" / "pkg").mkdir(parents=True)
    (tmp_path / "real" / "pkg" / "mod.py").write_text("")
    (tmp_path / "real" / "pkg" / "other.py").write_text("")
    (tmp_path / "linked").symlink_to(tmp_path / "real")  # a linked directory
    (tmp_path / "real" / "pkg" / "alias.py").symlink_to("other.py")  # a linked file, relative
    (tmp_path / "real" / "up").symlink_to("pkg/../pkg/mod.py")
    real = places.RealPaths()
    paths = [
        tmp_path / "linked" / "pkg" / "mod.py",
        tmp_path / "linked" / "pkg" / "alias.py",
        tmp_path / "linked" / "pkg" / ".." / "pkg" / "mod.py",
        tmp_path / "linked" / "up",
        tmp_path / "linked" / "pkg" / "missing.py",
        tmp_path / "linked",
        Path("relative.py"),
    ]
    for path in [*paths, *paths]:  # the second time from what it remembered
        assert real(str(path)) == os.path.realpath(path), path


def test_parse_maps_keeps_shared_libraries_in_first_mapped_order():
    text = "\n".join(
        [
            "7f00-7f01 r--p 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libm.so.6",
            "7f01-7f02 r-xp 00001000 08:01 1 /usr/lib/x86_64-linux-gnu/libm.so.6",
            "7f02-7f03 r--p 00000000 08:01 2 /py/lib/python3.11/site-packages/tensorflow/libtensorflow_cc.so.2",
            "7f03-7f04 rw-p 00000000 00:00 0 [heap]",
            "7f04-7f05 r--p 00000000 08:01 3 /tmp/gone.so (deleted)",
            "7f05-7f06 r--p 00000000 08:01 4 /data/weights.bin",
        ]
    )
    assert usage.parse_maps(text) == [
        "/usr/lib/x86_64-linux-gnu/libm.so.6",
        "/py/lib/python3.11/site-packages/tensorflow/libtensorflow_cc.so.2",
    ]


def test_parse_maps_reads_a_path_with_spaces_and_lines_without_a_path():
    text = "\n".join(
        [
            "7f00-7f01 rw-p 00000000 00:00 0",  # an anonymous mapping: no path
            "7f01-7f02 r--p 00000000 08:01 1 /opt/my libs/libx.so.1",
            "7f02-7f03 r--p 00000000 08:01 2 /usr/lib/libm.so.6",
        ]
    )
    assert usage.parse_maps(text) == ["/opt/my libs/libx.so.1", "/usr/lib/libm.so.6"]


def test_tool_caches_are_below_every_cache_and_config_root():
    environ = {"XDG_CACHE_HOME": "/x/cache", "XDG_CONFIG_HOME": "/x/config", "MPLCONFIGDIR": "/mpl"}
    caches = usage.tool_caches("/home/u", environ)
    for base in ("/home/u/.cache", "/home/u/.config", "/x/cache", "/x/config"):
        assert {f"{base}/{tool}" for tool in usage.TOOL_CACHES} <= set(caches), base
    assert caches[-1] == "/mpl" and len(caches) == 4 * len(usage.TOOL_CACHES) + 1
    assert usage.tool_caches("/home/u", {}) == tuple(
        f"/home/u/{base}/{tool}" for base in (".cache", ".config") for tool in usage.TOOL_CACHES
    )


def test_a_path_the_job_named_relatively_is_shown_relative_to_the_launch_directory_by_default():
    assert usage.display_name("/w/data/a.csv", "/w") == "data/a.csv"
    assert usage.display_name("/w/data/a.csv", "/w", relative=False) == "/w/data/a.csv"
    assert usage.display_name("/elsewhere/a.csv", "/w") == "/elsewhere/a.csv"


def test_data_files_judge_each_file_on_its_own(tmp_path):
    """Whatever is left out (a sentinel path, the job's output, code), the files after it are judged."""
    for name in ("a.pyc", "b.pyo", "c.pth", "d.py", "z.csv"):
        (tmp_path / name).write_text("x")
    read = {"read": True, "written_first": False, "stat": ("x",)}
    opened = {str(tmp_path / name): read for name in ("a.pyc", "b.pyo", "c.pth", "d.py", "z.csv")}
    opened |= {
        str(tmp_path / "a\0sentinel"): read,
        str(tmp_path / "a-out"): {"read": True, "written_first": True},
        str(tmp_path / "a-absent"): {"read": True, "written_first": False, "stat": None},
        str(tmp_path / "home" / ".cache" / "pip" / "x.csv"): read,
    }
    (tmp_path / "home" / ".cache" / "pip").mkdir(parents=True)
    (tmp_path / "home" / ".cache" / "pip" / "x.csv").write_text("a tool's own cache")
    assert usage.data_files(opened, ROOTS, str(tmp_path / "home")) == [str(tmp_path / "z.csv")]


def test_data_files_are_what_the_job_read_and_nothing_else(tmp_path):
    home = tmp_path / "home"
    for name in ("data.npz", "out.txt", "helper.py", "keras.json", "ext.so"):
        (tmp_path / name).write_text("x")
    (home / ".cache" / "matplotlib").mkdir(parents=True)
    (home / ".cache" / "matplotlib" / "fontlist.json").write_text("x")
    (home / ".cache" / "myproject").mkdir(parents=True)
    (home / ".cache" / "myproject" / "train.csv").write_text("x")
    read = {"read": True, "written_first": False}
    opened = {
        str(tmp_path / "data.npz"): read,
        str(tmp_path / "out.txt"): {"read": True, "written_first": True},  # its own output
        str(tmp_path / "helper.py"): read,  # code
        str(tmp_path / "keras.json"): read,  # created by Keras on first import
        str(tmp_path / "ext.so"): read,  # a library
        str(home / ".cache" / "matplotlib" / "fontlist.json"): read,  # a tool's own cache
        str(home / ".cache" / "myproject" / "train.csv"): read,  # a data set a download helper keeps
        str(tmp_path / "missing.npz"): read,  # gone by now
        str(tmp_path / "written.npz"): {"read": False, "written_first": True},
    }
    assert usage.data_files(opened, ROOTS, str(home)) == [
        str(tmp_path / "data.npz"),
        str(home / ".cache" / "myproject" / "train.csv"),
    ]


def test_tools_caches_under_xdg_directories_and_files_absent_when_read_are_not_data(tmp_path):
    """matplotlib keeps its font list in $XDG_CACHE_HOME/matplotlib (or $MPLCONFIGDIR): its own
    cache, never the job's data; and a file the job looked for before anything made it held no input."""
    xdg, mpl = tmp_path / "xdg-cache", tmp_path / "mpl"
    for path in (
        xdg / "matplotlib" / "fontlist.json",
        mpl / "fontlist.json",
        xdg / "myproject" / "a.csv",
        tmp_path / "made-later.json",
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    read = {"read": True, "written_first": False, "stat": ("x",)}
    opened = {
        str(xdg / "matplotlib" / "fontlist.json"): read,
        str(mpl / "fontlist.json"): read,
        str(xdg / "myproject" / "a.csv"): read,
        str(tmp_path / "made-later.json"): {"read": True, "written_first": False, "stat": None},
    }
    environ = {"XDG_CACHE_HOME": str(xdg), "MPLCONFIGDIR": str(mpl)}
    home = str(tmp_path / "home")
    assert usage.data_files(opened, ROOTS, home, environ=environ) == [str(xdg / "myproject" / "a.csv")]
    assert len(usage.data_files(opened, ROOTS, home)) == 3  # without the variables, they are other directories


def test_a_file_first_looked_for_then_made_by_the_job_is_its_output_and_one_made_by_another_is_read(tmp_path):
    reads.opened.clear()
    cache, fetched = tmp_path / "fontlist.json", tmp_path / "fetched.npz"
    for path in (cache, fetched):
        reads.note(str(path))  # a read that finds nothing (the audit event comes before the open)
    cache.write_text("{}")
    reads.note(str(cache), writing=True)  # the job writes it: a cache of its own
    fetched.write_text("data")  # a child process (a download) made this one
    reads.note(str(fetched))
    assert reads.opened[str(cache)]["written_first"] is True
    assert reads.opened[str(fetched)]["stat"] is not None and not reads.opened[str(fetched)]["written_first"]
    assert usage.data_files(reads.opened, ROOTS, str(tmp_path / "home")) == [str(fetched)]
    reads.opened.clear()


def test_ram_disks_hold_data_and_the_rest_of_the_system_does_not(tmp_path):
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK):
        pytest.skip("no writable /dev/shm here")
    with tempfile.NamedTemporaryFile(dir=shm, suffix=".npz") as f:
        read = {"read": True, "written_first": False}
        opened = {f.name: read, "/etc/hostname": read, "/proc/cpuinfo": read}
        assert usage.data_files(opened, ROOTS, str(tmp_path)) == [f.name]


def test_listed_files_are_those_from_before_the_job():
    found = [("/d/a.png", 100), ("/d/b.png", 199), ("/d/ckpt.index", 200), ("/d/a.png", 100)]
    assert usage.listed_files(found, started_ns=200) == ["/d/a.png", "/d/b.png"]


def test_scan_finds_the_files_of_listed_directories_and_patterns_but_not_of_runs(tmp_path):
    (tmp_path / "imgs" / "sub").mkdir(parents=True)
    (tmp_path / "imgs" / "a.png").write_text("a")
    (tmp_path / "imgs" / "sub" / "b.png").write_text("b")  # below, not in: walk lists it apart
    (tmp_path / "shards").mkdir()
    for name in ("x-0.tfrecord", "x-1.tfrecord", "y.txt"):
        (tmp_path / "shards" / name).write_text(name)
    run = tmp_path / "store" / "20260101-000000-abcdef"  # a run directory, named as runs.create names them
    (run / "outputs").mkdir(parents=True)
    for marker in usage.RUN_MARKERS:
        (run / marker).write_text("{}")
    (run / "outputs" / "w.npz").write_text("w")
    listed = dict.fromkeys([str(tmp_path / "imgs"), str(run / "outputs"), str(tmp_path / "nowhere")], False)
    found = usage._scan(listed, {str(tmp_path / "shards" / "x-*.tfrecord"): False})
    assert sorted(os.path.relpath(path, tmp_path) for path, _, _ in found) == [
        "imgs/a.png",
        "shards/x-0.tfrecord",
        "shards/x-1.tfrecord",
    ]


@pytest.fixture
def recording(monkeypatch):
    """reads' module state, fresh and listening (the audit hook itself is never installed here)."""
    monkeypatch.setattr(reads, "listed", {})
    monkeypatch.setattr(reads, "patterns", {})
    monkeypatch.setattr(reads, "opened", {})
    monkeypatch.setattr(reads, "_recording", True)
    monkeypatch.setattr(reads, "_not_the_jobs", reads._not_the_jobs_listings())  # before listening
    monkeypatch.setattr(reads, "_listings", True)
    return reads


def test_the_hook_records_listings_by_the_job_and_not_by_imports(recording, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    reads._hook("os.scandir", (str(tmp_path / "imgs"),))
    reads._hook("os.listdir", (None,))  # os.listdir(): the working directory
    reads._hook("os.listdir", (b"/data/bytes",))
    reads._hook("os.scandir", (3,))  # a file descriptor: no path to record
    assert list(reads.listed) == [str(tmp_path / "imgs"), str(tmp_path), "/data/bytes"]


def test_the_real_audit_hook_tells_the_jobs_listing_from_the_import_systems(recording, tmp_path, monkeypatch):
    # The hook stays installed in this test process (audit hooks cannot be removed); it
    # records nothing once the fixture puts _recording back.
    reads.install()
    package_dir = tmp_path / "on_sys_path"
    package_dir.mkdir()
    (package_dir / "fresh_module_for_the_hook.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(package_dir))
    import fresh_module_for_the_hook  # noqa: F401  (the import system lists package_dir)

    assert str(package_dir) not in reads.listed
    os.listdir(package_dir)
    assert str(package_dir) in reads.listed


def test_nothing_is_recorded_before_the_job_starts_or_after_it_stops(recording):
    reads._listings = False
    reads._hook("os.listdir", ("/before",))
    reads.watch_listings()
    reads._hook("os.listdir", ("/during",))
    reads.stop()
    reads._hook("os.listdir", ("/after",))
    reads._hook("open", ("/after.npz", "r", 0))
    assert list(reads.listed) == ["/during"] and reads.opened == {}


def test_gather_counts_listed_files_as_read(tmp_path):
    data = tmp_path / "imgs"
    data.mkdir()
    (data / "a.png").write_bytes(b"png")
    run = tmp_path / "run"
    run.mkdir()
    seen = usage.Observed(
        modules={}, maps_text="", listed=[str(data)], started_ns=os.stat(data / "a.png").st_mtime_ns + 1
    )
    used = usage.gather(seen, str(run), str(tmp_path))
    assert used["data"] == {"imgs/a.png": hashlib.sha256(b"png").hexdigest()}
    later = usage.gather(usage.Observed(modules={}, maps_text="", listed=[str(data)]), str(run), str(tmp_path))
    assert later["data"] == {}  # written after the job started: its output


def test_the_native_listing_wrappers_note_what_tensorflow_lists(recording, tmp_path):
    tf = pytest.importorskip("tensorflow")
    reads._wrap_listings()
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "f.txt").write_text("x")
    reads.listed.clear()  # only what TensorFlow lists from here on
    assert sorted(tf.io.gfile.listdir(path=str(tmp_path / "d"))) == ["e", "f.txt"]  # by keyword, as users call it
    assert sorted(tf.io.gfile.listdir(str(tmp_path / "d"))) == ["e", "f.txt"]
    list(tf.io.gfile.walk(str(tmp_path)))  # walk lists through the module's own functions
    tf.compat.v1.gfile.ListDirectory(str(tmp_path / "d" / "e"))  # the v1 names: the same native call
    assert tf.io.gfile.glob(pattern=str(tmp_path / "d" / "*.txt")) == [str(tmp_path / "d" / "f.txt")]
    tf.data.Dataset.list_files(file_pattern=str(tmp_path / "*" / "f.txt"), shuffle=False)
    assert set(reads.listed) == {str(tmp_path / "d"), str(tmp_path), str(tmp_path / "d" / "e")}
    assert list(reads.patterns) == [str(tmp_path / "d" / "*.txt"), str(tmp_path / "*" / "f.txt")]


def test_globs_are_recorded_as_patterns_and_only_what_matches_counts(recording, tmp_path, monkeypatch):
    import glob

    reads.install()  # the real audit hook (stays installed; records only while recording)
    reads._wrap_listings()
    for name in ("a/img.png", "b/img.png", "b/notes.txt", "README"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(name)
    glob.glob(str(tmp_path / "*" / "img.png"))  # scans tmp_path itself: not a listing of it
    sorted(tmp_path.glob("*/notes.txt"))
    sorted((tmp_path / "a").rglob("*.png"))
    assert str(tmp_path) not in reads.listed
    assert list(reads.patterns) == [
        str(tmp_path / "*" / "img.png"),
        str(tmp_path / "*/notes.txt"),
        str(tmp_path / "a" / "**" / "*.png"),
    ]
    found = usage._scan({}, reads.patterns)
    assert sorted(os.path.relpath(p, tmp_path) for p, _, _ in found) == [
        "a/img.png",
        "a/img.png",
        "b/img.png",
        "b/notes.txt",
    ]


def test_a_file_is_recorded_as_the_job_named_it(tmp_path):
    # Relative (a script's np.load("rel.npz")): a replay elsewhere reads it relative to its own
    # directory. Absolute (train.data from the config, an absolute open): where a replay reads it.
    from launcher.record.filecache import stat_key

    for name in ("rel.npz", "abs.npz", "listed/a.png"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(name.encode())
    run = tmp_path / "run"
    run.mkdir()
    opened = {
        str(tmp_path / name): {
            "read": True,
            "written_first": False,
            "stat": stat_key(str(tmp_path / name)),
            "relative": name == "rel.npz",
        }
        for name in ("rel.npz", "abs.npz")
    }
    seen = usage.Observed(
        opened, modules={}, maps_text="", listed={str(tmp_path / "listed"): False}, started_ns=time.time_ns() + 1
    )
    used = usage.gather(seen, str(run), str(tmp_path))
    assert set(used["data"]) == {"rel.npz", str(tmp_path / "abs.npz"), str(tmp_path / "listed" / "a.png")}


# ---------------------------------------------------------------- a distribution's identity
_RECORD = [  # (path, hash) as pip writes them for a wheel with a console script
    ("demo/__init__.py", "sha256=module-a"),
    ("demo/__pycache__/__init__.cpython-311.pyc", "sha256=compiled-at-install-1"),
    ("demo-1.0.dist-info/METADATA", "sha256=metadata"),
    ("demo-1.0.dist-info/entry_points.txt", "sha256=entry-points"),
    ("demo-1.0.dist-info/INSTALLER", "sha256=pip"),
    ("demo-1.0.dist-info/REQUESTED", "sha256=empty"),
    ("demo-1.0.dist-info/direct_url.json", "sha256=from-/tmp/a"),
    ("demo-1.0.dist-info/RECORD", ""),
    ("../../../bin/demo", "sha256=shebang-of-/venv-a/bin/python"),
]


def _install(site, record: list[tuple[str, str]], version: str = "1.0"):
    """A fake installed distribution ``demo``: its dist-info with METADATA and RECORD (CSV, as pip writes it)."""
    info = site / f"demo-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: demo\nVersion: {version}\n")
    with open(info / "RECORD", "w", newline="") as f:
        csv.writer(f).writerows([(path, digest, "1" if digest else "") for path, digest in record])
    return site


def _identity(site, monkeypatch, name="demo"):
    with monkeypatch.context() as m:
        m.setattr(sys, "path", [str(site)])
        return distributions.distribution_identity(name)


def test_the_same_wheel_installed_elsewhere_or_otherwise_has_the_same_identity(tmp_path, monkeypatch):
    elsewhere = [
        ("../../../bin/demo", "sha256=shebang-of-/other/venv/bin/python"),  # another venv's Python
        ("demo-1.0.dist-info/INSTALLER", "sha256=uv"),
        ("demo-1.0.dist-info/direct_url.json", "sha256=from-/tmp/b"),
        ("demo/__pycache__/__init__.cpython-311.pyc", "sha256=compiled-at-install-2"),  # another source mtime
        *[
            (p, h)
            for p, h in _RECORD
            if not p.startswith(("..", "demo/__pycache__"))
            and "INSTALLER" not in p
            and "REQUESTED" not in p
            and "direct_url" not in p
        ],  # no REQUESTED: installed as a dependency
    ][::-1]
    a = _identity(_install(tmp_path / "a", _RECORD), monkeypatch)
    b = _identity(_install(tmp_path / "b", elsewhere), monkeypatch)
    assert a["version"] == b["version"] == "1.0"
    assert a["files_sha256"] == b["files_sha256"] and len(a["files_sha256"]) == 64
    assert a["record_sha256"] != b["record_sha256"]  # the whole RECORD, for reading, tells them apart


def test_a_changed_module_or_metadata_changes_the_identity(tmp_path, monkeypatch):
    a = _identity(_install(tmp_path / "a", _RECORD), monkeypatch)
    for i, (path, digest) in enumerate(
        [("demo/__init__.py", "sha256=module-b"), ("demo-1.0.dist-info/METADATA", "sha256=metadata-b")]
    ):
        record = [(p, digest if p == path else h) for p, h in _RECORD]
        assert _identity(_install(tmp_path / f"b{i}", record), monkeypatch)["files_sha256"] != a["files_sha256"]
    added = _identity(_install(tmp_path / "c", [*_RECORD, ("demo/extra.py", "sha256=x")]), monkeypatch)
    assert added["files_sha256"] != a["files_sha256"]
    assert _identity(tmp_path / "c", monkeypatch, "missing") is None


def test_content_entries_keep_only_what_the_distribution_contains():
    text = '"demo/a,b.py",sha256=comma,3\r\n"demo/q""uote.py",sha256=q,1\r\n../../../bin/demo,sha256=s,9\r\n'
    assert distributions.parse_record(text) == [
        ("demo/a,b.py", "sha256=comma"),
        ('demo/q"uote.py', "sha256=q"),
        ("../../../bin/demo", "sha256=s"),
    ]
    kept = distributions.content_entries(
        [
            *_RECORD,
            ("/usr/share/demo/data.txt", "sha256=abs"),
            ("demo/legacy.pyc", "sha256=p"),
            ("demo/none.py", ""),
            ("demo/__init__.py", "sha256=module-a"),
        ]
    )
    assert kept == [
        ("demo-1.0.dist-info/METADATA", "sha256=metadata"),
        ("demo-1.0.dist-info/entry_points.txt", "sha256=entry-points"),
        ("demo/__init__.py", "sha256=module-a"),
        ("demo/legacy.pyc", "sha256=p"),
    ]  # a sourceless distribution's bytecode is its content
    assert distributions.files_sha256([("../../../bin/demo", "sha256=s")]) is None


def test_a_distribution_without_a_record_is_hashed_by_the_files_it_lists(tmp_path, monkeypatch):
    def legacy(site, source: str):
        info = site / "demo-1.0-py3.11.egg-info"
        info.mkdir(parents=True)
        (info / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: demo\nVersion: 1.0\n")
        (info / "installed-files.txt").write_text(
            "../demo/__init__.py\n../demo/__pycache__/__init__.cpython-311.pyc\n../../../../bin/demo\nPKG-INFO\n"
        )
        (site / "demo" / "__pycache__").mkdir(parents=True)
        (site / "demo" / "__init__.py").write_text(source)
        (site / "demo" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(os.urandom(8))
        return _identity(site, monkeypatch)

    a, b, c = legacy(tmp_path / "a", "x = 1\n"), legacy(tmp_path / "b", "x = 1\n"), legacy(tmp_path / "c", "x = 2\n")
    assert a["files_sha256"] == b["files_sha256"] != c["files_sha256"]


def test_the_key_holds_a_distributions_version_and_content_and_an_old_record_its_record():
    from launcher.record.probe import key
    from tests.unit.test_fingerprint import _fp

    def fp(**keras):
        out = _fp()
        out["software"]["distributions"] = {"keras": {"version": "3.15.1", **keras}, "gone": None}
        return out

    assert key.KEY["software.distributions"](fp(files_sha256="f", record_sha256="r")) == {
        "keras": {"version": "3.15.1", "files_sha256": "f"},
        "gone": None,
    }
    assert key.key_differences(fp(files_sha256="f", record_sha256="r1"), fp(files_sha256="f", record_sha256="r2")) == []
    # A run recorded before files_sha256 is held to its RECORD: never equal to a files hash,
    # and compared with its like by the RECORD, as it was then.
    diffs = key.key_differences(fp(record_sha256="r"), fp(files_sha256="f", record_sha256="r"))
    assert diffs == [
        ("software.distributions.keras.files_sha256", None, "f"),
        ("software.distributions.keras.record_sha256", "r", None),
    ]
    assert key.key_differences(fp(record_sha256="r"), fp(record_sha256="r")) == []
    assert key.key_differences(fp(record_sha256="r1"), fp(record_sha256="r2"))


def test_only_what_the_job_imported_itself_and_what_that_requires_is_keyed():
    """Keras imports pandas and scipy when they are installed (optional probes): installing
    them must not make runs incomparable. A script that imports pandas itself keys it."""
    used = ["tensorflow-cpu", "keras", "numpy", "pandas", "scipy", "pytz", "nvidia-cublas-cu12"]
    imported = {
        "tensorflow-cpu": {"tensorflow"},
        "keras": {"keras"},
        "numpy": {"numpy"},
        "pandas": {"pandas"},
        "scipy": {"scipy"},
        "pytz": {"pytz"},
    }  # nvidia-*: loaded as a library, never imported
    requires = {
        "tensorflow-cpu": ["keras", "numpy"],
        "keras": ["numpy"],
        "pandas": ["numpy", "pytz"],
        "scipy": ["numpy"],
    }
    probed = distributions.keyed_distributions(used, imported, {"tensorflow"}, requires)
    assert probed == {"tensorflow-cpu", "keras", "numpy", "nvidia-cublas-cu12"}
    mine = distributions.keyed_distributions(used, imported, {"tensorflow", "pandas"}, requires)
    assert mine == {"tensorflow-cpu", "keras", "numpy", "nvidia-cublas-cu12", "pandas", "pytz"}
    # Requirements are followed to any depth, and only to what the job used: a requirement that is
    # not installed, or was never loaded, is not keyed.
    chain = {"app": ["lib", "absent"], "lib": ["core"], "core": ["optional-never-loaded"]}
    used_chain = ["app", "lib", "core", "unrelated"]
    imported_chain = {"app": {"app"}, "lib": {"lib"}, "core": {"core"}, "unrelated": {"unrelated"}}
    assert distributions.keyed_distributions(used_chain, imported_chain, {"app"}, chain) == {"app", "lib", "core"}
    assert distributions.parse_requires(
        [
            "numpy>=1.26",
            "pandas ; extra == 'pandas'",
            "rich",
            "ml-dtypes (>=0.5)",
            "Typing_Extensions; python_version < '3.12'",
        ]
    ) == ["numpy", "rich", "ml-dtypes", "typing-extensions"]


def test_record_lines_with_and_without_a_hash():
    assert distributions.parse_record("a.py,sha256=x,10\nb\n\nc/d.txt,,3\n") == [
        ("a.py", "sha256=x"),
        ("b", ""),
        ("c/d.txt", ""),
    ]


def test_content_entries_are_the_distributions_own_files_by_forward_slash_paths():
    entries = [
        ("pkg\\mod.py", "h1"),
        ("pkg/data.bin", "h2"),
        ("..", "h3"),
        ("../bin/tool", "h4"),
        ("/abs", "h5"),
        ("pkg/__pycache__/mod.cpython-311.pyc", "h6"),
        ("pkg-1.0.dist-info/RECORD", "h7"),
        ("pkg-1.0.dist-info/METADATA", "h8"),
        ("x.dist-info/sub/INSTALLER", "h9"),
        ("nohash.py", ""),
    ]
    assert distributions.content_entries(entries) == [
        ("pkg-1.0.dist-info/METADATA", "h8"),
        ("pkg/data.bin", "h2"),
        ("pkg/mod.py", "h1"),
        ("x.dist-info/sub/INSTALLER", "h9"),
    ]
    assert distributions.content_entries([("...", "h")]) == [("...", "h")]


def test_files_sha256_hashes_each_entry_as_a_line():
    import hashlib

    entries = [("b.py", "h2"), ("a.py", "h1")]
    assert distributions.files_sha256(entries) == hashlib.sha256(b"a.py\th1\nb.py\th2\n").hexdigest()
    assert distributions.files_sha256([("RECORD-less.py", "")]) is None


def test_files_the_system_and_tools_read_for_themselves_are_not_data(tmp_path):
    """System files (the kernel's views, installed software, package databases and caches) and tools'
    own caches (font lists, compiled kernels, the launcher's, MLflow's installation id) are never the
    job's data; a data set in ~/.cache is."""
    home = tmp_path / "home"
    own = [home / ".cache" / tool / "state.bin" for tool in ("fontconfig", "matplotlib", "pip", "launch")]
    own.append(home / ".config" / "mlflow" / "telemetry.json")  # an installation id, made on MLflow's first run
    dataset = home / ".cache" / "datasets" / "digits.npz"
    for path in (*own, dataset):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    system = [
        p
        for p in (
            "/sys/devices/system/cpu/online",
            "/usr/share/zoneinfo/UTC",
            "/var/lib/dpkg/status",
            "/var/cache/debconf/config.dat",
            "/etc/hostname",
        )
        if os.path.isfile(p)
    ]
    read = {"read": True, "written_first": False}
    opened = {str(p): read for p in (*own, dataset, *system)}
    assert usage.data_files(opened, ROOTS, str(home)) == [str(dataset)]


@pytest.mark.parametrize("missing", ["job.json", "status.json", "config.yaml"])
def test_a_directory_is_a_run_only_with_all_of_a_runs_records(tmp_path, missing):
    """What a listing finds in a run directory is the launcher's record; a directory that only looks like
    one (named like a run, without one of its records) holds data like any other."""
    run = tmp_path / "20260101-000000-abcdef"
    (run / "outputs").mkdir(parents=True)
    (run / "outputs" / "w.npz").write_text("w")
    for marker in {"job.json", "status.json", "config.yaml"} - {missing}:
        (run / marker).write_text("{}")
    usage._in_a_run.cache_clear()
    found = usage._scan({str(run / "outputs"): False}, {})
    assert [path for path, _, _ in found] == [str(run / "outputs" / "w.npz")]
    (run / missing).write_text("{}")
    usage._in_a_run.cache_clear()
    assert usage._scan({str(run / "outputs"): False}, {}) == []


def test_run_is_the_systems_but_a_users_run_directory_holds_data(tmp_path):
    """/run holds the system's state (pid files, sockets); /run/user/UID is the user's own RAM disk."""
    user_dir = Path(f"/run/user/{os.getuid()}")
    made = [d for d in (user_dir.parent, user_dir) if not d.exists()]
    try:
        user_dir.mkdir(parents=True, exist_ok=True)
        system = Path(f"/run/launch-test-{os.getpid()}.pid")
        system.write_text("1")
        data = user_dir / f"launch-test-{os.getpid()}.npz"
        data.write_bytes(b"x")
    except OSError as exc:
        pytest.skip(f"cannot write /run here ({exc.strerror}): needs root")
    try:
        read = {"read": True, "written_first": False}
        assert usage.data_files({str(system): read, str(data): read}, ROOTS, str(tmp_path)) == [str(data)]
    finally:
        system.unlink()
        data.unlink()
        for directory in reversed(made):
            directory.rmdir()


@pytest.mark.parametrize(
    "path",
    [
        "/proc/cpuinfo",
        "/sys/devices/system/cpu/online",
        "/dev/urandom",
        "/run/systemd/resolve/resolv.conf",
        "/etc/hostname",
        "/usr/share/zoneinfo/UTC",
        "/lib/x86_64-linux-gnu/gconv/gconv-modules.cache",
        "/lib32/locale/C.utf8/LC_CTYPE",
        "/lib64/ld-linux-x86-64.so.2",
        "/bin/sh",
        "/sbin/ldconfig",
        "/var/lib/dpkg/status",
        "/var/cache/debconf/config.dat",
        "/snap/core22/current/etc/os-release",
    ],
)
def test_the_systems_files_are_never_data_on_any_layout_of_the_root(path):
    """Judged by the path: on a machine without a merged /usr, /lib, /bin and /sbin are directories of
    their own (here they are links into /usr, which realpath would hide), and /lib32 and /snap exist."""
    assert places.system_path(path)


@pytest.mark.parametrize(
    "path",
    [
        "/run/user/1000/digits.npz",
        "/dev/shm/batch.npy",
        "/home/me/data/a.npz",
        "/tmp/x.npz",
        "/var/tmp/x.npz",
        "/srv/data/a.npz",
        "/usrdata/a.npz",
        "/libraries/a.npz",
        "/opt/data/a.npz",
    ],
)
def test_ram_disks_and_everything_outside_the_system_may_be_data(path):
    assert not places.system_path(path)


def test_gather_keys_the_source_files_the_job_ran_with_exec(tmp_path):
    """``runpy.run_path("cfg.py")`` and IPython's ``%run setup.py`` run a file's code without
    importing it: keyed as ``exec:<name>`` (an edit is REFUSED by name, a replay keeps it).
    Not: an imported module's file (keyed by its module name), the script or notebook
    (``code_files``), a file the job wrote (IPython's cell files)."""
    for name in ("cfg.py", "helper.py", "train.py"):
        (tmp_path / name).write_text(f"# {name}\n")
    started_ns = max(os.stat(tmp_path / n).st_mtime_ns for n in ("cfg.py", "helper.py", "train.py")) + 1
    cell = tmp_path / "cell.py"
    cell.write_text("# a cell\n")
    os.utime(cell, ns=(started_ns + 1, started_ns + 1))
    run = tmp_path / "run"
    run.mkdir()
    helper = types.ModuleType("helper")
    helper.__file__ = str(tmp_path / "helper.py")
    seen = usage.Observed(
        modules={"helper": helper},
        maps_text="",
        started_ns=started_ns,
        code_files=[str(tmp_path / "train.py")],
        executed=[str(tmp_path / n) for n in ("cfg.py", "helper.py", "train.py", "cell.py")],
    )
    used = usage.gather(seen, str(run), str(tmp_path))
    sha = hashlib.sha256(b"# cfg.py\n").hexdigest()
    assert used["modules"] == {
        "helper": {"path": str(tmp_path / "helper.py"), "sha256": hashlib.sha256(b"# helper.py\n").hexdigest()},
        "exec:cfg.py": {"path": str(tmp_path / "cfg.py"), "sha256": sha},
    }


def test_a_file_there_before_the_job_that_it_read_then_changed_or_deleted_is_never_comparable(tmp_path):
    """TensorFlow's checkpoint guide: a ``CheckpointManager`` restores ``ckpt-3`` (read natively,
    then deleted as older checkpoints rotate away): its input, keyed with a value no other run
    has, so a run resumed that way is refused against a fresh one, never called "a determinism
    bug". A file read through Python and changed is the same. A file opened natively and
    changed (``checkpoint`` rewritten; MLflow's ``mlflow.db`` logged to) is the job's output,
    as is a file first seen after the job started."""
    from launcher.record.filecache import stat_key

    for name in ("checkpoint", "ckpt-3.index", "kept.bin", "read.bin"):
        (tmp_path / name).write_bytes(b"before")
    first = {n: stat_key(str(tmp_path / n)) for n in ("checkpoint", "ckpt-3.index", "kept.bin", "read.bin")}
    started_ns = max(s[4] for s in first.values()) + 1
    (tmp_path / "ckpt-4.index").write_bytes(b"the job's")
    os.utime(tmp_path / "ckpt-4.index", ns=(started_ns + 1, started_ns + 1))
    native = {str(tmp_path / n): first[n] for n in ("checkpoint", "ckpt-3.index", "kept.bin")}
    native[str(tmp_path / "ckpt-4.index")] = stat_key(str(tmp_path / "ckpt-4.index"))
    opened = {
        str(tmp_path / "read.bin"): {"read": True, "written_first": False, "stat": first["read.bin"], "relative": True}
    }
    (tmp_path / "checkpoint").write_bytes(b"rewritten by the job")
    os.utime(tmp_path / "checkpoint", ns=(started_ns + 2, started_ns + 2))
    (tmp_path / "ckpt-3.index").unlink()
    (tmp_path / "read.bin").unlink()  # read through Python, then deleted
    run = tmp_path / "run-1"
    run.mkdir()
    seen = usage.Observed(opened, modules={}, maps_text="", started_ns=started_ns, native=native)
    data = usage.gather(seen, str(run), str(tmp_path))["data"]
    assert data == {
        "ckpt-3.index": "deleted while the job ran (run-1)",
        "kept.bin": hashlib.sha256(b"before").hexdigest(),
        "read.bin": "deleted while the job ran (run-1)",
    }


# ---------------------------------------------------------------- the job's own files: outputs, however written
STARTED = 1_000


def _info(mtime_ns: int, ino: int = 7, **more) -> dict:
    return {"read": True, "written_first": False, "stat": ("/w/f", 1, ino, 10, mtime_ns), "relative": True, **more}


@pytest.mark.parametrize(
    ("info", "written", "birth", "now", "kind"),
    [
        (_info(900), None, None, None, usage.INPUT),  # there before the job, read
        (_info(900), usage.CREATED, (7, 1_100), ("/w/f", 1, 7, 10, 900), usage.OUTPUT),  # made by it, older times kept
        (_info(900), usage.ANOTHER, (7, 1_100), ("/w/f", 1, 7, 10, 900), usage.INPUT),  # made by another process
        (_info(900), usage.CREATED, (7, 1_100), ("/w/f", 1, 7, 99, 1_200), usage.INPUT),  # changed since the read
        (_info(900), usage.CREATED, (7, 500), ("/w/f", 1, 7, 10, 900), usage.INPUT),  # born before: moved there
        (_info(1_100), usage.CREATED, None, None, usage.OUTPUT),  # made natively (SaveV2), then read back
        (_info(1_100), usage.WRITTEN, None, None, usage.OUTPUT),  # rewritten natively (an earlier run's ckpt.index)
        (_info(1_100), None, None, None, usage.OUTPUT),  # modified after the start, no write seen: the fallback
        (_info(1_100), usage.ANOTHER, None, None, usage.INPUT),  # written meanwhile by another process only
        (_info(1_100, written=True), None, (7, 500), ("/w/f", 1, 7, 10, 1_100), usage.BOTH),  # appended to by Python
        (_info(1_100, written=True), None, None, None, usage.BOTH),  # the same, where no birth is kept
        (_info(1_100, written=True), None, (7, 1_050), ("/w/f", 1, 7, 10, 1_100), usage.OUTPUT),  # Python made it
        (_info(1_100, written_first=True), None, None, None, usage.OUTPUT),  # emptied by Python ("w"), then read
        (_info(900, written_first=True), None, None, None, usage.OUTPUT),
    ],
)
def test_what_the_job_read_is_its_input_its_output_or_both(info, written, birth, now, kind):
    assert usage.origin(info, STARTED, written, birth, now) == kind


def test_without_the_jobs_start_everything_read_is_input():
    assert usage.origin(_info(1_100), None, usage.CREATED) == usage.INPUT


def test_data_files_leave_out_what_the_job_made_and_keep_what_was_there(tmp_path):
    """By the file's birth where the file system keeps one, else by the watch's events."""
    from launcher.record.filecache import stat_key

    for name in ("old.csv", "made.index", "rewritten.index", "appended.log", "copied.npz", "theirs.csv"):
        (tmp_path / name).write_text(name)
    stats = {name: stat_key(str(tmp_path / name)) for name in os.listdir(tmp_path)}
    started = max(s[4] for s in stats.values()) + 1
    os.utime(tmp_path / "copied.npz", ns=(started - 10, started - 10))  # made by the job, older times kept
    for name in ("made.index", "rewritten.index", "appended.log", "theirs.csv"):
        os.utime(tmp_path / name, ns=(started + 10, started + 10))  # written while the job ran
    stats = {name: stat_key(str(tmp_path / name)) for name in os.listdir(tmp_path)}
    births = {"made.index": started + 5, "copied.npz": started + 5, "theirs.csv": started + 5}

    def born(path):
        name = os.path.basename(path)
        return stats[name][2], births.get(name, started - 100)

    opened = {str(tmp_path / n): {"read": True, "written_first": False, "stat": stats[n]} for n in stats}
    opened[str(tmp_path / "appended.log")]["written"] = True  # opened with "a" by Python, before the read
    written = {
        str(tmp_path / "made.index"): usage.CREATED,
        str(tmp_path / "copied.npz"): usage.CREATED,
        str(tmp_path / "theirs.csv"): usage.ANOTHER,
    }
    found = usage.read_files(opened, ROOTS, str(tmp_path / "home"), started_ns=started, written=written, born=born)
    assert {os.path.basename(p): kind for p, kind in found.items()} == {
        "old.csv": usage.INPUT,
        "made.index": usage.OUTPUT,
        "rewritten.index": usage.OUTPUT,  # no birth kept here and no event: modified after the start
        "appended.log": usage.BOTH,
        "copied.npz": usage.OUTPUT,
        "theirs.csv": usage.INPUT,
    }
    data = usage.data_files(opened, ROOTS, str(tmp_path / "home"), started_ns=started, written=written, born=born)
    assert sorted(os.path.basename(p) for p in data) == ["appended.log", "old.csv", "theirs.csv"]


def test_a_job_that_rewrites_its_own_checkpoints_and_an_input_keeps_only_the_input_in_the_key(tmp_path, monkeypatch):
    """Real files, the real kernel watch, a real birth time: the shape of a DCGAN script run again
    in its directory. An earlier run's ``ckpt-2.index`` rewritten in place and a ``ckpt-2.data``
    moved there are read back: outputs, as is ``ckpt-1.index``, written and never read. Inputs,
    with a value no other run has, and outputs: ``settings.csv``, there before, read, rewritten
    natively and read again; ``notes.log``, there before, appended to, then read. ``digits.csv``,
    only read: an input."""
    from launcher.job.observe import fswatch

    for name in ("settings.csv", "digits.csv", "notes.log"):
        (tmp_path / name).write_text("1,2\n")
    (tmp_path / "training_checkpoints").mkdir()
    (tmp_path / "training_checkpoints" / "ckpt-2.index").write_text("an earlier run's")
    time.sleep(0.05)  # the kernel's file times are a clock tick coarse
    started = time.time_ns()
    time.sleep(0.05)
    monkeypatch.chdir(tmp_path)
    for name in ("opened", "listed", "patterns"):
        monkeypatch.setattr(reads, name, {})
    watch = fswatch.start(skip=[])
    if watch is None:
        pytest.skip("no fanotify or inotify here")
    monkeypatch.setattr(reads, "_watch", watch)
    watch.add_tree(str(tmp_path))
    reads.note("settings.csv")
    reads.note("digits.csv")
    (tmp_path / "settings.csv").write_text("3,4\n")  # natively, unseen by Python
    reads.note("notes.log", writing=True, replacing=False)  # appended to by Python, then read back
    with open(tmp_path / "notes.log", "a") as log:
        log.write("epoch 1\n")
    (tmp_path / "training_checkpoints" / "ckpt-1.index").write_text("this run's, never read")
    (tmp_path / "training_checkpoints" / "ckpt-2.index").write_text("this run's")  # in place, as MergeV2Checkpoints
    (tmp_path / "ckpt-2_temp").mkdir()
    (tmp_path / "ckpt-2_temp" / "part").write_text("weights")
    os.rename(tmp_path / "ckpt-2_temp" / "part", tmp_path / "training_checkpoints" / "ckpt-2.data-00000-of-00001")
    time.sleep(0.3)
    for name in ("ckpt-2.index", "ckpt-2.data-00000-of-00001"):  # the restore at the end
        reads.note(os.path.join("training_checkpoints", name))
    reads.note("settings.csv")
    reads.note("notes.log")
    watch.stop()
    run = tmp_path / "run-1"
    run.mkdir()
    seen = usage.Observed(
        reads.opened,
        modules={},
        maps_text="",
        started_ns=started,
        native=reads.natively_opened(),
        written=reads.natively_written(),
        born=fswatch.birth_ns,
    )
    used = usage.gather(seen, str(run), str(tmp_path))
    assert used["data"] == {
        "digits.csv": hashlib.sha256(b"1,2\n").hexdigest(),
        "notes.log": "changed while the job ran (run-1)",
        "settings.csv": "changed while the job ran (run-1)",
    }
    assert used["outputs"] == {
        "files": {
            "notes.log": usage.BOTH,
            "settings.csv": usage.BOTH,
            "training_checkpoints/ckpt-1.index": usage.OUTPUT,
            "training_checkpoints/ckpt-2.data-00000-of-00001": usage.OUTPUT,
            "training_checkpoints/ckpt-2.index": usage.OUTPUT,
        },
        "total": 5,
    }
