"""`python -m mirrorflow.spark.class_archive` (`make setup`): write the class-data archive local Spark sessions map
at start-up (spark_session.class_archive), once per JDK and jar set.

A local session is started with `-XX:ArchiveClassesAtExit`, runs what a stream and a batch job run first (a Python
job, a query with a shuffle, two micro-batches of a streaming query with foreachBatch), and its JVM writes the
classes it loaded when it exits. The archive is written beside the jars under a temporary name and renamed, so a
session never maps half an archive. Without it sessions start as before: a failure here says so in one line and
does not fail the setup.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from mirrorflow.spark import spark_session


def main() -> int:
    archive = spark_session.class_archive()
    if archive is None:
        print("class archive: no java on the path; Spark sessions start without one")
        return 0
    if archive.exists():
        print(f"class archive: {archive} (there already)")
        return 0
    archive.parent.mkdir(parents=True, exist_ok=True)
    staged = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")
    began = time.monotonic()
    try:
        _run_and_exit(staged)
        if not staged.exists() or staged.stat().st_size == 0:
            print(f"class archive: the JVM wrote none to {staged}; Spark sessions start without one")
            return 0
        staged.replace(archive)
    finally:
        staged.unlink(missing_ok=True)
    print(f"class archive: {archive} ({archive.stat().st_size >> 20} MiB, {time.monotonic() - began:.0f} s)")
    return 0


def _run_and_exit(staged: Path) -> None:
    from pyspark import SparkContext

    spark = spark_session.build("mirrorflow class archive", "local[2]", "1g", records_in_jvm=False,
                                archive_classes_to=staged)
    spark.sparkContext.setLogLevel("ERROR")  # stopping the streaming query mid-batch is expected here
    spark.sparkContext.range(2, numSlices=2).mapPartitions(lambda rows: [sum(1 for _ in rows)]).collect()
    spark.range(1000).selectExpr("id % 7 AS k").groupBy("k").count().collect()
    with tempfile.TemporaryDirectory(prefix="mirrorflow-class-archive-") as checkpoint:
        batches: list[int] = []
        query = (spark.readStream.format("rate").option("rowsPerSecond", 10).load().writeStream
                 .foreachBatch(lambda df, batch_id: batches.append(batch_id))
                 .option("checkpointLocation", checkpoint).trigger(processingTime="100 milliseconds").start())
        deadline = time.monotonic() + 60
        while len(batches) < 2 and time.monotonic() < deadline and query.isActive:
            time.sleep(0.1)
        query.stop()
    spark.stop()
    # The JVM writes the archive as it exits, which it does when its standard input closes.
    gateway = SparkContext._gateway
    assert gateway is not None
    gateway.shutdown()
    gateway.proc.stdin.close()
    gateway.proc.wait(120)


if __name__ == "__main__":
    sys.exit(main())
