"""Spark's Python daemon, with the writer's imports done before it forks any worker.

Spark forks one Python worker per concurrent task from this daemon and kills a worker that has been idle for a
minute (PythonWorkerFactory), so every micro-batch after a quiet minute ran in fresh workers that imported
pyarrow, pandas (pyarrow's `from_pylist` loads it), confluent-kafka and the writer first: measured at 4 to 7 s of
the first batch's task on a busy 2-core host. A worker forked from this daemon has them already. Used where the
driver's interpreter is the workers' (a local master, `spark_session.build`).
"""

from __future__ import annotations

import contextlib

with contextlib.suppress(ImportError):  # a missing module is imported (or reported) by the task, as before
    import pandas  # noqa: F401
    import pyarrow  # noqa: F401

    import mirrorflow.stream_writer  # noqa: F401

from pyspark import daemon

if __name__ == "__main__":
    daemon.manager()
