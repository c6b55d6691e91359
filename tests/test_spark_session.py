"""The Spark session's pure helpers."""

from __future__ import annotations

import io
import os

from mirrorflow import spark_logs
from mirrorflow.spark_session import local_cores


def test_local_masters_name_their_cores_and_other_masters_none() -> None:
    assert local_cores("local") == 1
    assert local_cores("local[3]") == 3
    assert local_cores("local[4,2]") == 4
    assert local_cores("local[*]") == (os.cpu_count() or 1)
    assert local_cores("spark://host:7077") is None
    assert local_cores("yarn") is None


def test_the_jvm_stderr_keeps_every_line_but_the_start_up_notices() -> None:
    jvm = [b"WARNING: Using incubator modules: jdk.incubator.vector\n", b"26/11/25 WARN Utils: real warning\n",
           b"Exception in thread \"main\" java.lang.OutOfMemoryError\xff\n", b"no newline at the end"]
    out = io.StringIO()
    spark_logs.forward_stderr(jvm, out)
    assert out.getvalue() == ("26/11/25 WARN Utils: real warning\n"
                              "Exception in thread \"main\" java.lang.OutOfMemoryError\ufffd\nno newline at the end")
