"""``launch --help`` is made from the subcommands' own parsers (issue 47): each subcommand's synopsis
there is the usage line its own ``--help`` prints, with its description; every positional argument
says what it is; Hydra's flags stay documented; the old spellings work but are not in the help; and
the help imports neither Hydra nor TensorFlow."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.cli import main as cli

REPO = Path(__file__).resolve().parents[2]


def _help(capsys, *argv: str) -> str:
    """What ``launch ARGV`` prints on stdout (a subcommand's --help ends in SystemExit(0), as argparse's)."""
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:
        code = exc.code
    assert code in (0, None)
    return capsys.readouterr().out


def _usage(text: str) -> list[str]:
    """The usage lines at the top of an argparse help (up to the first blank line)."""
    return text.split("\n\n")[0].splitlines()


def _parsers(p: argparse.ArgumentParser, name: str):
    """(name, parser) of ``p`` and of each of its actions' parsers (``image build``, ...)."""
    yield name, p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for word, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {word}")


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_the_top_level_help_lists_each_subcommand_with_the_usage_its_own_help_prints(capsys, name):
    top = _help(capsys, "--help").splitlines()
    own = _usage(_help(capsys, name, "--help"))
    assert own[0].startswith(f"usage: launch {name} ")
    # the same lines, wrapped alike, less "usage: " (continuation lines keep their alignment)
    shown = ["  " + own[0][len("usage: ") :], *(line[len("usage: ") - 2 :] for line in own[1:])]
    at = top.index(shown[0])
    assert top[at : at + len(shown)] == shown
    description = " ".join(cli.parser(name).description.split())
    below = []
    for line in top[at + len(shown) :]:
        if not line.startswith(" " * 6):
            break
        below.append(line.strip())
    assert " ".join(below) == description


def test_replays_synopsis_is_the_same_in_both_helps(capsys):
    top = " ".join(_help(capsys, "--help").split())
    own = " ".join(" ".join(_usage(_help(capsys, "replay", "--help"))).split())
    assert own.startswith("usage: launch replay [-h] [--allow-mismatch]") and own.endswith(" RUN|FILE")
    assert own[len("usage: ") :] in top


def test_help_h_and_the_word_help_print_the_same(capsys):
    assert _help(capsys, "--help") == _help(capsys, "-h") == _help(capsys, "help")


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_every_positional_argument_says_what_it_is(name):
    for where, p in _parsers(cli.parser(name), name):
        for action in p._actions:
            if action.option_strings:
                continue
            if isinstance(action, argparse._SubParsersAction):
                assert all(a.help for a in action._choices_actions), where
            else:
                assert action.help, f"launch {where}: {action.metavar or action.dest} has no help"


def test_hydras_flags_stay_documented_at_the_top(capsys):
    top = _help(capsys, "--help")
    for flag in ("--cfg job|hydra|all", "--resolve", "--package PKG", "--info", "-cd DIR", "-m [OVERRIDES...]"):
        assert flag in top, flag
    assert "-sc install=bash|zsh|fish" in top and "launch completion SHELL" in top
    assert "--hydra-help" in top and "--version" in top


def test_old_spellings_and_developer_notes_are_not_in_the_help(capsys):
    top = _help(capsys, "--help")
    assert "old spelling" not in top and "one more release" not in top
    assert "  launch lock " not in top
    assert "launch image [-h] {build,list,prune,bootstrap-base,lock}" in " ".join(top.split())
    sweep = _help(capsys, "sweep", "--help")
    assert "verify" not in sweep and "{replay,plot}" in sweep
    for argv, old in ((["compare"], "--force"), (["runs"], "--rebuild"), (["image", "build"], "--rebuild")):
        assert old not in _help(capsys, *argv, "--help"), argv


def test_the_store_has_one_name_in_the_help_of_every_command_that_places_one(capsys):
    for name in ("runs", "gc", "unpack", "replay"):
        text = " ".join(_help(capsys, name, "--help").split())
        assert "--store DIR" in text and "the same as store.root=DIR" in text and "$LAUNCH_STORE" in text, name
    for name in ("compare", "pack", "verify", "resume"):  # they read runs where they are: no store to name
        assert "--store" not in _help(capsys, name, "--help"), name


def test_the_top_level_help_imports_neither_hydra_nor_tensorflow():
    code = (
        "import sys; from launcher.cli import main; main.usage(); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'hydra', 'omegaconf', 'tensorflow', 'docker'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.strip() == "[]"
