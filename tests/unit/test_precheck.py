"""The key of a stored run against this environment, before ``launch replay`` / ``resume`` reruns it.

A run made here and checked here must not be refused, whatever only its job process could measure
(``precheck.MEASURED_IN_JOB``: the determinism settings that took effect, TensorFlow's build); a
change to what the rerun would find here (a data file, a module, a library, a distribution, a
variable the job read, a TensorFlow release) refuses by name. The launcher side of the fingerprint
(``pipeline.launch_fingerprint``) and this machine's software (``probes.software``) are stand-ins; the
files are real and hashed.
"""

from __future__ import annotations

import copy
import hashlib
import os
from pathlib import Path

import pytest

from launcher.errors import SchemaError
from launcher.record import hashing, layout
from launcher.record.probe import distributions, fingerprint, probes
from launcher.record.store import runs
from launcher.run import pipeline, precheck
from tests.unit.test_fingerprint import _fp

KERAS = {"version": "3.15.1", "files_sha256": "f1", "record_sha256": "r1"}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Here:
    """A stored run (``stored``, in ``run_dir``) made in the launch directory ``cwd`` of this machine."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
        self.cwd = tmp_path / "launch"
        (self.cwd / "data").mkdir(parents=True)
        (self.cwd / "data" / "mnist.npz").write_bytes(b"digits")
        (self.cwd / "helper.py").write_text("X = 1\n")
        self.lib = tmp_path / "libm.so.6"
        self.lib.write_bytes(b"\x7fELF")
        self.run_dir = tmp_path / "run"
        self.run_dir.mkdir()
        (self.run_dir / layout.CONFIG).write_text("seed: 1\n")
        fp = _fp()
        fp["code"]["launcher_modules"] = hashing.launcher_modules({"launcher": "", "launcher.run.precheck": ""})
        helper = self.cwd / "helper.py"
        fp["code"]["modules"] = {"helper": {"path": str(helper), "sha256": _sha(helper)}}
        fp["software"]["libraries"] = {str(self.lib): _sha(self.lib)}
        fp["software"]["distributions"] = {"keras": KERAS}
        fp["software"]["tf_build"] = {"is_cuda_build": "False", "cpu_compiler": "clang 18"}  # the job's TensorFlow
        fp["data"] = {"data/mnist.npz": _sha(self.cwd / "data" / "mnist.npz")}
        self.stored = fp
        self.identities = {"keras": KERAS}
        self.software = {
            k: v
            for k, v in copy.deepcopy(fp["software"]).items()
            if k not in ("tf_build", "distributions", "libraries")
        }  # what probes.software() reports
        self.launched: list = []
        monkeypatch.setattr(pipeline, "launch_fingerprint", self._launch_fingerprint)
        monkeypatch.setattr(probes, "software", lambda: copy.deepcopy(self.software))
        monkeypatch.setattr(distributions, "distribution_identity", lambda name: self.identities.get(name))
        monkeypatch.setenv("LR", "0.01")

    def _launch_fingerprint(self, resolved, cwd, extra_env=None, root=None, cpu=None, python=None):
        """The launcher side of a fingerprint taken now: what the job fills in is None."""
        self.launched.append(
            {"seed": resolved.seed, "cwd": cwd, "extra_env": extra_env, "root": root, "cpu": cpu, "python": python}
        )
        fp = copy.deepcopy(self.stored)
        fp.update(software=None, determinism=None, data=None)
        fp.pop("environment_read")
        fp["code"] = {k: v for k, v in fp["code"].items() if k not in ("launcher_modules", "modules")}
        fp["code"]["launcher_version"] = hashing.launcher_source_version()  # this launcher's, as launch records it
        fp["schema"] = fingerprint.SCHEMA  # what this launcher writes
        return None, {}, fp

    def differences(self, **kwargs) -> list:
        return precheck.key_differences_now(self.stored, self.run_dir, str(self.cwd), **kwargs)


@pytest.fixture
def here(tmp_path, monkeypatch) -> Here:
    return Here(tmp_path, monkeypatch)


def test_a_run_made_here_is_not_refused_here(here):
    assert here.differences() == []
    assert here.launched == [
        {"seed": 1, "cwd": str(here.cwd), "extra_env": None, "root": None, "cpu": None, "python": None}
    ]


def test_precheck_reads_the_stored_fingerprint_and_passes_the_rerun_on(here):
    runs.write_json(here.run_dir / layout.FINGERPRINT, here.stored)
    assert precheck.precheck(here.run_dir, str(here.cwd), {"A": "1"}, None, cpu="Haswell") == []
    assert here.launched[-1]["extra_env"] == {"A": "1"} and here.launched[-1]["cpu"] == "Haswell"
    probed = {"software": here.software, "distributions": here.identities, "python": "/venv/bin/python"}
    assert precheck.precheck(here.run_dir, str(here.cwd), probed=probed) == []
    assert here.launched[-1]["python"] == "/venv/bin/python"


@pytest.mark.parametrize("field", precheck.MEASURED_IN_JOB)
def test_what_only_the_job_measures_is_left_to_the_comparison_after_the_run(here, field):
    """The launcher cannot know before the run what took effect in the job or how its TensorFlow
    was built: those fields are the stored run's own, so they never refuse a rerun."""
    section, _, sub = field.partition(".")
    assert here.stored[section][sub] if sub else here.stored[section]  # recorded, and not what a launch sees
    assert here.differences() == []


def test_the_job_measured_fields_of_a_run_whose_job_never_reported(here):
    here.stored["software"] = None  # the job died before reporting: nothing of its software to check
    here.stored["code"]["modules"] = None
    assert here.differences() == []


def test_a_release_spelled_with_a_local_build_tag_is_the_same_release(here):
    here.software["tensorflow"] = "2.21.0+local"  # what the distribution says; the job read 2.21.0
    here.software["keras"] = "3.15.1+x"
    assert here.differences() == []
    here.software["tensorflow"] = "2.20.0"
    here.software["numpy"] = "2.4.6+y"
    assert here.differences() == [("software.tensorflow", "2.21.0", "2.20.0")]


def test_same_release_keeps_the_recorded_spelling_only_for_the_same_release():
    assert precheck._same_release("2.21.0+local", "2.21.0") == "2.21.0"
    assert precheck._same_release("2.21.0", "2.21.0+cpu") == "2.21.0+cpu"
    assert precheck._same_release("2.20.0", "2.21.0") == "2.20.0"


def test_what_changed_here_since_the_run_refuses_by_name(here, monkeypatch):
    data = here.cwd / "data" / "mnist.npz"
    before = {
        "data": here.stored["data"]["data/mnist.npz"],
        "lib": here.stored["software"]["libraries"][str(here.lib)],
        "helper": here.stored["code"]["modules"]["helper"]["sha256"],
    }
    data.write_bytes(b"other digits")
    here.lib.write_bytes(b"\x7fELF another build")
    (here.cwd / "helper.py").write_text("X = 2\n")
    here.identities["keras"] = {**KERAS, "files_sha256": "f2"}
    monkeypatch.setenv("LR", "0.1")
    here.software["python"] = "3.11.9"
    assert here.differences() == [
        ("software.python", "3.11.7", "3.11.9"),
        ("software.distributions.keras.files_sha256", "f1", "f2"),
        (f"software.libraries.{here.lib}", before["lib"], _sha(here.lib)),
        ("environment_read.LR", "0.01", "0.1"),
        ("code.modules.helper", before["helper"], _sha(here.cwd / "helper.py")),
        ("data.data/mnist.npz", before["data"], _sha(data)),
    ]


def test_what_is_gone_here_is_missing(here):
    (here.cwd / "data" / "mnist.npz").unlink()
    (here.cwd / "helper.py").unlink()
    here.lib.unlink()
    here.identities.clear()
    diffs = {name: now for name, _, now in here.differences()}
    assert diffs == {
        "data.data/mnist.npz": "missing",
        "code.modules.helper": "missing",
        f"software.libraries.{here.lib}": "missing",
        "software.distributions.keras": None,
    }


def test_a_secret_the_job_read_is_compared_by_its_hash_never_its_value(here, monkeypatch):
    from launcher.record.probe.environment import as_read

    here.stored["environment_read"] = {"WANDB_API_KEY": as_read("WANDB_API_KEY", "s3cr3t"), "UNSET": None}
    monkeypatch.setenv("WANDB_API_KEY", "s3cr3t")
    monkeypatch.delenv("UNSET", raising=False)
    assert here.differences() == []
    monkeypatch.setenv("WANDB_API_KEY", "another")
    ((name, then, now),) = here.differences()
    assert name == "environment_read.WANDB_API_KEY" and now.startswith("sha256:") and "another" not in now
    here.stored["environment_read"] = None  # a run from before environment_read: not checked
    assert here.differences() == []


def test_the_launcher_files_the_job_imported_are_held_to_this_launchers(here):
    here.stored["code"]["launcher_modules"]["launcher.run.precheck"] = "0" * 64
    here.stored["code"]["launcher_modules"]["launcher.gone"] = "1" * 64
    assert [d[0] for d in here.differences()] == ["code.launcher.launcher.gone", "code.launcher.launcher.run.precheck"]
    assert dict((d[0], d[2]) for d in here.differences())["code.launcher.launcher.gone"] == "missing"


def test_a_launcher_module_moved_unchanged_refuses_nothing(here):
    """The key holds the launcher's modules by content: one the run imported under another name,
    whose content this launcher has, is the same code (a move, a rename)."""
    content = hashing.launcher_modules({"launcher.run.precheck": ""})["launcher.run.precheck"]
    del here.stored["code"]["launcher_modules"]["launcher.run.precheck"]
    here.stored["code"]["launcher_modules"]["launcher.before.the.move"] = content
    assert here.differences() == []


def test_a_schema_3_run_named_the_launchers_files_and_is_held_to_the_same_modules(here):
    modules = here.stored["code"]["launcher_modules"]
    here.stored["schema"] = 3
    here.stored["code"]["launcher_modules"] = {
        "__init__.py": modules["launcher"],
        "run/precheck.py": modules["launcher.run.precheck"],
    }
    assert here.differences() == []
    here.stored["code"]["launcher_modules"]["run/precheck.py"] = "0" * 64
    assert [d[0] for d in here.differences()] == ["code.launcher.launcher.run.precheck"]


def test_a_run_without_the_launcher_files_is_held_to_the_whole_package(here):
    here.stored["code"]["launcher_modules"] = None  # interrupted, or written before schema 3
    here.stored["code"]["launcher_version"] = hashing.launcher_source_version()
    assert here.differences() == []
    here.stored["code"]["launcher_version"] = "0.0.1+src.0000000000000000"
    assert here.differences() == [
        ("code.launcher.(the whole package)", "0.0.1+src.0000000000000000", hashing.launcher_source_version())
    ]


def test_a_containers_software_is_the_images_not_this_hosts(here):
    here.stored["software"]["container"] = {"content_tag": "t", "packages_sha256": "p", "uid": 1000}
    here.software.update(python="3.12.0", tensorflow="2.20.0")  # this host's: not what the rerun uses
    here.identities.clear()
    here.lib.unlink()
    assert here.differences() == []


def test_a_schema_1_run_stays_unknown_where_it_recorded_nothing(here):
    here.stored["schema"] = 1
    for field in ("distributions", "libraries"):
        del here.stored["software"][field]
    del here.stored["code"]["modules"]
    assert here.differences() == []


def test_an_unreadable_schema_is_refused_before_anything_is_measured(here):
    here.stored["schema"] = 99
    with pytest.raises(SchemaError, match=f"^{here.run_dir}: fingerprint schema 99"):
        here.differences()
    assert here.launched == []


def test_the_interpreter_a_rerun_will_use_is_asked_not_this_one(here, monkeypatch):
    """replay --rebuild: the software and distributions of the rebuilt interpreter (probed)."""
    monkeypatch.setattr(probes, "software", lambda: pytest.fail("this interpreter's software asked"))
    monkeypatch.setattr(
        distributions, "distribution_identity", lambda name: pytest.fail("this interpreter's identity asked")
    )
    probed = {
        "software": {**here.software, "python": "3.11.9"},
        "distributions": {"keras": {**KERAS, "files_sha256": "f9"}},
        "python": "/venv/bin/python",
    }
    assert here.differences(probed=probed) == [
        ("software.python", "3.11.7", "3.11.9"),
        ("software.distributions.keras.files_sha256", "f1", "f9"),
    ]


def test_a_rerun_from_a_laid_out_snapshot_is_checked_against_the_snapshot(tmp_path, here):
    """The job runs the code and small data the run kept, laid out under root: those are hashed,
    whatever happened to the originals since."""
    root = tmp_path / "work"
    for name, text in (("helper.py", "X = 1\n"), ("data/mnist.npz", "digits")):
        kept = root / str(here.cwd).lstrip("/") / name
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(text)
        (here.cwd / name).write_text("changed since")  # the original
    cwd = str(root) + str(here.cwd)
    assert precheck.key_differences_now(here.stored, here.run_dir, cwd, None, str(root)) == []
    assert here.launched[-1]["root"] == str(root) and here.launched[-1]["cwd"] == cwd
    runs.write_json(here.run_dir / layout.FINGERPRINT, here.stored)
    assert precheck.precheck(here.run_dir, cwd, None, str(root)) == []
    assert [d[0] for d in here.differences()] == ["code.modules.helper", "data.data/mnist.npz"]  # the originals'


def test_data_is_looked_for_in_the_laid_out_snapshot_first(tmp_path, here):
    root = tmp_path / "snapshot"
    inside = root / str(here.cwd).lstrip("/") / "data"
    inside.mkdir(parents=True)
    (inside / "mnist.npz").write_bytes(b"digits")
    (here.cwd / "data" / "mnist.npz").write_bytes(b"changed where the run was")
    cwd = str(root) + str(here.cwd)
    assert precheck.current_data_hashes(here.stored["data"], cwd, str(root)) == here.stored["data"]
    assert precheck.current_data_hashes(here.stored["data"], str(here.cwd)) != here.stored["data"]
    assert precheck.current_data_hashes({"data/none.npz": "x"}, str(here.cwd)) == {"data/none.npz": "missing"}


def test_the_launchers_own_data_is_found_in_its_package(here):
    name = "launcher/run/precheck.py"  # a file the launcher ships, named as the job recorded it
    path = Path(precheck.__file__)
    assert precheck.current_data_hashes({name: "x"}, "/nowhere") == {name: _sha(path)}
    assert precheck._current_path("/abs/f.npz", "/cwd") == Path("/abs/f.npz")
    assert precheck._current_path("rel/f.npz", "/cwd") == Path("/cwd/rel/f.npz")
    assert os.path.samefile(precheck._current_path(name, "/cwd"), path)
