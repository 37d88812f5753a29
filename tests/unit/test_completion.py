"""Shell completion of all of ``launch`` (issue 47): ``launch completion bash|zsh|fish`` prints a script
that asks ``launch completion --query`` at each Tab, answered from the subcommands' own parsers and,
for overrides, from Hydra's completion; Hydra's own ``launch -sc install=bash`` still works.

The bash test drives the script's function as bash calls it (COMP_WORDS, COMP_CWORD); fish's
``complete -C`` asks fish's completion as a Tab would, where fish is installed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.cli import completion
from launcher.cli import main as cli

REPO = Path(__file__).resolve().parents[2]
# `launch` as the scripts call it: this tree's launcher, run by this Python
LAUNCH = f'launch() {{ PYTHONPATH="{REPO}" "{sys.executable}" -m launcher "$@"; }}'


def _bash(tmp_path: Path, lines: list[list[str]]) -> list[list[str]]:
    """COMPREPLY of the bash script's completion function for each line (its words; the last is the one
    being completed), all in one bash that sourced ``launch completion bash``."""
    script = tmp_path / "launch.bash"
    script.write_text(subprocess.run([*_launch(), "completion", "bash"], capture_output=True, text=True).stdout)
    calls = []
    for words in lines:
        quoted = " ".join(f"'{w}'" for w in words)
        calls.append(
            f"COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; COMP_LINE='{' '.join(words)}'; "
            "COMP_POINT=${#COMP_LINE}; COMPREPLY=(); _launch_completion; "
            "printf '%s\\n' \"${COMPREPLY[@]}\"; echo '--'"
        )
    program = "\n".join([LAUNCH, f"source '{script}'", *calls])
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    replies = done.stdout.split("--\n")[:-1]
    return [[c for c in reply.splitlines() if c] for reply in replies]


def _launch() -> list[str]:
    return [sys.executable, "-m", "launcher"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash here")
def test_bash_completes_subcommands_their_options_and_hydras_overrides(tmp_path):
    (tmp_path / "runs-here").mkdir()
    compare, image, lock, options, overrides, path, old = _bash(
        tmp_path,
        [
            ["launch", "com"],
            ["launch", "image", ""],
            ["launch", "image", "lock", "image=tf"],
            ["launch", "compare", "--"],
            ["launch", "train.ep"],
            ["launch", "verify", "runs-h"],
            ["launch", "lo"],
        ],
    )
    assert "compare" in compare and "completion" in compare and "train.ep" not in compare
    assert image == ["build", "list", "prune", "bootstrap-base", "lock"]
    assert lock == ["image=tf-cpu", "image=tf-gpu"]  # Hydra's options of the image group
    assert "--allow-mismatch" in options and "--tolerance" in options and "--config-dir" in options
    assert "--force" not in options  # an old spelling works, but is never offered
    assert overrides == ["train.epochs="]
    assert path == ["runs-here"]  # RUN|FILE: a path
    assert old == []  # lock is image lock now


def test_each_shell_gets_a_script_that_asks_launch_at_each_tab(capsys):
    for shell in completion.SHELLS:
        assert cli.main(["completion", shell]) == 0
        script = capsys.readouterr().out
        assert f"completion --query {shell} " in script and "launch" in script
    assert cli.main(["completion", "tcsh"]) == 2
    assert "invalid choice: 'tcsh'" in capsys.readouterr().err


def test_hydras_own_completion_of_overrides_still_installs(capsys):
    assert cli.main(["-sc", "install=bash"]) == 0
    assert "hydra_bash_completion" in capsys.readouterr().out


@pytest.mark.parametrize(
    "words, wanted, files",
    [
        (["launch", "sw"], ["sweep", "sweep."], False),  # a subcommand, and Hydra's sweep group
        (["launch", "sweep", ""], ["replay", "plot"], False),  # never the old word, verify
        (["launch", "sweep", "replay", ""], [], True),  # SWEEP_DIR
        (["launch", "runs", "--status", "ab"], ["abandoned"], False),
        (["launch", "runs", "--store", ""], [], True),
        (["launch", "runs", "store.ro"], ["store.root="], False),  # a store word, composed by Hydra
        (["launch", "pack", "--compression", ""], ["zstd", "gzip", "none"], False),
        (["launch", "completion", ""], ["bash", "zsh", "fish"], False),
        (["launch", "--cfg", ""], ["job", "hydra", "all"], False),
        (["launch", "-sc", "install="], ["install=bash", "install=zsh", "install=fish"], False),
        (["launch", "-q", "gc", "--dr"], ["--dry-run"], False),  # -q/-v: launch's own, anywhere
        (["launch", "audit", "determinism=st"], ["determinism=strict"], False),
    ],
)
def test_the_candidates_come_from_the_parsers_and_from_hydra(words, wanted, files):
    reply = completion.candidates(words, len(words) - 1)
    assert [c for c, _ in reply.candidates] == wanted and reply.files == files


def test_a_refused_hydra_flag_is_never_offered():
    offered = [c for c, _ in completion.candidates(["launch", "--con"], 1).candidates]
    assert offered == ["--config-dir"]  # not --config-path, --config-name


def test_the_query_answers_in_lines_and_never_fails_aloud(capsys):
    assert cli.main(["completion", "--query", "fish", "1", "--", "launch", "gc"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "-" and lines[1].startswith("gc\tRemove the objects of a store")
    assert cli.main(["completion", "--query", "bash", "nonsense"]) == 0
    assert capsys.readouterr() == ("-\n", "")


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed here")
def test_fish_completes_subcommands_and_overrides(tmp_path):
    script = tmp_path / "launch.fish"
    script.write_text(subprocess.run([*_launch(), "completion", "fish"], capture_output=True, text=True).stdout)
    fish_launch = f'function launch; env PYTHONPATH="{REPO}" "{sys.executable}" -m launcher $argv; end'
    program = f"{fish_launch}; source '{script}'; complete -C 'launch com'; echo SPLIT; complete -C 'launch train.ep'"
    done = subprocess.run(["fish", "-c", program], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    subcommands, overrides = done.stdout.split("SPLIT\n")
    assert "compare\tCompare two sealed runs bit for bit (or within a tolerance)" in subcommands.splitlines()
    assert overrides.split() == ["train.epochs="]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed here")
def test_the_zsh_script_is_valid_zsh(tmp_path):
    script = tmp_path / "launch.zsh"
    script.write_text(subprocess.run([*_launch(), "completion", "zsh"], capture_output=True, text=True).stdout)
    done = subprocess.run(["zsh", "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
