"""True verdicts on everyday scripts (issue 26): each test runs an ordinary script, written
for the test and not for the launcher, twice, and checks the verdict is the true one. (Tests
that ask different questions of one kind of script share its runs: ``reading_runs``,
``plain_run``, ``exiting_run``.)"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import DATA, is_run, q, run_dir_of

pytestmark = pytest.mark.slow

READS_ITS_INPUTS = """import os
os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"  # too late: TensorFlow read it when it started
import runpy
import numpy as np
import keras

settings = runpy.run_path("settings.py")  # a config file that is Python, run rather than imported
BATCH = 32
exec(open("config/exp.py").read())  # nanoGPT's configurator: Python read as text, then run
lr = float(os.environ.get("LR", str(settings["LR"])))  # hyperparameters from the environment win
batch = int(os.getenv("BATCH_SIZE", str(BATCH)))
token = os.environ.get("WANDB_API_KEY")  # read, never stored
with np.load(os.path.expanduser("~/.cache/myproject/digits.npz")) as f:  # where download helpers keep data
    x, y = f["x_train"][:256].astype("float32") / 255.0, f["y_train"][:256]
model = keras.Sequential([keras.Input((28, 28)), keras.layers.Flatten(), keras.layers.Dense(10)])
loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
model.compile(keras.optimizers.SGD(lr), loss, jit_compile=True)  # asked for: is it in effect?
model.fit(x, y, epochs=1, batch_size=batch, verbose=0)
"""
SETTINGS = {"train.py": READS_ITS_INPUTS, "settings.py": "LR = 0.1\n", "config/exp.py": "BATCH = 64\n"}


@pytest.fixture(scope="module")
def reading_runs(tmp_path_factory) -> dict:
    """``READS_ITS_INPUTS`` (settings run with ``runpy.run_path`` and ``exec``, hyperparameters
    and a secret from the environment, data under ``~/.cache/<project>/``, settings made too
    late) run in its project, beside the home that holds its data, not inside it: twice as it
    is; once with settings.py edited; replayed (with LR changed, then as it ran, once its files
    are gone); once with config/exp.py, the cached data, LR and BATCH_SIZE all changed. Made once
    for the four tests below, each of which had its own script and runs: a compare names every
    key field that differs, so the last run answers, against the first, for each of its changes."""
    from tests.conftest import START_ENV, run_launch

    root = tmp_path_factory.mktemp("reads")
    home = root / "home"
    (home / ".cache" / "myproject").mkdir(parents=True)
    data = home / ".cache" / "myproject" / "digits.npz"
    shutil.copy(DATA / "mnist-small" / "mnist-small.npz", data)
    project = root / "project"  # beside the home, not around it: the data lies outside the project
    (project / "config").mkdir(parents=True)
    store = root / "store"
    base = {k: v for k, v in START_ENV.items() if k not in ("LR", "BATCH_SIZE")}  # BATCH_SIZE unset
    env = {"HOME": str(home), "XDG_CACHE_HOME": "", "WANDB_API_KEY": "s3cr3t-value", "LR": "0.01"}

    def write(**changed: str) -> None:
        for name, text in {**SETTINGS, **changed}.items():
            (project / name).write_text(text)

    def launch(*args, cwd=project, **changed_env):
        return run_launch(*args, cwd=cwd, base_env=base, env={**env, **changed_env})

    def run(**changed_env) -> Path:
        return run_dir_of(launch("train=script", "train.script=train.py", f"store.root={q(store)}", **changed_env))

    def outcome(done) -> dict:
        return {"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}

    write()
    out = {"data": data, "data_sha": _sha(data), "exp_sha": _sha(project / "config" / "exp.py")}
    out["a"], out["b"] = run(), run()
    write(**{"settings.py": "LR = 0.01\n"})
    out["settings"] = run()
    write()
    out["replay_lr"] = outcome(launch("replay", out["a"], cwd=None, LR="0.001"))
    for written in SETTINGS:
        (project / written).unlink()
    out["replay"] = outcome(launch("replay", out["a"], cwd=None))
    write(**{"config/exp.py": "BATCH = 32\n"})  # the data read as text, the data under the cache, and
    with np.load(data) as f:
        arrays = dict(f)
    arrays["x_train"][0, 0, 0] += 1
    np.savez(data, **arrays)
    out["changed"] = run(LR="0.001", BATCH_SIZE="32")  # the environment: each is named against "a"
    return out


@pytest.mark.long(seconds=85)
def test_data_under_the_users_cache_is_in_the_key(launch, reading_runs):
    """A data set under ~/.cache/<project>/ changed between two runs: REFUSED naming it, not
    DIFFERENT; the tools' own caches there (matplotlib's font list) never count."""
    a, b, data = reading_runs["a"], reading_runs["b"], reading_runs["data"]
    assert json.loads((a / "fingerprint.json").read_text())["data"] == {
        str(data): reading_runs["data_sha"],
        "config/exp.py": reading_runs["exp_sha"],  # read as text by exec (test_a_settings_file_run_...)
    }
    same = launch("compare", a, b)
    assert same.returncode == 0 and same.stdout.startswith("IDENTICAL"), same.stdout
    refused = launch("compare", a, reading_runs["changed"])  # config/exp.py, LR, BATCH_SIZE too
    assert refused.returncode == 3 and f"data.{data}" in refused.stdout, refused.stdout


PLAIN = """import os
import numpy as np
import keras

with np.load("digits.npz") as f:
    x, y = f["x_train"][:256].astype("float32") / 255.0, f["y_train"][:256]
model = keras.Sequential([keras.Input((28, 28)), keras.layers.Flatten(), keras.layers.Dense(10)])
model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x, y, epochs=1, batch_size=64, verbose=0)
"""


def _script_run_once(shared_root: Path, label: str, name: str, text: str) -> Path:
    """The script ``text``, as ``name`` beside ``digits.npz`` in a project directory, run once per
    session (``build_once`` under ``label``), alone in its store: its run."""
    from tests.conftest import START_ENV, build_once, run_launch

    def build(directory: Path) -> dict:
        project = directory / "project"
        project.mkdir()
        shutil.copy(DATA / "mnist-small" / "mnist-small.npz", project / "digits.npz")
        (project / name).write_text(text)
        done = run_launch(
            "train=script",
            f"train.script={name}",
            f"store.root={q(directory / 'store')}",
            cwd=project,
            base_env=START_ENV,
        )
        return {"run": str(run_dir_of(done))}

    return Path(build_once(shared_root, label, build)["run"])


@pytest.fixture(scope="session")
def plain_run(shared_root) -> Path:
    """``plain.py`` (``PLAIN``: a Keras fit on ``digits.npz`` beside it) run once in its project
    directory, the run alone in its store (shared by the tests of this module)."""
    return _script_run_once(shared_root, "everyday-plain", "plain.py", PLAIN)


def _sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_script_kept_its_trained_values_and_tolerance_compares_them(launch, tmp_path, plain_run):
    """Script runs keep weights.npz by default; --tolerance compares the values, and never calls
    runs EQUIVALENT whose weights it could not compare."""
    shutil.copy(DATA / "mnist-small" / "mnist-small.npz", tmp_path / "digits.npz")
    (tmp_path / "plain.py").write_text(PLAIN)
    store = tmp_path / "store"
    a = plain_run  # the defaults (shared)
    b = run_dir_of(
        launch(
            "train=script",
            "train.script=plain.py",
            f"store.root={q(store)}",
            "+seed=1",
            "train.save_weights=false",
            cwd=tmp_path,
        )
    )
    assert json.loads((a / "result.json").read_text())["weights_file"] == "weights.npz"
    with np.load(a / "weights.npz") as f:
        assert len(f.files) == 2  # the Dense layer's kernel and bias
    done = launch("compare", a, b, "--allow-mismatch", "--tolerance", "1,1")
    assert done.returncode == 1 and "NOT EQUIVALENT" in done.stdout and "were not kept" in done.stdout, done.stdout
    assert os.path.getsize(a / "weights.npz") > 0


SAVES_OUTPUTS = """import os
import sys
import numpy as np
import keras
import launcher

out = launcher.output_dir()
with np.load("digits.npz") as f:
    x, y = f["x_train"][:256].astype("float32") / 255.0, f["y_train"][:256]
model = keras.Sequential([keras.Input((28, 28)), keras.layers.Flatten(), keras.layers.Dense(10)])
model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
callbacks = [keras.callbacks.ModelCheckpoint(str(out / "best.keras")),
             keras.callbacks.TensorBoard(str(out / "logs")),
             keras.callbacks.CSVLogger(str(out / "log.csv"))]
model.fit(x, y, epochs=2, batch_size=64, verbose=0, callbacks=callbacks)
model.save(out / "model.keras")
model.save_weights(out / "final.weights.h5")
if len(sys.argv) > 1:  # something that is not the training: the process id
    (out / "pid.txt").write_text(str(os.getpid()))
"""


def test_outputs_with_times_in_them_are_compared_by_what_they_mean(launch, tmp_path):
    """model.keras, a ModelCheckpoint, TensorBoard logs and a CSV log under output_dir(), run
    twice: IDENTICAL (the archives hold their save time, the event files their host, pid and
    wall times). A file that really differs is named, and not called a determinism bug."""
    shutil.copy(DATA / "mnist-small" / "mnist-small.npz", tmp_path / "digits.npz")
    (tmp_path / "train.py").write_text(SAVES_OUTPUTS)
    store = tmp_path / "store"

    def run(*args):
        return run_dir_of(
            launch(
                "train=script",
                "train.script=train.py",
                f"store.root={q(store)}",
                f"train.args=[{','.join(args)}]",
                cwd=tmp_path,
            )
        )

    a, b = run(), run()
    raw_a = json.loads((a / "result.json").read_text())["outputs"]
    raw_b = json.loads((b / "result.json").read_text())["outputs"]
    assert raw_a != raw_b  # the bytes do differ ...
    same = launch("compare", a, b)
    assert same.returncode == 0 and same.stdout.startswith("IDENTICAL"), same.stdout  # ... the meaning does not
    content = json.loads((a / "result.json").read_text())["outputs_content"]
    assert content["model.keras"]["kind"] == "keras archive" and content["final.weights.h5"]["kind"] == "hdf5"
    assert content["logs/train/events.out.tfevents.*"]["kind"] == "tensorboard events"

    c, d = run("pid"), run("pid")
    differ = launch("compare", c, d)
    assert differ.returncode == 1, differ.stdout
    assert "weights, metrics and trace are bitwise equal" in differ.stdout and "outputs/pid.txt" in differ.stdout
    assert "determinism bug" not in differ.stdout


@pytest.mark.long(seconds=85)
def test_hyperparameters_from_the_environment_are_in_the_key(launch, reading_runs):
    """LR=0.001 vs LR=0.01, and BATCH_SIZE unset vs 32, read with os.environ/os.getenv: REFUSED,
    naming the variable, never DIFFERENT; a secret's value is never stored."""
    a = reading_runs["a"]
    read = json.loads((a / "fingerprint.json").read_text())["environment_read"]
    assert read["LR"] == "0.01" and read["BATCH_SIZE"] is None
    assert read["WANDB_API_KEY"].startswith("sha256:")
    assert "s3cr3t-value" not in (a / "fingerprint.json").read_text()
    assert launch("compare", a, reading_runs["b"]).returncode == 0
    refused = launch("compare", a, reading_runs["changed"])  # LR=0.001, BATCH_SIZE=32 (and the data): each named
    assert refused.returncode == 3 and "environment_read.LR" in refused.stdout, refused.stdout
    assert "environment_read.BATCH_SIZE" in refused.stdout, refused.stdout
    replay = reading_runs["replay_lr"]  # with LR=0.001: checked before it runs, the job would read 0.001
    assert replay["returncode"] == 3 and "environment_read.LR" in replay["stdout"], replay["stdout"]


@pytest.mark.long(seconds=85)
def test_a_settings_file_run_with_run_path_is_code_in_the_key_and_kept(launch, reading_runs):
    """``runpy.run_path("settings.py")`` runs a file without importing it, and
    ``exec(open("config/exp.py").read())`` reads one as text: an edit of either is REFUSED by
    name (each was a false "determinism bug"), and a replay after they are gone runs the kept copies."""
    a = reading_runs["a"]
    refused = launch("compare", a, reading_runs["settings"])
    assert refused.returncode == 3 and "code.modules.exec:settings.py" in refused.stdout, refused.stdout
    refused = launch("compare", a, reading_runs["changed"])  # the cached data, LR, BATCH_SIZE too
    assert refused.returncode == 3 and "data.config/exp.py" in refused.stdout, refused.stdout
    assert "code.modules.exec:settings.py" not in refused.stdout
    replay = reading_runs["replay"]  # settings.py, train.py and config/exp.py deleted first
    assert replay["returncode"] == 0 and "REPRODUCED" in replay["stdout"], (
        replay["stdout"][-3000:] + replay["stderr"][-2000:]
    )


SEEDS_ITSELF = """import keras
import tensorflow as tf

keras.utils.set_random_seed(42)  # as many tutorials do
ds = tf.data.experimental.CsvDataset("train.csv", [tf.float32] * 4 + [tf.int32], header=True)  # read natively
ds = ds.map(lambda a, b, c, d, label: (tf.stack([a, b, c, d]), label)).shuffle(64).batch(16)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dropout(0.5), keras.layers.Dense(2)])
model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(ds, epochs=1, verbose=0)
"""


def test_a_script_that_seeds_itself_is_named_and_the_sweep_says_so(launch, tmp_path):
    """keras.utils.set_random_seed(42) in the script, swept over two seeds: one weight hash,
    and the sweep says the seed did not reach the jobs, naming the call; each run records it.

    Its data is read as the "Load CSV data" tutorial's ``CsvDataset`` does: TensorFlow opens
    ``train.csv`` itself, seen only by the OS-level watch. A sweep's job runs in the sweep's
    laid-out code, which links to the data (inotify reports an open in the link target's
    directory), and a replay runs in a snapshot laid out inside the store: the file is data in
    both, never a gap that a changed file would turn into a false DIFFERENT or a replay into NOT
    COMPARABLE. (One sweep for both questions: each was a sweep of this kind of script.)"""
    rows = np.random.default_rng(0).random((64, 4)).round(3)
    (tmp_path / "train.csv").write_text(
        "a,b,c,d,label\n" + "".join(",".join(map(str, r)) + f",{int(r.sum() > 2)}\n" for r in rows)
    )
    (tmp_path / "train.py").write_text(SEEDS_ITSELF)
    store = tmp_path / "store"
    done = launch(
        "-m", "train=script", "train.script=train.py", f"store.root={q(store)}", "+seed=range(2)", cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "2 seeds gave 1 distinct weight hash(es): the seed did not reach the jobs" in done.stdout, done.stdout
    assert "keras.utils.set_random_seed(42) at train.py:4" in done.stdout
    run = next(p for p in store.iterdir() if is_run(p))
    assert (run / "manifest.json").exists()
    fp = json.loads((run / "fingerprint.json").read_text())
    assert fp["determinism"]["seeds_set_by_job"] == [
        {"call": "keras.utils.set_random_seed", "value": 42, "where": "train.py:4"}
    ]
    assert "the job seeds itself" in (run / "log.txt").read_text()
    assert fp["data"] == {"train.csv": _sha(tmp_path / "train.csv")}
    (tmp_path / "train.csv").unlink()
    (tmp_path / "train.py").unlink()
    replay = launch("replay", run)
    assert replay.returncode == 0 and "REPRODUCED" in replay.stdout, replay.stdout[-3000:] + replay.stderr[-2000:]


USES_MATPLOTLIB_THEN_EXITS = (
    "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nplt.figure()\n"
    + PLAIN
    + "os._exit(0)\n"
)


@pytest.fixture(scope="session")
def exiting_run(shared_root) -> Path:
    """``USES_MATPLOTLIB_THEN_EXITS`` (``PLAIN`` that draws with matplotlib first and ends with
    ``os._exit(0)``) run once in its project directory, alone in its store: the run of both tests
    below, each of which asks the shared ``plain_run`` about one of its two differences."""
    return _script_run_once(shared_root, "everyday-matplotlib-exit", "train.py", USES_MATPLOTLIB_THEN_EXITS)


def test_a_job_that_ends_with_os_exit_keeps_what_it_trained(exiting_run, plain_run):
    """Some scripts end with os._exit(0) after training (to skip a slow or crashing teardown):
    the run is sealed with the weights and metrics observed before it."""
    a = exiting_run  # PLAIN, drawing a figure first, then os._exit(0) (shared)
    b = plain_run  # the same script without os._exit (shared)
    ra, rb = (json.loads((r / "result.json").read_text()) for r in (a, b))
    assert ra["weights_sha256"] == rb["weights_sha256"] and ra["final_metrics"] == rb["final_metrics"]
    assert ra["ended"].startswith("os._exit(0)") and (a / "weights.npz").exists()


UNSEEDED = """import numpy as np
import keras

rng = np.random.default_rng()  # no seed: every run draws its own
with np.load("digits.npz") as f:
    x, y = f["x_train"][:256].astype("float32") / 255.0, f["y_train"][:256]
order = rng.permutation(len(x))
model = keras.Sequential([keras.Input((28, 28)), keras.layers.Flatten(), keras.layers.Dense(10)])
model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x[order], y[order], epochs=1, batch_size=64, verbose=0, shuffle=False)
"""


def test_an_unseeded_generator_is_named_as_the_likely_cause(launch, tmp_path):
    """An unseeded generator: ``launch audit`` finds its repeats differ, so it stops there, judges
    no knob, and names the generator; ``launch compare`` of those two repeats (ordinary runs of
    the script, in its store) says DIFFERENT and names it too."""
    shutil.copy(DATA / "mnist-small" / "mnist-small.npz", tmp_path / "digits.npz")
    (tmp_path / "train.py").write_text(UNSEEDED)
    store = tmp_path / "store"
    audit = launch("audit", "train=script", "train.script=train.py", f"store.root={q(store)}", cwd=tmp_path)
    assert audit.returncode == 1 and "NOT STABLE" in audit.stdout, audit.stdout[-3000:]
    verdict = audit.stdout[audit.stdout.index("VERDICT") :]
    assert "must pin" not in verdict and "free here" not in verdict, verdict
    assert "likely cause: a generator made without a seed: np.random.default_rng() at train.py:4" in verdict
    repeats = sorted(p for p in store.iterdir() if p.name[0].isdigit())
    assert len(repeats) == 2, repeats  # the two repeats, and no knob's run after them
    done = launch("compare", *repeats)
    assert done.returncode == 1 and "DIFFERENT" in done.stdout, done.stdout
    assert "likely cause: a generator made without a seed: np.random.default_rng() at train.py:4" in done.stdout


SETS_ITS_THREADS = """import numpy as np
import tensorflow as tf
import keras

tf.config.threading.set_intra_op_parallelism_threads(2)  # the script decides its threads itself
with np.load("digits.npz") as f:
    x, y = f["x_train"][:256].astype("float32") / 255.0, f["y_train"][:256]
model = keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Conv2D(4, 3), keras.layers.Flatten(),
                          keras.layers.Dense(10)])
model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x[..., None], y, epochs=1, batch_size=64, verbose=0)
"""


@pytest.mark.long(seconds=70)
def test_the_audit_says_a_knob_the_job_sets_itself_is_set_by_the_job_never_free(launch, tmp_path):
    shutil.copy(DATA / "mnist-small" / "mnist-small.npz", tmp_path / "digits.npz")
    (tmp_path / "train.py").write_text(SETS_ITS_THREADS)
    done = launch(
        "audit",
        "train=script",
        "train.script=train.py",
        f"store.root={q(tmp_path / 'store')}",
        "audit.knobs=[intra_op_threads]",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    verdict = done.stdout[done.stdout.index("VERDICT") :]
    assert "set by the job itself" in verdict and "intra_op_threads" in verdict, verdict
    assert "free here" not in verdict and "must pin" not in verdict, verdict


def test_packages_are_keyed_by_use_not_by_a_librarys_optional_probe(exiting_run, plain_run):
    """Keras imports matplotlib (as it does pandas and scikit-learn) when it is installed; a
    script that never uses it does not key it (a later `pip install` of the launcher's `plot`
    extra refuses no earlier run); one that draws with it does."""
    a = plain_run  # never uses matplotlib (shared)
    b = exiting_run  # draws a figure with it (then ends with os._exit(0); shared)
    sa, sb = (json.loads((r / "fingerprint.json").read_text())["software"] for r in (a, b))
    assert "matplotlib" not in sa["distributions"] and "matplotlib" in sa["distributions_probed"]
    assert "matplotlib" in sb["distributions"] and "numpy" in sb["distributions"]
    assert "tensorflow-cpu" in sa["distributions"] or "tensorflow" in sa["distributions"]


@pytest.mark.long(seconds=85)
def test_settings_the_script_makes_without_effect_are_recorded_as_they_ran(reading_runs):
    """``READS_ITS_INPUTS`` sets TF_ENABLE_ONEDNN_OPTS=0 after TensorFlow read it, and asks Keras
    for jit_compile=True: each is recorded as it ran (the variable as read, jit not in effect)
    beside what the script asked for, and logged."""
    run = reading_runs["a"]
    det = json.loads((run / "fingerprint.json").read_text())["determinism"]
    assert det["env"]["TF_ENABLE_ONEDNN_OPTS"] == "1" and det["set_too_late_by_job"] == {"TF_ENABLE_ONEDNN_OPTS": "0"}
    ((name, jit),) = det["jit_compile"].items()
    assert jit == {"requested": True, "in_effect": False}
    log = (run / "log.txt").read_text()
    assert "TF_ENABLE_ONEDNN_OPTS=0 after it was read at start-up" in log and "asked for jit_compile=True" in log


READS_THROUGH_A_PROGRAM = """import io
import subprocess
import sys
import numpy as np
import keras

raw = subprocess.check_output(["zcat", "digits.csv.gz"])  # data that never passes through Python's open
if len(sys.argv) > 1:  # a program that reads a file it names itself: only its command line is seen
    raw = subprocess.check_output([sys.executable, "-c", "import sys; sys.stdout.buffer.write(open(sys.argv[1] "
                                   "+ '/digits.csv', 'rb').read())", sys.argv[1]])
table = np.loadtxt(io.BytesIO(raw), delimiter=",", dtype="float32")
model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(10)])
model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(table[:, 1:] / 255.0, table[:, 0].astype("int64"), epochs=1, batch_size=64, verbose=0)
"""

NATIVE_READS_FROM_AN_INDEX = """import csv
import os
import sys
import tensorflow as tf
import keras

root = sys.argv[1]
with open(os.path.join(root, "index.csv")) as f:  # Python reads the index ...
    rows = list(csv.DictReader(f))


def load(path, label):  # ... and TensorFlow reads the images, natively, inside the graph
    return tf.cast(tf.io.decode_png(tf.io.read_file(path), channels=1), tf.float32) / 255.0, label


files = [os.path.join(root, r["file"]) for r in rows]
ds = tf.data.Dataset.from_tensor_slices((files, [int(r["label"]) for r in rows])).map(load).batch(16)
model = keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Flatten(), keras.layers.Dense(10)])
model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(ds, epochs=1, verbose=0)
"""


def _digits(n: int = 128) -> tuple[np.ndarray, np.ndarray]:
    with np.load(DATA / "mnist-small" / "mnist-small.npz") as f:
        return f["x_train"][:n], f["y_train"][:n]


def _csv(x: np.ndarray, y: np.ndarray) -> str:
    return "".join(f"{int(label)}," + ",".join(map(str, row.ravel())) + "\n" for row, label in zip(x, y, strict=True))


def _write_csv(path: Path, x: np.ndarray, y: np.ndarray) -> None:
    path.write_text(_csv(x, y))


@pytest.mark.long(seconds=70)
def test_data_a_child_process_reads_is_in_the_key_and_what_it_hides_is_never_called_a_bug(launch, tmp_path):
    """``subprocess.check_output(["zcat", "digits.csv.gz"])``: the file it names is data (a
    changed one is REFUSED by name). A program that reads a file it names itself is recorded,
    and runs that then differ are NOT COMPARABLE, never "a determinism bug"."""
    import gzip

    x, y = _digits()
    _write_csv(tmp_path / "digits.csv", x, y)
    (tmp_path / "digits.csv.gz").write_bytes(gzip.compress((tmp_path / "digits.csv").read_bytes(), mtime=0))
    hidden = tmp_path.parent / f"{tmp_path.name}-hidden"  # outside every watched directory
    hidden.mkdir()
    shutil.copy(tmp_path / "digits.csv", hidden / "digits.csv")
    (tmp_path / "train.py").write_text(READS_THROUGH_A_PROGRAM)
    store = tmp_path / "store"

    def run(*args):
        return run_dir_of(
            launch(
                "train=script",
                "train.script=train.py",
                f"store.root={q(store)}",
                f"train.args=[{','.join(args)}]",
                cwd=tmp_path,
            )
        )

    a, b = run(), run()
    fp = json.loads((a / "fingerprint.json").read_text())
    assert fp["data"] == {"digits.csv.gz": _sha(tmp_path / "digits.csv.gz")}
    assert fp["observation"]["children"] == [["zcat", "digits.csv.gz"]]  # the launcher's own probes are not there
    same = launch("compare", a, b)
    assert same.returncode == 0 and same.stdout.startswith("IDENTICAL"), same.stdout
    x2 = x.copy()
    x2[0, 14, 14] = 255 - x2[0, 14, 14]
    (tmp_path / "digits.csv.gz").write_bytes(gzip.compress(_csv(x2, y).encode(), mtime=0))
    c = run(str(hidden))  # and reads through a program that names its file itself
    refused = launch("compare", a, c)  # train.args differ too: a compare names every key field that differs
    assert refused.returncode == 3 and "data.digits.csv.gz" in refused.stdout, refused.stdout

    _write_csv(hidden / "digits.csv", x2, y)
    d = run(str(hidden))
    unseen = launch("compare", c, d)
    assert unseen.returncode == 3 and "not fully observed" in unseen.stdout, unseen.stdout
    assert "determinism bug" not in unseen.stdout and "import sys" in unseen.stdout


TRAINED_THEN_WAITS = """
import time

open("trained", "w").close()
time.sleep(1.0)
"""


def _fanotify_here() -> bool:
    from launcher.job.observe import fswatch

    try:
        fswatch.Fanotify().close()
    except (OSError, AttributeError):
        return False
    return True


def test_files_read_natively_by_names_from_an_index_are_in_the_key(launch, tmp_path):
    """Images read by ``tf.io.read_file`` inside a ``tf.data`` map, their names from an index
    CSV in a directory outside the project: every image is data, and one changed image is
    REFUSED by name (the OS-level watch beside the index, ``launcher.job.observe.fswatch``). A file
    another process reads there meanwhile is not the job's."""
    from PIL import Image  # Pillow comes with matplotlib, a test extra (TensorFlow's import is the job's)

    data = tmp_path / "shared data"
    (data / "images").mkdir(parents=True)
    x, y = _digits(48)
    for i in range(len(x)):
        Image.fromarray(x[i]).save(data / "images" / f"{i}.png")
    (data / "index.csv").write_text("file,label\n" + "".join(f"images/{i}.png,{int(y[i])}\n" for i in range(len(x))))
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(NATIVE_READS_FROM_AN_INDEX + TRAINED_THEN_WAITS)
    store = tmp_path / "store"

    def run():
        return run_dir_of(
            launch(
                "train=script",
                "train.script=train.py",
                f"store.root={q(store)}",
                f"train.args=[{q(data)}]",
                cwd=project,
            )
        )

    # Meanwhile another process (this test) reads a file beside the data, as another job or an
    # editor might, once the job has trained (TensorFlow's import runs ``uname -p``, and an open
    # while the job has a child may be the child's): where the kernel tells whose opens they
    # were (fanotify), it is not the job's.
    (data / "other").mkdir()
    (data / "other" / "notes.txt").write_text("not the job's")
    reading, stop = threading.Event(), threading.Event()

    def read_beside() -> None:
        while not stop.wait(0.02):
            if (project / "trained").exists():
                (data / "other" / "notes.txt").read_text()
                reading.set()

    beside = threading.Thread(target=read_beside, daemon=True)
    beside.start()
    try:
        a = run()
    finally:
        stop.set()
        beside.join()
    assert reading.is_set()
    fp = json.loads((a / "fingerprint.json").read_text())
    recorded, watch = fp["data"], fp["observation"]["watch"]
    images = {str(data / "index.csv"), *(str(data / "images" / f"{i}.png") for i in range(len(x)))}
    assert watch["attributed"] == _fanotify_here(), watch
    if watch["attributed"]:
        assert set(recorded) == images and watch["opened_by_others"] >= 1 and not watch["others_in_key"], watch
    else:  # inotify: any process's opens count, and the key errs towards refusing
        assert set(recorded) == {*images, str(data / "other" / "notes.txt")}
    (data / "other" / "notes.txt").unlink()
    (project / "trained").unlink()
    x[7, 10, 10] = 255 - x[7, 10, 10]
    Image.fromarray(x[7]).save(data / "images" / "7.png")
    refused = launch("compare", a, run())
    assert refused.returncode == 3 and f"data.{data / 'images' / '7.png'}" in refused.stdout, refused.stdout


CHECKPOINT_MANAGER = """import numpy as np
import tensorflow as tf

x = np.linspace(-1, 1, 64, dtype="float32")[:, None]
y = 3 * x + 1
model = tf.keras.Sequential([tf.keras.Input((1,)), tf.keras.layers.Dense(1)])
opt = tf.keras.optimizers.Adam(0.1)
ckpt = tf.train.Checkpoint(step=tf.Variable(1), optimizer=opt, net=model)
manager = tf.train.CheckpointManager(ckpt, "./tf_ckpts", max_to_keep=2)
ckpt.restore(manager.latest_checkpoint)  # TensorFlow's checkpoint guide: go on from the latest, if any
for _ in range(3):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(x) - y) ** 2)
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    ckpt.step.assign_add(1)
    manager.save()
"""


def test_a_script_going_on_from_its_own_checkpoint_manager_is_refused_against_a_fresh_run(launch, tmp_path):
    """The second run of TensorFlow's checkpoint guide restores ``ckpt-3`` (then rotated away): it
    was "DIFFERENT: a determinism bug" against the first, with both keys' data empty. Those
    files were its input: REFUSED, naming them."""
    (tmp_path / "train.py").write_text(CHECKPOINT_MANAGER)
    store = tmp_path / "store"

    def run():
        return run_dir_of(launch("train=script", "train.script=train.py", f"store.root={q(store)}", cwd=tmp_path))

    fresh, restored = run(), run()
    assert json.loads((fresh / "fingerprint.json").read_text())["data"] == {}
    data = json.loads((restored / "fingerprint.json").read_text())["data"]
    assert data == {
        "tf_ckpts/ckpt-3.data-00000-of-00001": f"deleted while the job ran ({restored.name})",
        "tf_ckpts/ckpt-3.index": f"deleted while the job ran ({restored.name})",
    }
    refused = launch("compare", fresh, restored)
    assert refused.returncode == 3 and "REFUSED" in refused.stdout, refused.stdout
    assert "data.tf_ckpts/ckpt-3.index" in refused.stdout and "determinism bug" not in refused.stdout
