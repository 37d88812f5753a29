"""The console examples of the README and docs/*.md: found, and their output matched (pure).

A *console example* is a fenced code block whose first non-blank line starts with ``$ ``.
Each ``$ `` line is a command; the lines after it, up to the next ``$ `` line, are the output
it is documented to print (stdout and stderr together). A trailing ``# comment`` on a command
line is the shell's own comment and is run as written. ``tests/integration/test_docs_examples.py``
runs every example for real and matches its output with :func:`match`, in which:

- a line that is only ``...`` stands for any number of lines (Keras' progress, say);
- ``…`` inside a line stands for any text on that line (elided);
- a run id (``20261123-193734-a61944``, also elided as ``…-a61944``) is a placeholder bound,
  by its last six hex digits, to the id the command really printed: the same documented id
  must be the same real run everywhere in the page, and two documented ids two real runs;
- a hex digest of 12 or more digits (``weights_sha256``, a layer hash) and a number with four
  decimals (a metric) are machine-bound: each is bound to what was printed, so the same
  documented value must come out the same wherever the page repeats it (a 16-digit prefix
  agreeing with the 64-digit digest it starts), but its value is not compared;
- a duration (``2s``, ``530ms/step``, ``11 s``) matches any duration, and a number in
  e-notation (a migration check's error, ``7.45e-09``) any number;
- a run of two or more spaces matches any run of spaces, and a rule of ``-``, ``*`` or ``=``
  any rule of that character (tables are padded to what they hold);
- blank lines and trailing spaces are ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

RUN_ID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{6}")
ELLIPSIS_LINE = "..."


@dataclass(frozen=True)
class Command:
    """One ``$ `` line of an example and the output documented under it."""

    text: str  # the command, without "$ "
    expected: tuple[str, ...]  # the documented output lines
    line: int  # 1-based line of the command in its file


@dataclass(frozen=True)
class Example:
    """A console example: a fenced block of ``$ `` commands and their output."""

    path: str  # the file, relative to the repository
    line: int  # 1-based line of the opening fence
    commands: tuple[Command, ...]

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    def text(self) -> str:
        """The block's content, to recognize the same example repeated in another page."""
        return "\n".join(f"$ {c.text}\n" + "\n".join(c.expected) for c in self.commands)


def extract(markdown: str, path: str) -> list[Example]:
    """The console examples of a markdown page, in page order.

    Only fenced blocks (```` ``` ```` or ``~~~``, any info string) whose first non-blank
    line starts with ``$ `` count; other blocks (``bash`` recipes without output, JSON)
    are documentation, not examples.
    """
    examples: list[Example] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^(```|~~~)", lines[i])
        if not fence:
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and not lines[i].startswith(fence.group(1)):
            body.append((i + 1, lines[i]))
            i += 1
        i += 1  # the closing fence
        content = [(n, text) for n, text in body if text.strip()]
        if not content or not content[0][1].startswith("$ "):
            continue
        commands: list[Command] = []
        for n, text in body:
            if text.startswith("$ "):
                commands.append(Command(text[2:].strip(), (), n))
            else:
                last = commands[-1]
                commands[-1] = Command(last.text, (*last.expected, text), last.line)
        examples.append(Example(path, start + 1, tuple(commands)))
    return examples


# ---------------------------------------------------------------- matching
_TOKEN = re.compile(
    r"(?P<elided_id>…-[0-9a-f]{6}\b)"
    r"|(?P<ellipsis>…)"
    r"|(?P<run_id>\b\d{8}-\d{6}-[0-9a-f]{6}\b)"
    r"|(?P<duration>\b\d+(?:\.\d+)?\s?(?:ms|s)\b)"
    r"|(?P<digest>\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{12,64}\b)"
    r"|(?P<error>(?<![\d.])\d+(?:\.\d+)?e[-+]\d+\b)"
    r"|(?P<metric>(?<![\d.])\d+\.\d{4}(?![\d.]))"
    r"|(?P<spaces> {2,})"
    r"|(?P<rule>-{3,}|\*{3,}|={3,})"
)


@dataclass(frozen=True)
class Bindings:
    """What the documented placeholders stood for in the real output so far."""

    runs: dict[str, str] = field(default_factory=dict)  # documented id's 6-hex suffix -> real run id
    values: dict[str, str] = field(default_factory=dict)  # documented digest or metric -> real one

    def bind_run(self, suffix: str, real: str) -> Bindings | None:
        """These bindings with ``suffix`` bound to ``real``, or None when that contradicts them."""
        if suffix in self.runs:
            return self if self.runs[suffix] == real else None
        if real in self.runs.values():  # two documented runs are two real runs
            return None
        return Bindings({**self.runs, suffix: real}, self.values)

    def bind_value(self, doc: str, real: str) -> Bindings | None:
        """These bindings with the documented value ``doc`` bound to ``real``, or None on a
        contradiction (a digest that is a prefix of another must stay its prefix)."""
        for known, was in self.values.items():
            if known == doc and was != real:
                return None
            if known != doc and doc.startswith(known) and not real.startswith(was):
                return None
            if known != doc and known.startswith(doc) and not was.startswith(real):
                return None
        return Bindings(self.runs, {**self.values, doc: real})


def _line_pattern(expected: str) -> tuple[re.Pattern[str], list[tuple[str, str]]]:
    """A regex for one documented line, and per group what it binds: (kind, documented text)."""
    parts, binds, pos = [], [], 0
    for m in _TOKEN.finditer(expected):
        parts.append(re.escape(expected[pos : m.start()]))
        pos = m.end()
        kind, text = m.lastgroup, m.group()
        if kind == "elided_id":
            parts.append(r"(\d{8}-\d{6}-[0-9a-f]{6})")
            binds.append(("run", text[-6:]))
        elif kind == "run_id":
            parts.append(r"(\d{8}-\d{6}-[0-9a-f]{6})")
            binds.append(("run", text[-6:]))
        elif kind == "ellipsis":
            parts.append(r".*?")
        elif kind == "error":
            parts.append(r"\d+(?:\.\d+)?(?:e[-+]\d+)?")
        elif kind == "duration":
            parts.append(r"\d+(?:\.\d+)?\s?(?:ms|s)")
        elif kind == "digest":
            parts.append(rf"([0-9a-f]{{{len(text)}}})")
            binds.append(("value", text))
        elif kind == "metric":
            parts.append(r"(\d+\.\d{4})")
            binds.append(("value", text))
        elif kind == "spaces":
            parts.append(r" +")
        else:  # a rule
            parts.append(re.escape(text[0]) + "+")
    parts.append(re.escape(expected[pos:]))
    return re.compile("".join(parts)), binds


def match_line(expected: str, actual: str, bindings: Bindings) -> Bindings | None:
    """The bindings after ``actual`` matched the documented line ``expected``, or None."""
    pattern, binds = _line_pattern(expected.rstrip())
    m = pattern.fullmatch(actual.rstrip())
    if m is None:
        return None
    result: Bindings | None = bindings
    for (kind, doc), real in zip(binds, m.groups(), strict=True):
        result = result.bind_run(doc, real) if kind == "run" else result.bind_value(doc, real)
        if result is None:
            return None
    return result


def _significant(lines: list[str] | tuple[str, ...]) -> list[str]:
    return [line.rstrip() for line in lines if line.strip()]


def match(expected: list[str] | tuple[str, ...], actual: list[str], bindings: Bindings) -> Bindings | None:
    """The bindings after the real output ``actual`` matched the documented ``expected``
    lines (``...`` lines standing for any lines), or None when it does not match."""
    exp, act = _significant(expected), _significant(actual)

    def go(i: int, j: int, b: Bindings) -> Bindings | None:
        if i == len(exp):
            return b if j == len(act) else None
        if exp[i].strip() == ELLIPSIS_LINE:
            for k in range(len(act), j - 1, -1):  # longest first: "..." before a last line
                found = go(i + 1, k, b)
                if found is not None:
                    return found
            return None
        if j == len(act):
            return None
        after = match_line(exp[i], act[j], b)
        return go(i + 1, j + 1, after) if after is not None else None

    return go(0, 0, bindings)


def substitute_runs(command: str, bindings: Bindings) -> str:
    """The command with each documented run id (full or ``…-abcdef``) replaced by the real
    run it is bound to; ids not bound yet are left as written."""

    def real(m: re.Match[str]) -> str:
        return bindings.runs.get(m.group()[-6:], m.group())

    return re.sub(r"(?:\d{8}-\d{6}|…)-[0-9a-f]{6}\b", real, command)


def first_difference(expected: list[str] | tuple[str, ...], actual: list[str], bindings: Bindings) -> str:
    """A readable account of where ``actual`` stops matching ``expected`` (for a failure)."""
    exp, act = _significant(expected), _significant(actual)
    b: Bindings | None = bindings
    j = 0
    for i, line in enumerate(exp):
        if line.strip() == ELLIPSIS_LINE:
            return "after a '...' line the rest did not match:\n" + _show(exp[i:], act[j:])
        if j >= len(act):
            return f"documented line {i + 1} has no output line:\n  documented: {line}"
        after = match_line(line, act[j], b) if b is not None else None
        if after is None:
            hint = "" if match_line(line, act[j], Bindings()) is None else " (a placeholder bound before differs)"
            return f"line {i + 1} differs{hint}:\n  documented: {line}\n  printed:    {act[j]}"
        b, j = after, j + 1
    return f"extra output after the documented lines:\n  printed:    {act[j] if j < len(act) else ''}"


def _show(exp: list[str], act: list[str]) -> str:
    return "  documented:\n" + "".join(f"    {x}\n" for x in exp) + "  printed:\n" + "".join(f"    {x}\n" for x in act)
