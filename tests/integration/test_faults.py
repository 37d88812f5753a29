"""Fault injection: what the user sees when the store, the launcher or the machine fails (issue 12).

Each case injects one real fault (a damaged or deleted index, a SIGKILLed launcher, a
SIGKILLed job process, a disk that fills during a checkpoint, a read-only store, an
empty cache) and checks three things: what the user sees is one line (never a
traceback); nothing incomplete is sealed; nothing that was complete is lost.
The disk and read-only cases mount a small tmpfs and need root; elsewhere they are
skipped with that reason.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import QUICK, REPO, run_launch

STRICT = ("train=mnist", "determinism=strict")
THREE_EPOCHS = (*STRICT, "train.epochs=3", "train.batch_size=50")
ROOT = os.geteuid() == 0


def _new_runs(store: Path, before: set[Path] = frozenset()) -> list[Path]:
    return sorted(p for p in set(store.iterdir()) - set(before) if p.is_dir() and p.name[0].isdigit())


def _status(run: Path) -> dict:
    return json.loads((run / "status.json").read_text())


def _no_traceback(done: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr[-3000:]


def _quick(store: Path, npz: Path, *overrides: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_launch(*STRICT, f"train.data={npz}", f"store.root={store}", *QUICK, *overrides, env=env)


def _sealed_intact(run: Path) -> None:
    """A sealed run still verifies: every file it listed is there, unchanged."""
    from launcher.record import runs

    runs.verify_seal(run)


@contextmanager
def _mounted(path: Path, *options: str) -> Iterator[Path]:
    """A tmpfs at ``path`` (root only), unmounted afterwards."""
    if not ROOT:
        pytest.skip("needs root to mount a tmpfs (mount -t tmpfs)")
    path.mkdir(exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(path)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


# ---------------------------------------------------------------- a fresh cache (no training)
def test_a_first_image_build_on_a_fresh_cache_makes_its_own_directories(tmp_path, monkeypatch):
    """~/.cache/launch does not exist: downloading the locked wheels must not fail on a log path."""
    from launcher.docker import imagebuild, images
    from launcher.errors import ImageError

    home = tmp_path / "empty home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "xdg cache"))
    hash_a = "sha256:" + "a" * 64
    lockfile = f"pip==26 --hash={hash_a}\nnumpy==2 --hash={hash_a}\n"
    entries = images.parse_lockfile(lockfile)
    inputs = imagebuild.BuildInputs("tf-cpu", "FROM x", lockfile, "local", "x", "sha256:b", "0", entries)
    from omegaconf import OmegaConf

    config = OmegaConf.to_container(OmegaConf.load(REPO / "launcher/configs/image/tf-cpu.yaml"))
    spec = images.spec_from_config({**config, "base": "local", "wheelhouse": None})
    # pip itself, offline: it prints and fetches nothing, so the hash check below fails as it should.
    monkeypatch.setattr(images, "pip_download_argv", lambda *a: [sys.executable, "-c", "print('pip ran')"])
    with pytest.raises(ImageError, match="no file with a locked hash"):
        imagebuild.fill_wheelhouse(spec, inputs, echo=False)
    cache = home / "xdg cache" / "launch"
    assert "pip ran" in (cache / "logs" / "download.log").read_text()
    assert (cache / "wheels").is_dir()
    assert imagebuild.cache_dir("locks").is_dir()
