"""Developer sessions: `nox -s tests`, `nox -s lint`; opt-in: `bench`, `gpu_image`, `gpu_acceptance`."""

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
    session.install("-e", ".", "--no-deps")
    session.run("lint-imports")  # the layers and no-circle rules in pyproject.toml


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Run every benchmark under benchmarks/ and print their ratios."""
    session.install("-e", ".")
    for script in sorted(__import__("pathlib").Path("benchmarks").glob("bench_*.py")):
        session.run("python", str(script), *session.posargs)


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
    session.install("docker>=7.0", "hydra-joblib-launcher>=1.2")
    session.run("python", "benchmarks/gpu_acceptance.py", *session.posargs)
