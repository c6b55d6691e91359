"""Spark's JVM log settings for mirrorflow's jobs: warnings and errors only, none of the start-up notices a healthy
job prints (Airflow shows every stderr line of a task as a red error). Set for the local masters mirrorflow starts
itself; a cluster's own driver options are left alone."""

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

LOG4J_CONFIG = Path(__file__).resolve().parent / "log4j2.properties"
LOG4J_OPTION = f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}"  # a URI: no space for Spark to split on

# What a healthy JVM prints on stderr before any logger is set up: Spark's launcher adds the incubating vector
# module, and the JVM announces it.
STARTUP_NOTICES = frozenset({"WARNING: Using incubator modules: jdk.incubator.vector"})


def forward_stderr(lines: Iterable[bytes], fd: int) -> None:
    """Copy the JVM's stderr, line by line as it comes, to file descriptor `fd`, all but `STARTUP_NOTICES`. Reads to
    the end whatever happens to `fd`: a JVM whose stderr pipe fills up blocks."""
    for raw in lines:
        if raw.decode(errors="replace").rstrip("\r\n") in STARTUP_NOTICES:
            continue
        with contextlib.suppress(OSError):
            os.write(fd, raw)
