"""Surviving mutants that are equivalent: the mutated code behaves as the original for every input.

Keyed by the mutated function (mutmut's name without ``__mutmut_N``) and the mutated line as mutmut
writes it (stripped), so the list survives renumbering; each with the reason no test can tell the two
apart. A survivor not listed here fails ``nox -s mutation``: write the test that kills it, or, if it is
truly equivalent, add it here with the reason.
"""

from __future__ import annotations

_NO_COPY = "astype(copy=...) only decides whether numpy may return the input itself; the bytes hashed are the same"
_ORDERED_SET = "the dict is an ordered set: only its keys are returned (list(out)), never a value"
_DELETED = ("a mapped path that ends in '(deleted)' never ends in .so or .so.N, which _SHARED_LIBRARY requires: "
            "the suffix check never decides alone")
_CHUNK = "the digest of a file does not depend on the size of the blocks it is read in (read(None) reads it whole)"

EQUIVALENT: dict[tuple[str, str], str] = {
    ("launcher.record.hashing.x_array_digest", 'a = a.astype(a.dtype.newbyteorder("<"), copy=None)'): _NO_COPY,
    ("launcher.record.hashing.x_array_digest", 'a = a.astype(a.dtype.newbyteorder("<"), )'): _NO_COPY,
    ("launcher.record.hashing.x_array_digest", 'a = a.astype(a.dtype.newbyteorder("<"), copy=True)'): _NO_COPY,
    ("launcher.record.runs.x_file_sha256", 'for block in iter(lambda: f.read(None), b""):'): _CHUNK,
    ("launcher.record.runs.x_file_sha256", 'for block in iter(lambda: f.read(2 << 20), b""):'): _CHUNK,
    ("launcher.record.runs.x_file_sha256", 'for block in iter(lambda: f.read(1 << 21), b""):'): _CHUNK,
    ("launcher.verdict.compare.x_allclose_problems", "for ma, mb in zip(a.metrics, b.metrics, strict=None):"):
        "zip's strict=None is falsy, as is the default: the same as strict=False",
    ("launcher.verdict.compare.x_allclose_problems", "for ma, mb in zip(a.metrics, b.metrics, ):"):
        "strict=False is zip's default",
    ("launcher.verdict.compare.x_allclose_problems",
     "worst = float(np.max(np.abs(wa[name].astype(None) - wb[name])))"):
        "astype(None) is numpy's default float type, float64: the same cast",
    ("launcher.verdict.compare.x_read_weights", "with h5py.File(record.path / name, ) as f:"):
        "h5py opens files read-only ('r') by default",
    ("launcher.verdict.compare.x_decide",
     'return Comparison("NOTHING COMPARED", NOTHING_COMPARED, notes=why, )'):
        "equal=None is Comparison's default",
    ("launcher.verdict.compare.x__wrap", "return textwrap.wrap(text, width, break_on_hyphens=None) or [text]"):
        "textwrap breaks at hyphens only when break_on_hyphens is True: None is as False",
    ("launcher.verdict.audit.x_likely_causes",
     'out[f"a generator made without a seed: {g[\'call\']} at {g[\'where\']} (seed it from launcher.seed())"] = ""'):
        _ORDERED_SET,
    ("launcher.verdict.audit.x_likely_causes", 'out[f"input the key may not hold: {gap}"] = ""'): _ORDERED_SET,
    ("launcher.record.usage.x_parse_maps",
     'if path.startswith("/") and not path.endswith("XX(deleted)XX") and _SHARED_LIBRARY.search(path):'): _DELETED,
    ("launcher.record.usage.x_parse_maps",
     'if path.startswith("/") and not path.endswith("(DELETED)") and _SHARED_LIBRARY.search(path):'): _DELETED,
    ("launcher.record.usage.x_parse_maps", "out.setdefault(path, )"): _ORDERED_SET,
}  # fmt: skip
