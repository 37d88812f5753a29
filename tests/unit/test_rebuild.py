"""Rebuilding a run's environment (``replay --rebuild``): what differs, the cache, refusals.

The pure parts are tested on recorded fingerprints; the build itself on a fake ``proc``
that refuses calls it does not know (no network, no pip): what a failed or killed build
leaves behind. tests/integration/test_rebuild_environment.py builds a real one.
"""

from __future__ import annotations

import ast
import json
import os
import sys
from pathlib import Path

import pytest

from launcher.errors import RebuildError
from launcher.record import layout
from launcher.record.probe import distributions
from launcher.run import rebuild

TF = {"version": "2.21.0", "files_sha256": "tf", "record_sha256": "r"}


def _fp(**software) -> dict:
    base = {
        "python": "3.11.7",
        "container": None,
        "packages": [
            "tensorflow-cpu==2.21.0",
            "termcolor==3.2.0",
            "six==1.17.0",
            "tf-repro-launcher==0.1.0",
            "Typing_Extensions==4.12.0",
        ],
        "distributions": {"tensorflow-cpu": TF, "termcolor": {"version": "3.2.0", "files_sha256": "t32"}},
    }
    return {"schema": 2, "software": {**base, **software}}


HERE = {"tensorflow-cpu": "2.21.0", "termcolor": "3.3.0", "six": "1.17.0", "tf-repro-launcher": "0.1.0"}
HERE_USED = {"tensorflow-cpu": TF, "termcolor": {"version": "3.3.0", "files_sha256": "t33"}}


def test_only_what_differs_or_is_missing_here_is_installed():
    p = rebuild.plan(_fp(), HERE, HERE_USED, "3.11.7")
    assert p.install == ("termcolor==3.2.0", "typing-extensions==4.12.0")  # another version; missing here
    assert "tf-repro-launcher" not in p.recorded  # the replay runs this launcher's code
    assert set(p.used) == {"tensorflow-cpu", "termcolor"}


def test_a_used_distribution_with_other_content_here_is_installed_though_its_version_agrees():
    here_used = {**HERE_USED, "tensorflow-cpu": {**TF, "files_sha256": "a local build"}}
    assert "tensorflow-cpu==2.21.0" in rebuild.plan(_fp(), HERE, here_used, "3.11.7").install
    old = _fp(distributions={"tensorflow-cpu": {"version": "2.21.0", "record_sha256": "r"}})  # before files_sha256
    assert "tensorflow-cpu==2.21.0" not in rebuild.plan(old, HERE, here_used, "3.11.7").install


@pytest.mark.parametrize(
    ("software", "python", "says"),
    [
        ({}, "3.11.9", "the run used Python 3.11.7 and this is Python 3.11.9: run launch with Python 3.11.7"),
        ({"container": {"content_tag": "t"}}, "3.11.7", "ran in a Docker image"),
        ({"packages": []}, "3.11.7", "recorded no installed packages"),
        ({"packages": ["termcolor"]}, "3.11.7", "'termcolor', not name==version"),
        ({"distributions": {"mine": {"version": "1"}}}, "3.11.7", "the job used mine, which the run's installed"),
    ],
)
def test_refusals_are_one_line_and_name_what(software, python, says):
    with pytest.raises(RebuildError) as err:
        rebuild.plan(_fp(**software), HERE, HERE_USED, python)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_the_cache_key_is_the_distribution_set_the_interpreter_and_what_is_shared():
    p = rebuild.plan(_fp(), HERE, HERE_USED, "3.11.7")
    key = rebuild.cache_key(p, "/py/bin/python3.11 3.11.7", ["/py/site-packages"])
    shuffled = _fp(packages=list(reversed(_fp()["software"]["packages"])))
    assert (
        rebuild.cache_key(
            rebuild.plan(shuffled, HERE, HERE_USED, "3.11.7"), "/py/bin/python3.11 3.11.7", ["/py/site-packages"]
        )
        == key
    )
    others = [
        rebuild.cache_key(p, "/other/bin/python3.11 3.11.7", ["/py/site-packages"]),
        rebuild.cache_key(p, "/py/bin/python3.11 3.11.7", ["/venv/site-packages", "/py/site-packages"]),
        rebuild.cache_key(
            rebuild.plan(
                _fp(),
                {**HERE, "termcolor": "3.2.0"},
                {**HERE_USED, "termcolor": {"version": "3.2.0", "files_sha256": "t32"}},
                "3.11.7",
            ),
            "/py/bin/python3.11 3.11.7",
            ["/py/site-packages"],
        ),  # here now as recorded: not installed
        rebuild.cache_key(
            rebuild.plan(_fp(packages=["six==1.16.0"], distributions={}), HERE, HERE_USED, "3.11.7"),
            "/py/bin/python3.11 3.11.7",
            ["/py/site-packages"],
        ),
    ]
    assert len({key, *others}) == 5 and all(len(k) == 20 for k in others)


def test_mismatches_compare_version_and_content_where_recorded():
    recorded = {"a": {"version": "1", "files_sha256": "x"}, "b": {"version": "2"}, "c": {"version": "3"}}
    found = {"a": {"version": "1", "files_sha256": "y"}, "b": {"version": "2", "files_sha256": "z"}}
    assert rebuild.mismatches(recorded, found) == [("a", recorded["a"], found["a"]), ("c", recorded["c"], None)]


def test_the_commands_pin_and_install_offline_without_dependencies():
    down = rebuild.download_argv("/py", Path("/w"), ["termcolor==3.2.0"])
    assert {"--no-deps", "--only-binary=:all:"} <= set(down) and down[-1] == "termcolor==3.2.0"
    inst = rebuild.install_argv("/py", Path("/v/bin/python"), Path("/w"), Path("/v/requirements.txt"))
    assert {"--no-index", "--no-deps", "--require-hashes", "--isolated"} <= set(inst)
    assert inst[inst.index("--python") + 1] == "/v/bin/python"
    assert rebuild.wheel_name("Typing_Extensions-4.12.0-py3-none-any.whl") == ("typing-extensions", "4.12.0")
    assert rebuild.requirements({"six": ("1.16.0", "b" * 64), "a-b": ("1", "a" * 64)}) == (
        f"a-b==1 --hash=sha256:{'a' * 64}\nsix==1.16.0 --hash=sha256:{'b' * 64}\n"
    )


def test_the_pth_adds_each_site_directory_even_a_hostile_one(tmp_path):
    dirs = ["/py/site-packages", str(tmp_path / 'it\'s "odd"\nnew line')]
    lines = rebuild.pth_text(dirs).splitlines()
    assert len(lines) == 2 and all(line.startswith("import site, sys; ") for line in lines)  # .pth runs "import" lines
    assert [ast.literal_eval(ast.parse(line).body[-1].value.args[0]) for line in lines] == dirs


class FakeProc:
    """proc.run_streaming for the build: a venv, pip download, pip install; anything else is refused."""

    def __init__(self, download: set[str] = frozenset(), install_ok: bool = True) -> None:
        self.download, self.install_ok, self.calls = set(download), install_ok, []

    def __call__(self, argv, env, log_path, cwd=None, echo=True, preexec_affinity=None, progress=None) -> int:
        self.calls.append(list(argv))
        with open(log_path, "a") as log:
            if argv[1:3] == ["-m", "venv"]:
                venv = Path(argv[-1])
                (venv / "bin").mkdir(parents=True)
                (venv / "bin" / "python").symlink_to(sys.executable)
                lib = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
                (lib / "site-packages").mkdir(parents=True)
                return 0
            if argv[3] == "download":
                dest, wanted = Path(argv[argv.index("--dest") + 1]), argv[argv.index("--dest") + 2 :]
                if not set(wanted) <= self.download:
                    log.write("ERROR: No matching distribution found\n")
                    return 1
                dest.mkdir(exist_ok=True)
                for one in wanted:  # named as wheels are: name_with_underscores-version-...
                    name, version = one.split("==")
                    (dest / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").write_bytes(one.encode())
                return 0
            if "install" in argv:
                log.write("ERROR: THESE PACKAGES DO NOT MATCH THE HASHES\n" if not self.install_ok else "ok\n")
                return 0 if self.install_ok else 1
        raise AssertionError(f"unexpected command {argv}")


@pytest.fixture
def here(monkeypatch):
    """This environment as HERE, used distributions as HERE_USED, and Python 3.11.7."""
    monkeypatch.setattr(rebuild, "here_versions", lambda: dict(HERE))
    monkeypatch.setattr(distributions, "distribution_identity", lambda name: HERE_USED.get(name))
    monkeypatch.setattr(rebuild.platform, "python_version", lambda: "3.11.7")


def test_a_failed_build_leaves_no_environment_that_looks_ready_and_keeps_its_log(tmp_path, monkeypatch, here):
    fake = FakeProc(download={"termcolor==3.2.0", "typing-extensions==4.12.0"}, install_ok=False)
    monkeypatch.setattr(rebuild.proc, "run_streaming", fake)
    with pytest.raises(RebuildError, match="failed installing the wheels .*THESE PACKAGES DO NOT MATCH") as err:
        rebuild.python_environment(_fp(), cache_root=tmp_path)
    (log,) = tmp_path.glob("*.log")
    assert str(log) in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([log.name, f".{log.stem}.lock"])  # the lock stays
    steps = ["venv" if c[2] == "venv" else "install" if "install" in c else "download" for c in fake.calls]
    assert steps == ["venv", "download", "install"]


def test_a_distribution_the_index_lacks_is_refused_by_name(tmp_path, monkeypatch, here):
    monkeypatch.setattr(rebuild.proc, "run_streaming", FakeProc(download={"termcolor==3.2.0"}))
    with pytest.raises(RebuildError, match="no wheel of typing-extensions==4.12.0 could be downloaded") as err:
        rebuild.python_environment(_fp(), cache_root=tmp_path)
    assert err.value.distribution == "typing-extensions"
    assert not [p for p in tmp_path.iterdir() if not p.name.endswith((".log", ".lock"))]


def test_a_built_environment_is_verified_every_time_and_a_mismatch_names_the_distribution(tmp_path, monkeypatch, here):
    fake = FakeProc(download={"termcolor==3.2.0", "typing-extensions==4.12.0"})
    monkeypatch.setattr(rebuild.proc, "run_streaming", fake)
    seen = {"tensorflow-cpu": TF, "termcolor": {"version": "3.2.0", "files_sha256": "t32"}}
    monkeypatch.setattr(rebuild, "probe", lambda python, names: {"software": {}, "distributions": seen})
    python = rebuild.python_environment(_fp(), cache_root=tmp_path)
    venv = python.parent.parent
    assert python == venv / "bin" / "python" and venv.parent == tmp_path
    info = json.loads((venv / layout.REBUILD).read_text())
    assert info["install"] == ["termcolor==3.2.0", "typing-extensions==4.12.0"] and info["shared"]
    assert (venv / "requirements.txt").read_text().startswith("termcolor==3.2.0 --hash=sha256:")
    pth = next(venv.glob(f"lib/*/site-packages/{rebuild.SHARED_PTH}")).read_text()
    assert pth == rebuild.pth_text(rebuild.shared_site_dirs())
    assert not (venv / "wheels").exists()
    assert json.loads(rebuild.lock_path(venv).read_text())["pid"] == os.getpid()  # the build held its lock
    calls = len(fake.calls)
    again = rebuild.python_environment(_fp(), cache_root=tmp_path)
    assert again == python and len(fake.calls) == calls  # cached
    seen["termcolor"] = {"version": "3.2.0", "files_sha256": "another wheel"}
    with pytest.raises(RebuildError, match="rebuilt environment's termcolor is 3.2.0 .files another whe") as err:
        rebuild.python_environment(_fp(), cache_root=tmp_path)
    assert err.value.distribution == "termcolor"


def test_the_probe_sees_what_this_interpreter_sees():
    probed = rebuild.probe(Path(sys.executable), ["termcolor", "no-such-distribution"])
    assert probed["distributions"] == {
        "termcolor": distributions.distribution_identity("termcolor"),
        "no-such-distribution": None,
    }
    assert probed["software"]["python"] == rebuild.platform.python_version()
    assert Path(probed["launcher"]).parent == Path(rebuild.LAUNCHER_ROOT) / "launcher"


def test_a_launcher_the_environment_cannot_import_is_refused(monkeypatch):
    monkeypatch.setattr(
        rebuild.proc,
        "capture",
        lambda argv, **how: json.dumps({"error": "ModuleNotFoundError: No module named 'omegaconf'"}),
    )
    with pytest.raises(RebuildError, match="the launcher cannot be imported by .* No module named 'omegaconf'"):
        rebuild.probe(Path("/v/bin/python"), [])
    monkeypatch.setattr(rebuild.proc, "capture", lambda argv, **how: None)
    with pytest.raises(RebuildError, match="does not start"):
        rebuild.probe(Path("/v/bin/python"), [])


def test_precheck_compares_the_identities_the_rebuilt_interpreter_probed(monkeypatch):
    from launcher.run import precheck

    monkeypatch.setattr(
        distributions, "distribution_identity", lambda name: pytest.fail("this interpreter's identity used")
    )
    stored = {**_fp(), "code": {"modules": {}}}
    probed = {"software": {}, "distributions": {"termcolor": {"version": "3.2.0", "files_sha256": "t32"}}}
    _, used, _ = precheck.current_usage(stored, probed=probed)
    assert used == {"tensorflow-cpu": None, "termcolor": {"version": "3.2.0", "files_sha256": "t32"}}
