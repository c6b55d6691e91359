"""One exception tree, grouped by what the caller can do about it.

    MirrorflowError                 its message is one actionable line
     ├── ConfigError                fix the input: file, line, key (exit code 2)
     │    ├── InvalidConfig         every problem of a configuration, the first one as the message
     │    └── PlaceholderError      a ${provider:...} placeholder names nothing that exists
     └── OperationalError           something outside is wrong: retry or repair it (exit code 1)
          ├── LocalClusterError     the embedded local clusters could not be run
          ├── RetryableError        a task or query failed on what its next attempt may not meet: Spark retries
          │                         the task, the driver restarts the query (with its backoff)
          ├── TopicsRecreated       source topics were deleted and created again: a new Spark checkpoint, then on
          └── MirrorError           a failure retrying cannot fix: the flow stops with this message

A user's regex (topics, groups, their excludes) that cannot be read as Java's raises ConfigError, like any other
bad input. From a Python worker or a batch to the driver an error crosses Spark's JVM as text: a MirrorError's
message starts with FATAL and a TopicsRecreated's with RECREATED, the two markers the driver looks for in Spark's
error (jobs/query_end); anything else is retried.
"""

from __future__ import annotations

FATAL = "mirrorflow-fatal: "
RECREATED = "mirrorflow-recreated: "


class MirrorflowError(Exception):
    """Base of every error mirrorflow raises on purpose; its message is one actionable line."""

    exit_code = 1


class ConfigError(MirrorflowError):
    """The configuration or the command line is wrong; the message names file, line and key."""

    exit_code = 2

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None,
                 key: str | None = None) -> None:
        self.source, self.line, self.key, self.reason = source, line, key, message
        where = ":".join(str(p) for p in (source, line) if p is not None)
        prefix = f"{where}: " if where else ""
        keypart = f"{key}: " if key else ""
        super().__init__(f"{prefix}{keypart}{message}")


class InvalidConfig(ConfigError):
    """Every problem found in a configuration, one line each; the first one is the message."""

    def __init__(self, problems: list[ConfigError]) -> None:
        self.problems = problems
        Exception.__init__(self, str(problems[0]))
        first = problems[0]
        self.source, self.line, self.key, self.reason = first.source, first.line, first.key, first.reason


class PlaceholderError(ConfigError):
    """A placeholder names a provider, variable, file or key that does not exist."""


class OperationalError(MirrorflowError):
    """A cluster, a process or a file outside mirrorflow's control failed."""

    exit_code = 1


class LocalClusterError(OperationalError):
    """The embedded local Kafka clusters could not be started, stopped or reached."""


class MirrorError(OperationalError):
    """A failure (a task's or the driver's) that retrying cannot fix; the driver stops the flow with this message."""

    def __init__(self, message: str) -> None:
        super().__init__(message if message.startswith(FATAL) else FATAL + message)


class RetryableError(OperationalError):
    """A task or query failure its next attempt may not meet (a lost lease, an aborted transaction, a partition the
    target does not know yet): not fatal, the query restarts."""


class TopicsRecreated(OperationalError):
    """A batch found source topics deleted and created again: the driver starts a new Spark checkpoint."""

    def __init__(self, message: str) -> None:
        super().__init__(message if message.startswith(RECREATED) else RECREATED + message)
