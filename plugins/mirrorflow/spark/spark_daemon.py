"""Spark's Python daemon, with the writer's imports done before it forks any worker.

Spark forks one Python worker per concurrent task from this daemon and kills a worker that has been idle for a
minute (PythonWorkerFactory), so every micro-batch after a quiet minute ran in fresh workers that imported
pyarrow, pandas (pyarrow's `from_pylist` loads it), confluent-kafka, PySpark's worker and the writer first: 1.3 to
1.8 s a task on a quiet 2-core host, 4 to 7 s under load. A worker forked from this daemon has them already. Used
where the driver's interpreter is the workers' (a local master, `spark_session.build`).

Forking is safe only from a process with one thread (PySpark's own daemon imports nothing for that reason):
numpy's OpenBLAS and pyarrow's jemalloc start threads at import unless told not to, so they are told (the
workers inherit both settings, which cost them nothing: the writer does no linear algebra, and jemalloc purges
inline). If the imports started a thread anyway, this process becomes PySpark's plain daemon.

What the imports made is frozen out of the cycle collector before the first fork: a worker's collections would
walk (and copy, page by page) the hundreds of thousands of objects pandas and pyarrow leave, about 25 ms a task
here (a trivial Python job: 92 ms, 46 with the freeze).

Spark puts its own copies of PySpark and Py4J, as zips, first on the workers' path, and spark-core's jar (no Python
in it). Where the interpreter has the same packages installed, the daemon drops them all: a module in a zip is
compiled from source at every import (the daemon's start: 0.90 s to import `pyspark.worker` against 0.47), and each
new worker's first task re-reads every archive's directory (PySpark calls `importlib.invalidate_caches` when it adds
the task's files directory to the path): 76-81 ms on an idle host, 120-240 under load (the jar alone 50 of them),
paid by every worker Spark starts after a quiet minute.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import zipfile
from importlib.machinery import PathFinder
from pathlib import Path


def redundant_archives(path: list[str]) -> list[str]:
    """The archives on `path` the interpreter does not need: a zip of a package (named by the zip: `pyspark.zip`,
    `py4j-0.10.9.9-src.zip`) lying inside that package's copy installed in a folder on `path` (Spark's copy of the
    same release), and a jar holding no Python module (Spark 4 adds spark-core's)."""
    folders = [p for p in path if not p.endswith((".zip", ".jar"))]
    redundant = []
    for entry in path:
        if entry.endswith(".jar") and not _holds_python(entry):
            redundant.append(entry)
        elif entry.endswith(".zip"):
            spec = PathFinder.find_spec(Path(entry).name.split("-")[0].removesuffix(".zip"), folders)
            if spec is not None and spec.origin:
                installed = Path(spec.origin).parent
                if any(Path(entry).is_relative_to(p) for p in (installed, installed.parent / "pyspark")):
                    redundant.append(entry)
    return redundant


def _holds_python(archive: str) -> bool:
    try:
        with zipfile.ZipFile(archive) as zf:
            return any(n.endswith((".py", ".pyc", ".so")) for n in zf.namelist())
    except (OSError, zipfile.BadZipFile):
        return True  # unreadable: leave it to the import system, as before


def _preload() -> None:
    """Before the first fork: the path without the redundant archives, thread-free settings, the workers' imports."""
    for archive in redundant_archives(sys.path):
        sys.path.remove(archive)
        for cached in [k for k in sys.path_importer_cache if k == archive or k.startswith(archive + os.sep)]:
            del sys.path_importer_cache[cached]
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("JE_ARROW_MALLOC_CONF", "background_thread:false")
    with contextlib.suppress(ImportError):  # a missing module is imported (or reported) by the task, as before
        import pandas  # noqa: F401
        import pyarrow  # noqa: F401
        import pyspark.worker  # noqa: F401  # PySpark's daemon imports the worker's module after each fork

        import mirrorflow.spark.stream_writer  # noqa: F401


def _single_threaded() -> bool:
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False  # no way to tell: fork only from a daemon that imported nothing


if __name__ == "__main__":
    _preload()
    if not _single_threaded():
        os.execv(sys.executable, [sys.executable, "-m", "pyspark.daemon", *sys.argv[1:]])
    from pyspark import daemon

    gc.freeze()
    daemon.manager()
