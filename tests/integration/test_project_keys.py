"""Keys that hold across checkouts and installs (issue 39): two checkouts of one project are
IDENTICAL, and an edit of the helper module one of them imports is REFUSED; a package a library
only probes for, installed between two runs, refuses nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import NPZ, SCRIPTS, q, run_dir_of

pytestmark = pytest.mark.slow


@pytest.mark.long(seconds=71)
def test_two_checkouts_of_one_project_are_identical_and_a_changed_helper_is_refused(launch, tmp_path):
    """The same script, helper and data in two directories, each launched where it lies and given its
    own data by absolute path (as `$PWD/digits.npz` would): the config, the data and the modules are
    keyed relative to the project, so the two runs compare IDENTICAL. Then the helper module edited
    in one of them: REFUSED naming it, and the first run replays from its own snapshot (the helper
    as it was) as REPRODUCED. (One test: the unchanged pair serves both.)"""
    runs = []

    def run(project: Path) -> Path:
        done = launch(
            "train=script",
            "train.script=with_helper.py",
            f"train.args=[{q(project / 'digits.npz')}]",
            f"store.root={q(tmp_path / 'store')}",
            cwd=project,
        )
        return run_dir_of(done)

    for name in ("s5_advanced", "s5_copy"):
        project = tmp_path / name
        project.mkdir()
        for script in ("with_helper.py", "helper.py"):
            shutil.copy(SCRIPTS / script, project / script)
        shutil.copy(NPZ, project / "digits.npz")
        runs.append(run(project))
    fa, fb = (json.loads((r / "fingerprint.json").read_text()) for r in runs)
    assert fa["launch_dir"] == str(tmp_path / "s5_advanced") and fb["launch_dir"] == str(tmp_path / "s5_copy")
    assert str(tmp_path / "s5_advanced" / "digits.npz") in fa["data"]  # recorded as read, keyed relatively
    assert set(fa["code"]["modules"]) == {"helper"}, fa["code"]["modules"]
    assert (tmp_path / "s5_copy" / "with_helper.py").as_posix() in (runs[1] / "config.yaml").read_text()  # runs from
    done = launch("compare", runs[0], runs[1])
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("IDENTICAL"), done.stdout

    helper = tmp_path / "s5_advanced" / "helper.py"
    helper.write_text(helper.read_text().replace("0.1", "0.05"))
    changed = run(tmp_path / "s5_advanced")
    refused = launch("compare", runs[0], changed)
    assert refused.returncode == 3 and refused.stdout.startswith("REFUSED"), refused.stdout + refused.stderr
    assert any(line.split()[0] == "code.modules.helper" for line in refused.stdout.splitlines()[1:] if line.strip())
    replayed = launch("replay", runs[0])  # from the run's own snapshot: the helper as it was
    assert replayed.returncode == 0 and "REPRODUCED: " in replayed.stdout, replayed.stdout[-2000:]


def test_a_package_a_library_only_probes_for_installed_between_runs_refuses_nothing(launch, tmp_path, keras_fit_runs):
    """`import keras` imports IPython when it is installed (the launcher's [notebook] extra), and IPython
    imports pygments, which rich (that Keras requires) requires too. A run from before the install
    (IPython hidden here, as if not installed) compares IDENTICAL with one after it (shared)."""
    hidden = tmp_path / "site-packages"  # a site directory before the installed one: IPython not found
    (hidden / "IPython").mkdir(parents=True)
    (hidden / "IPython" / "__init__.py").write_text("raise ModuleNotFoundError('not installed', name='IPython')\n")
    done = launch(
        "train=script",
        f"train.script={q(SCRIPTS / 'keras_fit.py')}",
        f"train.args=[{q(NPZ)}]",
        f"store.root={q(tmp_path / 'store')}",
        env={"PYTHONPATH": str(hidden)},
    )
    before, after = run_dir_of(done), keras_fit_runs[0]["run"]
    sb, sa = (json.loads((r / "fingerprint.json").read_text())["software"] for r in (before, after))
    assert "ipython" not in sb["distributions_probed"] and "pygments" not in {
        **sb["distributions"],
        **sb["distributions_probed"],
    }
    assert {"ipython", "pygments", "traitlets"} <= set(sa["distributions_probed"])  # imported, out of the key
    assert "pygments" not in sa["distributions"] and "rich" in sa["distributions"]
    done = launch("compare", before, after)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("IDENTICAL"), done.stdout
