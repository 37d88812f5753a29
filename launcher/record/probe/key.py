"""The comparability key: the one definition of which fingerprint fields must match.

DIFFERENT means "a determinism bug" only if everything else that could change the
bits is in the key; a key that holds what no job used refuses sound comparisons. So
the key holds what the job ran and read, and only that. Two runs are compared bit
for bit only when their keys are equal; otherwise the comparison is REFUSED with the
differing fields named (nested fields expanded: ``software.distributions.keras.version``).

Each entry of ``KEY`` says why it is in; the comments say what is deliberately out.
A field a run's fingerprint schema did not record is ``UNKNOWN``: never equal to
anything, itself included, so an old run is never called comparable by default.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable

from launcher.record.hashing import module_name
from launcher.record.probe.environment import keyed_env


class LauncherCode:
    """The launcher's code a job imported, module name -> sha256, compared by content: two runs
    whose jobs ran the same contents are equal however the modules were named or laid out (a
    module moved unchanged decides no bits). The names are for saying which module changed."""

    def __init__(self, modules: dict[str, str]) -> None:
        self.modules = dict(modules)

    def contents(self) -> frozenset[str]:
        return frozenset(self.modules.values())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LauncherCode) and self.contents() == other.contents()

    def __hash__(self) -> int:
        return hash(self.contents())

    def canonical(self) -> list[str]:
        return sorted(self.contents())

    def __repr__(self) -> str:
        return f"{len(self.modules)} module(s) of the launcher"


def launcher_code(modules: dict[str, str], schema: int | None) -> LauncherCode:
    """A fingerprint's ``code.launcher_modules`` as a ``LauncherCode``: schema 3 named the files
    relative to the package (``run/reads.py``), later schemas name modules."""
    if schema is not None and schema < 4:
        modules = {module_name(rel): digest for rel, digest in modules.items()}
    return LauncherCode(modules)


def launcher_differences(name: str, a: LauncherCode, b: LauncherCode) -> list[tuple[str, object, object]]:
    """(``code.launcher.<module>``, a's sha256, b's) for each module whose content only one side ran."""
    out: list[tuple[str, object, object]] = []
    seen = set()
    for mod, digest in sorted(a.modules.items()):
        if digest not in b.contents():
            out.append((f"{name}.{mod}", digest, b.modules.get(mod, "not imported")))
            seen.add(mod)
    for mod, digest in sorted(b.modules.items()):
        if digest not in a.contents() and mod not in seen:
            out.append((f"{name}.{mod}", a.modules.get(mod, "not imported"), digest))
    return out


def differing(diffs: list[tuple[str, object, object]]) -> str:
    """What differs, in one clause for a one-line refusal: the launcher's own in-job modules in
    words, then the first four other fields."""
    words = launcher_modules_changed(diffs)
    other = [d[0] for d in diffs if not d[0].startswith("code.launcher.")]
    listed = f"({', '.join(other[:4])}{', …' if len(other) > 4 else ''})"
    if not words:
        return f"{len(other)} comparability field(s) differ {listed}"
    return words + (f"; {len(other)} other comparability field(s) differ {listed}" if other else "")


def launcher_modules_changed(diffs: list[tuple[str, object, object]]) -> str | None:
    """Words for a refusal whose differences include the launcher's own in-job code, or None."""
    mods = [d[0].removeprefix("code.launcher.") for d in diffs if d[0].startswith("code.launcher.")]
    if any(d[0] == "cluster.workers" for d in diffs):  # imported only by a job of many workers: the count says it
        mods = [m for m in mods if m != CLUSTER_MODULE]
    if not mods:
        return None
    shown = ", ".join(mods[:6]) + (f" and {len(mods) - 6} more" if len(mods) > 6 else "")
    return (
        f"the launcher's in-job code changed: {shown} (a launcher upgrade since the run; "
        "its bits may or may not change)"
    )


class Unknown:
    """A key field the fingerprint did not record: equal to nothing."""

    def __init__(self, why: str) -> None:
        self.why = why

    def __eq__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"unknown ({self.why})"

    __str__ = __repr__


def _since_schema_2(getter: Callable[[dict], object]) -> Callable[[dict], object]:
    """A field schema 1 fingerprints did not record."""

    def get(fp: dict) -> object:
        if fp.get("schema", 1) < 2:
            return Unknown("not recorded by fingerprint schema 1")
        return getter(fp)

    return get


def _cpu(fp: dict, name: str) -> object:
    """A CPU field (some added with fingerprint schema 3: unknown where a run did not record
    them). A portable run keys on its ISA baseline instead (``_baseline``)."""
    cpu = fp["hardware"]["cpu"]
    if cpu.get("baseline"):
        return _baseline(cpu["baseline"], name)
    return cpu[name] if name in cpu else Unknown("not recorded by this run's fingerprint")


def _baseline(baseline: dict, name: str) -> object:
    """A portable run's CPU in the key: ``isa`` holds the baseline and whether the CPU supports
    it; the model, generation and caches are out, since every runtime ISA dispatch was capped
    at the baseline (measured in docs/determinism.md: the same bits on AVX-512, Haswell and
    Zen 1 CPUs). A strict run compared with it differs here, and in ``determinism``."""
    if name == "isa":
        return {"baseline": baseline.get("name"), "supports_baseline": baseline.get("supported")}
    return f"not keyed (portable: {baseline.get('name')})"


def _software(fp: dict) -> dict:
    return fp.get("software") or {}


KEY: dict[str, Callable[[dict], object]] = {
    # CPU vendor/model/ISA choose oneDNN and Eigen kernels (FIELD-NOTES: AVX2/AVX-512/AMX).
    # A portable run (determinism=portable) holds its ISA baseline in hardware.cpu.isa and
    # none of the model fields: its dispatches are capped at the baseline (_baseline).
    "hardware.cpu.vendor": lambda fp: _cpu(fp, "vendor"),
    "hardware.cpu.model": lambda fp: _cpu(fp, "model"),
    "hardware.cpu.isa": lambda fp: _cpu(fp, "isa"),
    # The model name masks generations: two CPUs both named "AMD EPYC", with different ISA
    # subsets, gave different bits for one strict run (FIELD-NOTES). Family, model number and
    # stepping name the microarchitecture, whose kernels and cache sizes (which set oneDNN's
    # and Eigen's blocking) decide the order of the sums. Out: microcode (recorded for
    # reading): its updates fix errata and security issues, they do not select kernels.
    "hardware.cpu.family": lambda fp: _cpu(fp, "family"),
    "hardware.cpu.model_number": lambda fp: _cpu(fp, "model_number"),
    "hardware.cpu.stepping": lambda fp: _cpu(fp, "stepping"),
    "hardware.cpu.cache_size": lambda fp: _cpu(fp, "cache_size"),
    "hardware.cpu.caches": lambda fp: _cpu(fp, "caches"),
    # GPU model, compute capability and driver pick cuDNN/cuBLAS algorithms. Out: index,
    # UUID (a serial number) and MIG/memory, which do not change kernels.
    "hardware.gpus": lambda fp: [
        (g["name"], g["compute_capability"], g["driver_version"]) for g in fp["hardware"]["gpus"]
    ],
    # Out: logical cores and memory: thread counts are pinned and recorded in determinism.
    # Out: hostname, times, paths.
    # The platform the math runs on. libc carries libm.
    "software.os": lambda fp: [(_software(fp).get("os") or {}).get(k) for k in ("id", "version_id")],
    "software.libc": lambda fp: _software(fp).get("libc"),
    "software.python": lambda fp: _software(fp).get("python"),
    "software.machine": lambda fp: _software(fp).get("machine"),
    "software.tensorflow": lambda fp: _software(fp).get("tensorflow"),
    "software.tf_build": lambda fp: _software(fp).get("tf_build"),
    "software.keras": lambda fp: _software(fp).get("keras"),
    "software.numpy": lambda fp: _software(fp).get("numpy"),
    # The distributions the job imported or whose shared libraries it loaded, each with its
    # version and the hash of what it contains (files_sha256: its RECORD's file hashes).
    # Out: where and by what it was installed (console scripts' first lines, the installer's
    # markers, compiled bytecode, record_sha256), so the same wheels in another environment
    # compare; the rest of the installed list (software.packages, recorded for reading): a
    # package the job never loads cannot change its bits.
    "software.distributions": _since_schema_2(lambda fp: _distributions_key(_software(fp).get("distributions"))),
    # Every other shared library mapped into the job (libm, libstdc++, libgomp, a custom op),
    # by content; one in the project by its path relative to it (_in_project).
    "software.libraries": _since_schema_2(lambda fp: _in_project(_software(fp).get("libraries"), fp)),
    # The image a containerized run used (None for local runs): a different image is
    # different software even when versions agree. Out: the kernel (no effect on math).
    "software.container": lambda fp: _container_key(_software(fp).get("container")),
    # The variables the numerics libraries read (environment.ENV_ALLOW). Out: logging and
    # display, device slots, and variables that act only through hashed files
    # (environment.NOT_IN_KEY, each with its reason).
    "environment": lambda fp: keyed_env(fp["environment"]),
    # The variables the job's own code read (os.environ, os.getenv), with what it found: a
    # learning rate from LR, a batch size from BATCH_SIZE (unset is a value too). A secret's
    # value only by its hash. Runs from before this was recorded: unknown.
    "environment_read": lambda fp: (
        fp["environment_read"]
        if fp.get("environment_read") is not None
        else Unknown("not recorded by this run's fingerprint")
    ),
    # Effective settings, read back in the job: seed, op determinism, thread counts, XLA,
    # tf.data order, Keras' floatx/epsilon/image_data_format/backend.
    "determinism": lambda fp: fp["determinism"],
    # The resolved config without store paths and settings that cannot change results.
    "config_sha256": lambda fp: fp["config_sha256"],
    # The user's config files (--config-dir) the config came from, by content: code may read
    # them at run time. Runs before --config-dir existed could not have used any: {}.
    "config_files": lambda fp: fp.get("config_files", {}),
    # The code that ran: the launcher's files the job process imported (bootstrap, observers,
    # tasks, data loading, what hashes the weights), by file; a script's own hash; and every
    # module the job imported from outside the installed distributions and the standard
    # library, by content. Out: the launcher's version and whole-package hash
    # (code.launcher_version, recorded for reading): its command line, verdicts, Docker and
    # sweep code never run in the job, so a new CLI message refuses no old run. Out: the
    # launch directory's git commit and diff (recorded for reading): the code that ran is
    # hashed directly, in a git repository or not.
    # A run that did not record the files (an older launcher) is held to its whole package.
    # By module name and content (LauncherCode): a module moved or renamed unchanged refuses nothing.
    "code.launcher": lambda fp: (
        launcher_code(fp["code"]["launcher_modules"], fp.get("schema"))
        if fp["code"].get("launcher_modules")
        else {"(the whole package)": fp["code"].get("launcher_version")}
    ),
    "code.script_sha256": lambda fp: fp["code"].get("script_sha256"),
    # A notebook's code cells, each by its source (named ``code cell N`` with its first line,
    # so a refusal says which cell). Out: the notebook file's own hash (notebook_sha256,
    # what its snapshot keeps): markdown, outputs, execution counts and metadata are not code.
    "code.notebook_cells": lambda fp: fp["code"].get("notebook_cells"),
    "code.modules": _since_schema_2(
        lambda fp: {name: m["sha256"] for name, m in (fp["code"].get("modules") or {}).items()}
    ),
    # The files the job read, by content, named by path: relative to the launch directory
    # when inside it, however the job named it (a path made from __file__ too), so a second
    # checkout of the project reads "the same" files (_in_project); absolute outside it
    # (~/.keras/datasets, /data name the same place on another machine).
    "data": _since_schema_2(lambda fp: _in_project(fp.get("data") or {}, fp)),
    # A multi-worker run (distribute.workers): how many workers, the collective implementation
    # their strategy used (RING, AUTO, NCCL: the order of the all-reduce's sums), the worker order
    # and each worker's hardware class (the chief's hardware is keyed above; another worker's
    # decides its share of the bits too). A run without the part ran on one worker. Out: hosts
    # and ports (where, not what), each worker's weights (results, compared, not keyed).
    "cluster": lambda fp: _cluster(fp.get("cluster")),
}
SINGLE_WORKER = {"workers": 1}  # the cluster of every run that ran on one worker
CLUSTER_MODULE = "launcher.job.cluster"  # the job's side of many workers


def _cluster(part: dict | None) -> dict:
    if not part:
        return dict(SINGLE_WORKER)
    return {
        "workers": part.get("workers"),
        "collective": part.get("collective"),
        "order": part.get("order"),
        "hardware": part.get("hardware"),
    }


HARDWARE_FIELDS = ("hardware.",)


def hardware_class(fp: dict) -> str:
    """A worker's hardware, as the key sees it (every ``hardware.*`` field of ``KEY``), in 16 hex
    digits: two workers of one class run the same kernels."""
    fields = {n: g(fp) for n, g in KEY.items() if n.startswith(HARDWARE_FIELDS)}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _in_project(named: dict | None, fp: dict) -> dict | None:
    """``named`` (path -> value) with each absolute path inside the run's project (its
    ``launch_dir``, recorded since fingerprint schema 5) relative to it. Two names of one file
    (read by a relative and by an absolute name) with different values keep both values."""
    root = fp.get("launch_dir")
    if not named or not isinstance(root, str) or os.path.normpath(root) == "/":
        return named
    root = os.path.normpath(root)
    out: dict = {}
    for name, value in sorted(named.items()):
        path = os.path.normpath(name)
        if os.path.isabs(name) and path.startswith(root + "/"):
            name = os.path.relpath(path, root)
        if name in out and out[name] != value:
            value = " | ".join(sorted({str(out[name]), str(value)}))
        out[name] = value
    return out


def _distributions_key(distributions: dict | None) -> object:
    """{name: {version, files_sha256}} (``record_sha256`` for a distribution recorded before
    files_sha256 existed); one recorded as not installed (``None``) stays ``None``."""
    if distributions is None:
        return None
    return {
        name: None if d is None else {"version": d.get("version"), **_content(d)} for name, d in distributions.items()
    }


def _content(identity: dict) -> dict:
    """What says a distribution's content: its own files, or, for a run recorded before they
    were hashed, its installed RECORD (never equal to a files hash: such runs compare only
    with each other on it)."""
    if "files_sha256" in identity:
        return {"files_sha256": identity["files_sha256"]}
    return {"record_sha256": identity.get("record_sha256", Unknown("not recorded"))}


def _container_key(container: dict | None) -> object:
    if not container:
        return None
    # Out: image_id. A verified rebuild (same inputs, same installed-tree hash) has a new id
    # only because Docker records creation times; the tag and the tree hash say what ran.
    return {k: container.get(k) for k in ("content_tag", "packages_sha256", "uid")}


def comparability_key(fp: dict) -> dict[str, object]:
    """The fields of ``fp`` that decide comparability, flattened, in a fixed order."""
    return {name: getter(fp) for name, getter in KEY.items()}


def key_sha256(fp: dict) -> str:
    canonical = json.dumps(
        comparability_key(fp),
        sort_keys=True,
        default=lambda o: o.canonical() if isinstance(o, LauncherCode) else str(o),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def key_differences(a: dict, b: dict) -> list[tuple[str, object, object]]:
    """(field, value in a, value in b) for every key field that differs, nested fields expanded."""
    out: list[tuple[str, object, object]] = []
    for name in KEY:
        _diff(name, KEY[name](a), KEY[name](b), out)
    return out


def unknown_on_both(a: dict, b: dict) -> list[str]:
    """The key fields neither fingerprint recorded: not a difference, but nothing vouches for them."""
    return [name for name, getter in KEY.items() if isinstance(getter(a), Unknown) and isinstance(getter(b), Unknown)]


def _diff(name: str, x: object, y: object, out: list) -> None:
    if x == y or (isinstance(x, Unknown) and isinstance(y, Unknown)):
        return  # unknown on both sides: nothing to tell them apart by (unknown on one side is a difference)
    if isinstance(x, LauncherCode) and isinstance(y, LauncherCode):
        out.extend(launcher_differences(name, x, y))
        return
    if isinstance(x, dict) and isinstance(y, dict):
        for k in sorted(set(x) | set(y)):
            _diff(f"{name}.{k}", x.get(k), y.get(k), out)
        return
    out.append((name, x, y))
