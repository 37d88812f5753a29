"""The OS-level watch of native file opens (launcher.job.observe.fswatch) and the programs a job starts
(launcher.job.observe.reads.note_child): real inotify, real files."""

from __future__ import annotations

import os
import time

import pytest

from launcher.job.observe import fswatch, reads


def _dirs(root, *names):
    for name in names:
        (root / name).mkdir(parents=True)
    return root


def test_the_tree_is_breadth_first_within_its_budget_and_leaves_out_stores_and_tools(tmp_path):
    _dirs(tmp_path, "a/deep/deeper", "b", ".git/objects", "__pycache__", "runs/20260101-000000-abcdef", "skipme/x")
    (tmp_path / "runs" / "index.sqlite").write_text("")
    found, truncated = fswatch.tree(str(tmp_path), skip=[str(tmp_path / "skipme")], budget=100)
    assert found == [str(tmp_path / p) if p else str(tmp_path) for p in ("", "a", "b", "a/deep", "a/deep/deeper")]
    assert not truncated
    found, truncated = fswatch.tree(str(tmp_path), skip=[], budget=2)
    assert found == [str(tmp_path), str(tmp_path / "a")] and truncated


def _backend(name):
    try:
        return getattr(fswatch, name)()
    except (ImportError, OSError, AttributeError) as e:
        pytest.skip(f"no {name} here: {e}")


def _orphan_opening(path, after_s: float) -> None:
    """Another process, not this one's child (a shell's background job, orphaned at once):
    it opens ``path`` after ``after_s`` seconds, as another job or an editor would."""
    import subprocess

    subprocess.run(["sh", "-c", f"(sleep {after_s}; cat '{path}' > /dev/null) &"], check=True)


@pytest.mark.parametrize("backend", ["Fanotify", "Inotify"])
def test_a_watch_sees_files_opened_below_its_trees_and_tells_the_jobs_from_other_processes(tmp_path, backend):
    """fanotify tells this process's opens from another's; inotify cannot, and counts both."""
    inside, outside = _dirs(tmp_path, "data/images") / "data", _dirs(tmp_path, "other") / "other"
    for path in (inside / "index.csv", inside / "images" / "0.png", outside / "x.bin", tmp_path / "not.bin"):
        path.write_bytes(b"x")
    _orphan_opening(inside / "images" / "0.png", after_s=0.5)  # reaped before the watch starts
    watch = fswatch.Watch(skip=[], using=[_backend(backend)])
    watch.add_tree(str(inside))
    watch.add_tree(str(tmp_path / "other"), recursive=False)
    assert watch.watched == 3
    for path in (outside / "x.bin", tmp_path / "not.bin"):
        with open(path, "rb"):
            pass
    time.sleep(1.0)
    watch.stop()
    if backend == "Fanotify":
        assert watch.attributed
        assert set(watch.opened) == {str(outside / "x.bin")}
        assert set(watch.by_others) == {str(inside / "images" / "0.png")}
    else:
        assert not watch.attributed and watch.by_others == {}
        assert set(watch.opened) == {str(inside / "images" / "0.png"), str(outside / "x.bin")}
    assert watch.gaps == []


def test_another_process_opening_while_the_job_has_a_child_may_be_the_childs_and_counts(tmp_path):
    """A child running (or reaped since the watch last read) could have made the open: it counts."""
    import subprocess

    (tmp_path / "a.bin").write_bytes(b"x")
    _orphan_opening(tmp_path / "a.bin", after_s=0.3)
    watch = fswatch.Watch(skip=[], using=[_backend("Fanotify")])
    watch.add_tree(str(tmp_path))
    child = subprocess.Popen(["sleep", "1"])
    time.sleep(0.8)
    watch.stop()
    child.wait()
    assert set(watch.opened) == {str(tmp_path / "a.bin")} and watch.by_others == {}


def test_a_watch_keeps_reading_while_the_job_runs(tmp_path):
    """The watch as a job starts it (every backend this machine has) reads each batch as it
    comes, not only at the end: a stalled reader loses events to a full queue and misplaces
    the moments that tell a child's open from another process's."""
    watch = fswatch.start(skip=[])
    if watch is None:
        pytest.skip("no fanotify or inotify here")
    watch.add_tree(str(tmp_path))
    for name in ("first", "second", "third"):
        (tmp_path / name).write_bytes(b"x")
        deadline = time.monotonic() + 10
        while str(tmp_path / name) not in watch.opened and time.monotonic() < deadline:
            time.sleep(0.02)
        assert str(tmp_path / name) in watch.opened, (name, watch.opened)
    watch.stop()


def test_a_forked_child_leaves_its_parents_watch_alone(tmp_path):
    """A multiprocessing worker forked from the job shares the watch's descriptors: stopping
    it there (the worker's os._exit) must not read the job's queued events away."""
    (tmp_path / "x.bin").write_bytes(b"x")
    watch = fswatch.Watch(skip=[], using=[_backend("Fanotify")])
    watch.add_tree(str(tmp_path))
    with open(tmp_path / "x.bin", "rb"):  # queued; the watch thread reads it some 50 ms later
        pass
    pid = os.fork()
    if pid == 0:
        watch.stop()
        os._exit(0)
    os.waitpid(pid, 0)
    time.sleep(0.2)
    watch.stop()
    assert str(tmp_path / "x.bin") in watch.opened


def test_one_directory_under_two_paths_stays_watched(tmp_path):
    """A bind mount shows one directory (one handle) under two paths: it is watched once, and
    opens through either path are seen."""
    import subprocess

    original, bound = _dirs(tmp_path, "original", "bound") / "original", tmp_path / "bound"
    (original / "a.bin").write_bytes(b"x")
    if os.geteuid() != 0 or subprocess.run(["mount", "--bind", str(original), str(bound)]).returncode:
        pytest.skip("a bind mount needs root")
    try:
        for backend in ("Fanotify", "Inotify"):
            watch = fswatch.Watch(skip=[], using=[_backend(backend)])
            watch.add_tree(str(original))
            watch.add_tree(str(bound))
            for path in (original / "a.bin", bound / "a.bin"):
                with open(path, "rb"):
                    pass
                time.sleep(0.2)
            watch.stop()
            assert watch.watched == 1 and set(watch.opened) == {str(original / "a.bin")}, (backend, watch.opened)
    finally:
        subprocess.run(["umount", str(bound)], check=True)


def test_with_sigchld_ignored_children_are_assumed():
    """Children of a process that ignores SIGCHLD are reaped unseen: it is assumed to have some."""
    import signal

    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        assert fswatch.has_children()
    finally:
        signal.signal(signal.SIGCHLD, previous)


def test_children_are_seen_running_and_once_reaped():
    """Started natively or through Python alike: a child of any thread while it runs, and a
    reaped one in the count of reaped children."""
    import subprocess

    before = fswatch.reaped_children()
    child = subprocess.Popen(["sleep", "0.3"])
    assert fswatch.has_children()
    child.wait()
    assert fswatch.reaped_children() > before


def test_the_best_backend_is_used_and_a_directory_it_cannot_tell_apart_goes_to_the_next(tmp_path):
    """Two file systems may give two directories the same handle: the second goes to the next backend."""

    class Clashing:
        name, discarded, pipe = "clashing", [], os.pipe()  # a descriptor that never has events

        def __init__(self):
            os.set_blocking(self.pipe[0], False)

        def fileno(self):
            return self.pipe[0]

        def add(self, directory):
            return "the same handle"

        def discard(self, directory, token):
            self.discarded.append(directory)

        def events(self, data):
            return iter(())

        def close(self):
            os.close(self.pipe[0]), os.close(self.pipe[1])

    first, second = _dirs(tmp_path, "a", "b") / "a", tmp_path / "b"
    clashing = Clashing()
    watch = fswatch.Watch(skip=[], using=[clashing, _backend("Inotify")])
    watch.add_tree(str(first))
    watch.add_tree(str(second))
    assert watch.watched == 2 and not watch.attributed and clashing.discarded == [str(second)]
    with open(second / "x", "wb"):
        pass
    time.sleep(0.2)
    watch.stop()
    assert set(watch.opened) == {str(second / "x")}


@pytest.fixture
def fresh_reads():
    saved = dict(reads.opened), list(reads.children)
    reads.opened.clear()
    reads.children.clear()
    yield reads
    reads.opened.clear()
    reads.opened.update(saved[0])
    reads.children[:] = saved[1]


def test_a_program_the_job_starts_is_recorded_with_the_files_its_arguments_name(fresh_reads, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "digits.csv.gz").write_bytes(b"x")
    (tmp_path / "a.csv").write_bytes(b"x")
    (tmp_path / "dir").mkdir()
    reads.note_child(["zcat", "digits.csv.gz", "dir", "missing.gz"])
    reads.note_child(["sh", "-c", "cat a.csv | head"])  # a shell's command, split into words
    reads.note_child("tool --input=a.csv")  # os.system: one string
    reads.note_child(["zcat", "digits.csv.gz", "dir", "missing.gz"])  # the same command again: once
    assert [c["argv"] for c in reads.children] == [
        ["zcat", "digits.csv.gz", "dir", "missing.gz"],
        ["sh", "-c", "cat a.csv | head"],
        ["tool", "--input=a.csv"],
    ]
    assert set(reads.opened) == {str(tmp_path / "digits.csv.gz"), str(tmp_path / "a.csv")}
    assert all(info["relative"] and info["child"] and info["stat"] for info in reads.opened.values())
    gaps = reads.observation()["gaps"]
    assert len(gaps) == 1 and "3 program(s)" in gaps[0] and "zcat digits.csv.gz" in gaps[0]


def test_only_programs_the_jobs_own_code_starts_are_the_jobs(fresh_reads, tmp_path, monkeypatch):
    """A library probing its platform (``platform.processor()`` runs ``uname -p``) is not the job.
    The audit event is raised here as ``subprocess.Popen`` raises it, once from code whose file lies
    in site-packages and once from this test's own code (standing for the job's)."""
    import sysconfig

    monkeypatch.setattr(reads, "_recording", True)
    as_a_library = os.path.join(sysconfig.get_paths()["purelib"], "somelib", "probe.py")
    event = "reads._hook('subprocess.Popen', ('uname', ['uname', '-p'], None, None))"
    exec(compile(event, as_a_library, "exec"), {"reads": reads})
    reads._hook("subprocess.Popen", ("true", ["true", str(tmp_path)], None, None))
    assert [c["argv"] for c in reads.children] == [["true", str(tmp_path)]]


def test_the_observation_names_the_first_five_programs_each_cut_at_160_characters(fresh_reads, monkeypatch):
    monkeypatch.setattr(reads, "_watch", None)
    assert reads.observation() == {"children": [], "watch": None, "gaps": []}
    long = ["tool", "x" * 200]
    for argv in ([*long], ["a"], ["b", "two words"], ["c"], ["d"]):
        reads.children.append({"argv": argv, "cwd": "/w"})
    five = reads.observation()
    assert five["children"] == [long, ["a"], ["b", "two words"], ["c"], ["d"]]
    assert five["gaps"] == [
        "the job ran 5 program(s) whose reads are seen only for the files their arguments name "
        f"and in watched directories: {('tool ' + 'x' * 200)[:160]}; a; b 'two words'; c; d"
    ]
    reads.children.append({"argv": ["e"], "cwd": "/w"})
    assert reads.observation()["gaps"][0].endswith(": " + five["gaps"][0].split(": ", 1)[1] + "; ...")
    assert "6 program(s)" in reads.observation()["gaps"][0]


def test_the_observation_reports_the_watch_and_its_gaps(fresh_reads, monkeypatch):
    class Watch:
        watched, truncated, attributed, gaps = 12, True, True, ["the fanotify event queue overflowed"]
        opened, by_others = {"/data/a": None}, {"/data/b": None}
        written, written_by_others = {"/data/out": "created"}, {"/data/theirs": "written"}

    monkeypatch.setattr(reads, "_watch", Watch())
    assert reads.observation() == {
        "children": [],
        "watch": {
            "directories": 12,
            "truncated": True,
            "attributed": True,
            "opened_by_others": 1,
            "others_in_key": False,
        },
        "gaps": ["the fanotify event queue overflowed"],
    }
    assert reads.natively_opened() == {"/data/a": None}
    assert reads.natively_written() == {"/data/out": "created", "/data/theirs": "another process"}
    reads.children.append({"argv": ["zcat", "a.gz"], "cwd": "/w"})  # its children may outlive it: all count
    assert reads.natively_written() == {"/data/out": "created", "/data/theirs": "written"}
    assert reads.observation()["watch"]["others_in_key"] and reads.natively_opened() == {
        "/data/a": None,
        "/data/b": None,
    }


@pytest.mark.parametrize("backend", ["Fanotify", "Inotify"])
def test_a_watch_sees_the_files_written_and_made_in_its_trees_and_in_directories_made_there(tmp_path, backend):
    """A file written in place is ``written``; one made, or moved there (a checkpoint TensorFlow
    writes under a temporary name, then renames), ``created``; a file only read, neither. A
    directory made in a watched one is watched too, and the files already in it are made."""
    old, read, elsewhere = tmp_path / "old.index", tmp_path / "read.csv", _dirs(tmp_path, "elsewhere") / "elsewhere"
    for path in (old, read, elsewhere / "part"):
        path.write_bytes(b"before")
    watch = fswatch.Watch(skip=[str(elsewhere)], using=[_backend(backend)])
    watch.add_tree(str(tmp_path))
    with open(old, "r+b") as f:  # in place: the same file
        f.write(b"after")
    with open(read, "rb"):
        pass
    (tmp_path / "new.bin").write_bytes(b"x")
    os.rename(elsewhere / "part", tmp_path / "ckpt-1.data")
    made = tmp_path / "training_checkpoints"
    made.mkdir()
    (made / "at-once.index").write_bytes(b"x")  # before the watch of its directory can begin
    time.sleep(0.5)
    (made / "later.index").write_bytes(b"x")
    time.sleep(0.5)
    watch.stop()
    assert watch.written == {
        str(old): fswatch.WRITTEN,
        str(tmp_path / "new.bin"): fswatch.CREATED,
        str(tmp_path / "ckpt-1.data"): fswatch.CREATED,
        str(made / "at-once.index"): fswatch.CREATED,
        str(made / "later.index"): fswatch.CREATED,
    }
    assert str(read) in watch.opened and watch.written_by_others == {} and watch.gaps == []


def test_a_write_by_another_process_is_told_apart(tmp_path):
    """fanotify: a file another process (no child of the job's) writes meanwhile is not the job's output."""
    import subprocess

    watch = fswatch.Watch(skip=[], using=[_backend("Fanotify")])
    watch.add_tree(str(tmp_path))
    subprocess.run(["sh", "-c", f"(sleep 0.5; echo x > '{tmp_path / 'theirs.csv'}') &"], check=True)
    time.sleep(1.5)
    (tmp_path / "mine.csv").write_bytes(b"x")
    time.sleep(0.3)
    watch.stop()
    assert watch.written == {str(tmp_path / "mine.csv"): fswatch.CREATED}
    assert watch.written_by_others == {str(tmp_path / "theirs.csv"): fswatch.CREATED}


def test_a_files_birth_is_its_inodes_and_taken_when_it_was_made(tmp_path):
    before = time.time_ns()
    time.sleep(0.05)  # the kernel's file times are a clock tick coarse
    (tmp_path / "a").write_bytes(b"x")
    born = fswatch.birth_ns(str(tmp_path / "a"))
    if born is None:
        pytest.skip("this file system keeps no birth time")
    os.utime(tmp_path / "a", ns=(0, 0))  # a copy keeping its source's times is still born now
    assert born == fswatch.birth_ns(str(tmp_path / "a"))
    assert born[0] == os.stat(tmp_path / "a").st_ino and before < born[1] <= time.time_ns()
    assert fswatch.birth_ns(str(tmp_path / "missing")) is None


def test_directories_made_and_removed_leave_the_budget(tmp_path):
    """A save's temporary directory, made and removed every epoch, never uses the watch's budget up."""
    watch = fswatch.Watch(skip=[], max_dirs=3, using=[_backend("Inotify")])
    watch.add_tree(str(tmp_path))
    for epoch in range(5):
        temp = tmp_path / f"ckpt-{epoch}_temp"
        temp.mkdir()
        time.sleep(0.15)
        temp.rmdir()
    (tmp_path / "data").mkdir()
    time.sleep(0.15)
    (tmp_path / "data" / "x.csv").write_bytes(b"x")
    time.sleep(0.15)
    watch.stop()
    assert str(tmp_path / "data" / "x.csv") in watch.written and not watch.truncated
