"""``train=notebook``: a Jupyter notebook's code cells, run in order in the job process.

The cells run here, in the bootstrapped and observed job process, in an IPython
``InteractiveShell`` (IPython's own cell runner, the one a Jupyter kernel wraps): magics
(``%matplotlib inline``, ``%time``) and shell escapes (``!ls``) behave as in Jupyter,
and everything a script gets (the seeds, op determinism and threads, the observers of
every fit, optimizer step, trained variable, file read, import and seed) the cells get,
because they run in the process that has it. A kernel in a process of its own
(nbclient, papermill) would need the bootstrap inside that kernel and the observers'
findings carried back, and costs a kernel start; docs/running-your-code.md#notebooks
says why and what it costs.

What a Jupyter frontend would show is kept: each cell's printed text, its results
(``execute_result``), its displays (plots, HTML) and its error, in the executed copy
``RUN/outputs/<notebook name>``, written after every cell (a failed or interrupted run
keeps it up to the cell it stopped in). Printed text also goes to the terminal and
log.txt as it is printed.

Each cell's code is named ``<notebook path> [code cell N]`` (its traceback lines, and
what the seed and environment observers record as its place), a name the observers
count as the job's own code. ``input()`` fails the cell at once (nobody answers a
headless run) instead of waiting.
"""

from __future__ import annotations

import builtins
import linecache
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

from launcher.errors import CellError, ConfigError
from launcher.job.observe import reads
from launcher.record import notebooks
from launcher.record.store import runs

NO_INPUT = (
    "a notebook run by launch is headless: nobody can answer input(); put the value in the "
    "parameters cell and set it with train.params"
)


def execute(path: str, params: dict, executed: Path) -> dict[str, float]:
    """Run the code cells of the notebook at ``path`` with ``params`` injected (papermill's
    convention), writing the executed copy to ``executed`` after each cell; CellError when a
    cell raises. ``KeyboardInterrupt`` (the launcher's stop) propagates. Returns the timings:
    the shell's start (``notebook_start_s``: IPython imported and its shell made) and the cells'."""
    started = time.perf_counter()
    try:
        import IPython  # noqa: F401
        import nbformat
    except ImportError as exc:  # the launcher checked its own environment; a container's may lack them
        raise ConfigError(
            f"train=notebook needs IPython and nbformat where the job runs ({exc}): {notebooks.EXTRA}"
        ) from None

    reads.code_files.update({os.path.abspath(path), os.path.realpath(path)})  # code, never data
    nb = notebooks.load(path)
    if params and not notebooks.has_parameters_cell(nb):
        print(
            "[launch] note: no cell is tagged 'parameters'; train.params are set in a new first cell "
            "(papermill's convention)",
            flush=True,
        )
    nb, injected = notebooks.inject(nb, params)
    nb = nbformat.from_dict(nb)
    if (nb.nbformat, nb.nbformat_minor) >= (4, 5):  # cell ids are required since 4.5: the copy has them
        for i, cell in enumerate(nb.cells):
            cell.setdefault("id", "injected-parameters" if i == injected else f"cell-{i}")
    nb.metadata["launch"] = {"notebook": os.path.basename(path), "params": params}
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))  # helpers beside it import, as in Jupyter
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")  # plots inline, as ipykernel
    with tempfile.TemporaryDirectory(prefix="launch-ipython-") as ipython_dir:
        shell = _shell(ipython_dir)
        ready = time.perf_counter()
        try:
            _run_cells(shell, nb, os.path.abspath(path), injected, executed)
        finally:
            shell.cleanup()
            type(shell).clear_instance()
    return {"notebook_start_s": ready - started, "notebook_cells_s": time.perf_counter() - ready}


def _run_cells(shell, nb, path: str, injected: int | None, executed: Path) -> None:
    import nbformat

    number = 0
    count = 0
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        name = "the injected parameters cell" if index == injected else notebooks.cell_name(number := number + 1)
        cell.outputs = []
        cell.execution_count = None
        text = notebooks.source(cell)
        if not text.strip():
            continue
        count += 1
        shell.code_name = f"{path} [{name}]"
        shell.outputs = cell.outputs
        with _headless(cell.outputs):
            result = shell.run_cell(text, store_history=True)
        cell.execution_count = count
        runs.write_bytes(executed, nbformat.writes(nb).encode())
        error = result.error_before_exec or result.error_in_exec
        if isinstance(error, KeyboardInterrupt):
            raise error
        if isinstance(error, SystemExit) and error.code in (None, 0):
            print(f"[launch] {name} called sys.exit({error.code or ''}): the notebook ends there", flush=True)
            return
        if error is not None:
            raise CellError(
                f"{name} raised {_describe(error, shell.code_name, text)}; "
                f"the executed notebook up to it is in outputs/{executed.name}"
            ) from None


def _describe(error: BaseException, code_name: str, text: str) -> str:
    """``ZeroDivisionError: division by zero (line 2: y = 1 / 0)``: the error and the line of
    the cell ``text`` it came from (the innermost frame of the cell's own code), as written
    (``%matplotlib inline``, not IPython's translation of it)."""
    what = f"{type(error).__name__}: {error}".splitlines()[0] if str(error) else type(error).__name__
    line = getattr(error, "lineno", None) if isinstance(error, SyntaxError) else None
    for frame, lineno in traceback.walk_tb(error.__traceback__):
        if frame.f_code.co_filename == code_name:
            line = lineno
    if line is None:
        return what
    lines = text.splitlines()
    shown = (lines[line - 1] if 0 < line <= len(lines) else linecache.getline(code_name, line)).strip()
    return f"{what} (line {line}: {shown})" if shown else f"{what} (line {line})"


def _shell(ipython_dir: str):
    """An IPython shell whose cells' outputs land in the current cell of the executed copy."""
    from IPython.core.compilerop import CachingCompiler
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    class Publisher(DisplayPublisher):
        def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
            self.shell.outputs.append(_output("display_data", data, metadata))
            if "text/plain" in data and not any(k.startswith("image/") for k in data):
                _print_log(data["text/plain"])

        def clear_output(self, wait=False):
            self.shell.outputs.clear()

    class Hook(DisplayHook):
        def write_output_prompt(self):
            pass

        def write_format_data(self, format_dict, md_dict=None):
            self.shell.outputs.append(_output("execute_result", format_dict, md_dict, self.prompt_count))
            _print_log(format_dict.get("text/plain", ""))

    class Compiler(CachingCompiler):
        shell = None

        def get_code_name(self, raw_code, transformed_code, number):
            return Compiler.shell.code_name  # the notebook and the cell, not <ipython-input-N>

    class Shell(InteractiveShell):
        display_pub_class = Publisher
        displayhook_class = Hook
        compiler_class = Compiler
        code_name = "<launch>"
        outputs: list = []

        def _showtraceback(self, etype, evalue, stb):
            import nbformat

            self.outputs.append(
                nbformat.v4.new_output(
                    "error", ename=getattr(etype, "__name__", str(etype)), evalue=str(evalue), traceback=list(stb)
                )
            )
            print(self.InteractiveTB.stb2text(stb), file=sys.__stderr__ or sys.stderr, flush=True)

        def enable_gui(self, gui=None):  # %matplotlib inline: no event loop, as in ipykernel
            if gui not in (None, "inline"):
                from IPython.core.error import UsageError

                raise UsageError(f"a notebook run by launch is headless: no {gui} window; use %matplotlib inline")

        def system(self, cmd):  # !cmd: the program is the job's, its argument files read
            reads.note_child(["/bin/sh", "-c", cmd])
            return super().system(cmd)

        def getoutput(self, cmd, split=True, depth=0):  # x = !cmd
            reads.note_child(["/bin/sh", "-c", cmd])
            return super().getoutput(cmd, split=split, depth=depth)

    config = Config()
    config.HistoryManager.enabled = False  # no history database in the home directory
    config.InteractiveShell.colors = "NoColor"  # plain tracebacks in log.txt and the executed copy
    config.InteractiveShell.ipython_dir = ipython_dir
    shell = Shell.instance(config=config)
    Compiler.shell = shell
    return shell


def _output(kind: str, data: dict, metadata: dict | None, count: int | None = None) -> dict:
    import nbformat

    if kind == "execute_result":
        return nbformat.v4.new_output(kind, data=dict(data), metadata=dict(metadata or {}), execution_count=count)
    return nbformat.v4.new_output(kind, data=dict(data), metadata=dict(metadata or {}))


def _print_log(text: str) -> None:
    """A result or display shown in the terminal and log.txt (not in the cell's printed text)."""
    stream = sys.__stdout__ or sys.stdout
    stream.write(text + "\n")
    stream.flush()


class _Tee:
    """A cell's stdout or stderr: written through, and kept as the cell's stream output."""

    def __init__(self, name: str, stream, outputs: list) -> None:
        self._name, self._stream, self._outputs = name, stream, outputs

    def write(self, text: str) -> int:
        self._stream.write(text)
        if not text:
            return 0
        last = self._outputs[-1] if self._outputs else None
        if last is not None and last.get("output_type") == "stream" and last.get("name") == self._name:
            last["text"] += text
        else:
            import nbformat

            self._outputs.append(nbformat.v4.new_output("stream", name=self._name, text=text))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):  # flush, isatty, fileno, encoding: the real stream's
        return getattr(self._stream, name)


class _NoStdin:
    """``sys.stdin`` of a headless notebook: reading fails at once, never waits."""

    def _fail(self, *args, **kwargs):
        from IPython.core.error import StdinNotImplementedError

        raise StdinNotImplementedError(NO_INPUT)

    read = readline = readlines = __iter__ = _fail

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise OSError("no stdin in a notebook run by launch")


class _headless:
    """While a cell runs: stdout and stderr kept as its outputs, and input() failing at once."""

    def __init__(self, outputs: list) -> None:
        self.outputs = outputs

    def __enter__(self) -> None:
        self.saved = (sys.stdout, sys.stderr, sys.stdin, builtins.input)
        sys.stdout = _Tee("stdout", sys.stdout, self.outputs)
        sys.stderr = _Tee("stderr", sys.stderr, self.outputs)
        sys.stdin = _NoStdin()
        builtins.input = _NoStdin()._fail

    def __exit__(self, *exc) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        sys.stdout, sys.stderr, sys.stdin, builtins.input = self.saved
