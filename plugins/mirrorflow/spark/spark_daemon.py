"""Spark's Python daemon, with the writer's imports done before it forks any worker.

Spark forks one Python worker per concurrent task from this daemon and kills a worker that has been idle for a
minute (PythonWorkerFactory), so every micro-batch after a quiet minute ran in fresh workers that imported
pyarrow, pandas (pyarrow's `from_pylist` loads it), confluent-kafka and the writer first: 1.3 to 1.8 s a task on
a quiet 2-core host, 4 to 7 s under load. A worker forked from this daemon has them already. Used where the
driver's interpreter is the workers' (a local master, `spark_session.build`).

Forking is safe only from a process with one thread (PySpark's own daemon imports nothing for that reason):
numpy's OpenBLAS and pyarrow's jemalloc start threads at import unless told not to, so they are told (the
workers inherit both settings, which cost them nothing: the writer does no linear algebra, and jemalloc purges
inline). If the imports started a thread anyway, this process becomes PySpark's plain daemon.

What the imports made is frozen out of the cycle collector before the first fork: a worker's collections would
walk (and copy, page by page) the hundreds of thousands of objects pandas and pyarrow leave, about 25 ms a task
here (a trivial Python job: 92 ms, 46 with the freeze).
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("JE_ARROW_MALLOC_CONF", "background_thread:false")

with contextlib.suppress(ImportError):  # a missing module is imported (or reported) by the task, as before
    import pandas  # noqa: F401
    import pyarrow  # noqa: F401

    import mirrorflow.spark.stream_writer  # noqa: F401


def _single_threaded() -> bool:
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False  # no way to tell: fork only from a daemon that imported nothing


if __name__ == "__main__":
    if not _single_threaded():
        os.execv(sys.executable, [sys.executable, "-m", "pyspark.daemon", *sys.argv[1:]])
    from pyspark import daemon

    gc.freeze()
    daemon.manager()
