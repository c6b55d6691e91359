"""How the process Spark runs for the stream's source reader ends: Spark resetting its socket as the query stops is
a normal stop (one line), any other error keeps its traceback. Run as a real Python process, the way Spark runs it."""

from __future__ import annotations

import subprocess
import sys

import pytest

_PROCESS = """
from mirrorflow.spark import range_source
range_source.source_class(None)(options={{}}).streamReader(None)  # as Spark's runner asks for the reader
raise {error}
"""


@pytest.mark.parametrize("error", ["BrokenPipeError(32, 'Broken pipe')", "ConnectionResetError(104, 'reset')"])
def test_a_socket_spark_closed_ends_the_source_process_with_one_line(error: str) -> None:
    done = subprocess.run([sys.executable, "-c", _PROCESS.format(error=error)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and "connection to Spark closed" in done.stderr


def test_any_other_error_of_the_source_process_keeps_its_traceback() -> None:
    done = subprocess.run([sys.executable, "-c", _PROCESS.format(error="ValueError('a bug')")], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" in done.stderr and "ValueError: a bug" in done.stderr
