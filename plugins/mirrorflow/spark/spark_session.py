"""The Spark session a mirrorflow job runs in, with Spark's Kafka connector on its classpath."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from pathlib import Path

from pyspark.sql import SparkSession

from mirrorflow.errors import ConfigError
from mirrorflow.model import paths
from mirrorflow.model.config import Cluster
from mirrorflow.spark import maven, spark_logs

# Options Spark's Kafka source refuses or owns; a cluster's consumer settings pass on without them.
_SPARK_OWNED = {"group.id", "auto.offset.reset", "key.deserializer", "value.deserializer",
                "enable.auto.commit", "interceptor.classes", "group.instance.id"}


def kafka_jars() -> list[Path]:
    """Spark's Kafka connector and what it needs beyond PySpark's own jars (fetched once with Maven)."""
    return maven.jars(maven.fetch("spark-kafka", maven.SPARK_KAFKA, paths.jar_cache()), maven.SPARK_KAFKA_JARS)


def kafka_options(cluster: Cluster, **overrides: str) -> dict[str, str]:
    """Spark Kafka source options reaching `cluster` with its consumer settings (`kafka.` prefixed)."""
    java = cluster.client_config("consumer")
    options = {f"kafka.{k}": v for k, v in java.items() if k not in _SPARK_OWNED}
    options.update({f"kafka.{k}": v for k, v in overrides.items()})
    return options


def local_cores(master: str) -> int | None:
    """The cores a `local`, `local[N]`, `local[*]` or `local[N,F]` master runs tasks on; None for other masters."""
    match = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\d+)?\])?", master.strip())
    if match is None:
        return None
    cores = match.group(1)
    if cores is None:
        return 1
    return (os.cpu_count() or 1) if cores == "*" else int(cores)


def under_spark_submit() -> bool:
    # spark-submit's Python runner hands the driver an existing JVM through these variables.
    return "PYSPARK_GATEWAY_PORT" in os.environ


def archive_name(java: Path, jars: list[Path]) -> str:
    """The class-data archive's file name for a JVM of `java` with `jars` on its classpath: it names the JDK's
    binary and image and every jar (name, size, time), so a different JDK or jar set looks for another archive and,
    finding none, starts without one."""
    java = java.resolve()

    def stamp(p: Path) -> str:
        if not p.exists():
            return str(p)
        st = p.stat()
        return f"{p}:{st.st_size}:{st.st_mtime_ns}"

    stamps = [java, java.parent.parent / "lib" / "modules", *sorted(jars)]
    digest = hashlib.sha1("\n".join(map(stamp, stamps)).encode()).hexdigest()
    return f"spark-classes-{digest[:16]}.jsa"


def class_archive(extra_jars: list[Path] | None = None) -> Path | None:
    """Where a local session's JVM finds the classes Spark loads at start-up already parsed and verified (a dynamic
    class-data-sharing archive, `make setup`: spark/class_archive): 3 to 5 of the 9 to 12 CPU seconds a local
    session with one Python job took to start here. `extra_jars`: the session's `spark.jars` (the Kafka connector's
    by default). None without a `java` on the path."""
    import pyspark

    java = shutil.which("java")
    if java is None:
        return None
    jars = [*(Path(pyspark.__file__).parent / "jars").glob("*.jar"),
            *(kafka_jars() if extra_jars is None else extra_jars)]
    return paths.jar_cache() / archive_name(Path(java), jars)


def build(app_name: str, master: str = "local[*]", driver_memory: str = "1g", records_in_jvm: bool = True,
          archive_classes_to: Path | None = None
          ) -> SparkSession:
    """A session for one job; under spark-submit, the one spark-submit configured (master, jars). Without
    `records_in_jvm` (the stream: its records stay in the Python workers' librdkafka) a local JVM only plans and
    schedules, and compiles with C1 alone: C2 compiling Spark's planner took about 60 % of the JVM's CPU in the
    stream's first minute (per-thread CPU in the plain bench), for code that never runs a record."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    options = {"spark.ui.showConsoleProgress": "false",
               "spark.sql.shuffle.partitions": "2",
               # Spark's Kafka source drops a partition's consumer after 5 idle minutes; making a new one costs a
               # quarter to most of a second per partition, paid by the first micro-batch after a quiet spell.
               "spark.kafka.consumer.cache.timeout": "1h",
               "spark.redaction.regex": "(?i)secret|password|token|access[.]?key|jaas",
               # A speculative attempt of a slow copy or backfill task writes its ranges a second time, beside the
               # first attempt: off for every job, whatever spark-submit or spark-defaults.conf says.
               "spark.speculation": "false",
               # A task's hand-over to its Python worker over TCP waited about 45 ms for delayed ACKs (a trivial
               # Python job: 105 ms over TCP, 61 over a Unix socket, here): a micro-batch pays it once per task.
               "spark.python.unix.domain.socket.enabled": "true"}
    if not under_spark_submit():
        jars = kafka_jars()
        options |= {"spark.master": master, "spark.jars": ",".join(str(j) for j in jars),
                    "spark.driver.memory": driver_memory, "spark.ui.enabled": "false"}
        if master.startswith("local"):  # workers run this interpreter, so they can fork from a warm daemon
            archive = None if archive_classes_to else class_archive(jars)
            sharing = (f" -XX:ArchiveClassesAtExit={archive_classes_to} -Xlog:cds=off" if archive_classes_to
                       else f" -XX:SharedArchiveFile={archive}" if archive is not None and archive.exists() else "")
            options |= {"spark.python.daemon.module": "mirrorflow.spark.spark_daemon",
                        "spark.driver.extraJavaOptions": spark_logs.LOG4J_OPTION + sharing + (
                            "" if records_in_jvm else " -XX:TieredStopAtLevel=1")}
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # else a warning per job on a loopback hostname
            _launch_jvm(options)
    builder = SparkSession.builder.appName(app_name)
    for key, value in options.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if spark.sparkContext.getConf().get("spark.speculation", "false").strip().lower() == "true":
        raise ConfigError("spark.speculation is on in the Spark application this job joined: a speculative attempt "
                          "of a copy task writes its records twice; start the job with spark.speculation=false")
    spark.sparkContext.setLogLevel("WARN")
    _quiet(spark, "ProcessingTimeExecutor")  # "falling behind" on every batch longer than the trigger
    if not master.startswith("local"):
        spark.sparkContext.addPyFile(str(package_zip()))
    return spark


def _launch_jvm(options: dict[str, str]) -> None:
    """Start this process's Spark JVM (once) with its stderr passed through `spark_logs.forward_stderr`, which
    drops the notices a healthy JVM prints at start-up."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    conf = SparkConf(loadDefaults=False).setAll(list(options.items()))
    gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})  # type: ignore[no-untyped-call]
    # Where the JVM's stderr went when it inherited it: this process's stderr at launch.
    threading.Thread(target=spark_logs.forward_stderr, args=(gateway.proc.stderr, os.dup(2)), daemon=True,
                     name="spark-jvm-stderr").start()
    SparkContext._ensure_initialized(gateway=gateway)


def warm_python_workers(spark: SparkSession, tasks: int) -> None:
    """Start `tasks` Python workers (and their daemon) now, so that the first micro-batch finds them running
    instead of paying for their start-up; they stay for the next tasks while less than a minute idle."""
    spark.sparkContext.parallelize(range(tasks), tasks).count()  # counted in Python workers, as the copier runs


def _quiet(spark: SparkSession, logger: str) -> None:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    for package in ("org.apache.spark.sql.execution.streaming", "org.apache.spark.sql.execution.streaming.runtime"):
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
            f"{package}.{logger}", jvm.org.apache.logging.log4j.Level.ERROR)


def package_zip() -> Path:
    """The mirrorflow package as a zip, for executors that do not have it installed."""
    package = Path(__file__).resolve().parent.parent
    out = Path(tempfile.mkdtemp(prefix="mirrorflow-")) / "mirrorflow.zip"
    with zipfile.ZipFile(out, "w") as zf:
        for f in package.rglob("*.py"):
            zf.write(f, f"mirrorflow/{f.relative_to(package)}")
    return out
