"""``launch audit [OVERRIDES...]``: which knobs change this job's bits, and where."""

from __future__ import annotations

from launcher.errors import ConfigError


def main(argv: list[str]) -> int:
    from launcher.verdict import audit

    if any(a in ("-h", "--help") for a in argv):
        print(audit.USAGE)
        return 0
    if any(a.startswith("-") for a in argv):
        raise ConfigError(
            f"launch audit: unknown option {next(a for a in argv if a.startswith('-'))!r}; "
            "it takes overrides and audit.KEY=VALUE (see launch audit --help)"
        )
    return audit.run(argv)
