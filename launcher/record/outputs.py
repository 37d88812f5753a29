"""Output files by what they mean: the same training writes the same meaning, not the same bytes.

A Keras ``.keras`` archive holds the time it was saved; a TensorBoard event file is
named by time, host and pid and stamps every event with the wall time; a TensorFlow
``checkpoint`` state file lists save timestamps. Two bitwise-identical trainings so
write different bytes, and comparing bytes would call them a determinism bug. So each
output gets a digest of its meaning, with its parts (arrays, tags) digested apart so a
difference can be named where it lies:

- ``.keras``: the model's config (its ``shared_object_id``, a memory address, renumbered)
  and every weight array (its ``metadata.json``, with ``date_saved``, is left out);
- ``.h5``/``.hdf5``: every dataset by path, dtype, shape and bytes (not HDF5's headers);
- TensorBoard event files: the (tag, step, value) records of all event files of one
  directory, under ``DIR/events.out.tfevents.*`` (not the wall times, not the names);
- TensorFlow checkpoints: every variable by name and value (``PREFIX.index`` with its
  data shards), and the ``checkpoint`` state file without its timestamps;
- ``.ipynb``: an executed notebook, each code cell's source and results, without execution
  counts, metadata, ids, memory addresses or printed text (``launcher.record.notebooks``);
- anything else: its bytes.

Read in the job process, where TensorFlow is loaded (event files and checkpoints need
it; without it they are taken by bytes).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import zipfile
from pathlib import Path

import numpy as np

from launcher.record import notebooks
from launcher.record.hashing import array_digest, file_sha256

EVENTS = re.compile(r"^events\.out\.tfevents\.")
_DATA_SHARD = re.compile(r"\.data-\d+-of-\d+$")
MAX_PARTS = 256  # parts named per file: enough to say where, without bloating result.json


def digests(root: Path) -> dict[str, dict]:
    """name -> {"kind", "sha256", "parts"} for every output below ``root`` (names relative to it)."""
    out: dict[str, dict] = {}
    if not Path(root).is_dir():
        return out
    files = sorted(p for p in Path(root).rglob("*") if p.is_file())
    events: dict[str, list[Path]] = {}
    checkpoints = {str(p)[: -len(".index")] for p in files if p.name.endswith(".index")}
    for path in files:
        rel = path.relative_to(root).as_posix()
        if EVENTS.match(path.name):
            events.setdefault(str(Path(rel).parent / "events.out.tfevents.*"), []).append(path)
        elif _DATA_SHARD.search(path.name) and _DATA_SHARD.sub("", str(path)) in checkpoints:
            continue  # digested with its .index
        else:
            out[rel] = _one(path, rel, checkpoints)
    for name, paths in events.items():
        out[name] = _parts("tensorboard events", _event_records(paths))
    return dict(sorted(out.items()))


def _one(path: Path, rel: str, checkpoints: set[str]) -> dict:
    try:
        if path.suffix == ".keras" and zipfile.is_zipfile(path):
            return _parts("keras archive", _keras_parts(path))
        if path.suffix in (".h5", ".hdf5"):
            return _parts("hdf5", _h5_parts(path.read_bytes()))
        if path.name.endswith(".index") and str(path)[: -len(".index")] in checkpoints:
            return _parts("tensorflow checkpoint", _checkpoint_parts(str(path)[: -len(".index")]))
        if path.name == "checkpoint":
            return _parts("checkpoint state", {"state": _without_timestamps(path.read_text())})
        if path.suffix == ".ipynb":
            return _parts("notebook", notebooks.output_parts(json.loads(path.read_text(encoding="utf-8"))))
    except Exception:  # noqa: BLE001 - unreadable as its kind: compared by bytes, never an error
        pass
    return {"kind": "bytes", "sha256": file_sha256(path), "parts": {}}


def _parts(kind: str, parts: dict[str, str]) -> dict:
    total = hashlib.sha256()
    for name, digest in sorted(parts.items()):
        total.update(f"{name}\0{digest}\n".encode())
    shown = dict(sorted(parts.items())[:MAX_PARTS])
    return {"kind": kind, "sha256": total.hexdigest(), "parts": shown}


def _arrays_digest(name: str, value: np.ndarray) -> str:
    h = hashlib.sha256()
    array_digest(h, name, np.asarray(value))
    return h.hexdigest()


def _h5_parts(data: bytes) -> dict[str, str]:
    import h5py

    parts: dict[str, str] = {}
    with h5py.File(io.BytesIO(data), "r") as f:
        f.visititems(
            lambda name, obj: (
                parts.__setitem__(name, _arrays_digest(name, obj[()])) if isinstance(obj, h5py.Dataset) else None
            )
        )
    return parts


def _keras_parts(path: Path) -> dict[str, str]:
    parts: dict[str, str] = {}
    with zipfile.ZipFile(path) as z:
        for name in sorted(z.namelist()):
            data = z.read(name)
            if name == "metadata.json":
                continue  # keras_version and date_saved: when it was written, not what
            if name.endswith(".h5"):
                parts.update({f"{name}:{k}": v for k, v in _h5_parts(data).items()})
            elif name.endswith(".json"):
                config = _renumber_shared_ids(json.loads(data), {})
                parts[name] = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()
            else:
                parts[name] = hashlib.sha256(data).hexdigest()
    return parts


def _renumber_shared_ids(node: object, seen: dict) -> object:
    """Keras names objects shared between layers by their Python ``id()`` (``shared_object_id``),
    a memory address: renumbered in order of appearance, which says the same sharing."""
    if isinstance(node, dict):
        return {
            k: (seen.setdefault(v, len(seen)) if k == "shared_object_id" else _renumber_shared_ids(v, seen))
            for k, v in sorted(node.items())
        }
    if isinstance(node, list):
        return [_renumber_shared_ids(v, seen) for v in node]
    return node


def _checkpoint_parts(prefix: str) -> dict[str, str]:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(prefix)
    return {name: _arrays_digest(name, reader.get_tensor(name)) for name in sorted(reader.get_variable_to_shape_map())}


def _without_timestamps(text: str) -> str:
    kept = [line for line in text.splitlines() if "timestamp" not in line]
    return hashlib.sha256("\n".join(kept).encode()).hexdigest()


def _event_records(paths: list[Path]) -> dict[str, str]:
    """``tag@step`` -> digest of its value(s), over all event files of one directory."""
    import tensorflow as tf

    values: dict[str, hashlib._Hash] = {}
    for path in sorted(paths, key=os.path.getsize):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                h = values.setdefault(f"{value.tag}@{event.step}", hashlib.sha256())
                h.update(value.SerializeToString(deterministic=True))
            if event.HasField("graph_def"):
                values.setdefault(f"graph@{event.step}", hashlib.sha256()).update(event.graph_def)
    return {name: h.hexdigest() for name, h in values.items()}


def differences(a: dict[str, dict], b: dict[str, dict]) -> list[str]:
    """Where two runs' outputs differ, by name and the first part inside that differs:
    ``outputs/model.keras: model.weights.h5:layers/dense/vars/0``; empty when they mean the same."""
    out = []
    for name in sorted(set(a) | set(b)):
        x, y = a.get(name), b.get(name)
        if x is None or y is None:
            out.append(f"outputs/{name}: only in run {'B' if x is None else 'A'}")
        elif x["sha256"] != y["sha256"]:
            parts = sorted(k for k in set(x["parts"]) | set(y["parts"]) if x["parts"].get(k) != y["parts"].get(k))
            where = f" ({x['kind']}: {parts[0]}{' and more' if len(parts) > 1 else ''})" if parts else ""
            out.append(f"outputs/{name}{where}")
    return out
