"""A second checkout of the same project gives the same comparability key (issue 39): what lies in
the launch directory is keyed relative to it, what lies outside it by its absolute name."""

from __future__ import annotations

import copy

from launcher.record.probe import key
from launcher.run import config


def _cfg(project: str) -> dict:
    return {
        "train": {
            "name": "script",
            "script": f"{project}/advanced.py",
            "args": [f"{project}/digits.npz", f"--cache={project}/cache", "/root/.keras/datasets/mnist.npz", "3"],
            "params": {"data": f"{project}/sub/../data.npz"},
        },
        "runtime": {"name": "local"},
        "store": {"root": f"{project}/runs"},
    }


def test_the_config_is_hashed_with_project_paths_relative_and_others_absolute():
    one, two = _cfg("/home/a/s5_advanced"), _cfg("/tmp/s5_copy")
    part = config.hashed_part(one, "/home/a/s5_advanced")
    assert part["train"]["script"] == "advanced.py"
    assert part["train"]["args"] == ["digits.npz", "--cache=cache", "/root/.keras/datasets/mnist.npz", "3"]
    sibling = config.hashed_part({"train": {"args": ["/home/a/s5_advancedx/d.npz"]}}, "/home/a/s5_advanced")
    assert sibling["train"]["args"] == ["/home/a/s5_advancedx/d.npz"]  # a sibling directory is outside
    assert part["train"]["params"] == {"data": "data.npz"}
    assert config.config_hash(one, "/home/a/s5_advanced") == config.config_hash(two, "/tmp/s5_copy")
    # the resolved config itself keeps its absolute paths, to run from
    assert one == _cfg("/home/a/s5_advanced")
    # without a launch directory (fingerprint schema 4 and older), paths are hashed as they are
    assert config.config_hash(one) != config.config_hash(two)
    assert config.hashed_part(one)["train"]["script"] == "/home/a/s5_advanced/advanced.py"
    # a path outside the project differs between two configs: so does the hash
    other = copy.deepcopy(two)
    other["train"]["args"][2] = "/data/mnist.npz"
    assert config.config_hash(other, "/tmp/s5_copy") != config.config_hash(one, "/home/a/s5_advanced")
    # launched from / : every path lies there, and stays as it is
    assert config.hashed_part(one, "/")["train"]["script"] == "/home/a/s5_advanced/advanced.py"


def _fp(project: str | None, schema: int = 5) -> dict:
    root = project or "/home/a/proj"
    fp = {
        "schema": schema,
        "config_sha256": "c",
        "data": {f"{root}/digits.npz": "d1", "labels.csv": "d2", "/root/.keras/datasets/mnist.npz": "d3"},
        "software": {"libraries": {f"{root}/ops/custom_op.so": "l1", "/usr/lib/libm.so.6": "l2"}},
    }
    if project is not None:
        fp["launch_dir"] = project
    return fp


def test_the_key_names_files_in_the_project_relatively():
    one, two = _fp("/home/a/proj"), _fp("/ci/build/proj")
    data = key.KEY["data"](one)
    assert data == {"digits.npz": "d1", "labels.csv": "d2", "/root/.keras/datasets/mnist.npz": "d3"}
    assert key.KEY["software.libraries"](one) == {"ops/custom_op.so": "l1", "/usr/lib/libm.so.6": "l2"}
    assert key.KEY["data"](one) == key.KEY["data"](two)
    assert key.KEY["software.libraries"](one) == key.KEY["software.libraries"](two)
    # the same file read by a relative and an absolute name, changed in between: both values stay
    both = _fp("/home/a/proj")
    both["data"]["digits.npz"] = "changed while the job ran (x)"
    assert key.KEY["data"](both)["digits.npz"] == "changed while the job ran (x) | d1"
    # a run recorded before schema 5 has no launch_dir: its names are keyed as recorded
    old = _fp(None, schema=4)
    assert key.KEY["data"](old) == old["data"] and key.KEY["software.libraries"](old) == old["software"]["libraries"]
    # a file outside the project keeps its absolute name: another place is another file
    moved = _fp("/ci/build/proj")
    moved["data"] = {"/elsewhere/digits.npz": "d1", "labels.csv": "d2", "/root/.keras/datasets/mnist.npz": "d3"}
    diffs: list = []
    key._diff("data", key.KEY["data"](one), key.KEY["data"](moved), diffs)
    assert [d[0] for d in diffs] == ["data./elsewhere/digits.npz", "data.digits.npz"]
