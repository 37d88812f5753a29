"""Training tasks. Each module exposes ``run(ctx: TaskContext) -> dict``.

The returned dict may hold ``final_metrics``, ``weights_sha256`` and
``layer_sha256``; the bootstrap adds timings, output hashes and data hashes.
"""

from __future__ import annotations

import importlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig

from launcher.job.determinism import Plan
from launcher.record import layout


@dataclass
class TaskContext:
    cfg: DictConfig
    seed: int
    plan: Plan
    run_dir: Path
    output_dir: Path
    progress: bool  # a terminal is watching: show Keras progress bars
    resume: dict | None = None  # {"checkpoint": relative path, "epoch": N} when resuming
    trace_every: int = 0  # record the divergence trace every N steps (0 = none)
    data_files: dict[str, str] = field(default_factory=dict)  # path -> sha256 of data read
    # A laid-out code snapshot the job runs from (replay, sweeps): paths are looked up there first.
    root: str | None = None
    # The task's result as observed so far, for a job that ends without returning (os._exit(0)).
    result_so_far: object = None
    # Settings only the task can read back (e.g. Keras' effective jit_compile, which it turns
    # off under op determinism); they replace the planned values in the fingerprint.
    effective: dict[str, object] = field(default_factory=dict)
    # Called before each checkpoint of user code: write the job's facts so far (the data it
    # has read), so that a resume can check them (set by the bootstrap).
    facts_so_far: object = None

    def log_epoch(self, epoch: int, metrics: dict[str, float]) -> None:
        """Append one epoch's metrics to metrics.jsonl as a single line, durably."""
        line = json.dumps({"epoch": epoch, **metrics}, sort_keys=True) + "\n"
        with open(layout.RunPaths(self.run_dir).metrics, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())


def get(name: str):
    """The ``run`` function of task ``name`` (imported lazily: tasks import TensorFlow)."""
    module = {"mnist": "mnist", "custom": "user", "script": "user", "notebook": "user"}[name]
    return importlib.import_module(f"launcher.job.tasks.{module}").run
