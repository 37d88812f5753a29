"""A GPU user's TensorFlow survives installing the launcher (issue 47): the launcher's installed metadata
requires no TensorFlow distribution but through its extras, and a missing TensorFlow is one line."""

from __future__ import annotations

import re
from importlib import metadata

from packaging.requirements import Requirement

from launcher.cli.main import main

TENSORFLOWS = {"tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tf-nightly", "tensorflow-intel"}


def _requirements() -> list[Requirement]:
    return [Requirement(line) for line in metadata.requires("tf-repro-launcher") or []]


def _extra_of(req: Requirement) -> str | None:
    """The extra a requirement belongs to (``extra == "gpu"`` in its marker, on any platform), or None."""
    found = re.search(r'extra == "([\w-]+)"', str(req.marker or ""))
    return found.group(1) if found else None


def test_installing_the_launcher_installs_no_tensorflow_beside_the_users():
    """pip installs a plain requirement whatever is there: a `tensorflow-cpu` one lands beside a user's
    CUDA `tensorflow`, and the last one written wins the `tensorflow/` package."""
    plain = [r for r in _requirements() if _extra_of(r) is None and r.name.lower() in TENSORFLOWS]
    assert plain == [], f"a plain TensorFlow requirement would replace a user's own build: {plain}"


def test_the_gpu_extra_is_tensorflow_with_cuda_and_the_cpu_extra_the_cpu_build():
    by_extra: dict[str, list[Requirement]] = {}
    for req in _requirements():
        by_extra.setdefault(_extra_of(req) or "", []).append(req)
    gpu = [r for r in by_extra.get("gpu", []) if r.name.lower() in TENSORFLOWS]
    assert [(r.name, r.extras) for r in gpu] == [("tensorflow", {"and-cuda"})]
    cpu = {r.name for r in by_extra.get("cpu", []) if r.name.lower() in TENSORFLOWS}
    assert cpu == {"tensorflow-cpu", "tensorflow"}  # tensorflow-cpu on x86-64, tensorflow elsewhere (no -cpu wheel)


def test_a_local_run_without_tensorflow_is_refused_in_one_line_before_a_run_exists(tmp_path, monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorflow" else real(name, *a))
    monkeypatch.chdir(tmp_path)
    assert main(["train.epochs=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "TensorFlow is not installed" in err and "tf-repro-launcher[gpu]" in err
    assert not (tmp_path / "runs").exists()
