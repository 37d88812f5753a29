"""The ``launch`` command: Hydra overrides for a training run, or a subcommand.

``launch [OVERRIDES...]`` composes the config and runs one job; ``launch -m ...``
hands the composed sweep to Hydra's multirun (``launcher.sweep.multirun``); the
words in ``COMMANDS`` are subcommands, each a module of this package imported only
when it is used. Errors are reported here, once, as one line: the project's errors
by message and exit code, anything unexpected by a short traceback (the whole one
with ``LAUNCH_FULL_ERROR=1``).
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import os
import signal
import sys
import threading
import traceback
from collections.abc import Iterator, Sequence

from launcher.cli import hydraflags
from launcher.errors import LauncherError, UsageError

# name -> ("module:function", help). A static table: no registration by import.
COMMANDS: dict[str, tuple[str, str]] = {
    "compare": (
        "launcher.cli.compare:main",
        "RUN_A RUN_B [--allow-mismatch] [--tolerance RTOL,ATOL] [--plot PNG]: verdict",
    ),
    "replay": (
        "launcher.cli.replay:main",
        "RUN|FILE [--allow-mismatch] [--data NAME=PATH] [--rebuild] [--cpu MODEL]: rerun a stored run "
        "(or an archive's), say if it reproduced",
    ),
    "resume": (
        "launcher.cli.resume:main",
        "RUN [--allow-mismatch] [store.signing_key=K store.require_signed=true]: "
        "continue an interrupted run from its checkpoint",
    ),
    "runs": ("launcher.cli.runs:main", "[--store DIR] [--task T] [--status S] [--key PREFIX] [--reindex]: list runs"),
    "pack": (
        "launcher.cli.pack:main",
        "RUN [-o FILE] [--with-env]: one file holding the run, its code and data (and wheels)",
    ),
    "unpack": ("launcher.cli.unpack:main", "FILE [--store DIR]: import an archive's run into a store"),
    "verify": ("launcher.cli.verify:main", "RUN|FILE [store.allowed_signers=F]: check the seal and who signed it"),
    "gc": ("launcher.cli.gc:main", "[--store DIR] [--dry-run]: remove the store's objects no run references"),
    "audit": ("launcher.cli.audit:main", "[OVERRIDES...] [audit.repeats=N]: which knobs change the bits, and where"),
    "sweep": ("launcher.cli.sweeps:main", "replay SWEEP_DIR | plot SWEEP_DIR PNG: replay every job | draw the spread"),
    "image": ("launcher.cli.image:image_command", "build|list|prune|bootstrap-base [OVERRIDES]: images"),
    "lock": ("launcher.cli.image:lock_command", "image=NAME [--host]: pin an image's packages (pip-compile)"),
}


def command(name: str):
    """The function behind subcommand ``name`` (its module imported now)."""
    module, _, func = COMMANDS[name][0].partition(":")
    return getattr(importlib.import_module(module), func)


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
        print(note, flush=True)
    outcome = pipeline.run(cfg)
    print(pipeline.summary_line(outcome) + resume_hint(outcome), flush=True)
    if outcome.status == "interrupted":
        return 130
    return 0 if outcome.ok else 1


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


def main(argv: Sequence[str] | None = None) -> int:
    try:
        with _sigterm_as_ctrl_c():
            code = _main(argv)
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
    return 128 + signal.SIGPIPE


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
        if args and args[0] in ("-h", "--help", "help"):
            print(usage())
            return 0
        if "--version" in args:
            return version()
        flags = hydraflags.parse(args)  # Hydra's own parser: --cfg, --info, -cd, -m, ...
        word = bare_word(flags.overrides)
        if word is not None:
            raise not_a_command(word)
        if flags.help:
            print(usage())
            return 0
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
        return exc.exit_code
    except KeyboardInterrupt:
        print("launch: interrupted", file=sys.stderr)
        return 130
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
        return 70


def version() -> int:
    from importlib.metadata import version as installed

    from launcher.version import __version__

    print(f"launch {__version__} (Hydra {installed('hydra-core')})")
    return 0


def usage() -> str:
    lines = [
        "usage: launch [OVERRIDES...]            run one training job (Hydra overrides)",
        "       launch -m [OVERRIDES...]         sweep, e.g. -m train=mnist '+seed=range(10)'",
        "       launch --cfg job|hydra|all [--resolve] [--package PKG] [OVERRIDES...]   print the config; no run",
        "       launch --info [all|config|defaults|defaults-tree|plugins|searchpath] [OVERRIDES...]",
        "       launch -cd DIR [OVERRIDES...]    add your config groups: DIR/train/tiny.yaml gives train=tiny",
        '       launch -sc install=bash|zsh      shell completion: eval "$(launch -sc install=bash)"',
    ]
    for name, (_, help_text) in COMMANDS.items():
        lines.append(f"       launch {name:<9} {help_text}")
    lines += [
        "",
        "config groups: train=mnist|custom|script|notebook  determinism=off|seeded|strict|portable",
        "  runtime=local|docker  image=tf-cpu|tf-gpu (runtime=docker)  tracking=none|mlflow (docs/tracking.md)",
        "  store=NAME: DIR/store/NAME.yaml of your -cd DIR (its store/default.yaml is read without it)",
        "store settings of compare, replay, resume, runs, pack, unpack, verify, gc: as a run's, from -cd DIR",
        "  and store.KEY=VALUE words after the arguments (docs/hydra.md)",
        "common overrides: +seed=N train.data=sample|full|PATH train.epochs=N store.root=DIR",
        "  determinism.intra_op_threads=N|auto determinism.inter_op_threads=N|auto",
        "  determinism.trace_every=N (steps between trace points; 0 = none)",
        "search: -m hydra/sweeper=optuna hydra.sweeper.n_trials=N 'KEY=interval(LO,HI)' sweep.objective=val_loss",
        "one word, one meaning: --allow-mismatch goes on where the keys differ (compare, replay, resume, sweep);",
        "  --reindex (runs), --force (image: make it again), --rebuild (replay: the run's Python environment);",
        "  old spellings (compare/replay/resume --force, runs --rebuild, image build --rebuild, sweep verify)",
        "  work one more release",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
