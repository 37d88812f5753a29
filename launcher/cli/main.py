"""The ``launch`` command: Hydra overrides for a training run, or a subcommand.

``launch [OVERRIDES...]`` composes the config and runs one job; ``launch -m ...``
hands the composed sweep to Hydra's multirun (``launcher.sweep.multirun``); the
words in ``COMMANDS`` are subcommands, each a module of this package imported only
when it is used. Errors are reported here, once, as one line: the project's errors
by message and exit code, anything unexpected by a short traceback (the whole one
with ``LAUNCH_FULL_ERROR=1``). The ``launch`` logger's handler is set up here too
(``console.setup``): results on stdout, notes on stderr, ``-q``/``-v`` for fewer or more.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import logging
import os
import shutil
import signal
import sys
import textwrap
import threading
import traceback
from collections.abc import Iterator, Sequence

from launcher import console
from launcher.cli import hydraflags, jsonout
from launcher.errors import ExitCode, LauncherError, UsageError

# name -> its module: ``main(argv)`` runs the subcommand, ``build_parser()`` is its argparse parser (its
# --help, its synopsis in launch --help, its shell completion). A static table: no registration by import.
COMMANDS: dict[str, str] = {
    "compare": "launcher.cli.compare",
    "replay": "launcher.cli.replay",
    "resume": "launcher.cli.resume",
    "runs": "launcher.cli.runs",
    "pack": "launcher.cli.pack",
    "unpack": "launcher.cli.unpack",
    "verify": "launcher.cli.verify",
    "gc": "launcher.cli.gc",
    "audit": "launcher.cli.audit",
    "sweep": "launcher.cli.sweeps",
    "image": "launcher.cli.image",
    "completion": "launcher.cli.completion",
}
# An old subcommand -> the words that replace it: it still works one more release, with a note on stderr.
RENAMED: dict[str, tuple[str, ...]] = {"lock": ("image", "lock")}


def command(name: str):
    """The function behind subcommand ``name`` (its module imported now)."""
    return importlib.import_module(COMMANDS[name]).main


def parser(name: str):
    """Subcommand ``name``'s argparse parser, built without running it (its module imported now)."""
    return importlib.import_module(COMMANDS[name]).build_parser()


def renamed_command(args: list[str]) -> int:
    """``launch lock ...``: said on stderr to be ``launch image lock ...`` now, and run as that."""
    from launcher.cli.args import renamed

    new = RENAMED[args[0]]
    renamed(args[0], " ".join(new))
    return command(new[0])([*new[1:], *args[1:]])


def run_single(overrides: list[str], config_dir: str | None = None) -> int:
    from launcher.job import determinism
    from launcher.run import composition, config, pipeline, runtime

    cfg = composition.compose(overrides, config_dir=config_dir)
    config.validate(cfg)
    if str(cfg.runtime.name) == "local":  # a container has the image's TensorFlow
        runtime.require_tensorflow()
    config.check_entrypoint(cfg, os.getcwd())
    note = determinism.idle_note(str(cfg.determinism.level), cfg.determinism.intra_op_threads, os.cpu_count() or 1)
    if note:
        console.log.info("%s", note.removeprefix("[launch] "))  # the job's module words it as the job's notes
    outcome = pipeline.run(cfg)
    print(pipeline.summary_line(outcome) + resume_hint(outcome), flush=True)
    if outcome.status == "interrupted":
        return ExitCode.INTERRUPTED
    return ExitCode.OK if outcome.ok else ExitCode.FAILED


def bare_word(args: Sequence[str]) -> str | None:
    """The first argument that is neither an option nor an override (KEY=VALUE, ~KEY)."""
    for arg in args:
        if not arg.startswith(("-", "~")) and "=" not in arg:
            return arg
    return None


def not_a_command(word: str) -> UsageError:
    """The error for ``launch WORD``: neither a subcommand nor an override; the subcommands."""
    close = difflib.get_close_matches(word, list(COMMANDS), n=1)
    hint = f"; did you mean launch {close[0]}?" if close else ""
    return UsageError(
        f"{word!r} is neither a subcommand nor an override (KEY=VALUE){hint}",
        f"subcommands: {' '.join(COMMANDS)}; see launch --help",
    )


def resume_hint(outcome) -> str:
    """For an interrupted run: ``launch resume RUN`` where resume would accept it, else why it
    cannot be resumed (``launcher.verdict.compare.resume_advice``, as compare says it)."""
    from launcher.verdict.compare import resume_advice

    if outcome.status != "interrupted":
        return ""
    return f"; {resume_advice(outcome.run_dir)}"


# launch's own options, before or after a subcommand's word; not Hydra's (it has no -q, no -v)
QUIET, VERBOSE = ("-q", "--quiet"), ("-v", "--verbose")


def verbosity(args: Sequence[str]) -> tuple[list[str], int]:
    """``args`` less ``-q/--quiet`` (warnings and errors only) and ``-v/--verbose`` (debug: also
    every line pip or Docker printed to its log), wherever they stand before a ``--``; and the
    level of the ``launch`` logger they ask for (``INFO`` without them; the last one wins)."""
    level, rest = logging.INFO, []
    for i, arg in enumerate(args):
        if arg == "--":
            rest += args[i:]
            break
        if arg in QUIET:
            level = logging.WARNING
        elif arg in VERBOSE:
            level = logging.DEBUG
        else:
            rest.append(arg)
    return rest, level


def main(argv: Sequence[str] | None = None) -> int:
    args, level = verbosity(list(sys.argv[1:] if argv is None else argv))
    console.setup(level)  # once, here: results go to stdout by print, notes to stderr through it
    try:
        with _sigterm_as_ctrl_c():
            code = _main(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        return _closed_pipe()


def _closed_pipe() -> int:
    """The reader of our output went away (``launch compare A B | head -3``): a quiet exit,
    as a shell tool's, with 128 + SIGPIPE. What is still buffered goes nowhere, so the
    interpreter's own flush at exit cannot fail a second time."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return ExitCode.BROKEN_PIPE  # 128 + SIGPIPE


@contextlib.contextmanager
def _sigterm_as_ctrl_c() -> Iterator[None]:
    """SIGTERM (Slurm's, Kubernetes', ``kill``), and SIGUSR1/SIGUSR2 (Slurm's ``--signal``
    before a time limit), end a command as Ctrl-C does: runs end ``interrupted``, with exit
    code 130, instead of the process vanishing mid-record."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signums = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
    previous = {s: signal.getsignal(s) for s in signums}
    for signum, handler in previous.items():
        if handler is signal.SIG_DFL:
            signal.signal(signum, signal.default_int_handler)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if handler is signal.SIG_DFL:
                signal.signal(signum, handler)


def _main(argv: Sequence[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and args[0] in COMMANDS:
            return command(args[0])(args[1:])
        if args and args[0] in RENAMED:
            return renamed_command(args)
        if args and args[0] in ("-h", "--help", "help"):
            print(usage())
            return ExitCode.OK
        if "--version" in args:
            return version()
        flags = hydraflags.parse(args)  # Hydra's own parser: --cfg, --info, -cd, -m, ...
        word = bare_word(flags.overrides)
        if word is not None:
            raise not_a_command(word)
        if flags.help:
            print(usage())
            return ExitCode.OK
        if hydraflags.shows(flags):
            return hydraflags.show(flags)
        if flags.multirun:
            from launcher.sweep import multirun

            return multirun.run_multirun(flags.overrides, config_dir=flags.config_dir)
        return run_single(flags.overrides, config_dir=flags.config_dir)
    except LauncherError as exc:
        print(f"launch: error: {exc}", file=sys.stderr)
        if isinstance(exc, UsageError):
            print(exc.hint, file=sys.stderr)
        if os.environ.get("LAUNCH_FULL_ERROR") and exc.__cause__ is not None:
            print(f"{type(exc.__cause__).__name__}: {exc.__cause__}", file=sys.stderr)  # e.g. Hydra's own
        return _ended(args, exc.exit_code, type(exc).__name__, str(exc))
    except KeyboardInterrupt:
        print("launch: interrupted", file=sys.stderr)
        return _ended(args, ExitCode.INTERRUPTED, "interrupted", "interrupted")
    except BrokenPipeError:
        raise  # the reader went away: main() ends quietly
    except Exception as exc:  # an unexpected error: a bug, reported briefly
        if os.environ.get("LAUNCH_FULL_ERROR"):
            traceback.print_exc()
        else:
            frames = traceback.extract_tb(exc.__traceback__)[-3:]
            print("".join(traceback.format_list(frames)).rstrip(), file=sys.stderr)
            print(f"launch: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
            print("launch: set LAUNCH_FULL_ERROR=1 for the full traceback", file=sys.stderr)
        return _ended(args, ExitCode.INTERNAL, "internal", f"{type(exc).__name__}: {exc}")


def _ended(args: list[str], code: int, kind: str, message: str) -> int:
    """The exit code of a command that failed (its line is on stderr already); with ``--json``, its error
    document on stdout too, so a reader of the document always gets one (docs/json.md)."""
    command = jsonout.asked(args)
    if command is not None:
        jsonout.emit(jsonout.error_document(command, code, kind, message))
    return code


def version() -> int:
    from importlib.metadata import version as installed

    from launcher.version import __version__

    print(f"launch {__version__} (Hydra {installed('hydra-core')})")
    return ExitCode.OK


def usage() -> str:
    """``launch --help``: Hydra's flags for a run (documented here: Hydra is not imported for it), then each
    subcommand's synopsis and description from its own parser (``synopsis``), then the config groups."""
    lines = [
        "usage: launch [OVERRIDES...]            run one training job (Hydra overrides)",
        "       launch -m [OVERRIDES...]         sweep, e.g. -m train=mnist '+seed=range(10)'",
        "       launch --cfg job|hydra|all [--resolve] [--package PKG] [OVERRIDES...]   print the config; no run",
        "       launch --info [all|config|defaults|defaults-tree|plugins|searchpath] [OVERRIDES...]",
        "       launch -cd DIR [OVERRIDES...]    add your config groups: DIR/train/tiny.yaml gives train=tiny",
        "       launch -sc install=bash|zsh|fish  Hydra's completion of overrides (launch completion SHELL: all)",
        "       launch --version | --hydra-help",
        "       launch -q|-v ...                 fewer notes (warnings only) | more (debug); results on stdout,",
        "                                        notes ([launch] ...) on stderr",
    ]
    lines += ["", "subcommands (launch COMMAND --help: what each argument and option means):"]
    for name in COMMANDS:
        lines += synopsis(parser(name))
    lines += [
        "",
        "config groups: train=mnist|custom|script|notebook  determinism=off|seeded|strict|portable",
        "  runtime=local|docker  image=tf-cpu|tf-gpu (runtime=docker)  tracking=none|mlflow (docs/tracking.md)",
        "  store=NAME: DIR/store/NAME.yaml of your -cd DIR (its store/default.yaml is read without it)",
        "the store: store.root=DIR, or --store DIR (runs, gc, unpack, replay); where neither is given,",
        "  $LAUNCH_STORE, else ./runs (docs/store.md); the subcommands that read a store take -cd DIR and",
        "  store.KEY=VALUE words after their arguments, as a run does (docs/hydra.md)",
        "common overrides: +seed=N train.data=sample|full|PATH train.epochs=N store.root=DIR",
        "  determinism.intra_op_threads=N|auto determinism.inter_op_threads=N|auto",
        "  determinism.trace_every=N (steps between trace points; 0 = none)",
        "search: -m hydra/sweeper=optuna hydra.sweeper.n_trials=N 'KEY=interval(LO,HI)' sweep.objective=val_loss",
    ]
    return "\n".join(lines)


def synopsis(p) -> list[str]:
    """A subcommand's usage as its own ``--help`` prints it, wrapped alike, less ``usage: ``; then its
    description, indented below it."""
    head = "usage: "
    shown = p.format_usage().rstrip("\n").split("\n")
    lines = ["  " + shown[0][len(head) :], *(line[len(head) - 2 :] for line in shown[1:])]
    width = max(shutil.get_terminal_size().columns - 2, 40)  # argparse's width
    return lines + textwrap.wrap(p.description, width, initial_indent=" " * 6, subsequent_indent=" " * 6)


if __name__ == "__main__":
    sys.exit(main())
