"""The Spark session's pure helpers."""

from __future__ import annotations

import os

from mirrorflow.spark_session import local_cores


def test_local_masters_name_their_cores_and_other_masters_none() -> None:
    assert local_cores("local") == 1
    assert local_cores("local[3]") == 3
    assert local_cores("local[4,2]") == 4
    assert local_cores("local[*]") == (os.cpu_count() or 1)
    assert local_cores("spark://host:7077") is None
    assert local_cores("yarn") is None
