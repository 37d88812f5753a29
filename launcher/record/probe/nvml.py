"""NVML, NVIDIA's management library, read through nvidia-ml-py (``pynvml``): the GPUs as
``nvidia-smi`` itself reads them.

``read`` asks a pynvml-like module for the facts (tested through a fake of the few calls it
makes); the conversions into the recorded form (``cuda_version``, ``mig_mode``,
``link_matrix``) are pure, and give exactly what ``nvidia-smi``'s own output parses to
(``launcher.record.probe.probes``), so one GPU read through either source is recorded the same.
``probe`` loads the real library and, where it cannot (no ``pynvml`` module, no
``libnvidia-ml.so``, no driver), says why: the caller then falls back to ``nvidia-smi``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

MIB = 1024 * 1024
FEATURE_ENABLED = 1  # NVML_FEATURE_ENABLED: nvmlDeviceGetNvLinkState of an active link
NVLINK_TO_SWITCH = 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH
# NVML_TOPOLOGY_* (nvmlDeviceGetTopologyCommonAncestor) as `nvidia-smi topo -m` names them.
PCIE_PATHS = {10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
UNKNOWN_PATH = "?"  # NVML did not say how two GPUs are connected


# ---------------------------------------------------------------- pure: NVML's values as recorded
def cuda_version(value: int | None) -> str | None:
    """NVML's CUDA driver API version (``13000``) as nvidia-smi's banner prints it (``"13.0"``)."""
    if not value:
        return None
    return f"{value // 1000}.{value % 1000 // 10}"


def mig_mode(current: int | None) -> str:
    """NVML's current MIG mode as ``--query-gpu=mig.mode.current`` prints it; ``[N/A]`` where
    the GPU has no MIG (NVML answers NotSupported, here None)."""
    return {0: "Disabled", 1: "Enabled"}.get(current, "[N/A]") if current is not None else "[N/A]"


def link_matrix(
    count: int, direct: dict[tuple[int, int], int], to_switch: list[int], pcie: dict[tuple[int, int], int | None]
) -> list[list[str]]:
    """``nvidia-smi topo -m``'s GPU-to-GPU matrix from NVML's answers.

    ``direct[(i, j)]``: the active NVLinks of GPU i whose far end is GPU j; ``to_switch[i]``:
    GPU i's active NVLinks to an NVSwitch (GPUs on the switches reach each other over the
    links both have, as nvidia-smi counts them: ``NV18`` on an HGX H100); ``pcie[(i, j)]``:
    NVML's common-ancestor level, for a pair with no NVLink (None: NVML did not say).
    """
    matrix = []
    for i in range(count):
        row = []
        for j in range(count):
            if i == j:
                row.append("X")
                continue
            links = direct.get((i, j), 0) + min(to_switch[i], to_switch[j])
            row.append(f"NV{links}" if links else PCIE_PATHS.get(pcie.get((i, j)) or -1, UNKNOWN_PATH))
        matrix.append(row)
    return matrix


# ---------------------------------------------------------------- through the library
def read(lib: Any) -> dict:
    """The GPUs (in ``probes.parse_nvidia_smi_query``'s form), the CUDA driver API version and
    the link matrix, through ``lib`` (pynvml, initialized).

    Raises ``lib.NVMLError`` where a fact of the comparability key (name, compute capability,
    driver) or the UUID a sweep slot names cannot be read; the others are None when NVML
    does not answer for them (memory, CUDA version) or ``[N/A]`` (MIG).
    """
    driver = _text(lib.nvmlSystemGetDriverVersion())
    handles = [lib.nvmlDeviceGetHandleByIndex(i) for i in range(lib.nvmlDeviceGetCount())]
    gpus = []
    for index, handle in enumerate(handles):
        major, minor = lib.nvmlDeviceGetCudaComputeCapability(handle)
        memory = getattr(_maybe(lib, lib.nvmlDeviceGetMemoryInfo, handle), "total", None)
        gpus.append(
            {
                "index": index,
                "name": _text(lib.nvmlDeviceGetName(handle)),
                "compute_capability": f"{major}.{minor}",
                "driver_version": driver,
                "memory_mib": memory // MIB if memory is not None else None,
                "mig_mode": mig_mode((_maybe(lib, lib.nvmlDeviceGetMigMode, handle) or [None])[0]),
                "uuid": _text(lib.nvmlDeviceGetUUID(handle)),
            }
        )
    return {
        "gpus": gpus,
        "cuda_driver_version": cuda_version(_maybe(lib, lib.nvmlSystemGetCudaDriverVersion)),
        "gpu_topology": topology(lib, handles),
    }


def topology(lib: Any, handles: list) -> list[list[str]]:
    """The link matrix of the GPUs ``handles``: each active NVLink by its far end (a GPU, by
    its PCI bus id, or an NVSwitch), and the PCIe path of a pair with none."""
    bus_ids = [_bus_id(getattr(_maybe(lib, lib.nvmlDeviceGetPciInfo, h), "busId", None)) for h in handles]
    owner = {bus: i for i, bus in enumerate(bus_ids) if bus}
    direct: dict[tuple[int, int], int] = {}
    to_switch = [0] * len(handles)
    for i, handle in enumerate(handles):
        for link in range(lib.NVML_NVLINK_MAX_LINKS):
            if _maybe(lib, lib.nvmlDeviceGetNvLinkState, handle, link) != FEATURE_ENABLED:
                continue  # inactive, or no such link on this GPU (NotSupported, InvalidArgument)
            if _maybe(lib, lib.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link) == NVLINK_TO_SWITCH:
                to_switch[i] += 1
                continue
            far_end = _maybe(lib, lib.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
            far = owner.get(_bus_id(getattr(far_end, "busId", None)))
            if far is not None and far != i:
                direct[(i, far)] = direct.get((i, far), 0) + 1
    pcie = {}
    for i, a in enumerate(handles):
        for j, b in enumerate(handles):
            if i != j and not direct.get((i, j)) and not min(to_switch[i], to_switch[j]):
                pcie[(i, j)] = _maybe(lib, lib.nvmlDeviceGetTopologyCommonAncestor, a, b)
    return link_matrix(len(handles), direct, to_switch, pcie)


def probe(lib: Any = None) -> tuple[dict | None, str | None]:
    """``(read's facts, None)`` through NVML, or ``(None, why not)`` in one phrase: no
    ``pynvml`` module, no ``libnvidia-ml.so``, no driver, or a fact it would not give.

    ``lib`` is the real ``pynvml`` unless given (a test's fake). Never raises for a
    machine without NVML: the caller falls back to ``nvidia-smi``.
    """
    if lib is None:
        try:
            import pynvml as lib
        except ImportError:
            return None, "NVML not used: no pynvml module (pip install nvidia-ml-py)"
    try:
        lib.nvmlInit()
    except lib.NVMLError as exc:
        return None, f"NVML not used: {exc}"
    try:
        return read(lib), None
    except (lib.NVMLError, AttributeError) as exc:  # AttributeError: a pynvml too old for a call
        return None, f"NVML not used: {type(exc).__name__}: {exc}"
    finally:
        _maybe(lib, lib.nvmlShutdown)


def _maybe(lib: Any, call: Callable[..., T], *args: Any) -> T | None:
    """``call(*args)``, or None where NVML answers with an error (NotSupported, say)."""
    try:
        return call(*args)
    except lib.NVMLError:
        return None


def _text(value: str | bytes) -> str:
    """pynvml's strings (bytes from versions before 11.5)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _bus_id(value: str | bytes | None) -> str | None:
    """A PCI bus id in one spelling: NVML writes the domain with 8 hex digits or 4, upper or lower case."""
    if not value:
        return None
    parts = _text(value).strip().lower().split(":")
    if len(parts) == 3 and all(c in "0123456789abcdef" for c in parts[0]) and parts[0]:
        return f"{int(parts[0], 16):08x}:{parts[1]}:{parts[2]}"
    return ":".join(parts)
