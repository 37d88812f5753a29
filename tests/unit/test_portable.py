"""determinism=portable without training: the plan's ISA caps, CPUID, the key, qemu refusals (issue 30)."""

from __future__ import annotations

import copy
import json
import os
import platform
from pathlib import Path

import pytest

from launcher.errors import ConfigError, DeterminismError
from launcher.job import determinism
from launcher.record.probe import cpuid, key, probes
from launcher.run import emulation
from tests.unit.test_fingerprint import _fp

RECORDED = Path(__file__).parent / "recorded"
X86 = platform.machine().lower() in ("x86_64", "amd64")


def _registers(name: str) -> dict:
    raw = json.loads((RECORDED / name).read_text())
    return {tuple(int(x, 0) for x in k.split(",")): tuple(v) for k, v in raw.items()}


# ---------------------------------------------------------------- the plan


def test_portable_is_strict_plus_the_isa_caps_of_its_baseline():
    strict = determinism.plan("strict", 7, 1, 1, True)
    portable = determinism.plan("portable", 7, 1, 1, True, numpy_version="2.4.6")
    assert portable.isa_baseline == "x86-64-v3" and strict.isa_baseline is None
    assert {k: v for k, v in portable.env.items() if k in strict.env} == strict.env
    assert {k: v for k, v in portable.env.items() if k not in strict.env} == {
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "OPENBLAS_CORETYPE": "Haswell",
        "MKL_CBWR": "AVX2",
        "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
        "XLA_FLAGS": "--xla_cpu_max_isa=AVX2",
    }
    for name in ("op_determinism", "intra_op_threads", "inter_op_threads", "deterministic_data", "jit_compile"):
        assert getattr(portable, name) == getattr(strict, name)
    assert determinism.Plan.from_dict(portable.to_dict()) == portable


def test_numpy_before_2_4_gets_its_own_names_for_the_avx512_targets():
    caps = determinism.isa_caps("x86-64-v3", "2.3.1")["NPY_DISABLE_CPU_FEATURES"].split()
    assert "AVX512_SKX" in caps and "X86_V4" not in caps
    assert determinism.isa_caps("x86-64-v3", "2.10.0")["NPY_DISABLE_CPU_FEATURES"].startswith("X86_V4")


def test_an_unmeasured_baseline_is_refused():
    with pytest.raises(DeterminismError, match="isa_baseline must be one of x86-64-v3"):
        determinism.plan("portable", 0, 1, 1, True, isa_baseline="x86-64-v4")


def test_portable_needs_pinned_threads_like_strict():
    with pytest.raises(DeterminismError, match="portable determinism needs fixed"):
        determinism.plan("portable", 0, None, 1)


def test_verify_names_each_cap_that_did_not_take_effect():
    p = determinism.plan("portable", 0, 1, 1, True, numpy_version="2.4.6")
    isa = {
        "name": "x86-64-v3",
        "numpy_dispatch": {"X86_V3": True, "X86_V4": True},
        "openblas_cores": {"libopenblas.so": "SkylakeX"},
        "supported_by_cpu": False,
    }
    problems = determinism.isa_problems(p, isa)
    assert problems == [
        "this CPU does not support x86-64-v3",
        "NumPy still dispatches X86_V4 above x86-64-v3",
        "libopenblas.so runs OpenBLAS core SkylakeX (planned Haswell)",
    ]
    ok = {
        "numpy_dispatch": {"X86_V3": True, "X86_V4": False},
        "openblas_cores": {"a.so": "HASWELL"},
        "supported_by_cpu": True,
    }
    assert determinism.isa_problems(p, ok) == []


@pytest.mark.parametrize("target", ["AVX512F", "AVX512_SKX", "X86_V4", "AVX10_1", "AMX_TILE"])
def test_every_numpy_target_above_the_baseline_still_on_is_named(target):
    """NumPy before 2.4 names each AVX-512 set (AVX512F ...), 2.4 groups them as X86_V4; AVX10 and
    AMX are above x86-64-v3 too. What is at or below the baseline may stay on."""
    p = determinism.plan("portable", 0, 1, 1, True, numpy_version="2.3.1")
    below = {"SSE42": True, "AVX2": True, "FMA3": True, "F16C": True, "X86_V3": True, "X86_V2": True}
    isa = {"numpy_dispatch": {**below, target: True}, "openblas_cores": {}, "supported_by_cpu": True}
    assert determinism.isa_problems(p, isa) == [f"NumPy still dispatches {target} above x86-64-v3"]
    assert determinism.isa_problems(p, {**isa, "numpy_dispatch": {**below, target: False}}) == []


def test_verify_fails_a_portable_run_whose_caps_did_not_take():
    p = determinism.plan("portable", 0, 1, 1, True, numpy_version="2.4.6")
    took = {
        "env": dict(p.env),
        "op_determinism": True,
        "intra_op_threads": 1,
        "inter_op_threads": 1,
        "deterministic_data": True,
        "jit_compile": False,
        "isa_baseline": {"numpy_dispatch": {"X86_V4": False}, "openblas_cores": {}, "supported_by_cpu": True},
    }
    determinism.verify(p, took)
    not_taken = {**took, "isa_baseline": {**took["isa_baseline"], "numpy_dispatch": {"X86_V4": True}}}
    with pytest.raises(DeterminismError, match="NumPy still dispatches X86_V4 above x86-64-v3"):
        determinism.verify(p, not_taken)
    unset = {**took, "env": {**took["env"], "ONEDNN_MAX_CPU_ISA": None}}
    with pytest.raises(DeterminismError, match="ONEDNN_MAX_CPU_ISA=None"):
        determinism.verify(p, unset)


def test_the_readback_of_numpy_and_openblas_is_this_process_own(monkeypatch):
    # Natively, without caps: NumPy's dispatch table and OpenBLAS' core as the libraries say.
    import numpy  # noqa: F401 - loads its OpenBLAS

    dispatch = determinism.numpy_dispatch()
    assert dispatch and all(isinstance(v, bool) for v in dispatch.values())
    cores = determinism.openblas_cores()
    assert cores and all(isinstance(v, str) and v for v in cores.values())


# ---------------------------------------------------------------- CPUID


def test_cpuid_of_qemu_haswell_reads_as_an_intel_haswell_at_x86_64_v3():
    cpu = cpuid.parse(_registers("cpuid-qemu-haswell.json"))
    assert (cpu["vendor"], cpu["model"], cpu["family"], cpu["model_number"]) == (
        "GenuineIntel",
        "Intel Core Processor (Haswell)",
        "6",
        "60",
    )
    assert {"avx2", "fma", "bmi2", "movbe"} <= set(cpu["flags"]) and "avx512f" not in cpu["flags"]
    assert cpuid.levels(cpu["flags"]) == ["x86-64-v2", "x86-64-v3"]


def test_cpuid_of_qemu_epyc_is_amd_zen1_and_of_this_host_avx512():
    epyc = cpuid.parse(_registers("cpuid-qemu-epyc.json"))
    assert (epyc["vendor"], epyc["family"], epyc["model_number"]) == ("AuthenticAMD", "23", "1")
    assert cpuid.supports(epyc["flags"], "x86-64-v3") and not cpuid.supports(epyc["flags"], "x86-64-v4")
    host = cpuid.parse(_registers("cpuid-amd-epyc-avx512.json"))
    assert host["family"] == "25" and cpuid.levels(host["flags"])[-1] == "x86-64-v4"


@pytest.mark.skipif(not X86, reason="CPUID is an x86 instruction")
def test_cpuid_read_natively_agrees_with_proc_cpuinfo():
    text = Path("/proc/cpuinfo").read_text()
    seen = cpuid.read()
    listed = probes.parse_cpuinfo(text)
    flags = next(line for line in text.splitlines() if line.startswith("flags")).split(":", 1)[1].split()
    assert seen is not None and seen["vendor"] == listed["vendor"]
    assert (seen["family"], seen["model_number"], seen["stepping"]) == (
        listed["family"],
        listed["model_number"],
        listed["stepping"],
    )
    assert set(seen["flags"]) <= set(flags)  # the kernel lists what CPUID says (and more)
    assert cpuid.levels(seen["flags"]) == listed["levels"]


# ---------------------------------------------------------------- the key


def _portable(fp: dict, supported: bool = True) -> dict:
    fp = copy.deepcopy(fp)
    fp["hardware"]["cpu"]["baseline"] = {"name": "x86-64-v3", "supported": supported}
    fp["determinism"]["level"] = "portable"
    return fp


def _haswell(fp: dict) -> dict:
    fp = copy.deepcopy(fp)
    fp["hardware"]["cpu"].update(
        vendor="GenuineIntel",
        model="Intel Core Processor (Haswell)",
        family="6",
        model_number="60",
        stepping="4",
        isa=["avx", "avx2", "fma"],
        cache_size="unknown (emulated)",
        caches="unknown (emulated)",
    )
    return fp


def test_portable_runs_on_different_cpus_have_one_key():
    a = _portable(_fp())
    b = _portable(_haswell(_fp()))
    assert key.key_differences(a, b) == []
    assert key.key_sha256(a) == key.key_sha256(b)
    assert key.comparability_key(a)["hardware.cpu.isa"] == {"baseline": "x86-64-v3", "supports_baseline": True}
    for field in ("vendor", "model", "family", "model_number", "stepping", "cache_size", "caches"):
        assert key.comparability_key(b)[f"hardware.cpu.{field}"] == "not keyed (portable: x86-64-v3)"


def test_strict_runs_on_different_cpus_are_still_refused_on_every_cpu_field():
    fields = {d[0] for d in key.key_differences(_fp(), _haswell(_fp()))}
    assert fields == {
        "hardware.cpu.model",
        "hardware.cpu.isa",
        "hardware.cpu.model_number",
        "hardware.cpu.stepping",
        "hardware.cpu.cache_size",
        "hardware.cpu.caches",
    }


def test_a_cpu_below_the_baseline_and_a_strict_run_differ_from_a_portable_one():
    assert [d[0] for d in key.key_differences(_portable(_fp()), _portable(_fp(), supported=False))] == [
        "hardware.cpu.isa.supports_baseline"
    ]
    fields = {d[0] for d in key.key_differences(_fp(), _portable(_fp()))}
    assert "determinism.level" in fields and "hardware.cpu.model" in fields


# ---------------------------------------------------------------- qemu


def test_qemu_cpu_models_are_parsed_from_its_help():
    models = emulation.parse_cpu_models((RECORDED / "qemu-x86_64-cpu-help.txt").read_text())
    assert {"Haswell", "EPYC", "Skylake-Client", "Nehalem", "Haswell-v4"} <= set(models)
    assert "Available" not in models and "CPUs:" not in models


def _without_qemu(tmp_path: Path) -> dict:
    """PATH with the interpreter's directory only: no qemu-x86_64 on it."""
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(sys.executable, bin_dir / "python")
    return {"PATH": str(bin_dir)}


def test_replay_cpu_without_qemu_refuses_in_one_line_with_the_install_command(tmp_path, launch):
    done = launch("replay", str(tmp_path / "any-run"), "--cpu", "Haswell", env=_without_qemu(tmp_path))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "launch: error: --cpu needs qemu-user's qemu-x86_64, which is not installed here: apt-get install qemu-user"
    ]
    assert "Traceback" not in done.stderr


def test_audit_cpu_knob_without_qemu_refuses_before_anything_runs(tmp_path, launch, store):
    done = launch("audit", f"store.root={store}", "audit.knobs=[cpu]", env=_without_qemu(tmp_path))
    assert done.returncode == 2, done.stderr
    assert "apt-get install qemu-user" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not any(store.glob("2*"))  # no run was made


@pytest.mark.skipif(
    not emulation.shutil.which("qemu-x86_64") and not os.environ.get("LAUNCH_REQUIRE_QEMU"),
    reason="qemu-x86_64 is not installed (apt-get install qemu-user)",
)
def test_an_unknown_cpu_model_is_refused_by_name(tmp_path, launch):
    done = launch("replay", str(tmp_path / "any-run"), "--cpu", "Pentium9000")
    assert done.returncode == 2
    assert "--cpu 'Pentium9000': qemu-x86_64 knows no such CPU model" in done.stderr


@pytest.mark.skipif(
    not emulation.shutil.which("qemu-x86_64") and not os.environ.get("LAUNCH_REQUIRE_QEMU"),
    reason="qemu-x86_64 is not installed (apt-get install qemu-user)",
)
def test_a_cpu_below_the_baseline_is_refused_in_one_line_before_a_run_exists():
    from launcher.run import composition, config, pipeline

    resolved = config.resolve(composition.compose(["determinism=portable"]))
    pipeline.check_baseline(resolved, "Haswell")  # x86-64-v3: accepted
    with pytest.raises(DeterminismError) as refused:
        pipeline.check_baseline(resolved, "Nehalem")
    assert str(refused.value) == (
        "determinism=portable needs a CPU with x86-64-v3; Intel Core i7 9xx (Nehalem Class Core i7) has x86-64-v2"
    )
    pipeline.check_baseline(config.resolve(composition.compose([])), "Nehalem")  # strict: no baseline to check


def test_the_audit_cpu_knob_is_opt_in_and_runs_each_model_emulated():
    from launcher.run import composition, config
    from launcher.verdict import audit

    cfg = config.resolve(composition.compose([]))
    assert "cpu" not in [t.knob for t in audit.trials(cfg, 2, audit.parse_options([]))]
    options = audit.parse_options(["audit.knobs=[cpu]", "audit.cpus=[Haswell,EPYC]"])
    plan = audit.trials(cfg, 2, options)
    assert [(t.knob, t.cpu) for t in plan] == [("repeat", None), ("repeat", None), ("cpu", "Haswell"), ("cpu", "EPYC")]
    with pytest.raises(ConfigError, match="audit.cpus"):
        audit.parse_options(["audit.knobs=[cpu]", "audit.cpus=[]"])


def test_isa_baseline_is_validated_with_the_config():
    from launcher.run import composition, config

    with pytest.raises(ConfigError, match=r"determinism.isa_baseline: .*'x86-64-v9', expected one of \[x86-64-v3\]"):
        config.resolve(composition.compose(["determinism=portable", "determinism.isa_baseline=x86-64-v9"]))


@pytest.mark.skipif(
    not emulation.shutil.which("qemu-x86_64") and not os.environ.get("LAUNCH_REQUIRE_QEMU"),
    reason="qemu-x86_64 is not installed (apt-get install qemu-user)",
)
def test_the_emulated_job_process_itself_runs_under_qemu(tmp_path):
    from launcher.run import runtime

    argv = runtime.bootstrap_argv("/venv/bin/python", tmp_path, "Haswell")
    assert argv[1:3] == ["-cpu", "Haswell"] and os.path.basename(argv[0]) == "qemu-x86_64"
    assert argv[3:] == runtime.bootstrap_argv("/venv/bin/python", tmp_path)  # the same job command, wrapped
