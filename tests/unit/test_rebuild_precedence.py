"""A rebuilt overlay's distributions win, a refusal says why, and the build lock (``launcher.run.rebuild``).

Real venvs of this interpreter and hand-written distributions (no network, no pip, no
training): the overlay's ``.pth`` against a site directory that ``PYTHONPATH`` puts first
(an installed launcher's), ``verify`` against a copy found first with and without metadata,
and the lock file that a build holds, held by another process.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from launcher.errors import RebuildError
from launcher.record.probe import distributions
from launcher.run import rebuild

SEEN = (
    "import importlib.metadata as m, json, sys, tinydist, extramod; "
    "print(json.dumps([tinydist.__file__, m.version('tinydist'), sys.path]))"
)


def _dist(site: Path, version: str, metadata: bool = True) -> str:
    """A distribution ``tinydist`` of this version written into ``site``; its RECORD."""
    files = {"tinydist/__init__.py": f"VERSION = {version!r}\n".encode()}
    info = f"tinydist-{version}.dist-info"
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: tinydist\nVersion: {version}\n".encode()

    def digest(data: bytes) -> str:
        return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    record = "".join(f"{path},{digest(data)},{len(data)}\n" for path, data in files.items()) + f"{info}/RECORD,,\n"
    files[f"{info}/RECORD"] = record.encode()
    for path, data in files.items():
        if metadata or not path.startswith(info):
            (site / path).parent.mkdir(parents=True, exist_ok=True)
            (site / path).write_bytes(data)
    return record


@pytest.fixture(scope="module")
def overlay(tmp_path_factory) -> tuple[Path, Path, dict]:
    """(the overlay's python, a shared site directory, the identity of the overlay's tinydist 2.0).

    The overlay holds tinydist 2.0; the shared directory (as an installed launcher's site-packages)
    holds tinydist 1.0 and a ``.pth`` adding a directory with ``extramod``. This interpreter's own
    site directories are shared too, so the launcher's probe runs there.
    """
    root = tmp_path_factory.mktemp("precedence")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "overlay")], check=True)
    site = rebuild.overlay_site(root / "overlay")
    record = _dist(site, "2.0")
    shared = root / "shared site"
    _dist(shared, "1.0")
    (root / "extra").mkdir()
    (root / "extra" / "extramod.py").write_text("")
    (shared / "extra.pth").write_text(str(root / "extra") + "\n")
    (site / rebuild.SHARED_PTH).write_text(rebuild.pth_text([str(shared), *rebuild.shared_site_dirs()]))
    identity = {"version": "2.0", "files_sha256": distributions.files_sha256(distributions.parse_record(record))}
    return root / "overlay" / "bin" / "python", shared, identity


def _seen(python: Path, pythonpath: str) -> tuple[str, str, list[str]]:
    env = {**os.environ, "PYTHONPATH": pythonpath}
    done = subprocess.run([str(python), "-c", SEEN], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout)


def test_the_overlay_wins_over_a_shared_site_directory_that_pythonpath_puts_first(overlay):
    python, shared, _ = overlay
    file, version, path = _seen(python, str(shared))  # as the job's PYTHONPATH names an installed launcher's site
    site = str(rebuild.overlay_site(python.parent.parent))
    assert (version, Path(file).parent.parent) == ("2.0", Path(site))
    assert path.index(site) < path.index(str(shared))  # still there, after the overlay; its .pth processed: extramod
    assert path.count(str(shared)) == 1


def test_a_directory_on_pythonpath_that_is_not_shared_stays_first(overlay, tmp_path):
    python, _, _ = overlay
    _dist(tmp_path, "3.0")  # the user's own PYTHONPATH entry: theirs to order
    file, version, _ = _seen(python, str(tmp_path))
    assert (version, Path(file).parent.parent) == ("3.0", tmp_path)


def _files(site: Path) -> str:
    record = next(site.glob("tinydist-*.dist-info/RECORD")).read_text()
    return distributions.files_sha256(distributions.parse_record(record))


def _plan(identity: dict) -> rebuild.Plan:
    return rebuild.Plan(recorded={"tinydist": "2.0"}, install=("tinydist==2.0",), used={"tinydist": identity})


def test_the_probe_and_verify_see_the_overlay_first_with_the_launcher_on_the_jobs_path(overlay, monkeypatch):
    python, shared, identity = overlay
    monkeypatch.setattr(rebuild, "LAUNCHER_ROOT", str(shared))  # an installed launcher: runtime.job_env puts it first
    monkeypatch.delenv("PYTHONPATH", raising=False)
    probed = rebuild.verify(python, _plan(identity))
    assert probed["distributions"]["tinydist"]["version"] == "2.0"
    assert probed["where"]["tinydist"] == {
        "site": os.path.realpath(rebuild.overlay_site(python.parent.parent)),
        "shadowed": [],
    }


def test_a_copy_found_first_is_refused_as_that_not_blamed_on_the_index(overlay, monkeypatch, tmp_path):
    python, _, identity = overlay
    _dist(tmp_path / "with metadata", "1.5")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "with metadata"))
    with pytest.raises(RebuildError) as err:
        rebuild.verify(python, _plan(identity))
    says = str(err.value)
    assert (
        f"the rebuilt environment's tinydist is 1.5 (files {_files(tmp_path / 'with metadata')[:12]}) from "
        f"{tmp_path / 'with metadata'}, not from the overlay holding the run's 2.0" in says
    )
    assert "take it off PYTHONPATH" in says
    assert "index" not in says and err.value.distribution == "tinydist"

    _dist(tmp_path / "no metadata", "1.6", metadata=False)  # metadata says the overlay's; the import is not
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "no metadata"))
    with pytest.raises(RebuildError) as err:
        rebuild.verify(python, _plan(identity))
    says = str(err.value)
    assert f"imports tinydist's module tinydist from {tmp_path / 'no metadata' / 'tinydist'}" in says
    assert "take it off PYTHONPATH" in says and "index" not in says


def test_only_the_overlays_own_copy_that_differs_blames_the_index(overlay, monkeypatch):
    python, _, identity = overlay
    monkeypatch.delenv("PYTHONPATH", raising=False)
    with pytest.raises(RebuildError, match="tinydist is 2.0 .* its wheel on the index is not the one the run used"):
        rebuild.verify(python, _plan({**identity, "files_sha256": "another wheel"}))


def test_explain_names_the_launchers_directory_when_it_holds_the_copy_found_first():
    want = {"version": "26.4", "files_sha256": "b" * 64}
    got = {"version": "26.3", "files_sha256": "2" * 64}
    says = rebuild.explain(
        "packaging",
        want,
        got,
        {"site": "/venv/site-packages", "shadowed": []},
        "/o/site",
        True,
        launcher_root="/venv/site-packages",
    )
    assert says.startswith("the rebuilt environment's packaging is 26.3 (files 222222222222) from /venv/site-packages")
    assert "that is the launcher's own directory, which the job's path puts first" in says
    assert "index" not in says and "\n" not in says
    assert "no packaging" in rebuild.explain("packaging", want, None, None, "/o/site", True)


# ---------------------------------------------------------------- the build lock
HOLD = (
    "import sys; from filelock import FileLock; lock = FileLock(sys.argv[1]); lock.acquire(); "
    'open(sys.argv[1], \'w\').write(\'{"host": "node7", "pid": 4242, "since": "then"}\'); '
    "print('held', flush=True); sys.stdin.read()"
)


@pytest.fixture
def held_elsewhere(tmp_path):
    """The build lock of ``tmp_path / "abc"``, held by another process (as another node's launch)
    until the test closes its stdin."""
    final = tmp_path / "abc"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(rebuild.lock_path(final))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline() == "held\n"
    yield final, holder
    if holder.poll() is None:
        holder.stdin.close()
        holder.wait(timeout=30)


def test_a_build_whose_lock_is_held_is_not_removed_and_one_whose_lock_is_free_is(held_elsewhere):
    final, holder = held_elsewhere
    building = final.with_name(f".{final.name}.99.tmp")  # its pid means nothing here: another node's
    (building / "bin").mkdir(parents=True)
    assert rebuild.remove_abandoned(final) == [] and building.is_dir()
    holder.stdin.close()
    holder.wait(timeout=30)  # the process ended: its lock is free, its directory abandoned
    assert rebuild.remove_abandoned(final) == [building] and not building.exists()


def test_a_second_build_waits_for_the_lock_and_names_who_holds_it(held_elsewhere, capsys):
    final, _ = held_elsewhere
    with pytest.raises(RebuildError, match=r"pid 4242 on node7 \(since then\) is still building .*abc after 0 s"):
        with rebuild.build_lock(final, timeout=0.2):
            pytest.fail("the lock was taken while another process held it")
    assert "waiting for pid 4242 on node7" in capsys.readouterr().err


def test_the_lock_names_this_host_and_pid_while_building_and_guards_its_directory(tmp_path):
    final = tmp_path / "abc"
    building = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    (building / "bin").mkdir(parents=True)
    with rebuild.build_lock(final):
        owner = json.loads(rebuild.lock_path(final).read_text())
        assert (owner["host"], owner["pid"]) == (socket.gethostname(), os.getpid())
        other = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from pathlib import Path; "
                "from launcher.run import rebuild; print(rebuild.remove_abandoned(Path(sys.argv[1])))",
                str(final),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        assert other.stdout.strip() == "[]" and building.is_dir()
    assert rebuild.remove_abandoned(final) == [building]


def test_a_launch_that_waited_for_the_lock_uses_what_the_holder_built(held_elsewhere, monkeypatch):
    final, holder = held_elsewhere
    fp = {"software": {"python": "3.11.7", "container": None, "packages": ["tinydist==2.0"], "distributions": {}}}
    monkeypatch.setattr(rebuild, "here_versions", lambda: {"tinydist": "1.0"})
    monkeypatch.setattr(rebuild.platform, "python_version", lambda: "3.11.7")
    monkeypatch.setattr(rebuild, "cache_key", lambda *args: final.name)
    monkeypatch.setattr(rebuild, "probe", lambda python, names: {"software": {}, "distributions": {}, "where": {}})
    monkeypatch.setattr(rebuild, "_build", lambda *args: pytest.fail("built again after waiting"))

    def finish() -> None:  # the holder's build completes, then its lock is released
        (final / "bin").mkdir(parents=True)
        (final / "bin" / "python").symlink_to(sys.executable)
        holder.stdin.close()

    timer = threading.Timer(0.5, finish)
    timer.start()
    assert rebuild.python_environment(fp, cache_root=final.parent) == final / "bin" / "python"
    timer.join()
