"""GPU acceptance: one command for the first machine with NVIDIA GPUs.

    python benchmarks/gpu_acceptance.py [--epochs E] [--rounds N] [--image-base REF] [--no-docker] [--store DIR]
    nox -s gpu_acceptance [-- OPTIONS]   (installs TensorFlow with CUDA from lockfiles/tf-gpu.txt first)

It runs real ``launch`` commands on the packaged MNIST sample and prints one table,
a row per check:

- fingerprint: each GPU (model, compute capability, driver, MIG mode, memory), the CUDA
  driver API, the GPU-to-GPU link matrix and where they came from (NVML, or nvidia-smi
  where NVML is missing), as the first strict run recorded them (``hardware``), and
  TensorFlow's CUDA/cuDNN build, here and in the tf-gpu image; the link matrix must
  have a row and a column per GPU (an escape code once left it ``[[]]``), and where
  TensorFlow saw a GPU otherwise than NVML the run's ``hardware.gpu_notes`` say so;
- strict twice on the GPU, locally and in the tf-gpu image: IDENTICAL, and both runs
  saw a GPU (``software.tf_gpus``), so a CPU fallback cannot pass;
- where strict and a run with GPU determinism off (``determinism=seeded`` with
  strict's threads, oneDNN, XLA and tf.data settings: only op determinism differs)
  first split, located by ``launch compare --allow-mismatch`` from the step trace;
- strict over off, training time and wall time on the GPU, N interleaved rounds,
  medians (the anchor: 1.26x, the TF 2.3 reproducibility report's GPU figure);
- with two or more GPUs, ``launch -m '+seed=range(4)'`` in one-GPU slots, each
  job's bits equal (``launch compare``) to the same seed run alone;
- what it could not check, said plainly (NOT RUN rows, and the limits listed below
  the table).

Exit codes:
  0   every check that ran passed (NOT RUN rows say what could not be checked, and why)
  1   a check failed
  2   bad usage
  77  no GPU found (NVML and nvidia-smi list none, or neither is there): nothing was checked

The verdict logic and the table are pure functions (tests/unit/test_gpu_acceptance.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the tree under test: its launcher runs
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from launcher.record.probe import probes  # noqa: E402  (no TensorFlow in this process)
from launcher.sweep import slots  # noqa: E402

NO_GPU_EXIT = 77  # the autotools convention for "skipped"
ANCHOR = 1.26  # strict / non-deterministic on a GPU, TF 2.3 reproducibility report
SWEEP_SEEDS = 4
SEED0 = ("+seed=0",)
STRICT = ("determinism=strict",)
# GPU determinism off, everything else as strict pins it: the only difference is op
# determinism (and its TF_DETERMINISTIC_OPS / TF_CUDNN_DETERMINISTIC / CUBLAS variables).
OFF = (
    "determinism=seeded",
    "determinism.intra_op_threads=1",
    "determinism.inter_op_threads=1",
    "determinism.onednn_opts=false",
    "determinism.jit_compile=false",
    "determinism.deterministic_data=true",
    "determinism.trace_every=10",
)
UNTIMED = ("determinism.trace_every=0", "train.checkpoint_every=0")  # neither is determinism
LIMITS = (
    "bits across GPU models, drivers or CUDA/cuDNN builds: the comparability key refuses those "
    "comparisons, so nothing here claims them",
    "multi-GPU training (tf.distribute) in one job: the launcher runs one-GPU jobs",
    "MIG instances as sweep slots: a slot is a whole GPU",
)


@dataclass(frozen=True)
class Row:
    """One line of the table."""

    check: str
    verdict: str  # PASS | FAIL | INFO | NOT RUN
    detail: str


# ---------------------------------------------------------------- pure: rows and verdicts
SOURCES = {"nvml": "NVML", "nvidia-smi": "nvidia-smi", None: "no source"}


def gpu_rows(hardware: dict, where: str) -> list[Row]:
    """The GPU facts of a fingerprint's ``hardware`` (``probes.gpu_record``'s fields), ``where``
    they were read (``recorded by run X``, ``probed now``): each GPU, the CUDA driver API and
    the source as INFO; the link matrix PASS when it has a row and a column per GPU."""
    gpus = hardware.get("gpus") or []
    source = SOURCES.get(hardware.get("gpu_source"), str(hardware.get("gpu_source")))
    note = hardware.get("gpu_source_note")
    rows = [Row("GPU facts from", "INFO", f"{source}{f' ({note})' if note else ''}, {where}")]
    rows += [
        Row(
            f"GPU {g['index']}",
            "INFO",
            f"{g['name']}, compute capability {g['compute_capability']}, driver {g['driver_version']}, "
            f"MIG {g['mig_mode']}, {g.get('memory_mib')} MiB",
        )
        for g in gpus
    ]
    rows.append(Row("CUDA driver API", "INFO", str(hardware.get("cuda_driver_version"))))
    rows.append(topology_row(hardware.get("gpu_topology"), len(gpus)))
    return rows


def topology_row(matrix: Sequence[Sequence[str]] | None, count: int) -> Row:
    """The GPU-to-GPU link matrix as recorded: PASS with a row and a column per GPU and ``X``
    on the diagonal (NV# is NVLink; PIX, PXB, PHB, NODE, SYS are PCIe paths)."""
    check = "GPU topology"
    shown = json.dumps(matrix)
    if (
        not matrix
        or len(matrix) != count
        or any(len(row) != count for row in matrix)
        or any(matrix[i][i] != "X" for i in range(count))
    ):
        return Row(check, "FAIL", f"{shown}: not a {count}x{count} link matrix")
    links = {matrix[i][j] for i in range(count) for j in range(count) if i != j}
    if len(links) == 1:
        return Row(check, "PASS", f"{count} GPUs, {links.pop()} between every pair")
    if count == 1:
        return Row(check, "PASS", f"{shown}: one GPU")
    return Row(check, "PASS", "; ".join(f"GPU{i}: {' '.join(row)}" for i, row in enumerate(matrix)))


def notes_row(notes: Sequence[str] | None) -> Row:
    """Where TensorFlow, in the job, saw the GPUs otherwise than the launcher's source
    (``hardware.gpu_notes``): a measurement for people, not a verdict."""
    if notes is None:
        return Row("TensorFlow vs GPU facts", "NOT RUN", "no run recorded them")
    return Row("TensorFlow vs GPU facts", "INFO", "; ".join(notes) if notes else "they agree")


def tf_row(where: str, tf: dict | None) -> Row:
    """TensorFlow's version, CUDA/cuDNN build and the GPUs it saw, ``where`` it ran."""
    if not tf:
        return Row(f"TensorFlow ({where})", "NOT RUN", "no TensorFlow facts (see the rows below)")
    build = tf.get("tf_build") or {}
    seen = tf.get("tf_gpus") or []
    return Row(
        f"TensorFlow ({where})",
        "INFO",
        f"{tf.get('tensorflow')}, CUDA build {build.get('is_cuda_build', '?')}, "
        f"CUDA {build.get('cuda_version', '-')}, cuDNN {build.get('cudnn_version', '-')}; "
        f"sees {len(seen)} GPU(s)",
    )


def local_gpu_gap(tf: dict | None) -> str | None:
    """Why the local GPU checks cannot run here (None: they can)."""
    if not tf:
        return "TensorFlow cannot be imported here"
    if str((tf.get("tf_build") or {}).get("is_cuda_build")) != "True":
        return (
            f"TensorFlow here ({tf.get('tensorflow')}) is not a CUDA build: install "
            "tensorflow[and-cuda] (nox -s gpu_acceptance does, from lockfiles/tf-gpu.txt)"
        )
    if not tf.get("tf_gpus"):
        return "TensorFlow here is a CUDA build but sees no GPU (driver, CUDA_VISIBLE_DEVICES?)"
    return None


def identical_row(check: str, compare_rc: int, compare_out: str, gpus_seen: Sequence[Sequence]) -> Row:
    """Strict twice: PASS only when compare says IDENTICAL and every run saw a GPU."""
    first = (compare_out.strip().splitlines() or ["(no output)"])[0]
    on_cpu = [i + 1 for i, seen in enumerate(gpus_seen) if not seen]
    if on_cpu:
        return Row(check, "FAIL", f"run {', '.join(map(str, on_cpu))} saw no GPU: it ran on the CPU")
    if compare_rc == 0 and first.startswith("IDENTICAL"):
        return Row(check, "PASS", first)
    return Row(check, "FAIL", f"launch compare exit {compare_rc}: {first}")


SPLIT_LINE = re.compile(r"first diverging step: .*|step traces equal at all \d+ common steps|no step trace in common.*")


def split_row(compare_rc: int, compare_out: str, weights_equal: bool) -> Row:
    """Where strict and GPU-determinism-off first split, from ``launch compare --allow-mismatch``."""
    check = "first split, strict vs off"
    if compare_rc not in (0, 1, 3):
        return Row(check, "FAIL", f"launch compare --allow-mismatch exit {compare_rc}: {compare_out.strip()[:200]}")
    if weights_equal:
        return Row(
            check,
            "INFO",
            "off gave strict's bits this time: no split to locate "
            "(this model did not meet a non-deterministic GPU kernel)",
        )
    match = SPLIT_LINE.search(compare_out)
    if match is None or not match.group(0).startswith("first diverging step"):
        found = match.group(0) if match else "no trace line"
        return Row(check, "FAIL", f"the weights differ but compare located no split ({found})")
    return Row(check, "PASS", match.group(0))


def median_ratio(strict: Sequence[float], off: Sequence[float]) -> float:
    return statistics.median(strict) / statistics.median(off)


def timing_row(
    strict_train: Sequence[float], off_train: Sequence[float], strict_wall: Sequence[float], off_wall: Sequence[float]
) -> Row:
    """Strict over off on the GPU, medians of interleaved rounds: a measurement, not a verdict."""
    if not strict_train or not off_train:
        return Row("strict / off time", "NOT RUN", "no timed rounds")
    return Row(
        "strict / off time",
        "INFO",
        f"training {median_ratio(strict_train, off_train):.2f}x "
        f"({statistics.median(strict_train):.2f} s / {statistics.median(off_train):.2f} s), "
        f"wall {median_ratio(strict_wall, off_wall):.2f}x, median of {len(strict_train)} "
        f"interleaved rounds; anchor {ANCHOR}x (TF 2.3 report)",
    )


def sweep_slots(gpus: Sequence[dict], cores: Sequence[int]) -> tuple[list[slots.Slot], str | None]:
    """The one-GPU slots a sweep gets here, or why the sweep check cannot run."""
    if len(gpus) < 2:
        return [], f"needs two or more GPUs (found {len(gpus)})"
    mig = [str(g["index"]) for g in gpus if str(g.get("mig_mode", "")).lower() == "enabled"]
    if mig:
        return [], f"MIG is enabled on GPU {', '.join(mig)}: a sweep slot is a whole GPU"
    return slots.plan("auto", gpus, cores), None


def sweep_row(jobs: Sequence[dict], compares: dict[int, tuple[int, str]]) -> Row:
    """Every sweep job complete, on one GPU, and IDENTICAL to its seed run alone."""
    check = f"+seed=range({SWEEP_SEEDS}) in one-GPU slots"
    bad = []
    for job in jobs:
        seed, seen = job.get("seed"), job.get("tf_gpus") or []
        if job.get("status") != "complete":
            bad.append(f"seed {seed} {job.get('status')}: {job.get('error')}")
        elif len(seen) != 1:
            bad.append(f"seed {seed} saw {len(seen)} GPUs in slot {job.get('slot')}")
        else:
            rc, out = compares.get(seed, (None, ""))
            first = (out.strip().splitlines() or ["not compared"])[0]
            if rc != 0 or not first.startswith("IDENTICAL"):
                bad.append(f"seed {seed} vs alone: {first}")
    if len(jobs) != SWEEP_SEEDS:
        bad.append(f"{len(jobs)} jobs recorded, expected {SWEEP_SEEDS}")
    if bad:
        return Row(check, "FAIL", "; ".join(bad))
    used = sorted({str(j.get("slot")) for j in jobs})
    return Row(check, "PASS", f"{len(jobs)} jobs in slots {', '.join(used)}: each IDENTICAL to its seed alone")


def render(rows: Sequence[Row], limits: Sequence[str] = LIMITS) -> str:
    """The table, then what could not be checked, plainly."""
    width = max(len("check"), *(len(r.check) for r in rows))
    lines = [f"{'check':<{width}}  {'verdict':<7}  detail", f"{'-' * width}  -------  ------"]
    lines += [f"{r.check:<{width}}  {r.verdict:<7}  {r.detail}" for r in rows]
    unchecked = [f"- {r.check}: {r.detail}" for r in rows if r.verdict == "NOT RUN"]
    unchecked += [f"- {limit}" for limit in limits]
    if unchecked:
        lines += ["", "Could not check:", *unchecked]
    failed = sum(r.verdict == "FAIL" for r in rows)
    lines += [
        "",
        f"{'FAILED: ' + str(failed) + ' check(s)' if failed else 'PASSED'} "
        f"({sum(r.verdict == 'PASS' for r in rows)} passed, "
        f"{sum(r.verdict == 'NOT RUN' for r in rows)} not run)",
    ]
    return "\n".join(lines)


def exit_code(rows: Sequence[Row]) -> int:
    return 1 if any(r.verdict == "FAIL" for r in rows) else 0


def no_gpu_message(source: str | None = None, note: str | None = None) -> str:
    """Why nothing is checked: who listed no GPU, or why neither NVML nor nvidia-smi answered."""
    why = note if source is None and note else f"{SOURCES.get(source, source)} lists none"
    return (
        f"gpu_acceptance: no GPU found ({why}): nothing to check here; run it on a machine with "
        f"NVIDIA GPUs (exit {NO_GPU_EXIT})"
    )


# ---------------------------------------------------------------- running launch
class Launcher:
    """Real ``launch`` commands of this tree, from a temporary directory, into one store."""

    def __init__(self, store: Path | None = None) -> None:
        if store is None:
            store = Path(tempfile.mkdtemp(prefix="gpu-runs-"))
            # mkdtemp makes it 0700: a container's user (uid 1000 when launch runs as
            # root) could not reach the run directories below it.
            store.chmod(0o755)
        self.store = store.absolute()
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }

    def call(self, *args: str) -> tuple[int, str, float]:
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "launcher", *args],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=tempfile.gettempdir(),
        )
        return done.returncode, done.stdout + done.stderr, time.perf_counter() - start

    def run(self, *overrides: str) -> tuple[Path | None, float, str]:
        """One run: its directory (None when it did not complete), wall seconds, output."""
        before = self._runs()
        rc, out, wall = self.call(*overrides, f"store.root={self.store}")
        new = sorted(self._runs() - before)
        return (new[-1] if rc == 0 and new else None), wall, out

    def compare(self, a: Path, b: Path, allow_mismatch: bool = False) -> tuple[int, str]:
        rc, out, _ = self.call("compare", str(a), str(b), *(["--allow-mismatch"] if allow_mismatch else []))
        return rc, out

    def _runs(self) -> set[Path]:
        if not self.store.exists():
            return set()
        return {p for p in self.store.iterdir() if p.is_dir() and p.name not in ("sweeps", "audits")}


def software(run: Path | None) -> dict:
    return json.loads((run / "fingerprint.json").read_text())["software"] if run else {}


def hardware(run: Path) -> dict:
    return json.loads((run / "fingerprint.json").read_text())["hardware"]


def train_seconds(run: Path) -> float:
    """Training time: epochs 2..E (epoch 1 includes tracing), as bench_determinism measures it."""
    epochs = json.loads((run / "result.json").read_text()).get("timings", {}).get("epoch_s", [])
    return sum(epochs[1:]) if len(epochs) > 1 else sum(epochs)


def weights(run: Path) -> str | None:
    return json.loads((run / "result.json").read_text()).get("weights_sha256")


def failed_run(check: str, out: str) -> Row:
    tail = [line for line in out.strip().splitlines() if line.strip()][-1:] or ["(no output)"]
    return Row(check, "FAIL", f"a run did not complete: {tail[0][:200]}")


def local_tensorflow(env: dict[str, str]) -> dict | None:
    """TensorFlow's facts in this Python, as a job would record them (a child process)."""
    code = "import json; from launcher.record.probe import probes; print(json.dumps(probes.tensorflow_software()))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    try:
        return json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    except (IndexError, json.JSONDecodeError):
        return None


# ---------------------------------------------------------------- the checks
def strict_twice(lx: Launcher, check: str, common: Sequence[str]) -> tuple[Row, dict]:
    runs = []
    for _ in range(2):
        run, _, out = lx.run(*STRICT, *common, *SEED0)
        if run is None:
            return failed_run(check, out), {}
        runs.append(run)
    rc, out = lx.compare(*runs)
    seen = [software(r).get("tf_gpus") or [] for r in runs]
    return identical_row(check, rc, out, seen), {"runs": runs, "software": software(runs[0])}


def split_and_timing(lx: Launcher, strict_run: Path, common: Sequence[str], rounds: int) -> list[Row]:
    off_run, _, out = lx.run(*OFF, *common, *SEED0)
    if off_run is None:
        return [failed_run("first split, strict vs off", out)]
    rc, out = lx.compare(strict_run, off_run, allow_mismatch=True)
    rows = [split_row(rc, out, weights(strict_run) == weights(off_run))]
    times: dict[str, list[float]] = {"strict": [], "off": [], "strict wall": [], "off wall": []}
    for n in range(rounds):
        order = (("strict", STRICT), ("off", OFF)) if n % 2 == 0 else (("off", OFF), ("strict", STRICT))
        for name, mode in order:
            run, wall, out = lx.run(*mode, *common, *SEED0, *UNTIMED)
            if run is None:
                return [*rows, failed_run("strict / off time", out)]
            times[name].append(train_seconds(run))
            times[f"{name} wall"].append(wall)
    return [*rows, timing_row(times["strict"], times["off"], times["strict wall"], times["off wall"])]


def sweep_check(lx: Launcher, common: Sequence[str], gpus: Sequence[dict]) -> Row:
    check = f"+seed=range({SWEEP_SEEDS}) in one-GPU slots"
    planned, why_not = sweep_slots(gpus, sorted(os.sched_getaffinity(0)))
    if why_not:
        return Row(check, "NOT RUN", why_not)
    rc, out, _ = lx.call("-m", f"+seed=range({SWEEP_SEEDS})", *STRICT, *common, f"store.root={lx.store}")
    sweep_dirs = sorted((lx.store / "sweeps").iterdir()) if (lx.store / "sweeps").exists() else []
    if not sweep_dirs:
        return Row(check, "FAIL", f"launch -m exit {rc}: {out.strip()[-200:]}")
    jobs = [json.loads(p.read_text()) for p in sorted((sweep_dirs[-1] / "jobs").glob("[0-9]*.json"))]
    compares = {}
    for job in jobs:
        if job.get("status") != "complete":
            continue
        job["tf_gpus"] = software(Path(job["run_dir"])).get("tf_gpus")
        alone, _, out = lx.run(*STRICT, *common, f"+seed={job['seed']}")
        compares[job["seed"]] = lx.compare(Path(job["run_dir"]), alone) if alone else (1, f"alone: {out[-200:]}")
    print(f"  sweep slots planned: {', '.join(s.device for s in planned)}", flush=True)
    return sweep_row(jobs, compares)


def docker_checks(lx: Launcher, common: Sequence[str], base: str) -> list[Row]:
    from launcher.docker import gpus as docker_gpus
    from launcher.errors import LauncherError

    check = "strict twice, tf-gpu image"
    try:
        info, hook, _ = docker_gpus.probe()
    except LauncherError as exc:
        return [Row("TensorFlow (tf-gpu image)", "NOT RUN", str(exc)), Row(check, "NOT RUN", str(exc))]
    missing = docker_gpus.missing(info, hook)
    if missing:
        why = f"the Docker daemon has {missing}"
        return [Row("TensorFlow (tf-gpu image)", "NOT RUN", why), Row(check, "NOT RUN", why)]
    row, facts = strict_twice(lx, check, (*common, "runtime=docker", "image=tf-gpu", f"image.base={base}"))
    return [tf_row("tf-gpu image", facts.get("software")), row]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--epochs", type=int, default=3, help="epochs per run (default 3)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (default 5)")
    p.add_argument("--image-base", default="local", help="image.base for the tf-gpu image (default local)")
    p.add_argument("--no-docker", action="store_true", help="skip the tf-gpu image checks")
    p.add_argument("--store", type=Path, help="keep the runs in this store (default: a temporary one)")
    p.add_argument("--detect", action="store_true", help=f"only look for a GPU (exit 0, or {NO_GPU_EXIT})")
    args = p.parse_args(argv)
    if args.epochs < 2 or args.rounds < 1:
        p.error("--epochs must be at least 2 (training time skips epoch 1) and --rounds at least 1")

    probed = probes.gpu_facts()
    gpus = probed["gpus"]
    if not gpus:
        print(no_gpu_message(probed["gpu_source"], probed["gpu_source_note"]), flush=True)
        return NO_GPU_EXIT
    source = SOURCES.get(probed["gpu_source"])
    if args.detect:
        print(f"gpu_acceptance: {len(gpus)} GPU(s) from {source}: " + ", ".join(g["name"] for g in gpus), flush=True)
        return 0
    lx = Launcher(args.store)
    common = ("train=mnist", "train.data=sample", f"train.epochs={args.epochs}")
    print(f"gpu_acceptance: {len(gpus)} GPU(s) from {source}; runs in {lx.store}", flush=True)

    local_tf = local_tensorflow(lx.env)
    checks = [tf_row("local", local_tf)]
    facts: dict = {}
    gap = local_gpu_gap(local_tf)
    if gap:
        for name in (
            "strict twice, local",
            "first split, strict vs off",
            "strict / off time",
            f"+seed=range({SWEEP_SEEDS}) in one-GPU slots",
        ):
            checks.append(Row(name, "NOT RUN", gap))
    else:
        row, facts = strict_twice(lx, "strict twice, local", common)
        checks.append(row)
        if facts:
            checks += split_and_timing(lx, facts["runs"][0], common, args.rounds)
        checks.append(sweep_check(lx, common, gpus))
    if facts:  # the GPU facts as the first strict run recorded them, and what its TensorFlow saw
        recorded = hardware(facts["runs"][0])
        rows = [*gpu_rows(recorded, f"recorded by run {facts['runs'][0].name}"), notes_row(recorded.get("gpu_notes"))]
    else:
        rows = [*gpu_rows(probed, "probed now (no run recorded them)"), notes_row(None)]
    rows += checks
    if args.no_docker:
        rows.append(Row("strict twice, tf-gpu image", "NOT RUN", "--no-docker"))
    else:
        rows += docker_checks(lx, common, args.image_base)
    print(render(rows), flush=True)
    return exit_code(rows)


if __name__ == "__main__":
    sys.exit(main())
