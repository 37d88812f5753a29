"""Distributions keyed by who needs them (issue 39): what a library's optional probe imported, and
everything that pulled in, is probed (out of the key); what the job's code, or a keyed distribution
that requires it, imported is keyed. The decision follows the import chain."""

from __future__ import annotations

from launcher.record.probe import distributions, usage

# keras requires rich, and rich requires pygments; IPython, when installed, is imported by keras'
# probe and imports pygments and traitlets itself.
REQUIRES = {
    "tensorflow": ["keras", "numpy"],
    "keras": ["numpy", "rich"],
    "rich": ["pygments", "markdown-it-py"],
    "markdown-it-py": [],
    "ipython": ["pygments", "traitlets"],
    "traitlets": [],
}
TOPS = {
    "tensorflow": {"tensorflow"},
    "keras": {"keras"},
    "numpy": {"numpy"},
    "rich": {"rich"},
    "markdown-it-py": {"markdown_it"},
    "ipython": {"IPython"},
    "pygments": {"pygments"},
    "traitlets": {"traitlets"},
}
FILES = {f"/site/{top}/x.py": dist for dist, tops in TOPS.items() for top in tops}
BEFORE = {
    "tensorflow": {"/site/tensorflow/x.py"},
    "keras": {"/site/tensorflow/x.py"},
    "numpy": {"/site/tensorflow/x.py", "/site/keras/x.py"},
    "rich": {"/site/keras/x.py"},
    "markdown_it": {"/site/rich/x.py"},
}
AFTER = {
    **BEFORE,
    "IPython": {"/site/keras/x.py", "/site/IPython/x.py"},
    "pygments": {"/site/IPython/x.py", "/site/pygments/x.py"},
    "traitlets": {"/site/IPython/x.py"},
}


def _keyed(importers: dict, direct: set[str]) -> set[str]:
    imported = {d: tops for d, tops in TOPS.items() if tops & set(importers) or tops & direct}
    by = usage.imported_by(importers, imported, FILES.get)
    return distributions.keyed_distributions(imported, imported, direct, REQUIRES, by)


def test_what_a_probe_pulled_in_is_probed_with_it():
    before = _keyed(BEFORE, {"tensorflow"})
    assert before == {"tensorflow", "keras", "numpy", "rich", "markdown-it-py"}
    # IPython installed: keras' probe imports it, it imports pygments, which rich (keyed) requires
    # but never imported: the key is the same as before the install
    assert _keyed(AFTER, {"tensorflow"}) == before
    # without the chain (the rule before issue 39), pygments was keyed because rich requires it
    imported = {d: tops for d, tops in TOPS.items()}
    assert "pygments" in distributions.keyed_distributions(imported, imported, {"tensorflow"}, REQUIRES)


def test_what_the_jobs_own_code_or_a_keyed_library_imports_stays_keyed():
    # the job's own code imports pygments: keyed, whoever else imported it
    assert "pygments" in _keyed(AFTER, {"tensorflow", "pygments"})
    # rich (keyed, requiring it) imports pygments itself (rich.syntax): keyed
    with_rich = {**AFTER, "pygments": AFTER["pygments"] | {"/site/rich/x.py"}}
    assert "pygments" in _keyed(with_rich, {"tensorflow"}) and "ipython" not in _keyed(with_rich, {"tensorflow"})
    # the job imports IPython itself (a notebook): IPython and what it requires and imports are keyed
    assert {"ipython", "pygments", "traitlets"} <= _keyed(AFTER, {"tensorflow", "IPython"})


def test_an_import_from_code_no_distribution_owns_is_keyed_as_required():
    # the standard library or C code imported pygments (no known importer): kept in the key when a
    # keyed distribution requires it, as before the chain was recorded; never dropped on a guess
    unknown = {**AFTER, "pygments": {"<frozen>"}}
    assert "pygments" in _keyed(unknown, {"tensorflow"})
    by = usage.imported_by(unknown, {"pygments": {"pygments"}, "ipython": {"IPython"}}, FILES.get)
    assert by == {"pygments": {None}, "ipython": {"keras"}}
