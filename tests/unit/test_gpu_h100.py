"""nvidia-smi's output as a real H100 printed it, and what TensorFlow saw against it.

``tests/data/nvidia-smi-h100/`` holds the recorded outputs (``query.txt``, ``banner.txt``,
``topo-m.txt``: `topo -m` underlines its header with ANSI escape codes even into a pipe)
and two hand-made `topo -m` texts in the same form, for 2 and 8 GPUs (its README).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.record.probe import fingerprint, key, probes

H100 = Path(__file__).parent.parent / "data" / "nvidia-smi-h100"
ESC = "\x1b"


def text(name: str) -> str:
    return (H100 / name).read_text()


# ---------------------------------------------------------------- the parsers, on the recorded outputs
def test_the_recorded_outputs_are_the_escaped_ones():
    assert f"\t{ESC}[4mGPU0\t" in text("topo-m.txt") and text("topo-m.txt").count(ESC) == 2
    for name in ("topo-m-2gpu.txt", "topo-m-8gpu.txt"):
        assert text(name).startswith(f"\t{ESC}[4mGPU0\tGPU1\t") and text(name).count(ESC) == 2


def test_the_recorded_h100_parses_into_its_gpu_cuda_version_and_topology():
    assert probes.parse_nvidia_smi_query(text("query.txt")) == [
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
    assert probes.parse_cuda_driver_version(text("banner.txt")) == "13.0"
    assert probes.parse_nvidia_topology(text("topo-m.txt")) == [["X"]]


def test_two_and_eight_gpus_parse_to_their_link_matrices():
    assert probes.parse_nvidia_topology(text("topo-m-2gpu.txt")) == [["X", "NV18"], ["NV18", "X"]]
    eight = probes.parse_nvidia_topology(text("topo-m-8gpu.txt"))
    assert eight == [["X" if i == j else "NV18" for j in range(8)] for i in range(8)]  # NIC columns and rows dropped


def test_escape_codes_anywhere_are_stripped_by_every_parser():
    underline = lambda s: f"{ESC}[4m{s}{ESC}[0m"  # noqa: E731
    assert probes.strip_ansi(f"{ESC}[1;31mred{ESC}[0m {ESC}[4mGPU0{ESC}[0m") == "red GPU0"
    row = text("query.txt").strip()
    assert probes.parse_nvidia_smi_query(underline(row)) == probes.parse_nvidia_smi_query(row)
    assert probes.parse_cuda_driver_version(f"CUDA Version: {underline('13.0')}") == "13.0"
    # The rows underlined too, and a first line before the header.
    lines = text("topo-m-2gpu.txt").splitlines()
    escaped = "\n" + "\n".join(underline(line) if line.startswith("GPU") else line for line in lines)
    assert probes.parse_nvidia_topology(escaped) == [["X", "NV18"], ["NV18", "X"]]
    assert probes.parse_nvidia_topology(f"{ESC}[4m{ESC}[0m\nLegend:\n") == []


# ---------------------------------------------------------------- what TensorFlow saw, against NVML
H100_GPU = probes.parse_nvidia_smi_query(text("query.txt"))[0]
A100_GPU = {**H100_GPU, "name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0"}


def hw(*gpus: dict, source: str = "nvml") -> dict:
    return {
        "gpus": [{**g, "index": i, "uuid": f"GPU-{i}{g['uuid'][5:]}"} for i, g in enumerate(gpus)],
        "gpu_source": source,
    }


def seen(*gpus: dict) -> list[dict]:
    """``software.tf_gpus`` as ``probes.tensorflow_gpus`` records TensorFlow's device details."""
    return [
        {"device": f"/physical_device:GPU:{k}", "name": g["name"], "compute_capability": g["compute_capability"]}
        for k, g in enumerate(gpus)
    ]


def notes(hardware, tf_gpus, **env):
    return probes.tensorflow_gpu_notes(hardware, tf_gpus, env)


def test_tensorflow_and_nvml_agreeing_make_no_note():
    assert notes(hw(H100_GPU), seen(H100_GPU)) == []
    assert notes(hw(H100_GPU, H100_GPU), seen(H100_GPU), CUDA_VISIBLE_DEVICES="GPU-1111") == []  # a sweep slot
    assert notes(hw(), []) == [] and notes(hw(), None) == []  # a CPU machine
    assert notes(hw(H100_GPU), [], CUDA_VISIBLE_DEVICES="-1") == []  # hidden on purpose


def test_a_different_compute_capability_or_name_is_a_named_note():
    odd = {**H100_GPU, "compute_capability": "8.0"}
    assert notes(hw(H100_GPU), seen(odd)) == ["TensorFlow sees GPU0 as compute capability 8.0, NVML says 9.0"]
    renamed = {**H100_GPU, "name": "NVIDIA H100 PCIe"}
    assert notes(hw(H100_GPU, source="nvidia-smi"), seen(renamed)) == [
        "TensorFlow sees GPU0 as NVIDIA H100 PCIe, nvidia-smi says NVIDIA H100 80GB HBM3"
    ]


def test_tensorflows_gpu_k_is_the_kth_device_cuda_visible_devices_names():
    machine = hw(H100_GPU, A100_GPU)
    assert notes(machine, seen(A100_GPU), CUDA_VISIBLE_DEVICES="1") == []
    assert notes(machine, seen(A100_GPU), CUDA_VISIBLE_DEVICES="GPU-1111") == []
    assert notes(machine, seen(A100_GPU, H100_GPU), CUDA_VISIBLE_DEVICES="1,0") == []
    assert notes(machine, seen(H100_GPU), CUDA_VISIBLE_DEVICES="1") == [
        "TensorFlow sees GPU0 (NVML's GPU 1) as NVIDIA H100 80GB HBM3, NVML says NVIDIA A100-SXM4-80GB",
        "TensorFlow sees GPU0 (NVML's GPU 1) as compute capability 9.0, NVML says 8.0",
    ]
    assert (
        notes(
            machine,
            [
                {
                    "device": "/physical_device:GPU:0",
                    "name": "NVIDIA A100-SXM4-80GB MIG 1g.10gb",
                    "compute_capability": "8.0",
                }
            ],
            CUDA_VISIBLE_DEVICES="MIG-abcd",
        )
        == []
    )


def test_unlike_gpus_without_a_device_order_are_matched_by_kind_only():
    machine = hw(H100_GPU, A100_GPU)
    assert notes(machine, seen(A100_GPU, H100_GPU)) == []  # CUDA's fastest-first order
    odd = {**H100_GPU, "compute_capability": "8.0"}
    assert notes(machine, seen(A100_GPU, odd)) == [
        "TensorFlow sees GPU1 as NVIDIA H100 80GB HBM3, compute capability 8.0; NVML lists no such GPU"
    ]
    assert notes(machine, seen(A100_GPU, H100_GPU), CUDA_DEVICE_ORDER="PCI_BUS_ID") == [
        "TensorFlow sees GPU0 as NVIDIA A100-SXM4-80GB, NVML says NVIDIA H100 80GB HBM3",
        "TensorFlow sees GPU0 as compute capability 8.0, NVML says 9.0",
        "TensorFlow sees GPU1 as NVIDIA H100 80GB HBM3, NVML says NVIDIA A100-SXM4-80GB",
        "TensorFlow sees GPU1 as compute capability 9.0, NVML says 8.0",
    ]


def test_a_gpu_tensorflow_did_not_see_or_one_nvml_did_not_list_is_a_note():
    assert notes(hw(H100_GPU), []) == ["TensorFlow sees no GPU, NVML lists 1 GPU"]
    assert notes(hw(H100_GPU, H100_GPU), [], CUDA_VISIBLE_DEVICES="0") == [
        "TensorFlow sees no GPU, NVML lists 2 GPUs (CUDA_VISIBLE_DEVICES=0 names 1)"
    ]
    assert notes({"gpus": [], "gpu_source": None}, seen(H100_GPU)) == [
        "TensorFlow sees 1 GPU, the launcher's probe lists no GPU"
    ]


def test_the_notes_are_recorded_in_the_fingerprint_and_out_of_the_key():
    launcher_side = {
        "schema": 3,
        "hardware": {"cpu": {}, **hw(H100_GPU)},
        "software": None,
        "code": {},
        "environment": {"CUDA_VISIBLE_DEVICES": "0"},
        "config_sha256": "c",
    }
    job = {"software": {"tf_gpus": seen(H100_GPU)}, "determinism": {}, "data": {}}
    agreeing = fingerprint.merge_job_facts(launcher_side, job)
    assert agreeing["hardware"]["gpu_notes"] == []
    odd = {**job, "software": {"tf_gpus": seen({**H100_GPU, "compute_capability": "8.0"})}}
    disagreeing = fingerprint.merge_job_facts(launcher_side, odd)
    assert disagreeing["hardware"]["gpu_notes"] == ["TensorFlow sees GPU0 as compute capability 8.0, NVML says 9.0"]
    for name in key.KEY:
        if name.startswith("hardware.gpus"):
            assert key.KEY[name](agreeing) == key.KEY[name](disagreeing)
    assert not any("gpu_notes" in name or "tf_gpus" in name or "gpu_source" in name for name in key.KEY)


@pytest.mark.parametrize("source", ["nvml", "nvidia-smi", None])
def test_the_source_of_the_gpu_facts_is_not_in_the_key(source):
    a = {"hardware": {"cpu": {}, **hw(H100_GPU, source="nvml")}}
    b = {"hardware": {"cpu": {}, **hw(H100_GPU, source=source), "gpu_source_note": "NVML not used: ..."}}
    assert key.KEY["hardware.gpus"](a) == key.KEY["hardware.gpus"](b)


def test_the_job_records_tensorflows_device_details_of_each_visible_gpu():
    """``probes.tensorflow_gpus`` through a stand-in for the two ``tf.config`` calls it makes
    (the real ones answer [] on this CPU machine)."""

    class Config:
        class experimental:  # noqa: N801  (tf.config.experimental)
            @staticmethod
            def get_device_details(device):
                return {"device_name": "NVIDIA H100 80GB HBM3", "compute_capability": (9, 0)}

        @staticmethod
        def list_physical_devices(kind):
            assert kind == "GPU"
            return [type("PhysicalDevice", (), {"name": "/physical_device:GPU:0"})()]

    tf = type("tf", (), {"config": Config})
    assert probes.tensorflow_gpus(tf) == seen(H100_GPU)
    assert probes.tensorflow_gpu_notes(hw(H100_GPU), probes.tensorflow_gpus(tf), {}) == []
