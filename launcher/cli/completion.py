"""``launch completion bash|zsh|fish``: a shell completion script for all of ``launch``.

The script is small and the same for every release: at each Tab it asks
``launch completion --query SHELL CWORD -- WORD...`` (the index of the word being completed, then
the words of the line, the program first, after ``--``: launch takes its ``-q``/``-v`` anywhere
before one) what may come next, and this module answers from the parsers themselves: the
subcommands of ``main.COMMANDS``, each one's actions, options and their choices from its
``build_parser()``, Hydra's flags from Hydra's own parser, and the overrides (config groups,
options, keys; ``store.*`` words on a subcommand that reads a store) from Hydra's completion, the
one ``launch -sc install=bash`` installs. The answer's first line says whether the shell should
offer file names too (an argument such as RUN or FILE, an option's path); each further line is a
candidate (for fish, with its description after a tab). Nothing of it ever fails aloud: a line
Hydra cannot compose has no override candidates.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from launcher.cli.args import parser
from launcher.errors import ExitCode

SHELLS = ("bash", "zsh", "fish")
QUERY = "--query"  # the script's question: not an option of the parser, never in its help
# Hydra's flags that launch refuses (launcher.cli.hydraflags): never offered.
REFUSED_FLAGS = frozenset({"--config-path", "-cp", "--config-name", "-cn", "--experimental-rerun"})
# What -sc (--shell-completion) takes: Hydra's completion of overrides alone.
HYDRA_COMPLETION = [f"{verb}={shell}" for verb in ("install", "uninstall") for shell in SHELLS]
# A candidate ending so is continued, not ended by a space (train= train. hydra/).
CONTINUED = ("=", ".", "/")

BASH = r"""# launch completion for bash: eval "$(launch completion bash)" in ~/.bashrc. At each Tab, launch
# says what may come next: subcommands and their options from its parsers, overrides from Hydra.
_launch_completion() {
    local IFS=$'\n' cur=${COMP_WORDS[COMP_CWORD]} c
    local -a reply
    reply=($("${COMP_WORDS[0]}" completion --query bash "$COMP_CWORD" -- "${COMP_WORDS[@]}" 2>/dev/null))
    COMPREPLY=("${reply[@]:1}")
    if [[ ${reply[0]} == files ]]; then
        compopt -o filenames 2>/dev/null
        COMPREPLY+=($(compgen -f -- "$cur"))
    fi
    for c in "${COMPREPLY[@]}"; do
        if [[ $c == *[=./] ]]; then
            compopt -o nospace 2>/dev/null
            break
        fi
    done
    return 0
}
COMP_WORDBREAKS=${COMP_WORDBREAKS//=}
complete -o default -F _launch_completion launch
"""

ZSH = r"""# launch completion for zsh: eval "$(launch completion zsh)" in ~/.zshrc. At each Tab, launch
# says what may come next: subcommands and their options from its parsers, overrides from Hydra.
(( $+functions[compdef] )) || { autoload -Uz compinit && compinit }
_launch_completion() {
    local -a reply spaced bare
    local c
    reply=("${(@f)$("${words[1]}" completion --query zsh $((CURRENT - 1)) -- "${words[@]}" 2>/dev/null)}")
    [[ ${reply[1]} == files ]] && _files
    for c in "${(@)reply[2,-1]}"; do
        [[ -z $c ]] && continue
        if [[ $c == *[=./] ]]; then bare+=("$c"); else spaced+=("$c"); fi
    done
    (( ${#bare} )) && compadd -S '' -- "${bare[@]}"
    (( ${#spaced} )) && compadd -- "${spaced[@]}"
    return 0
}
compdef _launch_completion launch
"""

FISH = r"""# launch completion for fish: launch completion fish > ~/.config/fish/completions/launch.fish. At
# each Tab, launch says what may come next: subcommands and options from its parsers, overrides from Hydra.
function __launch_completion
    set -l cur (commandline -ct)
    set -l words (commandline -opc) "$cur"
    set -l reply ($words[1] completion --query fish (math (count $words) - 1) -- $words 2>/dev/null)
    if test "$reply[1]" = files
        __fish_complete_path "$cur"
    end
    set -e reply[1]
    printf '%s\n' $reply
end
complete -c launch -f -a '(__launch_completion)'
"""

SCRIPTS = {"bash": BASH, "zsh": ZSH, "fish": FISH}


@dataclass
class Reply:
    """What may come next: the candidates (with a description each, or ""), and whether file names may."""

    candidates: list[tuple[str, str]] = field(default_factory=list)
    files: bool = False

    def add(self, cur: str, words: Sequence[str] | Sequence[tuple[str, str]]) -> Reply:
        """The words (or (word, description) pairs) that start with ``cur``."""
        for word in words:
            pair = word if isinstance(word, tuple) else (word, "")
            if pair[0].startswith(cur):
                self.candidates.append(pair)
        return self


def build_parser() -> argparse.ArgumentParser:
    """``launch completion``'s parser."""
    p = parser(
        "completion",
        "Print a shell completion script for launch: subcommands, their options, and Hydra's overrides.",
        epilog='bash: eval "$(launch completion bash)" in ~/.bashrc; zsh: the same with zsh, in ~/.zshrc; '
        "fish: launch completion fish > ~/.config/fish/completions/launch.fish (docs/hydra.md)",
    )
    p.add_argument("shell", choices=SHELLS, help="the shell the script is for")
    return p


def main(argv: list[str]) -> int:
    if argv[:1] == [QUERY]:
        return query(argv[1:])
    args = build_parser().parse_args(argv)
    print(SCRIPTS[args.shell], end="")
    return ExitCode.OK


def query(argv: list[str]) -> int:
    """Answer the script: ``SHELL CWORD -- WORD...``; the answer's lines on stdout, always exit 0."""
    try:
        shell, cword, words = argv[0], int(argv[1]), argv[3:] if argv[2:3] == ["--"] else argv[2:]
        reply = candidates(words, cword)
    except Exception:  # noqa: BLE001 - a Tab never prints an error: no candidates instead
        shell, reply = "bash", Reply()
    lines = ["files" if reply.files else "-"]
    for word, description in reply.candidates:
        lines.append(f"{word}\t{description}" if shell == "fish" and description else word)
    print("\n".join(dict.fromkeys(lines)))
    return ExitCode.OK


def candidates(words: Sequence[str], cword: int) -> Reply:
    """What may stand at ``words[cword]`` (``words[0]`` is the program; a word at or past the end is "")."""
    from launcher.cli import main

    words = [*words[:cword], words[cword] if cword < len(words) else ""]
    cur, before = words[cword], main.verbosity(words[1:cword])[0]  # -q/-v: launch's own, anywhere
    if before and before[0] in main.COMMANDS:
        return in_parser(main.parser(before[0]), before[1:], cur)
    return top_level(before, cur)


def top_level(before: list[str], cur: str) -> Reply:
    """``launch [FLAGS] [OVERRIDES]``: Hydra's flags (its own parser), the subcommands first, the overrides."""
    from hydra._internal.utils import get_args_parser

    from launcher.cli import main

    flags = {o: a for a in _visible(get_args_parser()) for o in a.option_strings if o not in REFUSED_FLAGS}
    flags.update(_launch_options())
    prev = before[-1] if before else ""
    if prev in flags and flags[prev].nargs not in (0, "?"):  # --cfg job, -cd DIR, -p PKG
        return Reply(files=prev in ("-cd", "--config-dir")).add(cur, list(flags[prev].choices or []))
    if cur.startswith("-"):
        return Reply().add(cur, [(o, _said(a.help)) for o, a in flags.items()])
    reply = Reply()
    if not before:
        reply.add(cur, [(name, _said(main.parser(name).description)) for name in main.COMMANDS])
    if {"-sc", "--shell-completion"} & set(before):
        return reply.add(cur, HYDRA_COMPLETION)
    if prev in ("-i", "--info"):
        reply.add(cur, list(flags[prev].choices or []))
    return reply.add(cur, overrides(before, cur))


def in_parser(p: argparse.ArgumentParser, rest: list[str], cur: str) -> Reply:
    """A subcommand's words after its name (``rest``): its action's parser when it has actions, an
    option's value, its options, its next positional argument, and the ``store.*`` words of one that
    reads a store (it has ``-cd``)."""
    while rest and (actions := _subparsers(p)) is not None and rest[0] in actions.choices:
        p, rest = actions.choices[rest[0]], rest[1:]
    options = {o: a for a in _visible(p) for o in a.option_strings}
    options.update(_launch_options())
    prev = rest[-1] if rest else ""
    if prev in options and options[prev].nargs != 0:  # an option's value: its choices, else a path
        return Reply(files=options[prev].choices is None).add(cur, list(options[prev].choices or []))
    if cur.startswith("-"):
        return Reply().add(cur, [(o, _said(a.help)) for o, a in options.items()])
    stores = "--config-dir" in options
    given = [w for i, w in enumerate(rest) if _positional(w, rest[i - 1] if i else "", options, stores)]
    reply = Reply()
    if stores and (cur.startswith("store") or "store".startswith(cur)):  # store.KEY=VALUE, store=NAME
        reply.add(cur, [w for w in overrides(_store_context(rest), cur) if w.startswith("store")])
    nxt = _next_positional(p, len(given))
    if nxt is None:
        return reply
    if isinstance(nxt, argparse._SubParsersAction):
        return reply.add(cur, [(a.dest, _said(a.help)) for a in nxt._choices_actions])
    if nxt.choices is not None:
        return reply.add(cur, list(nxt.choices))
    if nxt.dest == "overrides":
        return reply.add(cur, overrides([w for w in rest if _is_override(w)], cur))
    reply.files = True
    return reply


def overrides(context: list[str], cur: str) -> list[str]:
    """Hydra's completion of the override ``cur`` after the words ``context`` (overrides, Hydra's flags,
    ``-cd DIR``): what ``launch -sc query=...`` answers for that line."""
    from launcher.cli import hydraflags

    line = " ".join(["launch", *context, cur])  # ends in a space when cur is "": a new word
    saved = os.environ.get("COMP_LINE")
    os.environ["COMP_LINE"] = line
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            hydraflags.show(hydraflags.parse(["-sc", "query=fish"]))
    except (Exception, SystemExit):  # noqa: BLE001 - a line Hydra cannot compose: no candidates
        return []
    finally:
        if saved is None:
            del os.environ["COMP_LINE"]
        else:
            os.environ["COMP_LINE"] = saved
    return [c for c in out.getvalue().splitlines() if c]


def _launch_options() -> dict[str, argparse.Action]:
    """``-q/--quiet`` and ``-v/--verbose``: launch's own, taken before or after a subcommand's word."""
    from launcher.cli import main

    quiet = argparse.Action(list(main.QUIET), "quiet", nargs=0, help="fewer notes: warnings and errors only")
    verbose = argparse.Action(list(main.VERBOSE), "verbose", nargs=0, help="more notes: debug")
    return {o: a for a in (quiet, verbose) for o in a.option_strings}


def _visible(p: argparse.ArgumentParser) -> list[argparse.Action]:
    """The parser's actions its help shows (an old spelling's is hidden: never offered)."""
    return [a for a in p._actions if a.help != argparse.SUPPRESS]


def _subparsers(p: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    return next((a for a in p._actions if isinstance(a, argparse._SubParsersAction)), None)


def _next_positional(p: argparse.ArgumentParser, given: int) -> argparse.Action | None:
    """The positional argument the next word fills, after ``given`` words; None when none is left."""
    for action in (a for a in p._actions if not a.option_strings):
        if action.nargs in ("*", "+", argparse.REMAINDER):
            return action
        if given == 0:
            return action
        given -= 1
    return None


def _positional(word: str, prev: str, options: dict[str, argparse.Action], stores: bool) -> bool:
    """Does ``word`` fill a positional argument: neither an option, an option's value, nor a store word."""
    if word.startswith("-") or (prev in options and options[prev].nargs != 0):
        return False
    return not (stores and word.startswith(("store.", "store=")) and "=" in word)


def _is_override(word: str) -> bool:
    return not word.startswith("-") and ("=" in word or word.startswith(("+", "~")))


def _store_context(rest: list[str]) -> list[str]:
    """The words Hydra completes a store word after: the store words before it, and ``-cd DIR``."""
    context = [w for w in rest if w.startswith(("store.", "store=")) and "=" in w]
    for flag, value in zip(rest, rest[1:], strict=False):
        if flag in ("-cd", "--config-dir"):
            context += [flag, value]
    return context


def _said(text: object) -> str:
    """A description for a candidate: the help's first clause, short (Hydra's help is an object)."""
    first = " ".join(str(text or "").split()).split("; ")[0].rstrip(".")
    return first if len(first) <= 60 else first[:57] + "..."
