"""The GPU acceptance command without a GPU: its rows, verdicts, table, exit codes and slot plan.

The inputs are recorded: ``nvidia-smi`` of a two-A100 machine, and TensorFlow's facts
as a job records them (``tf-software-cpu.json``: this machine's tensorflow-cpu;
``tf-software-gpu-image.json``: the tf-gpu image's CUDA build, run on this CPU).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import gpu_acceptance as ga
from benchmarks import gpu_image
from launcher.record import probes

RECORDED = Path(__file__).parent / "recorded"
A100S = probes.parse_nvidia_smi_query((RECORDED / "nvidia-smi-query.csv").read_text())
CPU_TF = json.loads((RECORDED / "tf-software-cpu.json").read_text())
IMAGE_TF = json.loads((RECORDED / "tf-software-gpu-image.json").read_text())
GPU_TF = {**IMAGE_TF, "tf_gpus": [{"device": "/physical_device:GPU:0", "name": "NVIDIA A100-SXM4-80GB",
                                   "compute_capability": "8.0"}]}  # fmt: skip
IDENTICAL = "IDENTICAL: weights and every epoch's metrics are bitwise equal, and the 7 traced steps\n"
SPLIT = """NOT COMPARABLE (forced: the comparability keys differ)
  first diverging step: 10 (epoch 1), equal at step 0: the bits split in steps 1-10; first differing layer in model order: conv2d (also dense)
  first differing epoch: 1 (metrics.jsonl)
  field                       run A  run B
  config_sha256               aaa    bbb
"""  # noqa: E501


# ---------------------------------------------------------------- fingerprint rows
def test_fingerprint_rows_from_recorded_nvidia_smi():
    cuda = probes.parse_cuda_driver_version((RECORDED / "nvidia-smi.txt").read_text())
    rows = ga.gpu_rows(A100S, cuda)
    assert rows[0] == ga.Row("GPU 0", "INFO", "NVIDIA A100-SXM4-80GB, compute capability 8.0, "
                                              "driver 550.54.15, MIG Disabled; CUDA driver API 12.4")  # fmt: skip
    assert [r.check for r in rows] == ["GPU 0", "GPU 1"]


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


def test_the_split_is_read_from_compare_force():
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
        ("gpu 0", A100S[0]["uuid"]), ("gpu 1", A100S[1]["uuid"]),
    ]  # fmt: skip


def test_sweep_needs_two_whole_gpus():
    assert ga.sweep_slots(A100S[:1], [0, 1]) == ([], "needs two or more GPUs (found 1)")
    mig = [A100S[0], {**A100S[1], "mig_mode": "Enabled"}]
    assert ga.sweep_slots(mig, [0, 1]) == ([], "MIG is enabled on GPU 1: a sweep slot is a whole GPU")


def _jobs(statuses=("complete",) * 4, gpus_seen=1):
    seen = GPU_TF["tf_gpus"] * gpus_seen
    return [{"seed": s, "status": st, "slot": f"gpu {s % 2}", "tf_gpus": seen, "error": None}
            for s, st in enumerate(statuses)]  # fmt: skip


def test_sweep_passes_when_every_job_equals_its_seed_alone():
    row = ga.sweep_row(_jobs(), {s: (0, IDENTICAL) for s in range(4)})
    assert row == ga.Row("+seed=range(4) in one-GPU slots", "PASS",
                         "4 jobs in slots gpu 0, gpu 1: each IDENTICAL to its seed alone")  # fmt: skip


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
    rows = [*ga.gpu_rows(A100S[:1], "12.4"), ga.Row("strict twice, local", "PASS", "IDENTICAL"), no_docker]
    text = ga.render(rows)
    lines = text.splitlines()
    assert lines[0].split() == ["check", "verdict", "detail"]
    assert any(line.startswith("strict twice, local") and "PASS" in line for line in lines)
    assert "Could not check:" in lines
    assert "- strict twice, tf-gpu image: the Docker daemon has no NVIDIA container runtime" in lines
    assert any("MIG instances" in line for line in lines)
    assert lines[-1] == "PASSED (1 passed, 1 not run)"
    assert ga.exit_code(rows) == 0
    failing = [*rows, ga.Row("x", "FAIL", "y")]
    assert ga.exit_code(failing) == 1 and ga.render(failing).splitlines()[-1].startswith("FAILED: 1 check(s)")


def test_no_gpu_exits_77_before_running_anything(monkeypatch, capsys):
    monkeypatch.setattr(probes, "gpus", lambda: [])
    monkeypatch.setattr(ga, "Launcher", None)  # nothing may be launched
    assert ga.main([]) == ga.NO_GPU_EXIT == 77
    assert capsys.readouterr().out.startswith("gpu_acceptance: no GPU found")


@pytest.mark.parametrize("argv", [["--epochs", "1"], ["--rounds", "0"], ["--bogus"]])
def test_bad_usage_exits_2(argv):
    with pytest.raises(SystemExit) as raised:
        ga.main(argv)
    assert raised.value.code == 2


# ---------------------------------------------------------------- nox -s gpu_image's verdicts
def test_gpu_image_checks_the_build_the_refusal_and_the_bits():
    refused = ("REFUSED: the runs differ in 2 field(s) ...\n  field  a  b\n"
               "  software.tf_build.cuda_version  x  y\n  software.container.content_tag  p  q\n")
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
