"""One exception tree, grouped by what the caller can do about it.

    MirrorflowError
     ├── ConfigError        fix the input (exit code 2)
     └── OperationalError   something outside is wrong: retry or repair it (exit code 1)
          └── LocalClusterError   the embedded local clusters could not be run
"""

from __future__ import annotations


class MirrorflowError(Exception):
    """Base of every error mirrorflow raises on purpose; its message is one actionable line."""

    exit_code = 1


class ConfigError(MirrorflowError):
    """The configuration or the command line is wrong; the message names file, line and key."""

    exit_code = 2

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None,
                 key: str | None = None) -> None:
        self.source, self.line, self.key = source, line, key
        where = ":".join(str(p) for p in (source, line) if p is not None)
        prefix = f"{where}: " if where else ""
        keypart = f"{key}: " if key else ""
        super().__init__(f"{prefix}{keypart}{message}")


class OperationalError(MirrorflowError):
    """A cluster, a process or a file outside mirrorflow's control failed."""

    exit_code = 1


class LocalClusterError(OperationalError):
    """The embedded local Kafka clusters could not be started, stopped or reached."""
