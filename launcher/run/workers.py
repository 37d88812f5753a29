"""One run on many workers (``distribute.workers=N``): TensorFlow's multi-worker runtime.

The cluster is pure data: each worker's address (free ports on this machine, or Slurm's
node list as ``SlurmClusterResolver`` reads it) and the ``TF_CONFIG`` each one starts with;
worker 0 is the chief. The N workers are ``python -m launcher.bootstrap`` processes started
together (``launcher.run.runtime.run_workers``, through ``launcher.proc.run_group``): when one
of them dies the others are stopped within a bounded time (a collective would wait for it for
ever) and the run names the worker (``ended``). When they have ended, ``settle`` gathers every
worker's facts into the run: each worker's fingerprint, the cluster part of the run's
fingerprint (what the key holds), and whether every worker ended with the chief's weights.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Mapping
from pathlib import Path

from omegaconf import DictConfig

from launcher import proc
from launcher.record import layout
from launcher.record.probe import fingerprint, key
from launcher.record.store import runs
from launcher.run import signals

SLURM_PORT_BASE = 8888  # SlurmClusterResolver's first port on each node; offset by the job id (slurm_ports)


def count(cfg: DictConfig | Mapping) -> int:
    """How many workers ``cfg`` asks for (``distribute.workers``; 1 for a config from before it)."""
    node = cfg.get("distribute") or {}
    return int(node.get("workers") or 1)


# ---------------------------------------------------------------- the cluster, pure
def tf_config(addresses: list[str], index: int) -> str:
    """The ``TF_CONFIG`` of worker ``index`` of the cluster whose workers are at ``addresses``."""
    return json.dumps({"cluster": {"worker": list(addresses)}, "task": {"type": "worker", "index": index}})


def local_addresses(ports: list[int]) -> list[str]:
    """Workers on this machine, one per port."""
    return [f"localhost:{port}" for port in ports]


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports free on this machine now (the kernel's choice, as TensorFlow's
    own multi-worker tests pick them)."""
    sockets = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("localhost", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def expand_hostlist(hostlist: str) -> list[str]:
    """Slurm's compressed node list as hosts, in order: ``n[1-2],m5`` -> ``[n1, n2, m5]``
    (``SlurmClusterResolver``'s ``expand_hostlist``)."""
    hosts: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", hostlist):
        m = re.fullmatch(r"([^\[]*)(?:\[([^\]]+)\])?", part)
        if m is None:
            raise ValueError(f"invalid Slurm node list {hostlist!r}")
        prefix, ranges = m.group(1), m.group(2)
        if ranges is None:
            hosts.append(prefix)
            continue
        for item in ranges.split(","):
            lo, _, hi = item.partition("-")
            for i in range(int(lo), int(hi or lo) + 1):
                hosts.append(prefix + str(i).zfill(len(lo)))
    return hosts


def expand_tasks_per_node(spec: str) -> list[int]:
    """Slurm's tasks per node, one per node: ``2(x2),1`` -> ``[2, 2, 1]``."""
    out: list[int] = []
    for part in spec.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part)
        if m is None:
            raise ValueError(f"invalid Slurm tasks per node {spec!r}")
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    return out


def slurm_ports(env: Mapping[str, str]) -> int:
    """The first port of a Slurm job's workers on each node: ``SlurmClusterResolver``'s 8888,
    offset by the job id so that two jobs sharing a node do not take the same ports."""
    job = int(env.get("SLURM_JOB_ID") or 0)
    return SLURM_PORT_BASE + (job % 1000) * 16


def slurm_cluster(env: Mapping[str, str]) -> tuple[list[str], int]:
    """A Slurm step's workers, as ``SlurmClusterResolver`` builds them: the step's nodes sorted,
    each node's tasks on consecutive ports; and this task's index (``SLURM_PROCID``)."""

    def var(name: str) -> str:
        value = env.get(f"SLURM_STEP_{name}") or env.get(f"SLURM_{name}") or env.get(f"SLURM_JOB_{name}")
        if not value:
            raise KeyError(f"SLURM_STEP_{name}")
        return value

    hosts = expand_hostlist(var("NODELIST"))
    tasks = expand_tasks_per_node(var("TASKS_PER_NODE"))
    base = slurm_ports(env)
    addresses = [f"{host}:{base + offset}" for host, n in sorted(zip(hosts, tasks, strict=True)) for offset in range(n)]
    return addresses, int(env["SLURM_PROCID"])


# ---------------------------------------------------------------- the run directory
def prepare(run_dir: Path, n: int) -> None:
    """Lay out workers 1..n-1 beside the chief: each its ``config.yaml`` and ``job.json`` (the
    chief's, with its own index), as a run directory the bootstrap can start in. A resumed run's
    workers all restore the chief's checkpoint (``resume.from``: the chief's run directory, relative
    to the worker's): under ``MultiWorkerMirroredStrategy`` every worker holds the same variables."""
    paths = layout.RunPaths(run_dir)
    job = runs.read_json(paths.job)
    config = paths.config.read_bytes()
    runs.write_json(paths.job, {**job, "worker": {"index": 0, "count": n}})
    for i in range(1, n):
        worker = paths.worker(i)
        worker.run_dir.mkdir(parents=True, exist_ok=True)
        runs.write_bytes(worker.config, config)
        own = {**job, "worker": {"index": i, "count": n}}
        if job.get("resume"):
            own["resume"] = {**job["resume"], "from": resumed_from(run_dir, i)}
        runs.write_json(worker.job, own)


def resumed_from(run_dir: Path, index: int) -> str:
    """Where worker ``index`` of a resumed run finds the checkpoint it restores: the chief's run
    directory, relative to its own (``../..``)."""
    import os

    return os.path.relpath(run_dir, layout.RunPaths(run_dir).worker(index).run_dir)


# ---------------------------------------------------------------- how the workers ended
def ended(run_dir: Path, group: proc.GroupEnded) -> int:
    """The run's exit code from its workers' endings, and its error when one failed or a stop
    ended them: the worker that ended first is named."""
    paths = layout.RunPaths(run_dir)
    if group.stop is not None:
        signals.stopping_launcher()  # a second Ctrl-C has nothing left to stop
        if all(e.returncode == 0 for e in group.ended):
            return 0
        reason = signals.REASONS.get(group.stop, "interrupted")
        killed = [f"worker {i}: {e.killed}" for i, e in enumerate(group.ended) if e.killed]
        message = f"{reason}; all {len(group.ended)} workers were stopped" + (
            f" ({'; '.join(killed)})" if killed else ""
        )
        runs.write_json(paths.error, {"type": "KeyboardInterrupt", "message": message})
        return 130
    if group.first_failed is None:
        return 0
    i = group.first_failed
    code = group.ended[i].returncode
    own = paths.worker(i).error
    said = runs.read_json(own) if own.exists() else {}
    if said.get("type") == "ConfigError":  # the launcher refused what the job asked, as every worker does
        runs.write_json(paths.error, said)
        return code
    message = said.get("message")
    if code < 0:
        how = f"was killed by signal {-code}"
    else:
        how = f"failed ({message})" if message else f"exited with status {code}"
    message = f"worker {i} {how}; the other workers were stopped, as a collective would wait for it for ever"
    runs.write_json(paths.error, {"type": "WorkerDied", "message": message})
    return code


# ---------------------------------------------------------------- under Slurm: each task one worker
WAIT_FOR_CHIEF_S = 900.0  # how long another task waits for the chief's task to lay out its worker


def slurm_task(env: Mapping[str, str]) -> tuple[int, int] | None:
    """(this task's index, the step's task count) in a Slurm step of more than one task; None
    otherwise (one task, or not under Slurm)."""
    total = env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS")
    if not total or int(total) < 2 or "SLURM_PROCID" not in env:
        return None
    return int(env["SLURM_PROCID"]), int(total)


def await_worker(find_run, index: int, timeout_s: float = WAIT_FOR_CHIEF_S) -> Path:
    """The run directory the chief's task created, once worker ``index``'s folder is laid out in
    it (``find_run()``: the run directory the chief noted, or None yet); ``TimeoutError`` past
    ``timeout_s`` or when the chief's run ended without it."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = find_run()
        if found is not None:
            run_dir = Path(found)
            if layout.RunPaths(run_dir).worker(index).job.exists():
                return run_dir
            if runs.status(run_dir).get("state") not in (None, "running"):
                break
        time.sleep(0.5)
    raise TimeoutError(f"worker {index}: the chief's task laid out no run for it within {timeout_s:.0f} s")


def note_ended(run_dir: Path, index: int, returncode: int) -> None:
    """Worker ``index``'s task, its process gone (its log closed): the chief's task may seal."""
    runs.write_json(layout.RunPaths(run_dir).worker(index).status, {"state": "ended", "returncode": returncode})


def await_ended(run_dir: Path, n: int, timeout_s: float = 120.0) -> None:
    """The chief's task under Slurm: wait until every other worker's task noted its end
    (``note_ended``), at most ``timeout_s`` seconds, so that nothing writes in the run once sealed."""
    import time

    paths = layout.RunPaths(run_dir)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not all(paths.worker(i).status.exists() for i in range(1, n)):
        time.sleep(0.2)


# ---------------------------------------------------------------- the record of every worker
def settle(run_dir: Path, fp: dict, n: int, container: dict | None = None) -> tuple[dict, str | None]:
    """After every worker ended with 0: each other worker's fingerprint (the launcher's side,
    or its own under Slurm, with its job facts merged in) written in its folder; the chief's
    ``fp`` with its ``cluster`` part; and why the run cannot be sealed as one result (a worker
    without a result, or whose weights differ from the chief's), or None."""
    paths = layout.RunPaths(run_dir)
    fps, results = [], []
    for i in range(n):
        worker = paths.worker(i)
        if not (worker.result.exists() and worker.job_facts.exists()):
            return fp, f"worker {i} ended without recording its result"
        results.append(runs.read_json(worker.result))
        if i == 0:
            continue
        launcher_side = runs.read_json(worker.fingerprint) if worker.fingerprint.exists() else fp
        merged = fingerprint.merge_job_facts(launcher_side, runs.read_json(worker.job_facts), container)
        runs.write_json(worker.fingerprint, merged)
        worker.job_facts.unlink()
        fps.append(merged)
    fps.insert(0, fp)
    out = dict(fp)
    out["cluster"] = cluster_part(fps, results)
    for i, result in enumerate(results[1:], start=1):
        if result.get("weights_sha256") != results[0].get("weights_sha256"):
            return out, f"worker {i}'s weights differ from the chief's: a determinism bug in the reduction"
    return out, None


def expected_cluster(fp: dict, n: int) -> dict:
    """The cluster part the launcher expects before the workers ran: ``n`` workers in order on
    this machine's hardware (``fp``'s); the collective is known once a worker's strategy used it."""
    return {
        "workers": n,
        "collective": None,
        "order": [f"worker:{i}" for i in range(n)],
        "hardware": [key.hardware_class(fp)] * n,
    }


def cluster_part(fps: list[dict], results: list[dict]) -> dict:
    """The cluster, as the run's fingerprint records it: the worker count, the collective each
    worker's strategy used (and whether the launcher pinned it), the worker order and each
    worker's hardware class (``key.hardware_class``), keyed; hosts and weights, for reading."""
    seen = [(f.get("cluster") or {}) for f in fps]
    collectives = sorted({s.get("implementation") or "none" for s in seen})
    classes = [key.hardware_class(f) for f in fps]
    note = None
    if len(set(classes)) > 1:
        odd = [str(i) for i, c in enumerate(classes) if c != classes[0]]
        note = f"a heterogeneous cluster: worker(s) {', '.join(odd)} ran on other hardware than the chief"
    return {
        "workers": len(fps),
        "collective": collectives[0] if len(collectives) == 1 else collectives,
        "pinned_by_launcher": bool(seen[0].get("pinned_by_launcher")),
        "asked": seen[0].get("asked"),
        "order": [f"worker:{i}" for i in range(len(fps))],
        "hardware": classes,
        "heterogeneous": note,
        "hosts": [(f.get("host") or {}).get("hostname") for f in fps],
        "weights_sha256": [r.get("weights_sha256") for r in results],
    }
