"""One way to name the store (issue 47): ``--store DIR`` and ``store.root=DIR`` are one setting on every
command that places a store (runs, gc, unpack, replay of an archive), refused when both are given and
disagree; ``LAUNCH_STORE`` is the default root where neither is given, for runs and subcommands alike
(launch.yaml's ``root: ${oc.env:LAUNCH_STORE,./runs}``), below a ``-cd`` folder's root.

Without ``LAUNCH_STORE`` the config a run stores, and its config hash, are what they were: ``store.root``
is ``./runs`` once resolved (the store is out of the hash in any case). No training: runs are built by
hand (``test_archive.sealed_run``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from launcher.cli import main as cli
from launcher.run import composition, config
from launcher.share import pack as packing
from tests.unit.test_archive import sealed_run


@pytest.fixture
def here(tmp_path: Path, monkeypatch) -> Path:
    """An empty working directory, and no LAUNCH_STORE."""
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.delenv("LAUNCH_STORE", raising=False)
    return tmp_path


def _launch(capsys, *args: object) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def _resolved(overrides=(), config_dir=None):
    cfg = config.resolve(composition.compose(list(overrides), config_dir=config_dir), cpu_count=2)
    cfg.seed = 0
    return cfg


# ---------------------------------------------------------------- the run's config
def test_without_launch_store_a_runs_config_and_its_hash_are_unchanged(here, monkeypatch):
    plain = _resolved()
    assert plain.store.root == "./runs"
    assert "  root: ./runs\n" in OmegaConf.to_yaml(plain)  # what config.yaml holds
    assert composition.compose_hydra([]).sweep.dir == "./runs/sweeps/unnamed"
    monkeypatch.setenv("LAUNCH_STORE", str(here / "elsewhere"))
    placed = _resolved()
    assert placed.store.root == str(here / "elsewhere")
    assert config.config_hash(placed) == config.config_hash(plain)  # where runs go never changes what they compute


def test_launch_store_is_where_runs_go_unless_a_root_is_named(here, monkeypatch):
    monkeypatch.setenv("LAUNCH_STORE", str(here / "env"))
    assert composition.compose_store([])["root"] == str(here / "env")
    assert composition.compose_hydra([]).sweep.dir == f"{here / 'env'}/sweeps/unnamed"  # a sweep's too
    assert composition.compose_store([f"store.root={here / 'word'}"])["root"] == str(here / "word")
    folder = here / "conf"
    (folder / "store").mkdir(parents=True)
    (folder / "store" / "default.yaml").write_text(f"root: {here / 'folder'}\n")
    assert composition.compose_store([], config_dir=str(folder))["root"] == str(here / "folder")


def test_an_empty_launch_store_is_refused_in_one_line(here, monkeypatch, capsys):
    monkeypatch.setenv("LAUNCH_STORE", "")
    code, _, err = _launch(capsys, "runs")
    assert code == 2 and err == "launch: error: store.root must be a directory path, got ''\n"


# ---------------------------------------------------------------- subcommands
@pytest.mark.parametrize("command", [["runs"], ["gc", "--dry-run"]], ids=["runs", "gc"])
def test_store_and_store_root_are_one_setting_and_launch_store_the_default(here, monkeypatch, capsys, command):
    sealed_run(here / "a", name="20261126-130000-aaaaaa")
    sealed_run(here / "b", name="20261126-130000-bbbbbb")
    for how in (["--store", here / "a"], [f"store.root={here / 'a'}"]):
        code, out, _ = _launch(capsys, *command, *how)
        assert code == 0, how
        if command == ["runs"]:
            assert "aaaaaa" in out and "bbbbbb" not in out
    monkeypatch.setenv("LAUNCH_STORE", str(here / "b"))
    code, out, _ = _launch(capsys, *command)
    assert code == 0 and ("bbbbbb" in out or command != ["runs"])
    code, out, _ = _launch(capsys, *command, "--store", here / "a")  # named: over LAUNCH_STORE
    assert code == 0 and ("aaaaaa" in out or command != ["runs"])
    code, _, err = _launch(capsys, *command, "--store", here / "a", f"store.root={here / 'a'}")
    assert code == 0  # the same directory twice
    code, _, err = _launch(capsys, *command, "--store", here / "a", f"store.root={here / 'b'}")
    assert code == 2 and err.startswith(
        f"launch: error: --store {here / 'a'} and store.root={here / 'b'} name the same"
    )


def test_unpack_imports_into_launch_store_unless_a_store_is_named(here, monkeypatch, capsys):
    packed = packing.pack(sealed_run(here / "src"), here / "run.launch.tar.gz")
    monkeypatch.setenv("LAUNCH_STORE", str(here / "env"))
    code, out, _ = _launch(capsys, "unpack", packed.path)
    assert code == 0 and (here / "env" / "20261126-120000-abcdef").is_dir()
    code, out, _ = _launch(capsys, "unpack", packed.path, f"store.root={here / 'word'}")
    assert code == 0 and (here / "word" / "20261126-120000-abcdef").is_dir()
    assert not Path("runs").exists()


def test_replay_of_an_archive_imports_it_where_store_or_launch_store_says(here, monkeypatch, capsys):
    from launcher.errors import ConfigError
    from launcher.share import unpack as unpacking

    placed = []

    def unpack(path, store_root, *args, **kwargs):
        placed.append(str(store_root))
        raise ConfigError("stopped here: the test needs only where it would go")

    monkeypatch.setattr(unpacking, "unpack", unpack)
    archive = here / "run.launch.tar.gz"
    archive.write_bytes(b"")  # named like an archive; never read
    assert _launch(capsys, "replay", archive, "--store", here / "flag")[0] == 2
    assert _launch(capsys, "replay", archive, f"store.root={here / 'word'}")[0] == 2
    monkeypatch.setenv("LAUNCH_STORE", str(here / "env"))
    assert _launch(capsys, "replay", archive)[0] == 2
    assert placed == [str(here / "flag"), str(here / "word"), str(here / "env")]
