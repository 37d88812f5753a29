"""The GPU acceptance command without a GPU: its rows, verdicts, table, exit codes and slot plan.

The inputs are recorded: ``nvidia-smi`` of a two-A100 machine and of a real H100
(``tests/data/nvidia-smi-h100/``), and TensorFlow's facts as a job records them
(``tf-software-cpu.json``: this machine's tensorflow-cpu; ``tf-software-gpu-image.json``:
the tf-gpu image's CUDA build, run on this CPU).
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

from benchmarks import gpu_acceptance as ga
from benchmarks import gpu_image
from launcher.record.probe import probes

RECORDED = Path(__file__).parent / "recorded"
H100_DIR = Path(__file__).parent.parent / "data" / "nvidia-smi-h100"
A100S = probes.parse_nvidia_smi_query((RECORDED / "nvidia-smi-query.csv").read_text())
CPU_TF = json.loads((RECORDED / "tf-software-cpu.json").read_text())
IMAGE_TF = json.loads((RECORDED / "tf-software-gpu-image.json").read_text())
GPU_TF = {
    **IMAGE_TF,
    "tf_gpus": [{"device": "/physical_device:GPU:0", "name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0"}],
}
IDENTICAL = "IDENTICAL: weights and every epoch's metrics are bitwise equal, and the 7 traced steps\n"
SPLIT = """NOT COMPARABLE (forced: the comparability keys differ)
  first diverging step: 10 (epoch 1), equal at step 0: the bits split in steps 1-10; first differing layer in model order: conv2d (also dense)
  first differing epoch: 1 (metrics.jsonl)
  field                       run A  run B
  config_sha256               aaa    bbb
"""  # noqa: E501


# ---------------------------------------------------------------- fingerprint rows
def h100_hardware(source: str = "nvidia-smi", note: str | None = "NVML not used: NVML Shared Library Not Found"):
    """``hardware``'s GPU part as the recorded H100's nvidia-smi outputs give it."""
    return probes.gpu_record(
        source,
        probes.parse_nvidia_smi_query((H100_DIR / "query.txt").read_text()),
        probes.parse_cuda_driver_version((H100_DIR / "banner.txt").read_text()),
        probes.parse_nvidia_topology((H100_DIR / "topo-m.txt").read_text()),
        note,
    )


def test_fingerprint_rows_from_the_recorded_h100_name_the_source_cuda_and_topology():
    rows = ga.gpu_rows(h100_hardware(), "recorded by run r1")
    assert rows == [
        ga.Row(
            "GPU facts from", "INFO", "nvidia-smi (NVML not used: NVML Shared Library Not Found), recorded by run r1"
        ),
        ga.Row(
            "GPU 0", "INFO", "NVIDIA H100 80GB HBM3, compute capability 9.0, driver 580.159.04, MIG Disabled, 81559 MiB"
        ),
        ga.Row("CUDA driver API", "INFO", "13.0"),
        ga.Row("GPU topology", "PASS", '[["X"]]: one GPU'),
    ]
    assert ga.gpu_rows(h100_hardware("nvml", None), "probed now")[0].detail == "NVML, probed now"


def test_the_topology_row_fails_an_empty_matrix_and_summarizes_many_gpus():
    assert ga.topology_row([[]], 1) == ga.Row("GPU topology", "FAIL", "[[]]: not a 1x1 link matrix")  # the H100's bug
    assert ga.topology_row(None, 2).verdict == "FAIL"
    assert ga.topology_row([["NV18", "X"], ["X", "NV18"]], 2).verdict == "FAIL"
    assert ga.topology_row([["X", "NV18"]], 2).verdict == "FAIL"  # a GPU's row missing
    eight = probes.parse_nvidia_topology((H100_DIR / "topo-m-8gpu.txt").read_text())
    assert ga.topology_row(eight, 8) == ga.Row("GPU topology", "PASS", "8 GPUs, NV18 between every pair")
    a100s = probes.parse_nvidia_topology((RECORDED / "nvidia-smi-topo.txt").read_text())
    assert ga.topology_row(a100s, 2).detail == "2 GPUs, NV12 between every pair"
    mixed = [["X", "NV4", "SYS"], ["NV4", "X", "PIX"], ["SYS", "PIX", "X"]]
    assert ga.topology_row(mixed, 3).detail == "GPU0: X NV4 SYS; GPU1: NV4 X PIX; GPU2: SYS PIX X"


def test_tensorflow_against_the_gpu_facts_is_shown_from_the_runs_notes():
    assert ga.notes_row([]) == ga.Row("TensorFlow vs GPU facts", "INFO", "they agree")
    note = "TensorFlow sees GPU0 as compute capability 8.0, NVML says 9.0"
    assert ga.notes_row([note]).detail == note
    assert ga.notes_row(None).verdict == "NOT RUN"


def test_the_command_needs_only_the_standard_library_and_the_package():
    """Every import of the command, at the top or in a function: nothing to install beyond
    the launcher (and the GPU-enabled TensorFlow its runs use, in their own processes)."""
    tree = ast.parse(Path(ga.__file__).read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            roots.add(node.module.split(".")[0])
    assert roots - set(sys.stdlib_module_names) == {"launcher"}


def test_tensorflow_row_names_its_cuda_and_cudnn_build():
    row = ga.tf_row("tf-gpu image", IMAGE_TF)
    build = IMAGE_TF["tf_build"]
    assert row.verdict == "INFO"
    assert f"CUDA {build['cuda_version']}, cuDNN {build['cudnn_version']}" in row.detail
    assert row.detail.endswith("sees 0 GPU(s)")
    assert ga.tf_row("local", None).verdict == "NOT RUN"


def test_local_gpu_checks_need_a_cuda_build_that_sees_a_gpu():
    assert "not a CUDA build" in ga.local_gpu_gap(CPU_TF)
    assert "sees no GPU" in ga.local_gpu_gap(IMAGE_TF)
    assert "cannot be imported" in ga.local_gpu_gap(None)
    assert ga.local_gpu_gap(GPU_TF) is None


# ---------------------------------------------------------------- verdicts
def test_strict_twice_passes_only_identical_and_on_the_gpu():
    seen = [GPU_TF["tf_gpus"]] * 2
    assert ga.identical_row("strict twice", 0, IDENTICAL, seen).verdict == "PASS"
    different = ga.identical_row("strict twice", 1, "DIFFERENT: same comparability key, ...\n", seen)
    assert different.verdict == "FAIL" and "exit 1: DIFFERENT" in different.detail
    cpu = ga.identical_row("strict twice", 0, IDENTICAL, [GPU_TF["tf_gpus"], []])
    assert cpu == ga.Row("strict twice", "FAIL", "run 2 saw no GPU: it ran on the CPU")


def test_the_split_is_read_from_compare_allow_mismatch():
    row = ga.split_row(3, SPLIT, weights_equal=False)
    assert row.verdict == "PASS"
    assert row.detail.startswith("first diverging step: 10 (epoch 1)") and row.detail.endswith("(also dense)")
    assert ga.split_row(3, "NOT COMPARABLE (forced)\n", weights_equal=True).verdict == "INFO"
    unlocated = ga.split_row(3, "NOT COMPARABLE (forced)\n  no step trace in common (a run has no trace)\n", False)
    assert unlocated.verdict == "FAIL" and "no step trace in common" in unlocated.detail
    assert ga.split_row(2, "launch: error: not a run", False).verdict == "FAIL"


def test_timing_is_a_ratio_of_medians_with_the_anchor():
    row = ga.timing_row([2.0, 2.2, 9.0], [1.0, 1.1, 1.2], [10.0, 11.0, 12.0], [10.0, 10.0, 10.0])
    assert row.verdict == "INFO"
    assert row.detail.startswith("training 2.00x (2.20 s / 1.10 s), wall 1.10x, median of 3 interleaved rounds")
    assert "anchor 1.26x" in row.detail
    assert ga.timing_row([], [], [], []).verdict == "NOT RUN"


# ---------------------------------------------------------------- the sweep: slot plan and verdict
def test_sweep_slots_from_recorded_nvidia_smi_are_one_gpu_each():
    planned, why_not = ga.sweep_slots(A100S, list(range(64)))
    assert why_not is None
    assert [(s.device, s.env["CUDA_VISIBLE_DEVICES"]) for s in planned] == [
        ("gpu 0", A100S[0]["uuid"]),
        ("gpu 1", A100S[1]["uuid"]),
    ]


def test_sweep_needs_two_whole_gpus():
    assert ga.sweep_slots(A100S[:1], [0, 1]) == ([], "needs two or more GPUs (found 1)")
    mig = [A100S[0], {**A100S[1], "mig_mode": "Enabled"}]
    assert ga.sweep_slots(mig, [0, 1]) == ([], "MIG is enabled on GPU 1: a sweep slot is a whole GPU")


def _jobs(statuses=("complete",) * 4, gpus_seen=1):
    seen = GPU_TF["tf_gpus"] * gpus_seen
    return [
        {"seed": s, "status": st, "slot": f"gpu {s % 2}", "tf_gpus": seen, "error": None}
        for s, st in enumerate(statuses)
    ]


def test_sweep_passes_when_every_job_equals_its_seed_alone():
    row = ga.sweep_row(_jobs(), {s: (0, IDENTICAL) for s in range(4)})
    assert row == ga.Row(
        "+seed=range(4) in one-GPU slots", "PASS", "4 jobs in slots gpu 0, gpu 1: each IDENTICAL to its seed alone"
    )


def test_sweep_fails_on_a_different_job_a_failed_job_or_a_job_on_two_gpus():
    compares = {s: (0, IDENTICAL) for s in range(4)}
    assert "seed 2 vs alone: DIFFERENT" in ga.sweep_row(_jobs(), {**compares, 2: (1, "DIFFERENT: x\n")}).detail
    failed = ga.sweep_row(_jobs(("complete", "failed", "complete", "complete")), compares)
    assert failed.verdict == "FAIL" and "seed 1 failed" in failed.detail
    assert "saw 2 GPUs" in ga.sweep_row(_jobs(gpus_seen=2), compares).detail
    assert "3 jobs recorded" in ga.sweep_row(_jobs()[:3], compares).detail


# ---------------------------------------------------------------- table and exit code
def test_table_lists_what_could_not_be_checked_and_the_exit_code_follows_the_verdicts():
    no_docker = ga.Row("strict twice, tf-gpu image", "NOT RUN", "the Docker daemon has no NVIDIA container runtime")
    rows = [*ga.gpu_rows(h100_hardware(), "probed now"), ga.Row("strict twice, local", "PASS", "IDENTICAL"), no_docker]
    text = ga.render(rows)
    lines = text.splitlines()
    assert lines[0].split() == ["check", "verdict", "detail"]
    assert any(line.startswith("strict twice, local") and "PASS" in line for line in lines)
    assert "Could not check:" in lines
    assert "- strict twice, tf-gpu image: the Docker daemon has no NVIDIA container runtime" in lines
    assert any("MIG instances" in line for line in lines)
    assert lines[-1] == "PASSED (2 passed, 1 not run)"  # the topology row, strict twice
    assert ga.exit_code(rows) == 0
    failing = [*rows, ga.Row("x", "FAIL", "y")]
    assert ga.exit_code(failing) == 1 and ga.render(failing).splitlines()[-1].startswith("FAILED: 1 check(s)")


def test_no_gpu_exits_77_before_running_anything(monkeypatch, capsys):
    monkeypatch.setattr(probes, "gpu_facts", lambda: probes.gpu_record(None, [], note="NVML not used: no pynvml"))
    monkeypatch.setattr(ga, "Launcher", None)  # nothing may be launched
    assert ga.main([]) == ga.NO_GPU_EXIT == 77
    out = capsys.readouterr().out
    assert out.startswith("gpu_acceptance: no GPU found (NVML not used: no pynvml): nothing to check here")
    assert ga.no_gpu_message("nvml").startswith("gpu_acceptance: no GPU found (NVML lists none): nothing")
    assert "no GPU found (nvidia-smi lists none)" in ga.no_gpu_message("nvidia-smi", "NVML not used: x")


def test_detect_names_the_gpus_and_their_source(monkeypatch, capsys):
    monkeypatch.setattr(probes, "gpu_facts", lambda: h100_hardware("nvml", None))
    monkeypatch.setattr(ga, "Launcher", None)
    assert ga.main(["--detect"]) == 0
    assert capsys.readouterr().out == "gpu_acceptance: 1 GPU(s) from NVML: NVIDIA H100 80GB HBM3\n"


@pytest.mark.parametrize("argv", [["--epochs", "1"], ["--rounds", "0"], ["--bogus"]])
def test_bad_usage_exits_2(argv):
    with pytest.raises(SystemExit) as raised:
        ga.main(argv)
    assert raised.value.code == 2


# ---------------------------------------------------------------- nox -s gpu_image's verdicts
def test_gpu_image_checks_the_build_the_refusal_and_the_bits():
    refused = (
        "REFUSED: the runs differ in 2 field(s) ...\n  field  a  b\n"
        "  software.tf_build.cuda_version  x  y\n  software.container.content_tag  p  q\n"
    )
    digests = {"tf-gpu": "4b35", "tf-cpu": "4b35", "local": "4b35"}
    rows = gpu_image.verdict_rows(IMAGE_TF, digests, 3, refused)
    assert [r.verdict for r in rows] == ["PASS"] * 4
    assert "software.tf_build, software.container" in rows[1].detail
    assert gpu_image.verdict_rows(CPU_TF, digests, 3, refused)[0].verdict == "FAIL"  # not the CUDA build
    assert gpu_image.verdict_rows(GPU_TF, digests, 3, refused)[0].verdict == "FAIL"  # saw a GPU
    assert gpu_image.verdict_rows(IMAGE_TF, digests, 0, IDENTICAL)[1].verdict == "FAIL"  # the key let it through
    different = gpu_image.verdict_rows(IMAGE_TF, {**digests, "tf-cpu": "9999"}, 3, refused)
    assert [r.verdict for r in different[2:]] == ["FAIL", "PASS"]
    assert gpu_image.image_ref("[launch] building ...\nlaunch/tf-gpu:80ef10cb8e4b\n") == "launch/tf-gpu:80ef10cb8e4b"
