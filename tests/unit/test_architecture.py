"""The package's layout is the pipeline: each stage documents its job, and imports only downward."""

import importlib
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STAGES = ("cli", "run", "job", "job.observe", "job.training", "record", "share", "verdict", "docker", "sweep")


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_says_what_it_owns_and_what_it_may_import(stage):
    doc = importlib.import_module(f"launcher.{stage}").__doc__ or ""
    assert "Owns" in doc or "owns" in doc, f"launcher.{stage} does not say what it owns"
    assert "import" in doc, f"launcher.{stage} does not say what it may import"


def test_imports_follow_the_layers_and_have_no_circles():
    # pyproject.toml's [tool.importlinter] contracts: the rules of docs/architecture.md.
    exe = shutil.which("lint-imports")
    assert exe, "import-linter is a test dependency: pip install -e '.[test]'"
    done = subprocess.run([exe], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]
