"""What the job opened and listed, as ``launcher.job.observe.reads`` records it from the audit events.

``note`` (an ``open`` event), ``note_listing`` (``os.listdir``/``scandir``, a glob) and the
mode or flags that make an open a write, called directly: which paths are never data (file
descriptors, URLs, code, the kernel's files), how a path the job named relative to its working
directory is kept, and when a file is the job's input (read before it was written, its state
at the first read that found it) or its output.
"""

from __future__ import annotations

import os

import pytest

from launcher.job.observe import reads
from launcher.record.filecache import stat_key


class FakeWatch:
    def __init__(self):
        self.added: list[tuple[str, bool]] = []

    def add_tree(self, directory: str, recursive: bool = True) -> None:
        self.added.append((directory, recursive))


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    for name in ("opened", "listed", "patterns"):
        monkeypatch.setattr(reads, name, {})
    monkeypatch.setattr(reads, "_watch", None)
    monkeypatch.setattr(reads, "_listings", True)
    monkeypatch.setattr(reads, "_broad", frozenset())
    monkeypatch.setattr(reads, "_kind", None)  # who calls is told from the roots of this test's directory
    monkeypatch.setattr(reads, "_not_the_jobs", reads._not_the_jobs_listings())  # as watch_listings sets it
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    "path",
    [
        3,
        None,
        "",
        b"",
        "gs://bucket/a.csv",
        "s3://b/x",
        "/data/a\0b",
        "/proc/cpuinfo",
        "/sys/devices/x",
        "/dev/null",
        "/dev/urandom",
        "m.py",
        "m.pyc",
        "m.pyo",
        "lib.so",
        "site.pth",
        "m.pyi",
        "/w/helper.py",
    ],
)
def test_what_is_never_data_is_not_recorded(fresh, path):
    reads.note(path)
    reads.note(path, writing=True)
    assert reads.opened == {}


def test_a_file_on_a_ram_disk_is_data(fresh):
    reads.note("/dev/shm/batch.npy")
    assert list(reads.opened) == ["/dev/shm/batch.npy"]


def test_a_relative_name_is_kept_as_relative_and_bytes_are_decoded(fresh):
    (fresh / "a.csv").write_text("x")
    reads.note("a.csv")
    reads.note(os.fsencode(fresh / "b.csv"))
    assert reads.opened == {
        str(fresh / "a.csv"): {
            "read": True,
            "written_first": False,
            "stat": stat_key(str(fresh / "a.csv")),
            "relative": True,
        },
        str(fresh / "b.csv"): {"read": True, "written_first": False, "stat": None, "relative": False},
    }


def test_a_file_written_and_never_read_is_the_jobs_output(fresh):
    reads.note(str(fresh / "out.csv"), writing=True)
    (fresh / "out.csv").write_text("x")
    reads.note(str(fresh / "out.csv"), writing=True)
    assert reads.opened[str(fresh / "out.csv")] == {
        "read": False,
        "written_first": True,
        "stat": None,
        "relative": False,
        "written": True,
    }


def test_a_file_written_first_then_read_stays_the_jobs_output(fresh):
    path = str(fresh / "cache.bin")
    reads.note(path, writing=True)
    (fresh / "cache.bin").write_text("made by the job")
    reads.note(path)
    assert reads.opened[path] == {
        "read": True,
        "written_first": True,
        "stat": stat_key(path),
        "relative": False,
        "written": True,
    }


def test_a_write_into_an_existing_file_keeps_what_it_held_and_one_that_makes_a_file_does_not(fresh):
    """Appending (``a``, ``O_APPEND``) to a file that was there keeps its content, which a later
    read may find: not written first; appending that makes the file, or emptying one, is."""
    (fresh / "kept.log").write_text("before")
    (fresh / "emptied.log").write_text("before")
    reads.note(str(fresh / "kept.log"), writing=True, replacing=False)
    reads.note(str(fresh / "made.log"), writing=True, replacing=False)
    reads.note(str(fresh / "emptied.log"), writing=True, replacing=True)
    assert {os.path.basename(p): i["written_first"] for p, i in reads.opened.items()} == {
        "kept.log": False,
        "made.log": True,
        "emptied.log": True,
    }
    assert all(i["written"] for i in reads.opened.values())


@pytest.mark.parametrize(
    ("mode", "flags", "replaces"),
    [("w", None, True), ("x", None, True), ("a", None, False), ("r+", None, False), (None, os.O_WRONLY, False)]
    + [(None, os.O_WRONLY | os.O_TRUNC, True), (None, os.O_WRONLY | os.O_CREAT | os.O_EXCL, True)]
    + [(None, os.O_WRONLY | os.O_APPEND, False), (None, None, False)],
)
def test_a_write_replaces_what_was_there_by_its_mode_or_flags(mode, flags, replaces):
    assert reads._replacing(mode, flags) is replaces


def test_an_append_event_writes_in_place(fresh, monkeypatch):
    (fresh / "a.log").write_text("before")
    monkeypatch.setattr(reads, "_recording", True)
    reads._hook("open", (str(fresh / "a.log"), "a", os.O_WRONLY | os.O_APPEND | os.O_CREAT))
    reads._hook("open", (str(fresh / "w.log"), "w", os.O_WRONLY | os.O_TRUNC | os.O_CREAT))
    assert reads.opened[str(fresh / "a.log")]["written_first"] is False
    assert reads.opened[str(fresh / "w.log")]["written_first"] is True


def test_a_read_that_found_nothing_then_a_write_makes_it_output(fresh):
    path = str(fresh / "tool-cache.json")
    reads.note(path)  # not there yet
    assert reads.opened[path] == {"read": True, "written_first": False, "stat": None, "relative": False}
    reads.note(path, writing=True)
    assert reads.opened[path]["written_first"] is True


def test_the_state_of_a_file_is_taken_at_the_first_read_that_found_it(fresh):
    path = fresh / "data.csv"
    reads.note(str(path))  # not there: no state yet
    path.write_text("1,2\n")
    reads.note(str(path))
    first = stat_key(str(path))
    assert first is not None and reads.opened[str(path)]["stat"] == first
    path.write_text("1,2\n3,4\n5,6\n")  # changed after: the run read the first state
    reads.note(str(path))
    reads.note(str(path), writing=True)
    assert reads.opened[str(path)] == {
        "read": True,
        "written_first": False,
        "stat": first,
        "relative": False,
        "written": True,
    }


def test_the_directory_of_each_data_file_read_is_watched_once_found(fresh, monkeypatch):
    watch = FakeWatch()
    monkeypatch.setattr(reads, "_watch", watch)
    (fresh / "d").mkdir()
    (fresh / "d" / "a.csv").write_text("x")
    (fresh / "broad").mkdir()
    (fresh / "broad" / "b.csv").write_text("x")
    monkeypatch.setattr(reads, "_broad", frozenset({os.path.realpath(fresh / "broad")}))
    os.symlink(fresh / "d", fresh / "link")
    reads.note(str(fresh / "missing.csv"))  # nothing found: nothing beside it to watch
    reads.note(str(fresh / "out.csv"), writing=True)
    reads.note(str(fresh / "link" / "a.csv"))
    reads.note(str(fresh / "broad" / "b.csv"))
    assert watch.added == [(os.path.realpath(fresh / "d"), True), (os.path.realpath(fresh / "broad"), False)]


@pytest.mark.parametrize(
    ("mode", "flags", "writes"),
    [
        ("r", None, False),
        ("rb", None, False),
        ("w", None, True),
        ("ab", None, True),
        ("x", None, True),
        ("r+", None, False),
        ("r+b", None, False),
        ("w+", None, True),
        ("a+", None, True),
        (None, os.O_RDONLY, False),
        (None, os.O_WRONLY, True),
        (None, os.O_RDWR, False),
        (None, os.O_RDWR | os.O_CREAT, True),
        (None, os.O_RDONLY | os.O_CREAT, True),
        (None, os.O_RDONLY | os.O_TRUNC, True),
        (None, os.O_RDONLY | os.O_APPEND, True),
        (None, None, False),
        (None, "w", False),
        ("rX", None, False),
    ],
)
def test_an_open_writes_by_its_mode_or_its_flags(mode, flags, writes):
    """``r+`` and a bare ``O_RDWR`` read what was there (``np.memmap(mode="r+")`` over a data
    file was taken for the job's output, so a changed file was a false "determinism bug")."""
    assert reads._writing(mode, flags) is writes


def test_an_open_event_is_a_write_by_its_mode_or_flags(fresh, monkeypatch):
    monkeypatch.setattr(reads, "_recording", True)
    reads._hook("open", (str(fresh / "w.csv"), "w", os.O_WRONLY))
    reads._hook("open", (str(fresh / "r.csv"), None, os.O_RDONLY))
    assert reads.opened[str(fresh / "w.csv")]["written_first"] is True
    assert reads.opened[str(fresh / "r.csv")]["written_first"] is False


def test_a_listing_is_recorded_once_with_whether_the_job_named_it_relative(fresh):
    (fresh / "images").mkdir()
    reads.note_listing("images")
    reads.note_listing(str(fresh / "images"))  # the same directory again: as first named
    reads.note_listing(os.fsencode(fresh / "other"))
    reads.note_listing(None)  # os.listdir(): the working directory
    reads.note_listing(str(fresh / "*.png"), pattern=True)
    reads.note_listing("*.csv", pattern=True)
    assert reads.listed == {str(fresh / "images"): True, str(fresh / "other"): False, str(fresh): True}
    assert reads.patterns == {str(fresh / "*.png"): False, str(fresh / "*.csv"): True}


@pytest.mark.parametrize("path", [3, "", "gs://bucket/", "/proc/self/fd", "/sys/class", "/dev/pts"])
def test_a_listing_of_what_is_never_data_is_not_recorded(fresh, path):
    reads.note_listing(path)
    reads.note_listing(path, pattern=True)
    assert reads.listed == reads.patterns == {}


def test_listings_are_recorded_only_once_the_jobs_code_starts(fresh, monkeypatch):
    monkeypatch.setattr(reads, "_listings", False)
    reads.note_listing(str(fresh))
    assert reads.listed == {}


@pytest.fixture
def no_children(monkeypatch):
    monkeypatch.setattr(reads, "children", [])


def test_a_programs_arguments_are_recorded_as_text_with_where_it_ran(fresh, no_children, tmp_path):
    from pathlib import Path

    (fresh / "sub").mkdir()
    reads.note_child([b"zcat", Path("x.gz"), 3])
    reads.note_child(["ls"], cwd=str(fresh / "sub"))
    reads.note_child(["ls"], cwd=os.fsencode(fresh / "sub" / ".."))
    reads.note_child(["ls"], cwd=fresh / "sub")
    assert reads.children == [
        {"argv": ["zcat", "x.gz", "3"], "cwd": str(fresh)},
        {"argv": ["ls"], "cwd": str(fresh / "sub")},
        {"argv": ["ls"], "cwd": str(fresh / "sub" / "..")},
    ]
    reads.note_child(["x"], cwd=3)  # not a directory name: the job's
    assert reads.children[-1] == {"argv": ["x"], "cwd": str(fresh)}
    reads.note_child([])
    assert reads.children[-1] == {"argv": [], "cwd": str(fresh)}


@pytest.mark.parametrize(
    ("argv", "read"),
    [
        (["sh", "-c", "cat a.csv"], True),
        (["/bin/bash", "-x", "-c", "zcat a.csv | head"], True),
        (["python", "-c", "cat a.csv"], False),  # not a shell: its -c is no command line of files
        (["sh", "-C", "cat a.csv"], False),
        (["sh", "cat a.csv", "-c"], False),  # -c with no command after it
        (["sh", "-c"], False),
    ],
)
def test_a_shells_command_is_split_into_the_files_it_names(fresh, no_children, argv, read):
    (fresh / "a.csv").write_text("x")
    reads.note_child(argv)
    assert (str(fresh / "a.csv") in reads.opened) is read


def test_an_option_names_a_file_after_its_first_equals_sign(fresh, no_children):
    (fresh / "k=v.csv").write_text("x")
    (fresh / "v.csv").write_text("x")
    reads.note_child(["tool", "--in=k=v.csv"])
    assert list(reads.opened) == [str(fresh / "k=v.csv")]
    assert reads.opened[str(fresh / "k=v.csv")]["child"] is True


def test_a_program_run_elsewhere_names_files_relative_to_where_it_runs(fresh, no_children):
    (fresh / "sub").mkdir()
    (fresh / "sub" / "in.csv").write_text("x")
    (fresh / "in.csv").write_text("here")
    reads.note_child(["cat", "in.csv"], cwd=str(fresh / "sub"))
    assert list(reads.opened) == [str(fresh / "sub" / "in.csv")]
    assert reads.opened[str(fresh / "sub" / "in.csv")]["child"] is True
    assert reads.opened[str(fresh / "sub" / "in.csv")]["relative"] is False  # a replay finds it where it was
    reads.note_child(["cat", "in.csv"])  # in the job's own directory: as the job named it
    assert reads.opened[str(fresh / "in.csv")] == {
        "read": True,
        "written_first": False,
        "stat": stat_key(str(fresh / "in.csv")),
        "relative": True,
        "child": True,
    }


def test_a_command_line_that_does_not_split_is_split_at_spaces(fresh, no_children):
    (fresh / "a.csv").write_text("x")
    reads.note_child("tool 'unbalanced a.csv")
    assert reads.children[-1]["argv"] == ["tool", "'unbalanced", "a.csv"]
    assert str(fresh / "a.csv") in reads.opened


def test_a_shells_other_arguments_still_name_files(fresh, no_children):
    (fresh / "a.csv").write_text("x")
    (fresh / "b.csv").write_text("x")
    reads.note_child(["sh", "-c", "cat a.csv", "b.csv"])  # b.csv is the command's $0
    assert set(reads.opened) == {str(fresh / "a.csv"), str(fresh / "b.csv")}


@pytest.mark.parametrize("shell", ["sh", "bash", "dash", "zsh", "ksh", "/usr/bin/zsh"])
def test_every_shells_command_names_its_files(fresh, no_children, shell):
    (fresh / "a.csv").write_text("x")
    reads.note_child([shell, "-c", "cat a.csv"])
    assert str(fresh / "a.csv") in reads.opened


# ---------------------------------------------------------------- names computed inside the graph
@pytest.fixture
def tf_readers(fresh, monkeypatch):
    """TensorFlow's readers wrapped in this process (they stay wrapped, noting into ``reads``'
    attributes, which this fixture puts back after the test)."""
    tf = pytest.importorskip("tensorflow")
    for name in ("named_in_datasets", "unnamed_readers", "explicit"):
        monkeypatch.setattr(reads, name, {})
    monkeypatch.setattr(reads, "children", [])
    monkeypatch.setattr(reads, "_recording", True)
    reads.wrap_native_readers()
    return tf


def _shards(tf, directory, n: int = 2) -> list[str]:
    directory.mkdir()
    paths = [str(directory / f"train-{i}.tfrecord") for i in range(n)]
    for i, path in enumerate(paths):
        with tf.io.TFRecordWriter(path) as w:
            w.write(f"record {i}".encode())
    return paths


def test_shards_named_in_from_tensor_slices_and_interleaved_are_read(tf_readers, fresh):
    """The tf.data guide's ``from_tensor_slices(files).interleave(tf.data.TFRecordDataset)``: the
    reader is traced with a symbolic file name; the files the job's code named are its reads."""
    tf = tf_readers
    paths = _shards(tf, fresh / "shards")
    ds = tf.data.Dataset.from_tensor_slices(paths).interleave(tf.data.TFRecordDataset, cycle_length=2)
    assert sorted(ds.as_numpy_iterator()) == [b"record 0", b"record 1"]
    assert all(reads.opened[p]["read"] for p in paths)
    assert reads.observation()["gaps"] == []


def test_a_reader_given_names_made_inside_the_graph_from_nothing_seen_is_a_gap(tf_readers, fresh):
    tf = tf_readers
    _shards(tf, fresh / "shards")
    names = tf.data.Dataset.range(2).map(lambda i: tf.strings.format("shards/train-{}.tfrecord", i))
    ds = names.interleave(tf.data.TFRecordDataset, cycle_length=2)
    assert sorted(ds.as_numpy_iterator()) == [b"record 0", b"record 1"]
    gaps = reads.observation()["gaps"]
    assert len(gaps) == 1 and gaps[0].startswith("tf.data.TFRecordDataset opened files whose names were computed"), gaps


def test_a_csv_dataset_names_its_file(tf_readers, fresh):
    tf = tf_readers
    (fresh / "train.csv").write_text("a,b\n1,2\n")
    ds = tf.data.experimental.CsvDataset("train.csv", [tf.int32, tf.int32], header=True)
    assert [tuple(map(int, r)) for r in ds] == [(1, 2)]
    assert reads.opened[str(fresh / "train.csv")]["read"]


def test_python_source_the_jobs_code_reads_as_text_is_noted_and_an_import_is_not(fresh, monkeypatch):
    """``exec(open("config/exp.py").read())`` (nanoGPT's configurator) reads a settings file as
    text: it is data, or an edit to it was a false "determinism bug". The import system opening
    a module's source (no bytecode cache) is not the job reading it: modules are keyed as code."""
    monkeypatch.setattr(reads, "_recording", True)
    (fresh / "config").mkdir()
    for name in ("config/exp.py", "imported.py", "written.py"):
        (fresh / name).write_text("BATCH = 64\n")
    reads._hook("open", ("config/exp.py", "r", os.O_RDONLY))  # called from this (the job's) code
    as_import = "reads._hook('open', ('imported.py', 'rb', os.O_RDONLY))"
    exec(compile(as_import, "<frozen importlib._bootstrap_external>", "exec"), {"reads": reads, "os": os})
    reads._hook("open", ("written.py", "w", os.O_WRONLY | os.O_CREAT | os.O_TRUNC))
    assert set(reads.opened) == {str(fresh / "config" / "exp.py")}
    assert reads.opened[str(fresh / "config" / "exp.py")]["source"]


def test_a_checkpoint_restored_from_anywhere_is_read(tf_readers, fresh):
    """A pretrained ``tf.train.Checkpoint`` read from a shared directory (TensorFlow opens its
    files natively, outside every watched directory): a different one was a false "determinism
    bug". Its index and data shards are read, and a directory's latest with its state file."""
    tf = tf_readers
    shared = fresh / "shared"
    prefix = tf.train.Checkpoint(v=tf.Variable(1.0)).write(str(shared / "warm" / "ckpt"))
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(2.0)), str(shared / "managed"), 2)
    latest = manager.save()
    reads.opened.clear()
    tf.train.Checkpoint(v=tf.Variable(0.0)).read(prefix).assert_consumed()
    assert set(reads.opened) == {prefix + ".index", prefix + ".data-00000-of-00001"}
    reads.opened.clear()
    assert tf.train.load_checkpoint(str(shared / "managed")).get_tensor("v/.ATTRIBUTES/VARIABLE_VALUE") == 2.0
    assert set(reads.opened) == {
        str(shared / "managed" / "checkpoint"),
        latest + ".index",
        latest + ".data-00000-of-00001",
    }
    assert reads.listed == {}  # the launcher's own globbing is no listing of the job's


def test_an_existing_tf_data_cache_file_is_read(tf_readers, fresh):
    """``Dataset.cache("/shared/cache/train")``: a second run reads the cache, not the data it was
    made from, so a stale cache was a false "determinism bug". A cache not there yet is written."""
    tf = tf_readers
    prefix = str(fresh / "shared" / "train")
    os.makedirs(os.path.dirname(prefix))
    list(tf.data.Dataset.range(4).cache(prefix))
    assert reads.opened == {}  # made by this run: its output
    list(tf.data.Dataset.range(4).cache(prefix))
    assert set(reads.opened) == {prefix + ".index", prefix + ".data-00000-of-00001"}


def test_a_read_the_hook_failed_to_note_is_a_gap_never_nothing(fresh, no_children, monkeypatch):
    """The audit hook never breaks the job; an error inside it (here, noting an open) leaves a gap,
    so the run is never called comparable on a key that silently lacks that read."""
    monkeypatch.setattr(reads, "_recording", True)
    monkeypatch.setattr(reads, "hook_failures", {})

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in note")

    monkeypatch.setattr(reads, "note", broken)
    (fresh / "data.csv").write_text("1\n")
    reads._hook("open", (str(fresh / "data.csv"), "r", 0))  # the job's open goes on: nothing raised
    gaps = reads.observation()["gaps"]
    assert gaps == [
        "the launcher failed to note the job's 'open' event (RuntimeError: a bug in note): "
        "what the job read then is not in the key"
    ]
