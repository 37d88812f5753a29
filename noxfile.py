"""Developer sessions: `nox -s tests`, `nox -s lint`, `nox -s bench` (opt-in, slow)."""

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
