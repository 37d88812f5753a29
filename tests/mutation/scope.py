"""What `nox -s mutation` mutates: the verdict core, function by function (docs/testing.md)."""

from __future__ import annotations

# module -> the functions mutated (mutmut names a function f of a module `x_f`, a method m of class C `xǁCǁm`).
SCOPE: dict[str, tuple[str, ...]] = {
    "launcher.record.key": ("*",),  # the comparability key
    "launcher.record.environment": ("*",),  # the env allowlist, secret filtering
    "launcher.record.hashing": ("*",),  # the weights digest
    "launcher.verdict.compare": ("*",),  # compare's verdicts and tolerance
    "launcher.record.runs": ("x_seal", "x_verify_seal", "x__files", "x_file_sha256"),  # the seal
    "launcher.run.trace": ("x_point", "x_first_divergence", "x__differing_layers", "x_describe"),  # the locator
}

# The unit tests mutants are judged by (keep in step with pyproject.toml [tool.mutmut]). Left out: two
# tests that start the launcher in a subprocess in another directory (mutmut's trampolines would look for
# their config there), and two whose fake replay module only works when
# launcher.verdict.replay was not imported before them (mutmut orders tests by duration). None of
# them tests a module above.
DESELECT = (
    "tests/unit/test_index.py::test_launch_runs_shows_abandoned_and_rebuilds_on_demand",
    "tests/unit/test_hydra.py::test_a_missing_sweeper_plugin_names_the_extra_that_installs_it",
    "tests/unit/test_sweep.py::test_verify_counts_reproduced_jobs",
    "tests/unit/test_sweep.py::test_verify_exit_codes",
)


def patterns() -> list[str]:
    """``mutmut run`` arguments selecting the mutants in scope."""
    return [f"{module}.{func}__mutmut_*" for module, funcs in SCOPE.items() for func in funcs]
