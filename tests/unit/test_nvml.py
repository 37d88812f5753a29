"""GPU facts through NVML, without a GPU: a fake of the few pynvml calls the reader makes.

The fake answers from a machine description. One GPU is ``tests/data/nvidia-smi-h100/
nvml.json`` as recorded on a real H100 (NVLink NotSupported on all 18 links); the 2- and
8-GPU machines are that GPU copied, with made-up UUIDs and PCI bus ids, and NVLinks to
the peer's bus id (2) or to NVSwitches (8, an HGX H100). A call the reader makes and the
fake does not know fails the test, so the fake is the list of what the reader depends on.
Where the same machine is also described by nvidia-smi's output (the recorded H100, the
hand-made topo -m texts), NVML and nvidia-smi must give the same record.
"""

from __future__ import annotations

import copy
import ctypes.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from launcher import proc
from launcher.record.probe import key, nvml, probes

H100 = Path(__file__).parent.parent / "data" / "nvidia-smi-h100"
RECORDED = json.loads((H100 / "nvml.json").read_text())
PROBE = nvml.probe  # kept: tests replace nvml.probe by one reading through a fake
ERRORS = {"NVMLError_InvalidArgument": 2, "NVMLError_NotSupported": 3, "NVMLError_LibraryNotFound": 12}


class NVMLError(Exception):
    """pynvml's error: ``value`` is the NVML return code; ``str`` as pynvml words it."""

    WORDS = {2: "Invalid Argument", 3: "Not Supported", 12: "NVML Shared Library Not Found"}

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return self.WORDS[self.value]


class FakeNvml:
    """The pynvml calls ``launcher.record.probe.nvml`` makes, answered from ``machine``; any other
    attribute fails the test (``__getattr__``)."""

    NVMLError = NVMLError

    def __init__(self, machine: dict) -> None:
        self.machine = machine
        self.NVML_NVLINK_MAX_LINKS = machine.get("nvlink_max_links", 18)  # 18 calls were recorded
        self.initialized = False
        self.shut_down = False

    def __getattr__(self, name: str):
        raise AssertionError(f"the fake NVML has no {name}: the reader calls what the fake does not know")

    def _answer(self, value):
        assert self.initialized, "called before nvmlInit"
        if isinstance(value, dict) and "error" in value:
            raise NVMLError(ERRORS[value["error"]])
        return value

    def _device(self, handle: tuple) -> dict:
        assert handle[0] == "handle"
        return self.machine["devices"][handle[1]]

    def _link(self, handle: tuple, link: int) -> dict:
        links = self._device(handle)["nvlink"]
        return self._answer(links[link] if link < len(links) else {"error": "NVMLError_InvalidArgument"})

    def nvmlInit(self) -> None:
        if self.machine.get("library_missing"):
            raise NVMLError(12)
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self.initialized, self.shut_down = False, True

    def nvmlSystemGetDriverVersion(self) -> str:
        return self._answer(self.machine["driver_version"])

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self._answer(self.machine["cuda_driver_version"])

    def nvmlDeviceGetCount(self) -> int:
        return self._answer(self.machine["device_count"])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> tuple:
        self._answer(self.machine["devices"][index])
        return ("handle", index)

    def nvmlDeviceGetName(self, handle):
        return self._answer(self._device(handle)["name"])

    def nvmlDeviceGetUUID(self, handle):
        return self._answer(self._device(handle)["uuid"])

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        return tuple(self._answer(self._device(handle)["cuda_compute_capability"]))

    def nvmlDeviceGetMemoryInfo(self, handle):
        total = self._answer(self._device(handle)["memory_total"])
        return SimpleNamespace(total=total, free=total, used=0)

    def nvmlDeviceGetMigMode(self, handle):
        return list(self._answer(self._device(handle)["mig_mode"]))

    def nvmlDeviceGetPciInfo(self, handle):
        return SimpleNamespace(busId=self._answer(self._device(handle)["pci_bus_id"]))

    def nvmlDeviceGetNvLinkState(self, handle, link):
        return self._link(handle, link)["state"]

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle, link):
        return self._link(handle, link)["remote_type"]

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle, link):
        return SimpleNamespace(busId=self._link(handle, link)["remote_bus_id"])

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return self._answer(self.machine["common_ancestor"][f"{a[1]}-{b[1]}"])


def machine(count: int, links: str = "none", ancestor: int | None = None) -> dict:
    """The recorded H100 machine with ``count`` such GPUs; NVLinks ``none`` (as recorded:
    NotSupported), ``peer`` (18 to the other GPU) or ``switch`` (18 to NVSwitches)."""
    m = copy.deepcopy(RECORDED)
    gpu = m["devices"][0]
    m["device_count"] = count
    m["devices"] = []
    for i in range(count):
        d = {
            **copy.deepcopy(gpu),
            "index": i,
            "uuid": f"GPU-{i}1111111-2222-3333-4444-555555555555",
            "pci_bus_id": f"00000000:{0x18 + 0x10 * i:02X}:00.0",
        }
        if links == "peer":
            # NVML's remote PCI info in the legacy spelling (4-digit domain, lower case).
            peer = f"0000:{0x18 + 0x10 * (1 - i):02x}:00.0"
            d["nvlink"] = [{"state": 1, "remote_type": 0, "remote_bus_id": peer}] * 18
        elif links == "switch":
            d["nvlink"] = [{"state": 1, "remote_type": 2, "remote_bus_id": "00000000:C5:00.0"}] * 18
        m["devices"].append(d)
    m["common_ancestor"] = {f"{i}-{j}": ancestor for i in range(count) for j in range(count) if i != j}
    return m


def topo(name: str) -> list[list[str]]:
    return probes.parse_nvidia_topology((H100 / name).read_text())


# ---------------------------------------------------------------- the recorded H100
def test_the_recorded_h100_through_nvml_is_what_nvidia_smi_printed():
    lib = FakeNvml(RECORDED)
    facts, why_not = nvml.probe(lib)
    assert why_not is None and lib.shut_down
    assert (
        facts["gpus"]
        == probes.parse_nvidia_smi_query((H100 / "query.txt").read_text())
        == [
            {
                "index": 0,
                "name": "NVIDIA H100 80GB HBM3",
                "compute_capability": "9.0",
                "driver_version": "580.159.04",
                "memory_mib": 81559,
                "mig_mode": "Disabled",
                "uuid": "GPU-11111111-2222-3333-4444-555555555555",
            }
        ]
    )
    assert facts["cuda_driver_version"] == "13.0" == probes.parse_cuda_driver_version((H100 / "banner.txt").read_text())
    assert facts["gpu_topology"] == [["X"]] == topo("topo-m.txt")


@pytest.mark.parametrize(
    ("count", "links", "topo_file"), [(2, "peer", "topo-m-2gpu.txt"), (8, "switch", "topo-m-8gpu.txt")]
)
def test_nvlinks_through_nvml_give_nvidia_smis_matrix(count, links, topo_file):
    facts, why_not = nvml.probe(FakeNvml(machine(count, links)))
    assert why_not is None
    assert facts["gpu_topology"] == topo(topo_file)
    assert {cell for row in facts["gpu_topology"] for cell in row} == {"X", "NV18"}
    assert [g["index"] for g in facts["gpus"]] == list(range(count))
    assert [g["uuid"][:5] for g in facts["gpus"]] == [f"GPU-{i}" for i in range(count)]


@pytest.mark.parametrize(("level", "cell"), [(10, "PIX"), (20, "PXB"), (30, "PHB"), (40, "NODE"), (50, "SYS")])
def test_gpus_without_nvlink_are_joined_by_their_pcie_path(level, cell):
    facts, _ = nvml.probe(FakeNvml(machine(2, "none", ancestor=level)))
    assert facts["gpu_topology"] == [["X", cell], [cell, "X"]]


def test_what_nvml_will_not_say_is_none_or_na_and_the_keyed_facts_are_still_read():
    m = machine(2, "none", ancestor={"error": "NVMLError_NotSupported"})
    for d in m["devices"]:
        d["mig_mode"] = d["memory_total"] = {"error": "NVMLError_NotSupported"}
    m["cuda_driver_version"] = {"error": "NVMLError_NotSupported"}
    facts, why_not = nvml.probe(FakeNvml(m))
    assert why_not is None
    assert [(g["mig_mode"], g["memory_mib"]) for g in facts["gpus"]] == [("[N/A]", None)] * 2
    assert facts["cuda_driver_version"] is None
    assert facts["gpu_topology"] == [["X", "?"], ["?", "X"]]


def test_a_keyed_fact_nvml_will_not_give_means_nvml_is_not_used():
    m = machine(1)
    m["devices"][0]["cuda_compute_capability"] = {"error": "NVMLError_NotSupported"}
    lib = FakeNvml(m)
    assert nvml.probe(lib) == (None, "NVML not used: NVMLError: Not Supported")
    assert lib.shut_down


def test_mig_enabled_and_pynvml_bytes():
    m = machine(1)
    m["devices"][0].update(mig_mode=[1, 1], name=b"NVIDIA H100 80GB HBM3", uuid=b"GPU-0abc")
    m["driver_version"] = b"580.159.04"
    (gpu,) = nvml.probe(FakeNvml(m))[0]["gpus"]
    assert (gpu["mig_mode"], gpu["name"], gpu["uuid"], gpu["driver_version"]) == (
        "Enabled",
        "NVIDIA H100 80GB HBM3",
        "GPU-0abc",
        "580.159.04",
    )


def test_conversions_are_nvidia_smis_spelling():
    assert [nvml.cuda_version(v) for v in (13000, 12040, 11080, 0, None)] == ["13.0", "12.4", "11.8", None, None]
    assert [nvml.mig_mode(v) for v in (0, 1, None, 7)] == ["Disabled", "Enabled", "[N/A]", "[N/A]"]
    assert nvml.link_matrix(3, {(0, 1): 4, (1, 0): 4}, [0, 0, 0], {(0, 2): 50, (2, 0): 50, (1, 2): 10, (2, 1): 10}) == [
        ["X", "NV4", "SYS"],
        ["NV4", "X", "PIX"],
        ["SYS", "PIX", "X"],
    ]


# ---------------------------------------------------------------- the source is recorded, not keyed
def _fp(hardware: dict) -> dict:
    cpu = {
        "vendor": "GenuineIntel",
        "model": "Xeon",
        "isa": ["avx2"],
        "family": "6",
        "model_number": "143",
        "stepping": "8",
        "cache_size": "x",
        "caches": {},
    }
    return {
        "schema": 3,
        "hardware": {"cpu": cpu, **hardware},
        "software": {},
        "environment": {},
        "environment_read": {},
        "determinism": {},
        "config_sha256": "c",
        "code": {},
        "data": {},
    }


def recorded_outputs(argv, *args, **kwargs):
    """``proc.capture`` answering nvidia-smi with the H100's recorded outputs."""
    assert argv[0] == "nvidia-smi"
    first = argv[1].split("=")[0] if argv[1:] else ""
    name = {"--query-gpu": "query.txt", "topo": "topo-m.txt"}.get(first, "banner.txt")
    return (H100 / name).read_text()


def test_one_gpu_read_through_nvml_or_nvidia_smi_is_the_same_gpu(monkeypatch):
    monkeypatch.setattr(nvml, "probe", lambda: PROBE(FakeNvml(RECORDED)))
    through_nvml = probes.gpu_facts()
    monkeypatch.setattr(nvml, "probe", lambda: (None, "NVML not used: NVML Shared Library Not Found"))
    monkeypatch.setattr(proc, "capture", recorded_outputs)
    through_smi = probes.gpu_facts()
    assert (through_nvml["gpu_source"], through_smi["gpu_source"]) == ("nvml", "nvidia-smi")
    assert through_nvml["gpu_source_note"] is None
    assert through_smi["gpu_source_note"] == "NVML not used: NVML Shared Library Not Found"
    same = ("gpus", "cuda_driver_version", "gpu_topology")
    assert {k: through_nvml[k] for k in same} == {k: through_smi[k] for k in same}
    a, b = _fp(through_nvml), _fp(through_smi)
    assert key.key_differences(a, b) == [] and key.key_sha256(a) == key.key_sha256(b)
    # ... and the key does tell another GPU apart.
    other = _fp({**through_smi, "gpus": [{**through_smi["gpus"][0], "compute_capability": "8.0"}]})
    assert [d[0] for d in key.key_differences(a, other)] == ["hardware.gpus"]


# ---------------------------------------------------------------- no NVML here: the fallback says so
def test_without_the_nvml_library_the_probe_falls_back_to_nvidia_smi_and_says_so(monkeypatch):
    lib = FakeNvml({**RECORDED, "library_missing": True})
    monkeypatch.setattr(nvml, "probe", lambda: PROBE(lib))
    monkeypatch.setattr(proc, "capture", recorded_outputs)
    facts = probes.hardware()
    assert facts["gpu_source"] == "nvidia-smi"
    assert facts["gpu_source_note"] == "NVML not used: NVML Shared Library Not Found"
    assert [g["name"] for g in facts["gpus"]] == ["NVIDIA H100 80GB HBM3"]
    assert (facts["cuda_driver_version"], facts["gpu_topology"]) == ("13.0", [["X"]])
    assert probes.gpus() == facts["gpus"]


def test_without_pynvml_or_nvidia_smi_no_gpu_is_listed_and_the_record_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    monkeypatch.setattr(proc, "capture", lambda argv, *a, **k: None)
    assert nvml.probe() == (None, "NVML not used: no pynvml module (pip install nvidia-ml-py)")
    facts = probes.gpu_facts()
    assert facts == {
        "gpus": [],
        "gpu_source": None,
        "gpu_source_note": "NVML not used: no pynvml module (pip install nvidia-ml-py); nvidia-smi not found, or it failed",  # noqa: E501
    }


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="this machine has libnvidia-ml.so")
def test_the_real_pynvml_on_this_machine_finds_no_library():
    pytest.importorskip("pynvml")
    facts, why_not = nvml.probe()
    assert facts is None and why_not == "NVML not used: NVML Shared Library Not Found"
