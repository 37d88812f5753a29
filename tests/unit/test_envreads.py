"""Which environment variables the job's own code reads (``launcher.job.observe.envreads``), in this process."""

from __future__ import annotations

import os

import pytest

from launcher.job.observe import envreads


@pytest.fixture
def reading(monkeypatch):
    monkeypatch.setattr(envreads, "read", {})
    monkeypatch.setattr(envreads, "_original", None)  # put back after the test, with:
    monkeypatch.setattr(os._Environ, "__getitem__", os._Environ.__getitem__)
    envreads.install()
    return envreads


def test_the_jobs_reads_are_keyed_but_the_launchers_own_per_run_variables_are_not(reading, monkeypatch):
    """``LAUNCH_OUTPUT_DIR`` differs in every run: keyed by value, it refused every comparison,
    replay and resume of a script that reads it (the docs offer it)."""
    monkeypatch.setenv("LR", "0.01")
    monkeypatch.setenv("LAUNCH_OUTPUT_DIR", "/runs/x/outputs")
    assert os.environ.get("LR") == "0.01" and os.environ.get("LAUNCH_OUTPUT_DIR") == "/runs/x/outputs"
    os.getenv("LAUNCH_SEED")
    assert reading.recorded() == {"LR": "0.01"}
