"""Errors that teach (issue 13): the exact cases, as `launch` prints them, exit 2, nothing written;
and an unexpected error (a bug): exit 70, a short traceback, the whole one with LAUNCH_FULL_ERROR."""

import json
from pathlib import Path

import numpy as np
import pytest

from launcher.cli import main as cli
from launcher.errors import ExitCode
from launcher.run import pipeline


def _launch(capsys, *args: str) -> tuple[int, list[str]]:
    code = cli.main(list(args))
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize(
    "args,expected",
    [
        (
            ["train=mnsit"],
            "launch: error: Could not find 'train/mnsit'. "
            "Available options in 'train': custom mnist notebook script (did you mean train=mnist?)",
        ),
        (
            ["determinism=maybe"],
            "launch: error: Could not find 'determinism/maybe'. "
            "Available options in 'determinism': off portable seeded strict",
        ),
        (["seed=7"], "launch: error: Could not override 'seed': no such key in the config; to add it, use +seed=7"),
        (
            ["train.epoch=3"],
            "launch: error: Could not override 'train.epoch': no such key in the config; "
            "did you mean train.epochs? (to add a new key, use +train.epoch=3)",
        ),
        (
            ["train=script", "train.scrip=x.py"],
            "launch: error: Could not override 'train.scrip': no such key in the "
            "config; did you mean train.script? (to add a new key, use "
            "+train.scrip=x.py)",
        ),
        (
            ["train.nope=1"],
            "launch: error: Could not override 'train.nope': no such key in the config; to add it, use +train.nope=1",
        ),
        (
            ["train.epochs=a=b"],
            "launch: error: Error parsing override 'train.epochs=a=b': mismatched input '=' "
            "expecting <EOF> (quote values with quotes or special characters: key='it\\'s')",
        ),
    ],
)
def test_config_errors_keep_what_hydra_knows_and_add_the_fix(capsys, tmp_path, args, expected):
    code, err = _launch(capsys, f"store.root={tmp_path}", *args)
    assert code == 2
    assert err == [expected]
    assert list(tmp_path.iterdir()) == []


def test_full_hydra_message_with_launch_full_error(capsys, monkeypatch):
    monkeypatch.setenv("LAUNCH_FULL_ERROR", "1")
    code, err = _launch(capsys, "train=mnsit")
    assert code == 2 and err[0].startswith("launch: error: Could not find 'train/mnsit'")
    assert "Config search path:" in err  # Hydra's own message follows, whole


@pytest.mark.parametrize(
    "args,first",
    [
        (["list"], "launch: error: 'list' is neither a subcommand nor an override (KEY=VALUE)"),
        (
            ["run"],
            "launch: error: 'run' is neither a subcommand nor an override (KEY=VALUE); did you mean launch runs?",
        ),
        (["foo"], "launch: error: 'foo' is neither a subcommand nor an override (KEY=VALUE)"),
        (["train.epochs=3", "foo"], "launch: error: 'foo' is neither a subcommand nor an override (KEY=VALUE)"),
        (["-m", "+seed=1,2", "foo"], "launch: error: 'foo' is neither a subcommand nor an override (KEY=VALUE)"),
    ],
)
def test_a_bare_word_lists_the_subcommands(capsys, args, first):
    code, err = _launch(capsys, *args)
    assert code == 2
    assert err == [first, f"subcommands: {' '.join(cli.COMMANDS)}; see launch --help"]
    assert "Error parsing override" not in "\n".join(err)


def test_a_missing_argument_shows_the_usage_line_not_argparse_field_names(capsys):
    code, err = _launch(capsys, "compare", "runs/a")
    assert code == 2
    assert err[0] == "launch: error: launch compare: the following arguments are required: RUN_B"
    assert err[1].startswith("usage: launch compare [-h] [--allow-mismatch]") and err[1].endswith(" RUN_A RUN_B")
    assert len(err) == 2
    for args in (["replay"], ["resume"], ["sweep", "replay"]):
        _, err = _launch(capsys, *args)
        assert len(err) == 2 and err[1].startswith(f"usage: launch {args[0]}"), err
        assert err[0].endswith(("RUN", "RUN|FILE", "SWEEP_DIR")), err  # the metavar, never the argparse field name


@pytest.mark.parametrize("data", ["/etc/passwd", "wrong.npz", "empty-dir"])
def test_bad_data_is_one_line_exit_2_and_no_run(capsys, tmp_path, data):
    np.savez(tmp_path / "wrong.npz", a=np.zeros(3))
    (tmp_path / "empty-dir").mkdir()
    store = tmp_path / "store"
    code, err = _launch(capsys, f"store.root={store}", f"train.data={tmp_path / data if data[0] != '/' else data}")
    assert code == 2 and len(err) == 1 and err[0].startswith("launch: error: ")
    assert "pickle" not in err[0] and "Traceback" not in err[0]
    assert not store.exists()


def test_a_run_without_metrics_ends_with_single_spaces():
    outcome = pipeline.Outcome(Path("runs/x"), "complete", 0, result={"final_metrics": {}, "weights_sha256": None})
    assert pipeline.summary_line(outcome) == "[launch] run runs/x complete; seed=0 weights_sha256=(no model recorded)"
    outcome.result["final_metrics"] = {"loss": 0.5}
    assert pipeline.summary_line(outcome).endswith("seed=0 loss=0.5000 weights_sha256=(no model recorded)")


def test_no_docker_daemon_is_one_line_exit_8_and_no_run(capsys, monkeypatch, tmp_path):
    """What a machine without Docker shows (moved from tests/integration/test_docker.py, whose
    module skips every test on exactly such a machine): a fault of the machine, exit 8, not bad input."""
    url = f"unix://{tmp_path}/none.sock"
    monkeypatch.setenv("DOCKER_HOST", url)
    store = tmp_path / "store"
    code, err = _launch(
        capsys, "determinism=strict", "train=mnist", "runtime=docker", "image.base=local", f"store.root={store}"
    )
    assert code == ExitCode.ENVIRONMENT
    assert err == [f"launch: error: no Docker daemon answers at {url}: start one (dockerd) or use runtime=local"]
    for run in (p for p in store.iterdir() if p.is_dir()):  # found out after the run directory: marked failed
        assert json.loads((run / "status.json").read_text())["state"] == "failed"


def _crashing(args: list[str]) -> int:
    def one_level(depth: int) -> int:
        if depth == 0:
            raise RuntimeError("boom")
        return one_level(depth - 1)

    return one_level(3)


def test_an_unexpected_error_is_a_short_traceback_and_exit_70(capsys, monkeypatch):
    monkeypatch.delenv("LAUNCH_FULL_ERROR", raising=False)
    monkeypatch.setattr(cli, "command", lambda name: _crashing)
    code = cli.main(["runs"])
    err = capsys.readouterr().err
    assert code == 70
    assert err.strip().splitlines()[-2:] == [
        "launch: internal error: RuntimeError: boom",
        "launch: set LAUNCH_FULL_ERROR=1 for the full traceback",
    ]
    assert "Traceback (most recent call last)" not in err
    assert err.count('  File "') == 3 and "in one_level" in err  # the innermost three frames, no more


def test_launch_full_error_prints_the_whole_traceback(capsys, monkeypatch):
    monkeypatch.setenv("LAUNCH_FULL_ERROR", "1")
    monkeypatch.setattr(cli, "command", lambda name: _crashing)
    code = cli.main(["runs"])
    err = capsys.readouterr().err
    assert code == 70
    assert err.startswith("Traceback (most recent call last):") and err.strip().endswith("RuntimeError: boom")
    assert err.count('  File "') == 6  # _main, _crashing and its four levels: every frame
    assert "LAUNCH_FULL_ERROR" not in err


@pytest.mark.parametrize(
    "args,group",
    [(["train.script=x.py", "train.args=[a]"], "train=script"), (["train.entrypoint=pkg.mod:main"], "train=custom")],
)
def test_a_key_of_another_group_option_is_refused_with_the_corrected_command(capsys, tmp_path, args, group):
    """``train.script=x.py`` without ``train=script`` once trained mnist with a +train.script hint."""
    code, err = _launch(capsys, f"store.root={tmp_path}", *args)
    assert code == 2 and len(err) == 1 and list(tmp_path.iterdir()) == []
    key, _, value = args[0].partition("=")
    assert f"it belongs to {group}: launch {group} store.root={tmp_path}" in err[0]
    assert err[0].endswith(f"{key}={value}") and "use +" not in err[0]


@pytest.mark.parametrize("old, new", [("--rebuild", "--reindex")])
def test_an_old_spelling_still_works_for_a_release_and_names_its_new_one(capsys, tmp_path, old, new):
    (tmp_path / "runs").mkdir()
    assert cli.main(["runs", "--store", str(tmp_path / "runs"), old]) == 0
    err = capsys.readouterr().err
    assert f"[launch] note: {old} is now {new} (the old spelling goes in the next release)" in err
    assert "recreated" in err or "rebuilt" in err or "index" in err  # it did reindex


def test_one_word_one_meaning_in_the_usage():
    lines = {name: " ".join(cli.parser(name).format_usage().split()) for name in cli.COMMANDS}
    assert "[--allow-mismatch]" in lines["compare"] and "[--allow-mismatch]" in lines["replay"]
    assert "[--reindex]" in lines["runs"] and "--rebuild" not in lines["runs"]
    assert "--force" not in lines["compare"] + lines["replay"] + lines["resume"]
