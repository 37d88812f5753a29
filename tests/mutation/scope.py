"""What `nox -s mutation` mutates: the verdict core, function by function (docs/testing.md)."""

from __future__ import annotations

# module -> the functions mutated (mutmut names a function f of a module `x_f`, a method m of class C `xǁCǁm`).
SCOPE: dict[str, tuple[str, ...]] = {
    "launcher.record.probe.key": ("*",),  # the comparability key
    "launcher.record.probe.environment": ("*",),  # the env allowlist, secret filtering
    "launcher.record.hashing": ("*",),  # the weights digest
    "launcher.verdict.compare": ("*",),  # compare's verdicts and tolerance
    "launcher.record.store.runs": ("x_seal", "x_verify_seal", "x__files"),  # the seal (its file hashes: hashing)
    "launcher.record.trace": ("x_point", "x_first_divergence", "x__differing_layers", "x_describe"),  # the locator
    # What enters the key: the job's reads and what they are, and the key checked before a rerun.
    "launcher.record.probe.usage": (
        "x_parse_maps",
        "x_tool_caches",
        "x_data_files",
        "x_origin",
        "x_read_files",
        "x_outputs",
        "x_listed_files",
        "x_display_name",
    ),
    "launcher.record.probe.places": ("x_classify", "x_system_path", "x_under"),
    "launcher.record.probe.distributions": (
        "x_parse_record",
        "x_content_entries",
        "x_files_sha256",
        "x_keyed_distributions",
        "x_parse_requires",
    ),
    "launcher.job.observe.reads": (
        "x_note",
        "x_note_child",
        "x__writing",
        "x__replacing",
        "x_natively_written",
        "x_note_listing",
        "x_observation",
    ),
    "launcher.run.precheck": ("*",),
    "launcher.record.probe.probes": (
        "x_parse_cpuinfo",
        "x_parse_cpu_caches",
        "x_parse_meminfo",
        "x_parse_nvidia_smi_query",
        "x_parse_cuda_driver_version",
        "x_parse_nvidia_topology",
        "x_parse_os_release",
        "x_parse_git_status",
        "x_strip_ansi",
        "x_tensorflow_gpu_notes",
    ),
    # The bootstrap's plan, what it reads back from TensorFlow, and its check that every setting took
    # effect; the config's hashed part.
    "launcher.job.determinism": ("x_plan", "x_verify", "x_read_back"),
    "launcher.run.config": ("x_hashed_part", "x_config_hash", "x_validate"),
    # Replay's refusal and verdict; the audit's trials and judgment.
    "launcher.verdict.replay": ("x_refusal", "x_verdict"),
    "launcher.verdict.audit": (
        "x_trials",
        "x__threads",
        "x__switch",
        "x__level",
        "x__input_pipeline",
        "x_with_overrides",
        "x_likely_causes",
    ),
    "launcher.verdict.audit_report": ("x_judge", "x_verdict_lines"),
}

# The unit tests mutants are judged by (keep in step with pyproject.toml [tool.mutmut]). Left out: six
# tests that start the launcher in a subprocess in another directory (mutmut's trampolines would look for
# their config there), three whose fake replay module only works when launcher.verdict.replay was not
# imported before them (mutmut orders tests by duration), and three that tell the job's code from a
# library's or the import system's by its stack frames (launcher.job.observe.reads._started_by_the_job, _hook),
# which mutmut's trampolines add to. Each passes in the plain test suite.
DESELECT = (
    "tests/unit/test_index.py::test_launch_runs_shows_abandoned_and_rebuilds_on_demand",
    "tests/unit/test_hydra.py::test_a_missing_sweeper_plugin_names_the_extra_that_installs_it",
    "tests/unit/test_sweep.py::test_sweep_replay_counts_reproduced_jobs",
    "tests/unit/test_sweep.py::test_sweep_verify_is_the_old_word_for_replay_for_one_more_release",
    "tests/unit/test_sweep.py::test_sweep_replay_exit_codes",
    "tests/unit/test_hashing.py::test_the_launchers_source_version_follows_every_file_of_its_package_and_nothing_else",
    "tests/unit/test_portable.py::test_replay_cpu_without_qemu_refuses_in_one_line_with_the_install_command",
    "tests/unit/test_portable.py::test_audit_cpu_knob_without_qemu_refuses_before_anything_runs",
    "tests/unit/test_portable.py::test_an_unknown_cpu_model_is_refused_by_name",
    "tests/unit/test_fswatch.py::test_only_programs_the_jobs_own_code_starts_are_the_jobs",
    "tests/unit/test_usage.py::test_the_real_audit_hook_tells_the_jobs_listing_from_the_import_systems",
    "tests/unit/test_usage.py::test_globs_are_recorded_as_patterns_and_only_what_matches_counts",
)


# The unit-test files of each module: a mutant written into a copy of the tree (report.py) is run
# against these first; only one they all pass is run against the whole of tests/unit.
UNIT_TESTS: dict[str, tuple[str, ...]] = {
    "launcher.record.probe.key": ("test_key_fields.py", "test_fingerprint.py", "test_portable.py", "test_usage.py"),
    "launcher.record.probe.environment": ("test_environment.py", "test_fingerprint.py", "test_key_fields.py"),
    "launcher.record.hashing": ("test_hashing.py", "test_precheck.py"),
    "launcher.record.store.runs": ("test_runs.py",),
    "launcher.record.probe.usage": ("test_usage.py", "test_fswatch.py", "test_key_fields.py"),
    "launcher.record.probe.places": ("test_usage.py", "test_fswatch.py"),
    "launcher.record.probe.distributions": ("test_usage.py", "test_rebuild.py", "test_precheck.py"),
    "launcher.record.probe.probes": (
        "test_fingerprint.py",
        "test_portable.py",
        "test_gpu.py",
        "test_gpu_h100.py",
        "test_nvml.py",
    ),
    "launcher.record.trace": ("test_trace.py", "test_hashing.py"),
    "launcher.job.observe.reads": ("test_reads.py", "test_fswatch.py", "test_usage.py"),
    "launcher.run.precheck": ("test_precheck.py", "test_rebuild.py"),
    "launcher.job.determinism": ("test_determinism.py", "test_portable.py"),
    "launcher.run.config": ("test_config.py", "test_config_hash_keys.py"),
    "launcher.verdict.compare": ("test_compare.py", "test_compare_report.py"),
    "launcher.verdict.replay": ("test_replay.py",),
    "launcher.verdict.audit": ("test_audit.py", "test_audit_interrupt.py", "test_portable.py"),
    "launcher.verdict.audit_report": ("test_audit.py", "test_audit_interrupt.py"),
}


def patterns() -> list[str]:
    """``mutmut run`` arguments selecting the mutants in scope."""
    return [f"{module}.{func}__mutmut_*" for module, funcs in SCOPE.items() for func in funcs]
