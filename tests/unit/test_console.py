"""What of a job's output the terminal shows (launcher.console), a closed pipe, and the one table printer."""

from __future__ import annotations

import os
import subprocess
import sys

from launcher.console import NoiseFilter, table
from tests.conftest import REPO

ONEDNN = (
    b"I0000 00:00:1795575776.121491   25779 port.cc:153] oneDNN custom operations are on. You may see "
    b"slightly different numerical results due to floating-point round-off errors.\n"
)
ABSL = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
NODEDEF = (
    b"E0000 00:00:1732.5   812 meta_optimizer.cc:966] model_pruner failed: INVALID_ARGUMENT: NodeDef "
    b"mentions attribute use_unbounded_threadpool which is not in the op definition\n"
)
REAL = b"E0000 00:00:1795575776.1   25779 some_kernel.cc:12] Resource exhausted: OOM when allocating\n"


def shown(*chunks: bytes) -> bytes:
    f = NoiseFilter()
    return b"".join(f.feed(c) for c in chunks) + f.flush()


def test_known_startup_noise_is_dropped_and_everything_else_kept():
    out = shown(ABSL + ONEDNN + b"Epoch 1/2\n" + NODEDEF + REAL + b"[launch] run x complete\n")
    assert out == b"Epoch 1/2\n" + REAL + b"[launch] run x complete\n"


def test_noise_split_across_chunks_is_still_recognised():
    data = ABSL + ONEDNN + b"after\n"
    for cut in range(1, len(data)):
        assert shown(data[:cut], data[cut:]) == b"after\n", cut


def test_a_progress_bar_is_shown_at_once_without_waiting_for_its_line_end():
    f = NoiseFilter()
    assert f.feed(b"\r 3/6 [====>") == b"\r 3/6 [====>"
    assert f.feed(b"....]") == b"....]"
    assert f.feed(b" - loss: 2.1\n") == b" - loss: 2.1\n"


def test_ordinary_lines_that_start_like_a_log_line_are_kept():
    assert shown(b"I0 is my variable\n", b"Iteration 3\n", b"E1") == b"I0 is my variable\nIteration 3\nE1"


def test_a_closed_pipe_is_a_quiet_exit():
    """``launch ... | head -1``: the reader goes away; no traceback, no internal error."""
    read, write = os.pipe()
    os.close(read)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "launcher", "--help"],
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(REPO / "tests"),
    )
    os.close(write)
    assert done.returncode == 141 and done.stderr == ""


def test_a_table_pads_each_column_to_its_longest_cell_and_ends_no_line_in_spaces():
    assert table(("job", "seed", "status"), [("000", 7, "complete"), ("001", None, "")]) == [
        "job  seed  status",
        "000  7     complete",
        "001  None",
    ]


def test_a_table_takes_least_widths_right_aligned_columns_an_indent_and_a_rule():
    lines = table(("id", "seed", "status"), [("a", 12, "ok")], sep=" ", widths=(4, 6), right={1}, indent="  ")
    assert lines == ["  id     seed status", "  a        12 ok"]
    assert table(("knob", "bits"), [("threads", "same")], rule=True) == [
        "knob     bits",
        "-------  ----",
        "threads  same",
    ]
    assert table(("a",), [("longer than its least width",)], widths=(3,)) == ["a", "longer than its least width"]


def test_a_short_rows_last_cell_spans_the_columns_left_and_widens_none():
    lines = table(("field", "run A", "run B"), [("seed", "1", "2"), ("", "only in run A: x, y, z and a long tail")])
    assert lines == ["field  run A  run B", "seed   1      2", "       only in run A: x, y, z and a long tail"]
