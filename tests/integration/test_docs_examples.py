"""The console examples of the README and docs/*.md, run for real (docs/testing.md, "Docs
that are run").

Each page's examples run in page order, in one fresh project directory with its own store
(``./runs``), each example in one bash process (so ``cd`` and ``echo $?`` work as in a
terminal), with ``launch`` being this tree's launcher. What an example needs but does not
show (the script ``train.py`` of the README, two runs for ``compare``) is made by the
example's entry in ``SETUP`` before it runs; what it prints is matched against the page
with ``tests/docexamples.py`` (run ids, digests and metrics as placeholders). A page passes
when every example prints what the page says, and fails listing every example that did not.

Kept short on purpose: ``PATHS`` (a documented path and the directory that stands for it
here), ``COMMANDS`` (a command that cannot run as written, and what runs in its place),
``SKIP`` (a command that cannot run here, with the reason). An example repeated verbatim
in a later page runs once, in the first.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from tests import docexamples as dx

pytestmark = pytest.mark.slow

REPO = Path(__file__).parent.parent.parent
DATA = REPO / "tests" / "data"
SCRIPTS = Path(__file__).parent / "scripts"
PAGES = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))]
DONE = "@@docs-example-done@@"

# TensorFlow's C++ logging on stderr (absl), before the launcher can filter it: not the
# launcher's output, dropped before matching.
TF_NOISE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|[IWE]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [\w.]+:\d+\] .*)$"
)


def _gpu_here() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    return done.returncode == 0 and "GPU" in done.stdout


def _port_9_refuses() -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", 9)) != 0


def _optuna_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is not None


# A command that cannot run here, as written in the page -> why (its documented output is not checked).
SKIP: dict[tuple[str, str], str] = {
    (
        "docs/gpu.md",
        "launch train.epochs=1 runtime=docker image=tf-gpu image.base=local",
    ): "needs a Docker daemon and its tf-gpu image (minutes to build; tests/unit/test_gpu.py holds the refusal)",
    ("docs/gpu.md", "nox -s gpu_image"): "builds the 6.8 GB tf-gpu image (minutes; Docker)",
    (
        "docs/verdicts.md",
        "launch replay runs/20261126-154001-63eb28",
    ): "needs a machine that refuses user namespaces (tests/integration/test_replay_absolute_data.py forces that "
    "refusal and checks this message)",
}
for _cmd in (
    "launch com<Tab>                ->  compare  completion",
    "launch image <Tab>             ->  build  list  prune  bootstrap-base  lock",
    "launch runs --status <Tab>     ->  running  complete  failed  interrupted  abandoned",
    "launch runs store.r<Tab>       ->  store.require_signed=  store.root=",
    "launch determinism=s<Tab>      ->  determinism=seeded  determinism=strict",
    "launch train.ep<Tab>           ->  train.epochs=",
    "launch -cd conf train=<Tab>    ->  train=custom  train=mnist  train=script  train=tiny",
):
    SKIP[("docs/hydra.md", _cmd)] = (
        "Tab completion needs an interactive shell (tests/unit/test_completion.py drives it)"
    )
if _optuna_installed():
    SKIP[
        (
            "docs/errors.md",
            "launch -m hydra/sweeper=optuna 'train.learning_rate=interval(0.0001,0.01)'     "
            "# without the extra installed",
        )
    ] = "the optuna extra is installed here"
else:
    for _cmd in (
        "launch -m hydra/sweeper=optuna 'train.learning_rate=choice(0.0,0.1)'",
        "launch -m hydra/sweeper=optuna sweep.objective=acc 'train.learning_rate=choice(0.01,0.1)'",
    ):
        SKIP[("docs/sweeps.md", _cmd)] = "the optuna extra is not installed here"
if len(os.sched_getaffinity(0)) != 2 or _gpu_here():
    SKIP[("docs/sweeps.md", "launch -m runtime.slots=4 '+seed=range(4)'     # on a 2-core machine")] = (
        "the refusal names this machine's cores and GPUs; the page shows 2 cores and no GPU"
    )
if os.geteuid() != 0:  # docs/fingerprint.md: "Writing into a sealed run needs its write permissions back first"
    for _cmd in (
        "echo step=4 > runs/20261123-180100-442ec6/outputs/.state",
        'launch compare runs/20261123-180100-442ec6 runs/20261123-180100-442ec6; echo "exit $?"',
        "echo step=3 > runs/20261123-180100-442ec6/outputs/.state; touch runs/20261123-180100-442ec6/.added",
        'launch replay runs/20261123-180100-442ec6; echo "exit $?"',
        'launch resume runs/20261123-180100-442ec6; echo "exit $?"',
    ):
        SKIP[("docs/fingerprint.md", _cmd)] = "writing into a sealed run needs root"
if shutil.which("python3.11") is None:  # the session's interpreter (noxfile.py)
    SKIP[("docs/gpu.md", "nox -s gpu_acceptance")] = "nox's gpu_acceptance session needs python3.11"
if _gpu_here():
    for _cmd in (
        "CUDA_VISIBLE_DEVICES=0 launch train.epochs=1",
        "python benchmarks/gpu_acceptance.py",
        "echo $?",
        "nox -s gpu_acceptance",
    ):
        SKIP[("docs/gpu.md", _cmd)] = "this machine has a GPU; the page shows a machine without one"
if not _port_9_refuses():  # the MLflow server that is not there, and the offline example's dead proxy
    SKIP[
        (
            "docs/tracking.md",
            "launch tracking=mlflow tracking.uri=http://127.0.0.1:9 train.epochs=2    # nothing listens there",
        )
    ] = "something listens on port 9 here"
    SKIP[("docs/errors.md", "launch train.data=full        # offline, nothing in ~/.keras/datasets")] = (
        "something listens on port 9 here (the example is made offline with a proxy there)"
    )

# A command that cannot run as written -> what runs in its place (same effect, no editor).
COMMANDS = {
    "vim helper.py; rm train.py digits.npz; cd /elsewhere": "printf '# edited\\n' >> helper.py; rm train.py digits.npz; cd /elsewhere",  # noqa: E501
}


@dataclass
class Page:
    """One page's run: its project directory and what its placeholders stand for."""

    name: str
    root: Path  # the test's temporary directory
    bindings: dx.Bindings = field(default_factory=dx.Bindings)

    @property
    def project(self) -> Path:
        return self.root / "home" / "project"

    def paths(self) -> dict[str, str]:
        """A documented path -> the directory that stands for it here (commands and output)."""
        return {
            "~/project": str(self.project),
            "/home/me/project": str(self.project),
            "/tmp/i13/proj": str(self.project),
            "/elsewhere": str(self.root / "elsewhere"),
            "/mnt/archive": str(self.root / "archive"),
            "/root/.keras": str(self.root / "home" / ".keras"),
        }

    def env(self) -> dict[str, str]:
        shim = self.root / "bin"
        if not shim.exists():
            shim.mkdir()
            (shim / "launch").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m launcher "$@"\n')
            (shim / "launch").chmod(0o755)
            (shim / "python").symlink_to(sys.executable)
        paths = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        return {
            **os.environ,
            "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
            "PYTHONUNBUFFERED": "1",
        }

    def launch(self, *args: str) -> str:
        """A set-up run (not shown in the page): ``launch ARGS`` in the project; its run id."""
        done = subprocess.run(
            ["launch", *args],
            cwd=self.project,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )
        last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        found = dx.RUN_ID.search(last)
        assert done.returncode == 0 and " complete; " in last and found, done.stdout[-2000:] + done.stderr[-2000:]
        return found.group()

    def bind(self, suffix: str, run_id: str) -> None:
        """The documented run ``…-suffix`` is the real ``run_id`` (a set-up's run)."""
        self.bindings = dx.Bindings({**self.bindings.runs, suffix: run_id}, self.bindings.values)

    def run_of(self, suffix: str) -> str:
        return self.bindings.runs[suffix]


# ---------------------------------------------------------------- what an example needs
def _keras_script(page: Page, example: dx.Example) -> None:
    shutil.copy(SCRIPTS / "keras_fit.py", page.project / "train.py")
    shutil.copy(DATA / "mnist-small" / "mnist-small.npz", page.project / "mnist.npz")
    page.bind("629d6e", page.launch("train=script", "train.script=train.py", "train.args=[mnist.npz]"))


def _helper_script(page: Page, example: dx.Example | None = None) -> None:
    shutil.copy(SCRIPTS / "with_helper.py", page.project / "train.py")
    shutil.copy(SCRIPTS / "helper.py", page.project / "helper.py")
    shutil.copy(DATA / "mnist-small" / "mnist-small.npz", page.project / "digits.npz")
    (page.root / "elsewhere").mkdir(exist_ok=True)


def _second_default_run(page: Page, example: dx.Example) -> None:
    page.bind("97b3f7", page.launch())


def _threads_pair(page: Page, one: str, two: str) -> None:
    """Two runs that differ only in ``determinism.intra_op_threads`` (1 and 2)."""
    first = page.bindings.runs.get("a61944") or page.launch()
    page.bind(one, first)
    page.bind(two, page.launch("determinism.intra_op_threads=2"))


def _refused_pair(page: Page, example: dx.Example) -> None:
    _threads_pair(page, "75c234", "99f6d7")


def _forced_pair(page: Page, example: dx.Example) -> None:
    _threads_pair(page, "c4e142", "b60b21")
    weights = [
        re.search(r'"weights_sha256": "(\w+)"', (page.project / "runs" / page.run_of(s) / "result.json").read_text())
        for s in ("c4e142", "b60b21")
    ]
    if weights[0].group(1) == weights[1].group(1):
        pytest.skip("2 intra-op threads give the bits of 1 on this CPU: the page's forced compare needs them to differ")


def _too_large(page: Page, example: dx.Example) -> None:
    """A run whose data file was over store.snapshot_max_mb, then moved to /mnt/archive."""
    _helper_script(page)
    page.bind(
        "7d836f",
        page.launch("train=script", "train.script=train.py", "train.args=[digits.npz]", "store.snapshot_max_mb=0"),
    )
    (page.root / "archive").mkdir(exist_ok=True)
    shutil.move(page.project / "digits.npz", page.root / "archive" / "digits.npz")


def _bad_data(page: Page, example: dx.Example) -> None:
    p = page.project
    np.savez(p / "wrong.npz", a=np.zeros(3))
    objects = np.empty(1, dtype=object)
    objects[0] = {"not": "numbers"}
    np.savez(
        p / "objects.npz",
        x_train=objects,
        y_train=np.zeros(1, np.uint8),
        x_test=np.zeros((1, 28, 28), np.uint8),
        y_test=np.zeros(1, np.uint8),
    )
    (p / "empty-dir").mkdir()
    shutil.copytree(DATA / "mnist-idx", p / "idx-dir")
    labels = p / "idx-dir" / "train-labels-idx1-ubyte.gz"
    raw = gzip.decompress(labels.read_bytes())
    labels.write_bytes(gzip.compress(raw[:4] + (100).to_bytes(4, "big") + raw[8:108]))  # 100 labels for 200 images


def _migration(page: Page, example: dx.Example) -> None:
    for script in ("tf1_mlp.py", "tf2_port.py"):
        shutil.copy(SCRIPTS / script, page.project / script)
    shutil.copy(DATA / "mnist-small" / "mnist-small.npz", page.project / "mnist.npz")


def _hidden_state(page: Page, example: dx.Example) -> None:
    (page.project / "hidden_state.py").write_text(
        "import launcher\n\n(launcher.output_dir() / '.state').write_text('step=3\\n')\n"
    )


def _tiny_config(page: Page, example: dx.Example) -> None:
    """conf/train/tiny.yaml as the page shows it (``cat``)."""
    (page.project / "conf" / "train").mkdir(parents=True, exist_ok=True)
    (page.project / "conf" / "train" / "tiny.yaml").write_text("\n".join(example.commands[0].expected) + "\n")


# (page, the example's first command) -> its set-up: what it needs but does not show
SETUP = {
    ("README.md", "launch train=script train.script=train.py 'train.args=[mnist.npz]'"): _keras_script,
    ("README.md", "launch compare runs/20261123-193734-a61944 runs/20261123-193740-97b3f7"): _second_default_run,
    ("README.md", "launch compare runs/…-75c234 runs/…-99f6d7"): _refused_pair,
    ("README.md", "launch train=script train.script=train.py 'train.args=[digits.npz]'"): _helper_script,
    ("docs/verdicts.md", "launch compare runs/…-75c234 runs/…-99f6d7"): _refused_pair,
    ("docs/verdicts.md", "launch train=script train.script=train.py 'train.args=[digits.npz]'"): _helper_script,
    ("docs/verdicts.md", "launch replay runs/20261124-120044-7d836f"): _too_large,
    (
        "docs/verdicts.md",
        "launch compare runs/20261123-112107-c4e142 runs/20261123-112112-b60b21 --allow-mismatch   "
        "# intra_op_threads 1 vs 2",
    ): _forced_pair,
    ("docs/errors.md", "launch train.data=/etc/passwd"): _bad_data,
    (
        "docs/fingerprint.md",
        "launch train=script train.script=hidden_state.py     # writes outputs/.state",
    ): _hidden_state,
    ("docs/hydra.md", "cat conf/train/tiny.yaml"): _tiny_config,
    (
        "docs/tf1-migration.md",
        'MIGRATION="determinism.random_ops=num_random_ops train.save_weights=true determinism.trace_every=1"',
    ): _migration,
}
# The command's environment beyond the page's: "offline, nothing in ~/.keras/datasets".
OFFLINE = {
    "HOME": "{root}/home",
    "https_proxy": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "no_proxy": "",
    "NO_PROXY": "",
}
ENV = {"launch train.data=full        # offline, nothing in ~/.keras/datasets": OFFLINE}
# Pages whose examples run in the repository (they run its benchmarks and nox sessions).
IN_REPO = {"docs/gpu.md"}


# The one digest a page states as a fact of the machine rather than of one run: the README's "Run it
# again and you get the same weights_sha256 (on this kind of machine: x86-64 with the same CPU features
# and packages)". It is compared literally where this machine is the page's kind (as its default run's
# fingerprint says), and only for consistency elsewhere.
PAGE_DEFAULT = ("README.md", "a61944", "e6a9b0f001fb38e9c8277cf9aa2e5b5c4a7d5081c8a992fa9c180486cabc6186")
PAGE_MACHINE = {
    "isa": [
        "avx",
        "avx2",
        "avx512_bf16",
        "avx512_bitalg",
        "avx512_vbmi2",
        "avx512_vnni",
        "avx512_vpopcntdq",
        "avx512bw",
        "avx512cd",
        "avx512dq",
        "avx512f",
        "avx512ifma",
        "avx512vbmi",
        "avx512vl",
        "f16c",
        "fma",
        "sse4_1",
        "sse4_2",
    ],
    "machine": "x86_64",
    "tensorflow": "2.21.0",
    "keras": "3.15.1",
    "numpy": "2.4.6",
}


def _default_digest_problem(page: Page) -> str | None:
    """Where this machine is the README's kind, the default run's digest must be the page's."""
    name, suffix, digest = PAGE_DEFAULT
    if page.name != name or suffix not in page.bindings.runs:
        return None
    run = page.project / "runs" / page.run_of(suffix)
    fp = json.loads((run / "fingerprint.json").read_text())
    here = {"isa": fp["hardware"]["cpu"].get("isa"), **{k: fp["software"].get(k) for k in PAGE_MACHINE if k != "isa"}}
    if here != PAGE_MACHINE:
        return None
    printed = json.loads((run / "result.json").read_text())["weights_sha256"]
    return (
        None
        if printed == digest
        else (
            f"{name}: on the page's kind of machine the default run's "
            f"weights_sha256 is {printed}, the page says {digest}"
        )
    )


# ---------------------------------------------------------------- running an example
def _examples() -> dict[str, list[dx.Example]]:
    """Every page's examples, an example repeated verbatim in a later page kept in the first."""
    seen: set[str] = set()
    pages: dict[str, list[dx.Example]] = {}
    for name in PAGES:
        pages[name] = []
        for example in dx.extract((REPO / name).read_text(), name):
            if example.text() not in seen:
                seen.add(example.text())
                pages[name].append(example)
    return pages


def _map_paths(text: str, paths: dict[str, str]) -> str:
    for documented, here in paths.items():
        text = text.replace(documented, here)
    return text


class Shell:
    """One bash process for one example: commands in, each one's output (stdout and stderr) out."""

    def __init__(self, cwd: Path, env: dict[str, str]):
        self.proc = subprocess.Popen(
            ["bash", "--norc", "--noprofile"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    def run(self, command: str, env: dict[str, str], timeout: float = 600) -> list[str]:
        if env:  # in a subshell: the environment is this command's only
            command = "( " + "".join(f"export {k}='{v}'; " for k, v in env.items()) + command + "\n)"
        # braces, not a subshell: `cd` stays; stdin is not the script; $? survives the marker
        self.proc.stdin.write(f"{{ {command}\n}} </dev/null\n__rc=$?; printf '\\n{DONE}\\n'; (exit $__rc)\n")
        self.proc.stdin.flush()
        timer = threading.Timer(timeout, lambda: os.killpg(self.proc.pid, 9))
        timer.start()
        lines: list[str] = []
        try:
            for line in self.proc.stdout:
                if line.rstrip("\n") == DONE:
                    return lines
                lines.append(line.rstrip("\n"))
            raise AssertionError(f"`{command}` did not finish within {timeout} s:\n" + "\n".join(lines[-30:]))
        finally:
            timer.cancel()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def _run_example(page: Page, example: dx.Example) -> list[str]:
    """Run one example; the mismatches found (empty when it prints what the page says)."""
    setup = SETUP.get((page.name, example.commands[0].text))
    if setup is not None:
        setup(page, example)
    paths = page.paths()
    cwd = REPO if page.name in IN_REPO else page.project
    shell = Shell(cwd, page.env())
    problems, skipped = [], False
    try:
        for command in example.commands:
            reason = SKIP.get((page.name, command.text))
            if reason or (skipped and command.text == "echo $?"):  # a skipped command's exit code
                skipped = True
                continue
            skipped = False
            written = _map_paths(dx.substitute_runs(COMMANDS.get(command.text, command.text), page.bindings), paths)
            env = {k: v.format(root=page.root) for k, v in ENV.get(command.text, {}).items()}
            printed = [line for line in shell.run(written, env) if not TF_NOISE.match(line)]
            expected = [_map_paths(line, paths) for line in command.expected]
            after = dx.match(expected, printed, page.bindings)
            if after is None:
                problems.append(
                    f"{page.name}:{command.line}: $ {command.text}\n"
                    f"{dx.first_difference(expected, printed, page.bindings)}\n"
                    + "  all printed:\n"
                    + "".join(f"    {x}\n" for x in printed)
                )
                break  # the rest of the example depends on this command
            page.bindings = after
    finally:
        shell.close()
    return problems


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(p, marks=pytest.mark.long(seconds=100)) if p == "README.md" else p
        for p in PAGES
        if any(True for _ in dx.extract((REPO / p).read_text(), p))
    ],
)
def test_the_pages_console_examples_print_what_they_say(name, tmp_path):
    examples = _examples()[name]
    if not examples:
        pytest.skip(f"every example of {name} repeats one of an earlier page")
    page = Page(name, tmp_path)
    page.project.mkdir(parents=True)
    everything = dx.extract((REPO / name).read_text(), name)  # with the repeats of earlier pages
    written, firsts = {c.text for e in everything for c in e.commands}, {e.commands[0].text for e in everything}
    stale = [key for key in (*SKIP, *SETUP) if key[0] == name and key[1] not in (firsts if key in SETUP else written)]
    assert not stale, f"listed in the test but no longer a command of {name} (update the list): {stale}"
    problems = []
    for example in examples:
        problems += _run_example(page, example)
    problems += filter(None, [_default_digest_problem(page)])
    assert not problems, f"{len(problems)} example(s) of {name} print other than the page says:\n\n" + "\n".join(
        problems
    )
