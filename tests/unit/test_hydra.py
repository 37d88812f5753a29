"""Hydra as Hydra users know it (issue 16): the standard flags, a user's config folder,
its files in the fingerprint, and the optimizing sweeper's plan (no training here)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from launcher.cli import main as cli
from launcher.errors import ConfigError
from launcher.record.probe import fingerprint
from launcher.run import composition, config
from launcher.sweep import multirun as sweep
from launcher.sweep import report as sweep_report
from launcher.sweep import search
from tests.conftest import REPO

CORES2 = [0, 1]
TINY = "defaults:\n  - mnist\n  - _self_\n\nepochs: 1\nbatch_size: 100\nmax_samples: 300\n"


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    """A user's config folder: train/tiny.yaml extends the launcher's mnist."""
    path = tmp_path / "my conf"
    (path / "train").mkdir(parents=True)
    (path / "train" / "tiny.yaml").write_text(TINY)
    return path


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch) -> Path:
    """An empty working directory: whatever a command writes shows up here."""
    path = tmp_path / "work"
    path.mkdir()
    monkeypatch.chdir(path)
    return path


def _launch(capsys, *args: str) -> tuple[int, str, list[str]]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err.strip().splitlines()


# ---------------------------------------------------------------- --cfg, --info, --version
def test_cfg_job_prints_the_composed_config_and_creates_nothing(capsys, workdir):
    code, out, err = _launch(capsys, "--cfg", "job", "train.epochs=3")
    assert code == 0 and err == []
    cfg = yaml.safe_load(out)
    assert cfg["train"]["epochs"] == 3 and cfg["determinism"]["level"] == "strict"
    assert "hydra" not in cfg
    assert list(workdir.iterdir()) == []  # no run, no store, no .hydra, no log


def test_cfg_flags_in_any_order_with_package_and_resolve(capsys, workdir):
    code, out, _ = _launch(capsys, "train.batch_size=32", "-c", "job", "--package", "train", "--resolve")
    assert code == 0
    assert out.startswith("# @package train\n")
    assert yaml.safe_load(out)["batch_size"] == 32
    code, out, _ = _launch(capsys, "--cfg", "hydra", "hydra/launcher=submitit_local")
    assert code == 0 and "submitit_launcher.LocalLauncher" in out
    assert list(workdir.iterdir()) == []


def test_info_shows_the_search_path_with_the_users_config_dir(capsys, workdir, conf):
    code, out, _ = _launch(capsys, "--info", "searchpath", "-cd", str(conf))
    assert code == 0
    assert "pkg://launcher.configs" in out and f"file://{conf}" in out and "command-line" in out
    code, out, _ = _launch(capsys, "-cd", str(conf), "train=tiny", "--info", "defaults")
    assert code == 0 and "train/tiny" in out and "train/mnist" in out
    assert list(workdir.iterdir()) == []


def test_version_names_the_launcher_and_hydra(capsys):
    code, out, _ = _launch(capsys, "--version")
    assert code == 0 and out.startswith("launch 0.") and "(Hydra 1." in out


@pytest.mark.parametrize(
    "args,message",
    [
        (["--cfg", "jobb"], "argument --cfg/-c: invalid choice: 'jobb'"),
        (["--cfg", "job", "-m"], "Only one of --run, --multirun, --cfg, --info and --shell_completion"),
        (["--resolve"], "The --resolve flag can only be used in conjunction with --cfg"),
        (["-cn", "mine"], "cannot replace launch's primary config; add your config groups with --config-dir"),
        (["--cfg", "job", "list"], "'list' is neither a subcommand nor an override"),
        (["-cd", "/no/such/conf", "train=tiny"], "Additional config directory '/no/such/conf' not found"),
        (["-m", "hydra/sweeper=optuna2"], "Available options in 'hydra/sweeper': basic optuna"),
    ],
)
def test_bad_flags_are_one_line_exit_2_and_nothing_is_written(capsys, workdir, args, message):
    code, _, err = _launch(capsys, *args)
    assert code == 2 and message in err[0] and len(err) <= 2
    assert list(workdir.iterdir()) == []


# ---------------------------------------------------------------- --config-dir
def test_config_dir_adds_the_users_options_and_names_the_files_read(conf):
    cfg = composition.compose(["train=tiny"], config_dir=str(conf))
    assert cfg.train.name == "mnist" and cfg.train.epochs == 1 and cfg.train.max_samples == 300
    assert cfg.config_dir.path == str(conf) and list(cfg.config_dir.files) == ["train/tiny.yaml"]
    assert "config_dir" not in composition.compose([], config_dir=str(conf))  # none of its files read


def test_nested_user_files_are_named_and_launcher_options_are_never_replaced(conf):
    (conf / "train" / "base.yaml").write_text("defaults:\n  - mnist\n  - _self_\n\nbatch_size: 10\n")
    (conf / "train" / "tiny.yaml").write_text("defaults:\n  - base\n  - _self_\n\nepochs: 1\n")
    (conf / "train" / "mnist.yaml").write_text("name: hijacked\n")  # the launcher's mnist wins, as in Hydra
    cfg = composition.compose(["train=tiny"], config_dir=str(conf))
    assert cfg.train.name == "mnist" and cfg.train.batch_size == 10
    assert list(cfg.config_dir.files) == ["train/base.yaml", "train/tiny.yaml"]


def test_a_misspelled_user_option_lists_it_with_the_launchers(conf):
    with pytest.raises(ConfigError) as info:
        composition.compose(["train=tinyy"], config_dir=str(conf))
    assert str(info.value) == (
        "Could not find 'train/tinyy'. Available options in 'train': "
        "custom mnist notebook script tiny (did you mean train=tiny?)"
    )


def test_the_config_dir_is_not_in_the_config_hash(conf, tmp_path):
    other = tmp_path / "elsewhere"
    shutil.copytree(conf, other)
    a = config.resolve(composition.compose(["train=tiny"], config_dir=str(conf)))
    b = config.resolve(composition.compose(["train=tiny"], config_dir=str(other)))
    assert a.config_dir.path != b.config_dir.path
    assert config.config_hash(a) == config.config_hash(b)
    changed = config.resolve(composition.compose(["train=tiny", "train.epochs=2"], config_dir=str(conf)))
    assert config.config_hash(changed) != config.config_hash(a)


def test_a_users_option_may_add_its_own_keys_and_its_values_are_checked_by_the_schemas(conf):
    """The schemas check, they are not the options' base: a key of the user's own passes, a value of a
    launcher key is held to its type (launcher.run.schema)."""
    (conf / "train" / "mine.yaml").write_text("defaults:\n  - custom\n  - _self_\n\nentrypoint: m:f\nhidden: 128\n")
    cfg = composition.compose(["train=mine"], config_dir=str(conf))
    config.validate(cfg)
    assert list(cfg.train)[-1] == "hidden" and cfg.train.hidden == 128
    (conf / "train" / "mine.yaml").write_text("defaults:\n  - custom\n  - _self_\n\nentrypoint: m:f\nobserve: maybe\n")
    with pytest.raises(ConfigError) as info:
        composition.compose(["train=mine"], config_dir=str(conf))
    assert str(info.value) == "train.observe: Value 'maybe' is not a valid bool (type str)"


def test_a_users_option_may_put_a_schema_from_the_config_store_under_its_values(conf):
    """Hydra's own way: ``/schema/train/custom`` at the base of the option; Hydra checks each override."""
    (conf / "train" / "typed.yaml").write_text(
        "defaults:\n  - /schema/train/custom@_here_\n  - custom\n  - _self_\n\nentrypoint: m:f\n"
    )
    config.validate(composition.compose(["train=typed"], config_dir=str(conf)))
    with pytest.raises(ConfigError, match=r"^Error merging override train.observe=maybe .*not a valid bool"):
        composition.compose(["train=typed", "train.observe=maybe"], config_dir=str(conf))


def test_fingerprint_hashes_the_users_config_files_as_they_are_now(conf):
    cfg = config.resolve(composition.compose(["train=tiny"], config_dir=str(conf)))
    digest = hashlib.sha256(TINY.encode()).hexdigest()
    assert fingerprint.config_files(cfg.get("config_dir")) == {"train/tiny.yaml": digest}
    (conf / "train" / "tiny.yaml").write_text(TINY + "# edited\n")
    assert fingerprint.config_files(cfg.get("config_dir"))["train/tiny.yaml"] != digest
    (conf / "train" / "tiny.yaml").unlink()
    assert fingerprint.config_files(cfg.get("config_dir")) == {"train/tiny.yaml": "missing"}
    assert fingerprint.config_files(None) == {}


# ---------------------------------------------------------------- --shell-completion
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completion_completes_groups_options_keys_and_the_users_options(tmp_path):
    conf = tmp_path / "conf"
    (conf / "train").mkdir(parents=True)
    (conf / "train" / "tiny.yaml").write_text(TINY)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "launch").write_text(f'#!/bin/sh\nPYTHONPATH="{REPO}" exec "{sys.executable}" -m launcher "$@"\n')
    (bindir / "launch").chmod(0o755)
    script = textwrap.dedent(f"""\
        eval "$(launch -sc install=bash)"
        complete_line() {{
            COMP_LINE="$1"; COMP_POINT=${{#1}}; COMP_CWORD=$2; hydra_bash_completion; echo "${{COMPREPLY[*]}}"
        }}
        complete_line "launch determinism=s" 1
        complete_line "launch train.ep" 1
        complete_line "launch -cd {conf} train=" 3
    """)
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "determinism=seeded determinism=strict",
        "train.epochs=",
        "train=custom train=mnist train=notebook train=script train=tiny",
    ]


def test_completion_reads_the_config_dir_of_the_line_being_completed(conf):
    from launcher.cli import hydraflags

    assert hydraflags.completed_config_dir(f"launch -cd {conf} train=") is None  # a space: not one word
    assert hydraflags.completed_config_dir(f"launch --config-dir {conf.parent} train=") == str(conf.parent)
    assert hydraflags.completed_config_dir("launch -cd /no/such train=") is None


# ---------------------------------------------------------------- optimizing sweepers: the plan
def _prepare(store: Path, *overrides: str, config_dir: str | None = None):
    return sweep.prepare([f"store.root={store}", *overrides], gpus=[], cores=CORES2, config_dir=config_dir)


OPTUNA = ("hydra/sweeper=optuna", "hydra.sweeper.n_trials=3", "train.learning_rate=interval(0.0001,0.01)")


def test_an_optuna_sweep_is_seeded_from_the_sweeps_seed(store):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    plan = _prepare(store, *OPTUNA, "+seed=7")
    assert plan.jobs == [] and plan.swept == ["train.learning_rate"]
    s = plan.search
    assert (s.sweeper, s.sampler, s.seed, s.trials, s.batch) == ("optuna", "TPESampler", 7, 3, 2)
    assert s.reproducible and s.objective == "val_loss" and s.direction == "minimize"
    argv = sweep.hydra_argv(plan, [*OPTUNA, "+seed=7"], store / "sweeps" / "x")
    assert "hydra.sweeper.sampler.seed=7" in argv and "hydra.launcher.n_jobs=2" in argv
    meta = sweep.sweep_meta(plan, list(OPTUNA))
    assert meta["search"]["seed"] == 7 and meta["search"]["reproducible"] is True


def test_the_level_seed_is_the_sweeps_seed_and_a_users_sampler_seed_is_kept(store):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    assert _prepare(store, *OPTUNA).search.seed == 0  # strict's seed
    plan = _prepare(store, *OPTUNA, "hydra.sweeper.sampler.seed=123")
    assert plan.search.seed == 123 and plan.search.seed_override is None


@pytest.mark.parametrize(
    "extra,note",
    [
        (["hydra/sweeper/sampler=grid", "train.learning_rate=0.001,0.01"], "takes no seed"),
        (["hydra.sweeper.storage=sqlite:///study.db"], "continues the stored study"),
        (["determinism=off"], "determinism=off"),
    ],
)
def test_a_search_that_cannot_repeat_says_so(store, extra, note, capsys):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    plan = _prepare(store, *OPTUNA[:2], *(extra if "grid" in extra[0] else [OPTUNA[2], *extra]))
    assert not plan.search.reproducible and note in plan.search.note


@pytest.mark.parametrize(
    "overrides,message",
    [
        (
            ["train.learning_rate=interval(-1,0.01)"],
            r"the search space at \(train.learning_rate=-1.0\): train.learning_rate must be a positive number",
        ),
        (
            ["train.learning_rate=interval(0.001,0.01)", "train.batch_size=choice(32,0)"],
            r"\(train.learning_rate=0.001 train.batch_size=0\): train.batch_size must be a positive integer",
        ),
        (
            ["train.learning_rate=interval(0.001,0.01)", "sweep.objective=val_los"],
            "sweep.objective='val_los' is not a metric of train=mnist",
        ),
    ],
)
def test_a_bad_search_space_fails_before_any_trial(store, overrides, message):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    with pytest.raises(ConfigError, match=message):
        _prepare(store, "hydra/sweeper=optuna", *overrides)
    assert list(store.iterdir()) == []


def test_search_space_from_the_sweepers_params_is_checked_too(store, conf):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    (conf / "experiment").mkdir()
    (conf / "experiment" / "search.yaml").write_text(
        textwrap.dedent("""\
        # @package _global_
        defaults:
          - override /hydra/sweeper: optuna
        hydra:
          sweeper:
            n_trials: 2
            params:
              train.epochs: range(0,3)
    """)
    )
    with pytest.raises(ConfigError, match=r"train.epochs=0\): train.epochs must be a positive integer"):
        _prepare(store, "+experiment=search", config_dir=str(conf))
    (conf / "experiment" / "search.yaml").write_text(
        (conf / "experiment" / "search.yaml").read_text().replace("range(0,3)", "range(1,3)")
    )
    plan = _prepare(store, "+experiment=search", config_dir=str(conf))
    assert plan.search.sweeper == "optuna" and plan.swept == ["train.epochs"] and plan.search.trials == 2


def test_search_plan_of_another_sweeper_is_marked_not_reproducible():
    s = search.plan({"n_trials": 5}, "my_plugins.MySweeper", 0, "strict", "val_loss")
    assert s.sweeper == "my_plugins.MySweeper" and not s.reproducible and "cannot seed" in s.note


def test_representatives_stand_for_every_kind_of_sweep():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parse = OverridesParser.create().parse_override
    assert search.representatives(parse("a=interval(0.1,2)")) == ["0.1", "2.0"]
    assert search.representatives(parse("a=int(interval(1,5))")) == ["1", "5"]
    assert search.representatives(parse("a=choice(x,y)")) == ["x", "y"]
    assert search.representatives(parse("a=range(1,3)")) == ["1", "2"]
    assert search.representatives(parse("a=3")) == ["3"]
    space = [parse("a=choice(1,2)"), parse("b=interval(0,1)")]
    assert search.check_jobs(["c=0"], space) == [
        ["c=0", "a=1", "b=0.0"],
        ["c=0", "a=2", "b=0.0"],
        ["c=0", "a=1", "b=0.0"],
        ["c=0", "a=1", "b=1.0"],
    ]


def test_a_trial_reports_its_objective_or_none_when_it_did_not_complete():
    done = {"num": 0, "status": "complete", "final_metrics": {"val_loss": 0.5}}
    assert search.objective_value(done, "val_loss") == 0.5
    assert search.objective_value({**done, "status": "failed"}, "val_loss") is None
    assert search.objective_value(done, "accuracy") is None
    assert search.objective_value({**done, "final_metrics": {"val_loss": float("nan")}}, "val_loss") is None
    records = [done, {**done, "num": 1, "final_metrics": {"val_loss": 0.25}}, {**done, "num": 2, "status": "failed"}]
    assert search.best(records, "val_loss", "minimize") == {"num": 1, "objective": "val_loss", "value": 0.25}
    assert search.best(records, "val_loss", "maximize")["num"] == 0


def test_the_summary_shows_each_trials_values_the_best_and_if_it_repeats():
    rec = sweep.pending_record(0, ["train.learning_rate=0.005533253688880516", "train=mnist"], 0)
    rec.update(status="complete", final_metrics={"val_loss": 2.0}, weights_sha256="a" * 64)
    summary = {
        **sweep_report.summarize([rec]),
        "sweep_dir": "/s",
        "swept": ["train.learning_rate"],
        "search": {"reproducible": False, "note": "why not", "best": {"num": 0, "objective": "val_loss", "value": 2.0}},
    }
    lines = sweep_report.render(summary).splitlines()
    assert lines[0].split() == ["job", "seed", "train.learning_rate", "status", "val_loss", "weights_sha256"]
    assert lines[1].split() == ["000", "0", "0.005533253688880516", "complete", "2.0000", "a" * 16]
    assert lines[-2:] == ["best: job 000 (val_loss=2.0000)", "NOT REPRODUCIBLE: why not"]


def test_a_missing_sweeper_plugin_names_the_extra_that_installs_it(tmp_path):
    hide = (
        "import sys\n"
        "for name in ('', '.optuna_sweeper', '.config'):\n"
        "    sys.modules['hydra_plugins.hydra_optuna_sweeper' + name] = None  # not installed\n"
        "from launcher.cli.main import main\n"
        "sys.exit(main(['-m', 'hydra/sweeper=optuna', 'train.learning_rate=interval(0.001,0.01)']))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", hide], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "launch: error: Could not find 'hydra/sweeper/optuna'. Available options in 'hydra/sweeper': basic "
        "(install the plugin: pip install 'tf-repro-launcher[optuna]')"
    )
    assert list(tmp_path.iterdir()) == []
