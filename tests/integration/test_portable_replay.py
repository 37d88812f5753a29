"""determinism=portable on real runs, replayed on an emulated CPU (qemu-user) (issue 30).

A portable run replayed as an Intel Haswell (AVX2, no AVX-512) gives the same bits as on
this machine, and its fingerprint holds the emulated CPU; a strict run is refused on the
CPU fields before any job starts. An emulated job takes a minute on 2 cores: one of them here.
"""

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import TINY, copy_store, is_run, verdict_of

pytestmark = [
    pytest.mark.slow,
    # CI sets LAUNCH_REQUIRE_QEMU=1: there a missing qemu fails these tests instead of skipping them.
    pytest.mark.skipif(
        shutil.which("qemu-x86_64") is None and not os.environ.get("LAUNCH_REQUIRE_QEMU"),
        reason="qemu-x86_64 is not installed (apt-get install qemu-user)",
    ),
]


def _run(launch, store: Path, npz: Path, *overrides: str) -> Path:
    before = set(store.iterdir())
    done = launch(f"train.data={npz}", f"store.root={store}", *TINY, *overrides)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (new,) = [p for p in set(store.iterdir()) - before if is_run(p)]
    return new


def _replayed(store: Path, before: set) -> list[Path]:
    return [p for p in set(store.iterdir()) - before if is_run(p)]


@pytest.mark.long(seconds=130)
def test_a_portable_run_reproduces_on_an_emulated_haswell(launch, store, mnist_npz):
    run = _run(launch, store, mnist_npz, "determinism=portable")
    fp = json.loads((run / "fingerprint.json").read_text())
    assert fp["determinism"]["isa_baseline"]["numpy_dispatch"].get("X86_V4") in (False, None)
    archive = store.parent / "portable.launch.tar.gz"  # the run travels (issue 41): replayed from its archive
    assert launch("pack", str(run), "-o", str(archive)).returncode == 0
    before = set(store.iterdir())
    done = launch("replay", str(archive), "--cpu", "Haswell", f"store.root={store}", timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert done.stdout.startswith(f"run {run.name} already in {store}; unsigned")
    assert any(
        line.startswith("REPRODUCED:") and line.endswith("(its job emulated as CPU Haswell by qemu-x86_64)")
        for line in done.stdout.splitlines()
    ), done.stdout[-2000:]
    (replay,) = _replayed(store, before)
    cpu = json.loads((replay / "fingerprint.json").read_text())["hardware"]
    assert cpu["cpu"]["emulated"]["cpu"] == "Haswell"
    assert cpu["cpu"]["model"] == "Intel Core Processor (Haswell)" != fp["hardware"]["cpu"]["model"]
    assert cpu["cpu_seen_by_job"]["model"] == "Intel Core Processor (Haswell)"  # CPUID inside the emulator
    assert "avx512f" not in cpu["cpu"]["isa"]
    compared = launch("compare", str(run), str(replay))
    assert compared.returncode == 0 and compared.stdout.startswith("IDENTICAL"), compared.stdout


def test_a_strict_run_is_refused_on_an_emulated_cpu_and_nothing_runs(launch, tiny_runs, tmp_path):
    """Strict keys this machine's CPU, so another CPU is refused before any job starts. (What a
    forced replay reports is held by test_compare_replay.py's environment refusal, run natively:
    an emulated job costs a minute.)"""
    store = copy_store(tiny_runs[0]["store"], tmp_path / "store")
    run = store / tiny_runs[0]["run"].name  # strict, this machine's CPU in the key (shared: tests/conftest.py)
    before = set(store.iterdir())
    refused = launch("replay", str(run), "--cpu", "Haswell")
    assert refused.returncode == 3, refused.stdout + refused.stderr
    assert verdict_of(refused.stdout).startswith("REFUSED:") and "hardware.cpu.model" in refused.stdout
    assert _replayed(store, before) == []  # a refused replay leaves nothing behind
