"""A run travels (issues 41, 46): `launch pack RUN --with-env` makes one file; on a machine with only
Python, docs/sharing.md's "Replay elsewhere" commands, run as written (a fresh venv, the archive's
wheels installed with no index, `launch replay FILE`), say REPRODUCED for a script importing matplotlib
and for a notebook, the original store, script and data gone. Signed runs say who sealed them in compare,
replay and verify; a forged re-sealed run and a key not in allowed_signers are refused.

Real training, a real venv and real pip (no index: `PIP_NO_INDEX=1`, no pip configuration), real
ssh-keygen keys.
"""

from __future__ import annotations

import json
import os
import re
import shlex
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


REPO = Path(__file__).parent.parent.parent
NOTEBOOK = Path(__file__).parent / "notebooks" / "train.ipynb"
DOC_ARCHIVE = "run.launch.tar.gz"  # the archive's name in docs/sharing.md's commands


def _fenced(text: str, after: str) -> list[str]:
    """The lines of the first ```bash block after the line ``after`` of a page."""
    lines = text[text.index(after) :].splitlines()
    start = lines.index("```bash") + 1
    return lines[start : lines.index("```", start)]


def _command(line: str) -> str:
    return line.split("  #")[0].strip()


def documented_recipe() -> tuple[list[str], list[str]]:
    """docs/sharing.md's commands: ``launch pack`` (its first block) and the replay elsewhere (its
    block under "Replay elsewhere"), each as written; the README's "Hand a run to someone else" must
    name the same pack, install and replay commands, so the two cannot drift from what runs here."""
    page = (REPO / "docs" / "sharing.md").read_text()
    pack = shlex.split(_command(next(ln for ln in _fenced(page, "# Sharing a run") if ln.startswith("launch pack "))))
    recipe = _fenced(page, "## Replay elsewhere")
    readme = (REPO / "README.md").read_text()
    paragraph = next(p for p in readme.split("\n\n") if p.startswith("**Hand a run to someone else.**"))
    spans = re.findall(r"`([^`]+)`", paragraph)
    assert spans[0] == "launch pack RUN --with-env" and pack[:2] == ["launch", "pack"] and "--with-env" in pack
    install = next(c for c in map(_command, recipe) if c.startswith("pip install"))
    assert spans[1] == install and "--no-index" in install, (spans, install)
    replay = next(c for c in map(_command, recipe) if c.startswith("launch replay"))
    assert spans[2].replace("FILE", DOC_ARCHIVE) == replay, (spans, replay)
    assert " then " in paragraph.split(spans[1])[1].split(spans[2])[0] and "REPRODUCED" in paragraph
    return pack, recipe


@pytest.mark.long(seconds=180)
def test_the_documented_recipe_replays_a_matplotlib_script_and_a_notebook_reproduced_in_one_offline_venv(
    launch, tmp_path
):
    """docs/sharing.md's commands as written (the README's, checked the same): a script importing
    matplotlib and Pillow, and a notebook (IPython, nbformat), each packed --with-env; elsewhere, in
    one fresh venv with no index and an empty HOME, the "Replay elsewhere" block for each archive."""
    pack, recipe = documented_recipe()
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(SCRIPTS / "plot_loss.py", project / "train.py")
    shutil.copy(SCRIPTS / "helper.py", project / "helper.py")
    shutil.copy(DATA / "mnist-small" / "mnist-small.npz", project / "digits.npz")
    shutil.copy(NOTEBOOK, project / "train.ipynb")
    store = tmp_path / "store"
    script = launch(
        "train=script", "train.script=train.py", "train.args=[digits.npz]", f"store.root={q(store)}", cwd=project
    )
    notebook = launch(
        "train=notebook",
        "train.notebook=train.ipynb",
        "train.params={data: digits.npz, epochs: 1}",
        f"store.root={q(store)}",
        cwd=project,
    )
    runs = {"script": run_dir_of(script), "notebook": run_dir_of(notebook)}
    used = {
        kind: set(json.loads((run / "fingerprint.json").read_text())["software"]["distributions"])
        for kind, run in runs.items()
    }
    assert {"matplotlib", "pillow"} <= used["script"] and {"ipython", "nbformat"} <= used["notebook"], used
    archives = {kind: tmp_path / "shipped" / f"{kind}.launch.tar.gz" for kind in runs}
    (tmp_path / "shipped").mkdir()
    started = time.monotonic()
    for kind, run in runs.items():
        argv = [str(run) if a.startswith("runs/") else str(archives[kind]) if a == DOC_ARCHIVE else a for a in pack]
        packed = launch(*argv[1:])
        assert packed.returncode == 0, packed.stdout[-2000:] + packed.stderr[-2000:]
        assert "wheel(s)" in packed.stdout and packed.stdout.strip().endswith("unsigned")
    pack_s = time.monotonic() - started

    for gone in (store, project):  # the original store, script, helper, notebook and data
        for path in [gone, *gone.rglob("*")]:
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | stat.S_IWUSR)
        shutil.rmtree(gone)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "home").mkdir(parents=True)
    python = tmp_path / "python-only"  # `python` is this interpreter (the run's Python), and nothing else
    python.mkdir()
    (python / "python").symlink_to(sys.executable)
    env = offline_env(elsewhere / "venv", elsewhere / "home")
    env["PATH"] = f"{python}:/usr/bin:/bin"  # no venv yet: the recipe makes it and activates it
    # pip's byte-compiling of every module it installs (TensorFlow's thousands) is a cache, not the
    # recipe: skipped here, the interpreter compiles what the replay imports.
    env["PIP_NO_COMPILE"] = "1"

    def recipe_for(kind: str) -> subprocess.CompletedProcess:
        """The block as docs/sharing.md writes it, for one archive, in ``elsewhere``: the venv made
        by the first is the one the second reuses (``python -m venv`` keeps what it holds)."""
        shutil.rmtree(elsewhere / "wheels", ignore_errors=True)  # only this archive's wheels
        block = "\n".join(recipe).replace(DOC_ARCHIVE, shlex.quote(str(archives[kind])))
        return subprocess.run(
            ["bash", "-e", "-c", f"{block}\ncommand -v launch >&2"],
            cwd=elsewhere,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )

    started = time.monotonic()
    done = {kind: recipe_for(kind) for kind in runs}
    recipe_s = time.monotonic() - started
    store_here = elsewhere / "runs"
    for kind, run in runs.items():
        out = done[kind]
        assert out.returncode == 0, kind + out.stdout[-3000:] + out.stderr[-3000:]
        assert out.stderr.strip().endswith(str(elsewhere / "venv" / "bin" / "launch"))  # the venv's, from the archive
        assert f"run {run.name} unpacked into {store_here}; unsigned; its " in out.stdout, out.stdout[-3000:]
        assert "\nREPRODUCED: replay " in out.stdout and f"of {store_here / run.name}\n" in out.stdout, out.stdout
        assert "the launcher" not in out.stderr  # the launcher the job imported is the venv's, from the archive
    assert "1 output file" in done["notebook"].stdout.strip().splitlines()[-1]  # the executed notebook too
    venv_launch = str(elsewhere / "venv" / "bin" / "launch")
    env["PATH"] = f"{elsewhere / 'venv' / 'bin'}:/usr/bin:/bin"
    listed = subprocess.run([venv_launch, "runs"], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert all(r.name in listed.stdout for r in runs.values()) and "4 run(s)" in listed.stdout, listed.stdout

    def replay(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [venv_launch, "replay", str(archives["script"]), *extra],
            cwd=elsewhere,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )

    # --rebuild from the archive's wheels, with no index: the venv's termcolor made unlike the run's
    tamper_record(elsewhere / "venv", "termcolor")
    refused = replay()
    assert refused.returncode == 3 and "software.distributions.termcolor" in refused.stdout, refused.stdout[-2000:]
    rebuilt = replay("--rebuild")
    assert rebuilt.returncode == 0, rebuilt.stdout[-3000:] + rebuilt.stderr[-3000:]
    assert f"run {runs['script'].name} already in" in rebuilt.stdout and "\nREPRODUCED: " in rebuilt.stdout
    assert "termcolor==" in rebuilt.stderr  # what the overlay installed
    sizes = ", ".join(f"{a.stat().st_size / (1 << 20):.0f} MiB" for a in archives.values())
    print(
        f"\npack --with-env x2 {pack_s:.1f} s; the recipe x2 (venv, pip install, replay) {recipe_s:.1f} s; "
        f"archives {sizes}"
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
