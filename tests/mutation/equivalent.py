"""Surviving mutants that are equivalent: the mutated code behaves as the original for every input.

Keyed by the mutated function (mutmut's name without ``__mutmut_N``) and the mutated line as mutmut
writes it (stripped), so the list survives renumbering; each with the reason no test can tell the two
apart. A survivor not listed here fails ``nox -s mutation``: write the test that kills it, or, if it is
truly equivalent, add it here with the reason.
"""

from __future__ import annotations

_NO_COPY = "astype(copy=...) only decides whether numpy may return the input itself; the bytes hashed are the same"
_ORDERED_SET = "the dict is an ordered set: only its keys are returned (list(out)), never a value"
_DELETED = (
    "a mapped path that ends in '(deleted)' never ends in .so or .so.N, which _SHARED_LIBRARY requires: "
    "the suffix check never decides alone"
)
_CPUS = "the cpu knob's trials are its models only: the function _cpus returns never reads the config or the cores"
_PRE = "launcher.run.precheck.x_key_differences_now"
_ABS_JOIN = "Path(cwd) / name is Path(name) when name is absolute: pathlib starts again at an absolute part"
_MODULE_PATH = "the key holds a module's sha256 only (key.KEY['code.modules']): the path's entry name is never read"
_SCHEMA = (
    "fingerprint.check_schema has refused any run without a schema of 1, 2 or 3, and the key reads the schema "
    "only as schema < 2 (_since_schema_2): a default, or another schema of 2 or more, changes nothing"
)
_NO_SOFTWARE = "the launcher's side of a fingerprint (fingerprint.collect) has software None already"
_NO_CONTAINER = (
    "this branch runs only for a stored run without a container, where the rerun's probes.software() "
    "reports container None too; an extra entry is never read and the key maps any empty container "
    "to None"
)
_NO_FLAGS = (
    "with neither a flags nor a Features line the CPU's flags are one word that is no ISA flag: 'XXXX' "
    "is none (is_isa_flag) and completes no x86-64 level (cpuid.levels), as no flag at all"
)

_ONE_PARENT = (
    "every left-out path (config.NOT_IN_HASH, NOT_IN_HASH_DOCKER) has at most one parent, and the walk "
    "starts at the config itself, always a mapping: the walk's check of its node never sees another"
)

_CHECK_ONLY = (
    "validate calls resolve_threads only for its refusal, which depends on the value alone; the core "
    "count it is given decides what 'auto' resolves to, and validate discards that"
)

_ONE_BASELINE = "ISA_BASELINES has one entry: the separator that joins its entries into the message is never written"
_TRACE_DEFAULT = (
    "validate only refuses a trace_every that is not an integer >= 0; a missing one defaulting to 1 "
    "instead of 0 passes the same check, and validate keeps no value"
)

_CALLS_DEFAULT = (
    "validate only refuses a data_parallel_calls that is neither autotune nor a positive integer; a "
    "missing one defaulting to 2 instead of 1 passes the same check, and validate keeps no value"
)

EQUIVALENT: dict[tuple[str, str], str] = {
    ("launcher.run.config.x_validate", 'calls = train.get("data_parallel_calls", 2)'): _CALLS_DEFAULT,
    (
        "launcher.run.config.x_validate",
        "raise ConfigError(f\"determinism.isa_baseline must be one of {'XX, XX'.join(determinism.ISA_BASELINES)}, \"",
    ): _ONE_BASELINE,
    ("launcher.run.config.x_validate", 'trace_every = det.get("trace_every", 1)'): _TRACE_DEFAULT,
    ("launcher.run.config.x_validate", "determinism.resolve_threads(value, None)"): _CHECK_ONLY,
    ("launcher.run.config.x_validate", "determinism.resolve_threads(value, 2)"): _CHECK_ONLY,
    (
        "launcher.run.config.x_hashed_part",
        "node = node.get(name) if (isinstance(node, dict)) or True else None",
    ): _ONE_PARENT,
    (
        "launcher.record.probe.probes.x_parse_cpuinfo",
        'flags = (fields.get("flags") or fields.get("Features") or "XXXX").split()',
    ): _NO_FLAGS,
    ("launcher.record.hashing.x_array_digest", 'a = a.astype(a.dtype.newbyteorder("<"), copy=None)'): _NO_COPY,
    ("launcher.record.hashing.x_array_digest", 'a = a.astype(a.dtype.newbyteorder("<"), )'): _NO_COPY,
    ("launcher.record.hashing.x_array_digest", 'a = a.astype(a.dtype.newbyteorder("<"), copy=True)'): _NO_COPY,
    (
        "launcher.verdict.compare.x_allclose_problems",
        "for ma, mb in zip(a.metrics, b.metrics, strict=None):",
    ): "zip's strict=None is falsy, as is the default: the same as strict=False",
    (
        "launcher.verdict.compare.x_allclose_problems",
        "for ma, mb in zip(a.metrics, b.metrics, ):",
    ): "strict=False is zip's default",
    (
        "launcher.verdict.compare.x_allclose_problems",
        "worst = float(np.max(np.abs(wa[name].astype(None) - wb[name])))",
    ): "astype(None) is numpy's default float type, float64: the same cast",
    (
        "launcher.verdict.compare.x_read_weights",
        "with h5py.File(record.path / name, ) as f:",
    ): "h5py opens files read-only ('r') by default",
    (
        "launcher.verdict.compare.x_decide",
        'return Comparison("NOTHING COMPARED", NOTHING_COMPARED, notes=why, )',
    ): "equal=None is Comparison's default",
    (
        "launcher.verdict.compare.x__wrap",
        "return textwrap.wrap(text, width, break_on_hyphens=None) or [text]",
    ): "textwrap breaks at hyphens only when break_on_hyphens is True: None is as False",
    (
        "launcher.verdict.audit.x_likely_causes",
        "out[f\"a generator made without a seed: {g['call']} at {g['where']} (seed it from launcher.seed())\"] = \"\"",
    ): _ORDERED_SET,
    ("launcher.verdict.audit.x_likely_causes", 'out[f"input the key may not hold: {gap}"] = ""'): _ORDERED_SET,
    (
        "launcher.record.probe.usage.x_parse_maps",
        'if path.startswith("/") and not path.endswith("XX(deleted)XX") and _SHARED_LIBRARY.search(path):',
    ): _DELETED,
    (
        "launcher.record.probe.usage.x_parse_maps",
        'if path.startswith("/") and not path.endswith("(DELETED)") and _SHARED_LIBRARY.search(path):',
    ): _DELETED,
    ("launcher.record.probe.usage.x_parse_maps", "out.setdefault(path, )"): _ORDERED_SET,
    (
        "launcher.run.precheck.x__current_path",
        "return Path(name) if (os.path.isabs(name)) and False else Path(cwd) / name",
    ): _ABS_JOIN,
    (
        "launcher.run.precheck.x_current_usage",
        'modules = {name: {"XXpathXX": m["path"], "sha256": hashes.sha256(snapshot.rooted(m["path"]'
        ', root)) or "missing"}',
    ): _MODULE_PATH,
    (
        "launcher.run.precheck.x_current_usage",
        'modules = {name: {"PATH": m["path"], "sha256": hashes.sha256(snapshot.rooted(m["path"], root)) or "missing"}',
    ): _MODULE_PATH,
    ("launcher.run.precheck.x_key_differences_now", "if stored.get(None, 1) < 2:"): _SCHEMA,
    ("launcher.run.precheck.x_key_differences_now", 'if stored.get("schema", None) < 2:'): _SCHEMA,
    ("launcher.run.precheck.x_key_differences_now", 'if stored.get("schema", ) < 2:'): _SCHEMA,
    ("launcher.run.precheck.x_key_differences_now", 'if stored.get("XXschemaXX", 1) < 2:'): _SCHEMA,
    ("launcher.run.precheck.x_key_differences_now", 'if stored.get("SCHEMA", 1) < 2:'): _SCHEMA,
    ("launcher.run.precheck.x_key_differences_now", 'if stored.get("schema", 2) < 2:'): _SCHEMA,
    ("launcher.run.precheck.x_key_differences_now", 'if stored.get("schema", 1) <= 2:'): _SCHEMA,
    ("launcher.run.precheck.x_key_differences_now", 'if stored.get("schema", 1) < 3:'): _SCHEMA,
    (_PRE, 'current["schema"] = stored.get(None, 1)  # what it lacks stays unknown'): _SCHEMA,
    (_PRE, 'current["schema"] = stored.get("schema", None)  # what it lacks stays unknown'): _SCHEMA,
    (_PRE, 'current["schema"] = stored.get("schema", )  # what it lacks stays unknown'): _SCHEMA,
    (_PRE, 'current["schema"] = stored.get("XXschemaXX", 1)  # what it lacks stays unknown'): _SCHEMA,
    (_PRE, 'current["schema"] = stored.get("SCHEMA", 1)  # what it lacks stays unknown'): _SCHEMA,
    (_PRE, 'current["schema"] = stored.get("schema", 2)  # what it lacks stays unknown'): _SCHEMA,
    (_PRE, 'current["XXsoftwareXX"] = None  # the job never reported: nothing to check it against'): _NO_SOFTWARE,
    (_PRE, 'current["SOFTWARE"] = None  # the job never reported: nothing to check it against'): _NO_SOFTWARE,
    ("launcher.run.precheck.x_key_differences_now", 'current["software"]["container"] = None'): _NO_CONTAINER,
    (_PRE, 'current["software"]["XXcontainerXX"] = stored["software"].get("container")'): _NO_CONTAINER,
    (_PRE, 'current["software"]["CONTAINER"] = stored["software"].get("container")'): _NO_CONTAINER,
    (_PRE, 'current["software"]["container"] = stored["software"].get(None)'): _NO_CONTAINER,
    (_PRE, 'current["software"]["container"] = stored["software"].get("XXcontainerXX")'): _NO_CONTAINER,
    (_PRE, 'current["software"]["container"] = stored["software"].get("CONTAINER")'): _NO_CONTAINER,
    (
        "launcher.job.observe.reads.x_note_child",
        'if os.path.basename(args[0] if args else "XXXX") in SHELLS and "-c" in words[:-1]:  # sh -c \'zcat a.gz | ...\'',  # noqa: E501
    ): "with no arguments the name tested is '' or 'XXXX': neither is a shell",
    (
        "launcher.job.observe.reads.x_note_child",
        "info = opened.get(os.path.join(os.getcwd(), path) if (not os.path.isabs(path)) or True else path)",
    ): "os.path.join(cwd, path) is path itself when path is absolute",
    ("launcher.verdict.audit.x_trials", "out += _cpus(options.cpus)(None, cores)"): _CPUS,
    ("launcher.verdict.audit.x_trials", "out += _cpus(options.cpus)(cfg, None)"): _CPUS,
}
