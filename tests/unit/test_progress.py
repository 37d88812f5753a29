"""Results on stdout, notes on stderr through the ``launch`` logger, -q/-v; and long work (pip, Docker)
says what it is doing while it works, also when stderr is not a terminal (issue 47)."""

from __future__ import annotations

import io
import json
import logging
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from launcher import console, proc
from launcher.cli import main as cli
from launcher.share import wheels

# A pip that takes its time: it says what it collects, waits, writes the wheel, says it saved it,
# waits again, and writes when it ended (time.time()) last of all.
FAKE_PIP = """\
import sys, time, zipfile
from pathlib import Path

args = sys.argv[1:]
dest = Path(args[args.index("--wheel-dir") + 1])
wanted = [a for a in args if "==" in a]
for one in wanted:
    name, version = one.split("==")
    print(f"Collecting {one}", flush=True)
    time.sleep(0.6)
    print(f"  Downloading {name}-{version}.tar.gz (12 kB)", flush=True)
    wheel = dest / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\\nName: {name}\\nVersion: {version}\\n")
        z.writestr(f"{info}/RECORD", f"{info}/METADATA,,\\n{info}/RECORD,,\\n")
    print(f"Saved {wheel}", flush=True)
    time.sleep(0.6)
Path(sys.argv[0]).with_name("ended").write_text(repr(time.time()))
"""


class Stamped(io.StringIO):
    """A stderr that remembers when each line was written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[float, str]] = []
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self.lines += [(time.time(), line) for line in text.splitlines() if line]
        return len(text)


def _launcher_wheel(dest: Path) -> Path:
    """A stand-in for the launcher's own wheel: its build is not what is tested here."""
    wheel = dest / "tf_repro_launcher-0.0.0-py3-none-any.whl"
    info = "tf_repro_launcher-0.0.0.dist-info"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: tf-repro-launcher\nVersion: 0.0.0\n")
        z.writestr(f"{info}/RECORD", f"{info}/METADATA,,\n{info}/RECORD,,\n")
    return wheel


def test_pack_with_env_says_what_pip_does_on_stderr_while_it_gathers_the_wheels(tmp_path, monkeypatch):
    fake = tmp_path / "pip" / "fake_pip.py"
    fake.parent.mkdir()
    fake.write_text(FAKE_PIP)
    dest = tmp_path / "wheels"
    monkeypatch.setattr(wheels, "pip_argv", lambda *args: [sys.executable, str(fake), *args])
    monkeypatch.setattr(wheels, "launcher_wheel", lambda fp, into, progress=None: _launcher_wheel(into))
    monkeypatch.setattr(console, "HEARTBEAT_S", 0.3)
    stderr = Stamped()
    monkeypatch.setattr(sys, "stderr", stderr)  # not a terminal, as in a CI log
    fp = {"software": {"distributions": {"slowpkg": {"version": "1.0"}}}}

    got = wheels.collect_wheels(fp, dest)

    ended = float((fake.parent / "ended").read_text())
    assert sorted(w.name for w in got) == ["slowpkg-1.0-py3-none-any.whl", "tf_repro_launcher-0.0.0-py3-none-any.whl"]
    said = {text: when for when, text in stderr.lines}
    collecting = "[launch] pack: Collecting slowpkg==1.0"
    saved = f"[launch] pack: Saved {dest / 'slowpkg-1.0-py3-none-any.whl'}"
    assert said[collecting] < said[saved] < ended, stderr.lines  # as pip said it, not after it ended
    beats = [(when, text) for when, text in stderr.lines if text.startswith("[launch] pack: collecting wheels... ")]
    assert beats and beats[0][0] < ended, stderr.lines  # the wait between pip's lines is not silent
    assert "[launch] pack: collecting 1 wheel(s) for the archive (pip wheel --no-deps)" in said
    assert not any("Downloading" in text for text in said)  # pip's other lines: its log, or -v


def test_run_streaming_keeps_every_line_in_the_log_and_notes_only_the_steps(tmp_path, capsys):
    script = "print('Collecting a==1'); print('chatter'); print('Successfully installed a-1', end='')"
    log = tmp_path / "pip.log"
    with console.Progress("rebuild", "installing", every=60) as progress:
        code = proc.run_streaming([sys.executable, "-c", script], {}, log, echo=False, progress=progress)
    assert code == 0
    assert log.read_text() == "Collecting a==1\nchatter\nSuccessfully installed a-1"
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [
        "[launch] rebuild: Collecting a==1",
        "[launch] rebuild: Successfully installed a-1",  # the last line, without its newline, at the end
    ]


def test_docker_build_steps_are_noted_and_its_other_lines_shown_with_debug(capsys):
    console.setup(logging.DEBUG)
    with console.Progress("image", "building launch/tf-cpu:abc", every=60) as progress:
        for line in ("Step 1/9 : FROM launch/base\n", " ---> 1234\n", "Step 2/9 : RUN pip install x\n"):
            progress.line(line)
    assert capsys.readouterr().err.splitlines() == [
        "[launch] image: Step 1/9 : FROM launch/base",
        "[launch] image: ---> 1234",
        "[launch] image: Step 2/9 : RUN pip install x",
    ]


def test_a_sweeps_job_hides_its_notes_but_not_its_warnings_also_in_a_progress_thread(capsys, monkeypatch):
    monkeypatch.setattr(console, "HEARTBEAT_S", 0.05)
    with console.notes_hidden():
        console.log.info("image reused")
        console.log.warning("MLflow is down")
        with console.Progress("image", "building"):
            time.sleep(0.3)
    console.log.info("after the job")
    assert capsys.readouterr().err.splitlines() == ["[launch] warning: MLflow is down", "[launch] after the job"]


@pytest.fixture
def noting(monkeypatch):
    """``launch noting``: a subcommand that prints a result, and says a note, a warning and a debug line."""

    def run(argv: list[str]) -> int:
        print(json.dumps({"result": argv}))
        console.log.info("a note")
        console.log.getChild("sweep").info("a sweep's note")
        console.log.warning("a warning")
        console.log.debug("a detail")
        return 0

    monkeypatch.setitem(cli.COMMANDS, "noting", "tests.unit.test_progress")  # never imported: command is faked
    monkeypatch.setattr(cli, "command", lambda name: run)


@pytest.mark.parametrize(
    ("argv", "notes"),
    [
        (["noting", "x"], ["[launch] a note", "[sweep] a sweep's note", "[launch] warning: a warning"]),
        (["-q", "noting", "x"], ["[launch] warning: a warning"]),
        (["noting", "x", "--quiet"], ["[launch] warning: a warning"]),
        (
            ["noting", "-v", "x"],
            ["[launch] a note", "[sweep] a sweep's note", "[launch] warning: a warning", "[launch] a detail"],
        ),
        (["--verbose", "noting", "-q", "x"], ["[launch] warning: a warning"]),  # the last one wins
    ],
)
def test_results_go_to_stdout_notes_to_stderr_and_q_v_choose_how_many(noting, capsys, argv, notes):
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {"result": ["x"]}  # -q/-v are launch's, never the subcommand's
    assert err.splitlines() == notes


def test_q_and_v_are_launchs_own_not_hydras_nor_after_a_double_dash():
    assert cli.verbosity(["-q", "train.epochs=2", "-m"]) == (["train.epochs=2", "-m"], logging.WARNING)
    assert cli.verbosity(["--cfg", "job", "-v"]) == (["--cfg", "job"], logging.DEBUG)
    assert cli.verbosity(["replay", "RUN", "--", "-v"]) == (["replay", "RUN", "--", "-v"], logging.INFO)


def test_q_before_a_hydra_flag_is_not_handed_to_hydra(capsys):
    assert cli.main(["-q", "--cfg", "job", "train.epochs=3", "-v"]) == 0
    out, err = capsys.readouterr()
    assert "epochs: 3" in out and "error" not in err
