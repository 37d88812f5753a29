"""Device slots for sweeps: which devices each parallel job may use, and who holds them.

A slot is one GPU (``CUDA_VISIBLE_DEVICES=<its UUID>``) or, without GPUs, a fixed group of
CPU cores the job process is pinned to. ``plan`` is pure: from ``runtime.slots``
and the devices found it decides the slots or says why it cannot. ``hold`` makes
"a slot never serves two jobs at once" a fact rather than a hope: a job takes a
slot's file lock for its whole life, whatever the launcher's own concurrency.

A slot changes where a job runs, never what it computes: thread counts come from
the determinism config, not from the slot's size.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from launcher.errors import ConfigError, GpuUnavailable


@dataclass(frozen=True)
class Slot:
    """One device slot. Serializable: it travels to the workers in ``sweep.json``."""

    index: int
    device: str  # what it is, for people: "gpu 3" or "cpu 0-1"
    cpus: frozenset[int] | None = None  # CPU slot: the cores the job is pinned to
    env: dict[str, str] = field(default_factory=dict)  # GPU slot: CUDA_VISIBLE_DEVICES

    def to_dict(self) -> dict:
        cpus = sorted(self.cpus) if self.cpus is not None else None
        return {"index": self.index, "device": self.device, "cpus": cpus, "env": dict(self.env)}

    @classmethod
    def from_dict(cls, data: dict) -> Slot:
        cpus = frozenset(data["cpus"]) if data.get("cpus") is not None else None
        return cls(int(data["index"]), str(data["device"]), cpus, dict(data.get("env") or {}))


def plan(
    requested: object,
    gpus: Sequence[dict],
    cores: Sequence[int],
    threads_per_job: int = 1,
    need_gpus: bool = False,
) -> list[Slot]:
    """The slots for ``runtime.slots=requested`` on a machine with ``gpus`` and ``cores``.

    ``gpus`` are ``record.probes.gpu_facts()["gpus"]`` (NVML's list, or nvidia-smi's).
    ``auto`` is one slot per GPU, else as many CPU slots as jobs of
    ``threads_per_job`` intra-op threads fit on the cores. An integer asks for that
    many and may not exceed the devices there are. CPU slots are contiguous groups
    of *equal* size (cores left over stay idle): TensorFlow sizes its default thread
    pools from the cores a process may use, so unequal slots could change the bits
    of a job whose thread counts are not pinned. Jobs that ask for GPUs
    (``need_gpus``) get GPU slots or ``GpuUnavailable``, never CPU slots.
    """
    if need_gpus and not gpus:
        raise GpuUnavailable(
            "the sweep's jobs ask for GPUs (image.gpus=true) but no GPU is visible here for a "
            "GPU slot (neither NVML nor nvidia-smi lists one): add image.gpus=false to run the image on the CPU"
        )
    cores = sorted(cores)
    devices = len(gpus) if gpus else len(cores)
    kind = f"{len(gpus)} GPU(s)" if gpus else f"{len(cores)} CPU core(s) and no GPU"
    if requested == "auto" or requested is None:
        count = len(gpus) if gpus else max(1, len(cores) // max(1, threads_per_job))
    elif isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
        raise ConfigError(f"runtime.slots must be auto or a positive integer, got {requested!r}")
    elif requested > devices:
        raise ConfigError(
            f"runtime.slots={requested} but this machine has {kind}; use runtime.slots=auto or at most {devices}"
        )
    else:
        count = requested
    if count < 1:
        raise ConfigError(f"no device for a sweep slot: this machine has {kind}")
    if gpus:
        return [_gpu_slot(i, gpus[i]) for i in range(count)]
    size = len(cores) // count
    groups = [cores[i * size : (i + 1) * size] for i in range(count)]
    return [Slot(i, f"cpu {_span(g)}", cpus=frozenset(g)) for i, g in enumerate(groups)]


def _gpu_slot(i: int, gpu: dict) -> Slot:
    # By UUID when the probe gives one (NVML and nvidia-smi both do): CUDA numbers devices
    # fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, so an index may name another GPU
    # than NVML's (nvidia-smi's) index of the same number.
    index = str(gpu.get("index", i))
    return Slot(i, f"gpu {index}", env={"CUDA_VISIBLE_DEVICES": str(gpu.get("uuid") or index)})


def _span(cores: Sequence[int]) -> str:
    if len(cores) > 1 and list(cores) == list(range(cores[0], cores[-1] + 1)):
        return f"{cores[0]}-{cores[-1]}"
    return ",".join(map(str, cores))


def lock_path(lock_dir: Path, slot: Slot) -> Path:
    return lock_dir / f"slot-{slot.index:02d}.lock"


@contextmanager
def hold(slots: Sequence[Slot], lock_dir: Path, poll_s: float = 0.2) -> Iterator[Slot | None]:
    """Take the first free slot (waiting for one) and keep it until the block ends.

    With no slots (a scheduler such as Slurm allocates the devices) yields None.
    """
    from filelock import FileLock, Timeout

    if not slots:
        yield None
        return
    lock_dir.mkdir(parents=True, exist_ok=True)
    while True:
        for slot in slots:
            lock = FileLock(str(lock_path(lock_dir, slot)))
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue
            try:
                yield slot
            finally:
                lock.release()
            return
        time.sleep(poll_s)
