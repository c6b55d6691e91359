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


# PySpark 4's daemons (the workers' and the data source planner's) print a traceback when the JVM closes a socket as
# Spark stops: in every stopping stream's log. One line says it; any other traceback is copied whole.
_TRACEBACK = "Traceback (most recent call last):"
_CLOSED = ("BrokenPipeError", "ConnectionResetError")
_TRACEBACK_LINES_MAX = 200  # bound on the lines held back while a traceback is read


def forward_stderr(lines: Iterable[bytes], fd: int) -> None:
    """Copy the JVM's stderr, line by line as it comes, to file descriptor `fd`, all but `STARTUP_NOTICES`, and a
    daemon's closed-socket traceback as one line. Reads to the end whatever happens to `fd`: a JVM whose stderr pipe
    fills up blocks."""
    held: list[bytes] = []  # a traceback being read: held until its last line says what it was
    for raw in lines:
        text = raw.decode(errors="replace").rstrip("\r\n")
        if held:
            held.append(raw)
            if text.startswith((" ", "\t")) and len(held) < _TRACEBACK_LINES_MAX:
                continue
            _write(fd, _closed_socket_line(held) or b"".join(held))
            held = []
        elif text == _TRACEBACK:
            held = [raw]
        elif text not in STARTUP_NOTICES:
            _write(fd, raw)
    if held:
        _write(fd, b"".join(held))


def _closed_socket_line(traceback: list[bytes]) -> bytes | None:
    """One line for a traceback whose every frame is in PySpark's daemon and whose error is a closed socket."""
    texts = [raw.decode(errors="replace").rstrip("\r\n") for raw in traceback]
    frames = [t for t in texts if t.lstrip().startswith("File ")]
    if not texts[-1].startswith(_CLOSED) or not frames or not all("pyspark/daemon.py" in f for f in frames):
        return None
    line = f"mirrorflow: a Spark Python process's connection to the JVM closed as Spark stopped ({texts[-1]})\n"
    return line.encode()


def _write(fd: int, data: bytes) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, data)
