"""Hydra as Hydra users know it, on real runs (issue 16): a user's config folder, and a
two-trial Optuna search that proposes the same trials, with the same weights, twice (one test,
one project: the second search is also the new launch with an edited config file)."""

import hashlib
import json
from pathlib import Path

import pytest

from tests.conftest import is_run

pytestmark = pytest.mark.slow

TINY = "defaults:\n  - mnist\n  - _self_\n\nepochs: 1\nbatch_size: 100\nmax_samples: 300\n"


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.fixture
def project(tmp_path: Path, mnist_npz: Path) -> Path:
    """A user's project: conf/train/tiny.yaml, a quick strict run on the small subset."""
    (tmp_path / "conf" / "train").mkdir(parents=True)
    (tmp_path / "conf" / "train" / "tiny.yaml").write_text(TINY + f"data: {mnist_npz}\n")
    return tmp_path


@pytest.mark.long(seconds=170)
def test_config_dir_runs_a_users_config_and_an_optuna_search_repeats_its_trials_and_weights(launch, project):
    """One project, its file edited midway. A run of the user's config (``--config-dir``) hashes the
    file; a two-trial Optuna search (``-cd``) proposes the same trials, with the same weights, when
    run again; its sweep replays bit for bit. After the edit (a comment the job's code might read):
    a replay runs the file as it was, kept in the run's snapshot, and a new launch with the edited
    file (the second search's same trial, whose bits the comment cannot change) is refused."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")  # in the test extra (pyproject.toml)
    done = launch("--config-dir", "conf", "train=tiny", "store.root=runs", cwd=project)
    assert done.returncode == 0, done.stderr[-2000:]
    (run,) = [p for p in (project / "runs").iterdir() if is_run(p)]
    cfg = (run / "config.yaml").read_text()
    assert "epochs: 1" in cfg and "max_samples: 300" in cfg and "- train/tiny.yaml" in cfg
    digest = hashlib.sha256((project / "conf" / "train" / "tiny.yaml").read_bytes()).hexdigest()
    assert _json(run / "fingerprint.json")["config_files"] == {"train/tiny.yaml": digest}

    args = (
        "-m",
        "-cd",
        "conf",
        "train=tiny",
        "hydra/sweeper=optuna",
        "hydra.sweeper.n_trials=2",
        "train.learning_rate=interval(0.0001,0.01)",
        "store.root=runs",
    )
    first = launch(*args, cwd=project)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "[sweep] reproducible: TPESampler seeded with 0" in first.stderr  # a note: on stderr
    assert "best: job 00" in first.stdout

    # The file is edited: a replay runs it as it was, kept in the run's snapshot.
    (project / "conf" / "train" / "tiny.yaml").write_text(TINY + "# edited\n" + f"data: {_data(cfg)}\n")
    replay = launch("replay", str(run), cwd=project)
    new = [p for p in (project / "runs").iterdir() if is_run(p) and p != run]
    new = [p for p in new if _json(p / "job.json").get("replay_of") == run.name]
    assert replay.returncode == 0 and len(new) == 1, replay.stdout[-2000:] + replay.stderr[-2000:]
    assert _json(new[0] / "fingerprint.json")["config_files"] == {"train/tiny.yaml": digest}

    second = launch(*args, cwd=project)  # the same search, from the edited file
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    sweeps = sorted((project / "runs" / "sweeps").iterdir())
    trials, job_runs = [], []
    for sweep_dir in sweeps:
        assert _json(sweep_dir / "sweep.json")["search"]["seed"] == 0
        records = [_json(p) for p in sorted((sweep_dir / "jobs").iterdir())]
        assert [r["status"] for r in records] == ["complete", "complete"]
        trials.append([(r["overrides"], r["weights_sha256"]) for r in records])
        job_runs.append([Path(r["run_dir"]) for r in records])
        for r in records:  # each trial is an ordinary run, composed from the user's file
            assert _json(Path(r["run_dir"]) / "fingerprint.json")["config_files"].keys() == {"train/tiny.yaml"}
    assert trials[0] == trials[1]  # the same trials, in the same order, with the same weights
    rates = [o for overrides, _ in trials[0] for o in overrides if o.startswith("train.learning_rate=")]
    assert len(set(rates)) == 2 and len({w for _, w in trials[0]}) == 2

    # The same trial launched with the edited file: equal bits, yet refused (the file is in the key).
    compared = launch("compare", str(job_runs[0][0]), str(job_runs[1][0]), cwd=project)
    assert compared.returncode == 3 and "config_files.train/tiny.yaml" in compared.stdout, compared.stdout

    replayed = launch("sweep", "replay", str(sweeps[0]), cwd=project)
    assert replayed.returncode == 0, replayed.stdout[-3000:]
    assert "2 of 2 jobs reproduced bit for bit" in replayed.stdout


def _data(cfg_yaml: str) -> str:
    return next(line.split(": ", 1)[1] for line in cfg_yaml.splitlines() if line.strip().startswith("data: "))
