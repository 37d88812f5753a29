"""Fingerprint parsers on recorded outputs, the env allowlist, and the comparability key."""

import copy
import json
from pathlib import Path

from launcher.record.probe import environment, key, probes

RECORDED = Path(__file__).parent / "recorded"


def test_parse_cpuinfo_keeps_kernel_selecting_isa_flags():
    cpu = probes.parse_cpuinfo((RECORDED / "cpuinfo-epyc.txt").read_text())
    assert cpu["vendor"] == "AuthenticAMD" and cpu["model"] == "AMD EPYC"
    assert {"avx", "avx2", "fma", "avx512f"} <= set(cpu["isa"])
    assert "fpu" not in cpu["isa"] and cpu["isa"] == sorted(cpu["isa"])


def test_parse_cpuinfo_arm():
    text = (
        "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm sve i8mm bf16\n"
        "CPU implementer\t: 0x41\nCPU part\t: 0xd40\n"
    )
    cpu = probes.parse_cpuinfo(text + "CPU architecture: 8\nCPU variant\t: 0x1\nCPU revision\t: 1\n")
    assert cpu == {
        "vendor": "0x41",
        "model": "0xd40",
        "isa": ["asimd", "bf16", "i8mm", "sve"],
        "family": "8",
        "model_number": "0x1",
        "stepping": "1",
        "cache_size": None,
        "microcode": None,
        "levels": [],
    }


def test_parse_cpuinfo_names_the_generation_behind_the_model_name():
    text = (Path(__file__).parent / "recorded" / "cpuinfo-epyc.txt").read_text()
    cpu = probes.parse_cpuinfo(text)
    assert (cpu["model"], cpu["family"], cpu["model_number"], cpu["stepping"]) == ("AMD EPYC", "25", "17", "1")
    assert cpu["cache_size"] == "1024 KB" and cpu["microcode"] == "0x1000065"
    assert probes.parse_cpu_caches(
        [("1", "Data", "32K"), ("1", "Instruction", "32K"), ("2", "Unified", "1024K"), ("3", "Unified", "32768K")]
    ) == {"L1d": "32K", "L1i": "32K", "L2": "1024K", "L3": "32768K"}


def test_cpu_generation_is_keyed_and_microcode_is_not():
    a, b = _fp(), _fp()
    b["hardware"]["cpu"].update(stepping="8", microcode="0x9")
    assert key.key_differences(a, b) == [("hardware.cpu.stepping", "7", "8")]
    old = _fp()
    for name in ("family", "model_number", "stepping", "cache_size", "caches"):
        del old["hardware"]["cpu"][name]
    diffs = key.key_differences(old, a)  # unknown on one side: a difference
    assert [d[0] for d in diffs] == [
        "hardware.cpu.family",
        "hardware.cpu.model_number",
        "hardware.cpu.stepping",
        "hardware.cpu.cache_size",
        "hardware.cpu.caches",
    ]
    assert all(isinstance(d[1], key.Unknown) for d in diffs)
    assert key.key_differences(old, json.loads(json.dumps(old))) == []  # unknown on both: not a difference
    assert key.unknown_on_both(old, old) == [
        "hardware.cpu.family",
        "hardware.cpu.model_number",
        "hardware.cpu.stepping",
        "hardware.cpu.cache_size",
        "hardware.cpu.caches",
    ]


def test_parse_meminfo():
    assert probes.parse_meminfo("MemTotal:       24684084 kB\nMemFree: 1 kB\n") == 24684084 * 1024
    assert probes.parse_meminfo("MemFree:        1 kB\nMemTotal:       2048 kB\n") == 2048 * 1024  # any line
    assert probes.parse_meminfo("") is None


def test_parse_cpuinfo_reads_the_first_cpu_whatever_surrounds_it():
    """Blank lines before the first CPU are skipped (not the end of it); a value keeps its own colons;
    the second CPU's block is not read."""
    text = (
        "\n\nprocessor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Virtual CPU: host passthrough\n"
        "flags\t\t: fpu sse4_2 avx2\n\nprocessor\t: 1\nvendor_id\t: Other\nflags\t\t: avx512f\n"
    )
    cpu = probes.parse_cpuinfo(text)
    assert (cpu["vendor"], cpu["model"], cpu["isa"]) == (
        "GenuineIntel",
        "Virtual CPU: host passthrough",
        ["avx2", "sse4_2"],
    )


def test_parse_nvidia_smi_query_skips_a_line_that_is_no_row_and_reads_on():
    text = (
        "0, NVIDIA T4, 7.5, 550.54.15, [N/A], Disabled, GPU-aaaa\n"
        "WARNING: infoROM is corrupted at gpu 0000:00:05.0\n"
        "1, NVIDIA T4, 7.5, 550.54.15, 15360, Disabled, GPU-bbbb\n"
    )
    gpus = probes.parse_nvidia_smi_query(text)
    assert [(g["index"], g["memory_mib"]) for g in gpus] == [(0, None), (1, 15360)]  # [N/A]: no number


def test_parse_nvidia_smi_outputs():
    gpus = probes.parse_nvidia_smi_query((RECORDED / "nvidia-smi-query.csv").read_text())
    assert [g["index"] for g in gpus] == [0, 1]
    assert gpus[0]["name"] == "NVIDIA A100-SXM4-80GB" and gpus[0]["compute_capability"] == "8.0"
    assert gpus[0]["driver_version"] == "550.54.15" and gpus[0]["memory_mib"] == 81920
    assert gpus[1]["mig_mode"] == "Disabled" and gpus[1]["uuid"].startswith("GPU-9b8a")
    assert probes.parse_cuda_driver_version((RECORDED / "nvidia-smi.txt").read_text()) == "12.4"
    topo = probes.parse_nvidia_topology((RECORDED / "nvidia-smi-topo.txt").read_text())
    assert topo == [["X", "NV12"], ["NV12", "X"]]  # GPU-to-GPU links only, NIC columns dropped
    # A row starts in the first column: an indented line naming a GPU (a legend, a wrapped cell) is none.
    text = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSYS\t0-7\nGPU1\tSYS\t X \t0-7\n GPU1 SYS X\n\tGPU0 X\n"
    assert probes.parse_nvidia_topology(text) == [["X", "SYS"], ["SYS", "X"]]
    assert probes.parse_nvidia_topology("") == []


def test_no_gpu_outputs():
    assert probes.parse_nvidia_smi_query("") == []
    assert probes.parse_cuda_driver_version("") is None


def test_parse_os_release():
    text = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n'
    expected = {"id": "debian", "version_id": "12", "name": "Debian GNU/Linux 12 (bookworm)"}
    assert probes.parse_os_release(text) == expected


def test_environment_is_recorded_by_allowlist_only_and_never_secrets():
    env = {
        "TF_DETERMINISTIC_OPS": "1",
        "CUDA_VISIBLE_DEVICES": "0",
        "OMP_NUM_THREADS": "1",
        "PYTHONHASHSEED": "0",
        "HOME": "/root",
        "AWS_SECRET_ACCESS_KEY": "x",
        "TF_API_TOKEN": "x",
        "CUDA_PASSWORD": "x",
        "MKL_LICENSE_KEY": "x",
        "TF_VAR_db": "x",
        "TF_CLI_CONFIG_FILE": "/root/.terraformrc",
        "WANDB_API_KEY": "x",
    }
    assert environment.allowed_env(env) == {
        "CUDA_VISIBLE_DEVICES": "0",
        "OMP_NUM_THREADS": "1",
        "PYTHONHASHSEED": "0",
        "TF_DETERMINISTIC_OPS": "1",
    }


def _fp():
    return {
        "schema": 4,
        "hardware": {
            "cpu": {
                "vendor": "GenuineIntel",
                "model": "Xeon",
                "isa": ["avx2"],
                "logical_cores": 2,
                "family": "6",
                "model_number": "85",
                "stepping": "7",
                "cache_size": "36608 KB",
                "caches": {"L1d": "32K", "L2": "1024K"},
                "microcode": "0x5003",
            },
            "memory_bytes": 1,
            "gpus": [],
        },
        "software": {
            "os": {"id": "debian", "version_id": "12"},
            "libc": "glibc-2.36",
            "python": "3.11.7",
            "machine": "x86_64",
            "tensorflow": "2.21.0",
            "tf_build": {},
            "keras": "3.15.1",
            "numpy": "2.4.6",
            "packages": ["keras==3.15.1", "rich==15.0.0"],
            "packages_sha256": "p",
            "kernel": "6.1",
            "container": None,
            "distributions": {"keras": {"version": "3.15.1", "files_sha256": "f1", "record_sha256": "r1"}},
            "libraries": {"/usr/lib/x86_64-linux-gnu/libm.so.6": "m1"},
        },
        "environment": {"TF_DETERMINISTIC_OPS": "1", "CUDA_VISIBLE_DEVICES": "0", "TF_CPP_MIN_LOG_LEVEL": "2"},
        "environment_read": {"LR": "0.01"},
        "determinism": {"level": "strict", "intra_op_threads": 1, "op_determinism": True},
        "config_sha256": "c",
        "code": {
            "git_commit": "g",
            "diff_sha256": None,
            "launcher_version": "0.1.0+src.abc",
            "launcher_modules": {"launcher.job.bootstrap": "b1"},
            "modules": {"helper": {"path": "/w/helper.py", "sha256": "h1"}},
        },
        "data": {"data/mnist.npz": "d1"},
        "host": {"hostname": "a"},
    }


def test_key_ignores_what_cannot_change_bits():
    a, b = _fp(), _fp()
    b["hardware"]["cpu"]["logical_cores"] = 64
    b["hardware"]["memory_bytes"] = 2
    b["host"]["hostname"] = "b"
    b["software"]["kernel"] = "6.9"
    b["environment"]["CUDA_VISIBLE_DEVICES"] = "3"
    b["environment"]["TF_CPP_MIN_LOG_LEVEL"] = "0"  # log verbosity only
    b["software"]["packages"].append("requests==2.0")  # installed, never loaded by the job
    b["software"]["packages_sha256"] = "q"
    b["code"]["git_commit"] = "another checkout"  # the code that ran is hashed, not the checkout
    b["code"]["modules"]["helper"]["path"] = "/elsewhere/helper.py"  # same content
    assert key.key_differences(a, b) == []
    assert key.key_sha256(a) == key.key_sha256(b)


def test_key_holds_what_the_job_ran_and_read_by_name():
    a = _fp()
    for change, field, got in [
        (lambda fp: fp["environment"].update(ONEDNN_MAX_CPU_ISA="AVX2"), "environment.ONEDNN_MAX_CPU_ISA", "AVX2"),
        (lambda fp: fp["code"]["modules"]["helper"].update(sha256="h2"), "code.modules.helper", "h2"),
        (lambda fp: fp["data"].update({"data/mnist.npz": "d2"}), "data.data/mnist.npz", "d2"),
        (
            lambda fp: fp["software"]["distributions"]["keras"].update(version="3.16.0"),
            "software.distributions.keras.version",
            "3.16.0",
        ),
        (
            lambda fp: fp["software"]["libraries"].update({"/usr/lib/x86_64-linux-gnu/libm.so.6": "m2"}),
            "software.libraries./usr/lib/x86_64-linux-gnu/libm.so.6",
            "m2",
        ),
    ]:
        b = _fp()
        change(b)
        diffs = key.key_differences(a, b)
        assert [(d[0], d[2]) for d in diffs] == [(field, got)], diffs


def test_schema_1_runs_lack_fields_that_are_unknown_to_both_and_different_from_known():
    old_a, old_b = _fp(), _fp()
    for fp in (old_a, old_b):
        fp["schema"] = 1
        del fp["code"]["modules"], fp["software"]["distributions"], fp["software"]["libraries"]
    assert key.key_differences(old_a, old_b) == []  # nothing tells them apart ...
    assert key.unknown_on_both(old_a, old_b) == [
        "software.distributions",
        "software.libraries",
        "code.modules",
        "data",
    ]  # ... and nothing vouches for these
    fields = [d[0] for d in key.key_differences(old_a, _fp())]
    assert fields == ["software.distributions", "software.libraries", "code.modules", "data"]
    assert all(isinstance(d[1], key.Unknown) for d in key.key_differences(old_a, _fp()))


def test_key_differences_name_nested_fields_with_both_values():
    a, b = _fp(), _fp()
    b["determinism"]["intra_op_threads"] = 2
    b["hardware"]["cpu"]["isa"] = ["avx2", "avx512f"]
    b["software"]["tensorflow"] = "2.20.0"
    diffs = key.key_differences(a, b)
    assert ("determinism.intra_op_threads", 1, 2) in diffs
    assert ("hardware.cpu.isa", ["avx2"], ["avx2", "avx512f"]) in diffs
    assert ("software.tensorflow", "2.21.0", "2.20.0") in diffs
    assert key.key_sha256(a) != key.key_sha256(b)


def test_probing_does_not_mutate_the_environment():
    import os

    before = copy.deepcopy(dict(os.environ))
    probes.hardware()
    probes.software()
    assert dict(os.environ) == before


def test_container_key_is_what_ran_not_the_image_id():
    container = {
        "image_id": "sha256:aa",
        "content_tag": "t",
        "packages_sha256": "p",
        "uid": 1000,
        "network": "none",
        "base_digest": "b",
    }
    a, b, local = _fp(), _fp(), _fp()
    a["software"]["container"] = container
    b["software"]["container"] = {**container, "image_id": "sha256:bb"}  # a verified rebuild
    assert key.key_differences(a, b) == []
    b["software"]["container"]["packages_sha256"] = "q"
    assert [d[0] for d in key.key_differences(a, b)] == ["software.container.packages_sha256"]
    assert [d[0] for d in key.key_differences(a, local)] == ["software.container"]


def test_a_cpu_field_a_run_did_not_record_is_unknown_by_name():
    fp = _fp()
    del fp["hardware"]["cpu"]["stepping"]
    assert str(key.comparability_key(fp)["hardware.cpu.stepping"]) == "unknown (not recorded by this run's fingerprint)"


def test_a_dirty_checkout_is_any_line_of_git_status():
    assert probes.parse_git_status(" M train.py\n") is True
    assert probes.parse_git_status("\n") is False and probes.parse_git_status("") is False


def test_every_kernel_selecting_x86_feature_is_an_isa_flag_and_the_rest_are_not():
    """oneDNN, Eigen and OpenBLAS pick kernels by these (SSE4, AVX-512 and its VNNI/BF16 kinds, AMX, F16C,
    AVX-VNNI), so each must reach the key; flags that pick no kernel must not make CPUs look different."""
    kernel = "sse4_1 sse4_2 avx avx2 fma f16c avx512f avx512_vnni avx512_bf16 amx_tile amx_int8 avx_vnni avx_vnni_int8"
    other = "fpu vme de pse tsc msr ht syscall nx lm constant_tsc rep_good nopl xtopology cpuid pni ssse3"
    cpu = probes.parse_cpuinfo(f"processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: {other} {kernel}\n")
    assert cpu["isa"] == sorted(kernel.split())


def test_installed_distributions_follow_an_install_and_an_uninstall_made_after_they_were_read(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    before = probes.installed_distributions()
    assert not any(p.startswith("launch-test-dist==") for p in before)
    info = tmp_path / "launch_test_dist-1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: launch_test_dist\nVersion: 1.2\n")
    assert probes.installed_distributions() == sorted([*before, "launch-test-dist==1.2"])
    (info / "METADATA").unlink()
    info.rmdir()
    assert probes.installed_distributions() == before


def test_a_distributions_name_and_version_are_read_from_its_headers_as_importlib_reads_them(tmp_path):
    from importlib import metadata

    description = "Name: not-this\nVersion: 0.0\n\nA description that quotes headers:\nName: nor-this\n"
    texts = [
        "Metadata-Version: 2.1\nName: Some_Dist\nVersion: 1.2.post3  \nSummary: s\n\n" + description,
        "Metadata-Version: 2.1\nName: bare\nVersion: 4\n",
        "Metadata-Version: 2.1\nSummary: no name\n",
        "Metadata-Version: 2.1\nName: no-version\n\nVersion: 9 (in the description)\n",
        "Metadata-Version: 2.1\r\nName: crlf\r\nVersion: 5.0\r\n\r\nName: nor-this\r\n",
    ]
    for i, text in enumerate(texts):
        info = tmp_path / f"d{i}-1.dist-info"
        info.mkdir()
        (info / "METADATA").write_bytes(text.encode())
        dist = metadata.PathDistribution(info)
        expected = (dist.metadata["Name"], dist.metadata["Version"])
        assert probes.name_and_version(dist.read_text("METADATA")) == expected, text
