"""Every subcommand that reads a store takes its store settings as a run does (issue 48): composed by
Hydra from launch.yaml, a ``-cd DIR`` (its ``store/default.yaml``, or ``store=NAME``'s file) and the
``store.KEY=VALUE`` words (``composition.compose_store``), each value checked by its type.

Each subcommand is shown honouring a setting that only the ``-cd`` folder gives: ``store.require_signed``
(with ``store.allowed_signers``) refuses the unsigned runs of compare, replay, resume, pack and verify;
``store.root`` is where unpack imports, and where gc and runs look. No training: the runs are built by
hand (``test_archive.sealed_run``), and every refusal comes before anything would run."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.cli import main as cli
from launcher.errors import SignatureError
from launcher.run import composition, config
from launcher.share import pack as packing
from tests.unit.test_archive import sealed_run

REFUSED = SignatureError.exit_code  # 7: ExitCode.SIGNATURE
SAID = "store.require_signed=true"  # how a refusal under it names it


def _conf(root: Path, name: str, text: str, option: str = "default") -> Path:
    """A user's config folder ``root/name`` whose store group has ``option`` holding ``text``."""
    (root / name / "store").mkdir(parents=True, exist_ok=True)
    (root / name / "store" / f"{option}.yaml").write_text(text)
    return root / name


@pytest.fixture
def world(tmp_path: Path, monkeypatch) -> dict:
    """An unsigned sealed run; a folder whose store settings trust nobody's unsigned runs
    (``strict``); one whose store is elsewhere (``placed``); an empty working directory."""
    allowed = tmp_path / "allowed_signers"
    allowed.write_text("")  # nobody: an unsigned run is refused before a signature is looked at
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return {
        "run": sealed_run(tmp_path / "src" / "runs"),
        "strict": _conf(tmp_path, "strict", f"allowed_signers: {allowed}\nrequire_signed: true\n"),
        "placed": _conf(tmp_path, "placed", f"root: {tmp_path / 'shared'}\n"),
        "shared": tmp_path / "shared",
        "tmp": tmp_path,
    }


def _launch(capsys, *args: object) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------- store.require_signed from -cd
@pytest.mark.parametrize(
    "command",
    [
        ["verify", "{run}"],
        ["compare", "{run}", "{run}"],
        ["replay", "{run}"],
        ["pack", "{run}", "-o", "{tmp}/run.launch.tar.gz"],
        ["resume", "{run}"],
    ],
    ids=lambda c: c[0],
)
def test_require_signed_in_a_config_folder_refuses_an_unsigned_run(world, capsys, command):
    words = [w.format(run=world["run"], tmp=world["tmp"]) for w in command]
    code, _, err = _launch(capsys, *words, "-cd", world["strict"])
    assert code == REFUSED and SAID in err and "\n" not in err.strip()
    code, _, err = _launch(capsys, *words, "--config-dir", world["strict"], "store.require_signed=false")
    assert SAID not in err  # the words come after the folder, as a run's overrides do
    if command[0] == "verify":
        assert code == 0
    code, _, err = _launch(capsys, *words)  # without the folder: launch.yaml's settings
    assert SAID not in err


# ---------------------------------------------------------------- store.root from -cd
def test_unpack_imports_into_the_store_root_of_a_config_folder(world, capsys):
    packed = packing.pack(world["run"], world["tmp"] / "run.launch.tar.gz")
    code, out, _ = _launch(capsys, "unpack", packed.path, "-cd", world["placed"])
    assert code == 0 and (world["shared"] / world["run"].name).is_dir() and str(world["shared"]) in out
    other = world["tmp"] / "other"
    code, _, _ = _launch(capsys, "unpack", packed.path, "-cd", world["placed"], "--store", other)
    assert code == 0 and (other / world["run"].name).is_dir()  # --store DIR is store.root, over the folder's
    assert not Path("runs").exists()  # launch.yaml's ./runs was never the store


def test_runs_and_gc_look_in_the_store_root_of_a_config_folder(world, capsys):
    sealed_run(world["shared"], name="20261126-130000-fedcba")
    code, out, _ = _launch(capsys, "runs", "-cd", world["placed"])
    assert code == 0 and "20261126-130000-fedcba" in out and out.strip().endswith("1 run(s)")
    code, out, _ = _launch(capsys, "gc", "--dry-run", "-cd", world["placed"])
    assert code == 0
    for command in (["runs"], ["gc", "--dry-run"]):  # here, launch.yaml's ./runs, which is not there
        code, _, err = _launch(capsys, *command)
        assert code == 2 and "does not exist" in err
    code, out, _ = _launch(capsys, "runs", f"store.root={world['shared']}")  # the word, as for a run
    assert code == 0 and "20261126-130000-fedcba" in out


# ---------------------------------------------------------------- one composition for runs and subcommands
def test_a_run_composes_the_same_store_settings_and_its_key_leaves_the_store_files_out(world):
    cfg = config.resolve(composition.compose([], config_dir=str(world["placed"])))
    assert cfg.store.root == str(world["shared"])
    assert composition.compose_store([], config_dir=str(world["placed"]))["root"] == str(world["shared"])
    # where runs go is not what they compute: the store's files are not among the files hashed into the key
    assert "config_dir" not in cfg
    plain = config.resolve(composition.compose([]))
    assert config.config_hash(cfg) == config.config_hash(plain)


def test_store_name_picks_another_option_of_the_folder_and_a_typo_lists_them(world, capsys):
    _conf(world["tmp"], "placed", f"root: {world['tmp'] / 'lab'}\n", option="lab")
    assert composition.compose_store(["store=lab"], config_dir=str(world["placed"]))["root"] == str(
        world["tmp"] / "lab"
    )
    code, _, err = _launch(capsys, "runs", "-cd", world["placed"], "store=labb")
    assert code == 2 and err.strip() == (
        "launch: error: Could not find 'store/labb'. "
        "Available options in 'store': default lab (did you mean store=lab?)"
    )


@pytest.mark.parametrize(
    "text,message",
    [
        ("require_signed: maybe\n", "store.require_signed: Value 'maybe' is not a valid bool (type str)"),
        ("require_signed: 'yes'\n", "store.require_signed must be true or false, got 'yes'"),
        ("snapshot_max_mb: -1\n", "store.snapshot_max_mb must be a whole number, 0 or more, got -1"),
    ],
)
def test_a_bad_value_in_a_folders_store_settings_is_one_line_exit_2(world, capsys, text, message):
    bad = _conf(world["tmp"], "bad", text)
    code, _, err = _launch(capsys, "verify", world["run"], "-cd", bad)
    assert code == 2 and err.strip() == f"launch: error: {message}"
