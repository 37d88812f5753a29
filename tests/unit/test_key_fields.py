"""Every field of the comparability key, one at a time: a change to it refuses, by name (issue 17).

The key says which fingerprint fields must match for DIFFERENT to mean "a determinism
bug". Each entry of ``key.KEY`` gets a case here that changes only that field and
expects exactly that field (expanded when nested) among the differences; a key that
loses a field fails its case. What is deliberately out of the key (docs/fingerprint.md)
gets the opposite case: it changes and nothing differs.
"""

from __future__ import annotations

import copy

import pytest

from launcher.record.probe import key
from tests.unit.test_fingerprint import _fp


def _set(path: str, value):
    def change(fp: dict) -> None:
        *parents, last = path.split("/")
        target = fp
        for p in parents:
            target = target[p]
        target[last] = value

    return change


IN_KEY = {  # key field -> (change, the differences it must produce as (field, a's value, b's value))
    "hardware.cpu.vendor": (
        _set("hardware/cpu/vendor", "AuthenticAMD"),
        [("hardware.cpu.vendor", "GenuineIntel", "AuthenticAMD")],
    ),
    "hardware.cpu.model": (_set("hardware/cpu/model", "EPYC"), [("hardware.cpu.model", "Xeon", "EPYC")]),
    "hardware.cpu.isa": (_set("hardware/cpu/isa", ["avx2", "amx"]), [("hardware.cpu.isa", ["avx2"], ["avx2", "amx"])]),
    "hardware.cpu.family": (_set("hardware/cpu/family", "25"), [("hardware.cpu.family", "6", "25")]),
    "hardware.cpu.model_number": (
        _set("hardware/cpu/model_number", "143"),
        [("hardware.cpu.model_number", "85", "143")],
    ),
    "hardware.cpu.stepping": (_set("hardware/cpu/stepping", "8"), [("hardware.cpu.stepping", "7", "8")]),
    "hardware.cpu.cache_size": (
        _set("hardware/cpu/cache_size", "1024 KB"),
        [("hardware.cpu.cache_size", "36608 KB", "1024 KB")],
    ),
    "hardware.cpu.caches": (_set("hardware/cpu/caches/L3", "32768K"), [("hardware.cpu.caches.L3", None, "32768K")]),
    "hardware.gpus": (
        _set(
            "hardware/gpus",
            [{"name": "A100", "compute_capability": "8.0", "driver_version": "550", "index": 0, "uuid": "GPU-1"}],
        ),
        [("hardware.gpus", [], [("A100", "8.0", "550")])],
    ),
    "software.os": (
        _set("software/os", {"id": "debian", "version_id": "13"}),
        [("software.os", ["debian", "12"], ["debian", "13"])],
    ),
    "software.libc": (_set("software/libc", "glibc-2.41"), [("software.libc", "glibc-2.36", "glibc-2.41")]),
    "software.python": (_set("software/python", "3.12.1"), [("software.python", "3.11.7", "3.12.1")]),
    "software.machine": (_set("software/machine", "aarch64"), [("software.machine", "x86_64", "aarch64")]),
    "software.tensorflow": (_set("software/tensorflow", "2.20.0"), [("software.tensorflow", "2.21.0", "2.20.0")]),
    "software.tf_build": (
        _set("software/tf_build", {"is_cuda_build": True}),
        [("software.tf_build.is_cuda_build", None, True)],
    ),
    "software.keras": (_set("software/keras", "3.16.0"), [("software.keras", "3.15.1", "3.16.0")]),
    "software.numpy": (_set("software/numpy", "2.5.0"), [("software.numpy", "2.4.6", "2.5.0")]),
    "software.distributions": (
        _set("software/distributions/keras", {"version": "3.15.1", "files_sha256": "f2", "record_sha256": "r2"}),
        [("software.distributions.keras.files_sha256", "f1", "f2")],
    ),
    "software.libraries": (
        _set("software/libraries/libgomp.so.1", "g1"),
        [("software.libraries.libgomp.so.1", None, "g1")],
    ),
    "software.container": (
        _set("software/container", {"content_tag": "t", "packages_sha256": "p", "uid": 1000, "image_id": "sha256:x"}),
        [("software.container", None, {"content_tag": "t", "packages_sha256": "p", "uid": 1000})],
    ),
    "environment": (_set("environment/TF_ENABLE_ONEDNN_OPTS", "1"), [("environment.TF_ENABLE_ONEDNN_OPTS", None, "1")]),
    "environment_read": (_set("environment_read/LR", "0.001"), [("environment_read.LR", "0.01", "0.001")]),
    "determinism": (_set("determinism/intra_op_threads", 2), [("determinism.intra_op_threads", 1, 2)]),
    "config_sha256": (_set("config_sha256", "c2"), [("config_sha256", "c", "c2")]),
    "config_files": (_set("config_files", {"conf/train.yaml": "f1"}), [("config_files.conf/train.yaml", None, "f1")]),
    "code.launcher": (
        _set("code/launcher_modules/launcher.job.bootstrap", "b2"),
        [("code.launcher.launcher.job.bootstrap", "b1", "b2")],
    ),
    "code.script_sha256": (_set("code/script_sha256", "s1"), [("code.script_sha256", None, "s1")]),
    "code.notebook_cells": (
        _set("code/notebook_cells", {"code cell 1": "lr = 0.1  [sha256 ab]"}),
        [("code.notebook_cells", None, {"code cell 1": "lr = 0.1  [sha256 ab]"})],
    ),
    "code.modules": (
        _set("code/modules/helper", {"path": "/w/helper.py", "sha256": "h2"}),
        [("code.modules.helper", "h1", "h2")],
    ),
    "data": (_set("data", {"data/mnist.npz": "d2"}), [("data.data/mnist.npz", "d1", "d2")]),
    # A run without a cluster part ran on one worker (issue 49): against two, the count is named.
    "cluster": (
        _set(
            "cluster", {"workers": 2, "collective": "RING", "order": ["worker:0", "worker:1"], "hardware": ["h", "h"]}
        ),
        [
            ("cluster.collective", None, "RING"),
            ("cluster.hardware", None, ["h", "h"]),
            ("cluster.order", None, ["worker:0", "worker:1"]),
            ("cluster.workers", 1, 2),
        ],
    ),
}


def test_every_key_field_has_a_case_here():
    assert list(IN_KEY) == list(key.KEY)  # a new key field gets its case; a dropped one fails below


@pytest.mark.parametrize("field", list(IN_KEY))
def test_a_change_to_one_key_field_is_named_with_both_values(field):
    change, expected = IN_KEY[field]
    a, b = _fp(), _fp()
    change(b)
    assert key.key_differences(a, b) == expected
    assert key.key_differences(b, a) == [(name, y, x) for name, x, y in expected]
    assert key.key_sha256(a) != key.key_sha256(b)
    assert key.comparability_key(a)[field] != key.comparability_key(b)[field]


OUT_OF_KEY = {  # what is recorded for reading and deliberately out of the key (docs/fingerprint.md)
    "logical cores": _set("hardware/cpu/logical_cores", 64),
    "CPU microcode": _set("hardware/cpu/microcode", "0x9999"),
    "the launcher's version and whole-package hash": _set("code/launcher_version", "0.2.0+src.def"),
    "memory": _set("hardware/memory_bytes", 2),
    "a GPU's index, UUID and memory": _set("hardware/gpus", []),  # paired below with a GPU in both
    "hostname": _set("host/hostname", "b"),
    "kernel": _set("software/kernel", "6.9"),
    "installed packages": _set("software/packages", ["keras==3.15.1", "rich==15.0.0", "requests==2.0"]),
    "packages hash": _set("software/packages_sha256", "q"),
    "git commit": _set("code/git_commit", "another checkout"),
    "git diff": _set("code/diff_sha256", "d" * 64),
    "dirty": _set("code/dirty", True),
    "a module's path": _set("code/modules/helper", {"path": "/elsewhere/helper.py", "sha256": "h1"}),
    "device slot": _set("environment/CUDA_VISIBLE_DEVICES", "3"),
    "log level": _set("environment/TF_CPP_MIN_LOG_LEVEL", "0"),
    "a loaded library's search path": _set("environment/LD_LIBRARY_PATH", "/opt/lib"),
    "the module search path": _set("environment/PYTHONPATH", "/work"),
    "the container's image id": _set("software/container", None),  # paired below
}


@pytest.mark.parametrize("what", list(OUT_OF_KEY))
def test_what_is_out_of_the_key_never_refuses(what):
    a, b = _fp(), _fp()
    if what == "a GPU's index, UUID and memory":
        gpu = {"name": "A100", "compute_capability": "8.0", "driver_version": "550", "memory_mib": 80, "mig_mode": "x"}
        a["hardware"]["gpus"] = [{**gpu, "index": 0, "uuid": "GPU-1"}]
        b["hardware"]["gpus"] = [{**gpu, "index": 3, "uuid": "GPU-2", "memory_mib": 40}]
    elif what == "the container's image id":
        container = {"content_tag": "t", "packages_sha256": "p", "uid": 1000, "network": "none"}
        a["software"]["container"] = {**container, "image_id": "sha256:aa"}
        b["software"]["container"] = {**container, "image_id": "sha256:bb", "network": "bridge"}
    else:
        OUT_OF_KEY[what](b)
    assert key.key_differences(a, b) == []
    assert key.key_sha256(a) == key.key_sha256(b)


def test_the_key_is_canonical_json_of_its_fields_in_order():
    import hashlib
    import json

    fp = _fp()
    assert list(key.comparability_key(fp)) == list(key.KEY)
    # the launcher's code by its contents alone (key.LauncherCode), every other value as JSON or its str
    canonical = json.dumps(
        key.comparability_key(fp),
        sort_keys=True,
        default=lambda o: sorted(o.modules.values()) if isinstance(o, key.LauncherCode) else str(o),
    )
    assert key.key_sha256(fp) == hashlib.sha256(canonical.encode()).hexdigest()
    assert key.key_sha256(copy.deepcopy(fp)) == key.key_sha256(fp)


def test_unknown_is_equal_to_nothing_not_even_itself():
    u = key.Unknown("not recorded")
    assert u != u and u != key.Unknown("not recorded") and u.__eq__(None) is False
    assert repr(u) == str(u) == "unknown (not recorded)"
    assert hash(u) == id(u)
    assert key.Unknown("x").why == "x"


def test_schema_1_fields_are_unknown_and_schema_2_fields_are_read():
    old = _fp()
    old["schema"] = 1
    got = key.comparability_key(old)
    for field in ("software.distributions", "software.libraries", "code.modules", "data"):
        assert isinstance(got[field], key.Unknown) and got[field].why == "not recorded by fingerprint schema 1"
    assert got["software.tensorflow"] == "2.21.0"
    no_schema = _fp()
    del no_schema["schema"]  # the first launcher wrote none: schema 1
    assert isinstance(key.comparability_key(no_schema)["data"], key.Unknown)
    current = key.comparability_key(_fp())
    assert current["data"] == {"data/mnist.npz": "d1"} and current["code.modules"] == {"helper": "h1"}
    assert current["software.libraries"] == {"/usr/lib/x86_64-linux-gnu/libm.so.6": "m1"}


def test_missing_optional_sections_read_as_empty_not_as_errors():
    fp = _fp()
    del fp["data"], fp["code"]["modules"]
    fp["software"] = None
    got = key.comparability_key(fp)
    assert got["data"] == {} and got["code.modules"] == {} and got["software.tensorflow"] is None
    assert got["software.os"] == [None, None] and got["software.container"] is None
    assert got["code.script_sha256"] is None and got["code.notebook_cells"] is None
    assert got["config_files"] == {}  # runs from before --config-dir used none


def test_nested_differences_expand_dicts_only():
    out: list = []
    key._diff("f", {"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": 3}, "d": 4}, out)
    assert out == [("f.b.c", 2, 3), ("f.d", None, 4)]
    out = []
    key._diff("f", [1, 2], [1, 3], out)  # lists are values
    assert out == [("f", [1, 2], [1, 3])]
    out = []
    key._diff("f", {"a": 1}, "x", out)
    assert out == [("f", {"a": 1}, "x")]


def test_old_runs_have_a_key_hash_too():
    old = _fp()
    old["schema"] = 1
    digest = key.key_sha256(old)  # Unknown fields are hashed by their text: `launch runs` can list old runs
    assert len(digest) == 64 and digest != key.key_sha256(_fp())


def test_a_distribution_recorded_without_any_content_hash_is_unknown():
    a, b = _fp(), _fp()
    for fp in (a, b):
        fp["software"]["distributions"] = {"keras": {"version": "3.15.1"}}  # neither files_sha256 nor RECORD
    got = key.comparability_key(a)["software.distributions"]["keras"]["record_sha256"]
    assert isinstance(got, key.Unknown) and got.why == "not recorded"
    assert key.key_differences(a, b) == []  # unknown on both: nothing tells them apart ...
    b["software"]["distributions"]["keras"]["record_sha256"] = "r"
    ((field, then, now),) = key.key_differences(a, b)  # ... and unknown against a hash is a difference
    assert (field, str(then), now) == ("software.distributions.keras.record_sha256", "unknown (not recorded)", "r")


def test_a_field_is_unknown_on_both_only_when_neither_run_recorded_it():
    old = _fp()
    old["schema"] = 1
    assert key.unknown_on_both(old, _fp()) == [] and key.unknown_on_both(_fp(), old) == []
    assert key.unknown_on_both(old, copy.deepcopy(old)) == [
        "software.distributions",
        "software.libraries",
        "code.modules",
        "data",
    ]


def test_the_launchers_code_is_compared_by_content_and_a_change_named_by_module():
    """code.launcher: a module moved unchanged is the same code; a changed one is named, with both hashes."""
    a = key.LauncherCode({"launcher.run.reads": "r1", "launcher.job.bootstrap": "b1"})
    moved = key.LauncherCode({"launcher.job.observe.reads": "r1", "launcher.job.bootstrap": "b1"})
    changed = key.LauncherCode({"launcher.job.observe.reads": "r1", "launcher.job.bootstrap": "b2"})
    assert a == moved and key.launcher_differences("code.launcher", a, moved) == []
    assert a != changed
    assert key.launcher_differences("code.launcher", a, changed) == [
        ("code.launcher.launcher.job.bootstrap", "b1", "b2")
    ]
    added = key.LauncherCode({**a.modules, "launcher.record.probe.places": "p1"})
    assert key.launcher_differences("code.launcher", a, added) == [
        ("code.launcher.launcher.record.probe.places", "not imported", "p1")
    ]


def test_a_schema_3_fingerprint_names_the_launchers_files_as_todays_modules():
    fp = _fp()
    fp["schema"] = 3
    fp["code"]["launcher_modules"] = {"run/reads.py": "r1", "__init__.py": "i1", "record/probe/key.py": "k1"}
    code = key.comparability_key(fp)["code.launcher"]
    assert code.modules == {"launcher.job.observe.reads": "r1", "launcher": "i1", "launcher.record.probe.key": "k1"}
