"""Developer sessions: `nox -s tests`, `nox -s lint`; opt-in: `bench`, `mutation`, `gpu_image`, `gpu_acceptance`."""

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (real TensorFlow training; Docker tests need a daemon)."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """Check the code with ruff."""
    session.install("ruff", "import-linter")
    session.run("ruff", "check", "launcher", "tests", "benchmarks", "noxfile.py", *session.posargs)
    session.run("ruff", "format", "--check", "launcher", "tests", "benchmarks", "noxfile.py")
    session.install("-e", ".", "--no-deps")
    session.run("lint-imports")  # the layers and no-circle rules in pyproject.toml


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Run every benchmark under benchmarks/ and print their ratios."""
    session.install("-e", ".")
    for script in sorted(__import__("pathlib").Path("benchmarks").glob("bench_*.py")):
        session.run("python", str(script), *session.posargs)


@nox.session(default=False)
def mutation(session: nox.Session) -> None:
    """Mutation testing of the verdict core against the unit tests (docs/testing.md); an hour or more on 2 cores.

    mutmut mutates the functions of the key, the environment filter, the digests, compare, the seal,
    the divergence locator, and what enters the key (usage, reads, precheck, probes, determinism,
    config), replay and the audit (tests/mutation/scope.py); tests/mutation/tables.py removes each
    entry of their module-level tables, judged by behaviour. Fails when a mutant survives without a
    recorded reason.
    """
    import shutil
    import sys

    session.install("-e", ".[test]")
    shutil.rmtree("mutants", ignore_errors=True)  # a fresh run: no result kept from older code
    sys.path.insert(0, ".")
    from tests.mutation.scope import patterns

    session.run("mutmut", "run", *patterns(), success_codes=[0, 1])
    session.run("python", "tests/mutation/report.py")
    session.run("python", "tests/mutation/tables.py")


@nox.session(default=False)
def gpu_image(session: nox.Session) -> None:
    """Build tf-gpu, run a strict job on the CPU in it, compare its weights with tf-cpu's (docs/gpu.md)."""
    session.install("-e", ".")
    session.run("python", "benchmarks/gpu_image.py", *session.posargs)


@nox.session(python="3.11", default=False)
def gpu_acceptance(session: nox.Session) -> None:
    """The GPU acceptance table, for a machine with NVIDIA GPUs (docs/gpu.md)."""
    try:  # no GPU: say so before installing gigabytes of CUDA wheels
        session.run("python", "benchmarks/gpu_acceptance.py", "--detect")
    except nox.command.CommandFailed:
        session.skip("no GPU found (the line above): nothing to accept on this machine")
    # TensorFlow with CUDA exactly as the tf-gpu image has it, then the launcher on top.
    session.install("-r", "lockfiles/tf-gpu.txt")
    session.install("-e", ".", "--no-deps")
    session.install("docker>=7.0", "hydra-joblib-launcher>=1.2", "nvidia-ml-py>=12")
    session.run("python", "benchmarks/gpu_acceptance.py", *session.posargs)
