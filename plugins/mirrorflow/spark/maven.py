"""Jars from Maven Central, fetched with Maven itself into a project-local cache.

The Kafka broker, MirrorMaker 2 (for the benchmark) and Spark's Kafka connector all arrive this
way: a throwaway POM lists the artifacts, `mvn dependency:copy-dependencies` resolves them with their
runtime dependencies through whatever repositories the machine's Maven is set up for.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path

from mirrorflow.errors import OperationalError

KAFKA_VERSION = "4.3.1"
SPARK_VERSION = "4.2.0"
LOG4J_VERSION = "2.24.3"
SLF4J_VERSION = "2.0.17"

KAFKA_BROKER = (
    f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",
    f"org.apache.kafka:kafka-tools:{KAFKA_VERSION}",
    f"org.slf4j:slf4j-api:{SLF4J_VERSION}",
    f"org.apache.logging.log4j:log4j-slf4j2-impl:{LOG4J_VERSION}",
    f"org.apache.logging.log4j:log4j-core:{LOG4J_VERSION}",
)
MIRROR_MAKER = (
    f"org.apache.kafka:connect-mirror:{KAFKA_VERSION}",
    f"org.apache.kafka:connect-mirror-client:{KAFKA_VERSION}",
    *KAFKA_BROKER[2:],
)
MIRROR_CLIENT = (f"org.apache.kafka:connect-mirror-client:{KAFKA_VERSION}", *KAFKA_BROKER[2:])
# Maven Central carries spark-token-provider-kafka only as 4.0.0; its API is unchanged since, and
# kafka-clients comes from the connector's own dependency.
SPARK_KAFKA = (
    f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_VERSION}!org.apache.spark:spark-token-provider-kafka-0-10_2.13",
    "org.apache.spark:spark-token-provider-kafka-0-10_2.13:4.0.0!org.apache.kafka:kafka-clients",
)
# What Spark needs beside the jars PySpark ships (the rest of the tree duplicates those).
SPARK_KAFKA_JARS = ("spark-sql-kafka-0-10", "spark-token-provider-kafka-0-10", "kafka-clients", "commons-pool2")

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>mirrorflow.local</groupId><artifactId>{name}</artifactId><version>1</version>
<packaging>pom</packaging><dependencies>{deps}</dependencies></project>
"""


def fetch(name: str, artifacts: tuple[str, ...], cache: Path) -> Path:
    """A folder holding the artifacts and their runtime dependencies (fetched once, then reused)."""
    target = cache.resolve() / name
    target.mkdir(parents=True, exist_ok=True)
    with open(target / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two processes starting at once fetch once
        return _fetch_locked(target, artifacts)


def _fetch_locked(target: Path, artifacts: tuple[str, ...]) -> Path:
    done = target / ".complete"
    wanted = "\n".join(artifacts)
    if done.exists() and done.read_text() == wanted:
        return target
    if shutil.which("mvn") is None:
        raise OperationalError("Maven (mvn) is not installed: it fetches the Kafka and Spark jars "
                               "(apt-get install maven)")
    if shutil.which("java") is None:
        raise OperationalError("Java is not installed: Kafka needs Java 17 (apt-get install openjdk-17-jre-headless)")
    deps = "".join(_dependency(a) for a in artifacts)
    pom = target / "pom.xml"
    pom.write_text(_POM.format(name=target.name, deps=deps))
    lib = target / "lib"
    shutil.rmtree(lib, ignore_errors=True)
    proc = subprocess.run(
        ["mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies", "-DincludeScope=runtime",
         f"-DoutputDirectory={lib}"], capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
        raise OperationalError(f"cannot fetch {', '.join(artifacts)} from Maven Central: {tail}")
    done.write_text(wanted)
    return target


def _dependency(artifact: str) -> str:
    """`group:name:version[!group:name,...]`: the part after `!` lists transitive dependencies to leave out."""
    coordinates, _, excluded = artifact.partition("!")
    group, name, version = coordinates.split(":")
    exclusions = "".join(
        "<exclusion><groupId>{}</groupId><artifactId>{}</artifactId></exclusion>".format(*x.split(":"))
        for x in excluded.split(",") if x)
    return (f"<dependency><groupId>{group}</groupId><artifactId>{name}</artifactId><version>{version}</version>"
            f"<exclusions>{exclusions}</exclusions></dependency>")


def jars(folder: Path, prefixes: tuple[str, ...]) -> list[Path]:
    """The fetched jars whose file names start with one of the prefixes."""
    return sorted(j for j in (folder / "lib").glob("*.jar") if j.name.startswith(prefixes))


def classpath(folder: Path) -> str:
    return str(folder / "lib" / "*")
