"""The Spark session: its pure helpers, and what it refuses."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from mirrorflow.spark import spark_logs
from mirrorflow.spark.spark_session import archive_name, local_cores


def test_local_masters_name_their_cores_and_other_masters_none() -> None:
    assert local_cores("local") == 1
    assert local_cores("local[3]") == 3
    assert local_cores("local[4,2]") == 4
    assert local_cores("local[*]") == (os.cpu_count() or 1)
    assert local_cores("spark://host:7077") is None
    assert local_cores("yarn") is None


def test_the_jvm_stderr_keeps_every_line_but_the_start_up_notices(tmp_path: Path) -> None:
    jvm = [b"WARNING: Using incubator modules: jdk.incubator.vector\n", b"26/11/25 WARN Utils: real warning\n",
           b"Exception in thread \"main\" java.lang.OutOfMemoryError\xff\n", b"no newline at the end"]
    with open(tmp_path / "stderr", "wb") as out:
        spark_logs.forward_stderr(jvm, out.fileno())
    assert (tmp_path / "stderr").read_bytes() == (b"26/11/25 WARN Utils: real warning\n"
                                                  b"Exception in thread \"main\" java.lang.OutOfMemoryError\xff\n"
                                                  b"no newline at the end")


DAEMON_FRAMES = [b"Traceback (most recent call last):\n",
                 b'  File "/x/pyspark/python/lib/pyspark.zip/pyspark/daemon.py", line 262, in manager\n',
                 b'  File "/x/pyspark/python/lib/pyspark.zip/pyspark/daemon.py", line 95, in worker\n']


def test_a_spark_daemons_closed_socket_at_a_stop_is_one_line_and_other_tracebacks_stay_whole(tmp_path: Path) -> None:
    other = [b"Traceback (most recent call last):\n", b'  File "/work/plugins/mirrorflow/spark/copier.py", line 9\n',
             b"    consumer.consume()\n", b"BrokenPipeError: [Errno 32] Broken pipe\n"]
    jvm = [b"before\n", *DAEMON_FRAMES, b"BrokenPipeError: [Errno 32] Broken pipe\n", b"26/11/28 WARN after\n",
           *DAEMON_FRAMES, b"ValueError: not a socket\n", *other, *DAEMON_FRAMES[:2]]
    with open(tmp_path / "stderr", "wb") as out:
        spark_logs.forward_stderr(jvm, out.fileno())
    assert (tmp_path / "stderr").read_bytes() == b"".join([
        b"before\n", b"mirrorflow: a Spark Python process's connection to the JVM closed as Spark stopped "
        b"(BrokenPipeError: [Errno 32] Broken pipe)\n", b"26/11/28 WARN after\n",
        *DAEMON_FRAMES, b"ValueError: not a socket\n", *other, *DAEMON_FRAMES[:2]])


def test_the_jvm_stderr_is_read_to_its_end_when_the_copy_cannot_be_written() -> None:
    lines = iter([b"one\n", b"two\n", b"three\n"])
    spark_logs.forward_stderr(lines, 987654)  # not an open descriptor
    assert next(lines, None) is None


def test_the_daemon_drops_sparks_copies_of_installed_packages_and_jars_without_python(tmp_path: Path) -> None:
    from mirrorflow.spark.spark_daemon import redundant_archives

    site = tmp_path / "site-packages"
    for package in ("pyspark", "py4j"):
        (site / package).mkdir(parents=True)
        (site / package / "__init__.py").write_text("")
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    archives = {name: lib / name for name in ("pyspark.zip", "py4j-0.10.9.9-src.zip", "other.zip", "core.jar",
                                             "python.jar")}
    for name, path in archives.items():
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("other/x.py" if name in ("other.zip", "python.jar") else "org/X.class", "")
    elsewhere = tmp_path / "elsewhere" / "pyspark.zip"  # a PySpark of its own: not the installed one's copy
    elsewhere.parent.mkdir()
    shutil.copy(archives["pyspark.zip"], elsewhere)
    path = [*map(str, archives.values()), str(elsewhere), str(site)]
    assert redundant_archives(path) == [str(archives[n]) for n in ("pyspark.zip", "py4j-0.10.9.9-src.zip", "core.jar")]
    assert redundant_archives([str(archives["pyspark.zip"])]) == []  # nothing installed: Spark's copy is needed


def test_the_class_archives_name_changes_with_the_jdk_and_every_jar_and_with_nothing_else(tmp_path: Path) -> None:
    jdk = tmp_path / "jdk"
    (jdk / "bin").mkdir(parents=True)
    (jdk / "lib").mkdir()
    java, image = jdk / "bin" / "java", jdk / "lib" / "modules"
    java.write_bytes(b"java")
    image.write_bytes(b"modules")
    jars = [tmp_path / "a.jar", tmp_path / "b.jar"]
    for jar in jars:
        jar.write_bytes(b"jar")
    name = archive_name(java, jars)
    assert name.startswith("spark-classes-") and name.endswith(".jsa")
    assert archive_name(java, list(reversed(jars))) == name  # the classpath's order is not the archive's
    (tmp_path / "c.jar").write_bytes(b"jar")
    assert archive_name(java, [*jars, tmp_path / "c.jar"]) != name
    jars[1].write_bytes(b"a newer jar")
    assert archive_name(java, jars) != name
    newer = archive_name(java, jars)
    image.write_bytes(b"another JDK's modules")
    assert archive_name(java, jars) != newer


SPECULATION = """
import os, sys
from pyspark.sql import SparkSession
from mirrorflow.errors import ConfigError
from mirrorflow.spark import spark_session

spark = spark_session.build("speculation asked for", "local[1]")
print("built with speculation", spark.sparkContext.getConf().get("spark.speculation"), flush=True)
spark.stop()
SparkSession.builder.master("local[1]").config("spark.speculation", "true").getOrCreate()
try:
    spark_session.build("joining an application that speculates", "local[1]")
except ConfigError as exc:
    print("refused:", exc, flush=True)
"""


@pytest.mark.spark
def test_a_job_turns_spark_speculation_off_and_refuses_an_application_that_speculates() -> None:
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS": "--conf spark.speculation=true pyspark-shell"}
    out = subprocess.run([sys.executable, "-c", SPECULATION], capture_output=True, text=True, env=env, timeout=300)
    assert "built with speculation false" in out.stdout, out.stdout + out.stderr[-3000:]
    assert "refused: spark.speculation is on in the Spark application this job joined" in out.stdout, (
        out.stdout + out.stderr[-3000:])
