"""A run travels (issue 41): `launch pack RUN --with-env` makes one file; on a machine with only Python,
a fresh venv installs the launcher from that file's wheels with no index, and `launch replay FILE` says
REPRODUCED, the original store, script and data gone. Signed runs say who sealed them in compare,
replay and verify; a forged re-sealed run and a key not in allowed_signers are refused.

Real training, a real venv and real pip (no index: `PIP_NO_INDEX=1`, no pip configuration), real
ssh-keygen keys.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.errors import ExitCode
from tests.conftest import DATA, NPZ, TINY, q, run_dir_of

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).parent / "scripts"


def offline_env(venv: Path, home: Path) -> dict:
    """Only Python and the venv: an empty HOME, no index, no pip configuration, no launcher source tree. The
    machine's own OpenBLAS settings stay (set on some CPUs here, and in the key: the same machine keeps them)."""
    machine = {k: v for k, v in os.environ.items() if k.startswith("OPENBLAS_")}
    return {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": str(home),
        "PIP_NO_INDEX": "1",
        "PIP_CONFIG_FILE": os.devnull,
        "XDG_CACHE_HOME": str(home / ".cache"),
        "LANG": "C.UTF-8",
        **machine,
    }


def tamper_record(venv: Path, distribution: str) -> None:
    """Make an installed distribution's content identity differ (its RECORD lists one more file)."""
    site = next((venv / "lib").glob("python3*/site-packages"))
    record = next(site.glob(f"{distribution}-*.dist-info")) / "RECORD"
    record.write_text(record.read_text() + f"{distribution}/not_the_runs.py,sha256=AAAA,1\n")


@pytest.mark.long(seconds=150)
def test_a_packed_run_replays_reproduced_in_a_fresh_venv_installed_from_its_wheels_with_no_index(launch, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(SCRIPTS / "with_helper.py", project / "train.py")
    shutil.copy(SCRIPTS / "helper.py", project / "helper.py")
    shutil.copy(DATA / "mnist-small" / "mnist-small.npz", project / "digits.npz")
    store = tmp_path / "store"
    done = launch(
        "train=script", "train.script=train.py", "train.args=[digits.npz]", f"store.root={q(store)}", cwd=project
    )
    run = run_dir_of(done)
    archive = tmp_path / "shipped" / "run.launch.tar.gz"
    archive.parent.mkdir()
    started = time.monotonic()
    packed = launch("pack", str(run), "--with-env", "-o", str(archive))
    assert packed.returncode == 0, packed.stdout[-2000:] + packed.stderr[-2000:]
    pack_s = time.monotonic() - started
    assert "wheel(s)" in packed.stdout and packed.stdout.strip().endswith("unsigned")

    for gone in (store, project):  # the original store, script, helper and data
        for path in [gone, *gone.rglob("*")]:
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | stat.S_IWUSR)
        shutil.rmtree(gone)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "home").mkdir(parents=True)
    started = time.monotonic()
    subprocess.run(["tar", "-xzf", str(archive), "wheels"], cwd=elsewhere, check=True)  # plain tar gets them
    subprocess.run([sys.executable, "-m", "venv", str(elsewhere / "venv")], check=True)
    env = offline_env(elsewhere / "venv", elsewhere / "home")
    # the recipe as docs/sharing.md writes it: `pip install --no-index --no-deps wheels/*.whl`
    wheels = sorted(str(w.relative_to(elsewhere)) for w in (elsewhere / "wheels").glob("*.whl"))
    installed = subprocess.run(
        [str(elsewhere / "venv" / "bin" / "pip"), "install", "-q", "--no-index", "--no-deps", *wheels],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-3000:]
    install_s = time.monotonic() - started
    work = elsewhere / "work"
    work.mkdir()

    def replay(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(elsewhere / "venv" / "bin" / "launch"), "replay", str(archive), *extra],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )

    started = time.monotonic()
    done = replay()
    replay_s = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.startswith(f"run {run.name} unpacked into {work / 'runs'}; unsigned; its ")
    assert "\nREPRODUCED: replay " in done.stdout and f"of {work / 'runs' / run.name}" in done.stdout
    assert "the launcher" not in done.stderr  # the launcher the job imported is the venv's, from the archive
    listed = subprocess.run(
        [str(elsewhere / "venv" / "bin" / "launch"), "runs"], cwd=work, env=env, capture_output=True, text=True
    )
    assert run.name in listed.stdout and "2 run(s)" in listed.stdout, listed.stdout + listed.stderr

    # --rebuild from the archive's wheels, with no index: the venv's termcolor made unlike the run's
    tamper_record(elsewhere / "venv", "termcolor")
    refused = replay()
    assert refused.returncode == 3 and "software.distributions.termcolor" in refused.stdout, refused.stdout[-2000:]
    rebuilt = replay("--rebuild")
    assert rebuilt.returncode == 0, rebuilt.stdout[-3000:] + rebuilt.stderr[-3000:]
    assert f"run {run.name} already in" in rebuilt.stdout and "\nREPRODUCED: " in rebuilt.stdout
    assert "termcolor==3" in rebuilt.stderr or "termcolor==" in rebuilt.stderr  # what the overlay installed
    print(
        f"\npack --with-env {pack_s:.1f} s; tar -x wheels + venv + pip install {install_s:.1f} s; "
        f"replay FILE {replay_s:.1f} s; archive {archive.stat().st_size / (1 << 20):.0f} MiB"
    )


# ---------------------------------------------------------------- signed runs
@pytest.fixture
def keys(tmp_path: Path) -> dict:
    root = tmp_path / "keys"
    root.mkdir()
    for name in ("alice", "mallory"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(root / name)], check=True)
    for owner in ("alice", "mallory"):
        public = (root / f"{owner}.pub").read_text().split()
        (root / f"{owner}-only").write_text(f'{owner}@lab namespaces="launch-run" {public[0]} {public[1]}\n')
    return {"alice": root / "alice", "alice_only": root / "alice-only", "mallory_only": root / "mallory-only"}


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen (openssh-client)")
def test_a_signed_run_shows_its_signer_in_verify_replay_and_compare_and_forgeries_are_refused(launch, tmp_path, keys):
    store = tmp_path / "store"
    trusted = f"store.allowed_signers={keys['alice_only']}"
    done = launch(
        "train=mnist", f"train.data={q(NPZ)}", *TINY, f"store.root={q(store)}", f"store.signing_key={keys['alice']}"
    )
    run = run_dir_of(done)
    assert (run / "manifest.json.sig").is_file()

    verified = launch("verify", str(run), trusted)
    assert verified.returncode == 0 and verified.stdout.splitlines()[1] == "signature: sealed by alice@lab (trusted)"
    replayed = launch("replay", str(run), trusted, "store.require_signed=true")
    assert replayed.returncode == 0, replayed.stdout[-2000:] + replayed.stderr[-2000:]
    assert replayed.stdout.startswith("REPRODUCED") or "\nREPRODUCED: " in replayed.stdout
    assert replayed.stdout.startswith(f"the stored run {run.name} is sealed by alice@lab (trusted)\n")
    replay_run = Path(
        next(line for line in replayed.stdout.splitlines() if line.startswith("REPRODUCED"))
        .split(" replay ")[1]
        .split(" of ")[0]
    )
    compared = launch("compare", str(run), str(replay_run), trusted)
    assert compared.returncode == 0 and compared.stdout.startswith("IDENTICAL")
    assert f"run {run.name}: sealed by alice@lab (trusted)" in compared.stdout
    assert f"run {replay_run.name}: unsigned" in compared.stdout  # the replayer configured no key

    archive = tmp_path / "signed.tar.gz"
    assert launch("pack", str(run), "-o", str(archive)).returncode == 0
    elsewhere = launch(
        "replay", str(archive), f"store.root={q(tmp_path / 'other')}", trusted, "store.require_signed=true"
    )
    assert elsewhere.returncode == 0 and "sealed by alice@lab (trusted)" in elsewhere.stdout.splitlines()[0]
    strangers = launch(
        "replay",
        str(archive),
        f"store.root={q(tmp_path / 'third')}",
        f"store.allowed_signers={keys['mallory_only']}",
        "store.require_signed=true",
    )
    assert strangers.returncode == ExitCode.SIGNATURE and "signed by an unknown key" in strangers.stderr, (
        strangers.stderr
    )
    assert not (tmp_path / "third" / run.name).exists()

    # edited and sealed again without the key: the signature no longer verifies
    for path in [run, *run.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    result = json.loads((run / "result.json").read_text())
    result["weights_sha256"] = "1" * 64
    (run / "result.json").write_text(json.dumps(result))
    manifest = json.loads((run / "manifest.json").read_text())
    from launcher.record import hashing

    manifest["files"]["result.json"] = hashing.file_sha256(run / "result.json")
    (run / "manifest.json").write_text(json.dumps(manifest, sort_keys=True, indent=2) + "\n")
    for argv in (("verify", str(run)), ("replay", str(run)), ("compare", str(run), str(replay_run))):
        refused = launch(*argv)
        assert refused.returncode == ExitCode.SIGNATURE, (argv, refused.stdout[-1000:], refused.stderr[-1000:])
        assert run.name in refused.stderr and "does not verify" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
